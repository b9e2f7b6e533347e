//! Edge conditions: the `when:` expressions of a workflow, written in CEL.
//!
//! CEL (Common Expression Language) is small, side-effect free and always
//! terminates, so a workflow author can branch on an agent's output without
//! the runner executing arbitrary code. Conditions are compiled once, while the
//! workflow is validated, so a typo is reported before anything runs; the
//! runner then evaluates them against JSON variables (`output`, `outputs`,
//! `input`; see `docs/workflow-format.md`).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::{Map, Value};

use functions::{MACROS, is_function, is_identifier};

mod functions;

/// The variables a condition may read (see `docs/workflow-format.md`).
pub const VARIABLES: [&str; 3] = ["output", "outputs", "input"];

/// The variables a node's `input:` and `for_each:` expressions may read
/// (`item` and `index` are bound only under `for_each`).
pub const INPUT_VARIABLES: [&str; 5] = ["input", "outputs", "loops", "item", "index"];

/// What a tool grant's `requires_approval:` condition reads: the
/// arguments the model called the tool with.
pub const TOOL_VARIABLES: [&str; 1] = ["args"];

/// Longest condition accepted, in bytes. Conditions are one-liners; the bound
/// keeps parsing cheap and every error position small.
pub const MAX_LEN: usize = 4096;

/// Deepest nesting of `(`, `[` and `{` accepted. CEL's parser recurses
/// through about ten grammar rules per bracket, so depth is checked on the
/// text, before parsing: a few hundred brackets would overflow the stack.
pub const MAX_NESTING: usize = 8;

/// Deepest expression tree accepted (`1 + 1 + ...` nests without brackets).
/// Evaluation recurses over the tree, so this bounds its stack too.
pub const MAX_DEPTH: usize = 32;

/// Most comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) in
/// one condition. They are CEL's only loops, so with the rules below they bound
/// its run-time cost: no comprehension ranges over another's result (a chain
/// of `.map(x, [x, x])` doubles its value each time), and they nest at most
/// [`MAX_COMPREHENSION_NESTING`] deep, so the cost grows with the size of the
/// variables at most to that power.
pub const MAX_COMPREHENSIONS: usize = 4;

/// Deepest nesting of comprehensions, each in the body of the one around it
/// (`output.items.exists(i, i.tags.exists(t, ...))` is 2).
pub const MAX_COMPREHENSION_NESTING: usize = 2;

