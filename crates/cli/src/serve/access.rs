//! Who may call `awr serve`, and what each caller may do: the bearer
//! tokens, each with a name (recorded as the caller of what it causes)
//! and scopes (docs/security.md).
//!
//! A token is kept only as its SHA-256: a request's token is hashed once
//! and compared, in constant time, with every token's hash, so neither a
//! refusal's timing nor the order of the file tells what a guess got right.

use std::fmt;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use domain::Caller;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do; a route asks for one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// List runs, show one, stream its events, transcript and causal events.
    Read,
    /// Send a run commands (pause, cancel, resume, send, reply) and fork it.
    Control,
    /// Start runs (`POST /workflows`).
    Start,
    /// Answer what runs ask (the `approve` and `reject` commands), and no
    /// other command: a reviewer who may not pause or cancel. `control`
    /// includes it.
    Approve,
}

impl Scope {
    const ALL: [Scope; 4] = [Scope::Read, Scope::Control, Scope::Start, Scope::Approve];

    /// Its name in a tokens file and in a refusal.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Control => "control",
            Scope::Start => "start",
            Scope::Approve => "approve",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Read => 1,
            Scope::Control => 2,
            Scope::Start => 4,
            Scope::Approve => 8,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// Every scope: the server's single token, or no token at all.
    pub const ALL: Scopes = Scopes(15);

    /// Whether `scope` is in the set (`approve` is, with `control`).
    pub fn allow(self, scope: Scope) -> bool {
        let bits = match scope {
            Scope::Approve => Scope::Approve.bit() | Scope::Control.bit(),
            other => other.bit(),
        };
        self.0 & bits != 0
    }

    fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope.bit())
    }
}

/// One caller the server knows: its name, its scopes, its token's hash.
#[derive(Clone)]
pub struct Token {
    /// Recorded as the caller (`by`, `startedBy`) of what it causes.
    pub name: Caller,
    /// What it may do.
    pub scopes: Scopes,
    digest: [u8; 32],
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the hash: a weak token could be found from it.
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// A caller let in: who it is and what it may do.
#[derive(Debug, Clone)]
pub struct Granted {
    /// Its name.
    pub name: Caller,
    /// Its scopes.
    pub scopes: Scopes,
}

/// Who may call.
#[derive(Debug, Clone)]
pub enum Access {
    /// `--no-auth`: whoever reaches the server, with every scope, recorded
    /// as [`ANONYMOUS`]. Refused on a non-loopback address.
    Open,
    /// A bearer token is needed; each one names its caller.
    Tokens(Vec<Token>),
}

/// The caller of a server run with `--no-auth`.
pub const ANONYMOUS: &str = "anonymous";

/// The caller of the server's single token (`--token`, or the one it made).
pub const SINGLE: &str = "token";

/// Bytes of a token the server makes: 256 bits, from the OS.
const GENERATED_BYTES: usize = 32;

/// The shortest plain secret a tokens file may hold: 128 bits of hex.
const MIN_SECRET: usize = 32;

impl Access {
    /// The server's single token `secret`, with every scope.
    pub fn single(secret: &str) -> Self {
        Access::Tokens(vec![Token {
            name: known_name(SINGLE),
            scopes: Scopes::ALL,
            digest: Sha256::digest(secret.as_bytes()).into(),
        }])
    }

    /// A new random token (256 bits from the OS's generator, as hex) and
    /// the access it gives.
    pub fn generated() -> anyhow::Result<(String, Self)> {
        let mut bytes = [0u8; GENERATED_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| anyhow!("cannot make a token: the OS's random generator failed: {e}"))?;
        let secret = hex::encode(bytes);
        let access = Self::single(&secret);
        Ok((secret, access))
    }

    /// The tokens of `file`, which only its owner may read (see
    /// [`parse_tokens`] for its lines).
    pub fn from_file(file: &Path) -> anyhow::Result<Self> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let named = || format!("--tokens {}", file.display());
        // Judged on the file opened, not on its name: what is read is what
        // was checked.
        let mut opened = std::fs::File::open(file).with_context(named)?;
        let meta = opened.metadata().with_context(named)?;
        let mode = meta.mode();
        if mode & 0o077 != 0 {
            bail!(
                "--tokens {}: other users may read it (mode {:o}); make it the owner's alone: chmod 600 {}",
                file.display(),
                mode & 0o777,
                file.display()
            );
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            bail!(
                "--tokens {}: it belongs to uid {}, not to this server's user (uid {me}), who alone may write it",
                file.display(),
                meta.uid()
            );
        }
        let mut text = String::new();
        opened.read_to_string(&mut text).with_context(named)?;
        let tokens = parse_tokens(&text).map_err(|e| anyhow!("{}:{e}", file.display()))?;
        Ok(Access::Tokens(tokens))
    }

