//! The arrows ARCHITECTURE.md forbids, checked over the parsed source (`syn`): every path in
//! non-test code of `src/` that names a module of the crate — in a `use` tree (groups over
//! several lines, nested groups, `self`), after `crate::`, `super::` (any number of them) or
//! `self::`, through a child module's name, in an expression, a type or a macro's tokens — must
//! point to a module of a lower layer (or the same top-level module); engines never import each
//! other; the hot path (the rank loop and the engines) never imports the code that formats
//! numbers for people; and no two files, and no two modules, import each other. ARCHITECTURE.md's
//! layer table must say what `LAYERS` says, and docs/layout.md's layout must name every folder of
//! `src/` and every file directly in it.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// Layers, lowest first: a module may import modules of lower layers, and its own top-level
/// module. The longest matching prefix decides.
const LAYERS: &[(&str, u32)] = &[
    // Leaves: no imports from the crate beyond other leaves.
    ("exit", 0),
    ("extents", 0),
    ("units", 0),
    ("schema", 0),
    ("s3::xml", 0),
    ("s3::sigv4", 0),
    ("config::keys", 0),
    ("verify", 0),
    ("redact", 0),
    ("signals", 0),
    ("content", 0),
    ("checksum", 0),
    // MLPerf Storage's rules and the figures they are stated in: arithmetic only.
    ("mlperf", 0),
    // Readers of the world: configuration text, clocks, the machine's limits, CPUs.
    ("config", 1),
    ("metrics", 1),
    ("budget", 1),
    ("dataset", 1),
    ("affinity", 1),
    // A run's live counters and their samples over time.
    ("timeseries", 1),
    // Which loader a run reproduces, and s3dlio's rules for fetching an object.
    ("loader", 1),
    // The S3 client; one GET as an engine sends it.
    ("s3", 2),
    ("ranged", 2),
    // A mounted file system: its type, O_DIRECT's alignment, the page cache, the device.
    ("files", 2),
    // Datasets: writing them, reading their footers.
    ("datagen", 3),
    ("catalog", 3),
    // The embedded server: a peer over sockets, below everything that runs a benchmark.
    ("server", 4),
    // Parse, resolve: settings, then the plan.
    ("settings", 5),
    ("plan", 6),
    ("checkpoint", 6),
    // Run: the step loop, the engines under it, the driver over both.
    ("rank", 7),
    // One workload resolved once: its kind and its kind's settings (over settings and
    // checkpoint, beside the rank loop: neither imports the other).
    ("workload", 7),
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
    // What every session sets up first: the store and target, the engine choice.
    ("setup", 15),
    // MLPerf's results tree of one run (`run --results-dir`), and `datasize` (over settings,
    // catalog, cli).
    ("results", 15),
    ("sizing", 15),
    ("run::prepare", 16),
    // `ringload serve`: the embedded server on its own, beside the sessions.
    ("serve", 16),
    ("run::session", 16),
    ("run::source", 16),
    ("run::checkpoint", 16),
    ("run::checkpoint_hosts", 16),
    ("run::checkpoint_list", 16),
    ("run::checkpoint_store", 16),
    ("sweep::session", 16),
    ("sweep::maxnp_search", 16),
    ("sweep::points", 16),
    ("sweep::maxnp_report", 16),
    ("sweep::maxnp_results", 16),
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
    (
        "engine::file",
        "engine::uring",
        "engines never import each other",
    ),
    (
        "engine::file",
        "engine::baseline",
        "engines never import each other",
    ),
    (
        "engine::uring",
        "engine::file",
        "engines never import each other",
    ),
    (
        "engine::baseline",
        "engine::file",
        "engines never import each other",
    ),
    ("engine", "units", "the hot path never formats for people"),
    ("rank", "units", "the hot path never formats for people"),
    (
        "run",
        "cli",
        "the Face's types stay in the Face: a run takes a RunRequest",
    ),
    (
        "sweep",
        "cli",
        "the Face's types stay in the Face: a sweep takes a SweepRequest and a PointCommandLine",
    ),
    (
        "results",
        "cli",
        "the Face's types stay in the Face: the results tree takes values of its own",
    ),
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

/// One source file: its module path (`engine::uring` for `src/engine/uring/mod.rs`), its name
/// for messages, and its text.
struct Source {
    module: String,
    file: String,
    text: String,
}

/// One path in non-test code that names a module of the crate.
#[derive(Debug, Clone)]
struct Reference {
    /// The module the path is written in (an inline `mod` included).
    from: String,
    /// The file it is written in.
    file: String,
    /// The file that defines `defined` (an inline module's is the file around it).
    to_file: String,
    /// The module the path names (`crate::s3::Client` → `s3`): the layer rules judge this.
    named: String,
    /// Where the item really lives, `use` re-exports followed (`s3::Client` → `s3::client`):
    /// the cycle rules judge this.
    defined: String,
    /// The path as written, for messages.
    text: String,
}

/// A path as written, before it is resolved.
struct RawPath {
    /// The module it is written in, from the crate root.
    context: Vec<String>,
    segments: Vec<String>,
    /// For a `use` leaf: the name it brings into `context` (`None` for a glob).
    binds: Option<String>,
}

/// Collects modules, child declarations and every path of one file, skipping `#[cfg(test)]`.
struct Collector {
    context: Vec<String>,
    /// Inline modules found (from the crate root).
    modules: Vec<Vec<String>>,
    /// `(module, child)` for every `mod child;` and `mod child { … }`.
    children: Vec<(Vec<String>, String)>,
    paths: Vec<RawPath>,
}

/// Whether attributes hold `#[cfg(test)]` (or `#[cfg(all(test, …))]`): test code is not
/// production code.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(meta) = a.parse_args::<syn::Meta>() else {
            return false;
        };
        match meta {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(list) if list.path.is_ident("all") => list
                .tokens
                .into_iter()
                .any(|t| matches!(t, TokenTree::Ident(i) if i == "test")),
            _ => false,
        }
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
    fn push(&mut self, segments: Vec<String>, binds: Option<String>) {
        self.paths.push(RawPath {
            context: self.context.clone(),
            segments,
            binds,
        });
    }

    /// Every leaf of a use tree, as a full path: `a::{b, c::{self, D}}` → `a::b`, `a::c`,
    /// `a::c::D`.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                let name = prefix.last().cloned();
                self.push(prefix.clone(), name);
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                self.push(path, Some(n.ident.to_string()));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.push(path, Some(r.rename.to_string()));
            }
            syn::UseTree::Glob(_) => self.push(prefix.clone(), None),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// Paths inside a macro's tokens (`format!("{}", crate::units::bytes(n))`): every
    /// `crate`, `super` or `self` followed by `::`, not `$crate`.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            if let TokenTree::Group(g) = &tokens[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let after_dollar =
                i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
            let starts = matches!(&tokens[i], TokenTree::Ident(id)
                if (id == "crate" || id == "super" || id == "self") && !after_dollar);
            if !starts {
                i += 1;
                continue;
            }
            let mut segments = vec![tokens[i].to_string()];
            let mut j = i + 1;
            while j + 2 < tokens.len()
                && matches!(&tokens[j], TokenTree::Punct(p) if p.as_char() == ':')
                && matches!(&tokens[j + 1], TokenTree::Punct(p) if p.as_char() == ':')
                && matches!(&tokens[j + 2], TokenTree::Ident(_))
            {
                segments.push(tokens[j + 2].to_string());
                j += 3;
            }
            if segments.len() > 1 {
                self.push(segments, None);
            }
            i = j;
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        self.children.push((self.context.clone(), name.clone()));
        if let Some((_, items)) = &item.content {
            self.context.push(name);
            self.modules.push(self.context.clone());
            for item in items {
                self.visit_item(item);
            }
            self.context.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_none() {
            self.use_tree(&mut Vec::new(), &item.tree);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(segments, None);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        self.tokens(mac.tokens.clone());
    }
}

