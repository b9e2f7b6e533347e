//! Edge conditions: the `when:` expressions of a workflow, written in CEL.
//!
//! CEL (Common Expression Language) is small, side-effect free and always
//! terminates, so a workflow author can branch on an agent's output without
//! the runner executing arbitrary code. Conditions are compiled once, while the
//! workflow is validated, so a typo is reported before anything runs; the
//! runner then evaluates them against JSON variables (`output`, `outputs`,
//! `input`; see `docs/workflow-format.md`).

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

/// A compiled `when:` expression. Cheap to clone and shareable across threads,
/// because the runner evaluates conditions from whichever task finished a node.
#[derive(Clone)]
pub struct Condition {
    source: Arc<str>,
    program: Arc<cel::Program>,
}

/// Why a condition could not be compiled or did not yield a decision.
/// Every message quotes the expression, since a workflow may hold many.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConditionError {
    /// Not valid CEL; reported while the workflow is validated.
    #[error("{0}")]
    Compile(String),
    /// Valid CEL that failed on these variables (unknown variable, missing
    /// field, type mismatch, ...).
    #[error("{0}")]
    Eval(String),
    /// Evaluated to something other than a bool: an edge must fire or not.
    #[error("{0}")]
    NotBool(String),
}

impl Condition {
    /// Compiles `src` as a CEL expression; fails on a syntax error.
    pub fn compile(src: &str) -> Result<Condition, ConditionError> {
        let program = cel::Program::compile(src).map_err(|e| {
            ConditionError::Compile(format!("`{src}` is not a valid CEL expression: {e}"))
        })?;
        Ok(Condition {
            source: Arc::from(src),
            program: Arc::new(program),
        })
    }

    /// The expression as written, for messages and snapshots.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the condition with `vars` bound as CEL variables.
    /// Variables are JSON values (objects become CEL maps, arrays lists, etc.).
    pub fn evaluate(&self, vars: &Map<String, Value>) -> Result<bool, ConditionError> {
        let eval_err = |e: &dyn fmt::Display| {
            ConditionError::Eval(format!("`{}` failed to evaluate: {e}", self.source))
        };
        let mut ctx = cel::Context::default();
        for (name, value) in vars {
            ctx.add_variable(name.as_str(), value)
                .map_err(|e| eval_err(&e))?;
        }
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(ConditionError::NotBool(format!(
                "`{}` evaluated to {}, not a bool",
                self.source,
                describe(&other)
            ))),
            Err(e) => Err(eval_err(&e)),
        }
    }
}

