//! The flags of `awr serve`, and the settings they make: who may call,
//! what is served, where it listens (docs/cli.md, docs/security.md).

use std::path::PathBuf;

use super::access::Access;
use super::limits::Limits;
use super::{Config, Listen, TlsFiles};
use crate::Failure;
use crate::storage::Storage;

/// The shortest token `--token` or `AWR_TOKEN` may give: as a tokens file's.
const MIN_TOKEN: usize = 32;

/// `awr serve [FLAGS]`.
#[derive(Debug, clap::Args)]
pub struct Flags {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// Directory a workflow `path` of `POST /workflows` must be inside.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub root: PathBuf,
    /// The one bearer token every request must carry (every scope); else
    /// `AWR_TOKEN`, unless --tokens or --no-auth is given; with none of
    /// them, the server makes one and prints it.
    #[arg(long, conflicts_with_all = ["tokens", "no_auth"])]
    pub token: Option<String>,
    /// Named tokens with scopes, a line each: `NAME SCOPE[,SCOPE...] SECRET`
    /// (read, control, start; SECRET or sha256:HEX); the file must be
    /// its owner's alone.
    #[arg(long, value_name = "FILE", conflicts_with = "no_auth")]
    pub tokens: Option<PathBuf>,
    /// Serve without any token (loopback only; warned on every start).
    #[arg(long)]
    pub no_auth: bool,
    /// Another host name the server answers to (besides localhost,
    /// loopback addresses and the bound address); repeatable.
    #[arg(long, value_name = "NAME", value_parser = parse_host)]
    pub allow_host: Vec<String>,
    /// Another origin that may call the server from a browser
    /// (`https://ui.example.com`); repeatable. Enables CORS for it.
    #[arg(long, value_name = "ORIGIN", value_parser = parse_origin)]
    pub allow_origin: Vec<String>,
    /// Let a workflow a client sends inline run programs on this machine
    /// (command nodes, the shell tool, CLI agents, ...).
    #[arg(long)]
    pub allow_inline_code: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Connections open at once; a few more are answered 503.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Streams (events, transcripts) open at once, in all.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,
    /// Streams open at once per token.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_token: u32,
    /// Seconds of silence before a stream sends a heartbeat.
    #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat: u64,
    /// Prune finished runs older than this (e.g. 30d) in the background,
    /// as `awr prune --older-than` does: at start, then periodically.
    #[arg(long, value_name = "DURATION", value_parser = crate::forms::parse_age)]
    pub retention: Option<std::time::Duration>,
    /// Queue the runs `POST /workflows` starts, for workers (`awr worker`)
    /// to run, rather than run them in this process. Needs the PostgreSQL
    /// store.
    #[arg(long)]
    pub queue: bool,
}

impl Flags {
    /// Where and how to listen, and the server's settings over `storage`.
    /// A tokens file that cannot be read, or a token that cannot be made,
    /// is refused here, before anything listens.
    pub fn settings(self, storage: Storage) -> Result<(Listen, Config), Failure> {
        // A flag says more than the environment: `AWR_TOKEN` is the token
        // only when no flag says how callers are let in.
        if self.token.is_some() {
            crate::note(
                "awr: warning: --token is in this process's command line, which other users of the machine can read; give it in AWR_TOKEN or a --tokens file",
            );
        }
        let token = self
            .token
            .or_else(|| std::env::var("AWR_TOKEN").ok())
            .filter(|t| !t.is_empty());
        if let Some(token) = &token
            && token.chars().count() < MIN_TOKEN
        {
            return Err(Failure::Input(anyhow::anyhow!(
                "--token (or AWR_TOKEN) is {} characters long; use at least {MIN_TOKEN} (e.g. `openssl rand -hex 32`), or let the server make one",
                token.chars().count()
            )));
        }
        let (access, made_token) = match (token, self.tokens) {
            _ if self.no_auth => (Access::Open, None),
            (_, Some(file)) => (Access::from_file(&file).map_err(Failure::Input)?, None),
            (Some(token), None) => (Access::single(&token), None),
            (None, None) => {
                let (token, access) = Access::generated().map_err(Failure::Run)?;
                (access, Some(token))
            }
        };
        let mut config = Config::new(storage, self.root, access);
        config.heartbeat = std::time::Duration::from_secs(self.heartbeat);
        config.guard.hosts = self.allow_host;
        config.guard.origins = self.allow_origin;
        config.allow_inline_code = self.allow_inline_code;
        config.queue = self.queue;
        config.limits = Limits {
            connections: self.max_connections as usize,
            streams: self.max_streams as usize,
            streams_per_caller: self.max_streams_per_token as usize,
        };
        let tls = self
            .tls_cert
            .zip(self.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key });
        let listen = Listen {
            addr: self.addr,
            tls,
            made_token,
            retention: self.retention,
        };
        Ok((listen, config))
    }
}

/// `--allow-host`, checked.
fn parse_host(text: &str) -> Result<String, String> {
    super::guard::parse_host(text).map_err(|e| format!("{e:#}"))
}

/// `--allow-origin`, checked.
fn parse_origin(text: &str) -> Result<String, String> {
    super::guard::parse_origin(text).map_err(|e| format!("{e:#}"))
}