/// Every path in non-test code of `sources` that names one of the crate's modules, resolved.
fn references(sources: &[Source]) -> Result<Vec<Reference>, String> {
    let split = |m: &str| -> Vec<String> {
        m.split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    // Pass 1: every file's paths, the modules and the child declarations.
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut children: BTreeSet<(Vec<String>, String)> = BTreeSet::new();
    let mut collected = Vec::new();
    for source in sources {
        let file = syn::parse_file(&source.text).map_err(|e| format!("{}: {e}", source.file))?;
        let context = split(&source.module);
        modules.insert(context.clone(), source.file.clone());
        let mut c = Collector {
            context,
            modules: Vec::new(),
            children: Vec::new(),
            paths: Vec::new(),
        };
        c.visit_file(&file);
        for m in c.modules {
            modules.insert(m, source.file.clone());
        }
        children.extend(c.children);
        collected.push((source, c.paths));
    }
    // Crate-relative paths from the root: `crate::`, `super::`, `self::`, a child's name.
    let absolute = |context: &[String], segments: &[String]| -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut out: Vec<String>;
        let rest: &[String];
        if first == "crate" {
            out = Vec::new();
            rest = &segments[1..];
        } else if first == "super" {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            if ups > context.len() {
                return None;
            }
            out = context[..context.len() - ups].to_vec();
            rest = &segments[ups..];
        } else if first == "self" {
            out = context.to_vec();
            rest = &segments[1..];
        } else if children.contains(&(context.to_vec(), first.clone())) {
            out = context.to_vec();
            rest = segments;
        } else {
            return None;
        }
        out.extend(rest.iter().cloned());
        Some(out)
    };
    // The module a full path names: its longest prefix that is a module.
    let module_of = |path: &[String]| -> Option<(usize, Vec<String>)> {
        (1..=path.len())
            .rev()
            .find(|n| modules.contains_key(&path[..*n]))
            .map(|n| (n, path[..n].to_vec()))
    };
    // Pass 2: the names each module's `use` items bring in, for following re-exports.
    let mut imports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (_, paths) in &collected {
        for p in paths {
            if let (Some(name), Some(abs)) = (&p.binds, absolute(&p.context, &p.segments)) {
                imports.insert((p.context.clone(), name.clone()), abs);
            }
        }
    }
    let mut out = Vec::new();
    for (source, paths) in &collected {
        for p in paths {
            let Some(abs) = absolute(&p.context, &p.segments) else {
                continue;
            };
            let Some((n, named)) = module_of(&abs) else {
                continue;
            };
            // Follow `use` items: `crate::s3::Client` is defined where `s3` took it from.
            let (mut path, mut n, mut defined) = (abs.clone(), n, named.clone());
            for _ in 0..8 {
                let Some(item) = path.get(n) else { break };
                let Some(target) = imports.get(&(defined.clone(), item.clone())) else {
                    break;
                };
                let mut next = target.clone();
                next.extend(path[n + 1..].iter().cloned());
                let Some((m, module)) = module_of(&next) else {
                    break;
                };
                if module == defined && m == n {
                    break;
                }
                (path, n, defined) = (next, m, module);
            }
            let from = p.context.join("::");
            let named = named.join("::");
            if named.is_empty() || named == from {
                continue;
            }
            out.push(Reference {
                from,
                file: modules
                    .get(&p.context)
                    .cloned()
                    .unwrap_or_else(|| source.file.clone()),
                to_file: modules.get(&defined).cloned().unwrap_or_default(),
                named,
                defined: defined.join("::"),
                text: p.segments.join("::"),
            });
        }
    }
    Ok(out)
}

