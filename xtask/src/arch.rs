//! `cargo xtask tidy`: the rules of the architecture that the compiler
//! does not check, read from the sources with `syn` (test code left out):
//!
//! - **no file-level import cycles** in a crate: a file that uses an item
//!   of another file's module depends on that file (a child using its
//!   parent module's items is not counted: the parent owns the child); a
//!   strongly connected set of two files or more is a cycle;
//! - **waits only through `Clock`**: the application neither sleeps nor
//!   reads the time itself (`tokio::time`, `thread::sleep`,
//!   `Instant::now`, `SystemTime::now`), so its tests drive time;
//! - **child processes only through `group::spawn`**: `Command` is named
//!   in `adapters-agents/src/process/group.rs` alone, which makes every
//!   process in a group of its own that a dead writer's successor can
//!   sweep;
//! - **concrete types only in the composition root**: in `cli`, only the
//!   composition root names `infrastructure` or `adapters_agents`; front
//!   ends see the application's services and ports;
//! - **two front ends side by side**: the terminal (`cli/src/terminal/`)
//!   and `awr serve` (`cli/src/serve/`) use nothing of each other;
//! - **a run's status is the application's to tell**: nothing in `cli`
//!   asks a store whether a run has a writer (`has_writer`), which is how
//!   `running` is told from `interrupted` (`application::inspect`,
//!   `application::query`).
//!
//! What the tree still breaks is listed in [`DEBT`], exactly: a new
//! violation fails, and so does a listed one that is gone, so the list
//! only shrinks and always says what is left.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The crate roots checked, from the workspace root.
const ROOTS: [&str; 6] = [
    "crates/domain/src/lib.rs",
    "crates/application/src/lib.rs",
    "crates/infrastructure/src/lib.rs",
    "crates/adapters-agents/src/lib.rs",
    "crates/cli/src/lib.rs",
    "crates/cli/src/main.rs",
];

/// The one file that names `Command`.
const PROCESS_GROUP: &str = "crates/adapters-agents/src/process/group.rs";

/// The files of `cli` that may name concrete types, its composition root:
/// `embed.rs` of the library and the program's `wiring/` folder (prefixes).
const COMPOSITION_ROOT: [&str; 2] = ["crates/cli/src/wiring/", "crates/cli/src/embed.rs"];

/// Every rule [`check`] applies, by the name its violations carry.
const RULES: [&str; 6] = [
    "cycle",
    "clock",
    "process",
    "composition",
    "front-ends",
    "status",
];

/// The front ends of `cli`: their module under the crate root and their folder.
const FRONT_ENDS: [(&str, &str); 2] = [
    ("terminal", "crates/cli/src/terminal/"),
    ("serve", "crates/cli/src/serve/"),
];

/// Known violations, each as its rule and its place (a cycle's files
/// joined by ` <-> `, or a file): to be removed, never added to.
pub const DEBT: &[(&str, &str)] = &[];

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The rule's name: `cycle`, `clock`, `process`, `composition`,
    /// `front-ends`, `status`.
    pub rule: &'static str,
    /// Where: a file, or a cycle's files joined by ` <-> `.
    pub place: String,
    /// What was found, with its line.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.rule, self.place, self.what)
    }
}

/// One module of a crate: its path from the crate root and its file.
#[derive(Debug, Clone)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
}

/// A path named in a file: the module it is named in, its segments, its line.
#[derive(Debug, Clone)]
struct Named {
    module: Vec<String>,
    segments: Vec<String>,
    line: usize,
}

/// What one file holds: its inline and declared modules, and every path
/// its non-test code names.
#[derive(Default)]
struct Collector {
    /// The module being read, from the crate root.
    module: Vec<String>,
    /// `mod x;` declarations: the module declaring them and the name.
    declared: Vec<(Vec<String>, String)>,
    /// Inline `mod x { ... }` modules.
    inline: Vec<Vec<String>>,
    named: Vec<Named>,
}