    /// Whether a token is needed at all.
    pub fn needs_token(&self) -> bool {
        matches!(self, Access::Tokens(_))
    }

    /// The caller `presented` (a request's token) is, if any. Every token
    /// is compared, whichever matches, in constant time.
    pub fn check(&self, presented: Option<&str>) -> Result<Granted, Refusal> {
        let tokens = match self {
            Access::Open => {
                return Ok(Granted {
                    name: known_name(ANONYMOUS),
                    scopes: Scopes::ALL,
                });
            }
            Access::Tokens(tokens) => tokens,
        };
        let presented = presented.ok_or(Refusal::Missing)?;
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for token in tokens {
            if bool::from(token.digest.ct_eq(&digest)) {
                found = Some(token);
            }
        }
        found
            .map(|t| Granted {
                name: t.name.clone(),
                scopes: t.scopes,
            })
            .ok_or(Refusal::Wrong)
    }
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It carries no token.
    Missing,
    /// Its token is none of the server's.
    Wrong,
}

/// A name this module spells, which is valid.
fn known_name(name: &str) -> Caller {
    Caller::new(name).unwrap_or_else(|_| unreachable!("`{name}` is a valid caller name"))
}

/// The lines of a tokens file: `NAME SCOPE[,SCOPE…] SECRET`, fields apart by
/// spaces or tabs, `#` starting a comment, blank lines ignored.
///
/// - NAME: 1 to 64 of `A-Z a-z 0-9 . _ -`, unique (it is recorded as the
///   caller, and a local user's `LOGIN@HOST` cannot be mistaken for it);
/// - SCOPE: `read`, `control`, `start`;
/// - SECRET: the token itself (at least 32 characters), or `sha256:HEX`,
///   the hex of its SHA-256, so the file need not hold the token. No two
///   tokens may be the same.
///
/// An error begins with the line's number.
pub fn parse_tokens(text: &str) -> anyhow::Result<Vec<Token>> {
    let mut tokens: Vec<Token> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.split_once('#').map_or(line, |(before, _)| before);
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let token = parse_line(&fields).map_err(|e| anyhow!("{number}: {e}"))?;
        if let Some(earlier) = tokens.iter().find(|t| t.name == token.name) {
            bail!("{number}: the name `{}` is given twice", earlier.name);
        }
        if let Some(earlier) = tokens.iter().find(|t| t.digest == token.digest) {
            bail!(
                "{number}: this token is `{}`'s too; each caller needs its own",
                earlier.name
            );
        }
        tokens.push(token);
    }
    if tokens.is_empty() {
        bail!("1: no token in the file (lines are `NAME SCOPE[,SCOPE...] SECRET`)");
    }
    Ok(tokens)
}

