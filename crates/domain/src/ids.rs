//! Validated identifiers.
//!
//! Each id is a newtype whose constructor rejects what the rest of the system
//! could not handle (a nil UUID, an id that would escape a directory, offset 0),
//! so a value of the type is proof that the check already happened.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Not a UUID v4 (run ids name directories and files, so they are strict).
    #[error("`{0}` is not a UUID v4 run id")]
    NotUuidV4(String),
    /// Node ids become file names (fixtures) and map keys; see [`NodeId::new`].
    #[error(
        "`{0}` is not a valid node id: use 1-64 characters from A-Z a-z 0-9 _ -, starting with a letter or digit"
    )]
    BadNodeId(String),
    /// Session ids come from providers; only emptiness is rejected.
    #[error("session id must not be empty")]
    EmptySession,
    /// Offsets count from 1; 0 means "before the first event" and is not an offset.
    #[error("offset must be at least 1")]
    ZeroOffset,
}

/// A UUID as the record writes it (lowercase, hyphenated): written into a
/// buffer of its exact length rather than through `Display`, since every
/// event's id is one.
pub fn uuid_text(uuid: Uuid) -> String {
    uuid.hyphenated()
        .encode_lower(&mut Uuid::encode_buffer())
        .to_owned()
}

/// One workflow run. A UUID v4; the same id names the run's directory in the
/// store and its transcript file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(Uuid);

impl RunId {
    /// Wraps a UUID, refusing anything but version 4.
    pub fn new(uuid: Uuid) -> Result<Self, IdError> {
        if uuid.get_version_num() == 4 {
            Ok(Self(uuid))
        } else {
            Err(IdError::NotUuidV4(uuid.to_string()))
        }
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl FromStr for RunId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let uuid = Uuid::parse_str(s).map_err(|_| IdError::NotUuidV4(s.to_owned()))?;
        Self::new(uuid)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// One execution of one node (what seed 001 calls the node's `runId`).
/// Commands such as `send` are routed by it, so it must be unique per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRunId(Uuid);

impl NodeRunId {
    /// Wraps any non-nil UUID (ids may come from a seeded generator in replays).
    pub fn new(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

impl FromStr for NodeRunId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s)
            .map(Self)
            .map_err(|_| IdError::NotUuidV4(s.to_owned()))
    }
}

impl fmt::Display for NodeRunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A node of a workflow graph. Node ids name fixture files and appear in
/// paths, so they are restricted to a portable, path-safe alphabet.
///
/// Shared text: a run's state keys several maps by node, and a long run
/// holds an entry per node in each; a clone is a reference count, not a
/// copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// Validates `[A-Za-z0-9][A-Za-z0-9_-]{0,63}`.
    pub fn new(id: impl Into<String>) -> Result<Self, IdError> {
        let id = id.into();
        if Self::valid(&id) {
            Ok(Self(Arc::from(id)))
        } else {
            Err(IdError::BadNodeId(id))
        }
    }

    /// [`Self::new`] of borrowed text, copied once.
    pub fn parse(id: &str) -> Result<Self, IdError> {
        if Self::valid(id) {
            Ok(Self(Arc::from(id)))
        } else {
            Err(IdError::BadNodeId(id.to_owned()))
        }
    }

    fn valid(id: &str) -> bool {
        let mut chars = id.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        first_ok && rest_ok && id.len() <= 64
    }

    /// The id as written in the workflow.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    /// Padded as a `str` is, so a column of node ids lines up.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl std::borrow::Borrow<str> for NodeId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A provider's conversation id, saved so the agent can be resumed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// Any non-empty string: its shape belongs to the provider.
    pub fn new(id: impl Into<String>) -> Result<Self, IdError> {
        let id = id.into();
        if id.is_empty() {
            Err(IdError::EmptySession)
        } else {
            Ok(Self(id))
        }
    }

    /// A runtime-generated session id, for providers that name none.
    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid_text(uuid))
    }

    /// The id as the provider gave it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    /// Padded as a `str` is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// Position of an event in its run's log: 1 for the first event, no gaps.
/// "After offset 0" means "from the start", which is why 0 is not an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Offset(u64);

impl Offset {
    /// The first event of every run.
    pub const FIRST: Offset = Offset(1);

    /// Refuses 0.
    pub fn new(n: u64) -> Result<Self, IdError> {
        if n == 0 {
            Err(IdError::ZeroOffset)
        } else {
            Ok(Self(n))
        }
    }

    /// The offset as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The offset that follows this one.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

macro_rules! string_serde {
    ($ty:ty, $parse:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        string_serde!(@de $ty, $parse);
    };
    (@de $ty:ty, $parse:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            /// Parsed from the text as the reader has it, never copied
            /// first: ids are on every event and keys of the state's maps.
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Text;
                impl<'de> serde::de::Visitor<'de> for Text {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        let parse: fn(&str) -> Result<$ty, IdError> = $parse;
                        parse(v).map_err(E::custom)
                    }
                }
                d.deserialize_str(Text)
            }
        }
    };
}

