//! Structured output: an agent with `output_schema` must answer with JSON
//! that the schema accepts. Pure, so the runner and replays agree on it.

use serde_json::Value;

/// How deeply a value from outside (a run's input, an agent's structured
/// output, a tool call's arguments, a line an agent printed) may nest arrays
/// and objects. The log keeps such a value a few levels down in an event
/// line, and its reader refuses a line nested deeper than 128 levels: a
/// value much deeper than this would be written and never read back.
pub const MAX_DEPTH: usize = 100;

/// Whether `value` nests arrays and objects deeper than `limit` levels (a
/// scalar is 0 deep). Without recursion: the value may come from anywhere.
pub fn nests_deeper(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 0_usize)];
    while let Some((value, depth)) = stack.pop() {
        let inner = depth + 1;
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, inner))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, inner))),
            _ => continue,
        }
        if inner > limit {
            return true;
        }
    }
    false
}

/// Why an agent's final text is not acceptable structured output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// The text is not JSON (after removing a Markdown code fence, if any).
    #[error("final text is not JSON: {0}")]
    NotJson(String),
    /// The schema itself does not compile (validation normally catches this first).
    #[error("output_schema is invalid: {0}")]
    BadSchema(String),
    /// The JSON does not satisfy the schema; lists each violation with its path.
    #[error("output does not match output_schema: {0}")]
    Mismatch(String),
    /// The JSON nests deeper than [`MAX_DEPTH`]: the log could not keep it.
    #[error("final text nests arrays and objects deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Parses `text` as JSON and validates it against `schema`.
///
/// Models often wrap JSON in a ```json fence; that fence is tolerated, any
/// other surrounding prose is not.
pub fn parse_structured(text: &str, schema: &Value) -> Result<Value, OutputError> {
    let body = strip_fence(text.trim());
    let value: Value =
        serde_json::from_str(body).map_err(|e| OutputError::NotJson(e.to_string()))?;
    if nests_deeper(&value, MAX_DEPTH) {
        return Err(OutputError::TooDeep);
    }
    validate(&value, schema)?;
    Ok(value)
}

/// Checks `value` against `schema`; the error lists every violation with its
/// JSON pointer. Shared by structured output and tool inputs.
pub fn validate(value: &Value, schema: &Value) -> Result<(), OutputError> {
    let validator =
        jsonschema::validator_for(schema).map_err(|e| OutputError::BadSchema(e.to_string()))?;
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let path = e.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            format!("{path}: {e}")
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(OutputError::Mismatch(problems.join("; ")))
    }
}

fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.split_once('\n').map_or("", |(_, body)| body);
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

/// The first integer in the JSON text `json` (outside its strings) that
/// fits neither `i64` nor `u64`. serde_json reads such an integer as the
/// nearest float, so `123456789012345678901234567890` would be kept as
/// `1.2345678901234568e29`: a value from outside is refused instead, with
/// the integer named, rather than changed.
pub fn oversized_integer(json: &str) -> Option<&str> {
    let bytes = json.as_bytes();
    let (mut at, mut in_string, mut escaped) = (0, false, false);
    while let Some(&b) = bytes.get(at) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            at += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            at += 1;
            continue;
        }
        if b != b'-' && !b.is_ascii_digit() {
            at += 1;
            continue;
        }
        let start = at;
        while bytes
            .get(at)
            .is_some_and(|c| c.is_ascii_digit() || b"-+.eE".contains(c))
        {
            at += 1;
        }
        let token = json.get(start..at).unwrap_or_default();
        let integer = !token.contains(['.', 'e', 'E']);
        if integer && token.parse::<i64>().is_err() && token.parse::<u64>().is_err() {
            return Some(token);
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_is_counted_without_recursion_and_too_deep_output_is_refused() {
        let nested = |n: usize| -> Value {
            serde_json::from_str(&format!("{}{}", "[".repeat(n), "]".repeat(n))).unwrap()
        };
        assert!(!nests_deeper(&json!(1), 0));
        assert!(nests_deeper(&json!([]), 0));
        assert!(!nests_deeper(&json!({"a": [1, {"b": []}]}), 4));
        assert!(nests_deeper(&json!({"a": [1, {"b": []}]}), 3));
        assert!(!nests_deeper(&nested(MAX_DEPTH), MAX_DEPTH));
        assert!(nests_deeper(&nested(MAX_DEPTH + 1), MAX_DEPTH));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            parse_structured(&deep, &json!({"type": "array"})),
            Err(OutputError::TooDeep)
        );
    }

    fn schema() -> Value {
        json!({"type": "object", "required": ["score"], "properties": {"score": {"type": "number"}}})
    }

    #[test]
    fn accepts_valid_json_fenced_or_not() {
        assert_eq!(
            parse_structured(r#"{"score": 1}"#, &schema()).unwrap(),
            json!({"score": 1})
        );
        let fenced = "```json\n{\"score\": 2}\n```";
        assert_eq!(
            parse_structured(fenced, &schema()).unwrap(),
            json!({"score": 2})
        );
    }

    #[test]
    fn rejects_prose_and_mismatches() {
        assert!(matches!(
            parse_structured("sure! {}", &schema()),
            Err(OutputError::NotJson(_))
        ));
        let err = parse_structured(r#"{"score": "high"}"#, &schema()).unwrap_err();
        assert!(
            matches!(&err, OutputError::Mismatch(m) if m.contains("/score")),
            "{err}"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_is_found_outside_strings_only() {
        let big = "123456789012345678901234567890";
        assert_eq!(oversized_integer(big), Some(big));
        assert_eq!(
            oversized_integer(&format!(r#"{{"id": -{big}, "n": 1}}"#)),
            Some(format!("-{big}").as_str())
        );
        assert_eq!(oversized_integer(&format!("[1, 2, {big}]")), Some(big));
        for fits in [
            "18446744073709551615".to_owned(),
            "-9223372036854775808".to_owned(),
            format!(r#""{big}""#),
            format!(r#"{{"{big}": "a \" {big}"}}"#),
            "1e30".to_owned(),
            "123456789012345678901234567890.5".to_owned(),
            "[true, null, -0.5]".to_owned(),
        ] {
            assert_eq!(oversized_integer(&fits), None, "{fits}");
        }
        assert_eq!(
            oversized_integer("18446744073709551616"),
            Some("18446744073709551616")
        );
    }
}
