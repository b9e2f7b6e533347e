//! One event as one log line: parsing it (unknown types and fields kept whole)
//! and writing it back, so a round trip loses nothing.

use std::borrow::Cow;

use serde::de::value::MapAccessDeserializer;
use serde::de::{
    DeserializeSeed, EnumAccess, Error as _, IntoDeserializer, MapAccess, VariantAccess, Visitor,
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{ByName, EventKind, KNOWN_TYPES, RuntimeEvent, keys};
use crate::ids::{NodeId, Offset};
use crate::json_out::{write_plain, write_str};

/// Why a line is not an event.
#[derive(Debug, thiserror::Error)]
pub enum EventParseError {
    /// Not JSON, or not an object.
    #[error("not a JSON object: {0}")]
    Json(#[from] serde_json::Error),
    /// The envelope is incomplete or malformed.
    #[error("bad envelope field `{field}`: {message}")]
    Envelope {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A known `type` whose fields do not match it.
    #[error("bad `{type_name}` event: {message}")]
    Body {
        /// The `type`.
        type_name: String,
        /// What serde said.
        message: String,
    },
}

const ENVELOPE: [&str; 6] = ["id", "offset", "timestamp", "runId", "nodeId", "nodeRunId"];

impl RuntimeEvent {
    /// Parses one log line. Unknown types are kept as [`EventKind::Unknown`],
    /// and fields a known type does not have are kept in `extra`.
    ///
    /// The line is scanned once into its fields' raw text (nothing is
    /// built); the envelope and the kind are then deserialized from those
    /// slices. A `Value` tree first would double the cost of reading a log,
    /// which a resume, a follower and a replay all pay.
    pub fn from_json(line: &[u8]) -> Result<Self, EventParseError> {
        // The line is checked to be UTF-8 once, then read as text: read as
        // bytes, serde_json checks every string and raw value again.
        let Fields(fields) = match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str(text)?,
            // Not text: the byte reader says where, and why.
            Err(_) => serde_json::from_slice(line)?,
        };
        let field = |name: &str| fields.iter().rev().find(|(k, _)| k == name).map(|f| f.1);
        fn envelope<'a, T: Deserialize<'a>>(
            raw: Option<&'a RawValue>,
            field: &'static str,
        ) -> Result<T, EventParseError> {
            let text = raw.map_or("null", RawValue::get);
            serde_json::from_str(text).map_err(|e| EventParseError::Envelope {
                field,
                message: e.to_string(),
            })
        }
        // The envelope's usual forms (a string without escapes, a number)
        // are read straight from the line's text; anything else, errors
        // included, takes the general reader above.
        fn quick<'a, T: Deserialize<'a>>(
            raw: Option<&'a RawValue>,
            field: &'static str,
            parse: impl FnOnce(&'a str) -> Option<T>,
        ) -> Result<T, EventParseError> {
            match raw.map(RawValue::get).and_then(parse) {
                Some(value) => Ok(value),
                None => envelope(raw, field),
            }
        }
        let id = quick(field("id"), "id", |t| plain(t).map(str::to_owned))?;
        let offset = quick(field("offset"), "offset", |t| {
            t.parse().ok().and_then(|n| Offset::new(n).ok())
        })?;
        let timestamp = quick(field("timestamp"), "timestamp", |t| plain(t)?.parse().ok())?;
        let run_id = quick(field("runId"), "runId", |t| plain(t)?.parse().ok())?;
        let node_id = quick(field("nodeId"), "nodeId", |t| {
            NodeId::parse(plain(t)?).ok().map(Some)
        })?;
        let node_run_id = quick(field("nodeRunId"), "nodeRunId", |t| {
            plain(t)?.parse().ok().map(Some)
        })?;
        let Some(type_name) =
            field("type").and_then(|t| serde_json::from_str::<String>(t.get()).ok())
        else {
            return Err(EventParseError::Envelope {
                field: "type",
                message: "missing or not a string".into(),
            });
        };
        // The body: every field but the envelope, each once (the last of a
        // repeated name, as a JSON object keeps it).
        let body = fields.iter().enumerate().filter(|(i, (k, _))| {
            !ENVELOPE.contains(&k.as_ref()) && !fields[i + 1..].iter().any(|(later, _)| later == k)
        });
        let (kind, extra) = if KNOWN_TYPES.contains(&type_name.as_str()) {
            let body_fields = body
                .clone()
                .filter(|(_, (k, _))| k != "type")
                .map(|(_, (k, v))| (k.as_ref(), *v));
            let named = Named {
                name: &type_name,
                fields: body_fields,
            };
            let kind = ByName::deserialize(named).map_err(|e: serde_json::Error| {
                EventParseError::Body {
                    type_name: type_name.clone(),
                    message: e.to_string(),
                }
            })?;
            // Whatever the kind did not take is a newer writer's field: keep it.
            let mut taken = keys::Keys::default();
            let mut extra = Map::new();
            if kind.serialize(&mut taken).is_ok() {
                for (_, (k, v)) in body.filter(|(_, (k, _))| !taken.0.contains(&k.as_ref())) {
                    extra.insert(k.to_string(), raw_value(v)?);
                }
            }
            (kind, extra)
        } else {
            let mut raw = Map::new();
            for (_, (k, v)) in body.filter(|(_, (k, _))| k != "type") {
                raw.insert(k.to_string(), raw_value(v)?);
            }
            let kind = EventKind::Unknown { type_name, raw };
            (kind, Map::new())
        };
        Ok(RuntimeEvent {
            id,
            offset,
            timestamp,
            run_id,
            node_id,
            node_run_id,
            kind,
            extra,
        })
    }

    /// Serializes as one line, without the trailing newline.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut buf = Vec::with_capacity(256);
        self.write_json(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Appends this event's JSON to `buf` (no newline). Unknown kinds are
    /// written back with their raw fields, so a round trip loses nothing.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        match &self.kind {
            EventKind::Unknown { type_name, raw } => {
                let mut map = Map::new();
                map.insert("id".into(), Value::String(self.id.clone()));
                map.insert("offset".into(), self.offset.get().into());
                map.insert(
                    "timestamp".into(),
                    Value::String(self.timestamp.to_string()),
                );
                map.insert("type".into(), Value::String(type_name.clone()));
                map.insert("runId".into(), Value::String(self.run_id.to_string()));
                if let Some(node) = &self.node_id {
                    map.insert("nodeId".into(), Value::String(node.to_string()));
                }
                if let Some(nr) = &self.node_run_id {
                    map.insert("nodeRunId".into(), Value::String(nr.to_string()));
                }
                for (k, v) in raw {
                    map.entry(k.clone()).or_insert_with(|| v.clone());
                }
                serde_json::to_writer(buf, &map)
            }
            _ if self.extra.is_empty() => self.write_direct(buf),
            _ => serde_json::to_writer(buf, self),
        }
    }

    /// [`RuntimeEvent::write_json`] of an event with no unknown fields,
    /// byte for byte what serde writes: the envelope is written straight
    /// into `buf` (ids, the offset and the timestamp need no escaping, so
    /// serde's per-byte scan and its flattened map are skipped, which was
    /// most of an event's cost), then the kind by serde, its object opened
    /// by the envelope.
    fn write_direct(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        buf.extend_from_slice(b"{\"id\":");
        write_str(buf, &self.id)?;
        buf.extend_from_slice(b",\"offset\":");
        buf.extend_from_slice(itoa::Buffer::new().format(self.offset.get()).as_bytes());
        buf.extend_from_slice(b",\"timestamp\":");
        self.timestamp.write_json(buf)?;
        buf.extend_from_slice(b",\"runId\":");
        self.run_id.write_json(buf);
        if let Some(node) = &self.node_id {
            // Node ids are `[A-Za-z0-9_-]` (checked when made).
            buf.extend_from_slice(b",\"nodeId\":");
            write_plain(buf, node.as_str());
        }
        if let Some(run) = &self.node_run_id {
            buf.extend_from_slice(b",\"nodeRunId\":");
            run.write_json(buf);
        }
        // The kind is an object led by its `type`: its `{` becomes the
        // envelope's comma.
        let at = buf.len();
        serde_json::to_writer(&mut *buf, &self.kind)?;
        match buf.get_mut(at) {
            Some(open @ b'{') => *open = b',',
            _ => {
                return Err(serde::ser::Error::custom(
                    "an event's kind did not serialize as an object",
                ));
            }
        }
        Ok(())
    }
}

/// A JSON object's fields in order, each value as its raw text: what one
/// scan of a line yields, with nothing allocated but the list (and a key
/// that has escapes).
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Scan;
        impl<'de> Visitor<'de> for Scan {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(12));
                while let Some(Key(key)) = map.next_key()? {
                    fields.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Scan)
    }
}

