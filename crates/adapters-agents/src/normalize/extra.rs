//! Keeping what a decoder does not map: every field of a line (a CLI's
//! stdout line, an HTTP API's chunk or body) that becomes an event, and
//! that no field of the event holds, goes into the event's `extra`
//! ([`domain::event::Extra`]) under its JSON Pointer in the line, its value
//! verbatim. A CLI or API version that adds a field loses nothing.
//!
//! Each provider declares, per line type, the fields it maps ([`Known`]):
//! a wire type's fields, whole or read further. [`unmapped`] walks a line
//! against that declaration. It only compares keys: with nothing unmapped
//! it allocates nothing and copies nothing, so a line of the version the
//! decoder was written for costs a scan of its keys; only an unmapped
//! field's value is copied, never the line.

use application::ports::{AgentMessage, ChatEvent};
use domain::event::Extra;
use serde_json::Value;

use super::Decoded;

/// The fields of one object a decoder maps.
#[derive(Debug, Clone, Copy)]
pub enum Known {
    /// The whole value is mapped (a leaf, or an object read whole).
    All,
    /// Only these fields are mapped, each whole or read further; any other
    /// field of the object is unmapped.
    Fields(&'static [(&'static str, Known)]),
    /// Each value of an object whose keys are data (models by name), or
    /// each element of an array, is read as this.
    Each(&'static Known),
}

/// Shorthand for a field mapped whole.
pub const ALL: Known = Known::All;

/// A field's place in its line, built up the walk: its pointer is written
/// only when an unmapped field is found.
#[derive(Clone, Copy)]
pub struct At<'a> {
    parent: Option<&'a At<'a>>,
    segment: Segment<'a>,
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

impl<'a> At<'a> {
    /// The line itself.
    pub const ROOT: At<'static> = At {
        parent: None,
        segment: Segment::Root,
    };

    /// The field `key` of this object.
    pub fn key(&'a self, key: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            segment: Segment::Key(key),
        }
    }

    /// The element `index` of this array.
    pub fn index(&'a self, index: usize) -> At<'a> {
        At {
            parent: Some(self),
            segment: Segment::Index(index),
        }
    }

    /// The JSON Pointer (RFC 6901) of this place.
    pub fn pointer(&self) -> String {
        let mut out = match self.parent {
            Some(parent) => parent.pointer(),
            None => String::new(),
        };
        match self.segment {
            Segment::Root => {}
            Segment::Key(key) => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Index(i) => {
                out.push('/');
                out.push_str(&i.to_string());
            }
        }
        out
    }
}

/// Adds to `out` the fields of `value` (found at `at` in its line) that
/// `known` does not map, each under its pointer. A value that is not an
/// object where fields were expected is the wire type's business (it does
/// not parse, and is kept as a warning): nothing is added for it.
pub fn unmapped(value: &Value, known: Known, at: At<'_>, out: &mut Extra) {
    let fields = match (known, value) {
        (Known::Fields(fields), Value::Object(map)) => (fields, map),
        (Known::Each(inner), Value::Object(map)) => {
            for (key, field) in map {
                unmapped(field, *inner, at.key(key), out);
            }
            return;
        }
        (Known::Each(inner), Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                unmapped(item, *inner, at.index(i), out);
            }
            return;
        }
        _ => return,
    };
    let (fields, map) = fields;
    for (key, field) in map {
        match fields.iter().find(|(name, _)| name == key) {
            Some((_, Known::All)) => {}
            Some((_, inner)) => unmapped(field, *inner, at.key(key), out),
            None => {
                out.insert(at.key(key).pointer(), field.clone());
            }
        }
    }
}

/// The unmapped fields of a whole line.
pub fn of_line(line: &Value, known: Known) -> Extra {
    let mut out = Extra::new();
    unmapped(line, known, At::ROOT, &mut out);
    out
}

/// `decoded` (what one line became) with `extra`, the line's unmapped
/// fields, sent just before the first message that records the line's
/// content: a text, thinking, tool use or tool, the session or the
/// result ([`AgentMessage::Extra`]). Warnings and reported errors keep
/// their whole line already; a line that became none of those (an echo,
/// a bookkeeping line) has no event to carry them.
pub fn before_first(mut decoded: Vec<Decoded>, extra: Extra) -> Vec<Decoded> {
    insert_from(&mut decoded, 0, extra);
    decoded
}

