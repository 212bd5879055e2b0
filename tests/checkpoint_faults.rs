//! A checkpoint write that a production store can trust, on both engines against the embedded
//! sink's faults: a CompleteMultipartUpload counts only on a parsed result with an ETag; its
//! `200` cut or cut short is settled by a HEAD, never counted blind; a `200` with an `<Error>`
//! is tried again; a part answered without an ETag fails the run; a part answered before its
//! body was read ends with that answer's code (retried only where S3 says so). Each case over
//! http and https.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload};
use serde_json::Value;

/// Both engines, over http and https.
const CASES: [(&str, &str); 4] = [
    ("uring", "http"),
    ("uring", "https"),
    ("baseline", "http"),
    ("baseline", "https"),
];

/// `ringload run llama3_tiny --np 2` against a sink serving `faults` (over TLS with `scheme`
/// https), write only, on `engine`: (exit code, summary or null, stderr).
fn write_run(engine: &str, scheme: &str, faults: &str, extra: &[&str]) -> (i32, Value, String) {
    let tls = tempfile::tempdir().unwrap();
    let tls_dir = tls.path().join("tls");
    let mut serve = vec!["--sink", "--faults", faults];
    if scheme == "https" {
        serve.extend(["--tls-self-signed", tls_dir.to_str().unwrap()]);
    }
    let server = common::spawn_serve(&serve);
    let mut cmd = ringload();
    cmd.arg("run")
        .args(["llama3_tiny", "--np", "2", "--engine", engine])
        .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
        .args(["checkpoint.num_checkpoints_read=0", "--json"])
        .args(extra);
    if scheme == "https" {
        cmd.arg("--ca-bundle").arg(tls_dir.join("ca.pem"));
    }
    let (code, stdout, stderr) = output(&mut cmd);
    let summary = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (code, summary, stderr)
}

#[test]
fn a_lost_completion_answer_is_settled_by_a_head_and_never_counted_blind() {
    for (engine, scheme) in CASES {
        // The answer cut after its 200 (the second try finds NoSuchUpload), and the XML cut
        // short with the framing intact: both completed on the store, both confirmed by a HEAD.
        for fault in ["200-cut@complete/nth=2", "200-short@complete/nth=2"] {
            let (code, s, stderr) = write_run(engine, scheme, fault, &[]);
            assert_eq!(code, 0, "{engine} {fault}: {stderr}");
            let save = &s["save"];
            assert_eq!(save["settled_by_head"], 1, "{engine} {fault}: {save}");
            assert_eq!(save["aborted"], 0, "{engine} {fault}: {save}");
        }
    }
}

