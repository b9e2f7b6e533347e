//! `approval:` nodes: the run waits for a person's answer (docs/approvals.md).
//!
//! An approval node asks once per node run (`approval:requested`, with the
//! prompt as shown, the answer's schema and the deadline) and ends with the
//! answer (`approval:resolved`): its output data is `{approved, data, by,
//! at, reason}`, which edges route on as on any output. The node run is the
//! address of the question: an answer names its `nodeRunId`, so answers to
//! concurrent approvals, or to the passes of a loop, cannot be confused.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::WorkflowError;
use super::duration::{RawDuration, Timeout};
use super::invalid::invalid;
use crate::condition::{ConditionError, Expression};

/// The longest prompt template accepted, in bytes.
const MAX_PROMPT: usize = 64 * 1024;

/// The most names `approvers` may list.
const MAX_APPROVERS: usize = 64;

/// An `approval:` node.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalDef {
    /// What the person is shown, rendered when the node run asks.
    pub prompt: Template,
    /// A JSON Schema an approval's `data` must meet; none takes any.
    pub schema: Option<Arc<Value>>,
    /// How long the question stays open; none waits for ever.
    pub timeout: Option<Timeout>,
    /// What an unanswered question becomes at its deadline.
    pub on_timeout: OnTimeout,
    /// Who may answer (callers' names: a token's name, `user@host`); none
    /// lets anyone who may command the run.
    pub approvers: Vec<String>,
}

/// What a question left unanswered past its deadline becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// A rejection: the node completes with `approved: false`.
    #[default]
    Reject,
    /// An approval with no data.
    Approve,
    /// The node fails.
    Fail,
}

impl OnTimeout {
    /// The name in workflow files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Approve => "approve",
            Self::Fail => "fail",
        }
    }
}

/// Text with `{{ CEL }}` expressions in it, each replaced by its value
/// (a string as it is, anything else as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    source: Box<str>,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Expr(Expression),
}

impl Template {
    /// Compiles `src`: every `{{` must close, and what is between must be
    /// an expression over `input`, `outputs` and `loops` (as a node's
    /// `input:`).
    pub fn compile(src: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = src;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(format!(
                    "a `{{{{` at byte {} is never closed with `}}}}`",
                    src.len() - rest.len() + open
                ));
            };
            let expression = Expression::compile(after[..close].trim())
                .map_err(|e| format!("`{{{{ {} }}}}`: {e}", after[..close].trim()))?;
            parts.push(Part::Expr(expression));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self {
            source: src.into(),
            parts,
        })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The nodes its expressions read (`outputs.NAME`).
    pub fn nodes(&self) -> impl Iterator<Item = &String> {
        self.expressions().flat_map(Expression::nodes)
    }

    /// Its expressions.
    pub fn expressions(&self) -> impl Iterator<Item = &Expression> {
        self.parts.iter().filter_map(|part| match part {
            Part::Expr(e) => Some(e),
            Part::Text(_) => None,
        })
    }

    /// The text with each expression's value in its place.
    pub fn render(&self, vars: &Map<String, Value>) -> Result<String, ConditionError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Expr(expression) => match expression.evaluate(vars)? {
                    Value::String(s) => out.push_str(&s),
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        Ok(out)
    }
}

/// `approval:` as written: a prompt alone, or the mapping.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an approval: a prompt, or `{prompt, schema?, timeout?, on_timeout?: reject|approve|fail, approvers?: [NAME]}`"
)]
pub(super) struct RawApproval {
    prompt: String,
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    timeout: Option<RawDuration>,
    #[serde(default)]
    on_timeout: Option<OnTimeout>,
    #[serde(default)]
    approvers: Option<Vec<String>>,
}

impl RawApproval {
    /// The short form: a prompt alone.
    pub(super) fn prompt(prompt: String) -> Self {
        Self {
            prompt,
            schema: None,
            timeout: None,
            on_timeout: None,
            approvers: None,
        }
    }
}