/// Type names CEL resolves as identifiers (`type(output) == string`).
const TYPE_NAMES: [&str; 11] = [
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// A compiled `when:` expression. Cheap to clone and shareable across threads,
/// because the runner evaluates conditions from whichever task finished a node.
///
/// One shared allocation: a workflow holds one per edge condition and per
/// `input:`, so a node or an edge without one pays a null pointer, and a
/// long workflow stays small.
#[derive(Clone)]
pub struct Condition(Arc<Compiled>);

/// What compiling a [`Condition`] produced.
struct Compiled {
    source: Box<str>,
    program: cel::Program,
    /// Node ids read as `outputs.<id>` or `outputs["<id>"]`, so validation
    /// can check that they exist.
    nodes: Box<[String]>,
    /// The variables it reads, sorted, so validation can tell where they are bound.
    variables: Box<[String]>,
    /// It reads `outputs` as a whole (`size(outputs)`, `"x" in outputs`, a
    /// comprehension over it), not only node by node through `nodes`.
    outputs_whole: bool,
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
    /// Compiles `src` as a CEL expression; fails on a syntax error, on an
    /// expression beyond the size limits ([`MAX_LEN`], [`MAX_NESTING`],
    /// [`MAX_DEPTH`]) or the cost limits ([`MAX_COMPREHENSIONS`],
    /// [`MAX_COMPREHENSION_NESTING`], no comprehension over another's result)
    /// and on a name that is not one of [`VARIABLES`]; and one that reads no
    /// variable, on any failure of its one evaluation or a value not a bool.
    pub fn compile(src: &str) -> Result<Condition, ConditionError> {
        let condition = Self::compile_reading(src, &VARIABLES)?;
        // Reading no variable, it has one value, known now: a condition
        // that can only fail is refused with the workflow (`awr validate`),
        // not when its edge is decided mid-run.
        if condition.0.variables.is_empty() {
            condition
                .evaluate(&Map::new())
                .map_err(|e| ConditionError::Compile(e.to_string()))?;
        }
        Ok(condition)
    }

    /// [`Self::compile`] for a tool grant's `requires_approval:`, which
    /// reads [`TOOL_VARIABLES`].
    pub fn compile_over_args(src: &str) -> Result<Condition, ConditionError> {
        let condition = Self::compile_reading(src, &TOOL_VARIABLES)?;
        if condition.0.variables.is_empty() {
            condition
                .evaluate(&Map::new())
                .map_err(|e| ConditionError::Compile(e.to_string()))?;
        }
        Ok(condition)
    }

    /// [`Self::compile`] for an expression that may read `variables`.
    fn compile_reading(src: &str, variables: &[&str]) -> Result<Condition, ConditionError> {
        let refuse = |why: String| ConditionError::Compile(format!("`{}` {why}", shorten(src)));
        if src.len() > MAX_LEN {
            return Err(ConditionError::Compile(format!(
                "the condition is {} bytes long; at most {MAX_LEN} are allowed",
                src.len()
            )));
        }
        let nesting = nesting(src);
        if nesting > MAX_NESTING {
            return Err(refuse(format!(
                "nests brackets {nesting} deep; at most {MAX_NESTING} levels are allowed"
            )));
        }
        let program = cel::Program::compile(src).map_err(|e| {
            refuse(format!(
                "is not a valid CEL expression: {}",
                parse_errors(&e)
            ))
        })?;
        let depth = depth(program.expression());
        if depth > MAX_DEPTH {
            return Err(refuse(format!(
                "is {depth} levels deep; at most {MAX_DEPTH} are allowed (split it, or use `&&` / `||`)"
            )));
        }
        let mut loops = Loops::default();
        loops.walk(program.expression(), 0, false);
        if loops.count > MAX_COMPREHENSIONS {
            return Err(refuse(format!(
                "has {} comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`); at most {MAX_COMPREHENSIONS} are allowed",
                loops.count
            )));
        }
        if loops.chained {
            return Err(refuse(
                "ranges over the result of another comprehension (as in `.map(...).map(...)`), which can grow exponentially; compute each from `output`, `outputs` or `input`".to_owned(),
            ));
        }
        if loops.deepest > MAX_COMPREHENSION_NESTING {
            return Err(refuse(format!(
                "nests comprehensions {} deep; at most {MAX_COMPREHENSION_NESTING} are allowed",
                loops.deepest
            )));
        }
        let mut names = Names {
            variables,
            unknown: Vec::new(),
            nodes: BTreeSet::new(),
            read: BTreeSet::new(),
            outputs_whole: false,
            functions: BTreeSet::new(),
        };
        names.walk(program.expression(), &mut Vec::new());
        if let Some(unknown) = names.unknown.first() {
            let known: Vec<String> = variables.iter().map(|v| format!("`{v}`")).collect();
            return Err(refuse(format!(
                "reads `{unknown}`, which is not a variable (it may read {})",
                known.join(", ")
            )));
        }
        if let Some((unknown, _)) = names
            .functions
            .iter()
            .find(|(name, member)| !is_function(name, *member))
        {
            return Err(refuse(if MACROS.contains(&unknown.as_str()) {
                format!("calls the macro `{unknown}` with the wrong number of arguments")
            } else {
                format!("calls `{unknown}`, which is not a CEL function")
            }));
        }
        Ok(Condition(Arc::new(Compiled {
            source: Box::from(src),
            program,
            nodes: names.nodes.into_iter().collect(),
            variables: names.read.into_iter().collect(),
            outputs_whole: names.outputs_whole,
        })))
    }

    /// Node ids this condition reads through `outputs`.
    pub fn nodes(&self) -> &[String] {
        &self.0.nodes
    }

    /// The node ids whose outputs an evaluation needs in `outputs`: those of
    /// [`Self::nodes`], or `None` when it reads the map whole (then every
    /// finished node's). Lets a caller bind only what is read.
    pub fn output_nodes(&self) -> Option<&[String]> {
        (!self.0.outputs_whole).then_some(&*self.0.nodes)
    }

    /// The expression as written, for messages and snapshots.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// Evaluates the condition with `vars` bound as CEL variables.
    /// Variables are JSON values (objects become CEL maps, arrays lists, etc.).
    pub fn evaluate(&self, vars: &Map<String, Value>) -> Result<bool, ConditionError> {
        match self.execute(vars)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(ConditionError::NotBool(format!(
                "`{}` evaluated to {}, not a bool",
                shorten(&self.0.source),
                describe(&other)
            ))),
        }
    }

    fn execute(&self, vars: &Map<String, Value>) -> Result<cel::Value, ConditionError> {
        let mut ctx = cel::Context::default();
        for (name, value) in vars {
            ctx.add_variable_from_value(name.as_str(), to_cel(value));
        }
        self.0.program.execute(&ctx).map_err(|e| {
            ConditionError::Eval(format!(
                "`{}` failed to evaluate: {e}",
                shorten(&self.0.source)
            ))
        })
    }
}

