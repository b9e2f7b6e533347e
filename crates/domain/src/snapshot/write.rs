//! Writing a snapshot as JSON, byte for byte what its `Serialize` writes.
//!
//! A snapshot is rewritten whole as a run grows (the amortized rule writes
//! about as many snapshot bytes as log bytes), and most of it is the maps
//! keyed by node. Through serde, each key and each short value went through
//! the writer's per-byte escaping and each `Spent` through a map of its
//! own: about a sixth of a step's cost. Node ids, statuses, numbers and
//! timestamps need no escaping, so those maps are written straight into the
//! buffer; everything else still goes through serde.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{RunSnapshot, Spent};
use crate::ids::NodeId;
use crate::json_out::{write_plain, write_str};

impl RunSnapshot {
    /// This snapshot's JSON ([`RunSnapshot::write_json`]).
    pub fn to_json_vec(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut buf = Vec::with_capacity(4096);
        self.write_json(&mut buf)?;
        Ok(buf)
    }

    /// This snapshot's JSON as text ([`RunSnapshot::write_json`]).
    pub fn to_json_string(&self) -> Result<String, serde_json::Error> {
        String::from_utf8(self.to_json_vec()?).map_err(serde::ser::Error::custom)
    }

    /// Appends this snapshot's JSON to `buf`: what `serde_json::to_writer`
    /// writes, faster.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        self.write_json_measured(buf).map(drop)
    }

    /// [`RunSnapshot::write_json`], returning the length of the longest
    /// value it wrote (an output, the input, the state, a map's entry; the
    /// whole document when serde wrote it): no string in the document is
    /// longer, which spares a writer that moves long strings out of the
    /// document a scan of all of it.
    pub fn write_json_measured(&self, buf: &mut Vec<u8>) -> Result<usize, serde_json::Error> {
        self.write_fields(buf, None, None)
    }

    /// [`RunSnapshot::write_json_measured`] for a writer that takes the
    /// JSON in parts: whenever `buf` holds `chunk` bytes or more after a
    /// field or a map's entry, `flush` is handed all of `buf` and `buf` is
    /// emptied; what is left at the end stays in `buf`. A long run's
    /// snapshot is megabytes, and a buffer of all of it stays with the
    /// allocator after it is freed.
    pub fn write_json_flushing(
        &self,
        buf: &mut Vec<u8>,
        chunk: usize,
        flush: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<usize, serde_json::Error> {
        self.write_fields(buf, None, Some(Flush { chunk, to: flush }))
    }

    /// [`RunSnapshot::write_json`] with `status` written in place of the
    /// recorded one: a reader's view of the run (`interrupted` for a
    /// `running` run nothing writes), at the cost of the snapshot's own
    /// writer rather than of a `serde_json::Value` built and rewritten.
    pub fn write_json_shown(
        &self,
        buf: &mut Vec<u8>,
        status: &str,
    ) -> Result<(), serde_json::Error> {
        self.write_fields(buf, Some(status), None).map(drop)
    }

    /// The writer of all three: the recorded status, or `shown`.
    fn write_fields<'a>(
        &self,
        buf: &'a mut Vec<u8>,
        shown: Option<&str>,
        flush: Option<Flush<'a>>,
    ) -> Result<usize, serde_json::Error> {
        // Unknown fields (a newer writer's) are rare: serde places them.
        if !self.extra.is_empty() {
            let start = buf.len();
            match shown {
                None => serde_json::to_writer(&mut *buf, self)?,
                Some(shown) => {
                    let mut value = serde_json::to_value(self)?;
                    if let Some(map) = value.as_object_mut() {
                        map.insert("status".into(), shown.into());
                    }
                    serde_json::to_writer(&mut *buf, &value)?;
                }
            }
            return Ok(buf.len() - start);
        }
        // Every field named, so a field added to the struct and not here
        // does not compile.
        let RunSnapshot {
            version,
            run_id,
            workflow,
            status,
            input,
            outputs,
            state,
            node_status,
            edge_status,
            loop_counters,
            inbox,
            agent_sessions,
            last_offset,
            started_at,
            started_by,
            updated_at,
            failure,
            node_runs,
            for_each,
            steps_started,
            node_passes,
            node_calls,
            previous_agent,
            spent,
            node_spent,
            stopping,
            forked_from,
            extra: _,
        } = self;
        let mut w = Object::open(buf);
        w.flush = flush;
        w.value("version", version)?;
        w.value("runId", run_id)?;
        w.value("workflow", workflow)?;
        match shown {
            Some(shown) => {
                w.key("status");
                write_str(w.buf, shown)?;
            }
            None => w.value("status", status)?,
        }
        if !input.is_null() {
            w.value("input", input)?;
        }
        w.nodes("outputs", outputs, |buf, text| {
            buf.extend_from_slice(text.as_str().as_bytes());
            Ok(())
        })?;
        w.value("state", state)?;
        w.nodes("nodeStatus", node_status, |buf, status| {
            write_plain(buf, status.as_str());
            Ok(())
        })?;
        w.texts("edgeStatus", edge_status, |buf, status| {
            write_plain(buf, status.as_str());
            Ok(())
        })?;
        w.texts("loopCounters", loop_counters, serde_value)?;
        w.value("inbox", inbox)?;
        w.nodes("agentSessions", agent_sessions, serde_value)?;
        w.value("lastOffset", last_offset)?;
        if let Some(at) = started_at {
            w.key("startedAt");
            at.write_json(w.buf)?;
        }
        if let Some(by) = started_by {
            w.value("startedBy", by)?;
        }
        if let Some(at) = updated_at {
            w.key("updatedAt");
            at.write_json(w.buf)?;
        }
        if let Some(failure) = failure {
            w.value("failure", failure)?;
        }
        if !node_runs.is_empty() {
            w.value("nodeRuns", node_runs)?;
        }
        if !for_each.is_empty() {
            w.value("forEach", for_each)?;
        }
        if *steps_started != 0 {
            w.value("stepsStarted", steps_started)?;
        }
        if !node_passes.is_empty() {
            w.nodes("nodePasses", node_passes, serde_value)?;
        }
        if !node_calls.is_empty() {
            w.nodes("nodeCalls", node_calls, serde_value)?;
        }
        if let Some(agent) = previous_agent {
            w.value("previousAgent", agent)?;
        }
        if !spent.is_empty() {
            w.key("spent");
            w.measure(|buf| write_spent(buf, spent))?;
        }
        if !node_spent.is_empty() {
            w.nodes("nodeSpent", node_spent, write_spent)?;
        }
        if let Some(stopping) = stopping {
            w.value("stopping", stopping)?;
        }
        if let Some(fork) = forked_from {
            w.value("forkedFrom", fork)?;
        }
        w.buf.push(b'}');
        Ok(w.longest)
    }
}