/// Whether `attrs` make an item test code: `#[test]`, or a `cfg` that
/// asks for `test` (and not `not(test)`), such as `cfg(test)` or
/// `cfg(any(test, feature = "testing"))`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.is_ident("test") {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        let tokens = attr
            .meta
            .require_list()
            .map(|l| l.tokens.to_string())
            .unwrap_or_default();
        let words: Vec<&str> = tokens
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        words.contains(&"test") && !tokens.replace(' ', "").contains("not(test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl Collector {
    fn name(&mut self, segments: Vec<String>, line: usize) {
        if !segments.is_empty() {
            self.named.push(Named {
                module: self.module.clone(),
                segments,
                line,
            });
        }
    }

    /// Every path a `use` tree names, whole (a group expanded, a rename
    /// or glob ending at the path before it).
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.name(path, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.name(path, r.ident.span().start().line);
            }
            syn::UseTree::Glob(g) => {
                self.name(prefix.clone(), g.star_token.span().start().line);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if test_only(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(f) = item
            && test_only(&f.attrs)
        {
            return;
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        match &item.content {
            None => self.declared.push((self.module.clone(), name)),
            Some((_, items)) => {
                self.module.push(name);
                self.inline.push(self.module.clone());
                for item in items {
                    self.visit_item(item);
                }
                self.module.pop();
            }
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.name(segments, path.span().start().line);
        syn::visit::visit_path(self, path);
    }

    /// A method called is named as `.` and its name: no path can hold it.
    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let line = call.method.span().start().line;
        self.name(vec![".".into(), call.method.to_string()], line);
        syn::visit::visit_expr_method_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // A macro's arguments are tokens; those of the common macros
        // (`format!`, `matches!`, `vec!`, ...) are read as expressions
        // where they parse, so the paths in them count.
        self.visit_path(&mac.path);
        let parsed = mac.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        );
        if let Ok(exprs) = parsed {
            for expr in &exprs {
                self.visit_expr(expr);
            }
        }
    }
}

/// One crate's modules and the paths each file names.
struct CrateSource {
    modules: Vec<Module>,
    files: BTreeMap<PathBuf, Vec<Named>>,
}

/// Reads the crate whose root file is `root`, following `mod` declarations
/// (test modules are not followed).
fn read_crate(root: &Path) -> anyhow::Result<CrateSource> {
    let mut source = CrateSource {
        modules: Vec::new(),
        files: BTreeMap::new(),
    };
    let mut queue = vec![(root.to_path_buf(), Vec::<String>::new())];
    while let Some((file, module)) = queue.pop() {
        let text =
            std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parse {}", file.display()))?;
        let mut collector = Collector {
            module: module.clone(),
            ..Collector::default()
        };
        collector.visit_file(&ast);
        source.modules.push(Module {
            path: module.clone(),
            file: file.clone(),
        });
        for inline in &collector.inline {
            source.modules.push(Module {
                path: inline.clone(),
                file: file.clone(),
            });
        }
        // Where `mod x;` of this file's module looks for `x`.
        let owns_dir = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("lib.rs" | "main.rs" | "mod.rs")
        );
        let parent = file.parent().context("a source file has a directory")?;
        let base = if owns_dir {
            parent.to_path_buf()
        } else {
            let stem = file.file_stem().context("a file name")?;
            parent.join(stem)
        };
        for (declaring, name) in &collector.declared {
            let mut dir = base.clone();
            for inline in &declaring[module.len()..] {
                dir.push(inline);
            }
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(name).join("mod.rs");
            let found = if flat.exists() { flat } else { nested };
            if !found.exists() {
                bail!("{}: `mod {name};` has no file", file.display());
            }
            let mut child = declaring.clone();
            child.push(name.clone());
            queue.push((found, child));
        }
        source.files.insert(file, collector.named);
    }
    Ok(source)
}

/// The files `file` depends on within its crate, each with the first
/// line and path that uses it.
fn dependencies(source: &CrateSource, file: &Path) -> BTreeMap<PathBuf, (usize, String)> {
    let by_path: BTreeMap<&[String], &Path> = source
        .modules
        .iter()
        .map(|m| (m.path.as_slice(), m.file.as_path()))
        .collect();
    let mut out = BTreeMap::new();
    for named in source.files.get(file).into_iter().flatten() {
        let Some(absolute) = absolute(&by_path, named) else {
            continue;
        };
        // The longest prefix that is a module: the module the item is in.
        let Some(target) = (0..=absolute.len())
            .rev()
            .map(|n| &absolute[..n])
            .find(|prefix| by_path.contains_key(prefix))
        else {
            continue;
        };
        // A child using its parent's (or its own) items does not count.
        if named.module.starts_with(target) {
            continue;
        }
        if let Some(target_file) = by_path.get(target)
            && *target_file != file
        {
            out.entry(target_file.to_path_buf())
                .or_insert_with(|| (named.line, named.segments.join("::")));
        }
    }
    out
}

