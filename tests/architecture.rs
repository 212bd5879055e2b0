//! The arrows ARCHITECTURE.md forbids, checked over the source: every `crate::…` and `super::…`
//! path in non-test code of `src/` must point to a module of a lower layer (or the same
//! top-level module), engines never import each other, and the hot path (the rank loop and the
//! engines) never imports the code that formats numbers for people.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers, lowest first: a module may import modules of lower layers, and its own top-level
/// module. The longest matching prefix decides.
const LAYERS: &[(&str, u32)] = &[
    // Leaves: no imports from the crate beyond other leaves.
    ("exit", 0),
    ("units", 0),
    ("schema", 0),
    ("s3::xml", 0),
    ("s3::sigv4", 0),
    ("settings::keys", 0),
    ("verify", 0),
    ("signals", 0),
    // Readers of the world: configuration text, clocks, the machine's limits, CPUs.
    ("config", 1),
    ("metrics", 1),
    ("budget", 1),
    ("affinity", 1),
    // The S3 client.
    ("s3", 2),
    // Datasets: writing them, reading their footers.
    ("datagen", 3),
    ("catalog", 3),
    // The embedded server: a peer over sockets, below everything that runs a benchmark.
    ("server", 4),
    // Parse, resolve: settings, then the plan.
    ("settings", 5),
    ("plan", 6),
    // Run: the step loop, the engines under it, the driver over both.
    ("rank", 7),
    ("engine", 8),
    // The processes of a run (MPI under the `mpi` feature): each host's share of the plan
    // and its budget, the barrier across hosts, the merge of their reports. Beside the engines
    // (neither imports the other), below the driver that links the step barrier to it.
    ("cluster", 8),
    ("run", 9),
    // Results.
    ("summary", 10),
    ("report", 11),
    // Many runs: the sweep over child processes, and its tables.
    ("sweep", 12),
    ("compare", 13),
    // The top.
    ("cli", 14),
    // Sessions: a command from its flags to its exit code, over everything below.
    ("run::store", 15),
    ("run::session", 16),
    ("sweep::session", 16),
    ("commands", 17),
    // Test-only: property tests over every parser.
    ("fuzz", 18),
];

/// Imports no layer rule catches: `(from, to)` by module prefix.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    (
        "engine::uring",
        "engine::baseline",
        "engines never import each other",
    ),
    (
        "engine::baseline",
        "engine::uring",
        "engines never import each other",
    ),
    ("engine", "units", "the hot path never formats for people"),
    ("rank", "units", "the hot path never formats for people"),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| is_under(module, prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, layer)| *layer)
}

fn is_under(module: &str, prefix: &str) -> bool {
    module == prefix || module.starts_with(&format!("{prefix}::"))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The module path of a source file: `src/engine/uring/mod.rs` → `engine::uring`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The lines of `text` outside `#[cfg(test)]` items and comments.
fn production_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_test = false;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if in_test {
            // A test item at the top level ends at a `}` in the first column.
            if line == "}" {
                in_test = false;
            }
            continue;
        }
        if line.trim_start() == "#[cfg(test)]" && !line.starts_with(' ') {
            // The item's own first line may close it (`#[cfg(test)] use …;`).
            if let Some(next) = lines.next()
                && !next.trim_end().ends_with(';')
            {
                in_test = true;
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or("");
        if !code.trim().is_empty() {
            out.push(code);
        }
    }
    out
}

/// The modules a piece of code refers to, resolved against `module` (for `super::`).
fn references(module: &str, code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    // `super::` in `a/b.rs` and in `a/b/mod.rs` (both module a::b) is `a`.
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    for (anchor, base) in [("crate::", String::new()), ("super::", parent.to_string())] {
        let mut rest = code;
        while let Some(at) = rest.find(anchor) {
            // Skip `$crate::` and identifiers that merely end in the anchor.
            let before = rest[..at].chars().last();
            rest = &rest[at + anchor.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            for path in paths_at(rest) {
                let full = if base.is_empty() {
                    path
                } else {
                    format!("{base}::{path}")
                };
                found.insert(full);
            }
        }
    }
    found
}

/// The module paths at the start of `rest`: `a::b::C` → `a::b`; `{a, b::c}` → `a`, `b::c`.
fn paths_at(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let end = group.find('}').unwrap_or(group.len());
        return group[..end]
            .split(',')
            .map(|p| p.trim())
            .filter(|p| !p.is_empty() && *p != "self")
            .flat_map(paths_at)
            .collect();
    }
    let segments: Vec<&str> = rest
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .next()
        .unwrap_or("")
        .split("::")
        .filter(|s| !s.is_empty())
        .collect();
    // Module names are lowercase; stop at the first type, function or constant.
    let modules: Vec<&str> = segments
        .iter()
        .take_while(|s| s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .copied()
        .collect();
    if modules.is_empty() {
        return Vec::new();
    }
    vec![modules.join("::")]
}

/// Every forbidden arrow in `code` of `module`, as a sentence.
fn violations(module: &str, code: &[&str]) -> Vec<String> {
    let Some(from_layer) = layer(module) else {
        return if module == "lib" || module == "main" {
            Vec::new()
        } else {
            vec![format!(
                "{module} has no layer: add it to LAYERS and ARCHITECTURE.md"
            )]
        };
    };
    let mut out = Vec::new();
    for line in code {
        for target in references(module, line) {
            let Some(to_layer) = layer(&target) else {
                continue;
            };
            let inside = top(&target) == top(module);
            if to_layer > from_layer || (to_layer == from_layer && !inside) {
                out.push(format!(
                    "{module} (layer {from_layer}) imports {target} (layer {to_layer}): \
                     lower layers never import higher ones"
                ));
            }
            for (from, to, why) in FORBIDDEN {
                if is_under(module, from) && is_under(&target, to) {
                    out.push(format!("{module} imports {target}: {why}"));
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_across_a_forbidden_arrow() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 30, "found only {} source files", files.len());
    let mut all = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        all.extend(violations(&module, &production_lines(&text)));
    }
    assert!(all.is_empty(), "forbidden imports:\n{}", all.join("\n"));
}

#[test]
fn the_checker_sees_what_it_must() {
    // Upward, across modules of one layer, between engines, and formatting on the hot path.
    let cases: &[(&str, &str, bool)] = &[
        ("plan", "use crate::engine::EngineKind;", true),
        ("plan", "use crate::{budget, rank};", true),
        ("plan", "use crate::budget::{self, BudgetShape};", false),
        ("catalog", "use crate::datagen::write_file;", true),
        ("s3::client", "use super::xml::{self, XmlWriter};", false),
        ("s3::client", "use crate::server::xml::XmlWriter;", true),
        ("engine::uring", "use super::baseline::Tasks;", true),
        ("engine::uring", "use super::window::Window;", false),
        ("engine::baseline", "let x = crate::units::bytes(3);", true),
        ("exit", "use crate::commands::RunFailed;", true),
        ("commands", "use crate::{affinity, budget, exit};", false),
        ("server::handler", "$crate::exit::USAGE", false),
    ];
    for (module, line, bad) in cases {
        let found = violations(module, &[line]);
        assert_eq!(!found.is_empty(), *bad, "{module}: {line}: {found:?}");
    }
    // Test code is not production code.
    let text =
        "use crate::exit;\n#[cfg(test)]\nmod tests {\n    use crate::engine::X;\n}\nfn f() {}\n";
    assert_eq!(
        production_lines(text),
        vec!["use crate::exit;", "fn f() {}"]
    );
}
