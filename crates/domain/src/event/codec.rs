//! One event as one log line: parsing it (unknown types and fields kept whole)
//! and writing it back, so a round trip loses nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{EventKind, KNOWN_TYPES, RuntimeEvent, keys};

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
    /// Parses one log line. Unknown types are kept as [`EventKind::Unknown`].
    pub fn from_json(line: &[u8]) -> Result<Self, EventParseError> {
        let mut map: Map<String, Value> = serde_json::from_slice(line)?;
        fn take<T: serde::de::DeserializeOwned>(
            map: &mut Map<String, Value>,
            field: &'static str,
        ) -> Result<T, EventParseError> {
            let value = map.remove(field).unwrap_or(Value::Null);
            serde_json::from_value(value).map_err(|e| EventParseError::Envelope {
                field,
                message: e.to_string(),
            })
        }
        let id = take(&mut map, "id")?;
        let offset = take(&mut map, "offset")?;
        let timestamp = take(&mut map, "timestamp")?;
        let run_id = take(&mut map, "runId")?;
        let node_id = take(&mut map, "nodeId")?;
        let node_run_id = take(&mut map, "nodeRunId")?;
        debug_assert!(ENVELOPE.iter().all(|f| !map.contains_key(*f)));
        let type_name = match map.get("type") {
            Some(Value::String(t)) => t.clone(),
            _ => {
                return Err(EventParseError::Envelope {
                    field: "type",
                    message: "missing or not a string".into(),
                });
            }
        };
        let (kind, extra) = if KNOWN_TYPES.contains(&type_name.as_str()) {
            // Deserialized from a borrow, so the map is not copied.
            let value = Value::Object(map);
            let kind = EventKind::deserialize(&value).map_err(|e| EventParseError::Body {
                type_name,
                message: e.to_string(),
            })?;
            let mut map = match value {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            // Whatever the kind did not take is a newer writer's field: keep it.
            let mut taken = keys::Keys::default();
            if kind.serialize(&mut taken).is_ok() {
                map.retain(|k, _| !taken.0.contains(&k.as_str()));
            }
            (kind, map)
        } else {
            map.remove("type");
            let kind = EventKind::Unknown {
                type_name,
                raw: map,
            };
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
            _ => serde_json::to_writer(buf, self),
        }
    }
}
