//! `McpServers` against a fake connector: when servers start, what a failed
//! start does, how tools are named, granted and told, what a call gives
//! back, and the grant check of `awr validate --connect`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::ports::McpOutcome;
use crate::tools::ToolRouter;

/// A connector whose servers list `echo` and `add`, counting what it does.
#[derive(Default)]
struct Fake {
    connects: Mutex<Vec<String>>,
    closes: Arc<AtomicUsize>,
    /// Connections made for no run (a check, not a run).
    untagged: AtomicUsize,
    /// Servers that fail to start.
    broken: Vec<&'static str>,
}

struct FakeSession {
    tools: Vec<McpToolInfo>,
    closes: Arc<AtomicUsize>,
}

#[async_trait]
impl McpConnector for Fake {
    async fn connect(
        &self,
        name: &str,
        _: &McpServerDef,
        run: Option<RunId>,
    ) -> Result<Box<dyn McpSession>, McpError> {
        if run.is_none() {
            self.untagged.fetch_add(1, Ordering::SeqCst);
        }
        self.connects.lock().unwrap().push(name.to_owned());
        if self.broken.contains(&name) {
            return Err(McpError::Start {
                server: name.to_owned(),
                reason: "no such program".into(),
            });
        }
        let tool = |name: &str, schema: Value| McpToolInfo {
            name: name.into(),
            description: format!("the {name} tool"),
            input_schema: schema,
        };
        Ok(Box::new(FakeSession {
            tools: vec![
                tool(
                    "echo",
                    json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                        "type": "object", "properties": {"message": {"type": "string"}},
                        "required": ["message"]}),
                ),
                tool("add.numbers", json!({"type": "object"})),
            ],
            closes: Arc::clone(&self.closes),
        }))
    }
}

