//! An agent's `tools:` entries. Each is a grant: a tool's name alone
//! (`shell`), or a mapping that grants it with settings of that grant only
//! (`{name: http_get, allow: [wiki.internal, 10.0.0.0/8]}`).
//!
//! A grant may also say that a call of the tool waits for a person
//! (`requires_approval: true`, or a CEL condition over the call's `args`):
//! see docs/approvals.md.
//!
//! A grant is a small struct rather than a name with special cases, so a
//! later per-grant key is one field more. It is written back as a bare name
//! when it has no settings, so a plain grant reads and serializes as it
//! always did. `allow:` entries are parsed here, when the workflow is read,
//! so a malformed one is refused with its line and column, never at a call.
//!
//! Addresses are `core::net` types, plain values: the domain opens no socket.

use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::str::FromStr;

use ipnet::IpNet;
use serde::de::{self, Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::condition::Condition;

/// One entry of an agent's `tools:`: the tool it may call and the settings
/// of that grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolGrant {
    /// The tool's name.
    pub name: String,
    /// `http_get`: hosts and addresses it may reach besides public ones
    /// (it refuses loopback, private and other internal addresses unless
    /// an entry here admits them).
    pub allow: Vec<NetTarget>,
    /// Whether a call waits for a person's approval before it runs.
    pub requires_approval: Option<ApprovalGate>,
}

/// When a granted tool's call waits for a person (`requires_approval:`).
#[derive(Debug, Clone)]
pub enum ApprovalGate {
    /// Every call (`true`).
    Always,
    /// The calls whose arguments make this CEL condition (over `args`) true.
    When(Condition),
}

impl ApprovalGate {
    /// Whether a call with arguments `args` waits. A condition that fails
    /// on them asks too: when in doubt, a person decides.
    pub fn applies(&self, args: &Value) -> bool {
        match self {
            Self::Always => true,
            Self::When(condition) => {
                let vars = Map::from_iter([("args".to_owned(), args.clone())]);
                condition.evaluate(&vars).unwrap_or(true)
            }
        }
    }

    fn source(&self) -> Option<&str> {
        match self {
            Self::Always => None,
            Self::When(condition) => Some(condition.source()),
        }
    }
}

/// Two gates are the same when they were written the same.
impl PartialEq for ApprovalGate {
    fn eq(&self, other: &Self) -> bool {
        self.source() == other.source()
    }
}

impl Eq for ApprovalGate {}

impl core::hash::Hash for ApprovalGate {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.source().hash(state);
    }
}

impl Serialize for ApprovalGate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Always => s.serialize_bool(true),
            Self::When(condition) => s.serialize_str(condition.source()),
        }
    }
}

impl ToolGrant {
    /// The tools whose grant may carry `allow:`: those that open
    /// connections. Elsewhere the key would be a setting nothing reads.
    pub const TAKES_ALLOW: &'static [&'static str] = &["http_get"];

    /// `name`, granted with no settings.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            allow: Vec::new(),
            requires_approval: None,
        }
    }

    /// Whether a call of this tool with arguments `args` waits for a person.
    pub fn asks(&self, args: &Value) -> bool {
        self.requires_approval
            .as_ref()
            .is_some_and(|g| g.applies(args))
    }

    /// Also admits `targets` (`allow:`).
    #[must_use]
    pub fn allowing(mut self, targets: impl IntoIterator<Item = NetTarget>) -> Self {
        self.allow.extend(targets);
        self
    }
}

impl From<&str> for ToolGrant {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for ToolGrant {
    fn from(name: String) -> Self {
        Self::new(name)
    }
}

impl Serialize for ToolGrant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.allow.is_empty() && self.requires_approval.is_none() {
            return s.serialize_str(&self.name);
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        if !self.allow.is_empty() {
            map.serialize_entry("allow", &self.allow)?;
        }
        if let Some(gate) = &self.requires_approval {
            map.serialize_entry("requires_approval", gate)?;
        }
        map.end()
    }
}

/// The mapping form as written. `deny_unknown_fields`: a misspelt or
/// not-yet-supported key is refused by name, as everywhere in a workflow.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    name: String,
    #[serde(default)]
    allow: Option<Vec<NetTarget>>,
    #[serde(default)]
    requires_approval: Option<RawGate>,
}