/// A compiled CEL expression whose value is data: a node's `input:` or
/// `for_each:`. Same language, limits and checks as [`Condition`]; it reads
/// [`INPUT_VARIABLES`].
#[derive(Clone, PartialEq)]
pub struct Expression(Condition);

impl Expression {
    /// Compiles `src`; fails as [`Condition::compile`] does.
    pub fn compile(src: &str) -> Result<Expression, ConditionError> {
        let expression = Condition::compile_reading(src, &INPUT_VARIABLES).map(Expression)?;
        // As a condition: one that reads no variable fails now or never.
        if expression.variables().is_empty() {
            expression
                .evaluate(&Map::new())
                .map_err(|e| ConditionError::Compile(e.to_string()))?;
        }
        Ok(expression)
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        self.0.source()
    }

    /// Node ids it reads through `outputs`.
    pub fn nodes(&self) -> &[String] {
        self.0.nodes()
    }

    /// See [`Condition::output_nodes`].
    pub fn output_nodes(&self) -> Option<&[String]> {
        self.0.output_nodes()
    }

    /// The variables it reads (of [`INPUT_VARIABLES`]), sorted.
    pub fn variables(&self) -> &[String] {
        &self.0.0.variables
    }

    /// Its value as JSON, with `vars` bound.
    pub fn evaluate(&self, vars: &Map<String, Value>) -> Result<Value, ConditionError> {
        let value = self.0.execute(vars)?;
        value.json().map_err(|e| {
            ConditionError::Eval(format!(
                "`{}` evaluated to a value with no JSON form: {e}",
                shorten(self.source())
            ))
        })
    }
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source()).finish()
    }
}

/// A JSON value as CEL sees it. Whole numbers that fit are `int`, so
/// `output.count + 1` works: serde would hand CEL a non-negative number as
/// `uint`, and CEL has no `uint + int`.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            (None, None) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => cel::Value::from(text.as_str()),
        Value::Array(items) => cel::Value::from(items.iter().map(to_cel).collect::<Vec<_>>()),
        Value::Object(fields) => cel::Value::from(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<std::collections::HashMap<_, _>>(),
        ),
    }
}

/// An expression as quoted in a message: up to 120 characters, then `...`.
fn shorten(src: &str) -> String {
    const SHOWN: usize = 120;
    match src.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &src[..cut]),
        None => src.to_owned(),
    }
}

/// CEL's parse errors as `line:column: message`. Its own rendering draws a
/// caret line with a width format argument, which panics past column 65,535.
fn parse_errors(errors: &cel::ParseErrors) -> String {
    let mut shown: Vec<String> = errors
        .errors
        .iter()
        .take(3)
        .map(|e| {
            let msg: String = e.msg.chars().take(200).collect();
            format!("{}:{}: {msg}", e.pos.0, e.pos.1)
        })
        .collect();
    if errors.errors.len() > 3 {
        shown.push(format!("and {} more", errors.errors.len() - 3));
    }
    shown.join("; ")
}

