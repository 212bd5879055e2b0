//! What a new user trips on (issue 34), each case with its exit code and its line: output
//! paths checked before anything runs, no silent wrong number, advice that fits the mistake,
//! and the line that says what limited a run. Every case runs the real binary; the runs are
//! small (the embedded default, seconds each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::run;

/// A path under a regular file: no folder can ever be made there, whoever runs the test.
fn unwritable(dir: &std::path::Path) -> String {
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    file.join("results").to_str().unwrap().to_string()
}

// Item 1: no work lost to a late check.

#[test]
fn run_checks_results_dir_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let results = unwritable(dir.path());
    let (code, stdout, stderr) = run(&["run", "--results-dir", &results]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "--results-dir {results}: cannot write its folders"
        )) && stderr.contains("choose another folder"),
        "{stderr}"
    );
    // Refused before the run: no table, no progress.
    assert!(stdout.is_empty(), "{stdout}");
    assert!(!stderr.contains("steps"), "{stderr}");
    // A checkpoint run the same.
    let (code, _, stderr) = run(&["run", "llama3_tiny", "--results-dir", &results]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot write its folders"), "{stderr}");
}

#[test]
fn find_max_np_checks_results_dir_before_the_first_point() {
    let dir = tempfile::tempdir().unwrap();
    let results = unwritable(dir.path());
    let out = dir.path().join("search");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "--find-max-np",
        "--runs",
        "2",
        "--results-dir",
        &results,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("cannot write its folders"), "{stderr}");
    // Nothing ran: no point folder was made.
    assert!(!out.join("points").exists());
}

// Item 2: no silent wrong number.

#[test]
fn a_memory_size_without_a_unit_is_refused_naming_the_units() {
    let (code, stdout, stderr) = run(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512",
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("'512' has no unit; write 512GiB or 512GB")
            && stderr.contains("--client-host-memory-in-gb 512 is 512GB here"),
        "{stderr}"
    );
    // With its unit, the rule's figure: 5 × 512 GiB ÷ 322,957 B.
    let (code, stdout, stderr) = run(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("8,511,284 files"), "{stdout}");
    let (code, _, stderr) = run(&["run", "llama3_tiny", "--accelerator-memory", "180"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'180' has no unit"), "{stderr}");
}

#[test]
fn find_max_np_on_whole_objects_counts_the_files_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("search");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "retinanet_b200",
        "--files",
        "96",
        "--np",
        "1,1",
        "--find-max-np",
        "--runs",
        "2",
        "--computation-time",
        "0.001",
        "train.epochs=1",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("FAIL  dataset size: 96 files < the "),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("dataset size: 0 files"), "{stdout}");
}

/// A million-GET run (400,000 small objects: 399,984 GETs per epoch, 3 epochs): the peak resident set stays
/// within the budget, which counts the plan's GETs and their records; `plan` shows that line.
#[test]
fn the_budget_counts_the_gets_a_run_holds() {
    let args = [
        "retinanet_b200",
        "--files",
        "400000",
        "dataset.record_length_bytes=100",
        "--computation-time",
        "0",
        "train.epochs=3",
    ];
    let mut plan = vec!["plan"];
    plan.extend(args);
    let (code, stdout, stderr) = run(&plan);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("GETs") && l.contains("for 399,984 GETs"))
        .unwrap_or_else(|| panic!("no GETs line in {stdout}"));
    assert!(line.contains("a record per GET of every epoch"), "{line}");
    let mut json = vec!["run"];
    json.extend(args);
    json.push("--json");
    let (code, stdout, stderr) = run(&json);
    assert!(code == 0 || code == 1, "{stderr}");
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["requests"], 1_199_952, "{stderr}");
    let (peak, budget) = (
        s["peak_rss_bytes"].as_u64().unwrap(),
        s["memory_budget_bytes"].as_u64().unwrap(),
    );
    assert!(peak <= budget, "peak {peak} over budget {budget}: {stderr}");
    assert!(!stderr.contains("went past the memory budget"), "{stderr}");
}

#[test]
fn flags_the_workload_would_ignore_are_refused() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "llama3_tiny", "--read-threads", "2"],
            "--read-threads: llama3_tiny is a checkpoint workload, which reads no training \
             dataset, so --read-threads would be ignored; drop it",
        ),
        (
            &["run", "llama3_tiny", "--files", "8"],
            "--files: llama3_tiny is a checkpoint workload",
        ),
        (
            &["run", "flux_small", "--part-size", "8MiB"],
            "--part-size: flux_small is a training workload and --part-size shapes a \
             checkpoint run's writes and reads, so it would be ignored",
        ),
        (
            &["run", "llama3_tiny", "--after", "/tmp"],
            "--after /tmp: this run also writes 2 checkpoints \
             (checkpoint.num_checkpoints_write), and --after times MLPerf's split form's read \
             run from its write run's end; add checkpoint.num_checkpoints_write=0",
        ),
    ];
    for (args, line) in cases {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(line), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}
