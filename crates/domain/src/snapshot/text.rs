//! [`JsonText`]: a JSON value held as its text, parsed when it is read.
//!
//! A finished node's output (`{data, metadata}`) stays in the state for the
//! rest of the run, but only an expression that names the node, the run's
//! final output or a reader of the snapshot ever looks inside it. As a
//! `serde_json::Value` tree each small object costs a B-tree node of its
//! own (~3.8 KB an output in a chain of agents); as its text it costs its
//! bytes, and loading a snapshot skips over it instead of building it.
//! On disk nothing changes: the text is written in place, as the value was.

use std::cell::Cell;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

thread_local! {
    /// Parses of a [`JsonText`] on this thread (see [`JsonText::parses`]).
    static PARSES: Cell<u64> = const { Cell::new(0) };
}

/// A JSON value kept as its (valid, compact when awr wrote it) text.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// The text of `value`.
    pub fn from_value(value: &Value) -> Self {
        // Serializing a `Value` cannot fail: its keys are strings and its
        // numbers finite. Should it ever, `null` is what a reader of a
        // missing output sees too.
        match serde_json::value::to_raw_value(value) {
            Ok(raw) => Self(raw),
            Err(_) => Self(RawValue::NULL.to_owned()),
        }
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The value, parsed.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        count_parse();
        serde_json::from_str(self.0.get())
    }

    /// Its `data` field (`null` when it has none, or is not an object), the
    /// rest skipped without being built: what expressions and the next
    /// node read of an output.
    pub fn data(&self) -> Result<Value, serde_json::Error> {
        count_parse();
        let mut de = serde_json::Deserializer::from_str(self.0.get());
        let data = de.deserialize_any(DataField)?;
        de.end()?;
        Ok(data)
    }

    /// How many times a [`JsonText`] was parsed on this thread so far: lets
    /// a test check that a step reads only the outputs it needs.
    pub fn parses() -> u64 {
        PARSES.with(Cell::get)
    }
}

fn count_parse() {
    PARSES.with(|n| n.set(n.get() + 1));
}

/// The value of an object's `data` key (the last one, as a JSON object keeps
/// it), or `null` for anything else.
struct DataField;

impl<'de> Visitor<'de> for DataField {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Value, M::Error> {
        let mut data = Value::Null;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "data" {
                data = map.next_value()?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(data)
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Value, S::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

impl From<&Value> for JsonText {
    fn from(value: &Value) -> Self {
        Self::from_value(value)
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> Self {
        Self::from_value(&value)
    }
}

/// Equal when they hold the same JSON: the same text, or texts that parse
/// to the same value (a snapshot another writer formatted differently).
impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
            || matches!(
                (
                    serde_json::from_str::<Value>(self.as_str()),
                    serde_json::from_str::<Value>(other.as_str()),
                ),
                (Ok(a), Ok(b)) if a == b
            )
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    /// Checks the text is JSON and keeps it; builds nothing.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(Self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_reads_the_data_field_alone() {
        let text = JsonText::from_value(&json!({"metadata": {"a": [1, 2]}, "data": {"x": 1}}));
        assert_eq!(text.data().unwrap(), json!({"x": 1}));
        for other in [
            json!("s"),
            json!(3),
            json!([1, {"data": 2}]),
            json!(null),
            json!({}),
        ] {
            assert_eq!(JsonText::from_value(&other).data().unwrap(), Value::Null);
        }
    }

    #[test]
    fn written_and_read_as_the_value_it_holds() {
        let value = json!({"data": "d", "metadata": {"agent_name": "w", "n": 1.5}});
        let text = JsonText::from_value(&value);
        assert_eq!(serde_json::to_string(&text).unwrap(), value.to_string());
        let back: JsonText =
            serde_json::from_str(r#"{ "data" : "d","metadata":{"n":1.5,"agent_name":"w"}}"#)
                .unwrap();
        assert_eq!(back, text, "equal as JSON, whatever the formatting");
        assert_eq!(back.to_value().unwrap(), value);
        assert_eq!(serde_json::to_value(&back).unwrap(), value);
        assert!(serde_json::from_str::<JsonText>("{\"data\": ").is_err());
    }

    #[test]
    fn parses_are_counted_on_this_thread() {
        let text = JsonText::from_value(&json!({"data": 1}));
        let before = JsonText::parses();
        text.data().unwrap();
        text.to_value().unwrap();
        assert_eq!(JsonText::parses() - before, 2);
    }
}
