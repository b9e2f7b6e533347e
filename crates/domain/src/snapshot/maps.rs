//! Reading a snapshot's large maps in bulk.
//!
//! serde reads a `BTreeMap` by inserting entry after entry, each a search
//! from the root with a string comparison per level: most of the time of
//! loading a long run's snapshot, whose maps hold an entry per node. A
//! snapshot writes its maps in key order, so reading the entries into a list
//! and building the tree from it (sorted already: one pass) costs a fraction.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// A `BTreeMap` built from all its entries at once. Keys out of order are
/// sorted; of a repeated key the last wins, as with one insert after another.
pub(super) fn bulk<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    struct Entries<K, V>(PhantomData<(K, V)>);

    impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for Entries<K, V> {
        type Value = Vec<(K, V)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
            while let Some(entry) = map.next_entry()? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }

    let entries = d.deserialize_map(Entries(PhantomData))?;
    Ok(entries.into_iter().collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct M(#[serde(deserialize_with = "bulk")] BTreeMap<String, u32>);

    #[test]
    fn builds_the_map_one_insert_after_another_would() {
        let M(m) = serde_json::from_str(r#"{"b": 2, "a": 1, "c": 3, "a": 4}"#).unwrap();
        assert_eq!(
            m,
            BTreeMap::from([("a".into(), 4), ("b".into(), 2), ("c".into(), 3)])
        );
        let M(m) = serde_json::from_str("{}").unwrap();
        assert!(m.is_empty());
        assert!(serde_json::from_str::<M>("[1]").is_err());
    }
}