/// `named`'s path from the crate root, when it is a path of this crate.
fn absolute(modules: &BTreeMap<&[String], &Path>, named: &Named) -> Option<Vec<String>> {
    let first = named.segments.first()?;
    let mut path = match first.as_str() {
        "crate" => Vec::new(),
        "self" => named.module.clone(),
        "super" => {
            let mut module = named.module.clone();
            let mut rest = named.segments.as_slice();
            while rest.first().is_some_and(|s| s == "super") {
                module.pop()?;
                rest = &rest[1..];
            }
            module.extend(rest.iter().cloned());
            return Some(module);
        }
        _ => {
            // A child module named from its parent: `child::item`.
            let mut child = named.module.clone();
            child.push(first.clone());
            if !modules.contains_key(child.as_slice()) {
                return None;
            }
            named.module.clone()
        }
    };
    let skip = usize::from(matches!(first.as_str(), "crate" | "self"));
    path.extend(named.segments[skip..].iter().cloned());
    Some(path)
}

/// The strongly connected sets of two files or more of `graph` (Tarjan).
fn cycles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g Path, usize>,
        low: BTreeMap<&'g Path, usize>,
        stack: Vec<&'g Path>,
        on_stack: BTreeSet<&'g Path>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g Path) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_path();
            if !s.index.contains_key(w) {
                connect(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_path_buf());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_path()) {
            connect(&mut state, v);
        }
    }
    state.found.sort();
    state.found
}

/// `path` from the workspace root, as the rules name files.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Whether `segments` holds `pattern` as consecutive segments.
fn holds(segments: &[String], pattern: &[&str]) -> bool {
    segments
        .windows(pattern.len())
        .any(|w| w.iter().zip(pattern).all(|(s, p)| s == p))
}

