//! `ringload run` end to end: against the embedded server (its default), against ringload's own
//! directory server with keys (the error paths), and against garage, a third-party S3 server,
//! with a dataset written by pyarrow and uploaded by boto3 — not by ringload.
//!
//! The garage tests need the server scripts/with-garage starts (scripts/test does); without it
//! they say so and skip, unless RINGLOAD_REQUIRE_GARAGE is set, as scripts/test sets it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{python_json, run};
use ringload::server::dir::DirStore;
use ringload::server::{Credentials, Server, ServerConfig, Store};
use serde_json::Value;

/// Every field the brief's §3 names.
const SUMMARY_FIELDS: &[&str] = &[
    "engine",
    "workload",
    "np",
    "read_threads",
    "prefetch",
    "coalesce_rgs",
    "computation_time_s",
    "steps_per_rank",
    "au_percent",
    "au_percent_per_rank",
    "au_target_percent",
    "samples_per_s",
    "samples_per_s_per_rank",
    "io_mib_per_s",
    "measured_mib_per_s",
    "bytes_read",
    "footer_bytes",
    "requests",
    "retries",
    "retries_by_cause",
    "errors",
    "errors_by_cause",
    "wall_s",
    "io_wait_per_step_ms",
    "request_latency_ms",
    "client_cpu_s",
    "cpu_s_per_gib",
    "peak_rss_bytes",
    "memory_budget_bytes",
    "projected_au_percent",
    "notes",
    "timeseries",
];

/// Runs `ringload run ARGS --json`; returns (exit code, summary, stderr).
fn run_summary(args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, stdout, stderr) = run(&all);
    let summary = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("run {args:?} (exit {code}) printed no JSON ({e}): {stderr}"));
    (code, summary, stderr)
}

/// The plan's bytes per epoch and GET count for the same workload and shape.
fn planned(args: &[&str]) -> (u64, u64) {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.push("--json");
    let plan = common::run_json(&all);
    (
        plan["bytes_per_epoch"].as_u64().unwrap(),
        plan["get_count"].as_u64().unwrap(),
    )
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A one-line error on stderr, and the expected exit code.
fn assert_one_line_error(code: i32, stderr: &str, expected_code: i32, needles: &[&str]) {
    assert_eq!(code, expected_code, "{stderr}");
    // The note about computation_time may come first; the error is one line.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with("ringload run: NOTE")
                && !l.starts_with("ringload: waiting for ")
        })
        .collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    assert!(lines[0].starts_with("ringload: "), "{stderr}");
    for needle in needles {
        assert!(lines[0].contains(needle), "'{needle}' not in: {stderr}");
    }
}

