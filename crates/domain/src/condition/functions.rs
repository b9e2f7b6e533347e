//! Which functions a condition calls, checked against the interpreter's own
//! table when the condition is compiled, so that a call of nothing fails
//! `awr validate` rather than a run.

/// Whether `name` is spelled as a function a program can call by name
/// (`size`, `startsWith`), not an operator (`_+_`, `@in`).
pub(super) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The macros a parse expands when their arguments fit (`has(a.b)`,
/// `l.all(x, p)`...); with other arguments they stay calls of nothing.
pub(super) const MACROS: [&str; 6] = ["has", "all", "exists", "exists_one", "map", "filter"];

/// Whether evaluation knows a function `name`, called as a member (`x.f()`)
/// or not: the interpreter keeps its table to itself, so a call with no
/// arguments asks it. An unknown name is the one error that names it as
/// undeclared; a known one fails on its arguments instead, or answers.
pub(super) fn is_function(name: &str, member: bool) -> bool {
    thread_local! {
        /// What was asked so far: a large workflow calls the same few
        /// functions in each of its conditions.
        static KNOWN: std::cell::RefCell<std::collections::HashMap<(String, bool), bool>> =
            std::cell::RefCell::default();
    }
    let key = (name.to_owned(), member);
    if let Some(known) = KNOWN.with_borrow(|k| k.get(&key).copied()) {
        return known;
    }
    let known = ask(name, member);
    // Bounded: a file may name any number of functions that do not exist.
    KNOWN.with_borrow_mut(|k| (k.len() < MAX_KNOWN).then(|| k.insert(key, known)));
    known
}

/// How many answers [`is_function`] keeps.
const MAX_KNOWN: usize = 1024;

/// [`is_function`], asked of the interpreter.
fn ask(name: &str, member: bool) -> bool {
    let call = if member {
        format!("''.{name}()")
    } else {
        format!("{name}()")
    };
    let Ok(probe) = cel::Program::compile(&call) else {
        return false;
    };
    !matches!(
        probe.execute(&cel::Context::default()),
        Err(cel::ExecutionError::UndeclaredReference(undeclared)) if *undeclared == name
    )
}