/// `requires_approval:` as written: a bool or a CEL condition.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawGate {
    Bool(bool),
    When(String),
}

impl<'de> Deserialize<'de> for ToolGrant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = ToolGrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a tool name, or a mapping `{name: TOOL, allow?: [HOST, ...], requires_approval?: BOOL|CEL}`",
                )
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<ToolGrant, E> {
                Ok(ToolGrant::new(name))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolGrant, A::Error> {
                let raw = RawGrant::deserialize(MapAccessDeserializer::new(map))?;
                if raw.allow.is_some() && !ToolGrant::TAKES_ALLOW.contains(&raw.name.as_str()) {
                    return Err(de::Error::custom(format!(
                        "`allow` is only for {}, not `{}`",
                        ToolGrant::TAKES_ALLOW
                            .iter()
                            .map(|t| format!("`{t}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        raw.name
                    )));
                }
                let requires_approval = match raw.requires_approval {
                    None | Some(RawGate::Bool(false)) => None,
                    Some(RawGate::Bool(true)) => Some(ApprovalGate::Always),
                    Some(RawGate::When(src)) => Some(ApprovalGate::When(
                        Condition::compile_over_args(&src)
                            .map_err(|e| de::Error::custom(format!("`requires_approval`: {e}")))?,
                    )),
                };
                Ok(ToolGrant {
                    name: raw.name,
                    allow: raw.allow.unwrap_or_default(),
                    requires_approval,
                })
            }
        }
        d.deserialize_any(Either)
    }
}

/// One `allow:` entry: what it names, and on which port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NetTarget {
    /// A host name (`wiki.internal`, `wiki.internal:8080`), kept in lower
    /// case without a final dot; matched against the URL's host, so every
    /// address the name resolves to is accepted.
    Host {
        /// The name.
        name: String,
        /// The only port admitted; `None`: any.
        port: Option<u16>,
    },
    /// One address (`10.1.2.3`, `[fd00::1]:8080`).
    Addr {
        /// The address.
        ip: IpAddr,
        /// The only port admitted; `None`: any.
        port: Option<u16>,
    },
    /// A CIDR range (`10.0.0.0/8`, `fd00::/8`), any port.
    Range(IpNet),
}

impl NetTarget {
    /// Whether this entry names the URL host `host` (a name, not an
    /// address) on `port`: then whatever that name resolves to is reached.
    pub fn names_host(&self, host: &str, port: u16) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        match self {
            NetTarget::Host { name, port: only } => {
                only.is_none_or(|p| p == port) && name.eq_ignore_ascii_case(host)
            }
            NetTarget::Addr { .. } | NetTarget::Range(_) => false,
        }
    }

    /// The addresses this entry admits on `port`: its range, its one
    /// address, or none (a host name, or another port).
    pub fn range_on(&self, port: u16) -> Option<IpNet> {
        match self {
            NetTarget::Addr { ip, port: only } if only.is_none_or(|p| p == port) => {
                Some(IpNet::from(*ip))
            }
            NetTarget::Range(net) => Some(*net),
            NetTarget::Host { .. } | NetTarget::Addr { .. } => None,
        }
    }
}

impl fmt::Display for NetTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetTarget::Host { name, port: None } => f.write_str(name),
            NetTarget::Host {
                name,
                port: Some(p),
            } => write!(f, "{name}:{p}"),
            NetTarget::Addr { ip, port: None } => write!(f, "{ip}"),
            NetTarget::Addr { ip, port: Some(p) } => write!(f, "{}", SocketAddr::new(*ip, *p)),
            NetTarget::Range(net) => write!(f, "{net}"),
        }
    }
}

impl FromStr for NetTarget {
    type Err = String;

