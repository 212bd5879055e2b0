//! The two engines side by side, and the io_uring engine's environment: the same plan gives the
//! same steps, bytes and request trace on both; io_uring that cannot be used is named (exit 2
//! when asked for, the baseline with a note by default); ranks outnumbering cores are noted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use serde_json::Value;

/// Skips (with a message) where this kernel or process cannot use io_uring.
fn uring_here() -> bool {
    match ringload::engine::uring::unavailable_cause() {
        None => true,
        Some(cause) => {
            eprintln!("skipping: io_uring is not available here: {cause}");
            false
        }
    }
}

/// `ringload run ARGS --json --output DIR`: exit code, summary, stderr.
fn run(args: &[&str], out: &Path) -> (i32, Value, String) {
    let mut all: Vec<&str> = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--output", out.to_str().unwrap()]);
    let (code, stdout, stderr) = common::run(&all);
    let summary = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{all:?} (exit {code}) printed no JSON ({e}): {stderr}"));
    (code, summary, stderr)
}

/// requests.csv without its timing columns (attempts and latencies).
fn trace(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("requests.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("rank,epoch,reader,get,key,offset,len_bytes,attempts,first_byte_us,total_us")
    );
    lines
        .map(|l| l.split(',').take(7).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn both_engines_give_the_same_steps_bytes_and_request_trace() {
    if !uring_here() {
        return;
    }
    // Two ranks, two readers each, two epochs, a batch that splits GETs across steps.
    let shape = [
        "--np",
        "2",
        "--read-threads",
        "2",
        "--prefetch",
        "2",
        "--coalesce-rgs",
        "2",
        "--computation-time",
        "0.01",
        "train.epochs=2",
    ];
    let mut results = Vec::new();
    for engine in ["uring", "baseline"] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = shape.to_vec();
        args.extend_from_slice(&["--engine", engine]);
        let (code, s, stderr) = run(&args, dir.path());
        assert!(code == 0 || code == 1, "{engine}: exit {code}: {stderr}");
        assert_eq!(s["engine"], engine);
        assert_eq!(
            (s["retries"].as_u64(), s["errors"].as_u64()),
            (Some(0), Some(0))
        );
        let steps = std::fs::read_to_string(dir.path().join("steps.csv")).unwrap();
        let steps: Vec<String> = steps
            .lines()
            .map(|l| l.split(',').take(3).collect::<Vec<_>>().join(","))
            .collect();
        results.push((s, steps, trace(dir.path())));
    }
    let (uring, baseline) = (&results[0], &results[1]);
    for field in [
        "steps_per_rank",
        "bytes_read",
        "bytes_planned",
        "requests",
        "footer_bytes",
    ] {
        assert_eq!(uring.0[field], baseline.0[field], "{field}");
    }
    assert_eq!(uring.0["bytes_read"], uring.0["bytes_planned"]);
    // rank, epoch, step for every step; rank, epoch, reader, GET, key, range for every GET.
    assert_eq!(uring.1, baseline.1);
    assert_eq!(uring.2, baseline.2);
    let steps = uring.0["steps_per_rank"].as_u64().unwrap();
    assert_eq!(uring.1.len() as u64, 1 + 2 * 2 * steps, "steps.csv rows");
    assert_eq!(uring.2.len() as u64, uring.0["requests"].as_u64().unwrap());
    // The pool is the budget's: peak RSS within it, plus the documented slack.
    let peak = uring.0["peak_rss_bytes"].as_u64().unwrap();
    let budget = uring.0["memory_budget_bytes"].as_u64().unwrap();
    assert!(
        peak <= budget + (64 << 20),
        "peak RSS {peak} over budget {budget} + 64 MiB"
    );
}

#[test]
fn uring_without_enough_memlock_is_named_and_the_default_falls_back() {
    if !uring_here() {
        return;
    }
    // Drop CAP_IPC_LOCK so RLIMIT_MEMLOCK applies, then set it below the pool.
    let probe = std::process::Command::new("setpriv")
        .arg("--version")
        .output();
    if probe.is_err() || !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root and setpriv (util-linux) to drop CAP_IPC_LOCK");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_ringload");
    let limited = |args: &str| {
        let script = format!("ulimit -l 64 && exec {bin} run {args}");
        let mut command = std::process::Command::new("setpriv");
        command.args([
            "--bounding-set=-ipc_lock",
            "--inh-caps=-ipc_lock",
            "sh",
            "-c",
            &script,
        ]);
        common::output(&mut command)
    };
    let (code, stdout, stderr) = limited("--engine uring");
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for needle in [
        "--engine uring: RLIMIT_MEMLOCK 64.00 KiB is smaller than the buffer pool",
        "ulimit -l unlimited",
        "run with --engine baseline",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    let (code, stdout, stderr) = limited("--json");
    assert_eq!(code, 0, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["engine"], "baseline");
    assert!(
        stderr.contains("ringload run: NOTE: io_uring cannot be used here"),
        "{stderr}"
    );
    let notes = s["notes"].to_string();
    assert!(notes.contains("ran the baseline engine"), "{notes}");
}

#[test]
fn ranks_outnumbering_their_cpus_are_noted() {
    let dir = tempfile::tempdir().unwrap();
    let (code, s, stderr) = run(
        &["--np", "2", "--cpus", "0", "--computation-time", "0.01"],
        dir.path(),
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(
        stderr.contains("WARNING: 2 ranks on 1 CPUs: rank threads share cores"),
        "{stderr}"
    );
    assert!(s["notes"].to_string().contains("2 ranks on 1 CPUs"));
    assert_eq!(s["bytes_read"], s["bytes_planned"]);
}
