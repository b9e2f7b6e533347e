//! A provider call's request as recordings keep it: what its hash is
//! taken of (`requestHash`), and where two requests differ. Recording
//! (`recording`), replay (the mock, `turns`) and `verify-determinism`
//! compare requests alike through it.

use domain::event::Prompt;
use domain::workflow::AgentDef;
use serde_json::{Value, json};

/// The request a call's hash is taken of: what the model is asked, and
/// the settings that change its answer (not keys, URLs or timeouts).
pub fn request(prompt: &Prompt, agent: &AgentDef) -> Value {
    let prompt = match prompt {
        Prompt::Text(text) => Value::String(text.clone()),
        Prompt::Messages(messages) => Value::Array(messages.clone()),
    };
    json!({
        "prompt": prompt,
        "systemPrompt": agent.system_prompt,
        "model": agent.model,
        // Names only: a grant's settings (`allow:`) are no part of what the model is asked.
        "tools": agent.tool_names().collect::<Vec<_>>(),
        "sampling": {"temperature": agent.temperature, "maxTokens": agent.max_tokens},
    })
}

/// `sent` with only the fields `recorded` has: a recording made before a
/// field was hashed is compared, and its hash checked, on what it holds.
pub fn as_recorded(sent: Value, recorded: &Value) -> Value {
    match (sent, recorded) {
        (Value::Object(mut sent), Value::Object(recorded)) => {
            sent.retain(|k, _| recorded.contains_key(k));
            Value::Object(sent)
        }
        (sent, _) => sent,
    }
}

/// `sha256:<hex>` of the request's canonical JSON.
pub fn request_hash(request: &Value) -> String {
    let hex = domain::canonical::hash(request).unwrap_or_default();
    format!("sha256:{hex}")
}

/// The JSON Pointer of the first place `a` and `b` differ, with the value
/// each has there (`null` when one has nothing).
pub fn first_difference(a: &Value, b: &Value) -> Option<(String, Value, Value)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                first_difference(va, vb).map(|(p, l, r)| (format!("/{}{p}", escape(k)), l, r))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (va, vb))| {
                first_difference(va, vb).map(|(p, l, r)| (format!("/{i}{p}"), l, r))
            })
        }
        _ if a == b => None,
        _ => Some((String::new(), a.clone(), b.clone())),
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_named_by_its_pointer() {
        let a = json!({"prompt": "Summarise this.", "tools": ["a/b"], "model": null});
        let b = json!({"prompt": "Summarize this.", "tools": ["a/b"], "model": null});
        let (pointer, left, right) = first_difference(&a, &b).unwrap();
        assert_eq!(pointer, "/prompt");
        assert_eq!(
            (left, right),
            (json!("Summarise this."), json!("Summarize this."))
        );
        assert_eq!(first_difference(&a, &a), None);
        let (pointer, ..) =
            first_difference(&json!({"a/b": [1, 2]}), &json!({"a/b": [1, 3]})).unwrap();
        assert_eq!(pointer, "/a~1b/1");
        assert_ne!(request_hash(&a), request_hash(&b));
    }
}