    /// `HOST`, `HOST:PORT`, `IP`, `IP:PORT` (`[V6]:PORT`) or `IP/PREFIX`.
    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if s.contains('/') {
            return s.parse::<IpNet>().map(NetTarget::Range).map_err(|_| {
                format!(
                    "`{text}` is not a CIDR range (an address, `/` and a prefix length of at most 32 for IPv4 or 128 for IPv6, e.g. `10.0.0.0/8`)"
                )
            });
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(NetTarget::Addr { ip, port: None });
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            let port = nonzero(text, addr.port())?;
            return Ok(NetTarget::Addr {
                ip: addr.ip(),
                port: Some(port),
            });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((host, port)) => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("`{text}`: the port must be a number from 1 to 65535"))?;
                (host, Some(nonzero(text, port)?))
            }
            None => (s, None),
        };
        let name = host_name(text, host)?;
        Ok(NetTarget::Host { name, port })
    }
}

fn nonzero(text: &str, port: u16) -> Result<u16, String> {
    match port {
        0 => Err(format!(
            "`{text}`: the port must be a number from 1 to 65535"
        )),
        p => Ok(p),
    }
}

/// `host` as a DNS name in lower case, or why it is none. A name whose last
/// label is a number would be read as an IPv4 address in a URL, so it could
/// never match one; it is refused rather than silently useless.
fn host_name(text: &str, host: &str) -> Result<String, String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "`{text}` is not a host name, `host:port`, IP address or CIDR range"
        ));
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
    if hex || last.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "`{text}` is neither an IP address nor a host name (a URL reads a host ending in a number as an IPv4 address); write the address in full, e.g. `10.0.0.1`"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