/// Every forbidden arrow among `refs`, as a sentence.
fn violations(refs: &[Reference]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for r in refs {
        let module = &r.from;
        let Some(from_layer) = layer(module) else {
            out.insert(format!(
                "{module} has no layer: add it to LAYERS and ARCHITECTURE.md"
            ));
            continue;
        };
        let target = &r.named;
        let Some(to_layer) = layer(target) else {
            continue;
        };
        let inside = top(target) == top(module);
        if to_layer > from_layer || (to_layer == from_layer && !inside) {
            out.insert(format!(
                "{module} (layer {from_layer}) imports {target} (layer {to_layer}) as `{}`: \
                 lower layers never import higher ones",
                r.text
            ));
        }
        for (from, to, why) in FORBIDDEN {
            if is_under(module, from) && is_under(target, to) {
                out.insert(format!("{module} imports {target} as `{}`: {why}", r.text));
            }
        }
    }
    out.into_iter().collect()
}

/// The groups of nodes that reach each other in `edges` (`from → to`, with an example path),
/// each as a sentence listing its arrows.
fn cycles(what: &str, edges: &BTreeMap<(String, String), String>) -> Vec<String> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_string()];
        while let Some(n) = stack.pop() {
            for m in next.get(n.as_str()).into_iter().flatten() {
                if seen.insert(m.to_string()) {
                    stack.push(m.to_string());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for node in next.keys() {
        if done.contains(*node) {
            continue;
        }
        let group: BTreeSet<String> = reach(node)
            .into_iter()
            .filter(|m| reach(m).contains(*node))
            .collect();
        if group.len() < 2 {
            continue;
        }
        let arrows: Vec<String> = edges
            .iter()
            .filter(|((f, t), _)| group.contains(f) && group.contains(t))
            .map(|((f, t), text)| format!("{f} → {t} (`{text}`)"))
            .collect();
        out.push(format!(
            "the {what} {} import each other: {}",
            group.iter().cloned().collect::<Vec<_>>().join(", "),
            arrows.join("; ")
        ));
        done.extend(group);
    }
    out
}

/// Two files that import each other (through any chain), and two modules that do: for each
/// reference, the two sides' ancestors just below their common ancestor (`config` and
/// `settings` for `settings::x` → `config::keys`).
fn import_cycles(refs: &[Reference]) -> Vec<String> {
    let mut files = BTreeMap::new();
    let mut modules = BTreeMap::new();
    for r in refs {
        if !r.to_file.is_empty() && r.to_file != r.file {
            files
                .entry((r.file.clone(), r.to_file.clone()))
                .or_insert_with(|| r.text.clone());
        }
        let a: Vec<&str> = r.from.split("::").collect();
        let b: Vec<&str> = r.defined.split("::").collect();
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        if common < a.len() && common < b.len() {
            modules
                .entry((a[..=common].join("::"), b[..=common].join("::")))
                .or_insert_with(|| r.text.clone());
        }
    }
    let mut out = cycles("files", &files);
    out.extend(cycles("modules", &modules));
    out
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

/// The library's sources (`main.rs` is the binary's crate, `lib.rs` only declares modules).
fn crate_sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .iter()
        .map(|f| Source {
            module: module_of(&src, f),
            file: f.strip_prefix(&src).unwrap().display().to_string(),
            text: std::fs::read_to_string(f).unwrap(),
        })
        .filter(|s| s.module != "main" && s.module != "lib")
        .collect()
}

#[test]
fn no_module_imports_across_a_forbidden_arrow() {
    let sources = crate_sources();
    assert!(
        sources.len() > 30,
        "found only {} source files",
        sources.len()
    );
    let refs = references(&sources).unwrap();
    assert!(refs.len() > 300, "found only {} references", refs.len());
    let all = violations(&refs);
    assert!(all.is_empty(), "forbidden imports:\n{}", all.join("\n"));
}

#[test]
fn no_two_files_or_modules_import_each_other() {
    let sources = crate_sources();
    let refs = references(&sources).unwrap();
    let all = import_cycles(&refs);
    assert!(all.is_empty(), "import cycles:\n{}", all.join("\n"));
}

/// The rows of ARCHITECTURE.md's layer table (`| layer | modules |` under "## Arrows that must
/// never exist"): each backticked module with its row's layer, in the order written.
fn doc_layers(doc: &str) -> Result<Vec<(String, u32)>, String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Arrows that must never exist"))
        .ok_or("no section \"## Arrows that must never exist\"")?;
    let mut lines = section
        .lines()
        .skip_while(|l| l.trim() != "| layer | modules |");
    lines
        .next()
        .ok_or("no table headed \"| layer | modules |\" in \"## Arrows that must never exist\"")?;
    let mut out = Vec::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, layer, modules, _] = cells[..] else {
            return Err(format!("a row that is not `| layer | modules |`: {line}"));
        };
        let layer: u32 = layer
            .parse()
            .map_err(|_| format!("a row whose layer is not a number: {line}"))?;
        let names: Vec<&str> = modules.split('`').skip(1).step_by(2).collect();
        if names.is_empty() {
            return Err(format!("a row that names no `module`: {line}"));
        }
        out.extend(names.into_iter().map(|m| (m.to_string(), layer)));
    }
    if out.is_empty() {
        return Err("the layer table has no rows".to_string());
    }
    Ok(out)
}

