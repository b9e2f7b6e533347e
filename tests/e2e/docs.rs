//! The documentation tells the truth: every example line in `docs/events.md`
//! parses as the event type it documents, every type has an entry, and no
//! page offers what is not built.

use domain::event::KNOWN_TYPES;
use domain::snapshot::SnapshotDelta;
use domain::{EventKind, RuntimeEvent};

use crate::util::repo_root;

#[test]
fn every_event_type_is_documented_with_a_line_that_parses() {
    let doc = std::fs::read_to_string(repo_root().join("docs/events.md")).unwrap();
    let mut documented = Vec::new();
    let mut heading = None;
    let mut in_json = false;
    for line in doc.lines() {
        if let Some(t) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            heading = Some(t.to_owned());
        } else if line == "```json" {
            in_json = true;
        } else if line == "```" {
            in_json = false;
        } else if in_json && line.starts_with(r#"{"delta""#) {
            // The example of a snapshot delta (not an event) reads as one.
            let delta = SnapshotDelta::from_json(line.as_bytes())
                .unwrap_or_else(|e| panic!("docs/events.md: {e}: {line}"));
            assert!(!delta.nodes.is_empty() && !delta.edges.is_empty(), "{line}");
        } else if in_json {
            let event = RuntimeEvent::from_json(line.as_bytes())
                .unwrap_or_else(|e| panic!("docs/events.md: {e}: {line}"));
            assert!(!matches!(event.kind, EventKind::Unknown { .. }), "{line}");
            assert_eq!(Some(event.kind.type_name()), heading.as_deref(), "{line}");
            documented.push(event.kind.type_name().to_owned());
        }
    }
    for t in KNOWN_TYPES {
        assert!(
            documented.iter().any(|d| d == t),
            "docs/events.md lacks `{t}`"
        );
    }
}

/// The line under a type's heading in `docs/events.md` that marks it as
/// reserved: defined and read, but never written by this version.
const RESERVED: &str = "**Reserved:**";

/// The `EventKind` variant of a type name: `agent:text:delta` -> `AgentTextDelta`.
fn variant_of(type_name: &str) -> String {
    type_name
        .split(':')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The production code (test modules cut off) of the crates that write events.
fn writer_sources() -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push_str(text.split("#[cfg(test)]").next().unwrap_or(""));
            }
        }
    }
    let mut out = String::new();
    for krate in ["application", "infrastructure", "adapters-agents"] {
        walk(
            &repo_root().join("crates").join(krate).join("src"),
            &mut out,
        );
    }
    out
}

/// Whether `code` builds `EventKind::<variant>` (not a longer variant). A
/// pattern that only reads it (`EventKind::X { .. }`, `EventKind::X { a, .. }`)
/// does not count: its braces end in `..`, which a construction's never do.
fn names_variant(code: &str, variant: &str) -> bool {
    let needle = format!("EventKind::{variant}");
    code.match_indices(&needle).any(|(at, _)| {
        let rest = &code[at + needle.len()..];
        if rest
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            return false;
        }
        !is_rest_pattern(rest)
    })
}

/// Whether `rest` opens with a brace block whose last token is `..`.
fn is_rest_pattern(rest: &str) -> bool {
    let Some(body) = rest.trim_start().strip_prefix('{') else {
        return false;
    };
    let mut depth = 1usize;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return body[..i].trim_end().ends_with("..");
                }
            }
            _ => {}
        }
    }
    false
}

/// `docs/events.md` marks exactly the types no production code writes as
/// reserved (a type the runtime, a store or an adapter never names cannot be
/// written), so the page never promises an event awr does not emit.
#[test]
fn reserved_event_types_are_marked_as_such() {
    let doc = std::fs::read_to_string(repo_root().join("docs/events.md")).unwrap();
    let mut reserved = Vec::new();
    let mut heading = None;
    for line in doc.lines() {
        if let Some(t) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            heading = Some(t.to_owned());
        } else if line.starts_with(RESERVED) {
            reserved.push(heading.clone().expect("a reserved mark under a heading"));
        }
    }
    let code = writer_sources();
    for t in KNOWN_TYPES {
        let written = names_variant(&code, &variant_of(t));
        let marked = reserved.iter().any(|r| r == t);
        assert!(
            written != marked,
            "docs/events.md: `{t}` is {} but {}",
            if marked {
                "marked reserved"
            } else {
                "not marked reserved"
            },
            if written {
                "awr writes it"
            } else {
                "nothing writes it"
            }
        );
    }
    assert!(names_variant("EventKind::AgentText {", "AgentText"));
    assert!(!names_variant("EventKind::AgentTextDelta {", "AgentText"));
}

/// Every command of `awr --help` is in the README's list, so a newcomer
/// finds pausing, resuming and commands where the others are.
#[test]
fn the_readme_lists_every_command() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let help = std::process::Command::new(crate::util::awr_bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 10, "{help}");
    for command in commands {
        let listed = [
            format!("awr {command} "),
            format!("awr {command}|"),
            format!("|{command} "),
        ];
        assert!(
            listed.iter().any(|l| readme.contains(l.as_str())),
            "README.md does not list `awr {command}`"
        );
    }
}
