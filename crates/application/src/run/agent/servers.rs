//! The MCP servers a CLI agent is told of, which it starts itself: the
//! workflow's servers it is granted tools of, and awr's permission prompt
//! when a grant of it asks a person.

use std::collections::BTreeMap;

use domain::workflow::{AgentDef, McpServerDef, McpTransport};

use crate::ports::PERMISSION_SERVER;
use crate::run::node_run::NodeTask;

/// The servers of `task`'s CLI agent `agent`, by name.
pub(super) fn of_cli_agent(task: &NodeTask, agent: &AgentDef) -> BTreeMap<String, McpServerDef> {
    let mut servers: BTreeMap<String, McpServerDef> = (agent.tools.iter())
        .filter_map(|grant| grant.mcp().map(|m| m.server()))
        .filter_map(|name| {
            Some((
                name.to_owned(),
                task.workflow.mcp_servers.get(name)?.clone(),
            ))
        })
        .collect();
    if let Some(prompt) = permission_prompt(task, agent) {
        servers.insert(PERMISSION_SERVER.to_owned(), prompt);
    }
    servers
}

/// awr's permission prompt for this node run, when `agent` has a grant
/// that asks a person: the server the runtime was given, told which run
/// and node run it answers for.
fn permission_prompt(task: &NodeTask, agent: &AgentDef) -> Option<McpServerDef> {
    if !agent.tools.iter().any(|g| g.requires_approval.is_some()) {
        return None;
    }
    let mut server = task.ports.permission_prompt.clone()?;
    if let McpTransport::Stdio { args, .. } = &mut server.transport {
        args.extend([
            "--run".to_owned(),
            task.run_id.to_string(),
            "--node-run".to_owned(),
            task.run.to_string(),
        ]);
    }
    Some(server)
}