/// How the documented table differs from `layers`: each module missing from it, listed in it
/// but not in `layers`, listed twice, or listed in another layer.
fn layer_table_drift(documented: &[(String, u32)], layers: &[(&str, u32)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut doc: BTreeMap<&str, u32> = BTreeMap::new();
    for (module, layer) in documented {
        if let Some(first) = doc.insert(module, *layer) {
            out.push(format!(
                "`{module}` is listed twice in ARCHITECTURE.md's layer table (layers {first} and {layer})"
            ));
        }
    }
    for (module, layer) in layers {
        match doc.remove(module) {
            None => out.push(format!(
                "`{module}` (layer {layer} in LAYERS) is missing from ARCHITECTURE.md's layer table"
            )),
            Some(d) if d != *layer => out.push(format!(
                "`{module}` is layer {layer} in LAYERS but layer {d} in ARCHITECTURE.md's layer table"
            )),
            Some(_) => {}
        }
    }
    for (module, layer) in doc {
        out.push(format!(
            "`{module}` (layer {layer} in ARCHITECTURE.md's layer table) is not in LAYERS"
        ));
    }
    out
}

#[test]
fn architecture_md_lists_the_layers_this_test_checks() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let documented = doc_layers(&doc).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let drift = layer_table_drift(&documented, LAYERS);
    assert!(
        drift.is_empty(),
        "ARCHITECTURE.md's layer table and LAYERS (tests/architecture.rs) differ; make the table \
         say what LAYERS says:\n{}",
        drift.join("\n")
    );
}

