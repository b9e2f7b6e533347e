//! The loader against workflow files held in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use domain::workflow::NodeKind;

use super::*;
use crate::ports::MockWorkflowSource;

/// Files in memory; counts the reads of each.
#[derive(Default)]
struct Files {
    texts: HashMap<PathBuf, String>,
    reads: Mutex<HashMap<PathBuf, usize>>,
    /// Paths that resolve elsewhere, as a symlink would.
    links: HashMap<PathBuf, PathBuf>,
}

/// `a/./b` and `a/b` are one file; `..` is left alone, as a canonical path has none.
fn normal(path: &Path) -> PathBuf {
    path.components().collect()
}

impl Files {
    fn with(mut self, path: &str, text: &str) -> Self {
        self.texts.insert(PathBuf::from(path), text.to_owned());
        self
    }

    fn reads(&self, path: &str) -> usize {
        let reads = self.reads.lock().unwrap();
        reads.get(Path::new(path)).copied().unwrap_or(0)
    }
}

impl WorkflowSource for Files {
    fn read(&self, path: &Path) -> Result<String, SourceError> {
        let path = self.canonical(path).unwrap_or_else(|| normal(path));
        *self.reads.lock().unwrap().entry(path.clone()).or_default() += 1;
        self.texts
            .get(&path)
            .cloned()
            .ok_or_else(|| SourceError(format!("{}: no such file", path.display())))
    }

    fn canonical(&self, path: &Path) -> Option<PathBuf> {
        let path = normal(path);
        if let Some(target) = self.links.get(&path) {
            return Some(target.clone());
        }
        (self.texts.contains_key(&path) || path.extension().is_none()).then_some(path)
    }

    fn is_file(&self, path: &Path) -> bool {
        self.texts.contains_key(&normal(path))
    }
}

fn rules() -> LoadRules {
    LoadRules {
        project: PathBuf::from("/proj"),
        tools: vec!["read_file".into(), "shell".into()],
        calls_within: None,
        calls_outside: Vec::new(),
    }
}

/// A workflow named `name` whose steps call each of `calls` in turn.
fn caller(name: &str, calls: &[&str]) -> String {
    let steps: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(i, file)| format!("{{id: c{i}, call_workflow: {file}}}"))
        .collect();
    format!(
        "name: {name}\nagents: {{a: {{provider: codex}}}}\nsteps: [{}]\n",
        steps.join(", ")
    )
}

const LEAF: &str = "name: leaf\nagents: {a: {provider: codex}}\nsteps: [{agent: a}]\n";

fn load(files: &Files, file: &str) -> Result<Arc<WorkflowDef>, LoadError> {
    load_workflow(files, Path::new(file), &rules())
}

fn children(workflow: &WorkflowDef) -> Vec<Arc<WorkflowDef>> {
    workflow
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::CallWorkflow { resolved, .. } => resolved.clone(),
            _ => None,
        })
        .collect()
}

#[test]
fn a_child_named_twice_is_read_once_and_shared() {
    let files = Files::default()
        .with("/w/top.yaml", &caller("top", &["leaf.yaml", "./leaf.yaml"]))
        .with("/w/leaf.yaml", LEAF);
    let top = load(&files, "/w/top.yaml").unwrap();
    let kids = children(&top);
    assert_eq!(kids.len(), 2);
    assert!(Arc::ptr_eq(&kids[0], &kids[1]), "one parse, shared");
    assert_eq!(kids[0].name, "leaf");
    assert_eq!(files.reads("/w/leaf.yaml"), 1);
    assert_eq!(files.reads("/w/top.yaml"), 1);
}

#[test]
fn a_diamond_reads_each_file_once() {
    // f0 calls f1 twice, f1 calls f2 twice, ...: 2^11 paths, 12 files.
    let mut files = Files::default();
    for i in 0..12 {
        let next = format!("f{}.yaml", i + 1);
        let text = if i == 11 {
            LEAF.to_owned()
        } else {
            caller(&format!("f{i}"), &[&next, &next])
        };
        files = files.with(&format!("/w/f{i}.yaml"), &text);
    }
    load(&files, "/w/f0.yaml").unwrap();
    for i in 0..12 {
        assert_eq!(files.reads(&format!("/w/f{i}.yaml")), 1, "f{i}");
    }
}

