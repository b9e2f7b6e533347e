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

use crate::ids::{NodeId, NodeIds};

/// A `BTreeMap` built from all its entries at once. Keys out of order are
/// sorted; of a repeated key the last wins, as with one insert after another.
pub(super) fn bulk<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    let entries = d.deserialize_map(Entries::<_, V>(PhantomData::<K>, PhantomData))?;
    Ok(entries.into_iter().collect())
}

/// [`bulk`] of a map keyed by node, its keys read through one set of shared
/// ids in hand (`NodeId::reading_many`): a snapshot has six such maps.
pub(super) fn by_node<'de, D, V>(d: D) -> Result<BTreeMap<NodeId, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    NodeId::reading_many(|ids| {
        let entries = d.deserialize_map(Entries::<_, V>(ids, PhantomData))?;
        Ok(entries.into_iter().collect())
    })
}

/// How a map's keys are read: by their own `Deserialize`, or as shared ids.
trait Keys<'de> {
    type Key;
    fn next<M: MapAccess<'de>>(&mut self, map: &mut M) -> Result<Option<Self::Key>, M::Error>;
}

impl<'de, K: Deserialize<'de>> Keys<'de> for PhantomData<K> {
    type Key = K;
    fn next<M: MapAccess<'de>>(&mut self, map: &mut M) -> Result<Option<K>, M::Error> {
        map.next_key()
    }
}

impl<'de> Keys<'de> for &mut NodeIds {
    type Key = NodeId;
    fn next<M: MapAccess<'de>>(&mut self, map: &mut M) -> Result<Option<NodeId>, M::Error> {
        map.next_key_seed(&mut **self)
    }
}

/// A map's entries, in the order written.
struct Entries<K, V>(K, PhantomData<V>);

impl<'de, K: Keys<'de>, V: Deserialize<'de>> Visitor<'de> for Entries<K, V> {
    type Value = Vec<(K::Key, V)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<M: MapAccess<'de>>(mut self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = self.0.next(&mut map)? {
            entries.push((key, map.next_value()?));
        }
        Ok(entries)
    }
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

    #[derive(Debug, serde::Deserialize)]
    struct Nodes(
        #[serde(deserialize_with = "by_node")] BTreeMap<NodeId, u32>,
        #[serde(deserialize_with = "by_node")] BTreeMap<NodeId, u32>,
    );

    #[test]
    fn maps_by_node_share_their_ids_in_a_scope_and_refuse_bad_ones() {
        let text = r#"[{"b": 2, "a": 1, "b": 3}, {"a": 5, "c": 6}]"#;
        let Nodes(one, two) = NodeId::sharing(|| serde_json::from_str(text)).unwrap();
        let id = |s: &str| NodeId::new(s).unwrap();
        assert_eq!(one, BTreeMap::from([(id("a"), 1), (id("b"), 3)]));
        assert_eq!(two, BTreeMap::from([(id("a"), 5), (id("c"), 6)]));
        let (a1, a2) = (one.keys().next().unwrap(), two.keys().next().unwrap());
        assert!(std::ptr::eq(a1.as_str(), a2.as_str()), "one copy of `a`");
        // Outside a scope too, and a bad key is named.
        assert!(serde_json::from_str::<Nodes>(r#"[{}, {"a": 1}]"#).is_ok());
        let err = NodeId::sharing(|| serde_json::from_str::<Nodes>(r#"[{"a": 1}, {"../x": 1}]"#));
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("`../x` is not a valid node id")
        );
        // The scope's set is back in place after a map: later ids still share.
        let later = NodeId::sharing(|| {
            let Nodes(one, _) = serde_json::from_str(text).unwrap();
            let again: NodeId = serde_json::from_str("\"a\"").unwrap();
            (one, again)
        });
        assert!(std::ptr::eq(
            later.0.keys().next().unwrap().as_str(),
            later.1.as_str()
        ));
    }
}