#[test]
fn the_layer_table_check_sees_what_it_must() {
    let doc = "# A\n\n## Arrows that must never exist\n\ntext\n\n| layer | modules |\n|---|---|\n\
               | 0 | `exit`, `units` |\n| 1 | `config`, `exit` |\n| 2 | `s3` (tests only) |\n\
               | 3 | `extra` |\n\nWhich means:\n\n| layer | modules |\n|---|---|\n| 9 | `not_read` |\n";
    let documented = doc_layers(doc).unwrap();
    assert_eq!(
        documented,
        [
            ("exit", 0),
            ("units", 0),
            ("config", 1),
            ("exit", 1),
            ("s3", 2),
            ("extra", 3)
        ]
        .map(|(m, l)| (m.to_string(), l))
    );
    let drift = layer_table_drift(
        &documented,
        &[("exit", 0), ("config", 1), ("s3", 3), ("run", 9)],
    );
    assert_eq!(
        drift,
        [
            "`exit` is listed twice in ARCHITECTURE.md's layer table (layers 0 and 1)",
            "`exit` is layer 0 in LAYERS but layer 1 in ARCHITECTURE.md's layer table",
            "`s3` is layer 3 in LAYERS but layer 2 in ARCHITECTURE.md's layer table",
            "`run` (layer 9 in LAYERS) is missing from ARCHITECTURE.md's layer table",
            "`extra` (layer 3 in ARCHITECTURE.md's layer table) is not in LAYERS",
            "`units` (layer 0 in ARCHITECTURE.md's layer table) is not in LAYERS",
        ]
    );
    assert!(
        doc_layers(
            "## Arrows that must never exist\n\n| layer | modules |\n|---|---|\n| x | `a` |\n"
        )
        .is_err()
    );
    assert!(doc_layers("## Elsewhere\n\n| layer | modules |\n|---|---|\n| 0 | `a` |\n").is_err());
}