/// The deepest nesting of brackets in `src`, outside string literals. An
/// unterminated string is read as code, so a bracket the parser may still
/// see is never missed; brackets in comments count (too many, never too few).
fn nesting(src: &str) -> usize {
    let bytes = src.as_bytes();
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            quote @ (b'"' | b'\'') => {
                if let Some(end) = string_end(bytes, i, quote) {
                    i = end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// Where the string literal opened by the quote at `start` closes (the index
/// of its last quote), or `None` when it does not: CEL's `"..."`, `'...'`,
/// their tripled forms, and raw strings (`r"..."`, no escapes).
fn string_end(bytes: &[u8], start: usize, quote: u8) -> Option<usize> {
    let raw = start > 0 && matches!(bytes[start - 1], b'r' | b'R');
    let triple = bytes.get(start..start + 3) == Some(&[quote, quote, quote][..]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if !raw => i += 1,
            b'\n' | b'\r' if !triple => return None,
            c if c == quote => {
                if !triple {
                    return Some(i);
                }
                if bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
                    return Some(i + 2);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The depth of an expression tree, walked without recursion: the tree may
/// be deeper than the stack allows before it is refused.
fn depth(root: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut todo = vec![(root, 1usize)];
    while let Some((expr, d)) = todo.pop() {
        deepest = deepest.max(d);
        todo.extend(children(expr).into_iter().map(|c| (c, d + 1)));
    }
    deepest
}

fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => Vec::new(),
        Expr::Call(call) => call.target.iter().map(|t| &**t).chain(&call.args).collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Struct(st) => st.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Select(select) => vec![&*select.operand],
    }
}

fn entry(e: &EntryExpr) -> Vec<&IdedExpr> {
    match e {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    }
}

/// The comprehensions of an expression, the loops that set its run-time cost.
/// Recursive; only run on trees within [`MAX_DEPTH`].
#[derive(Default)]
struct Loops {
    count: usize,
    /// Deepest nesting of comprehensions in bodies.
    deepest: usize,
    /// Some comprehension ranges over an expression holding another one.
    chained: bool,
}

impl Loops {
    /// `nesting`: comprehensions around `expr`; `in_range`: `expr` is part of
    /// a comprehension's range.
    fn walk(&mut self, expr: &IdedExpr, nesting: usize, in_range: bool) {
        if let Expr::Comprehension(c) = &expr.expr {
            self.count += 1;
            self.chained |= in_range;
            self.deepest = self.deepest.max(nesting + 1);
            self.walk(&c.iter_range, nesting, true);
            for e in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                self.walk(e, nesting + 1, false);
            }
        } else {
            for child in children(expr) {
                self.walk(child, nesting, in_range);
            }
        }
    }
}

/// The free names of an expression: unknown ones, and the node ids read
/// through `outputs`. Recursive; only run on trees within [`MAX_DEPTH`].
struct Names<'v> {
    variables: &'v [&'v str],
    unknown: Vec<String>,
    nodes: BTreeSet<String>,
    read: BTreeSet<String>,
    /// `outputs` is read other than as `outputs.<id>` or `outputs["<id>"]`.
    outputs_whole: bool,
    /// The functions it calls by a plain name (operators have none), and
    /// whether as a member (`x.f()`).
    functions: BTreeSet<(String, bool)>,
}

impl Names<'_> {
    /// `bound`: the comprehension variables in scope (`i` in `exists(i, ...)`).
    fn walk<'a>(&mut self, expr: &'a IdedExpr, bound: &mut Vec<&'a str>) {
        match &expr.expr {
            Expr::Ident(name) => {
                let name = name.as_str();
                let free = !bound.contains(&name) && !TYPE_NAMES.contains(&name);
                if free && self.variables.contains(&name) {
                    self.read.insert(name.to_owned());
                    self.outputs_whole |= name == "outputs";
                } else if free {
                    self.unknown.push(name.to_owned());
                }
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, bound);
                self.walk(&c.accu_init, bound);
                let before = bound.len();
                bound.push(&c.iter_var);
                bound.extend(c.iter_var2.as_deref());
                bound.push(&c.accu_var);
                for e in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.walk(e, bound);
                }
                bound.truncate(before);
            }
            _ => {
                if let Expr::Call(call) = &expr.expr
                    && is_identifier(&call.func_name)
                {
                    let member = call.target.is_some();
                    self.functions.insert((call.func_name.clone(), member));
                }
                if let Some(node) = output_of(expr, bound)
                    && self.variables.contains(&"outputs")
                {
                    // `outputs` itself is the only other name there.
                    self.nodes.insert(node.to_owned());
                    self.read.insert("outputs".to_owned());
                    return;
                }
                for child in children(expr) {
                    self.walk(child, bound);
                }
            }
        }
    }
}

