//! The fault matrix: both engines against `ringload serve`'s fault injection, one fault at a
//! time. Recoverable faults are retried and the run reads every planned byte; fatal ones fail
//! the run (exit 3) with one line naming the GET and what was wrong; faults during set-up (the
//! listing, the footers) exit 2. The server counts what it injected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use ringload::cli::WorkloadArgs;
use ringload::commands::virtual_store;
use ringload::server::faults::Faults;
use ringload::server::{Server, ServerConfig, Store};

fn faulty_server(spec: &str) -> Server {
    let workload = WorkloadArgs {
        workload: Some("flux_small".into()),
        overrides: vec![],
        files: Some(2),
    };
    Server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store: Store::Virtual(virtual_store(&workload, None, false).unwrap()),
        credentials: None,
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: match spec {
            "" => Faults::default(),
            spec => Faults::parse(spec, 1).unwrap(),
        },
        tls: None,
        max_connections: ringload::server::DEFAULT_MAX_CONNECTIONS,
    })
    .unwrap()
}

/// Runs flux_small (2 files, 12 steps) against `server` with `engine` (2 retries, 2 s per
/// attempt); returns the exit code, the summary (when one was printed), stderr and the time it
/// took.
fn run(server: &Server, engine: &str) -> (i32, Option<serde_json::Value>, String, Duration) {
    run_with(
        server,
        engine,
        &["--retries", "2", "--request-timeout", "2", "--json"],
    )
}

/// The same, with `extra` flags instead of the retry and timeout ones.
fn run_with(
    server: &Server,
    engine: &str,
    extra: &[&str],
) -> (i32, Option<serde_json::Value>, String, Duration) {
    let url = server.endpoint_url();
    let started = Instant::now();
    let mut args = vec![
        "run",
        "flux_small",
        "--files",
        "2",
        "--endpoint",
        &url,
        "--bucket",
        "ringload",
        "--engine",
        engine,
        "--computation-time",
        "0.01",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = common::run(&args);
    (
        code,
        serde_json::from_str(&stdout).ok(),
        stderr,
        started.elapsed(),
    )
}

fn engines() -> Vec<&'static str> {
    let mut engines = vec!["baseline"];
    match ringload::engine::uring::unavailable_cause() {
        None => engines.push("uring"),
        Some(cause) => {
            eprintln!("skipping the uring engine: io_uring is not available here: {cause}")
        }
    }
    engines
}

/// The one error line (a computation_time NOTE may precede it).
fn error_line(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with("ringload run: NOTE")
                && !l.starts_with("ringload: waiting for ")
        })
        .collect()
}

#[test]
fn recoverable_faults_are_retried_and_every_byte_arrives() {
    // Each fault, and the cause its retry is counted under ("" for a footer read, which is
    // set-up and not in the run's counts).
    let cases = [
        ("503@rg/nth=2", "503"),
        ("503-chunked@rg/nth=2", "503"),
        ("503-retry-after=1@rg/nth=1", "503"),
        ("500@rg/nth=3", "500"),
        ("cut=100000@rg/nth=1", "connection"),
        ("short=1000@rg/nth=2", "connection"),
        ("stall=100000@rg/nth=1", "timeout"),
        ("hang@rg/nth=1", "timeout"),
        ("503@footer/nth=1", ""),
    ];
    for engine in engines() {
        for (spec, cause) in cases {
            let server = faulty_server(spec);
            let (code, summary, stderr, took) = run(&server, engine);
            assert!(
                code == 0 || code == 1,
                "{engine} {spec}: exit {code}: {stderr}"
            );
            let s = summary.unwrap_or_else(|| panic!("{engine} {spec}: no summary: {stderr}"));
            assert_eq!(s["outcome"], "completed", "{engine} {spec}");
            assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine} {spec}");
            assert_eq!(s["errors"], 0, "{engine} {spec}");
            if !cause.is_empty() {
                assert_eq!(s["retries"], 1, "{engine} {spec}: {s}");
                assert_eq!(
                    s["retries_by_cause"],
                    serde_json::json!({ cause: 1 }),
                    "{engine} {spec}"
                );
            }
            assert_eq!(server.stats().faults_injected, 1, "{engine} {spec}");
            // A stall or a silent server costs one request timeout (2 s), not more.
            assert!(
                took < Duration::from_secs(20),
                "{engine} {spec}: took {took:?}"
            );
        }
    }
}

#[test]
fn fatal_faults_fail_the_run_in_one_line_naming_the_get() {
    let cases = [
        ("403@rg/nth=1", "HTTP 403 AccessDenied", "403"),
        ("403-chunked@rg/nth=1", "HTTP 403 AccessDenied", "403"),
        ("wrong-range@rg/nth=1", "Content-Range", "bad_response"),
        (
            "ok-200@rg/nth=1",
            "instead of 206 Partial Content",
            "bad_response",
        ),
        ("503@rg/every=1", "SlowDown", "503"),
    ];
    for engine in engines() {
        for (spec, why, cause) in cases {
            let server = faulty_server(spec);
            let (code, summary, stderr, took) = run(&server, engine);
            assert_eq!(code, 3, "{engine} {spec}: {stderr}");
            let lines = error_line(&stderr);
            assert_eq!(lines.len(), 1, "{engine} {spec}: not one line: {stderr}");
            assert!(
                lines[0].contains("GET s3://ringload/data/flux_small/train/train_000")
                    && lines[0].contains(why),
                "{engine} {spec}: {stderr}"
            );
            let s = summary.unwrap_or_else(|| panic!("{engine} {spec}: no summary: {stderr}"));
            assert_eq!(s["outcome"], "failed", "{engine} {spec}");
            assert!(s["errors"].as_u64().unwrap() >= 1, "{engine} {spec}");
            assert!(
                s["errors_by_cause"][cause].as_u64().unwrap_or(0) >= 1,
                "{engine} {spec}: {}",
                s["errors_by_cause"]
            );
            // Not retried as a timeout: reported at once.
            assert!(
                took < Duration::from_secs(15),
                "{engine} {spec}: took {took:?}"
            );
        }
    }
}