/// UUID ids serialize from a stack buffer: they are on every event, and
/// going through `Display` would cost a formatter round per id.
macro_rules! uuid_serde {
    ($ty:ty) => {
        impl $ty {
            /// Appends the id as a JSON string: hex and hyphens need no
            /// escaping, so the event writer skips serde's scan of it.
            pub(crate) fn write_json(&self, buf: &mut Vec<u8>) {
                let mut text = Uuid::encode_buffer();
                let text = self.0.hyphenated().encode_lower(&mut text);
                crate::json_out::write_plain(buf, text);
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.0.hyphenated().encode_lower(&mut Uuid::encode_buffer()))
            }
        }
        string_serde!(@de $ty, |s| s.parse());
    };
}

uuid_serde!(RunId);
uuid_serde!(NodeRunId);
string_serde!(NodeId, NodeId::parse_shared);

/// The ids a [`NodeId::sharing`] scope read so far.
#[derive(Default)]
struct Shared {
    /// Each distinct id, in the order first read.
    order: Vec<NodeId>,
    /// Whether `order` is in key order (its ids came in that order).
    unsorted: bool,
    /// Where each id is in `order`: built at the first id that neither the
    /// cursor nor the order finds, as a snapshot whose maps list the same
    /// nodes never needs it.
    at: Option<ByNodeId<usize>>,
    /// The place after the id read last. A snapshot writes its maps in key
    /// order, each a subset of the same nodes, so the id read next is most
    /// often the one there (or, at the start of the next map, the first):
    /// one comparison, where a lookup hashes.
    next: usize,
}

impl Shared {
    fn get(&mut self, id: &str) -> Result<NodeId, IdError> {
        let next = if self.next < self.order.len() {
            self.next
        } else {
            0
        };
        if let Some(known) = self.order.get(next)
            && known.as_str() == id
        {
            self.next = next + 1;
            return Ok(known.clone());
        }
        // Ids read in key order past the last one: new, no lookup needed.
        let after_last = self.order.last().is_none_or(|last| last.as_str() < id);
        if after_last && self.at.is_none() && !self.unsorted {
            return self.push(id);
        }
        let order = &self.order;
        let at = self.at.get_or_insert_with(|| {
            order
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect()
        });
        if let Some((known, &i)) = at.get_key_value(id) {
            self.next = i + 1;
            return Ok(known.clone());
        }
        self.unsorted |= !after_last;
        let new = self.push(id)?;
        if let Some(at) = &mut self.at {
            at.insert(new.clone(), self.order.len() - 1);
        }
        Ok(new)
    }

    /// A new id, at the end of `order`.
    fn push(&mut self, id: &str) -> Result<NodeId, IdError> {
        let new = NodeId::parse(id)?;
        self.order.push(new.clone());
        self.next = self.order.len();
        Ok(new)
    }
}

/// A set of shared ids in hand ([`NodeId::reading_many`]); `&mut NodeIds`
/// reads one id as a serde seed.
pub(crate) struct NodeIds(Shared);

impl<'de> serde::de::DeserializeSeed<'de> for &mut NodeIds {
    type Value = NodeId;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NodeId, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &mut NodeIds {
    type Value = NodeId;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NodeId, E> {
        self.0.get(v).map_err(E::custom)
    }
}

thread_local! {
    /// The set of this thread's [`NodeId::sharing`] scope, while one is open.
    static SHARED: std::cell::RefCell<Option<Shared>> = const { std::cell::RefCell::new(None) };
}

/// A map keyed by node id, hashed with [`Fnv`].
pub(crate) type ByNodeId<V> =
    std::collections::HashMap<NodeId, V, std::hash::BuildHasherDefault<Fnv>>;

/// FNV-1a: node ids are a few bytes, for which the standard SipHash costs
/// more than the allocation sharing saves (616 instructions an id against
/// 295 for the copy, under callgrind), and more than the lookup of a node
/// by its id that each step makes a few times. The ids come from the run's
/// own files, and a colliding set of them only makes a load slower.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

impl NodeId {
    /// Runs `read` with the node ids deserialized meanwhile on this thread
    /// shared: each distinct id is allocated once, and every later read of
    /// it is a reference count. A snapshot keys each node in up to seven
    /// maps; read without this, it held (and later freed) seven copies.
    pub fn sharing<R>(read: impl FnOnce() -> R) -> R {
        /// Ends the scope it opened, however `read` returns.
        struct Scope(bool);
        impl Drop for Scope {
            fn drop(&mut self) {
                if self.0 {
                    SHARED.with(|s| s.replace(None));
                }
            }
        }
        // An inner scope reads into the outer one's ids.
        let opened = SHARED.with(|s| match s.try_borrow_mut() {
            Ok(mut set) if set.is_none() => {
                *set = Some(Shared::default());
                true
            }
            _ => false,
        });
        let _scope = Scope(opened);
        read()
    }