/// `outputs.<id>` or `outputs["<id>"]`, with `outputs` the variable: the id.
fn output_of<'a>(expr: &'a IdedExpr, bound: &[&str]) -> Option<&'a str> {
    let is_outputs = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == "outputs" && !bound.contains(&"outputs"));
    match &expr.expr {
        Expr::Select(select) if is_outputs(&select.operand) => Some(&select.field),
        Expr::Call(call) if call.func_name == "_[_]" && call.target.is_none() => {
            match call.args.as_slice() {
                [map, key] if is_outputs(map) => match &key.expr {
                    Expr::Literal(LiteralValue::String(id)) => Some(id.inner()),
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
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
        f.debug_tuple("Condition").field(&self.0.source).finish()
    }
}

/// Two conditions are the same when they were written the same: compiling is deterministic.
impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.0.source == other.0.source
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

    /// A call of a function CEL does not have is refused when compiled,
    /// even where the condition reads variables and is otherwise judged
    /// only when it runs; every function it has, member or not, compiles.
    #[test]
    fn a_function_cel_does_not_have_is_refused_when_compiled() {
        for (src, why) in [
            (
                "nosuchfn(output.x) > 1",
                "calls `nosuchfn`, which is not a CEL function",
            ),
            (
                "output.shout() == 'A'",
                "calls `shout`, which is not a CEL function",
            ),
            ("size(output) > 0 && lower(output) == 'a'", "calls `lower`"),
            (
                "output.exists(1)",
                "calls the macro `exists` with the wrong number",
            ),
        ] {
            let err = Condition::compile(src).unwrap_err();
            assert!(matches!(err, ConditionError::Compile(_)), "{src}: {err:?}");
            assert!(err.to_string().contains(why), "{src}: {err}");
        }
        assert!(Expression::compile("input.frobnicate()").is_err());
        for src in [
            "size(output) > 0",
            "output.size() > 0",
            "output.contains('a') && output.startsWith('a') && output.endsWith('a')",
            "output.matches('^a')",
            "string(int(output)) == '1' && double(output) > 0.0 && type(output) == string",
            "dyn(output) == 'a' && uint(1) == uint(1) && bytes('a') == b'a'",
            "[output].exists(x, x == 'a') && [output].all(x, true) && has(outputs.a)",
        ] {
            assert!(
                Condition::compile(src).is_ok(),
                "{src}: {:?}",
                Condition::compile(src)
            );
        }
    }

    #[test]
    fn conditions_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Condition>();
    }

    /// A condition or expression that reads no variable has one value: one
    /// that can only fail is refused when compiled, naming why.
    #[test]
    fn one_that_reads_no_variable_and_can_only_fail_is_refused_when_compiled() {
        for (src, why) in [
            ("1", "not a bool"),
            ("'yes'", "not a bool"),
            ("matches('x', '(')", "failed to evaluate"),
            ("no_such_function(1)", "not a CEL function"),
            ("1 / 0", "failed to evaluate"),
        ] {
            let err = Condition::compile(src).unwrap_err();
            assert!(matches!(err, ConditionError::Compile(_)), "{src}: {err:?}");
            assert!(err.to_string().contains(why), "{src}: {err}");
        }
        for src in ["true", "1 < 2", "'a' + 'b' == 'ab'"] {
            assert!(Condition::compile(src).is_ok(), "{src}");
        }
        // One that reads a variable is judged when it runs, as before.
        assert!(Condition::compile("size(output) > 0").is_ok());
        assert!(Expression::compile("1 / 0").is_err());
        assert_eq!(
            Expression::compile("[1, 2].map(x, x * 2)")
                .unwrap()
                .evaluate(&Map::new())
                .unwrap(),
            serde_json::json!([2, 4])
        );
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
                "output.count + 1 == 6",
                json!({"output": {"count": 5}}),
                true,
            ),
            (
                "output.delta - 1 < 0",
                json!({"output": {"delta": -2}}),
                true,
            ),
            (
                "output.score * 2.0 > 1.0",
                json!({"output": {"score": 0.7}}),
                true,
            ),
            (
                "size(input.items) + 1 == 3",
                json!({"input": {"items": [1, 2]}}),
                true,
            ),
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
            ("outputs.missing == 1", json!({"outputs": {}})),
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

    /// Compiles on a thread with the CLI main thread's stack (8 MiB): that
    /// is where workflows are loaded.
    fn compile_on_main_sized_stack(src: String) -> Result<Condition, ConditionError> {
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || Condition::compile(&src))
            .unwrap()
            .join()
            .unwrap()
    }

    /// The end of a long message, which holds what it says about the expression.
    fn tail(s: &str) -> &str {
        let from = s.len().saturating_sub(300);
        s.get(from..).unwrap_or(s)
    }

    fn compile_err(src: String) -> String {
        match compile_on_main_sized_stack(src) {
            Err(ConditionError::Compile(m)) => m,
            other => panic!("expected a compile error, got {other:?}"),
        }
    }

    #[test]
    fn an_error_past_column_65535_is_reported_not_a_panic() {
        let src = format!("{}1 +", " ".repeat(70_000));
        let err = compile_err(src);
        assert!(err.contains("at most 4096"), "{}", tail(&err));
        let src = format!("{}1 +", " ".repeat(MAX_LEN - 10));
        let err = compile_err(src);
        assert!(
            err.contains("not a valid CEL expression: 1:"),
            "{}",
            tail(&err)
        );
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        for (open, close) in [("(", ")"), ("[", "]"), ("size(", ")"), ("{1: ", "}")] {
            let most = (MAX_LEN - 10) / (open.len() + close.len());
            for n in [MAX_NESTING + 1, most] {
                let src = format!("{}1{} == 1", open.repeat(n), close.repeat(n));
                let err = compile_err(src);
                assert!(
                    err.contains(&format!("nests brackets {n} deep; at most 8")),
                    "{open}: {}",
                    tail(&err)
                );
            }
        }
        let ok = format!("{}true{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert!(compile_on_main_sized_stack(ok).is_ok());
        // Brackets in strings are text; a string left open is read as code.
        assert!(
            Condition::compile(r#"output.contains("((((((((((((") && output.contains(r'\')"#)
                .is_ok()
        );
        let open_string = format!("\"{}", "(".repeat(20));
        assert!(compile_err(open_string).contains("nests brackets 20 deep"));
        let newline = format!("'x\n{}'", "[".repeat(20));
        assert!(compile_err(newline).contains("nests brackets 20 deep"));
    }

    #[test]
    fn deep_trees_without_brackets_are_refused() {
        for chain in [" + 1", "['a']", ".a"] {
            let src = format!("output{} == 1", chain.repeat(800));
            let err = compile_err(src);
            assert!(
                err.contains("levels deep; at most 32"),
                "{chain}: {}",
                tail(&err)
            );
        }
        assert!(Condition::compile(&format!("1{} == 21", " + 1".repeat(20))).is_ok());
        let many_ors = format!("output == 0{}", " || output == 1".repeat(200));
        assert!(
            Condition::compile(&many_ors).is_ok(),
            "`||` chains are balanced"
        );
    }

    #[test]
    fn the_worst_accepted_shapes_compile_and_evaluate_on_a_small_stack() {
        let inner = format!("1{}", " + 1".repeat(25));
        let shapes = [
            format!("{}{inner}{} > 0", "size([".repeat(4), "])".repeat(4)),
            format!(
                "{}{inner}{} > 0",
                "(".repeat(MAX_NESTING),
                ")".repeat(MAX_NESTING)
            ),
            format!(
                "{}output{} == 1",
                "size(".repeat(MAX_NESTING),
                ")".repeat(MAX_NESTING)
            ),
        ];
        for src in shapes {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || {
                    if let Ok(c) = Condition::compile(&src) {
                        let _ = c.evaluate(&vars(json!({"output": "x"})));
                    }
                })
                .unwrap()
                .join()
                .unwrap();
        }
    }

    #[test]
    fn only_known_variables_may_be_read() {
        let err = Condition::compile("outptu.score > 1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "reads `outptu`, which is not a variable (it may read `output`, `outputs`, `input`)"
            ),
            "{err}"
        );
        assert!(
            Condition::compile("output.items.exists(i, i.done) && input.all(k, k != '')").is_ok()
        );
        assert!(
            Condition::compile("output.items.exists(i, i.done) && i").is_err(),
            "`i` is bound only inside"
        );
        assert!(Condition::compile("type(output) == string || type(output) == map").is_ok());
        assert!(Condition::compile("[1, 2].map(x, x * 2).size() > 0").is_ok());
        let c = Condition::compile("outputs.review.score > 1 && has(outputs.draft) && outputs['fix'] != null && output.outputs == 1").unwrap();
        assert_eq!(c.nodes(), ["draft", "fix", "review"]);
        assert_eq!(c.output_nodes(), Some(c.nodes()));
    }

    #[test]
    fn output_nodes_are_none_when_outputs_is_read_whole() {
        let reads = |src: &str| {
            Condition::compile(src)
                .unwrap()
                .output_nodes()
                .map(<[String]>::to_vec)
        };
        assert_eq!(reads("output == 1"), Some(vec![]));
        assert_eq!(
            reads("outputs.a.x.y > 1 || has(outputs.b) || outputs['c'] == 2"),
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(reads("outputs.a == 1 && size(outputs) == 2"), None);
        assert_eq!(reads("'a' in outputs"), None);
        assert_eq!(reads("outputs.exists(k, k == 'a')"), None);
        assert_eq!(reads("outputs[output] == 1"), None, "a computed key");
        assert_eq!(
            reads("[1].exists(outputs, outputs == 1) && outputs.a == 1"),
            Some(vec!["a".into()]),
            "a bound `outputs` is not the variable"
        );
        let e = Expression::compile("{'d': outputs.x, 'all': outputs}").unwrap();
        assert_eq!(e.output_nodes(), None);
        let e = Expression::compile("[outputs.x, input, loops.again]").unwrap();
        assert_eq!(e.output_nodes(), Some(&["x".to_owned()][..]));
        assert_eq!(e.variables(), ["input", "loops", "outputs"]);
    }

    #[test]
    fn comprehensions_are_bounded_before_evaluation() {
        // Each chained `map` doubles its elements: 25 of them would not finish.
        let chain = format!("size(output{}) > 0", ".map(x, [x, x])".repeat(25));
        assert!(chain.len() < MAX_LEN);
        let err = compile_err(chain);
        assert!(
            err.contains("has 25 comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`); at most 4 are allowed"),
            "{}",
            tail(&err)
        );
        for src in [
            "size(output.map(x, [x, x]).map(x, [x, x])) > 0",
            "output.filter(x, x > 1).exists(y, y > 2)",
            "[output.map(x, x)].all(y, true)",
        ] {
            let err = compile_err(src.to_owned());
            assert!(
                err.contains("ranges over the result of another comprehension"),
                "{src}: {err}"
            );
        }
        let nested = "output.all(a, output.all(b, output.all(c, a == b && b == c)))";
        let err = compile_err(nested.to_owned());
        assert!(
            err.contains("nests comprehensions 3 deep; at most 2 are allowed"),
            "{err}"
        );
        for ok in [
            "output.items.exists(i, i.tags.exists(t, t == 'urgent'))",
            "output.all(x, x > 0) && output.exists(x, x > 2) && size(output.map(x, [x, x])) > 0 && size(output.filter(x, x > 1)) > 0",
        ] {
            assert!(Condition::compile(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn the_costliest_accepted_comprehensions_finish_quickly() {
        // Four maps, each building a list of 100 copies of its element, over a list of 100.
        let copies = vec!["x"; 100].join(", ");
        let map = format!("size(output.map(x, [{copies}]))");
        let src = format!("{map} + {map} + {map} + {map} > 0");
        let c = Condition::compile(&src).unwrap();
        let started = std::time::Instant::now();
        let list: Vec<Value> = (0..100).map(|i| json!(i)).collect();
        assert_eq!(c.evaluate(&vars(json!({"output": list}))), Ok(true));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn messages_quote_a_long_expression_shortened() {
        let src = format!("1{} == ", " + 1".repeat(500));
        let err = compile_err(src).to_string();
        assert!(err.len() < 400, "{err}");
        assert!(
            err.starts_with("`1 + 1") && err.contains("...` is not a valid CEL expression"),
            "{err}"
        );
    }

    #[test]
    fn long_chains_of_operators_never_overflow_the_stack() {
        let src = format!("1{}", " + 1".repeat(1000));
        assert!(compile_on_main_sized_stack(src).is_err());
    }

    #[test]
    fn expressions_name_the_variables_they_read() {
        let e = Expression::compile("[input.a, item, outputs.x].map(v, index + v)").unwrap();
        assert_eq!(e.variables(), ["index", "input", "item", "outputs"]);
        let bound = Expression::compile("input.list.map(item, item.name)").unwrap();
        assert_eq!(
            bound.variables(),
            ["input"],
            "a comprehension's own `item` is not the variable"
        );
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