#[async_trait]
impl McpSession for FakeSession {
    fn tools(&self) -> &[McpToolInfo] {
        &self.tools
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<McpOutcome, McpError> {
        match arguments["message"].as_str() {
            Some("fail") => Ok(McpOutcome {
                output: json!("the tool failed"),
                is_error: true,
            }),
            Some("slow") => Err(McpError::Timeout {
                server: "s".into(),
                seconds: 1,
            }),
            _ => Ok(McpOutcome {
                output: json!({"tool": tool, "arguments": arguments}),
                is_error: false,
            }),
        }
    }

    async fn close(&self) {
        self.closes.fetch_add(1, Ordering::SeqCst);
    }
}

fn workflow(servers: &[&str]) -> WorkflowDef {
    let mut yaml = String::from("name: m\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n");
    if !servers.is_empty() {
        yaml.push_str("mcp_servers:\n");
        for name in servers {
            yaml.push_str(&format!("  {name}: {{command: server}}\n"));
        }
    }
    WorkflowDef::from_yaml(&yaml).unwrap()
}

fn run() -> RunId {
    RunId::new(uuid::Uuid::new_v4()).unwrap()
}

fn servers(fake: &Arc<Fake>, names: &[&str]) -> McpServers {
    let connector: Arc<dyn McpConnector> = Arc::clone(fake) as _;
    McpServers::of(connector, run(), &workflow(names)).unwrap()
}

fn grants(names: &[&str]) -> Vec<ToolGrant> {
    names.iter().map(|n| ToolGrant::new(*n)).collect()
}

fn names(tools: &RunTools) -> Vec<String> {
    tools.0.iter().map(|t| t.spec().name).collect()
}

#[tokio::test]
async fn a_server_starts_once_when_an_agent_granted_its_tools_needs_it() {
    let fake = Arc::new(Fake::default());
    let servers = servers(&fake, &["s", "unused"]);
    let none = servers.tools(&grants(&["read_file"])).await.unwrap();
    assert!(none.is_empty());
    assert!(
        fake.connects.lock().unwrap().is_empty(),
        "nothing needed it"
    );
    let wanted = grants(&["read_file", "s/echo"]);
    let (a, b) = tokio::join!(servers.tools(&wanted), servers.tools(&wanted));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(*fake.connects.lock().unwrap(), ["s"], "started once");
    assert_eq!(
        fake.untagged.load(Ordering::SeqCst),
        0,
        "tagged with its run"
    );
    // Every tool of the server: the router gives only what is granted.
    assert_eq!(names(&a), names(&b));
    assert_eq!(names(&a)[0], "mcp__s__echo");
    assert!(names(&a)[1].starts_with("mcp__s__add_numbers_"), "{a:?}");
    servers.close().await;
    assert_eq!(
        fake.closes.load(Ordering::SeqCst),
        1,
        "only the started one"
    );
}

#[tokio::test]
async fn a_server_that_fails_to_start_fails_every_agent_that_needs_it_naming_it() {
    let fake = Arc::new(Fake {
        broken: vec!["down"],
        ..Fake::default()
    });
    let servers = servers(&fake, &["down", "up"]);
    for _ in 0..2 {
        let error = servers.tools(&grants(&["up/*", "down/echo"])).await;
        let Err(error) = error else {
            panic!("a server down is an error")
        };
        assert!(
            error.to_string().contains("`down` did not start"),
            "{error}"
        );
    }
    assert_eq!(
        *fake.connects.lock().unwrap(),
        ["down"],
        "tried once: the run sees one outcome"
    );
    // An agent that needs only the other server goes on.
    assert_eq!(
        names(&servers.tools(&grants(&["up/*"])).await.unwrap()).len(),
        2
    );
    assert_eq!(*fake.connects.lock().unwrap(), ["down", "up"]);
}

#[tokio::test]
async fn tools_are_granted_named_and_told_as_the_apis_take_them() {
    let fake = Arc::new(Fake::default());
    let servers = servers(&fake, &["s"]);
    let tools = servers.tools(&grants(&["s/*"])).await.unwrap();
    let router = tools
        .0
        .iter()
        .fold(ToolRouter::new(), |r, t| r.with(Arc::clone(t)));
    let context = ToolContext::new(".");

    let specs = router.specs(&grants(&["s/echo", "s/*"]));
    assert_eq!(specs.len(), 2, "each told once: {specs:?}");
    assert_eq!(specs[0].name, "mcp__s__echo", "in the order granted");
    assert_eq!(
        specs[0].input_schema,
        json!({"type": "object", "properties": {"message": {"type": "string"}},
            "required": ["message"]})
    );
    assert_eq!(
        specs[1].input_schema,
        json!({"type": "object", "properties": {}})
    );
    assert!(router.specs(&grants(&["s/echo"])).len() == 1);

    let echo = json!({"message": "hi"});
    let output = router
        .call("mcp__s__echo", echo.clone(), &grants(&["s/echo"]), &context)
        .await;
    assert_eq!(output, Ok(json!({"tool": "echo", "arguments": echo})));
    // Granted one tool of the server, not the other.
    let add = &specs[1].name;
    let refused = router
        .call(add, json!({}), &grants(&["s/echo"]), &context)
        .await;
    assert_eq!(refused, Err(ToolError::NotGranted(add.clone())));
    // The server's own name is called, not the mapped one.
    let output = router
        .call(add, json!({}), &grants(&["s/*"]), &context)
        .await;
    assert_eq!(output.unwrap()["tool"], "add.numbers");
    // Checked against its schema first.
    let invalid = router
        .call("mcp__s__echo", json!({}), &grants(&["s/*"]), &context)
        .await;
    assert!(
        matches!(invalid, Err(ToolError::InvalidInput { .. })),
        "{invalid:?}"
    );
}

#[tokio::test]
async fn what_goes_wrong_in_a_call_is_an_error_for_the_model() {
    let fake = Arc::new(Fake::default());
    let servers = servers(&fake, &["s"]);
    let tools = servers.tools(&grants(&["s/*"])).await.unwrap();
    let echo = &tools.0[0];
    let context = ToolContext::new(".");
    let failed = echo.call(json!({"message": "fail"}), &context).await;
    assert_eq!(failed, Err(ToolError::Failed("the tool failed".into())));
    let late = echo.call(json!({"message": "slow"}), &context).await;
    assert_eq!(
        late,
        Err(ToolError::Failed(
            "MCP server `s` did not answer within 1 s".into()
        ))
    );
}

#[test]
fn schemas_become_object_schemas_without_their_dialect() {
    assert_eq!(
        adapt_schema(&json!(true)),
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        adapt_schema(&json!({"type": "string"})),
        json!({"type": "object", "properties": {}})
    );
    let kept = json!({"type": "object", "properties": {"a": {"type": "integer"}},
        "additionalProperties": false});
    assert_eq!(adapt_schema(&kept), kept);
}

#[test]
fn a_workflow_without_servers_has_none_to_start() {
    let connector: Arc<dyn McpConnector> = Arc::new(Fake::default());
    assert!(McpServers::of(connector, run(), &workflow(&[])).is_none());
}

#[tokio::test]
async fn a_connected_check_names_each_missing_tool_and_each_server_down() {
    let fake = Fake {
        broken: vec!["down"],
        ..Fake::default()
    };
    let yaml = "name: m\nmcp_servers:\n  up: {command: s}\n  down: {command: s}\n  idle: {command: s}\n\
                agents:\n  a: {provider: openai, model: m, tools: [up/echo, up/nope, up/*]}\n  \
                b: {provider: openai, model: m, tools: [down/echo]}\nsteps: [{agent: a}, {agent: b}]\n";
    let workflow = WorkflowDef::from_yaml(yaml).unwrap();
    let problems = check_connected(&fake, &workflow).await;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("mcp_servers.down: MCP server `down` did not start"));
    assert!(
        problems[1].starts_with("agents.a.tools: `up/nope`: server `up` lists no tool `nope`"),
        "{problems:?}"
    );
    assert_eq!(
        *fake.connects.lock().unwrap(),
        ["down", "up"],
        "no grant of `idle`"
    );
    assert_eq!(
        fake.closes.load(Ordering::SeqCst),
        1,
        "each server started is stopped"
    );
    assert_eq!(fake.untagged.load(Ordering::SeqCst), 2, "of no run");
}

#[test]
fn a_result_past_the_cap_is_cut_saying_so() {
    let small = json!({"a": 1});
    assert_eq!(capped(small.clone()), small);
    let big = capped(json!({"text": "é".repeat(MAX_RESULT)}));
    let text = big.as_str().unwrap();
    assert!(text.len() < MAX_RESULT + 100, "{}", text.len());
    assert!(
        text.ends_with(&format!(
            "[cut at {MAX_RESULT} of {} bytes]",
            2 * MAX_RESULT + 11
        )),
        "{}",
        &text[text.len() - 60..]
    );
}
