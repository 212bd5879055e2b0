//! `ringload sweep --find-max-np` end to end: every run a real `ringload run` child against the
//! sweep's one embedded server, limited server-wide (`--server-bandwidth-mib-per-s`) so the
//! answer is computable.
//!
//! flux_small with RT 1, prefetch 2 reads one 4.59 MiB row group per step; at a computation
//! time of 0.05 s a rank asks 91.8 MiB/s. With 220 MiB/s for the whole server, NP 2 asks 83 %
//! of it (AU ≈ 99 %), NP 3 125 % (AU ≤ 80 %), NP 4 167 % (AU ≤ 60 %): from --np 2 the search
//! runs 2 (pass), doubles to 4 (miss), bisects 3 (miss): the answer is 2. A per-body throttle
//! would let NP 3 pass (each GET its own 220 MiB/s): the limit must be shared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use serde_json::Value;

/// The searches measure AU against a bandwidth limit: one at a time, so a search in another
/// test of this file does not take the cores a passing NP needs.
static ONE_SEARCH_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sweep_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap()
}

fn engine() -> &'static str {
    if ringload::engine::uring::unavailable_cause().is_none() {
        "uring"
    } else {
        "baseline"
    }
}

/// The search's common flags: NP 2 to 8, 2 runs per NP (1 warm-up + 1 timed).
fn search(out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "sweep",
        "flux_small",
        "--files",
        "12",
        "--np",
        "2,8",
        "--read-threads",
        "1",
        "--prefetch",
        "2",
        "--computation-time",
        "0.05",
        "--engine",
        engine(),
        "--find-max-np",
        "--runs",
        "2",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    common::run(&args)
}

