//! `run --results-dir`: a training workload (retinanet on the embedded default, twice back to
//! back) and a checkpoint workload (llama3_tiny on the embedded sink) written where MLPerf
//! Storage's tools look for them; the tree walked by a Python check that follows mlpstorage's
//! run discovery (tests/py/mlperf_tree.py: every file parsed, the fields of the reference's B4,
//! no secret from the command line in any file); `compare` reads a leaf.

#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use common::{python_json, run};

const ACCESS_KEY: &str = "AKIDRINGLOADTEST7";
const SECRET_KEY: &str = "sEcReTRingloadTest9";

#[test]
fn runs_land_where_mlpstorage_looks_with_every_file_and_no_secret() {
    let root = tempfile::tempdir().unwrap();
    let results = root.path().to_str().unwrap();
    let training = [
        "run",
        "retinanet_b200",
        "--files",
        "96",
        "--np",
        "2",
        "--computation-time",
        "0.001",
        "train.epochs=1",
        "--results-dir",
        results,
        "--system",
        "rig-a",
        "--access-key",
        ACCESS_KEY,
        "--secret-key",
        SECRET_KEY,
    ];
    // Twice back to back: two leaves, never one folder reused.
    for _ in 0..2 {
        let (code, _, err) = run(&training);
        // AU may miss the target at this size (exit 1); the run itself completed.
        assert!(code == 0 || code == 1, "{err}");
        assert!(err.contains("MLPerf results in"), "{err}");
    }
    let (code, out, err) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--results-dir",
        results,
        "--system",
        "rig-a",
        &format!("++workload.storage.storage_options.access_key_id={ACCESS_KEY}"),
        &format!("++workload.storage.storage_options.secret_access_key={SECRET_KEY}"),
    ]);
    assert_eq!(code, 0, "{err}");
    // The rule lines in the report.
    for want in [
        "FAIL  10 writes then 10 reads: 2 saves and 2 restores",
        "PASS  accelerator memory × count ≥ checkpoint: 2 × 180 GB",
        "FAIL  more than 4 processes per host: 2 processes on 1 host",
        "cache (data per client vs 3 × its memory)",
    ] {
        assert!(out.contains(want), "{want} not in {out}");
    }

    let script = include_str!("py/mlperf_tree.py");
    let checked = python_json(script, &[results, &format!("{ACCESS_KEY},{SECRET_KEY}")]);
    let leaves = checked["leaves"].as_array().unwrap();
    assert_eq!(leaves.len(), 3, "{checked}");
    let training: Vec<_> = leaves
        .iter()
        .filter(|l| l["benchmark"] == "training")
        .collect();
    assert_eq!(training.len(), 2, "{checked}");
    assert_ne!(training[0]["timestamp"], training[1]["timestamp"]);
    for l in &training {
        assert_eq!(l["model"], "retinanet");
        assert_eq!(l["system"], "rig-a");
        assert_eq!(l["num_accelerators"], 2);
    }
    let ckpt = leaves
        .iter()
        .find(|l| l["benchmark"] == "checkpointing")
        .unwrap();
    assert_eq!(ckpt["model"], "llama3-tiny");

    // `compare` reads the leaves: a training leaf against the other, and the checkpoint leaf.
    let leaf = |l: &serde_json::Value| match l["benchmark"].as_str().unwrap() {
        "training" => root.path().join(format!(
            "rig-a/training/retinanet/run/{}",
            l["timestamp"].as_str().unwrap()
        )),
        _ => root.path().join(format!(
            "rig-a/checkpointing/llama3-tiny/{}",
            l["timestamp"].as_str().unwrap()
        )),
    };
    let (a, b) = (leaf(training[0]), leaf(training[1]));
    let (code, out, err) = run(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| 2 | 8 |"), "{out}");
    // Read as ringload's runs (from ringload_summary.json beside each leaf), never as DLIO's.
    assert!(!out.contains(": dlio"), "{out}");
    let c = leaf(ckpt);
    let (code, out, err) = run(&["compare", c.to_str().unwrap(), c.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("llama3_tiny | 2 |"), "{out}");

    // The checkpoint leaf's summary.json carries the rule lines.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(c.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["rules"][0]["verdict"], "fail");
    assert_eq!(summary["rules"][2]["verdict"], "pass");
}

#[test]
fn a_system_name_with_a_slash_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--results-dir",
        root.path().to_str().unwrap(),
        "--system",
        "a/b",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'a/b' is not a folder name"), "{err}");
    // Refused before the run: nothing was written.
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}
