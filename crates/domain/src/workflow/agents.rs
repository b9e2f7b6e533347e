//! The per-agent rules of a workflow: providers' settings, limits, key
//! variables, `workdir` and prices, each error naming the agent and field.

use std::collections::BTreeMap;

use super::invalid::invalid;
use super::{AgentDef, Provider, WorkflowError};
use crate::ids::NodeId;
use crate::pricing::Price;

/// The most retries an HTTP agent may ask for: with backoff capped at 60 s a
/// wait, more would keep a failing node alive for hours.
const MAX_RETRIES: u32 = 100;

/// `required`: some node runs an agent (a workflow of commands and
/// sub-workflows needs none).
pub(super) fn check_agents(
    agents: &BTreeMap<String, AgentDef>,
    required: bool,
) -> Result<(), WorkflowError> {
    if required && agents.is_empty() {
        return Err(invalid("agents", "at least one agent is required"));
    }
    for (name, agent) in agents {
        let item = format!("agents.{name}");
        NodeId::new(name.as_str()).map_err(|e| invalid(&item, e.to_string()))?;
        // A tool granted twice would leave open which grant's settings apply.
        let mut names: Vec<&str> = agent.tool_names().collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(
                &item,
                format!("`tools` grants `{}` twice; keep one entry for it", twice[0]),
            ));
        }
        if agent.max_turns == Some(0) {
            return Err(invalid(&item, "`max_turns` must be at least 1"));
        }
        if let Some(dir) = &agent.workdir {
            check_workdir(&item, "", dir, agent.allow_outside_project)?;
        }
        check_http_settings(&item, agent)?;
        if let Some(schema) = &agent.output_schema {
            // `offline`: the domain does no IO, so a remote `$ref` is refused, never fetched.
            jsonschema::options().offline().build(schema).map_err(|e| {
                invalid(
                    &item,
                    format!("`output_schema` is not a valid JSON Schema: {e}"),
                )
            })?;
        }
    }
    Ok(())
}

/// What can be decided without knowing the project directory: `/` and a
/// relative `workdir` that climbs out through `..` are refused unless
/// `allow_outside_project` is set. An absolute path is checked by whoever
/// knows where awr runs ([`super::WorkflowDef::workdirs`]). `prefix` names
/// where the fields are (`command.` in a command node).
pub(super) fn check_workdir(
    item: &str,
    prefix: &str,
    dir: &str,
    allowed: bool,
) -> Result<(), WorkflowError> {
    if allowed {
        return Ok(());
    }
    let placeholder = std::path::Path::new("/project");
    if dir.starts_with('/') && !dir.trim_end_matches('/').is_empty() {
        return Ok(());
    }
    match super::workdir_outside(dir, placeholder) {
        Some(why) => Err(invalid(
            item,
            format!(
                "`{prefix}workdir`: {why}; set `{prefix}allow_outside_project: true` to allow it"
            ),
        )),
        None => Ok(()),
    }
}

/// Prices are finite and not negative: a cost computed from them is shown as money.
pub(super) fn check_pricing(pricing: &BTreeMap<String, Price>) -> Result<(), WorkflowError> {
    for (model, price) in pricing {
        let fields = [
            ("input", Some(price.input)),
            ("output", Some(price.output)),
            ("cache_read", price.cache_read),
            ("cache_write", price.cache_write),
        ];
        for (field, value) in fields {
            if let Some(v) = value.filter(|v| !v.is_finite() || *v < 0.0) {
                return Err(invalid(
                    format!("pricing.{model}"),
                    format!("`{field}` must be a price of 0 or more, not {v}"),
                ));
            }
        }
    }
    Ok(())
}

/// Settings of HTTP providers. `api_key_env` must be a variable *name*: a
/// pasted key is refused without being echoed, so it reaches no log.
fn check_http_settings(item: &str, agent: &AgentDef) -> Result<(), WorkflowError> {
    if agent.provider.is_http() && agent.model.as_deref().is_none_or(str::is_empty) {
        return Err(invalid(
            item,
            format!("provider `{}` needs a `model`", agent.provider.as_str()),
        ));
    }
    if let Some(var) = &agent.api_key_env {
        let is_name = var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            return Err(invalid(
                item,
                "`api_key_env` must be the name of an environment variable (letters, digits, `_`), not the key itself; the value is not shown",
            ));
        }
    }
    if let Some(t) = agent.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(invalid(
            item,
            format!("`temperature` must be between 0 and 2, not {t}"),
        ));
    }
    if agent.max_tokens == Some(0) {
        return Err(invalid(item, "`max_tokens` must be at least 1"));
    }
    if let Some(n) = agent.max_retries.filter(|n| *n > MAX_RETRIES) {
        return Err(invalid(
            item,
            format!("`max_retries` must be at most {MAX_RETRIES}, not {n}"),
        ));
    }
    if let Some(budget) = agent.thinking_budget {
        check_thinking(item, agent, budget)?;
    }
    if let Some(url) = &agent.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid(
            item,
            format!("`base_url` must start with http:// or https://, not `{url}`"),
        ));
    }
    Ok(())
}

/// Extended thinking (Anthropic's): at least 1024 tokens, fewer than the
/// turn's `max_tokens` (default 8192), and no `temperature` beside it, as the
/// API requires; refused here rather than by the API mid-run.
fn check_thinking(item: &str, agent: &AgentDef, budget: u32) -> Result<(), WorkflowError> {
    if agent.provider != Provider::Anthropic {
        return Err(invalid(
            item,
            format!(
                "`thinking_budget` is for provider `anthropic`, not `{}`",
                agent.provider.as_str()
            ),
        ));
    }
    let max_tokens = agent.max_tokens.unwrap_or(8192);
    if budget < 1024 || budget >= max_tokens {
        return Err(invalid(
            item,
            format!(
                "`thinking_budget` must be at least 1024 and below `max_tokens` ({max_tokens}), not {budget}"
            ),
        ));
    }
    if agent.temperature.is_some() {
        return Err(invalid(
            item,
            "`temperature` cannot be set with `thinking_budget` (the API refuses it)",
        ));
    }
    Ok(())
}