/// A short rendering of a non-bool result: JSON when it has one, else CEL's debug form.
fn describe(value: &cel::Value) -> String {
    match value.json() {
        Ok(json) => json.to_string(),
        Err(_) => format!("{value:?}"),
    }
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

/// Two conditions are the same when they were written the same: compiling is deterministic.
impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("vars must be an object"),
        }
    }

    fn eval(src: &str, v: Value) -> Result<bool, ConditionError> {
        Condition::compile(src).unwrap().evaluate(&vars(v))
    }

    #[test]
    fn conditions_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Condition>();
    }

    #[test]
    fn evaluates_against_json_variables() {
        let cases = [
            (
                "output.contains(\"APPROVED\")",
                json!({"output": "ok, APPROVED"}),
                true,
            ),
            (
                "output.contains(\"APPROVED\")",
                json!({"output": "REJECTED"}),
                false,
            ),
            (
                "output.score > 0.5",
                json!({"output": {"score": 0.7}}),
                true,
            ),
            (
                "output.score > 0.5",
                json!({"output": {"score": 0.2}}),
                false,
            ),
            ("output.count >= 3", json!({"output": {"count": 5}}), true),
            (
                "input.mode == \"fast\"",
                json!({"input": {"mode": "fast"}}),
                true,
            ),
            (
                "outputs.review.ok && size(outputs) == 2",
                json!({"outputs": {"review": {"ok": true}, "draft": "x"}}),
                true,
            ),
            (
                "output.tags.exists(t, t == \"urgent\")",
                json!({"output": {"tags": ["a", "urgent"]}}),
                true,
            ),
            ("has(output.score)", json!({"output": {}}), false),
            ("output == null", json!({"output": null}), true),
            (
                "output.matches(\"^OK\")",
                json!({"output": "OK then"}),
                true,
            ),
        ];
        for (src, v, want) in cases {
            assert_eq!(eval(src, v), Ok(want), "{src}");
        }
    }

    /// The examples table of docs/workflow-format.md, each with variables that make it true.
    #[test]
    fn documented_examples_hold() {
        let text = json!({"output": format!("OK, APPROVED {}", "x".repeat(100))});
        let digits = json!({"output": "12345"});
        let data = json!({"output": {
            "score": 0.9, "verdict": "APPROVED", "error": "e", "tags": ["urgent"],
            "items": [{"severity": "high", "done": true}, {"severity": "low", "done": true}]
        }});
        let run = json!({"input": {"mode": "fast"}, "outputs": {"review": {"score": 0.95}}});
        let cases = [
            ("output.contains(\"APPROVED\")", &text),
            ("output.startsWith(\"OK\")", &text),
            ("output.matches(\"^[0-9]+$\")", &digits),
            ("size(output) > 100", &text),
            ("output.score > 0.5", &data),
            (
                "output.verdict == \"APPROVED\" && output.score >= 0.8",
                &data,
            ),
            ("has(output.error)", &data),
            ("\"urgent\" in output.tags", &data),
            ("output.items.exists(i, i.severity == \"high\")", &data),
            ("output.items.all(i, i.done)", &data),
            ("input.mode == \"fast\"", &run),
            ("outputs.review.score > 0.9", &run),
            ("!(output.contains(\"REJECTED\"))", &text),
        ];
        for (src, v) in cases {
            assert_eq!(eval(src, v.clone()), Ok(true), "{src}");
        }
    }

    #[test]
    fn non_bool_result_is_refused() {
        let err = eval("output.score", json!({"output": {"score": 0.7}})).unwrap_err();
        assert!(
            matches!(&err, ConditionError::NotBool(m) if m.contains("`output.score`") && m.contains("0.7")),
            "{err}"
        );
    }

    #[test]
    fn syntax_error_is_a_compile_error() {
        let err = Condition::compile("output.contains(").unwrap_err();
        assert!(
            matches!(&err, ConditionError::Compile(m) if m.contains("`output.contains(`")),
            "{err}"
        );
        assert!(matches!(
            Condition::compile(""),
            Err(ConditionError::Compile(_))
        ));
    }

    #[test]
    fn evaluation_failures_are_errors() {
        for (src, v) in [
            ("missing == 1", json!({})),
            ("output.nope == 1", json!({"output": {}})),
            ("output > 1", json!({"output": "text"})),
            ("1 / output == 0", json!({"output": 0})),
        ] {
            let err = eval(src, v).unwrap_err();
            assert!(
                matches!(&err, ConditionError::Eval(m) if m.contains(src)),
                "{src}: {err}"
            );
        }
    }

    #[test]
    fn keeps_its_source() {
        let c = Condition::compile("true").unwrap();
        assert_eq!(c.source(), "true");
        assert_eq!(c, c.clone());
        assert_eq!(format!("{c:?}"), "Condition(\"true\")");
    }

    proptest::proptest! {
        #[test]
        fn compile_never_panics(src in "\\PC{0,64}") {
            if let Ok(c) = Condition::compile(&src) {
                let _ = c.evaluate(&vars(json!({"output": "x", "input": {"a": [1, 2.5, null]}})));
            }
        }

        #[test]
        fn compile_never_panics_on_cel_like_text(src in "[a-z0-9.()\\[\\]{}<>=!&|+*/%?:,'\" -]{0,48}") {
            if let Ok(c) = Condition::compile(&src) {
                let _ = c.evaluate(&vars(json!({"output": {"a": 1}, "outputs": {}, "input": null})));
            }
        }
    }
}