#[test]
fn a_workflow_that_calls_itself_is_refused() {
    let files = Files::default().with("/w/self.yaml", &caller("me", &["self.yaml"]));
    let err = load(&files, "/w/self.yaml").unwrap_err();
    assert!(matches!(err, LoadError::Cycle { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "/w/self.yaml: node `c0` calls /w/self.yaml, which is already being called: \
         workflows must not call themselves"
    );
}

#[test]
fn a_cycle_through_other_files_is_refused_with_the_chain_of_calls() {
    let files = Files::default()
        .with("/w/a.yaml", &caller("a", &["sub/b.yaml"]))
        .with("/w/sub/b.yaml", &caller("b", &["../a.yaml"]));
    // `sub/../a.yaml` is `a.yaml` once resolved.
    let mut files = files;
    files.links.insert(
        PathBuf::from("/w/sub/../a.yaml"),
        PathBuf::from("/w/a.yaml"),
    );
    let err = load(&files, "/w/a.yaml").unwrap_err();
    let LoadError::Child { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(matches!(**source, LoadError::Cycle { .. }), "{source:?}");
    let chain = chain(&err);
    assert_eq!(
        chain,
        "/w/a.yaml: node `c0` calls /w/sub/b.yaml: /w/sub/b.yaml: node `c0` calls \
         /w/sub/../a.yaml, which is already being called: workflows must not call themselves"
    );
}

/// The error and its causes, as `awr` prints them (`{:#}` of anyhow).
fn chain(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut next = err.source();
    while let Some(cause) = next {
        parts.push(cause.to_string());
        next = cause.source();
    }
    parts.join(": ")
}

#[test]
fn call_chains_load_up_to_the_depth_limit_and_no_deeper() {
    let chain_of = |n: usize| {
        let mut files = Files::default();
        for i in 0..n {
            let text = if i + 1 == n {
                LEAF.to_owned()
            } else {
                caller(&format!("f{i}"), &[&format!("f{}.yaml", i + 1)])
            };
            files = files.with(&format!("/w/f{i}.yaml"), &text);
        }
        files
    };
    let deepest = chain_of(MAX_CALL_DEPTH);
    load(&deepest, "/w/f0.yaml").unwrap();

    let too_deep = chain_of(MAX_CALL_DEPTH + 1);
    let err = load(&too_deep, "/w/f0.yaml").unwrap_err();
    let mut innermost = &err;
    while let LoadError::Child { source, .. } = innermost {
        innermost = source;
    }
    assert!(matches!(innermost, LoadError::TooDeep { .. }), "{err:?}");
    assert_eq!(
        innermost.to_string(),
        format!(
            "/w/f63.yaml: node `c0` calls /w/f64.yaml: \
             `call_workflow` nests more than {MAX_CALL_DEPTH} workflows deep"
        )
    );
    assert_eq!(too_deep.reads("/w/f64.yaml"), 0, "refused before reading");
}

#[test]
fn a_bad_child_is_named_with_its_line_and_the_call_that_led_to_it() {
    let files = Files::default()
        .with("/w/top.yaml", &caller("top", &["bad.yaml"]))
        .with("/w/bad.yaml", "name: bad\nagents: [1,\n");
    let err = load(&files, "/w/top.yaml").unwrap_err();
    let chain = chain(&err);
    assert!(
        chain.starts_with("/w/top.yaml: node `c0` calls /w/bad.yaml: /w/bad.yaml:2:9: agents: "),
        "{chain}"
    );
}

#[test]
fn a_missing_file_is_the_sources_error() {
    let err = load(&Files::default(), "/w/nope.yaml").unwrap_err();
    assert_eq!(err.to_string(), "/w/nope.yaml: no such file");
}

#[test]
fn fixtures_are_looked_up_beside_the_top_level_file() {
    let flow = "name: m\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
    let missing = Files::default().with("/w/m.yaml", flow);
    let err = load(&missing, "/w/m.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/w/m.yaml: node `a`: mock agent `a` has no fixture file /w/fixtures/m/a.json"
    );
    let present = Files::default()
        .with("/w/m.yaml", flow)
        .with("/w/fixtures/m/a.json", "{}");
    load(&present, "/w/m.yaml").unwrap();
}

#[test]
fn a_workdir_is_judged_where_it_leads() {
    let flow = "name: t\nagents: {a: {provider: codex, workdir: work}}\nsteps: [{agent: a}]\n";
    let mut files = Files::default().with("/proj/t.yaml", flow);
    load(&files, "/proj/t.yaml").unwrap();
    files
        .links
        .insert(PathBuf::from("/proj/work"), PathBuf::from("/etc"));
    let err = load(&files, "/proj/t.yaml").unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("/proj/t.yaml: agents.a: `workdir`: `work` leads to /etc: "),
        "{message}"
    );
    assert!(
        message.ends_with("; set `allow_outside_project: true` to allow it"),
        "{message}"
    );
}

#[test]
fn an_unknown_tool_is_named_with_the_known_ones() {
    let flow =
        "name: t\nagents: {a: {provider: openai, model: m, tools: [shel]}}\nsteps: [{agent: a}]\n";
    let files = Files::default().with("/w/t.yaml", flow);
    let err = load(&files, "/w/t.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/w/t.yaml: agents.a.tools: unknown tool `shel` (built-in tools: read_file, shell)"
    );
}

#[test]
fn every_file_is_read_through_the_source() {
    let mut source = MockWorkflowSource::new();
    source
        .expect_canonical()
        .returning(|p| Some(p.to_path_buf()));
    source
        .expect_read()
        .withf(|p| p == Path::new("/w/leaf.yaml"))
        .times(1)
        .returning(|_| Ok(LEAF.to_owned()));
    let loaded = load_workflow(&source, Path::new("/w/leaf.yaml"), &rules()).unwrap();
    assert_eq!(loaded.name, "leaf");
}

/// With `calls_within` (a server's root), a call may name only a workflow
/// file inside it, symlinks resolved, and outside `calls_outside` (the
/// server's storage, where what clients send is kept); one elsewhere, or
/// not named `.yaml`, `.yml` or `.json`, is never read (its text would be
/// quoted in the error), and a missing one is told apart by nothing.
#[test]
fn calls_stay_within_the_root_they_are_given() {
    let mut files = Files::default()
        .with("/root/top.yaml", &caller("top", &["leaf.yaml"]))
        .with("/root/leaf.yaml", LEAF)
        .with("/etc/secret.yaml", LEAF)
        .with("/root/storage/workflows/sent.yaml", LEAF)
        .with("/root/notes.txt", LEAF)
        .with("/root/out.yaml", &caller("out", &["/etc/secret.yaml"]))
        .with("/root/up.yaml", &caller("up", &["../etc/secret.yaml"]))
        .with("/root/gone.yaml", &caller("gone", &["nothing.yaml"]))
        .with("/root/linked.yaml", &caller("linked", &["link.yaml"]))
        .with(
            "/root/stored.yaml",
            &caller("stored", &["storage/workflows/sent.yaml"]),
        )
        .with("/root/text.yaml", &caller("text", &["notes.txt"]));
    files.links.insert(
        PathBuf::from("/root/link.yaml"),
        PathBuf::from("/etc/secret.yaml"),
    );
    let rules = LoadRules {
        calls_within: Some(PathBuf::from("/root")),
        calls_outside: vec![PathBuf::from("/root/storage")],
        ..rules()
    };
    let top = load_workflow(&files, Path::new("/root/top.yaml"), &rules).unwrap();
    assert_eq!(children(&top)[0].name, "leaf");
    for file in [
        "/root/out.yaml",
        "/root/linked.yaml",
        "/root/gone.yaml",
        "/root/stored.yaml",
        "/root/text.yaml",
    ] {
        let err = load_workflow(&files, Path::new(file), &rules).unwrap_err();
        assert!(
            matches!(err, LoadError::CallOutside { .. }),
            "{file}: {err}"
        );
        assert!(err.to_string().contains("under /root"), "{err}");
        assert_eq!(err.culprit(), None, "names paths, quotes no text");
    }
    let up = load_workflow(&files, Path::new("/root/up.yaml"), &rules).unwrap_err();
    assert!(matches!(up, LoadError::CallOutside { .. }), "{up}");
    assert_eq!(files.reads("/etc/secret.yaml"), 0, "never read");
    assert_eq!(files.reads("/root/storage/workflows/sent.yaml"), 0);
    assert_eq!(files.reads("/root/notes.txt"), 0);
}
