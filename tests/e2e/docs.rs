//! The documentation tells the truth: every example line in `docs/events.md`
//! parses as the event type it documents, and every type has an entry.

use domain::event::KNOWN_TYPES;
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
