//! What an HTTP agent's turn costs the runtime, beside a raw HTTP round trip.
//!
//! The fake model server runs in-process on 127.0.0.1 and streams the same
//! reply to every request (a short text, 5 SSE chunks for Chat Completions,
//! 9 events for Messages), keeping the connection alive as the real APIs
//! do. `raw` is reqwest posting the request body and reading the whole
//! response: the floor any client pays; `raw_sse` also frames it into
//! server-sent events with `eventsource-stream`. `adapter` is our
//! `ChatModel` turn (request built, SSE framed, chunks decoded into events);
//! `tool_loop` is a whole agent invocation through the `ToolLoop` (one turn,
//! messages and the final result). `cargo xtask bench-report` prints each
//! as a ratio to `raw` of the same provider.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::sync::Arc;

use adapters_agents::KeySource;
use adapters_agents::anthropic::AnthropicChat;
use adapters_agents::openai::OpenAiChat;
use application::ports::{AgentRequest, ChatMessage, ChatModel, ChatRequest, QueryFn};
use application::tool_loop::ToolLoop;
use application::tools::ToolRouter;
use awr_tests::fake_model::FakeModel;
use criterion::{Criterion, criterion_group, criterion_main};
use domain::workflow::{AgentDef, Provider};
use domain::{NodeId, NodeRunId, RunId};
use futures::StreamExt;
use infrastructure::{RandomIds, SystemClock};

fn agent(provider: Provider, base_url: String) -> AgentDef {
    let mut agent = AgentDef::new(provider);
    agent.model = Some("bench-model".into());
    agent.base_url = Some(base_url);
    agent
}

fn bench_http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(FakeModel::start()).expect("fake model");
    let base = server.base_url();
    // reqwest is built without a default crypto provider (see the adapters).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let no_keys = KeySource::from_fn(|_| None);
    let providers: [(&str, Provider, String, Arc<dyn ChatModel>); 2] = [
        (
            "openai",
            Provider::OpenAi,
            format!("{base}/v1"),
            Arc::new(OpenAiChat::with_keys(no_keys.clone())),
        ),
        (
            "anthropic",
            Provider::Anthropic,
            base.clone(),
            Arc::new(AnthropicChat::with_keys(no_keys)),
        ),
    ];
    let mut group = c.benchmark_group("http_turn");
    for (name, provider, base_url, model) in providers {
        let agent = agent(provider, base_url);
        let request = ChatRequest {
            agent: agent.clone(),
            system: "You are terse.".into(),
            messages: vec![ChatMessage::User("Say hello.".into())],
            tools: Vec::new(),
        };
        let (url, body) = match provider {
            Provider::OpenAi => (
                format!("{base}/v1/chat/completions"),
                OpenAiChat::body(&request).expect("body"),
            ),
            _ => (
                format!("{base}/v1/messages"),
                serde_json::json!({"model": "bench-model", "max_tokens": 8192, "stream": true,
                    "system": "You are terse.",
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]}),
            ),
        };
        let body = body.to_string();
        group.bench_function(format!("{name}/raw"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let response = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("send");
                    response.bytes().await.expect("body").len()
                })
            });
        });
        group.bench_function(format!("{name}/raw_sse"), |b| {
            use eventsource_stream::Eventsource;
            b.iter(|| {
                rt.block_on(async {
                    let response = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("send");
                    response.bytes_stream().eventsource().count().await
                })
            });
        });
        group.bench_function(format!("{name}/adapter"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let stream = model.turn(request.clone()).await.expect("turn");
                    stream.count().await
                })
            });
        });
        let tool_loop = ToolLoop::new(
            Arc::clone(&model),
            Arc::new(ToolRouter::new()),
            std::env::temp_dir(),
            Arc::new(SystemClock),
            Arc::new(RandomIds),
        );
        let ask = AgentRequest {
            run_id: RunId::new(uuid::Uuid::new_v4()).expect("run id"),
            workflow: "bench".into(),
            node_id: NodeId::new("n").expect("node id"),
            node_run_id: NodeRunId::new(uuid::Uuid::new_v4()),
            agent_name: "a".into(),
            agent: agent.clone(),
            prompt: "Say hello.".into(),
            resume: None,
            fork_session: false,
            session_id: None,
            session_usage: Default::default(),
            history: Vec::new(),
            approved_call: None,
            call_index: 0,
            instance: "0".into(),
            instance_call: 0,
            traceparent: None,
            run_tools: Default::default(),
            mcp_servers: Default::default(),
        };
        group.bench_function(format!("{name}/tool_loop"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let stream = tool_loop.query(ask.clone()).await.expect("query");
                    stream.count().await
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_http);
criterion_main!(benches);
