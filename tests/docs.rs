//! Every `ringload` command that README.md and docs/*.md show, run, so the documentation cannot
//! drift from the program:
//!
//! - each command in a ```` ```sh ```` block (continuation lines joined, the comment after
//!   ` # ` dropped; `cargo run --release -- ARGS` and `mpirun … ringload ARGS` are ringload
//!   ARGS) must parse with ringload's own argument parser;
//! - the quick forms — blocks marked ```` ```sh quick ````, and the quick start's `cargo run` —
//!   run as written, in a fresh folder, against the embedded server (exit 0, or 1 for an AU
//!   target missed);
//! - every other `run`, `sweep` and `generate` runs through `ringload plan` with its workload,
//!   overrides and shape (the largest of a sweep's lists), and so does every `plan` and
//!   `datasize` as written: each must exit 0, or 2 with a memory-budget refusal (a full-size
//!   form on a smaller machine; the README shows one on purpose);
//! - a command that needs a folder, a store or another program to exist (`--dir`, `serve`,
//!   `compare`) is only parsed.
//!
//! Lines that are not ringload's (`scripts/test`, `cargo fmt`, `curl`) are not run here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use clap::Parser;
use ringload::cli::{Cli, Command};

/// A command as a page shows it.
#[derive(Debug)]
struct Shown {
    page: String,
    quick: bool,
    text: String,
    args: Vec<String>,
}

/// The words of `line` as a POSIX shell splits them (single and double quotes, no
/// expansions: the pages use none).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// `line` without its comment: from the first ` #` outside quotes.
fn uncommented(line: &str) -> &str {
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match (quote, b) {
            (Some(q), b) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(b),
            (None, b'#') if i > 0 && bytes[i - 1] == b' ' => return line[..i].trim_end(),
            _ => {}
        }
    }
    line.trim_end()
}

/// ringload's arguments in a shown command line, or `None` for another program's line.
fn ringload_args(line: &str) -> Option<(Vec<String>, bool)> {
    let mut w = words(uncommented(line.trim_start_matches("$ ")));
    // A background `&` and a redirection are the shell's.
    if w.last().is_some_and(|l| l == "&") {
        w.pop();
    }
    if let Some(at) = w.iter().position(|x| x == ">") {
        w.truncate(at);
    }
    let first = w.first()?.clone();
    if first == "cargo" && w.get(1).is_some_and(|x| x == "run") {
        let at = w.iter().position(|x| x == "--")?;
        return Some((w[at + 1..].to_vec(), true));
    }
    if first == "mpirun" {
        let at = w.iter().position(|x| x.ends_with("ringload"))?;
        return Some((w[at + 1..].to_vec(), false));
    }
    (first == "ringload").then(|| (w[1..].to_vec(), false))
}

/// Where a line of a page is: outside a code block, in an `sh` block (quick or not), or in
/// another block (text, a layout).
#[derive(Clone, Copy, PartialEq)]
enum Block {
    Outside,
    Sh { quick: bool },
    Other,
}

/// Every command of `page`'s `sh` blocks.
fn commands_of(root: &Path, page: &str) -> Vec<Shown> {
    let text = std::fs::read_to_string(root.join(page)).unwrap();
    let mut out = Vec::new();
    let mut block = Block::Outside;
    let mut pending = String::new();
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            block = match block {
                Block::Outside => {
                    let mut tags = info.split_whitespace();
                    match tags.next() {
                        Some("sh") => Block::Sh {
                            quick: tags.any(|t| t == "quick"),
                        },
                        _ => Block::Other,
                    }
                }
                _ => Block::Outside,
            };
            pending.clear();
            continue;
        }
        let Block::Sh { quick } = block else {
            continue;
        };
        pending.push_str(line.trim());
        if pending.ends_with('\\') {
            pending.pop();
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending);
        if let Some((args, cargo)) = ringload_args(&full) {
            out.push(Shown {
                page: page.to_string(),
                quick: cargo || quick,
                text: full,
                args,
            });
        }
    }
    out
}

