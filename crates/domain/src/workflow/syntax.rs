//! The text level of reading a workflow file: what the YAML and JSON readers
//! refuse, with a line and a column, before any rule of the graph is checked.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::WorkflowError;

/// Serde's maps keep the last of duplicate keys; a second agent with the same
/// name would silently replace the first, so refuse it.
pub(super) fn unique_keys<'de, D, V>(de: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct Unique<V>(PhantomData<V>);
    impl<'de, V: Deserialize<'de>> Visitor<'de> for Unique<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping of agent names to agents")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!("duplicate agent `{key}`")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    de.deserialize_map(Unique(PhantomData))
}

/// A JSON value read strictly: serde_json's own reader keeps the last of
/// duplicate keys and turns YAML's `.nan` and `.inf` into `null`, so a
/// run's input written in the file would silently be another value.
pub(super) fn strict_value<'de, D>(de: D) -> Result<Option<serde_json::Value>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Some(de.deserialize_any(Strict)?))
}

/// JSON text read as [`strict_value`] reads a file's `input:`: a
/// duplicate key is refused, not silently the last one kept.
pub(super) fn strict_json(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde::de::DeserializeSeed::deserialize(Strict, &mut de)?;
    de.end()?;
    Ok(value)
}

/// The visitor of [`strict_value`], at every level of the value.
struct Strict;

impl<'de> serde::de::DeserializeSeed<'de> for Strict {
    type Value = serde_json::Value;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is no JSON number")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(Strict)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(Strict)?;
            out.insert(key, value);
        }
        Ok(serde_json::Value::Object(out))
    }
}

/// How deep `[` and `{` may nest in a YAML file. The YAML reader refuses
/// anything deeper than 128 levels anyway, but only after scanning the whole
/// file, in time that grows with the square of the depth (minutes for a
/// file of 100,000 `[`): refused first, here.
const MAX_FLOW_NESTING: usize = 128;

/// Refuses YAML whose flow collections nest deeper than [`MAX_FLOW_NESTING`].
/// Quoted scalars and comments are skipped; a bracket in a block scalar
/// counts, which only matters for 128 unclosed ones.
pub(super) fn check_flow_nesting(src: &str) -> Result<(), WorkflowError> {
    let (mut depth, mut line, mut column) = (0usize, 1usize, 0usize);
    let mut chars = src.chars().peekable();
    let mut previous = '\n';
    while let Some(c) = chars.next() {
        column += 1;
        match c {
            '\n' => {
                line += 1;
                column = 0;
            }
            '#' if previous.is_whitespace() => while chars.next_if(|&n| n != '\n').is_some() {},
            '\'' | '"' if !previous.is_alphanumeric() => {
                let mut escaped = false;
                while let Some(n) = chars.next() {
                    column += 1;
                    if n == '\n' {
                        line += 1;
                        column = 0;
                    }
                    match n {
                        '\\' if c == '"' && !escaped => escaped = true,
                        n if n == c && !escaped => {
                            // `''` inside single quotes is a quote.
                            if c == '\'' && chars.next_if_eq(&'\'').is_some() {
                                column += 1;
                                continue;
                            }
                            break;
                        }
                        _ => escaped = false,
                    }
                }
            }
            '[' | '{' => {
                depth += 1;
                if depth > MAX_FLOW_NESTING {
                    return Err(WorkflowError::Parse {
                        line: Some(line),
                        column: Some(column),
                        message: format!("`[` and `{{` nest deeper than {MAX_FLOW_NESTING} levels"),
                    });
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        previous = c;
    }
    Ok(())
}

/// A parser's message, cut in the middle when long: serde quotes the value it
/// did not expect, which may be the whole file; what it expected is at the end.
fn bounded(message: String) -> String {
    const HEAD: usize = 80;
    const TAIL: usize = 160;
    let chars = message.chars().count();
    if chars <= HEAD + TAIL + 20 {
        return message;
    }
    let head: String = message.chars().take(HEAD).collect();
    let tail: String = message.chars().skip(chars - TAIL).collect();
    format!(
        "{head} … ({} characters left out) … {tail}",
        chars - HEAD - TAIL
    )
}

/// The line where a second YAML document starts in `text`: the first
/// `---` after content (a first one before any content opens the only
/// document).
fn second_document(text: &str) -> Option<usize> {
    let mut content = false;
    for (n, line) in text.lines().enumerate() {
        let marker = line == "---" || line.starts_with("--- ");
        if marker && content {
            return Some(n + 1);
        }
        let blank = line.trim().is_empty() || line.trim_start().starts_with('#');
        content |= !marker && !blank && !line.starts_with('%');
    }
    None
}

/// The YAML reader's error on `text`, its position as `line`/`column`.
pub(super) fn yaml_error_in(text: &str, e: yaml_serde::Error) -> WorkflowError {
    if e.location().is_none()
        && e.to_string().contains("more than one document")
        && let Some(line) = second_document(text)
    {
        return WorkflowError::Parse {
            line: Some(line),
            column: Some(1),
            message: "a second YAML document starts here; a workflow file holds one".into(),
        };
    }
    yaml_error(e)
}

fn yaml_error(e: yaml_serde::Error) -> WorkflowError {
    let loc = e.location();
    let message = bounded(e.to_string());
    match loc {
        // The position moves into `line`/`column`; drop its copy from the text.
        Some(l) => WorkflowError::Parse {
            message: message.replacen(
                &format!(" at line {} column {}", l.line(), l.column()),
                "",
                1,
            ),
            line: Some(l.line()),
            column: Some(l.column()),
        },
        None => WorkflowError::Parse {
            line: None,
            column: None,
            message,
        },
    }
}

pub(super) fn json_error(path: String, e: &serde_json::Error) -> WorkflowError {
    let mut message = bounded(e.to_string());
    let known = e.line() != 0;
    if known {
        message = message.replacen(
            &format!(" at line {} column {}", e.line(), e.column()),
            "",
            1,
        );
    }
    // serde_path_to_error says `.` for the root and `?` where it lost track.
    if !path.is_empty() && path != "." && path != "?" {
        message = format!("{path}: {message}");
    }
    WorkflowError::Parse {
        line: known.then_some(e.line()),
        column: known.then_some(e.column()),
        message,
    }
}