#[test]
fn a_stalled_body_is_caught_by_the_idle_timeout_not_the_request_timeout() {
    for engine in engines() {
        // Every row-group GET stalls after 100 KB: the idle limit (1 s) ends each attempt,
        // long before the request limit (120 s), and the run fails once its retries are spent.
        let server = faulty_server("stall=100000@rg/every=1");
        let (code, _, stderr, took) =
            run_with(&server, engine, &["--retries", "1", "--idle-timeout", "1"]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        let lines = error_line(&stderr);
        assert!(
            lines[0].contains("no more body bytes within 1s")
                && lines[0].contains("raise --idle-timeout"),
            "{engine}: {stderr}"
        );
        assert!(took < Duration::from_secs(30), "{engine}: took {took:?}");
    }
}

#[test]
fn faults_during_set_up_exit_2_and_say_what_was_wrong() {
    let cases = [
        ("bad-xml@list/every=1", "cut short"),
        ("repeat-token@list/every=1", "pages in a loop"),
        ("corrupt-footer@footer/every=1", "train_000"),
        ("hang@list/every=1", "no complete response within"),
    ];
    for (spec, why) in cases {
        let server = faulty_server(spec);
        let (code, _, stderr, _) = run(&server, "baseline");
        assert_eq!(code, 2, "{spec}: {stderr}");
        let lines = error_line(&stderr);
        assert_eq!(lines.len(), 1, "{spec}: not one line: {stderr}");
        assert!(lines[0].contains(why), "{spec}: {stderr}");
        assert!(server.stats().faults_injected >= 1, "{spec}");
        if spec.starts_with("hang") {
            // Set-up said what it was waiting for while it waited.
            assert!(
                stderr.contains("ringload: waiting for the first LIST of s3://"),
                "{spec}: {stderr}"
            );
        }
    }
}

#[test]
fn verify_checks_every_byte_and_names_a_flipped_one() {
    for engine in engines() {
        // A healthy server: every byte read is hashed and matches the footer.
        let server = faulty_server("");
        let (code, summary, stderr, _) = run_with(&server, engine, &["--verify", "--json"]);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s = summary.unwrap();
        let v = &s["verify"];
        assert_eq!(v["check"], "xxh3", "{engine}: {v}");
        assert_eq!(v["hashed_bytes"], s["bytes_read"], "{engine}: {v}");
        assert_eq!(v["gets"], s["requests"], "{engine}");
        assert_eq!(v["unchecked_bytes"], 0, "{engine}");
        assert!(v["cpu_s"].as_f64().unwrap() >= 0.0, "{engine}");
        assert!(stderr.contains("by xxh3"), "{engine}: {stderr}");

        // One byte of one row group inverted, with a 206 and the right length: without
        // --verify the run cannot tell; with it the run fails, naming the GET and the chunk.
        let server = faulty_server("flip=5000@rg/nth=3");
        let (code, summary, stderr, _) = run(&server, engine);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        assert!(summary.unwrap()["verify"].is_null(), "{engine}");
        let server = faulty_server("flip=5000@rg/nth=3");
        let (code, summary, stderr, _) = run_with(&server, engine, &["--verify", "--json"]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        let lines = error_line(&stderr);
        assert_eq!(lines.len(), 1, "{engine}: {stderr}");
        assert!(
            lines[0].contains("GET s3://ringload/data/flux_small/train/train_000")
                && lines[0].contains("the bytes are not what the file holds")
                && lines[0].contains("row group")
                && lines[0].contains("the footer says"),
            "{engine}: {stderr}"
        );
        let s = summary.unwrap();
        assert_eq!(s["outcome"], "failed", "{engine}");
        assert_eq!(s["errors_by_cause"]["content_mismatch"], 1, "{engine}: {s}");
        assert_eq!(server.stats().faults_injected, 1, "{engine}");
    }
}

#[test]
fn bytes_after_a_body_drop_the_connection_counted_and_named_by_both_engines() {
    for engine in engines() {
        // Every other body is followed by 64 bytes. The baseline's pool sees them as they
        // arrive; the io_uring engine when it next uses the connection (then retrying that
        // GET), so a connection not used again is not counted: at least one is.
        let server = faulty_server("extra=64@rg/every=2");
        let (code, summary, stderr, _) = run(&server, engine);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s = summary.unwrap_or_else(|| panic!("{engine}: no summary: {stderr}"));
        assert_eq!(s["outcome"], "completed", "{engine}");
        assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}");
        assert_eq!(s["errors"], 0, "{engine}");
        let stray = s["stray_connections"].as_u64().unwrap();
        assert!((1..=6).contains(&stray), "{engine}: {s}");
        if engine == "uring" {
            assert_eq!(s["retries_by_cause"]["stray_bytes"], stray, "{engine}: {s}");
        }
        let notes = s["notes"].to_string();
        assert!(
            notes.contains("carried bytes after a body")
                && notes.contains("GET s3://ringload/data/flux_small/train/train_000")
                && notes.contains("bytes="),
            "{engine}: {notes}"
        );
        // 12 GETs, every other one followed by bytes; a GET retried is one more request.
        let injected = server.stats().faults_injected;
        assert!(injected >= 6 && injected >= stray, "{engine}: {injected}");
    }
}