fn tried(family: &Value) -> Vec<(u64, String)> {
    family["tried"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["np"].as_u64().unwrap(),
                o["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_server_wide_bandwidth_limit_gives_the_np_it_can_feed() {
    let _one = ONE_SEARCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, stdout, stderr) = search(
        &out,
        &[
            "--server-bandwidth-mib-per-s",
            "220",
            "--client-memory",
            "1MiB",
            "--strict",
            "--results-dir",
            dir.path().join("results").to_str().unwrap(),
            "--system",
            "rig-s",
        ],
    );
    // --strict: the runs rule fails (2 runs, MLPerf counts 6), so exit 1.
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let sweep = sweep_json(&out);
    let family = &sweep["find_max_np"]["families"][0];
    assert_eq!(
        tried(family),
        [(2, "pass".into()), (4, "miss".into()), (3, "miss".into())],
        "{stdout}\n{stderr}"
    );
    assert_eq!(family["answer"], 2);
    let margin = family["margin_points"].as_f64().unwrap();
    assert!(margin >= 0.0, "{margin}");
    // --results-dir holds the answer's runs only (warm-up and timed: MLPerf's run folders),
    // one configuration: NP 2.
    let models: Vec<_> = std::fs::read_dir(dir.path().join("results/rig-s/training"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(models.len(), 1, "{models:?}");
    let leaves: Vec<_> = std::fs::read_dir(models[0].join("run"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(leaves.len(), 2, "{leaves:?}\n{stderr}");
    // Beside them, results.json lists them as mlpstorage's report generator writes it.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(models[0].join("run/results.json")).unwrap())
            .unwrap();
    assert_eq!(index.as_array().map(Vec::len), Some(2), "{index}");
    for leaf in &leaves {
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(leaf.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["num_accelerators"], 2, "{}", leaf.display());
    }
    assert!(
        stderr.contains("MLPerf results: ") && stderr.contains("the 2 runs of NP=2"),
        "{stderr}"
    );
    // Each run its own child, its folder named with its run index; the warm-up excluded.
    let key = format!("{}-np2-rt1-pf2-ct0.05", engine());
    for k in 1..=2 {
        assert!(out.join(format!("points/{key}-r{k}/summary.json")).exists());
    }
    assert_eq!(sweep["points"].as_array().unwrap().len(), 6);
    // Progress: one line per run, with NP, the run's index and its AU.
    assert!(
        stderr.contains(&format!("{key}: run 2 of 2 (timed): AU ")),
        "{stderr}"
    );
    // The answer first, then its evidence and the rules.
    assert!(
        stdout.starts_with("# ringload sweep --find-max-np: flux_small"),
        "{stdout}"
    );
    assert!(stdout.contains("not MLPerf's count"), "{stdout}");
    assert!(
        stdout.contains("**Largest NP that holds AU: 2** (margin +"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Stopped: NP=3 missed: run 2: AU "),
        "{stdout}"
    );
    assert!(
        stdout.contains("Last passing: NP=2 pass: run 1 (warm-up) "),
        "{stdout}"
    );
    assert!(
        stdout.contains("First failing: NP=3 miss: run 1 (warm-up) "),
        "{stdout}"
    );
    assert!(stdout.contains("Limit: the "), "{stdout}");
    for line in [
        "PASS  AU per timed run: NP=2: run 2 ",
        "FAIL  runs: 2 runs = 1 warm-up + 1 timed; MLPerf counts 6",
        "PASS  published AU: mean of the 1 timed runs: ",
        "PASS  published Read B/W: mean of the 1 timed runs' train_io_mean_MB_per_second ÷ 1024: ",
        // 1 MiB: 500 × NP 2 × 48 ÷ 288 = 166 files for the steps.
        "FAIL  dataset size: 12 files < the 166 the rule asks for",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(line)),
            "no line '{line}' in:\n{stdout}"
        );
    }
    let rules = family["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 6);
    assert_eq!(rules[1]["verdict"], "fail");
    // --computation-time overrides a parameter MLPerf fixes: INVALID in mlpstorage, and said.
    assert_eq!(rules[5]["name"], "parameters (CLOSED)");
    assert_eq!(rules[5]["verdict"], "fail");
    let detail = rules[5]["detail"].as_str().unwrap();
    assert!(
        detail.contains("train.computation_time=0.05") && detail.contains("INVALID"),
        "{detail}"
    );
    let study = std::fs::read_to_string(out.join("study.md")).unwrap();
    assert!(study.starts_with("# ringload sweep --find-max-np"));
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    let answer_at = report.find("Largest NP that holds AU: 2").unwrap();
    assert!(answer_at < report.find("<h2>Command</h2>").unwrap());
    // The time series of the last timed run at the answer and at the first miss, plotted.
    for which in ["largest NP that holds AU", "first NP that misses"] {
        assert!(
            report.contains("Throughput and requests in flight: ") && report.contains(which),
            "no time series for the {which} in report.html"
        );
    }
    let series_plots = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("timeseries-")
        })
        .count();
    assert_eq!(series_plots, 4, "two plots for each of two runs");

    // Resumed without --strict: every run is kept (none runs again), the same answer, exit 0.
    let (code, stdout, stderr) = search(&out, &["--server-bandwidth-mib-per-s", "220", "--resume"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("resuming: 6 runs kept"), "{stderr}");
    assert!(!stderr.contains("(warm-up) …"), "{stderr}");
    assert_eq!(sweep_json(&out)["find_max_np"]["families"][0]["answer"], 2);
}

#[test]
fn the_memory_budget_stops_the_search_with_the_plans_reason() {
    let _one = ONE_SEARCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    // NP 2 plans 83.4 MiB, NP 3 93.1 MiB: 88 MiB refuses NP 3 and above, which never run.
    let (code, stdout, stderr) = search(&out, &["--memory-budget", "88MiB"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let family = &sweep_json(&out)["find_max_np"]["families"][0];
    assert_eq!(
        tried(family),
        [
            (2, "pass".into()),
            (4, "refused".into()),
            (3, "refused".into())
        ],
        "{stdout}\n{stderr}"
    );
    assert_eq!(family["answer"], 2);
    let limit = family["limit"].as_str().unwrap();
    assert!(
        limit.starts_with("NP=3 was not run: ") && limit.contains("--memory-budget"),
        "{limit}"
    );
    assert!(stdout.contains(&format!("Stopped: {limit}")), "{stdout}");
    assert!(
        !out.join(format!("points/{}-np3-rt1-pf2-ct0.05-r1", engine()))
            .exists()
    );
    assert!(
        !out.join(format!("points/{}-np4-rt1-pf2-ct0.05-r1", engine()))
            .exists()
    );
}

#[test]
fn bad_bandwidth_values_are_refused_in_one_line() {
    for args in [
        &["serve", "--bandwidth-mib-per-s", "0"][..],
        &[
            "sweep",
            "--output",
            "/nonexistent/x",
            "--server-bandwidth-mib-per-s",
            "-5",
        ][..],
        &[
            "sweep",
            "--output",
            "/nonexistent/x",
            "--find-max-np",
            "--runs",
            "1",
        ][..],
        &[
            "sweep",
            "--output",
            "/nonexistent/x",
            "--find-max-np",
            "--au-target",
            "120",
        ][..],
    ] {
        let (code, _, stderr) = common::run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("ringload: invalid value '"), "{stderr}");
    }
    // With an endpoint there is no embedded server to limit.
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "--endpoint",
        "http://127.0.0.1:9",
        "--server-bandwidth-mib-per-s",
        "100",
        "--output",
        dir.path().join("s").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--server-bandwidth-mib-per-s 100: it limits the sweep's embedded server"),
        "{stderr}"
    );
}