/// Where a layout entry's description starts: a line indented this far or more continues the
/// entry above it.
const LAYOUT_DESCRIPTION_COLUMN: usize = 20;

/// What docs/layout.md's layout (the code block of "## Layout") names under `src/`: each entry's
/// path relative to `src/`, a folder ending in `/` (`engine/uring/`), a file in its name
/// (`main.rs`). An entry starts a line: `src/<dir>/` or `src/<file>.rs` at its start, or a
/// folder inside the folder above as `<dir>/`, two spaces deeper than its parent's entry.
fn layout_entries(readme: &str) -> Result<BTreeSet<String>, String> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Layout\n"))
        .ok_or("no section \"## Layout\"")?;
    let block = section
        .split("```")
        .nth(1)
        .ok_or("no code block in \"## Layout\"")?;
    let mut out = BTreeSet::new();
    // The folders above the current line, outermost first (`engine`, `engine/uring`).
    let mut parents: Vec<String> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        if indent >= LAYOUT_DESCRIPTION_COLUMN {
            continue;
        }
        let name = line.split_whitespace().next().unwrap();
        if indent == 0 {
            parents.clear();
            let Some(path) = name.strip_prefix("src/") else {
                continue; // configs/, scripts/, tests/
            };
            if let Some(dir) = path.strip_suffix('/') {
                parents.push(dir.to_string());
            } else if !path.ends_with(".rs") || path.contains('/') {
                return Err(format!(
                    "`{name}` is neither `src/<dir>/` nor `src/<file>.rs`: {line}"
                ));
            }
            out.insert(path.to_string());
            continue;
        }
        let depth = indent / 2;
        let Some(dir) = name.strip_suffix('/') else {
            return Err(format!(
                "an indented entry is a folder, `<dir>/`, or the description starts at column \
                 {LAYOUT_DESCRIPTION_COLUMN}: {line}"
            ));
        };
        if indent % 2 != 0 || depth > parents.len() || dir.contains('/') {
            return Err(format!(
                "`{name}` is not two spaces deeper than a folder's entry above it: {line}"
            ));
        }
        parents.truncate(depth);
        let path = format!("{}/{dir}", parents[depth - 1]);
        out.insert(format!("{path}/"));
        parents.push(path);
    }
    Ok(out)
}