impl Serialize for NetTarget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NetTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{WorkflowDef, WorkflowError};

    /// A workflow whose agent `a` has `tools: TOOLS`, on line 5.
    fn flow(tools: &str) -> String {
        format!(
            "name: t\nagents:\n  a:\n    provider: openai\n    tools: {tools}\n    model: m\nsteps: [{{agent: a}}]\n"
        )
    }

    fn refused(tools: &str) -> (Option<usize>, String) {
        match WorkflowDef::from_yaml(&flow(tools)).unwrap_err() {
            WorkflowError::Parse { line, message, .. } => (line, message),
            other => (None, other.to_string()),
        }
    }

    #[test]
    fn a_grant_is_a_name_or_a_mapping() {
        let def = WorkflowDef::from_yaml(&flow(
            "[read_file, {name: http_get, allow: [Wiki.Internal., 'wiki.internal:8080', 10.1.2.3, '[fd00::1]:443', 10.0.0.0/8, 'fd00::/8']}]",
        ))
        .unwrap();
        let tools = &def.agents["a"].tools;
        assert_eq!(tools[0], ToolGrant::new("read_file"));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            tools[1],
            ToolGrant::new("http_get").allowing([
                NetTarget::Host {
                    name: "wiki.internal".into(),
                    port: None
                },
                NetTarget::Host {
                    name: "wiki.internal".into(),
                    port: Some(8080)
                },
                NetTarget::Addr {
                    ip: ip("10.1.2.3"),
                    port: None
                },
                NetTarget::Addr {
                    ip: ip("fd00::1"),
                    port: Some(443)
                },
                NetTarget::Range("10.0.0.0/8".parse().unwrap()),
                NetTarget::Range("fd00::/8".parse().unwrap()),
            ])
        );
        // A plain grant is written back as a name, a mapping as a mapping.
        assert_eq!(
            serde_json::to_value(tools).unwrap(),
            serde_json::json!(["read_file", {"name": "http_get", "allow": [
                "wiki.internal", "wiki.internal:8080", "10.1.2.3", "[fd00::1]:443",
                "10.0.0.0/8", "fd00::/8"]}])
        );
        let def = WorkflowDef::from_yaml(&flow("[{name: http_get}]")).unwrap();
        assert_eq!(def.agents["a"].tools, [ToolGrant::new("http_get")]);
    }

    #[test]
    fn bad_grants_are_refused_naming_the_field_and_place() {
        let cases = [
            (
                "[{name: http_get, needs_ok: true}]",
                "agents.a.tools[0]: unknown field `needs_ok`, expected one of `name`, `allow`, `requires_approval`",
            ),
            (
                "[{name: shell, requires_approval: 'args.command.contains('}]",
                "agents.a.tools[0]: `requires_approval`: ",
            ),
            (
                "[{name: shell, requires_approval: 'input.x == 1'}]",
                "agents.a.tools[0]: `requires_approval`: ",
            ),
            (
                "[{name: http_get, allow: [10.0.0.0/33]}]",
                "agents.a.tools[0].allow: `10.0.0.0/33` is not a CIDR range",
            ),
            (
                "[http_get, {name: http_get, allow: [ok.host, 'bad host']}]",
                "agents.a.tools[1].allow: `bad host` is not a host name",
            ),
            (
                "[{name: http_get, allow: ['wiki:0']}]",
                "agents.a.tools[0].allow: `wiki:0`: the port must be a number from 1 to 65535",
            ),
            (
                "[{name: http_get, allow: [10.0.1]}]",
                "`10.0.1` is neither an IP address nor a host name",
            ),
            (
                "[{name: shell, allow: [10.0.0.0/8]}]",
                "agents.a.tools[0]: `allow` is only for `http_get`, not `shell`",
            ),
            ("[{allow: [x]}]", "agents.a.tools[0]: missing field `name`"),
        ];
        for (tools, expected) in cases {
            let (line, message) = refused(tools);
            assert_eq!(line, Some(5), "{tools}: {message}");
            assert!(message.contains(expected), "{tools}: {message}");
        }
        let (_, message) = refused("[http_get, {name: http_get, allow: [x.y]}]");
        assert!(
            message.contains("agents.a: `tools` grants `http_get` twice"),
            "{message}"
        );
        let json = r#"{"name": "t", "agents": {"a": {"provider": "openai", "model": "m",
            "tools": [{"name": "http_get", "allow": ["10.0.0.0/99"]}]}}, "steps": [{"agent": "a"}]}"#;
        let err = WorkflowDef::from_json(json).unwrap_err().to_string();
        assert!(
            err.contains("agents.a.tools[0].allow[0]: `10.0.0.0/99` is not a CIDR range"),
            "{err}"
        );
    }

    #[test]
    fn requires_approval_is_a_bool_or_a_condition_over_the_arguments() {
        let def = WorkflowDef::from_yaml(&flow(
            "[{name: shell, requires_approval: true}, \
             {name: read_file, requires_approval: 'args.path.startsWith(\"/etc\")'}, \
             {name: write_file, requires_approval: false}]",
        ))
        .unwrap();
        let tools = &def.agents["a"].tools;
        assert!(tools[0].asks(&serde_json::json!({"command": "ls"})));
        assert!(tools[1].asks(&serde_json::json!({"path": "/etc/passwd"})));
        assert!(!tools[1].asks(&serde_json::json!({"path": "notes.md"})));
        // Arguments the condition cannot read: a person decides.
        assert!(tools[1].asks(&serde_json::json!({"file": 3})));
        assert!(!tools[2].asks(&serde_json::json!({})));
        assert_eq!(
            serde_json::to_value(tools).unwrap(),
            serde_json::json!([{"name": "shell", "requires_approval": true},
                {"name": "read_file", "requires_approval": "args.path.startsWith(\"/etc\")"},
                "write_file"])
        );
    }

    #[test]
    fn entries_match_hosts_addresses_and_ports() {
        let t = |s: &str| s.parse::<NetTarget>().unwrap();
        assert!(t("wiki.internal").names_host("WIKI.internal.", 1));
        assert!(t("wiki.internal:8080").names_host("wiki.internal", 8080));
        assert!(!t("wiki.internal:8080").names_host("wiki.internal", 80));
        assert!(!t("10.0.0.1").names_host("wiki.internal", 80));
        let net = |s: &str| Some(s.parse::<IpNet>().unwrap());
        assert_eq!(t("10.0.0.1").range_on(1), net("10.0.0.1/32"));
        assert_eq!(t("127.0.0.1:8080").range_on(8080), net("127.0.0.1/32"));
        assert_eq!(t("127.0.0.1:8080").range_on(8081), None);
        assert_eq!(t("127.0.0.0/8").range_on(9), net("127.0.0.0/8"));
        assert_eq!(t("wiki.internal").range_on(80), None);
        for s in ["wiki.internal:8080", "[::1]:80", "::1", "10.0.0.0/8"] {
            assert_eq!(t(s).to_string(), s);
        }
    }
}
