//! A checkpoint write that a production store can trust, on both engines against the embedded
//! sink's faults: a CompleteMultipartUpload counts only on a parsed result with an ETag; its
//! `200` cut or cut short is settled by a HEAD, never counted blind; a `200` with an `<Error>`
//! is tried again; a part answered without an ETag fails the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload};
use serde_json::Value;

/// `ringload run llama3_tiny --np 2` against a sink serving `faults`, write only, on `engine`:
/// (exit code, summary or null, stderr).
fn write_run(engine: &str, faults: &str, extra: &[&str]) -> (i32, Value, String) {
    let server = common::spawn_serve(&["--sink", "--faults", faults]);
    let mut cmd = ringload();
    cmd.arg("run")
        .args(["llama3_tiny", "--np", "2", "--engine", engine])
        .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
        .args(["checkpoint.num_checkpoints_read=0", "--json"])
        .args(extra);
    let (code, stdout, stderr) = output(&mut cmd);
    let summary = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (code, summary, stderr)
}

#[test]
fn a_lost_completion_answer_is_settled_by_a_head_and_never_counted_blind() {
    for engine in ["uring", "baseline"] {
        // The answer cut after its 200 (the second try finds NoSuchUpload), and the XML cut
        // short with the framing intact: both completed on the store, both confirmed by a HEAD.
        for fault in ["200-cut@complete/nth=2", "200-short@complete/nth=2"] {
            let (code, s, stderr) = write_run(engine, fault, &[]);
            assert_eq!(code, 0, "{engine} {fault}: {stderr}");
            let save = &s["save"];
            assert_eq!(save["settled_by_head"], 1, "{engine} {fault}: {save}");
            assert_eq!(save["aborted"], 0, "{engine} {fault}: {save}");
        }
    }
}

#[test]
fn a_200_carrying_an_error_is_tried_again() {
    for engine in ["uring", "baseline"] {
        let (code, s, stderr) = write_run(engine, "200-error@complete/nth=1", &[]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        let save = &s["save"];
        assert!(save["retries"].as_u64().unwrap() >= 1, "{engine}: {save}");
        assert_eq!(save["settled_by_head"], 0, "{engine}: {save}");
    }
}

#[test]
fn a_part_without_an_etag_fails_the_run_and_its_upload_is_aborted() {
    for engine in ["uring", "baseline"] {
        let (code, _, stderr) = write_run(engine, "no-etag@part/nth=2", &[]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(
            stderr.contains("without an ETag") && stderr.contains("aborted"),
            "{engine}: {stderr}"
        );
    }
}

#[test]
fn send_zc_on_where_the_probe_refuses_it_is_one_line_and_exit_2() {
    let server = common::spawn_serve(&["--sink"]);
    let mut cmd = ringload();
    cmd.arg("run")
        .args([
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            "uring",
            "--send-zc",
            "on",
        ])
        .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
        .env("RINGLOAD_TEST_SEND_ZC_PROBE", "fail");
    let (code, stdout, stderr) = output(&mut cmd);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--send-zc on:") && stderr.contains("--send-zc auto or off"),
        "{stderr}"
    );
    // Without the forced refusal this kernel sends with SEND_ZC, as asked.
    let mut cmd = ringload();
    cmd.arg("run")
        .args([
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            "uring",
            "--send-zc",
            "on",
        ])
        .args([
            "--endpoint",
            &server.endpoint,
            "--bucket",
            "ringload",
            "--json",
        ])
        .arg("checkpoint.num_checkpoints_read=0");
    let (code, stdout, stderr) = output(&mut cmd);
    assert_eq!(code, 0, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert!(s["save"]["zc_sends"].as_u64().unwrap() > 0, "{s}");
}