/// A value as serde writes it.
fn serde_value<T: Serialize>(buf: &mut Vec<u8>, value: &T) -> Result<(), serde_json::Error> {
    serde_json::to_writer(buf, value)
}

/// `Spent` as its derived `Serialize` writes it.
fn write_spent(buf: &mut Vec<u8>, spent: &Spent) -> Result<(), serde_json::Error> {
    let Spent {
        tokens,
        cost_usd,
        turns,
        since,
    } = spent;
    let mut w = Object::open(buf);
    w.value("tokens", tokens)?;
    // A float as serde writes it (`0.0`, `1e-7`; `null` when not finite).
    w.value("costUsd", cost_usd)?;
    w.value("turns", turns)?;
    if let Some(at) = since {
        w.key("since");
        at.write_json(w.buf)?;
    }
    w.buf.push(b'}');
    Ok(())
}

/// Where a snapshot's JSON goes in parts ([`RunSnapshot::write_json_flushing`]).
struct Flush<'a> {
    /// The buffer's length that is handed over.
    chunk: usize,
    to: &'a mut dyn FnMut(&[u8]) -> std::io::Result<()>,
}

/// A JSON object being written: its fields' separators and keys, and the
/// length of the longest value written into it.
struct Object<'a> {
    buf: &'a mut Vec<u8>,
    first: bool,
    longest: usize,
    /// Set on the snapshot's own object only: a value's parts are never
    /// handed over apart, so the lengths measured stay whole.
    flush: Option<Flush<'a>>,
}

impl<'a> Object<'a> {
    fn open(buf: &'a mut Vec<u8>) -> Self {
        buf.push(b'{');
        Self {
            buf,
            first: true,
            longest: 0,
            flush: None,
        }
    }

    /// Hands the buffer over once it holds a chunk.
    fn flush_full(&mut self) -> Result<(), serde_json::Error> {
        if let Some(flush) = &mut self.flush
            && self.buf.len() >= flush.chunk
        {
            (flush.to)(self.buf).map_err(serde_json::Error::io)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes a value with `write`, noting its length.
    fn measure(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        let start = self.buf.len();
        write(self.buf)?;
        self.longest = self.longest.max(self.buf.len() - start);
        Ok(())
    }

    /// The comma before every field but the first.
    fn separate(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.buf.push(b',');
        }
    }

    /// Writes `"key":`. Keys given here are field names: none needs
    /// escaping.
    fn key(&mut self, key: &str) {
        self.separate();
        write_plain(self.buf, key);
        self.buf.push(b':');
    }

    fn value<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        self.key(key);
        self.measure(|buf| serde_json::to_writer(buf, value))?;
        self.flush_full()
    }