    /// Runs `read` with this thread's [`Self::sharing`] set in hand (a set of
    /// its own when no scope is open), for a reader of many ids in a row, a
    /// map's keys: one thread-local access for the map rather than one per
    /// id (a sixth of reading an id). Ids read meanwhile by other means are
    /// not shared.
    pub(crate) fn reading_many<R>(read: impl FnOnce(&mut NodeIds) -> R) -> R {
        let taken = SHARED.with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.take()));
        let opened = taken.is_some();
        let mut ids = NodeIds(taken.unwrap_or_default());
        let result = read(&mut ids);
        if opened {
            SHARED.with(|s| {
                if let Ok(mut s) = s.try_borrow_mut() {
                    *s = Some(ids.0);
                }
            });
        }
        result
    }

    /// [`Self::parse`], reusing the copy a [`Self::sharing`] scope holds.
    fn parse_shared(id: &str) -> Result<Self, IdError> {
        SHARED.with(|s| match s.try_borrow_mut() {
            Ok(mut shared) => match shared.as_mut() {
                Some(shared) => shared.get(id),
                None => Self::parse(id),
            },
            Err(_) => Self::parse(id),
        })
    }
}
string_serde!(SessionId, |s| SessionId::new(s));

impl Serialize for Offset {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Offset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Offset::new(u64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// `awr show` lines its node ids up in a column: a width pads them.
    #[test]
    fn node_and_session_ids_pad_to_a_width() {
        let node = NodeId::new("plan").unwrap();
        assert_eq!(format!("[{node:<6}]"), "[plan  ]");
        assert_eq!(format!("[{node}]"), "[plan]");
        let session = SessionId::new("s1").unwrap();
        assert_eq!(format!("[{session:>4}]"), "[  s1]");
    }

    #[test]
    fn a_uuid_is_written_as_display_writes_it() {
        let uuid: Uuid = "0B6F8F4E-3C1A-4D2B-9F3E-1A2B3C4D5E6F".parse().unwrap();
        assert_eq!(uuid_text(uuid), uuid.to_string());
        assert_eq!(uuid_text(uuid), "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f");
        assert_eq!(uuid_text(uuid).capacity(), 36);
    }

    #[test]
    fn run_id_accepts_only_v4() {
        assert!(RunId::new(Uuid::nil()).is_err());
        assert!("not-a-uuid".parse::<RunId>().is_err());
        let id: RunId = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap();
        assert_eq!(id.to_string(), "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f");
    }

    #[test]
    fn node_ids_are_path_safe() {
        for good in ["a", "writer", "step-2", "A_b-9"] {
            assert!(NodeId::new(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", "../etc", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(NodeId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_read_in_a_sharing_scope_are_one_copy() {
        // Maps in key order, and ids out of it; a new id before the last
        // one read, then new ids after it again.
        for text in [
            r#"[["a", "b", "d"], ["a", "b", "c", "d"], ["d", "a", "c", "b", "c"]]"#,
            r#"[["b", "d"], ["a"], ["e"], ["a", "b", "d", "e"], ["e", "f"], ["f"]]"#,
        ] {
            let read = || serde_json::from_str::<Vec<Vec<NodeId>>>(text).unwrap();
            let apart = read();
            let shared = NodeId::sharing(read);
            assert_eq!(shared, apart);
            let all: Vec<&NodeId> = shared.iter().flatten().collect();
            for one in &all {
                for other in all.iter().filter(|other| other == &one) {
                    assert!(Arc::ptr_eq(&one.0, &other.0), "{text}: {one}");
                }
            }
        }
        let text = r#"[["a", "b", "d"], ["a", "b", "c", "d"]]"#;
        let read = || serde_json::from_str::<Vec<Vec<NodeId>>>(text).unwrap();
        let apart = read();
        assert!(!Arc::ptr_eq(&apart[0][0].0, &apart[1][0].0));
        // The scope ends with its call, and a bad id is still refused in it.
        assert!(!Arc::ptr_eq(&read()[0][0].0, &read()[0][0].0));
        assert!(NodeId::sharing(|| serde_json::from_str::<NodeId>("\"a/b\"")).is_err());
    }

    #[test]
    fn offsets_start_at_one() {
        assert_eq!(Offset::new(0), Err(IdError::ZeroOffset));
        assert_eq!(Offset::FIRST.next().get(), 2);
        let parsed: Result<Offset, _> = serde_json::from_str("0");
        assert!(parsed.is_err());
    }

    #[test]
    fn ids_round_trip_as_strings() {
        let node = NodeId::new("writer").unwrap();
        let json = serde_json::to_string(&node).unwrap();
        assert_eq!(json, "\"writer\"");
        assert_eq!(serde_json::from_str::<NodeId>(&json).unwrap(), node);
        assert!(serde_json::from_str::<NodeId>("\"a/b\"").is_err());
    }
}