/// Sends `extra` just before the first message of `decoded[from..]` that
/// records content (see [`before_first`]); whether there was one.
pub fn insert_from(decoded: &mut Vec<Decoded>, from: usize, extra: Extra) -> bool {
    let Some(at) = decoded
        .iter()
        .skip(from)
        .position(|d| matches!(d, Ok(m) if carries_extra(m)))
    else {
        return false;
    };
    if !extra.is_empty() {
        decoded.insert(from + at, Ok(AgentMessage::Extra(extra)));
    }
    true
}

/// Whether `message`'s event keeps an `extra`.
pub fn carries_extra(message: &AgentMessage) -> bool {
    matches!(
        message,
        AgentMessage::Session { .. }
            | AgentMessage::ThinkingDelta { .. }
            | AgentMessage::Thinking { .. }
            | AgentMessage::TextDelta { .. }
            | AgentMessage::Text { .. }
            | AgentMessage::ToolUse { .. }
            | AgentMessage::Tool { .. }
            | AgentMessage::Completed(_)
    )
}

/// What an HTTP turn's chunks hold unmapped, on its way to an event. A
/// chunk that becomes an event sends its own fields with it; one that
/// becomes none (a tool call's fragment, the usage chunk, the message's
/// start) hands them on to the next event the turn makes: its end at the
/// latest, so nothing a turn's chunks held is lost.
#[derive(Debug, Default)]
pub struct Pending(Extra);

impl Pending {
    /// `events` (what one chunk became) with `extra` (what the chunk holds
    /// unmapped) and whatever earlier chunks handed on, sent just before
    /// the first event that records content or ends the turn. Where two
    /// chunks name the same pointer, the later chunk's own value is kept
    /// with its event and the earlier one's is not repeated.
    pub fn place(&mut self, mut events: Vec<ChatEvent>, mut extra: Extra) -> Vec<ChatEvent> {
        if !self.0.is_empty() {
            merge(&mut extra, std::mem::take(&mut self.0));
        }
        if extra.is_empty() {
            return events;
        }
        match events.iter().position(|e| {
            matches!(
                e,
                ChatEvent::TextDelta(_)
                    | ChatEvent::ThinkingDelta(_)
                    | ChatEvent::ThinkingDone { .. }
                    | ChatEvent::ToolCall(_)
                    | ChatEvent::End(_)
            )
        }) {
            Some(at) => events.insert(at, ChatEvent::Extra(extra)),
            None => self.0 = extra,
        }
        events
    }
}

/// Adds `more` to `kept`; where both name a pointer, `kept`'s stays.
pub fn merge(kept: &mut Extra, more: Extra) {
    for (pointer, value) in more {
        kept.entry(pointer).or_insert(value);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const MESSAGE: Known = Known::Fields(&[("id", ALL), ("content", ALL)]);
    const LINE: Known = Known::Fields(&[("type", ALL), ("message", MESSAGE)]);

    /// Every unmapped field, at any depth, under its pointer, verbatim;
    /// mapped ones and fields read whole are left out.
    #[test]
    fn unmapped_fields_are_kept_under_their_pointer() {
        let line = json!({
            "type": "assistant",
            "uuid": "u1",
            "message": {"id": "m1", "content": [{"x": 1}], "usage": {"n": 2}, "a/b~c": null},
        });
        assert_eq!(
            Value::Object(of_line(&line, LINE)),
            json!({"/uuid": "u1", "/message/usage": {"n": 2}, "/message/a~1b~0c": null})
        );
        let plain = json!({"type": "assistant", "message": {"id": "m1", "content": "hi"}});
        assert!(of_line(&plain, LINE).is_empty());
        let at = At::ROOT;
        let block = at.key("message");
        let first = block.index(0);
        assert_eq!(first.pointer(), "/message/0");
    }

    /// The fields go before the first message that records the line;
    /// nothing is added when there are none.
    #[test]
    fn they_go_before_the_first_message_that_records_the_line() {
        let warning = Ok(AgentMessage::Warning {
            message: "w".into(),
            details: None,
        });
        let text = Ok(AgentMessage::Text {
            content: "hi".into(),
        });
        let extra: Extra = [("/uuid".to_owned(), json!("u1"))].into_iter().collect();
        let out = before_first(vec![warning.clone(), text.clone()], extra.clone());
        assert!(matches!(&out[1], Ok(AgentMessage::Extra(e)) if *e == extra));
        assert_eq!(out.len(), 3);
        assert_eq!(before_first(vec![text], Extra::new()).len(), 1);
        assert_eq!(before_first(vec![warning], extra).len(), 1);
    }
}