    /// A map keyed by node: node ids are `[A-Za-z0-9_-]` (checked when made).
    fn nodes<V>(
        &mut self,
        key: &str,
        map: &BTreeMap<NodeId, V>,
        write: impl FnMut(&mut Vec<u8>, &V) -> Result<(), serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        self.map(
            key,
            map,
            |buf, node| {
                write_plain(buf, node.as_str());
                Ok(())
            },
            write,
        )
    }

    /// A map keyed by any text (edge ids), each key escaped if need be.
    fn texts<V>(
        &mut self,
        key: &str,
        map: &BTreeMap<String, V>,
        write: impl FnMut(&mut Vec<u8>, &V) -> Result<(), serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        self.map(key, map, |buf, text| write_str(buf, text), write)
    }

    /// The map `map` under `key`, each key written by `name` and each value
    /// by `write`.
    fn map<K, V>(
        &mut self,
        key: &str,
        map: &BTreeMap<K, V>,
        mut name: impl FnMut(&mut Vec<u8>, &K) -> Result<(), serde_json::Error>,
        mut write: impl FnMut(&mut Vec<u8>, &V) -> Result<(), serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        self.key(key);
        self.buf.push(b'{');
        for (i, (k, value)) in map.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            name(self.buf, k)?;
            self.buf.push(b':');
            self.measure(|buf| write(buf, value))?;
            self.flush_full()?;
        }
        self.buf.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::snapshot::{EdgeStatus, JsonText, NodeStatus};

    /// A snapshot of `n` finished nodes, each with its output, status,
    /// session, counts and spending, and an edge to the next.
    fn finished(n: usize) -> RunSnapshot {
        let mut s = RunSnapshot::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap());
        for i in 0..n {
            let id = NodeId::new(format!("n{i}")).unwrap();
            let output = json!({"data": format!("answer {i}"), "metadata": {"agent_name": "a"}});
            s.outputs.insert(id.clone(), JsonText::from_value(&output));
            s.node_status.insert(id.clone(), NodeStatus::Done);
            s.edge_status
                .insert(format!("n{i}->n{}", i + 1), EdgeStatus::Fired);
            s.node_passes.insert(id.clone(), 1);
            s.node_spent.insert(id, Spent::default());
        }
        s.state.insert("k".into(), json!("v"));
        s
    }

    #[test]
    fn a_snapshot_written_in_parts_is_the_same_json_and_the_same_measure() {
        let snapshot = finished(300);
        let mut whole = Vec::new();
        let longest = snapshot.write_json_measured(&mut whole).unwrap();
        let chunk = 1024;
        let (mut parts, mut joined) = (Vec::new(), Vec::new());
        let mut buf = Vec::new();
        let measured = snapshot
            .write_json_flushing(&mut buf, chunk, &mut |part| {
                parts.push(part.len());
                joined.extend_from_slice(part);
                Ok(())
            })
            .unwrap();
        joined.extend_from_slice(&buf);
        assert_eq!(joined, whole);
        assert_eq!(measured, longest);
        assert!(parts.len() > whole.len() / chunk / 2, "{parts:?}");
        // Handed over at the first boundary past a chunk: no part holds
        // much more than one, and the rest is under one.
        assert!(parts.iter().all(|&len| (chunk..chunk + 300).contains(&len)));
        assert!(buf.len() < chunk + 300);
    }

    #[test]
    fn a_snapshot_under_a_chunk_is_left_whole_in_the_buffer() {
        let snapshot = finished(3);
        let mut whole = Vec::new();
        snapshot.write_json(&mut whole).unwrap();
        let mut buf = Vec::new();
        let mut calls = 0;
        snapshot
            .write_json_flushing(&mut buf, 1 << 20, &mut |_| {
                calls += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!((calls, buf), (0, whole));
    }

    #[test]
    fn a_part_that_cannot_be_written_stops_the_snapshot_with_its_error() {
        let snapshot = finished(300);
        let mut buf = Vec::new();
        let mut calls = 0;
        let err = snapshot
            .write_json_flushing(&mut buf, 1024, &mut |_| {
                calls += 1;
                Err(std::io::Error::other("disk full"))
            })
            .unwrap_err();
        assert_eq!(calls, 1);
        assert!(err.is_io(), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}