/// What docs/layout.md's layout must name: every folder under `src/` (`engine/uring/`) and every file
/// directly in it (`main.rs`).
fn src_entries(src: &Path) -> BTreeSet<String> {
    fn folders(src: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let rel = path.strip_prefix(src).unwrap();
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.insert(format!("{}/", parts.join("/")));
                folders(src, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    folders(src, src, &mut out);
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.insert(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

/// How the layout differs from `src/`: each folder or file it does not name, and each entry
/// that names nothing there.
fn layout_drift(named: &BTreeSet<String>, present: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = present
        .difference(named)
        .map(|p| format!("src/{p} has no entry in docs/layout.md's layout"))
        .collect();
    out.extend(
        named
            .difference(present)
            .map(|p| format!("docs/layout.md's layout names src/{p}, which does not exist")),
    );
    out
}

#[test]
fn readme_layout_names_every_folder_of_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("docs/layout.md")).unwrap();
    let named = layout_entries(&readme).unwrap_or_else(|e| panic!("docs/layout.md's layout: {e}"));
    let present = src_entries(&root.join("src"));
    assert!(
        present.contains("engine/uring/tls/"),
        "found only {present:?} under src/"
    );
    let drift = layout_drift(&named, &present);
    assert!(
        drift.is_empty(),
        "docs/layout.md's layout (## Layout) and src/ differ; an entry is `src/<dir>/` or \
         `src/<file>.rs` at a line's start, a folder inside one `<dir>/` two spaces deeper under \
         its parent's entry:\n{}",
        drift.join("\n")
    );
}

#[test]
fn the_layout_check_sees_what_it_must() {
    let readme = "# x\n\n## Layout\n\ntext\n\n```\nconfigs/            workloads\n\
                  src/main.rs         parse\n\
                  src/engine/         window.rs (src/engine/gone/ in a description is no entry)\n\
                  \x20                   uring/ in a continuation line is no entry either\n\
                  \x20 uring/            the ring\n\
                  \x20   tls/            records\n\
                  \x20 baseline/         hyper\n\
                  src/server/         the server\n\
                  \x20 handler/          operations\n\
                  tests/              tests\n```\n\n## Development\n\n```\nsrc/other/\n```\n";
    let named = layout_entries(readme).unwrap();
    let expected = [
        "main.rs",
        "engine/",
        "engine/uring/",
        "engine/uring/tls/",
        "engine/baseline/",
        "server/",
        "server/handler/",
    ];
    assert_eq!(named, expected.map(String::from).into());
    let present: BTreeSet<String> = [
        "main.rs",
        "lib.rs",
        "engine/",
        "engine/uring/",
        "engine/baseline/",
        "server/",
        "server/handler/",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        layout_drift(&named, &present),
        [
            "src/lib.rs has no entry in docs/layout.md's layout",
            "docs/layout.md's layout names src/engine/uring/tls/, which does not exist",
        ]
    );
    // A nested folder with no parent entry, or one level too deep; a file indented as a folder.
    let bad = |entry: &str| layout_entries(&format!("## Layout\n```\n{entry}\n```\n")).is_err();
    assert!(bad("  uring/            the ring"));
    assert!(bad("src/engine/         x\n    tls/            records"));
    assert!(bad("src/engine/         x\n  common.rs         shared"));
    assert!(bad("src/engine/uring.x  x"));
}

/// A made-up crate: every module LAYERS and FORBIDDEN name, a few below them, and `module`
/// with `text`; what it breaks.
fn check(module: &str, text: &str) -> Vec<String> {
    let mut names: BTreeSet<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    names.extend([
        "engine::uring",
        "engine::uring::conn",
        "engine::baseline",
        "engine::window",
        "s3::client",
        "server::handler",
        "server::handler::bucket",
    ]);
    names.insert(module);
    let sources: Vec<Source> = names
        .into_iter()
        .map(|m| Source {
            module: m.to_string(),
            file: m.to_string(),
            text: if m == module {
                text.to_string()
            } else {
                String::new()
            },
        })
        .collect();
    let refs = references(&sources).unwrap();
    let mut out = violations(&refs);
    out.extend(import_cycles(&refs));
    out
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
        (
            "engine::baseline",
            "fn f() { let x = crate::units::bytes(3); }",
            true,
        ),
        ("exit", "use crate::commands::RunFailed;", true),
        // Above the command line by layer, and still never reading its types.
        ("sweep::session", "use crate::cli::SweepArgs;", true),
        (
            "sweep::points",
            "fn f() { crate::cli::load_config(); }",
            true,
        ),
        ("sweep::points", "use crate::sweep::{self, Point};", false),
        ("commands", "use crate::{affinity, budget, exit};", false),
        (
            "server::handler",
            "macro_rules! m { () => { $crate::commands::USAGE }; }",
            false,
        ),
        // A group rustfmt spreads over several lines.
        (
            "plan",
            "use crate::{\n    budget::BudgetShape,\n    exit::ExitClass,\n    run::Run,\n};",
            true,
        ),
        // A nested group.
        (
            "plan",
            "use crate::{budget::{self, Shape}, s3::{xml, target::{self, Engine}}};",
            false,
        ),
        (
            "plan",
            "use crate::{budget::{self, x::{y, rank}}, run::{self}};",
            true,
        ),
        // `super::super::` from a module two levels down.
        (
            "engine::uring::conn",
            "use super::super::window::Window;",
            false,
        ),
        (
            "engine::uring::conn",
            "use super::super::baseline::Tasks;",
            true,
        ),
        (
            "server::handler::bucket",
            "use super::super::super::run::Run;",
            true,
        ),
        // A module used by path, in an expression, a type and a macro's arguments.
        (
            "rank",
            "fn f(n: u64) -> String { crate::units::bytes(n) }",
            true,
        ),
        ("rank", "fn f(x: crate::summary::Summary) {}", true),
        (
            "rank",
            "fn f(n: u64) { println!(\"{}\", crate::units::bytes(n)); }",
            true,
        ),
        (
            "rank",
            "fn f(n: u64) { let _ = crate::budget::check(n); }",
            false,
        ),
        // A child module named without `self::`.
        (
            "engine",
            "mod uring;\nmod baseline;\nuse uring::Ring;",
            false,
        ),
        // Test code is not production code.
        (
            "plan",
            "use crate::exit;\n#[cfg(test)]\nmod tests {\n    use crate::engine::X;\n    \
             fn f() { crate::run::go(); }\n}\nfn f() {}\n",
            false,
        ),
        ("plan", "#[cfg(test)]\nuse crate::engine::X;\n", false),
        (
            "plan",
            "#[cfg(all(test, feature = \"x\"))]\nfn f() { crate::run::go(); }",
            false,
        ),
        ("plan", "mod inner {\n    use crate::run::Run;\n}", true),
    ];
    for (module, text, bad) in cases {
        let found = check(module, text);
        assert_eq!(!found.is_empty(), *bad, "{module}: {text}: {found:?}");
    }
    // The message names the modules and the path.
    let found = check(
        "plan",
        "use crate::{\n    budget,\n    run::{self, Run},\n};",
    );
    assert_eq!(
        found,
        vec![
            "plan (layer 6) imports run (layer 9) as `crate::run::Run`: lower layers never import \
             higher ones",
            "plan (layer 6) imports run (layer 9) as `crate::run`: lower layers never import \
             higher ones",
        ]
    );
}

fn sources(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(module, text)| Source {
            module: module.to_string(),
            file: module.to_string(),
            text: text.to_string(),
        })
        .collect()
}

