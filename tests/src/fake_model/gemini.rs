//! The Gemini wire format (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`,
//! also `:generateContent` and `:countTokens`), which the Gemini CLI calls.
//!
//! Stream: `data:` lines (with `\r\n` endings, as Google sends them) each
//! holding one candidate with `content.parts`; the last one has
//! `finishReason: "STOP"` and the full `usageMetadata`. A tool turn sends a
//! thought part, a text part, then a `functionCall` part with its arguments
//! whole (Gemini does not stream arguments); `CUTSTREAM` sends text chunks
//! but none with a `finishReason`. When `generationConfig` asks for
//! JSON (the CLI's routing and next-speaker checks), the reply is a JSON
//! document built from the requested schema.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::scenario::{self, Api, Scenario, TOOL_PREAMBLE};
use super::sse;

/// Splits `…/models/{model}:{method}` into model and method, for the three
/// methods served; `None` for any other path.
pub(super) fn parse_path(path: &str) -> Option<(&str, &str)> {
    let (_, tail) = path.rsplit_once("/models/")?;
    let (model, method) = tail.split_once(':')?;
    let known = matches!(
        method,
        "streamGenerateContent" | "generateContent" | "countTokens"
    );
    (known && !model.is_empty() && !model.contains('/')).then_some((model, method))
}

/// Answers one Gemini request for `model` and `method` (see [`parse_path`]).
pub(super) fn respond(
    model: &str,
    method: &str,
    body: &Value,
    state: &scenario::State,
) -> Response {
    if method == "countTokens" {
        return sse::json(StatusCode::OK, &json!({"totalTokens": 42}), &[]);
    }
    let gc = &body["generationConfig"];
    let schema = [&gc["responseJsonSchema"], &gc["responseSchema"]]
        .into_iter()
        .find(|s| !s.is_null());
    let wants_json = schema.is_some() || gc["responseMimeType"] == "application/json";
    let sc = scenario::choose(Api::Gemini, body, state);
    // Like MIDERR, CUTSTREAM spares the CLI's JSON side calls (routing,
    // next speaker), so the failure lands on the turn under test.
    let cut = sc == Scenario::CutStream && !wants_json;
    if let Scenario::Error(status) = sc {
        return error(status);
    }
    let usage = json!({"promptTokenCount": 120, "candidatesTokenCount": 25,
        "totalTokenCount": 153, "thoughtsTokenCount": 8, "cachedContentTokenCount": 0});
    let resp_id = sse::id("");
    let parts_seq: Vec<Vec<Value>> = if wants_json {
        let doc = json_from_schema(schema.unwrap_or(&Value::Null));
        vec![vec![json!({"text": doc.to_string()})]]
    } else {
        match &sc {
            Scenario::Tool { name, args, .. } => vec![
                vec![json!({"text": "**Planning** run echo hi.", "thought": true})],
                vec![json!({"text": TOOL_PREAMBLE})],
                vec![json!({"functionCall": {"name": name, "args": args},
                    "thoughtSignature": "ZmFrZS1zaWc="})],
            ],
            Scenario::Text(t) => sse::words(t)
                .into_iter()
                .map(|w| vec![json!({"text": w})])
                .collect(),
            Scenario::CutStream => sse::words(scenario::CUT_TEXT)
                .into_iter()
                .map(|w| vec![json!({"text": w})])
                .collect(),
            _ => vec![vec![json!({"text": scenario::PLAIN_TEXT})]],
        }
    };
    let candidate = |parts: Vec<Value>, last: bool| {
        let mut c = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
        if last {
            c["finishReason"] = json!("STOP");
        }
        c
    };
    if method == "generateContent" {
        let all: Vec<Value> = parts_seq.into_iter().flatten().collect();
        let reply = json!({"candidates": [candidate(all, true)], "usageMetadata": usage,
            "modelVersion": model, "responseId": resp_id});
        if cut {
            return sse::cut_json(&reply);
        }
        return sse::json(StatusCode::OK, &reply, &[]);
    }
    let mut frames = Vec::new();
    if sc == Scenario::MidErr && !wants_json {
        let partial = json!({"candidates": [candidate(vec![json!({"text": "Partial "})], false)],
            "modelVersion": model, "responseId": resp_id});
        frames.push(sse::frame(None, &partial, true));
        let err = json!({"error": {"code": 500, "message": "fake mid-stream failure", "status": "INTERNAL"}});
        frames.push(sse::frame(None, &err, true));
        return sse::stream(frames);
    }
    let n = parts_seq.len();
    for (i, parts) in parts_seq.into_iter().enumerate() {
        // A cut stream never sends its last chunk (the one with finishReason).
        let last = i + 1 == n && !cut;
        let usage = if last {
            usage.clone()
        } else {
            json!({"promptTokenCount": 120, "totalTokenCount": 120})
        };
        let data = json!({"candidates": [candidate(parts, last)], "modelVersion": model,
            "responseId": resp_id, "usageMetadata": usage});
        frames.push(sse::frame(None, &data, true));
    }
    sse::stream(frames)
}

/// A minimal document matching a JSON schema: first enum value, empty
/// arrays, `false`, the minimum number; `next_speaker` answers `"user"` so the
/// Gemini CLI ends its turn instead of asking the model to continue.
fn json_from_schema(s: &Value) -> Value {
    if let Some(first) = s["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match s["type"]
        .as_str()
        .unwrap_or("object")
        .to_lowercase()
        .as_str()
    {
        "object" => {
            let mut out = Map::new();
            for (k, p) in s["properties"].as_object().into_iter().flatten() {
                let v = if k == "next_speaker" {
                    json!("user")
                } else {
                    json_from_schema(p)
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        "array" => json!([]),
        "boolean" => json!(false),
        "integer" | "number" => s.get("minimum").cloned().unwrap_or(json!(0)),
        _ => json!("fake reasoning"),
    }
}

/// The Google error body; 429 carries `retry-after` so clients back off briefly.
fn error(status: u16) -> Response {
    let kind = match status {
        429 => "RESOURCE_EXHAUSTED",
        400 => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    };
    let body = json!({"error": {"code": status, "message": format!("fake error {status}"), "status": kind}});
    let headers = if status == 429 {
        vec![("retry-after", "1".to_owned())]
    } else {
        vec![]
    };
    sse::json(sse::status_code(status), &body, &headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            Some(("gemini-2.5-pro", "streamGenerateContent"))
        );
        assert_eq!(parse_path("/v1beta/models/x:other"), None);
        assert_eq!(parse_path("/v1/messages"), None);
    }

    #[test]
    fn next_speaker_is_user() {
        let schema = json!({"type": "object", "properties": {
            "reasoning": {"type": "string"}, "next_speaker": {"type": "string", "enum": ["user", "model"]}}});
        assert_eq!(
            json_from_schema(&schema),
            json!({"next_speaker": "user", "reasoning": "fake reasoning"})
        );
    }
}