/// The contents of a JSON string's text that has no escapes (the text was
/// checked by the scan of the line, so nothing else needs checking).
fn plain(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// A field kept as it is: its raw text made a value.
fn raw_value(raw: &RawValue) -> Result<Value, EventParseError> {
    Ok(serde_json::from_str(raw.get())?)
}

/// An object key, borrowed from the line unless it has escapes (serde's own
/// `Cow` always copies).
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Text)
    }
}

/// A known kind as its `type` and its other fields, read as the variant of
/// that name: each field's value is read from its raw text once, with no
/// untyped copy of the fields first.
struct Named<'a, I> {
    name: &'a str,
    fields: I,
}

impl<'de, I> Deserializer<'de> for Named<'_, I>
where
    I: Iterator<Item = (&'de str, &'de RawValue)>,
{
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, I> EnumAccess<'de> for Named<'_, I>
where
    I: Iterator<Item = (&'de str, &'de RawValue)>,
{
    type Error = serde_json::Error;
    type Variant = Body<I>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), Self::Error> {
        let name: serde::de::value::StrDeserializer<'_, serde_json::Error> =
            self.name.into_deserializer();
        Ok((seed.deserialize(name)?, Body(self.fields)))
    }
}

/// The fields of a [`Named`] kind.
struct Body<I>(I);