/// Checks and lowers `approval:` of the node `item` names.
pub(super) fn lower_approval(item: &str, raw: RawApproval) -> Result<ApprovalDef, WorkflowError> {
    if raw.prompt.trim().is_empty() {
        return Err(invalid(item, "`approval.prompt` must not be empty"));
    }
    if raw.prompt.len() > MAX_PROMPT {
        return Err(invalid(
            item,
            format!("`approval.prompt` is over {MAX_PROMPT} bytes"),
        ));
    }
    let prompt = Template::compile(&raw.prompt)
        .map_err(|e| invalid(item, format!("`approval.prompt`: {e}")))?;
    let schema = match raw.schema {
        Some(schema) => {
            if let Err(e) = jsonschema::options().offline().build(&schema) {
                return Err(invalid(
                    item,
                    format!("`approval.schema` is not a JSON Schema: {e}"),
                ));
            }
            Some(Arc::new(schema))
        }
        None => None,
    };
    let timeout = (raw.timeout.map(|d| d.resolve("approval.timeout")))
        .transpose()
        .map_err(|e| invalid(item, e))?;
    if raw.on_timeout.is_some() && timeout.is_none() {
        return Err(invalid(
            item,
            "`approval.on_timeout` goes with `approval.timeout`: without a deadline it never applies",
        ));
    }
    let approvers = raw.approvers.unwrap_or_default();
    if approvers.len() > MAX_APPROVERS {
        return Err(invalid(
            item,
            format!("`approval.approvers` lists more than {MAX_APPROVERS} names"),
        ));
    }
    if let Some(bad) = approvers
        .iter()
        .find(|a| a.trim().is_empty() || a.chars().any(char::is_control))
    {
        return Err(invalid(
            item,
            format!(
                "`approval.approvers`: `{}` is not a caller's name",
                bad.escape_debug()
            ),
        ));
    }
    Ok(ApprovalDef {
        prompt,
        schema,
        timeout,
        on_timeout: raw.on_timeout.unwrap_or_default(),
        approvers,
    })
}

/// Whether `data` meets `schema`; the first error otherwise, naming where.
pub fn check_answer(schema: &Value, data: &Value) -> Result<(), String> {
    let validator = (jsonschema::options().offline().build(schema)).map_err(|e| e.to_string())?;
    match validator.iter_errors(data).next() {
        None => Ok(()),
        Some(error) => {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() {
                "the data".to_owned()
            } else {
                format!("`data{at}`")
            };
            Err(format!("{at} does not meet the approval's schema: {error}"))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_renders_strings_as_they_are_and_the_rest_as_json() {
        let t = Template::compile(
            "Publish {{ outputs.draft.title }} ({{ outputs.draft.words }} words)?",
        )
        .unwrap();
        let mut vars = Map::new();
        vars.insert("input".into(), json!(null));
        vars.insert("loops".into(), json!({}));
        vars.insert(
            "outputs".into(),
            json!({"draft": {"title": "Rust", "words": 120}}),
        );
        assert_eq!(t.render(&vars).unwrap(), "Publish Rust (120 words)?");
        assert_eq!(t.nodes().collect::<Vec<_>>(), ["draft", "draft"]);
        assert_eq!(
            Template::compile("plain").unwrap().render(&vars).unwrap(),
            "plain"
        );
    }

    #[test]
    fn a_bad_template_is_refused_with_its_place() {
        let open = Template::compile("a {{ input").unwrap_err();
        assert!(
            open.contains("byte 2") && open.contains("never closed"),
            "{open}"
        );
        let bad = Template::compile("{{ nope.x }}").unwrap_err();
        assert!(bad.contains("nope"), "{bad}");
    }

    #[test]
    fn an_answer_is_checked_against_the_schema_naming_the_field() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        assert!(check_answer(&schema, &json!({"n": 3})).is_ok());
        let wrong = check_answer(&schema, &json!({"n": "x"})).unwrap_err();
        assert!(wrong.contains("`data/n`"), "{wrong}");
        let missing = check_answer(&schema, &json!({})).unwrap_err();
        assert!(missing.contains("the data"), "{missing}");
    }
}
