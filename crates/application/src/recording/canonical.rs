//! The canonical form of a replay that `verify-determinism` compares byte
//! for byte: its causal events, then its run events by node run, without
//! what scheduling and the clock decide.

use std::collections::{BTreeMap, HashMap};

use domain::{EventKind, RuntimeEvent};
use serde_json::Value;

/// The canonical output of a replay: its causal events (parents first),
/// then its run events grouped by node run (in log order within one), with
/// what scheduling and the clock decide left out (offsets, ids, times,
/// durations), as RFC 8785 lines.
pub fn canonical(events: &[RuntimeEvent], seed: &str) -> Vec<String> {
    let mut lines = causal_lines(events, seed);
    lines.extend(run_lines(events, seed));
    lines
}

/// The first part of [`canonical`]: the causal events, parents first,
/// without `timestamp_ns`.
pub fn causal_lines(events: &[RuntimeEvent], seed: &str) -> Vec<String> {
    domain::causal::project(events, seed)
        .iter()
        .map(|event| {
            let mut value = serde_json::to_value(event).unwrap_or(Value::Null);
            if let Some(map) = value.as_object_mut() {
                map.remove("timestamp_ns");
            }
            jcs(&value)
        })
        .collect()
}

/// The second part of [`canonical`]: the run events, by node run.
fn run_lines(events: &[RuntimeEvent], seed: &str) -> Vec<String> {
    let minted = minted_prefix(seed);
    let mut lines = Vec::new();
    // Node runs by position: node, item, attempt.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut children: HashMap<String, String> = HashMap::new();
    for e in events {
        match &e.kind {
            EventKind::NodeStarted { item, attempt, .. } => {
                if let (Some(node), Some(run)) = (&e.node_id, e.node_run_id) {
                    let name = format!(
                        "{node}#{}#{}",
                        item.map(|i| i.to_string()).unwrap_or_default(),
                        attempt.unwrap_or(1)
                    );
                    names.insert(run.to_string(), name);
                }
            }
            EventKind::SubflowStarted {
                child_run_id,
                workflow,
            } => {
                let n = children.len();
                children.insert(child_run_id.to_string(), format!("child:{workflow}#{n}"));
            }
            _ => {}
        }
    }
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut flow = Vec::new();
    // Ids the runtime minted (sessions before the provider names one),
    // named by the node run that first shows them: their values follow the
    // order parallel branches drew them.
    let mut ids: HashMap<String, String> = HashMap::new();
    for e in events {
        if matches!(e.kind, EventKind::StateSaved { .. }) {
            continue;
        }
        let mut value = serde_json::to_value(e).unwrap_or(Value::Null);
        let group = e
            .node_run_id
            .map(|r| r.to_string())
            .and_then(|r| names.get(&r).cloned());
        let mut minted_ids = Minted {
            prefix: &minted,
            group: group.as_deref().unwrap_or("flow"),
            ids: &mut ids,
        };
        strip(&mut value, &names, &children, &mut minted_ids);
        let line = jcs(&value);
        match group {
            Some(name) => groups.entry(name).or_default().push(line),
            None => flow.push(line),
        }
    }
    flow.sort();
    lines.extend(flow);
    lines.extend(groups.into_values().flatten());
    lines
}

/// `value` in RFC 8785 form, as one line of the canonical output.
pub fn jcs(value: &Value) -> String {
    domain::canonical::jcs(value)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Fields the clock or scheduling decide: offsets and ids of the record,
/// clock readings and durations.
const VOLATILE: &[&str] = &[
    "id",
    "offset",
    "timestamp",
    "runId",
    "parentRunId",
    "snapshotOffset",
    "durationMs",
    "duration_ms",
    "execution_time_ms",
    "startedAt",
    "endedAt",
    "updatedAt",
];

/// Leaves out what the clock and scheduling decide, and names node runs
/// and child runs by position.
fn strip(
    value: &mut Value,
    names: &HashMap<String, String>,
    children: &HashMap<String, String>,
    minted: &mut Minted<'_>,
) {
    match value {
        Value::Object(map) => {
            for key in VOLATILE {
                map.remove(*key);
            }
            for v in map.values_mut() {
                strip(v, names, children, minted);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| strip(v, names, children, minted)),
        Value::String(s) => {
            if let Some(name) = names.get(s.as_str()).or_else(|| children.get(s.as_str())) {
                *s = name.clone();
            } else if s.starts_with(minted.prefix) {
                let group = minted.group;
                let own = format!("{group}/");
                let n = minted.ids.values().filter(|v| v.starts_with(&own)).count();
                *s = minted
                    .ids
                    .entry(s.clone())
                    .or_insert_with(|| format!("{group}/id{n}"))
                    .clone();
            }
        }
        _ => {}
    }
}

/// The ids a replay minted, and the names they get in the canonical form.
struct Minted<'a> {
    prefix: &'a str,
    group: &'a str,
    ids: &'a mut HashMap<String, String>,
}

/// The generator seed of a recording's `idSeed`.
pub fn id_seed(seed: &str) -> u64 {
    u64::from_str_radix(&domain::canonical::sha256_hex(seed.as_bytes())[..16], 16).unwrap_or(0)
}

/// What every id the replay's generator mints starts with (its seed part).
fn minted_prefix(seed: &str) -> String {
    use crate::ports::IdGen;
    let id = super::SeededIds::new(id_seed(seed)).uuid().to_string();
    id[..18].to_owned()
}
