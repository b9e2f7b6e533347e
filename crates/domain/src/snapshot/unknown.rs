//! Reading a snapshot in one pass while keeping the fields this version does
//! not know.
//!
//! `#[serde(flatten)]` would keep them, but a struct with a flattened field
//! is read by buffering the whole object into serde's untyped content tree
//! first and then reading each field from that tree: the snapshot was built
//! twice, and a field kept as raw text (a finished node's output,
//! [`JsonText`](super::JsonText)) cannot be read from the buffer at all. Here
//! the derived reader sees the object directly, and [`Capture`] takes the
//! keys it does not list out of its way, as `Value`s.

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

/// A deserializer of a struct that hands the struct's reader only the keys
/// it lists; every other key goes into `extra`, with its value.
pub(super) struct Capture<'a, D> {
    pub(super) inner: D,
    pub(super) extra: &'a mut Map<String, Value>,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Capture<'_, D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(Fields {
            visitor,
            fields,
            extra: self.extra,
        })
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The visitor of the struct, given a map that hides the unknown keys.
struct Fields<'a, V> {
    visitor: V,
    fields: &'static [&'static str],
    extra: &'a mut Map<String, Value>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Fields<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<V::Value, M::Error> {
        self.visitor.visit_map(Known {
            map,
            fields: self.fields,
            extra: self.extra,
        })
    }
}

/// A map access yielding only the keys in `fields`.
struct Known<'a, M> {
    map: M,
    fields: &'static [&'static str],
    extra: &'a mut Map<String, Value>,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for Known<'_, M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, M::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            if self.fields.contains(&key.as_str()) {
                let key: de::value::StringDeserializer<M::Error> = key.into_deserializer();
                return seed.deserialize(key).map(Some);
            }
            // The last of a repeated name wins, as in a JSON object.
            let value: Value = self.map.next_value()?;
            self.extra.insert(key, value);
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, M::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}
