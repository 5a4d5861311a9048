//! The layering rules of ARCHITECTURE.md, checked from the source: which top-level module of the
//! library may name which (`crate::x` paths outside `#[cfg(test)]` modules), no cycles between
//! them, and no source file over 1,000 lines. Violations that remain from before the rules were
//! written are listed below and must only shrink: a fixed one has to leave the list (the test
//! compares exactly), a new one fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::common::repo_root;

/// Dependencies that the architecture forbids outright (from, to).
const FORBIDDEN: &[(&str, &str)] = &[
    ("exec", "advisor"),
    ("report", "advisor"),
    ("device", "probe"),
    ("analysis", "exec"),
    ("analysis", "advisor"),
    ("analysis", "report"),
    ("analysis", "probe"),
    ("kernels", "analysis"),
    ("kernels", "exec"),
    ("kernels", "advisor"),
    ("probe", "analysis"),
    ("probe", "exec"),
    ("probe", "advisor"),
];

/// Forbidden edges still in the code, to be removed by the redesign (issue 11).
const KNOWN_VIOLATIONS: &[(&str, &str)] = &[];

/// Files over the limit that are still tolerated: none since issue 11 split the last ones, so a
/// file that grows past the limit fails. Generated tables are exempt.
const KNOWN_OVERSIZE: &[&str] = &[];

const MAX_LINES: usize = 1000;
const GENERATED: &[&str] = &["src/device/catalog_data.rs", "src/analysis/schema_data.rs"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its unit-test module (tests may use anything).
fn non_test_code(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// Top-level modules named by `crate::` paths in `code`, including `crate::{a, b::c}` groups.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        // `$crate::` inside macros and comments mentioning paths are still real uses or cheap
        // false positives; a `//` line is skipped.
        let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
        if code[line_start..at].trim_start().starts_with("//") {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// Edges between top-level modules of the library (`src/<module>/` or `src/<module>.rs`).
fn module_edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo_root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        // The binary's modules (main.rs, cli/) are the top layer: they may use everything.
        if module == "main" || module == "cli" || module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let targets = edges.entry(module.clone()).or_default();
        for name in named_modules(non_test_code(&text)) {
            if name != module {
                targets.insert(name);
            }
        }
    }
    edges
}

/// One cycle through the module graph, if any (depth-first search).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        allowed: &BTreeSet<(String, String)>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if allowed.contains(&(node.to_string(), next.clone())) {
                continue;
            }
            if let Some(cycle) = visit(next, edges, stack, done, allowed) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    // Edges already listed as violations are left out, so a cycle made only of them does not
    // fail twice; any other cycle does.
    let allowed: BTreeSet<(String, String)> = KNOWN_VIOLATIONS
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, edges, &mut Vec::new(), &mut done, &allowed) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn forbidden_dependencies_only_shrink() {
    let edges = module_edges();
    let actual: BTreeSet<(String, String)> = FORBIDDEN
        .iter()
        .filter(|(from, to)| edges.get(*from).is_some_and(|t| t.contains(*to)))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let known: BTreeSet<(String, String)> = KNOWN_VIOLATIONS
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = actual.difference(&known).collect();
    let fixed: Vec<_> = known.difference(&actual).collect();
    assert!(
        new.is_empty(),
        "forbidden module dependencies added: {new:?}"
    );
    assert!(
        fixed.is_empty(),
        "fixed, remove from KNOWN_VIOLATIONS in tests/it/layers.rs: {fixed:?}"
    );
}

#[test]
fn no_cycles_between_modules() {
    let edges = module_edges();
    assert!(
        find_cycle(&edges).is_none(),
        "module cycle: {:?} (edges: {edges:#?})",
        find_cycle(&edges)
    );
}

#[test]
fn no_source_file_over_the_limit() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut oversize: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|p| !GENERATED.contains(&p.as_str()))
        .filter(|p| {
            std::fs::read_to_string(root.join(p))
                .unwrap()
                .lines()
                .count()
                > MAX_LINES
        })
        .collect();
    oversize.sort();
    let known: Vec<String> = KNOWN_OVERSIZE.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = oversize.iter().filter(|f| !known.contains(f)).collect();
    let fixed: Vec<_> = known.iter().filter(|f| !oversize.contains(f)).collect();
    assert!(new.is_empty(), "files over {MAX_LINES} lines: {new:?}");
    assert!(
        fixed.is_empty(),
        "now under {MAX_LINES} lines, remove from KNOWN_OVERSIZE in tests/it/layers.rs: {fixed:?}"
    );
}

#[test]
fn the_scanner_reads_grouped_and_plain_paths() {
    let code = "use crate::{analysis::graph::Graph, device};\nlet x = crate::exec::plan::run();\n// crate::advisor is only mentioned\n";
    let names = named_modules(code);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec!["analysis", "device", "exec"]
    );
}