impl<'de, I> VariantAccess<'de> for Body<I>
where
    I: Iterator<Item = (&'de str, &'de RawValue)>,
{
    type Error = serde_json::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        seed.deserialize(MapAccessDeserializer::new(BodyFields {
            fields: self.0,
            value: None,
        }))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Self::Error> {
        Err(serde_json::Error::custom("a kind's fields are an object"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_map(BodyFields {
            fields: self.0,
            value: None,
        })
    }
}

/// The fields of a kind, each value read from its raw text; a value that
/// does not fit says which field it is.
struct BodyFields<'de, I> {
    fields: I,
    value: Option<(&'de str, &'de RawValue)>,
}

impl<'de, I> MapAccess<'de> for BodyFields<'de, I>
where
    I: Iterator<Item = (&'de str, &'de RawValue)>,
{
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.fields.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        let key: serde::de::value::BorrowedStrDeserializer<'de, serde_json::Error> =
            serde::de::value::BorrowedStrDeserializer::new(key);
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let Some((key, value)) = self.value.take() else {
            return Err(serde_json::Error::custom(
                "a value asked for before its key",
            ));
        };
        seed.deserialize(value).map_err(|e| {
            // Its position is within the value's own text, not the line's.
            let text = e.to_string();
            let at = format!(" at line {} column {}", e.line(), e.column());
            let message = text.strip_suffix(&at).unwrap_or(&text);
            serde_json::Error::custom(format_args!("field `{key}`: {message}"))
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.fields.size_hint().1
    }
}