#[test]
fn the_readme_quick_start_runs_against_the_embedded_server() {
    let out = tempfile::tempdir().unwrap();
    let (code, s, stderr) = run_summary(&["--output", out.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    for field in SUMMARY_FIELDS {
        assert!(s.get(field).is_some(), "summary lacks {field}");
    }
    // The default engine: io_uring where it works, else the baseline with a note.
    match ringload::engine::uring::unavailable_cause() {
        None => assert_eq!(s["engine"], "uring"),
        Some(cause) => {
            assert_eq!(s["engine"], "baseline");
            assert!(
                stderr.contains("ran the baseline engine"),
                "{cause}: {stderr}"
            );
        }
    }
    assert_eq!(s["workload"], "flux_small");
    assert_eq!(s["steps_per_rank"], 48);
    assert_eq!(s["target"]["embedded"], true);
    let (bytes, gets) = planned(&[]);
    assert_eq!(
        s["bytes_read"].as_u64().unwrap(),
        bytes,
        "bytes_read is not the plan's ranges"
    );
    assert_eq!(s["bytes_planned"].as_u64().unwrap(), bytes);
    assert_eq!(s["requests"].as_u64().unwrap(), gets);
    assert_eq!(
        (s["retries"].as_u64(), s["errors"].as_u64()),
        (Some(0), Some(0))
    );
    // Footers are fetched once, apart from the row groups: one 64 KiB suffix per file here.
    assert_eq!(s["footer_bytes"].as_u64().unwrap(), 8 * 64 * 1024);
    let au = f(&s["au_percent"]);
    assert!((0.0..=100.0).contains(&au), "{au}");
    assert!(f(&s["samples_per_s"]) > 0.0);
    assert!(f(&s["client_cpu_s"]) > 0.0);
    assert!(f(&s["server_cpu_s"]) > 0.0);
    assert!(s["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        s["request_latency_ms"]["total"]["count"].as_u64().unwrap(),
        gets
    );
    // The human report went to stderr with the study's table.
    assert!(stderr.contains("| NP | RT | AU% | samples/s |"), "{stderr}");

    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(written["bytes_read"], s["bytes_read"]);
    let csv = std::fs::read_to_string(out.path().join("steps.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("rank,epoch,step,wait_ms,compute_ms,barrier_ms")
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 48);
    // Each step computed for about computation_time (0.05 s).
    assert!(rows.iter().all(|r| r[4] >= 49.0), "{csv}");
}

#[test]
fn au_is_high_when_compute_dwarfs_the_transfers_and_epochs_repeat_the_walk() {
    let args = [
        "--files",
        "2",
        "--computation-time",
        "0.2",
        "train.epochs=2",
    ];
    let (code, s, stderr) = run_summary(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(f(&s["au_percent"]) >= 90.0, "{s}");
    assert!(f(&s["au_percent"]) <= 100.0, "{s}");
    assert_eq!(s["steps_per_rank"], 12);
    // DLIO's metric: one AU and one throughput per epoch, their means the run's figures.
    let m = &s["metric"];
    let per_epoch = |name: &str| {
        m[name]
            .as_array()
            .unwrap()
            .iter()
            .map(f)
            .collect::<Vec<_>>()
    };
    let au = per_epoch("train_au_percentage");
    let sps = per_epoch("train_throughput_samples_per_second");
    assert_eq!((au.len(), sps.len()), (2, 2), "{m}");
    assert!((f(&m["train_au_mean_percentage"]) - f(&s["au_percent"])).abs() < 1e-9);
    assert!((f(&m["train_au_mean_percentage"]) - (au[0] + au[1]) / 2.0).abs() < 1e-9);
    assert!((f(&m["train_au_stdev_percentage"]) - (au[0] - au[1]).abs() / 2.0).abs() < 1e-9);
    assert!(
        (f(&m["train_throughput_mean_samples_per_second"]) - f(&s["samples_per_s"])).abs() < 1e-9
    );
    assert!((f(&m["train_io_mean_MB_per_second"]) - f(&s["io_mib_per_s"])).abs() < 1e-9);
    let verdict = if s["au_target_met"] == true {
        "success"
    } else {
        "fail"
    };
    assert_eq!(m["train_au_meet_expectation"], verdict, "{m}");
    assert!(
        stderr.contains("DLIO metric over 2 epochs: train_au_mean_percentage"),
        "{stderr}"
    );
    let (bytes, gets) = planned(&["--files", "2"]);
    assert_eq!(s["bytes_read"].as_u64().unwrap(), 2 * bytes);
    assert_eq!(s["requests"].as_u64().unwrap(), 2 * gets);
    // Footers are not fetched again for the second epoch.
    assert_eq!(s["footer_bytes"].as_u64().unwrap(), 2 * 64 * 1024);
    // computation_time differs from flux_small's 0.05 s: noted, and projected back to it.
    assert!(
        stderr.contains("NOTE: computation_time is 0.2 s"),
        "{stderr}"
    );
    assert!(s["projected_au_percent"].get("0.05").is_some(), "{s}");
    assert!(s["projected_au_percent"].get("0.5").is_some(), "{s}");
    // The banner before the table it qualifies (both on stderr with --json).
    let banner = stderr.find("NOTE: computation_time is 0.2 s").unwrap();
    assert!(banner < stderr.find("| NP | RT |").unwrap(), "{stderr}");
    // 12 steps per rank: the AU is not stable, and 9 files (54 steps) would be.
    assert_eq!(s["files_for_stable_au"], 9);
    assert!(
        stderr.contains("12 steps per rank, below 50: the AU is not stable")
            && stderr.contains("--files 9 gives 54")
            && stderr.contains("| 12 | 12 steps: AU not stable;"),
        "{stderr}"
    );
    // Both MiB/s named.
    assert!(
        stderr.contains("| nominal MiB/s |")
            && stderr.contains("MiB/s on the wire (")
            && stderr.contains("nominal MiB/s is DLIO's I/O figure"),
        "{stderr}"
    );
}

#[test]
fn several_ranks_and_readers_read_exactly_their_shares() {
    for sharding in ["rank", "dlio"] {
        let shape = [
            "--np",
            "2",
            "--read-threads",
            "2",
            "--prefetch",
            "2",
            "--sharding",
            sharding,
            "--computation-time",
            "0.01",
        ];
        let (code, s, stderr) = run_summary(&shape);
        assert!(code == 0 || code == 1, "{stderr}");
        let (bytes, gets) = planned(&shape);
        assert_eq!(s["bytes_read"].as_u64().unwrap(), bytes, "{sharding}");
        assert_eq!(s["requests"].as_u64().unwrap(), gets, "{sharding}");
        assert_eq!(s["steps_per_rank"], 24);
        assert_eq!(s["au_percent_per_rank"].as_array().unwrap().len(), 2);
        let per_rank: u64 = s["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["bytes_read"].as_u64().unwrap())
            .sum();
        assert_eq!(per_rank, bytes);
        // Run samples/s is the sum over ranks; AU the mean.
        let sum: f64 = s["samples_per_s_per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(f)
            .sum();
        assert!((sum - f(&s["samples_per_s"])).abs() < 1e-6);
        // The exit code follows the AU target.
        let met = f(&s["au_percent"]) >= f(&s["au_target_percent"]);
        assert_eq!(code, if met { 0 } else { 1 });
    }
}

/// `--loader dlio` reads on past the last step (its overshoot); DLIO's clock does not wait for
/// those GETs, and neither does ringload's: the wall time, AU, samples/s and MiB/s on the wire
/// stop at the end of the last step, while the overshoot still lands (and is counted in the
/// bytes read) after it. Here the last overshoot GET drips for about 2 s.
#[test]
fn the_dlio_loaders_clock_stops_at_the_last_step_not_at_its_overshoot() {
    for engine in engines() {
        // NP 1, RT 1, prefetch 1: one reader, GETs 1..9 in order, 6 steps; DLIO's prefetch
        // factor ⌈2 ÷ 1⌉ = 2 makes its window 3, so GETs 7–9 are read past step 6. GET 9
        // (4.6 MiB) is issued as step 6 ends and sent at 2.4 MB/s.
        let server = Server::start(ServerConfig {
            faults: ringload::server::faults::Faults::parse("drip=2400000@rg/nth=9", 1).unwrap(),
            ..common::server_config(common::virtual_flux(2))
        })
        .unwrap();
        let (code, s, stderr) = run_summary(&[
            "flux_small",
            "--files",
            "2",
            "train.total_training_steps=6",
            "--np",
            "1",
            "--read-threads",
            "1",
            "--prefetch",
            "1",
            "--computation-time",
            "0.1",
            "--loader",
            "dlio",
            "--engine",
            engine,
            "--endpoint",
            &server.endpoint_url(),
            "--bucket",
            "ringload",
        ]);
        assert!(code == 0 || code == 1, "{engine}: exit {code}: {stderr}");
        assert_eq!(server.stats().faults_injected, 1, "{engine}");
        assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
        assert_eq!(
            (s["prefetch_factor"].as_u64(), s["overshoot_gets"].as_u64()),
            (Some(2), Some(3))
        );
        // The storage was asked for the overshoot, and it arrived: it is in the bytes read.
        assert_eq!(s["requests"], 9, "{engine}: {s}");
        assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}: {s}");
        let (wall, drain) = (f(&s["wall_s"]), f(&s["drain_s"]));
        // The dripped GET landed after the clock stopped: during the drain, not in the wall.
        assert!(drain > 1.5, "{engine}: drain {drain} s");
        assert!(wall < drain, "{engine}: wall {wall} s, drain {drain} s");
        // AU over the steps' window: 5 × 0.1 s of compute, GETs that are local and ahead.
        assert!(f(&s["au_percent"]) > 50.0, "{engine}: {s}");
        // MiB/s on the wire: what each rank had taken in by its last step, the dripped GET apart.
        let by_last_step = s["bytes_read_by_last_step"].as_u64().unwrap();
        let bytes_read = s["bytes_read"].as_u64().unwrap();
        assert!(by_last_step < bytes_read, "{engine}: {s}");
        let mib_per_s = by_last_step as f64 / (1u64 << 20) as f64 / wall;
        assert!((f(&s["measured_mib_per_s"]) - mib_per_s).abs() < 1e-6 * mib_per_s);
        assert!(
            stderr.contains("past the last steps: 3 GETs (")
                && stderr.contains(
                    "for them after its last steps (every epoch's wait, summed): in the bytes read;"
                ),
            "{engine}: {stderr}"
        );
    }
}

const ACCESS_KEY: &str = "GKa1b2c3d4e5f6a7b8c9d0e1f2";
const SECRET_KEY: &str = "ringload-run-test-secret";

/// ringload's directory server with keys, holding bucket "data" with `objects`.
fn keyed_dir_server(objects: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, Server) {
    let root = tempfile::tempdir().unwrap();
    let store = DirStore::new(root.path()).unwrap();
    store.create_bucket("data").unwrap();
    for (key, bytes) in objects {
        let path = root.path().join("data").join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let server = Server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store: Store::Dir(store),
        credentials: Some(Credentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
        }),
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: Default::default(),
        tls: None,
        max_connections: ringload::server::DEFAULT_MAX_CONNECTIONS,
    })
    .unwrap();
    (root, server)
}

/// `ringload run flux_small --files 1` against `endpoint` with the given keys and bucket.
fn run_against(endpoint: &str, bucket: &str, key: &str, secret: &str) -> (i32, String, String) {
    common::output(common::ringload().args([
        "run",
        "flux_small",
        "--files",
        "1",
        "--endpoint",
        endpoint,
        "--bucket",
        bucket,
        "--access-key",
        key,
        "--secret-key",
        secret,
        "--retries",
        "1",
    ]))
}

/// A real flux_small file, as `ringload generate` writes it.
fn generated_file(dir: &Path) -> Vec<u8> {
    let (code, _, stderr) = run(&[
        "generate",
        "flux_small",
        "--files",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    std::fs::read(dir.join("data/flux_small/train/train_0000.parquet")).unwrap()
}

#[test]
fn storage_errors_are_one_line_with_exit_2() {
    const KEY: &str = "data/flux_small/train/train_0000.parquet";
    let scratch = tempfile::tempdir().unwrap();
    let good = generated_file(scratch.path());
    let (_root, server) = keyed_dir_server(&[(KEY, good.clone())]);
    let endpoint = server.endpoint_url();

    // The setup works, so the failures below are the ones each case introduces.
    let (code, stdout, stderr) = run_against(&endpoint, "data", ACCESS_KEY, SECRET_KEY);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stdout.contains("| 1 | 2 |"), "{stdout}");

    let (code, _, stderr) =
        run_against(&endpoint, "data", "GKnotthekey000000000000000", SECRET_KEY);
    assert_one_line_error(
        code,
        &stderr,
        2,
        &["403", "InvalidAccessKeyId", "--access-key"],
    );

    let (code, _, stderr) = run_against(&endpoint, "data", ACCESS_KEY, "wrong-secret");
    assert_one_line_error(code, &stderr, 2, &["SignatureDoesNotMatch", "secret key"]);

    let (code, _, stderr) = run_against(&endpoint, "no-such-bucket", ACCESS_KEY, SECRET_KEY);
    assert_one_line_error(
        code,
        &stderr,
        2,
        &["NoSuchBucket", "'no-such-bucket' does not exist"],
    );

    // An empty prefix: the bucket exists, the dataset is not in it.
    let (_empty_root, empty) = keyed_dir_server(&[]);
    let (code, _, stderr) = run_against(&empty.endpoint_url(), "data", ACCESS_KEY, SECRET_KEY);
    assert_one_line_error(
        code,
        &stderr,
        2,
        &[
            "no Parquet objects under s3://data/data/flux_small/train/",
            "generate",
        ],
    );

    // An object named .parquet that is not Parquet.
    let (_r, not_parquet) = keyed_dir_server(&[(KEY, b"id,value\n1,2\n".repeat(100))]);
    let (code, _, stderr) =
        run_against(&not_parquet.endpoint_url(), "data", ACCESS_KEY, SECRET_KEY);
    assert_one_line_error(code, &stderr, 2, &[KEY, "is not Parquet", "PAR1"]);

    // A truncated footer: the file's last 1,000 bytes cut off, the trailer put back, so the
    // metadata length points at bytes that are not metadata.
    let mut truncated = good[..good.len() - 1000].to_vec();
    truncated.extend_from_slice(&good[good.len() - 8..]);
    let (_r, bad_footer) = keyed_dir_server(&[(KEY, truncated)]);
    let (code, _, stderr) = run_against(&bad_footer.endpoint_url(), "data", ACCESS_KEY, SECRET_KEY);
    assert_one_line_error(code, &stderr, 2, &[KEY, "truncated or corrupt footer"]);

    // Nothing listening at the endpoint.
    drop(server);
    let (code, _, stderr) = run_against(&endpoint, "data", ACCESS_KEY, SECRET_KEY);
    assert_one_line_error(code, &stderr, 2, &["cannot connect", "--endpoint"]);
}

/// Spawns `ringload run flux_small --files 2` with 1 s steps (12 of them), `--json` and
/// `--output DIR`, plus `extra`: a run that is still under way a few seconds in.
fn spawn_slow_run(extra: &[&str], output: &std::path::Path) -> std::process::Child {
    common::ringload()
        .args([
            "run",
            "flux_small",
            "--files",
            "2",
            "--computation-time",
            "1.0",
            "--json",
        ])
        .args(extra)
        .arg("--output")
        .arg(output)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The summary a run printed on stdout and the one it wrote into `output`.
fn both_summaries(stdout: &[u8], output: &std::path::Path, stderr: &str) -> [Value; 2] {
    let printed: Value = serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("no JSON on stdout ({e}): {stderr}"));
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap())
            .unwrap();
    [printed, written]
}

#[test]
fn a_server_that_dies_mid_run_fails_the_run_with_exit_3() {
    let mut server = common::ringload()
        .args(["serve", "--listen", "127.0.0.1:0", "--files", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut endpoint = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut endpoint)
        .unwrap();
    let results = tempfile::tempdir().unwrap();
    let client = spawn_slow_run(
        &[
            "--endpoint",
            endpoint.trim(),
            "--bucket",
            "ringload",
            "--retries",
            "1",
        ],
        results.path(),
    );
    // Set-up takes well under a second; steps take 1 s (12 of them), so after 3 s the run is
    // under way and most GETs are still to be sent.
    std::thread::sleep(Duration::from_secs(3));
    server.kill().unwrap();
    server.wait().unwrap();
    let started = std::time::Instant::now();
    let out = client.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "no prompt failure"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_one_line_error(
        out.status.code().unwrap_or(-1),
        &stderr,
        3,
        &[
            "the run failed",
            "GET s3://ringload/data/flux_small/train/train_000",
        ],
    );
    // Nothing lost: the figures up to the failure, on stdout and in --output, marked failed.
    for summary in &both_summaries(&out.stdout, results.path(), &stderr) {
        assert_eq!(summary["outcome"], "failed", "{summary}");
        assert!(
            summary["failure"]
                .as_str()
                .unwrap()
                .contains("GET s3://ringload/"),
            "{summary}"
        );
        assert!(summary["errors"].as_u64().unwrap() >= 1, "{summary}");
        assert!(summary["requests"].as_u64().unwrap() >= 1, "{summary}");
        assert_eq!(summary["au_target_met"], false);
    }
    let steps = std::fs::read_to_string(results.path().join("steps.csv")).unwrap();
    assert!(
        steps.lines().count() >= 2,
        "no step before the failure: {steps}"
    );
    assert!(results.path().join("requests.csv").exists());
}

#[test]
fn ctrl_c_stops_the_run_and_keeps_its_figures() {
    let results = tempfile::tempdir().unwrap();
    let child = spawn_slow_run(&[], results.path());
    // 12 steps of 1 s: after 3 s the run is under way.
    std::thread::sleep(Duration::from_secs(3));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    // Each rank stops at its next wait: within a compute step and a poll, not at the end.
    assert!(started.elapsed() < Duration::from_secs(5), "no prompt stop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_one_line_error(
        out.status.code().unwrap_or(-1),
        &stderr,
        3,
        &["the run was interrupted (Ctrl-C or SIGTERM)"],
    );
    for summary in &both_summaries(&out.stdout, results.path(), &stderr) {
        assert_eq!(summary["outcome"], "interrupted", "{summary}");
        assert_eq!(summary["errors"], 0, "{summary}");
        assert!(summary["requests"].as_u64().unwrap() >= 1, "{summary}");
    }
}

#[test]
fn ctrl_c_during_set_up_exits_3_with_a_line() {
    // An endpoint that accepts connections and never answers: set-up waits on its listing.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let child = common::ringload()
        .args([
            "run",
            "flux_small",
            "--endpoint",
            &endpoint,
            "--bucket",
            "b",
            "--engine",
            "baseline",
        ])
        .env("AWS_ACCESS_KEY_ID", "AK")
        .env("AWS_SECRET_ACCESS_KEY", "SK")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Not killed by the signal (130): the documented code, and a line that says why.
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        last.contains("run interrupted (Ctrl-C or SIGTERM) during set-up"),
        "{stderr}"
    );
    drop(silent);
}

// ---- garage -------------------------------------------------------------------------------

/// Writes `files` Flux-shaped (flux_small) files with pyarrow, uploads them with boto3 under
/// PREFIX/train/, and prints each row group's byte range over all columns, from pyarrow's
/// metadata: min(dictionary or data page offset) to max(offset + compressed size).
const PYARROW_DATASET: &str = r#"
import io, json, os, sys
import boto3, pyarrow as pa, pyarrow.parquet as pq
endpoint, bucket, key, secret, prefix, files = sys.argv[1:7]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1")
widths = [("t5_encodings", 8192), ("clip_encodings", 409), ("mean", 8232),
          ("logvar", 8232), ("timestamp", 7)]
rows = 288
fields, arrays = [], []
for name, width in widths:
    child = pa.field("element", pa.float32(), nullable=False)
    values = pa.Array.from_buffers(pa.float32(), rows * width,
                                   [None, pa.py_buffer(os.urandom(rows * width * 4))])
    arrays.append(pa.FixedSizeListArray.from_arrays(values, type=pa.list_(child, width)))
    fields.append(pa.field(name, pa.list_(child, width), nullable=False))
table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
spans = []
for i in range(int(files)):
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=48, compression="none",
                   use_dictionary=False, write_statistics=False)
    body = sink.getvalue()
    s3.put_object(Bucket=bucket, Key=f"{prefix}train/train_{i:04d}.parquet", Body=body)
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        starts, ends = [], []
        for c in range(rg.num_columns):
            col = rg.column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            starts.append(start)
            ends.append(start + col.total_compressed_size)
        spans.append([min(starts), max(ends), rg.num_rows])
print(json.dumps({"spans": spans, "row_groups": meta.num_row_groups}))
"#;

#[test]
fn a_pyarrow_dataset_on_garage_reads_exactly_its_row_groups() {
    let Some(g) = common::garage() else { return };
    let prefix = "pyarrow/flux_small/";
    let written = python_json(
        PYARROW_DATASET,
        &[&g.endpoint, &g.bucket, &g.key, &g.secret, prefix, "2"],
    );
    assert_eq!(written["row_groups"], 6);
    let spans = written["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 12);
    let expected: u64 = spans
        .iter()
        .map(|s| s[1].as_u64().unwrap() - s[0].as_u64().unwrap())
        .sum();
    let folder = format!("dataset.data_folder={}", prefix);
    // Both engines, each signing its GETs for garage.
    let uring = ringload::engine::uring::unavailable_cause().is_none();
    for engine in ["uring", "baseline"]
        .into_iter()
        .filter(|&e| uring || e == "baseline")
    {
        let (code, stdout, stderr) = g.ringload(&[
            "run",
            "flux_small",
            &folder,
            "--files",
            "2",
            "--bucket",
            &g.bucket,
            "--read-threads",
            "2",
            "--engine",
            engine,
            "--verify",
            "--json",
        ]);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["engine"], engine);
        // pyarrow's files carry no chunk hashes: their pages are walked instead.
        assert_eq!(s["verify"]["check"], "page headers", "{engine}: {s}");
        assert_eq!(
            s["verify"]["page_checked_bytes"], s["bytes_read"],
            "{engine}"
        );
        assert_eq!(s["target"]["embedded"], false);
        assert_eq!(s["steps_per_rank"], 12);
        assert_eq!(s["bytes_read"].as_u64().unwrap(), expected, "{engine}: {s}");
        assert_eq!(s["requests"], 12);
        assert_eq!(s["errors"], 0);
        assert!(s["footer_bytes"].as_u64().unwrap() > 0);
        let au = f(&s["au_percent"]);
        assert!((0.0..=100.0).contains(&au), "{au}");
        assert_eq!(code, if au >= 90.0 { 0 } else { 1 });
    }

    // The same files through garage with long compute next to the transfers: AU ≥ 90.
    let (code, stdout, stderr) = g.ringload(&[
        "run",
        "flux_small",
        &folder,
        "--files",
        "1",
        "--bucket",
        &g.bucket,
        "--computation-time",
        "0.3",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert!(f(&s["au_percent"]) >= 90.0, "{s}");

    // garage's own answers to bad setups, decoded into one line.
    let (code, _, stderr) = g.ringload(&[
        "run",
        "flux_small",
        &folder,
        "--bucket",
        "no-such-bucket-here",
        "--retries",
        "0",
    ]);
    assert_one_line_error(code, &stderr, 2, &["no-such-bucket-here"]);
    let (code, _, stderr) = g.ringload(&[
        "run",
        "flux_small",
        &folder,
        "--bucket",
        &g.bucket,
        "--access-key",
        &g.key,
        "--secret-key",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "--retries",
        "0",
    ]);
    assert_one_line_error(code, &stderr, 2, &["403"]);
    let (code, _, stderr) = g.ringload(&[
        "run",
        "flux_small",
        "dataset.data_folder=nothing/here/",
        "--bucket",
        &g.bucket,
    ]);
    assert_one_line_error(code, &stderr, 2, &["no Parquet objects"]);
}

/// Both engines over TLS against stacks that are not ringload's: OpenSSL (stunnel) in front
/// of garage. Every row group arrives, its pages walked after decryption.
#[test]
fn garage_behind_an_openssl_terminator_reads_exactly_over_https() {
    let Some(g) = common::garage() else { return };
    let prefix = "pyarrow-tls/flux_small/";
    let written = python_json(
        PYARROW_DATASET,
        &[&g.endpoint, &g.bucket, &g.key, &g.secret, prefix, "2"],
    );
    let expected: u64 = written["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_u64().unwrap() - s[0].as_u64().unwrap())
        .sum();
    let tls = common::tls_terminator(&g.endpoint, "");
    let endpoint = format!("https://127.0.0.1:{}", tls.port);
    let folder = format!("dataset.data_folder={prefix}");
    let uring = ringload::engine::uring::unavailable_cause().is_none();
    for engine in ["uring", "baseline"]
        .into_iter()
        .filter(|&e| uring || e == "baseline")
    {
        let (code, stdout, stderr) = g.ringload(&[
            "run",
            "flux_small",
            &folder,
            "--files",
            "2",
            "--bucket",
            &g.bucket,
            "--endpoint",
            &endpoint,
            "--ca-bundle",
            &tls.ca,
            "--engine",
            engine,
            "--verify",
            "--json",
        ]);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["engine"], engine);
        assert_eq!(s["bytes_read"].as_u64().unwrap(), expected, "{engine}: {s}");
        assert_eq!(
            s["verify"]["page_checked_bytes"], s["bytes_read"],
            "{engine}"
        );
        let negotiated = s["target"]["tls"]["negotiated"].as_str().unwrap_or("");
        assert!(negotiated.starts_with("TLSv1_3"), "{engine}: {negotiated}");
    }
}

/// `ringload run flux_small` (2 files) against `endpoint`, trusting `ca`, with `engine`;
/// the summary, after checking the run completed with every planned byte and no error.
fn tls_run(endpoint: &str, ca: &str, engine: &str) -> Value {
    let (code, s, stderr) = run_summary(&[
        "flux_small",
        "--files",
        "2",
        "--endpoint",
        endpoint,
        "--bucket",
        "ringload",
        "--ca-bundle",
        ca,
        "--engine",
        engine,
        "--computation-time",
        "0",
        "--verify",
    ]);
    assert!(code == 0 || code == 1, "{engine}: exit {code}: {stderr}");
    assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
    assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}: {s}");
    // Every byte hashed against the footer's xxh3 hashes: the right bytes, not only enough.
    assert_eq!(
        s["verify"]["hashed_bytes"], s["bytes_read"],
        "{engine}: {s}"
    );
    assert_eq!(s["verify"]["unchecked_bytes"], 0, "{engine}");
    assert_eq!(s["errors"], 0, "{engine}: {s}");
    s
}

fn engines() -> Vec<&'static str> {
    let uring = ringload::engine::uring::unavailable_cause().is_none();
    ["uring", "baseline"]
        .into_iter()
        .filter(|&e| uring || e == "baseline")
        .collect()
}

/// Both engines through OpenSSL configured for TLS 1.2 at most (stunnel with
/// `sslVersionMax = TLSv1.2`, as nginx without an `ssl_protocols` line and many gateways are)
/// in front of ringload's own plain-HTTP server, with each of TLS 1.2's AEAD suites: every
/// byte arrives, checked, without a retry.
#[test]
fn both_engines_read_exactly_through_a_tls12_only_gateway() {
    let server = Server::start(common::server_config(common::virtual_flux(2))).unwrap();
    for (ciphers, suite) in [
        ("", "GCM"),
        ("ciphers = ECDHE-ECDSA-AES128-GCM-SHA256\n", "AES_128_GCM"),
        (
            "ciphers = ECDHE-ECDSA-CHACHA20-POLY1305\n",
            "CHACHA20_POLY1305",
        ),
    ] {
        let tls = common::tls_terminator(
            &server.endpoint_url(),
            &format!("sslVersionMax = TLSv1.2\n{ciphers}"),
        );
        let endpoint = format!("https://127.0.0.1:{}", tls.port);
        for engine in engines() {
            let s = tls_run(&endpoint, &tls.ca, engine);
            assert_eq!(s["retries"], 0, "{engine} {suite}: {s}");
            let negotiated = s["target"]["tls"]["negotiated"].as_str().unwrap_or("");
            assert!(
                negotiated.starts_with("TLSv1_2") && negotiated.contains(suite),
                "{engine}: {negotiated}"
            );
        }
    }
}

/// A TLS 1.3 server that updates its keys between two responses and asks for the client's
/// (`serve --faults key-update`, what rustls does after 2^23 records, ~128 GiB on one
/// connection): both engines answer and go on, without a retry.
#[test]
fn a_server_updating_its_tls_keys_between_responses_costs_no_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (config, files) =
        ringload::server::tls::self_signed("127.0.0.1:0".parse().unwrap(), dir.path()).unwrap();
    for engine in engines() {
        let server = Server::start(ServerConfig {
            tls: Some(config.clone()),
            faults: ringload::server::faults::Faults::parse("key-update@rg/every=2", 1).unwrap(),
            ..common::server_config(common::virtual_flux(2))
        })
        .unwrap();
        let s = tls_run(
            &server.endpoint_url(),
            &files.ca_pem.display().to_string(),
            engine,
        );
        assert_eq!(s["retries"], 0, "{engine}: {s}");
        let negotiated = s["target"]["tls"]["negotiated"].as_str().unwrap_or("");
        assert!(negotiated.starts_with("TLSv1_3"), "{engine}: {negotiated}");
        let injected = server.stats().faults_injected;
        assert!(injected >= 5, "{engine}: {injected} key updates");
    }
}

/// Reads every object under PREFIX back from garage with boto3 and pyarrow: rows, row groups,
/// schema, and whether garage stored it as a multipart upload.
const PYARROW_READ_BACK: &str = r#"
import io, json, sys
import boto3, pyarrow.parquet as pq
endpoint, bucket, key, secret, prefix = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1")
out = []
for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]:
    body = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    f = pq.ParquetFile(io.BytesIO(body))
    t = f.read()
    out.append({"key": o["Key"], "size": len(body), "etag": o["ETag"],
                "rows": t.num_rows, "row_groups": f.metadata.num_row_groups,
                "columns": t.schema.names, "first": t.column(0)[0].as_py()[:2]})
print(json.dumps(out))
"#;

#[test]
fn generate_writes_to_garage_by_multipart_and_run_reads_it() {
    let Some(g) = common::garage() else { return };
    for (prefix, extra) in [
        ("generated/unsigned/", None),
        ("generated/signed/", Some("--signed-payload")),
    ] {
        let folder = format!("dataset.data_folder={prefix}");
        let mut args = vec![
            "generate",
            "flux_small",
            &folder,
            "--files",
            "2",
            "--bucket",
            &g.bucket,
            "--json",
        ];
        args.extend(extra);
        let (code, _, stderr) = g.ringload(&args);
        assert_eq!(code, 0, "{stderr}");
        let objects = python_json(
            PYARROW_READ_BACK,
            &[&g.endpoint, &g.bucket, &g.key, &g.secret, prefix],
        );
        let objects = objects.as_array().unwrap();
        assert_eq!(objects.len(), 2, "{objects:?}");
        for o in objects {
            assert_eq!(o["rows"], 288);
            assert_eq!(o["row_groups"], 6);
            assert_eq!(o["columns"][0], "t5_encodings");
            // ~29 MB files in 16 MiB parts: garage marks multipart ETags with "-<parts>".
            assert!(o["size"].as_u64().unwrap() > 16 << 20);
            assert!(o["etag"].as_str().unwrap().contains("-2"), "{o}");
        }
        assert_ne!(
            objects[0]["first"], objects[1]["first"],
            "files are not distinct"
        );

        let (code, stdout, stderr) = g.ringload(&[
            "run",
            "flux_small",
            &folder,
            "--files",
            "2",
            "--bucket",
            &g.bucket,
            "--json",
        ]);
        assert!(code == 0 || code == 1, "{stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        let (bytes, _) = planned(&["--files", "2"]);
        assert_eq!(s["bytes_read"].as_u64().unwrap(), bytes);
    }
}

#[test]
fn generate_uploads_to_ringloads_own_server_with_signed_payloads_and_run_reads_them() {
    let (root, server) = keyed_dir_server(&[]);
    let endpoint = server.endpoint_url();
    let with_keys = |args: &[&str]| {
        common::output(
            common::ringload()
                .args(args)
                .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        )
    };
    let (code, _, stderr) = with_keys(&[
        "generate",
        "flux_small",
        "--files",
        "2",
        "--endpoint",
        &endpoint,
        "--bucket",
        "data",
        "--signed-payload",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // The objects the server stored are byte for byte what `generate --out` writes.
    let local = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(&[
        "generate",
        "flux_small",
        "--files",
        "2",
        "--out",
        local.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    for i in 0..2 {
        let key = format!("data/flux_small/train/train_{i:04}.parquet");
        let uploaded = std::fs::read(root.path().join("data").join(&key)).unwrap();
        let written = std::fs::read(local.path().join(&key)).unwrap();
        assert!(uploaded.len() > 16 << 20, "not multipart-sized");
        assert!(uploaded == written, "{key} differs from the local copy");
    }
    let (code, stdout, stderr) = with_keys(&[
        "run",
        "flux_small",
        "--files",
        "2",
        "--endpoint",
        &endpoint,
        "--bucket",
        "data",
        "--json",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    let (bytes, _) = planned(&["--files", "2"]);
    assert_eq!(s["bytes_read"].as_u64().unwrap(), bytes);
    // An external server: the CPU line has no server part, and no stray dash for it.
    let cpu = stderr
        .lines()
        .find(|l| l.starts_with("client CPU"))
        .unwrap();
    assert!(cpu.ends_with("per GiB)"), "{cpu}");
    // A wrong secret is refused before anything is written.
    let out = common::ringload()
        .args([
            "generate",
            "flux_small",
            "--files",
            "1",
            "--endpoint",
            &endpoint,
            "--bucket",
            "data",
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            "nope",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_one_line_error(
        out.status.code().unwrap_or(-1),
        &stderr,
        2,
        &["SignatureDoesNotMatch"],
    );
}

/// Writes one flux_small-shaped file with pyarrow's defaults (dictionary pages, snappy) to
/// PATH and prints the file offset of the first row group's first column chunk.
const PYARROW_DEFAULT_FILE: &str = r#"
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
path = sys.argv[1]
rows = 96
child = pa.field("element", pa.float32(), nullable=False)
arrays, fields = [], []
for name, width in [("t5_encodings", 8192), ("clip_encodings", 409), ("mean", 8232),
                    ("logvar", 8232), ("timestamp", 7)]:
    values = pa.Array.from_buffers(pa.float32(), rows * width,
                                   [None, pa.py_buffer(os.urandom(rows * width * 4))])
    arrays.append(pa.FixedSizeListArray.from_arrays(values, type=pa.list_(child, width)))
    fields.append(pa.field(name, pa.list_(child, width), nullable=False))
pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path, row_group_size=48)
col = pq.ParquetFile(path).metadata.row_group(1).column(0)
start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
print(json.dumps({"chunk": start, "codec": col.compression}))
"#;

#[test]
fn verify_walks_the_page_headers_of_a_pyarrow_file_and_names_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.parquet");
    let written = python_json(PYARROW_DEFAULT_FILE, &[path.to_str().unwrap()]);
    assert_eq!(written["codec"], "SNAPPY");
    let good = std::fs::read(&path).unwrap();
    let mut broken = good.clone();
    // A page header that starts with Thrift's stop byte: the header of the second row group's
    // first chunk no longer says its page's type or size.
    broken[written["chunk"].as_u64().unwrap() as usize] = 0;
    let key = "flux_small/train/train_0000.parquet";
    let uring = ringload::engine::uring::unavailable_cause().is_none();
    for engine in ["uring", "baseline"]
        .into_iter()
        .filter(|&e| uring || e == "baseline")
    {
        for (bytes, ok) in [(&good, true), (&broken, false)] {
            let (_root, server) = keyed_dir_server(&[(key, bytes.clone())]);
            let endpoint = server.endpoint_url();
            let (code, stdout, stderr) = common::output(common::ringload().args([
                "run",
                "flux_small",
                "dataset.data_folder=flux_small/",
                "dataset.num_samples_per_file=96",
                "--files",
                "1",
                "--endpoint",
                &endpoint,
                "--bucket",
                "data",
                "--access-key",
                ACCESS_KEY,
                "--secret-key",
                SECRET_KEY,
                "--engine",
                engine,
                "--verify",
                "--json",
            ]));
            let s: Value =
                serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{engine}: {e}: {stderr}"));
            let v = &s["verify"];
            if ok {
                assert!(code == 0 || code == 1, "{engine}: {stderr}");
                assert_eq!(v["check"], "page headers", "{engine}: {v}");
                assert_eq!(v["page_checked_bytes"], s["bytes_read"], "{engine}: {v}");
                assert_eq!(v["hashed_bytes"], 0, "{engine}");
                // Each of 2 row groups × 5 columns holds a dictionary page and a data page
                // at least.
                assert!(v["pages"].as_u64().unwrap() >= 20, "{engine}: {v}");
                assert!(stderr.contains("by page headers"), "{engine}: {stderr}");
            } else {
                assert_eq!(code, 3, "{engine}: {stderr}");
                assert_one_line_error(
                    code,
                    &stderr,
                    3,
                    &[key, "row group 1, column 0", "page header 0"],
                );
                assert_eq!(s["errors_by_cause"]["content_mismatch"], 1, "{engine}");
            }
        }
    }
}