fn parse_line(fields: &[&str]) -> anyhow::Result<Token> {
    let [name, scopes, secret] = fields else {
        bail!(
            "expected `NAME SCOPE[,SCOPE...] SECRET`, found {} field(s)",
            fields.len()
        );
    };
    let valid_name = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid_name {
        bail!("`{name}` is not a token name: use 1 to 64 of A-Z a-z 0-9 . _ -");
    }
    let mut set = Scopes::default();
    for scope in scopes.split(',') {
        let known = Scope::ALL.iter().find(|s| s.as_str() == scope);
        let Some(scope) = known else {
            bail!("`{scope}` is not a scope (read, control, start, approve)");
        };
        set = set.with(*scope);
    }
    let digest = match secret.strip_prefix("sha256:") {
        Some(hex_digest) => {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(hex_digest, &mut digest)
                .map_err(|_| anyhow!("`sha256:` must be followed by 64 hex digits"))?;
            digest
        }
        None if secret.len() < MIN_SECRET => {
            bail!(
                "the token of `{name}` is {} characters long; use at least {MIN_SECRET} (e.g. `openssl rand -hex 32`)",
                secret.len()
            );
        }
        None => Sha256::digest(secret.as_bytes()).into(),
    };
    Ok(Token {
        name: Caller::new(*name)?,
        scopes: set,
        digest,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const A: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";

    #[test]
    fn a_file_names_each_token_its_scopes_and_secret() {
        let b_hash = hex::encode(Sha256::digest(b"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"));
        let text = format!(
            "# the team's tokens\n\nalice read,control,start {A}\n  ci-bot\tstart  sha256:{b_hash}  # CI\n"
        );
        let access = Access::Tokens(parse_tokens(&text).unwrap());
        let alice = access.check(Some(A)).unwrap();
        assert_eq!(alice.name.as_str(), "alice");
        assert!(Scope::ALL.iter().all(|s| alice.scopes.allow(*s)));
        let bot = access
            .check(Some("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"))
            .unwrap();
        assert_eq!(bot.name.as_str(), "ci-bot");
        assert!(bot.scopes.allow(Scope::Start));
        assert!(!bot.scopes.allow(Scope::Read));
        assert!(!bot.scopes.allow(Scope::Control));
        assert_eq!(access.check(Some("nope")).unwrap_err(), Refusal::Wrong);
        // `approve` alone answers questions; `control` includes it.
        let reviewer = Access::Tokens(parse_tokens(&format!("rev approve {A}")).unwrap());
        let reviewer = reviewer.check(Some(A)).unwrap();
        assert!(reviewer.scopes.allow(Scope::Approve));
        assert!(!reviewer.scopes.allow(Scope::Control));
        assert!(alice.scopes.allow(Scope::Approve));
        assert!(!bot.scopes.allow(Scope::Approve));
        assert_eq!(access.check(None).unwrap_err(), Refusal::Missing);
        // The hash is what matches: a secret given as its own hash is not the token.
        assert_eq!(
            access.check(Some(&format!("sha256:{b_hash}"))).unwrap_err(),
            Refusal::Wrong
        );
    }

    #[test]
    fn a_bad_line_is_named_with_what_is_wrong() {
        let cases = [
            (format!("alice read {A} extra"), "1: expected"),
            (format!("\nal ice read {A}"), "2: expected"),
            (
                format!("al@ice read {A}"),
                "1: `al@ice` is not a token name",
            ),
            (format!("alice admin {A}"), "1: `admin` is not a scope"),
            (format!("alice read, {A}"), "1: `` is not a scope"),
            (
                "alice read short".to_owned(),
                "1: the token of `alice` is 5 characters",
            ),
            (
                "alice read sha256:abc".to_owned(),
                "1: `sha256:` must be followed",
            ),
            (
                format!("alice read {A}\nalice start {A}x"),
                "2: the name `alice` is given twice",
            ),
            (
                format!("alice read {A}\nbob start {A}"),
                "2: this token is `alice`'s too",
            ),
            ("# nothing\n".to_owned(), "1: no token"),
        ];
        for (text, wanted) in cases {
            let e = parse_tokens(&text).unwrap_err().to_string();
            assert!(e.starts_with(wanted), "{text:?}: {e}");
            assert!(!e.contains(A), "a secret is never quoted back: {e}");
        }
    }

    #[test]
    fn a_tokens_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, format!("alice read {A}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Access::from_file(&file).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Access::from_file(&file).unwrap().needs_token());
        // Another user's file is refused too, however private: its owner,
        // not this server's, decides who is in it.
        match std::os::unix::fs::chown(&file, Some(65534), None) {
            Ok(()) => {
                let e = Access::from_file(&file).unwrap_err().to_string();
                assert!(e.contains("belongs to uid 65534"), "{e}");
                std::os::unix::fs::chown(&file, Some(rustix::process::geteuid().as_raw()), None)
                    .unwrap();
            }
            Err(e) => eprintln!(
                "not checked: a file of another owner ({e}: the tests do not run as root)"
            ),
        }
        std::fs::write(&file, "alice read short\n").unwrap();
        let e = Access::from_file(&file).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}:1: ", file.display())), "{e}");
    }

    #[test]
    fn a_generated_token_is_256_random_bits_for_every_scope() {
        let (one, access) = Access::generated().unwrap();
        let (two, _) = Access::generated().unwrap();
        assert_eq!(one.len(), 64);
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one, two);
        let granted = access.check(Some(&one)).unwrap();
        assert_eq!(granted.name.as_str(), SINGLE);
        assert_eq!(granted.scopes, Scopes::ALL);
        assert!(format!("{access:?}").find(&one).is_none());
    }
}
