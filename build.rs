//! Embeds the git commit ringload is built from, for the reports (`RINGLOAD_COMMIT`):
//! `git rev-parse --short=12 HEAD`, or "unknown" when the source is not a git checkout or git
//! is missing. Rebuilt when HEAD moves.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RINGLOAD_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // HEAD, the branch it points at, and packed refs: what moves when a commit is made.
    let git_dir = git(&["rev-parse", "--git-dir"]);
    let common_dir = git(&["rev-parse", "--git-common-dir"]);
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let mut watched = Vec::new();
    if let Some(dir) = &git_dir {
        watched.push(format!("{dir}/HEAD"));
    }
    if let Some(dir) = &common_dir {
        watched.push(format!("{dir}/packed-refs"));
        if let Some(branch) = &branch {
            watched.push(format!("{dir}/{branch}"));
        }
    }
    for path in watched {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
