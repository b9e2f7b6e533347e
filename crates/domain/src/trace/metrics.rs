//! Metrics from the same projection: what an ended span counts for, as the
//! GenAI conventions' client metrics and awr's own run and node-run
//! durations.
//!
//! Why from spans: a span is already the one reading of the log that says
//! what a call, a node run or a run was and how it ended, so the metrics
//! cannot disagree with the trace. Only the instruments and the attributes
//! they keep are decided here; aggregating and sending is an exporter's.

use super::{AttrValue, Attributes, Span, SpanStatus};

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instrument {
    /// `gen_ai.client.token.usage`: the tokens of a provider call, one
    /// measurement for its input and one for its output.
    TokenUsage,
    /// `gen_ai.client.operation.duration`: how long a provider call took.
    OperationDuration,
    /// `awr.run.duration`: how long a run took, by how it ended; its count
    /// is the runs that ended.
    RunDuration,
    /// `awr.node_run.duration`: how long a node run's attempt took, by how
    /// it ended; its count is the attempts that ended.
    NodeRunDuration,
}

impl Instrument {
    /// Every instrument.
    pub const ALL: [Self; 4] = [
        Self::TokenUsage,
        Self::OperationDuration,
        Self::RunDuration,
        Self::NodeRunDuration,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::TokenUsage => "gen_ai.client.token.usage",
            Self::OperationDuration => "gen_ai.client.operation.duration",
            Self::RunDuration => "awr.run.duration",
            Self::NodeRunDuration => "awr.node_run.duration",
        }
    }

    /// Its unit, as UCUM writes it.
    pub fn unit(self) -> &'static str {
        match self {
            Self::TokenUsage => "{token}",
            _ => "s",
        }
    }

    /// What it measures.
    pub fn description(self) -> &'static str {
        match self {
            Self::TokenUsage => "Number of input and output tokens used",
            Self::OperationDuration => "GenAI operation duration",
            Self::RunDuration => "Duration of awr runs, by how they ended",
            Self::NodeRunDuration => "Duration of awr node runs' attempts, by how they ended",
        }
    }

    /// The histogram's bucket boundaries: the conventions' advice for their
    /// two; for runs and node runs, seconds to an hour.
    pub fn boundaries(self) -> &'static [f64] {
        match self {
            Self::TokenUsage => &[
                1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
                4194304.0, 16777216.0, 67108864.0,
            ],
            Self::OperationDuration => &[
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
                81.92,
            ],
            Self::RunDuration | Self::NodeRunDuration => &[
                0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
            ],
        }
    }
}

/// A measured value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Tokens.
    Tokens(u64),
    /// Seconds.
    Seconds(f64),
}

/// One value for one instrument, with the attributes it is kept by.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The instrument.
    pub instrument: Instrument,
    /// The value.
    pub value: Value,
    /// What it is kept by (few values each: no ids).
    pub attributes: Attributes,
}

/// What `span` counts for once it has ended: a provider call its duration
/// and tokens, a node run's attempt and a run their durations by status.
/// A span still open or an `execute_tool` span counts for nothing.
pub fn measure(span: &Span) -> Vec<Measurement> {
    let Some(end) = span.end else {
        return Vec::new();
    };
    let seconds = Value::Seconds(end.millis_since(span.start) as f64 / 1000.0);
    let text = |key: &str| match span.attributes.get(key) {
        Some(AttrValue::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    let error = match &span.status {
        SpanStatus::Error(_) => Some(text("error.type").unwrap_or("_OTHER")),
        SpanStatus::Unset => None,
    };
    let copy = |keys: &[&'static str]| {
        let mut kept = Attributes::default();
        for key in keys {
            if let Some(value) = span.attributes.get(key) {
                kept.set(key, value.clone());
            }
        }
        kept
    };
    let one = |instrument, attributes| {
        vec![Measurement {
            instrument,
            value: seconds,
            attributes,
        }]
    };
    match text("gen_ai.operation.name") {
        Some("chat") => {
            let call = copy(&[
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.request.model",
                "gen_ai.response.model",
            ]);
            let tokens = |key: &str| match span.attributes.get(key) {
                Some(AttrValue::Int(n)) => u64::try_from(*n).ok(),
                _ => None,
            };
            let input = tokens("gen_ai.usage.input_tokens");
            let output = tokens("gen_ai.usage.output_tokens");
            let mut timed = call.clone();
            match (error, input) {
                (Some(error), _) => timed.text("error.type", error),
                // Cut short by an interruption: neither answered nor failed.
                (None, None) => timed.text("error.type", "interrupted"),
                (None, Some(_)) => {}
            }
            let mut measured = one(Instrument::OperationDuration, timed);
            for (kind, n) in [("input", input), ("output", output)] {
                if let Some(n) = n {
                    let mut attributes = call.clone();
                    attributes.text("gen_ai.token.type", kind);
                    measured.push(Measurement {
                        instrument: Instrument::TokenUsage,
                        value: Value::Tokens(n),
                        attributes,
                    });
                }
            }
            measured
        }
        Some("invoke_workflow") => {
            let mut attributes = copy(&["gen_ai.workflow.name"]);
            let status = match (text("awr.status"), error) {
                (Some("cancelled"), _) => "cancelled",
                (_, Some(error)) => {
                    attributes.text("error.type", error);
                    "failed"
                }
                (_, None) => "completed",
            };
            attributes.text("awr.run.status", status);
            one(Instrument::RunDuration, attributes)
        }
        Some("execute_tool") => Vec::new(),
        _ if span.attributes.get("awr.node_run.id").is_some() => {
            let mut attributes =
                copy(&["awr.node.kind", "gen_ai.agent.name", "gen_ai.provider.name"]);
            let interrupted =
                span.attributes.get("awr.interrupted") == Some(&AttrValue::Bool(true));
            let status = match (error, interrupted) {
                (Some(error), _) => {
                    attributes.text("error.type", error);
                    "failed"
                }
                (None, true) => "interrupted",
                (None, false) => "completed",
            };
            attributes.text("awr.node_run.status", status);
            one(Instrument::NodeRunDuration, attributes)
        }
        _ => Vec::new(),
    }
}