/// Every violation of the rules in the workspace at `root`, sorted.
pub fn check(root: &Path) -> anyhow::Result<Vec<Violation>> {
    let mut found = Vec::new();
    for crate_root in ROOTS {
        let source = read_crate(&root.join(crate_root))?;
        let uses: BTreeMap<PathBuf, BTreeMap<PathBuf, (usize, String)>> = source
            .files
            .keys()
            .map(|file| (file.clone(), dependencies(&source, file)))
            .collect();
        let graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = uses
            .iter()
            .map(|(file, used)| (file.clone(), used.keys().cloned().collect()))
            .collect();
        for cycle in cycles(&graph) {
            let files: Vec<String> = cycle.iter().map(|f| relative(root, f)).collect();
            // Each file's first use of another file of the cycle.
            let mut how = Vec::new();
            for file in &cycle {
                for (target, (line, path)) in &uses[file] {
                    if cycle.contains(target) {
                        how.push(format!(
                            "{} line {line} uses `{path}` ({})",
                            relative(root, file),
                            relative(root, target)
                        ));
                    }
                }
            }
            found.push(Violation {
                rule: "cycle",
                place: files.join(" <-> "),
                what: format!("these files use each other's items: {}", how.join("; ")),
            });
        }
        for (file, named) in &source.files {
            let place = relative(root, file);
            for n in named {
                let at = |what: &str| format!("line {}: {what}", n.line);
                let path = n.segments.join("::");
                if crate_root.starts_with("crates/application/") {
                    let clock = [
                        &["tokio", "time"][..],
                        &["thread", "sleep"],
                        &["Instant", "now"],
                        &["SystemTime", "now"],
                    ];
                    if clock.iter().any(|p| holds(&n.segments, p)) {
                        found.push(Violation {
                            rule: "clock",
                            place: place.clone(),
                            what: at(&format!("`{path}`: wait and read time through `Clock`")),
                        });
                    }
                }
                if place != PROCESS_GROUP
                    && (holds(&n.segments, &["process", "Command"])
                        || holds(&n.segments, &["Command", "new"]))
                {
                    found.push(Violation {
                        rule: "process",
                        place: place.clone(),
                        what: at(&format!(
                            "`{path}`: start processes with `process::group::spawn` \
                             (`group::command` makes its `Command`)"
                        )),
                    });
                }
                let front_end = FRONT_ENDS
                    .iter()
                    .find(|(_, dir)| place.starts_with(dir))
                    .map(|(module, _)| *module);
                if let Some(own) = front_end
                    && let [first, module, ..] = n.segments.as_slice()
                    && first == "crate"
                    && module != own
                    && FRONT_ENDS.iter().any(|(other, _)| module == other)
                {
                    found.push(Violation {
                        rule: "front-ends",
                        place: place.clone(),
                        what: at(&format!(
                            "`{path}`: a front end uses the application's services and \
                             the composition root, never the other front end"
                        )),
                    });
                }
                if crate_root.starts_with("crates/cli/")
                    && !COMPOSITION_ROOT.iter().any(|root| place.starts_with(root))
                    && n.segments == [".", "has_writer"]
                {
                    found.push(Violation {
                        rule: "status",
                        place: place.clone(),
                        what: at("`has_writer`: whether a run is running or interrupted is \
                             the application's to tell (`inspect::run_view`, `query`)"),
                    });
                }
                if crate_root.starts_with("crates/cli/")
                    && !COMPOSITION_ROOT.iter().any(|root| place.starts_with(root))
                    && matches!(
                        n.segments.first().map(String::as_str),
                        Some("infrastructure" | "adapters_agents")
                    )
                {
                    found.push(Violation {
                        rule: "composition",
                        place: place.clone(),
                        what: at(&format!(
                            "`{path}`: only the composition root names concrete types"
                        )),
                    });
                }
            }
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.rule == b.rule && a.place == b.place && a.what == b.what);
    Ok(found)
}

/// `cargo xtask tidy`: fails on any violation [`DEBT`] does not list, and
/// on any it lists that is gone.
pub fn tidy(root: &Path) -> anyhow::Result<()> {
    let found = check(root)?;
    let (new, known) = judge(&found);
    let gone: Vec<_> = DEBT
        .iter()
        .filter(|(rule, place)| !known.iter().any(|v| v.rule == *rule && v.place == *place))
        .collect();
    for v in &new {
        eprintln!("tidy: {v}");
    }
    for (rule, place) in &gone {
        eprintln!("tidy: {rule}: {place}: fixed; remove it from `DEBT` in xtask/src/arch.rs");
    }
    let places: BTreeSet<_> = known.iter().map(|v| (v.rule, v.place.as_str())).collect();
    println!(
        "tidy: {} rules; {} known violations left in {} places (xtask/src/arch.rs `DEBT`)",
        RULES.len(),
        known.len(),
        places.len()
    );
    if !new.is_empty() || !gone.is_empty() {
        bail!(
            "tidy: {} new violations, {} fixed ones still listed",
            new.len(),
            gone.len()
        );
    }
    Ok(())
}

/// `found` split into those [`DEBT`] does not list and those it does.
fn judge(found: &[Violation]) -> (Vec<&Violation>, Vec<&Violation>) {
    found.iter().partition(|v| {
        !DEBT
            .iter()
            .any(|(rule, place)| v.rule == *rule && v.place == *place)
    })
}

#[cfg(test)]
mod tests {
    //! Each rule fails on a violation planted in a copy of the sources,
    //! and the tree passes, its known violations aside.

    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::{Path, PathBuf};

    use super::{DEBT, Violation, check, judge};
    use crate::workspace_root;

    /// A copy of the crates' sources under the target directory.
    fn copy_of_the_tree(name: &str) -> PathBuf {
        let dir = crate::target_dir()
            .unwrap()
            .join("tmp")
            .join(format!("xtask-arch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy(&workspace_root().join("crates"), &dir.join("crates"));
        dir
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "target" && name != "testdata" {
                    copy(&path, &to.join(name));
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                std::fs::copy(&path, to.join(name)).unwrap();
            }
        }
    }

    /// Appends `code` to the file `file` of the copy at `root`.
    fn plant(root: &Path, file: &str, code: &str) {
        let path = root.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(code);
        std::fs::write(&path, text).unwrap();
    }

    /// What `check` finds in the copy beyond what it finds in the tree.
    fn planted(root: &Path) -> Vec<Violation> {
        let before = check(&workspace_root()).unwrap();
        let after = check(root).unwrap();
        std::fs::remove_dir_all(root).unwrap();
        after.into_iter().filter(|v| !before.contains(v)).collect()
    }

    #[test]
    fn the_tree_breaks_no_rule_but_its_listed_debt() {
        let found = check(&workspace_root()).unwrap();
        let (new, _) = judge(&found);
        assert!(new.is_empty(), "new violations: {new:#?}");
        for (rule, place) in DEBT {
            assert!(
                found.iter().any(|v| v.rule == *rule && v.place == *place),
                "{rule}: {place} is fixed; remove it from DEBT"
            );
        }
    }

    #[test]
    fn a_planted_import_cycle_fails() {
        let root = copy_of_the_tree("cycle");
        // `caller.rs` is used by `event.rs`; make it use `event.rs` back.
        plant(
            &root,
            "crates/domain/src/caller.rs",
            "\n#[allow(dead_code)]\nfn planted(_: &crate::event::EventKind) {}\n",
        );
        let found = planted(&root);
        assert!(
            found.iter().any(|v| v.rule == "cycle"
                && v.place.contains("crates/domain/src/caller.rs")
                && v.place.contains("crates/domain/src/event.rs")),
            "{found:#?}"
        );
    }

    #[test]
    fn a_planted_sleep_in_the_application_fails() {
        let root = copy_of_the_tree("clock");
        plant(
            &root,
            "crates/application/src/inspect.rs",
            "\n#[allow(dead_code)]\nasync fn planted() { tokio::time::sleep(std::time::Duration::ZERO).await; }\n",
        );
        let found = planted(&root);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, "clock");
        assert_eq!(found[0].place, "crates/application/src/inspect.rs");
        assert!(found[0].what.contains("tokio::time::sleep"), "{found:#?}");
        // The same in a test module is the test's business.
        let root = copy_of_the_tree("clock-test");
        plant(
            &root,
            "crates/application/src/inspect.rs",
            "\n#[cfg(test)]\nmod planted { async fn f() { tokio::time::sleep(std::time::Duration::ZERO).await; } }\n",
        );
        assert!(planted(&root).is_empty());
    }

    #[test]
    fn a_planted_command_outside_the_process_group_fails() {
        let root = copy_of_the_tree("process");
        plant(
            &root,
            "crates/infrastructure/src/fs.rs",
            "\n#[allow(dead_code)]\nfn planted() { let _ = std::process::Command::new(\"true\").status(); }\n",
        );
        let found = planted(&root);
        assert!(!found.is_empty(), "nothing found");
        assert!(
            found
                .iter()
                .all(|v| v.rule == "process" && v.place == "crates/infrastructure/src/fs.rs"),
            "{found:#?}"
        );
    }

    #[test]
    fn a_front_end_using_the_other_fails() {
        let root = copy_of_the_tree("front-ends");
        plant(
            &root,
            "crates/cli/src/serve/ui.rs",
            "\n#[allow(dead_code)]\nfn planted() { let _ = crate::terminal::inspect::show; }\n",
        );
        plant(
            &root,
            "crates/cli/src/terminal/causal.rs",
            "\n#[allow(dead_code)]\nuse crate::serve::App as Planted;\n",
        );
        let found = planted(&root);
        let places: Vec<&str> = found.iter().map(|v| v.place.as_str()).collect();
        assert_eq!(
            places,
            [
                "crates/cli/src/serve/ui.rs",
                "crates/cli/src/terminal/causal.rs"
            ],
            "{found:#?}"
        );
        assert!(found.iter().all(|v| v.rule == "front-ends"), "{found:#?}");
    }

    #[test]
    fn a_status_decided_in_a_front_end_fails() {
        let root = copy_of_the_tree("status");
        plant(
            &root,
            "crates/cli/src/serve/ui.rs",
            "\n#[allow(dead_code)]\nasync fn planted(s: &dyn application::ports::RunStore, r: domain::RunId) -> bool { s.has_writer(r).await.unwrap_or(true) }\n",
        );
        let found = planted(&root);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, "status");
        assert_eq!(found[0].place, "crates/cli/src/serve/ui.rs");
    }

    #[test]
    fn a_planted_concrete_type_in_a_front_end_fails() {
        let root = copy_of_the_tree("composition");
        plant(
            &root,
            "crates/cli/src/signals.rs",
            "\n#[allow(dead_code)]\nfn planted() -> infrastructure::store::MemoryRunStore { infrastructure::store::MemoryRunStore::new() }\n",
        );
        let found = planted(&root);
        assert!(!found.is_empty(), "nothing found");
        assert!(
            found
                .iter()
                .all(|v| v.rule == "composition" && v.place == "crates/cli/src/signals.rs"),
            "{found:#?}"
        );
    }
}