/// README.md and every page of docs/, README first.
fn pages(root: &Path) -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    std::iter::once("README.md".to_string())
        .chain(docs)
        .collect()
}

/// The largest of a list flag's values, for a plan of a sweep's biggest point.
fn largest<T: ToString + PartialOrd + Copy>(values: &[T]) -> Option<String> {
    values
        .iter()
        .copied()
        .fold(None, |m: Option<T>, v| match m {
            Some(m) if m >= v => Some(m),
            _ => Some(v),
        })
        .map(|v| v.to_string())
}

/// The `plan` that stands for a parsed command (its workload, overrides and shape), or `None`
/// when the command is only parsed.
fn plan_args(cli: Cli, args: &[String]) -> Option<Vec<String>> {
    let mut plan = vec!["plan".to_string()];
    match cli.command {
        Command::Run(run) => {
            plan.extend(run.workload.to_args());
            plan.extend(run.shape.to_args());
            plan.extend(run.options.shape.to_args());
        }
        Command::Sweep(sweep) => {
            plan.extend(sweep.workload.to_args());
            for (flag, value) in [
                ("--np", largest(&sweep.np)),
                ("--read-threads", largest(&sweep.read_threads)),
                ("--prefetch", largest(&sweep.prefetch)),
                ("--coalesce-rgs", largest(&sweep.coalesce_rgs)),
                ("--computation-time", largest(&sweep.computation_time)),
            ] {
                if let Some(value) = value {
                    plan.extend([flag.to_string(), value]);
                }
            }
            plan.extend(sweep.options.shape.to_args());
        }
        Command::Generate(generate) => plan.extend(generate.workload.to_args()),
        Command::Plan(_) | Command::Datasize(_) if !args.iter().any(|a| a == "--dir") => {
            return Some(args.to_vec());
        }
        _ => return None,
    }
    Some(plan)
}

#[test]
fn every_command_the_readme_and_docs_show_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shown: Vec<Shown> = pages(root)
        .iter()
        .flat_map(|p| commands_of(root, p))
        .collect();
    let quick = shown.iter().filter(|s| s.quick).count();
    let readme = shown.iter().filter(|s| s.page == "README.md").count();
    // The quick start's run, three training runs, the checkpoint, datasize and the search.
    assert!(quick >= 7, "{quick} quick forms: {shown:#?}");
    assert!(readme >= 12, "{readme} commands in README.md");
    assert!(shown.len() >= 60, "{} commands shown", shown.len());
    let (mut ran, mut planned, mut parsed) = (0, 0, 0);
    for s in &shown {
        let what = format!("{}: `{}`", s.page, s.text);
        let cli = match Cli::try_parse_from(
            std::iter::once("ringload".to_string()).chain(s.args.clone()),
        ) {
            Ok(cli) => cli,
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => continue,
            Err(e) => panic!("{what} does not parse: {e}"),
        };
        if s.quick {
            let dir = tempfile::tempdir().unwrap();
            let (code, stdout, stderr) =
                common::output(common::ringload().args(&s.args).current_dir(dir.path()));
            assert!(
                code == 0 || code == 1,
                "{what}: exit {code}\n{stdout}\n{stderr}"
            );
            ran += 1;
            continue;
        }
        let Some(plan) = plan_args(cli, &s.args) else {
            parsed += 1;
            continue;
        };
        let dir = tempfile::tempdir().unwrap();
        let (code, stdout, stderr) =
            common::output(common::ringload().args(&plan).current_dir(dir.path()));
        assert!(
            code == 0 || (code == 2 && stderr.contains("memory budget")),
            "{what} as `ringload {}`: exit {code}\n{stdout}\n{stderr}",
            plan.join(" ")
        );
        planned += 1;
    }
    eprintln!("{ran} run as written, {planned} through plan, {parsed} parsed only");
    assert!(planned >= 30, "{planned} planned");
}