#[test]
fn a_200_carrying_an_error_is_tried_again() {
    for (engine, scheme) in CASES {
        let (code, s, stderr) = write_run(engine, scheme, "200-error@complete/nth=1", &[]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        let save = &s["save"];
        assert!(save["retries"].as_u64().unwrap() >= 1, "{engine}: {save}");
        assert_eq!(save["settled_by_head"], 0, "{engine}: {save}");
    }
}

#[test]
fn a_part_without_an_etag_fails_the_run_and_its_upload_is_aborted() {
    for (engine, scheme) in CASES {
        let (code, _, stderr) = write_run(engine, scheme, "no-etag@part/nth=2", &[]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(
            stderr.contains("without an ETag") && stderr.contains("aborted"),
            "{engine}: {stderr}"
        );
    }
}

/// A part answered before its body was read (`serve --faults early=CODE`): the store will not
/// take the upload (`404 NoSuchUpload`, `403 AccessDenied`, `400 EntityTooLarge`): the run
/// fails at once naming the code, not retried, the upload aborted; the store is busy or broken
/// for a moment (`503 SlowDown`, `500 InternalError`): tried again, the run completes.
#[test]
fn a_part_answered_before_its_body_was_read_ends_with_that_answers_code() {
    for (engine, scheme) in CASES {
        for (code, name) in [
            (404, "NoSuchUpload"),
            (403, "AccessDenied"),
            (400, "EntityTooLarge"),
        ] {
            let fault = format!("early={code}@part/nth=2");
            let (exit, _, stderr) = write_run(engine, scheme, &fault, &["--part-size", "5MiB"]);
            let what = format!("{engine} {scheme} {fault}");
            assert_eq!(exit, 3, "{what}: {stderr}");
            assert!(
                stderr.contains(&format!("{code} {name}")) && stderr.contains("aborted"),
                "{what}: {stderr}"
            );
        }
        for (code, cause) in [(503, "503"), (500, "500")] {
            let fault = format!("early={code}@part/nth=2");
            let (exit, s, stderr) = write_run(engine, scheme, &fault, &["--part-size", "5MiB"]);
            let what = format!("{engine} {scheme} {fault}");
            assert_eq!(exit, 0, "{what}: {stderr}");
            let save = &s["save"];
            assert_eq!(save["retries"], 1, "{what}: {save}");
            assert_eq!(save["retries_by_cause"][cause], 1, "{what}: {save}");
        }
    }
}

/// A part answered before its body was read by a store that then closes at once, the body
/// unread (`serve --faults early-reset=CODE`): the close resets the sender, and the answer,
/// still in its socket, is read and ends the part with its code — on the io_uring engine, over
/// http and https. (The baseline, hyper, reads such an answer only when it arrives before the
/// write fails: over http now and then, over https never; otherwise the part is retried as a
/// connection error and its code is lost.)
#[test]
fn a_part_answered_then_reset_ends_with_that_answers_code() {
    for (engine, scheme) in [("uring", "http"), ("uring", "https")] {
        let fault = "early-reset=404@part/nth=2";
        let (exit, _, stderr) = write_run(engine, scheme, fault, &["--part-size", "5MiB"]);
        let what = format!("{engine} {scheme} {fault}");
        assert_eq!(exit, 3, "{what}: {stderr}");
        assert!(
            stderr.contains("404 NoSuchUpload") && stderr.contains("aborted"),
            "{what}: {stderr}"
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

/// Starts a multipart upload of each key given after the endpoint and bucket; prints their ids.
const START_UPLOADS: &str = r#"
import json, sys, boto3
endpoint, bucket = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k",
                  aws_secret_access_key="s", region_name="us-east-1")
ids = [s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"] for k in sys.argv[3:]]
print(json.dumps({"ids": ids}))
"#;

#[test]
fn other_writers_uploads_are_named_and_left_and_keys_outside_the_folder_ignored() {
    // A store whose ListMultipartUploads ignores the prefix: every open upload comes back.
    let server = common::spawn_serve(&["--sink", "--faults", "ignore-prefix/every=1"]);
    let inside = "checkpoints/llama3_tiny/someone-elses.bin";
    let started = common::python_json(
        START_UPLOADS,
        &[&server.endpoint, "ringload", inside, "elsewhere/other.bin"],
    );
    let inside_id = started["ids"][0].as_str().unwrap();
    let state = tempfile::tempdir().unwrap();
    for engine in ["uring", "baseline"] {
        let mut cmd = ringload();
        cmd.arg("run")
            .args(["llama3_tiny", "--np", "2", "--engine", engine])
            .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
            .arg("checkpoint.num_checkpoints_read=0")
            .env("RINGLOAD_STATE_DIR", state.path());
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, 0, "{engine}: {stderr}");
        let named: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("left alone"))
            .collect();
        assert_eq!(named.len(), 1, "{engine}: {stderr}");
        assert!(
            named[0].contains(&format!("{inside} ({inside_id})"))
                && named[0].starts_with("ringload run: 1 multipart upload ")
                && !named[0].contains("elsewhere"),
            "{engine}: {stderr}"
        );
        // The run's own uploads all ended: no journal is left behind.
        let left: Vec<_> = common::walk(state.path())
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        assert!(left.is_empty(), "{engine}: {left:?}");
    }
}