fn cycles_in(files: &[(&str, &str)]) -> Vec<String> {
    import_cycles(&references(&sources(files)).unwrap())
}

#[test]
fn the_checker_finds_files_and_modules_that_import_each_other() {
    // Two files of one module, each naming the other: a cycle of files and of modules.
    let found = cycles_in(&[
        ("server", "pub mod dir;\npub mod store;"),
        ("server::dir", "use super::store::ObjectInfo;"),
        (
            "server::store",
            "fn f() -> super::dir::DirStore { todo!() }",
        ),
    ]);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("the files server::dir, server::store import each other"));
    assert!(found[1].contains("server::dir → server::store (`super::store::ObjectInfo`)"));
    // Three files in a ring.
    let found = cycles_in(&[
        ("a", "use crate::b::B;"),
        ("b", "use crate::c::C;"),
        ("c", "fn f() { crate::a::go(); }"),
    ]);
    assert!(
        found
            .iter()
            .any(|c| c.starts_with("the files a, b, c import each other")),
        "{found:?}"
    );
    // Two top-level modules whose files do not meet: `settings` (its mod.rs) and `config`,
    // through `settings::keys` (the shape this crate had before the keys moved under config).
    let found = cycles_in(&[
        ("config", "use crate::settings::keys::READ;"),
        ("settings", "pub mod keys;\nuse crate::config::RawConfig;"),
        ("settings::keys", ""),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("the modules config, settings import each other"));
    // A parent that re-exports from a child, and the child's sibling using the re-export:
    // the sibling imports the child, not the parent.
    let found = cycles_in(&[
        (
            "s3",
            "pub mod error;\npub mod client;\npub use error::RequestError;\npub use client::Client;",
        ),
        ("s3::client", "use super::RequestError;"),
        ("s3::error", ""),
    ]);
    assert!(found.is_empty(), "{found:?}");
    // One way only, and test code's way back ignored: no cycle.
    let found = cycles_in(&[
        ("a", "use crate::b::B;"),
        ("b", "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}"),
    ]);
    assert!(found.is_empty(), "{found:?}");
}
