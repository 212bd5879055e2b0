//! Checkpoint runs end to end with the small model (llama3_tiny: 2 layers, ~57 MiB per rank at
//! NP 2): both engines against the embedded sink, the directory backend and garage (a
//! third-party S3 server), the objects listed by boto3 with DLIO's names and sizes and their
//! content checked by a Python reimplementation of the generator (tests/py/content.py, written
//! from README's description, used by tests/py/checkpoint_content.py); restores with --verify; faults on parts; a killed
//! writer's uploads cleaned up by the next run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload, run, run_json};
use serde_json::Value;

const CHECKER: &str = concat!(
    include_str!("py/content.py"),
    include_str!("py/checkpoint_content.py")
);

/// `ringload run ARGS --json` with `env`, its summary (exit 0 expected).
fn run_json_env(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = ringload();
    cmd.arg("run").args(args).arg("--json");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (code, stdout, stderr) = output(&mut cmd);
    assert_eq!(code, 0, "run {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Every object the plan of `args` writes for checkpoints 1..=steps: (key, size).
fn planned_objects(args: &[&str], steps: u32) -> Vec<(String, u64)> {
    let mut plan_args = vec!["plan"];
    plan_args.extend_from_slice(args);
    plan_args.push("--json");
    let (code, stdout, stderr) = run(&plan_args);
    assert_eq!(code, 0, "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    let folder = plan["settings"]["folder"].as_str().unwrap().to_string();
    let mut objects = Vec::new();
    for step in 1..=steps {
        for rank in plan["ranks"].as_array().unwrap() {
            for o in rank.as_array().unwrap() {
                objects.push((
                    format!(
                        "{folder}/global_epoch1_step{step}/{}",
                        o["name"].as_str().unwrap()
                    ),
                    o["bytes"].as_u64().unwrap(),
                ));
            }
        }
    }
    objects
}

/// The independent checker's report on the bucket under `prefix`.
fn check_bucket(
    endpoint: &str,
    bucket: &str,
    keys: (&str, &str),
    prefix: &str,
    expected: &[(String, u64)],
) -> Value {
    let expected = serde_json::to_string(expected).unwrap();
    common::python_json(
        CHECKER,
        &[endpoint, bucket, keys.0, keys.1, prefix, &expected, "true"],
    )
}

fn assert_clean(report: &Value, what: &str) {
    for field in ["missing", "unexpected", "wrong_size", "mismatches"] {
        assert_eq!(
            report[field].as_array().map(Vec::len),
            Some(0),
            "{what}: {field}: {report}"
        );
    }
    assert!(
        report["ranges_checked"].as_u64().unwrap() > 0,
        "{what}: {report}"
    );
    assert_eq!(report["open_uploads"], 0, "{what}: {report}");
}

/// DLIO's metric fields, present and consistent with the rows.
fn assert_dlio_fields(summary: &Value, writes: usize, reads: usize) {
    assert_eq!(summary["outcome"], "completed", "{summary}");
    assert!(summary.get("failure").is_none(), "{summary}");
    let m = &summary["metric"];
    let size = m["checkpoint_size_GB"].as_f64().unwrap();
    assert!(size > 0.1 && size < 0.12, "{m}");
    let rows = summary["checkpoints"].as_array().unwrap();
    assert_eq!(rows.len(), writes + reads, "{summary}");
    for (phase, n) in [("save", writes), ("load", reads)] {
        let mean = &m[format!("{phase}_checkpoint_io_mean_GB_per_second")];
        if n == 0 {
            assert!(mean.is_null(), "{m}");
            continue;
        }
        let durations: Vec<f64> = rows
            .iter()
            .filter(|r| r["phase"] == phase)
            .map(|r| r["rank0_duration_s"].as_f64().unwrap())
            .collect();
        let rates: Vec<f64> = durations.iter().map(|d| size / d).collect();
        let expect = rates.iter().sum::<f64>() / rates.len() as f64;
        let got = mean.as_f64().unwrap();
        assert!(
            (got - expect).abs() < 1e-9 * expect.max(1.0),
            "{phase}: {got} vs {expect}"
        );
        let d_mean = m[format!("{phase}_checkpoint_duration_mean_seconds")]
            .as_f64()
            .unwrap();
        assert!((d_mean - durations.iter().sum::<f64>() / n as f64).abs() < 1e-9);
        assert!(m[format!("{phase}_checkpoint_io_stdev_GB_per_second")].is_number());
        for r in rows.iter().filter(|r| r["phase"] == phase) {
            assert!(
                r["slowest_rank_duration_s"].as_f64() >= r["fastest_rank_duration_s"].as_f64(),
                "{r}"
            );
        }
    }
}

#[test]
fn both_engines_write_and_restore_against_the_embedded_sink_with_verify() {
    for engine in ["uring", "baseline"] {
        let s = run_json_env(
            &["llama3_tiny", "--np", "2", "--engine", engine, "--verify"],
            &[],
        );
        assert_eq!(s["kind"], "checkpoint");
        assert_dlio_fields(&s, 2, 2);
        let per_checkpoint = s["checkpoint_bytes"].as_u64().unwrap();
        assert_eq!(
            s["save"]["bytes"].as_u64(),
            Some(2 * per_checkpoint),
            "{engine}"
        );
        assert_eq!(
            s["load"]["bytes"].as_u64(),
            Some(2 * per_checkpoint),
            "{engine}"
        );
        // Two 32 MiB parts for each optimizer shard, one for each model shard, per checkpoint.
        assert_eq!(
            s["save"]["requests"].as_u64(),
            Some(2 * 2 * 3),
            "{engine}: {s}"
        );
        assert!(
            s["save"]["client_cpu_s_per_gib"].is_number(),
            "{engine}: {s}"
        );
        assert!(
            s["save"]["generate_cpu_s_per_gib"].is_number(),
            "{engine}: {s}"
        );
        // The sum per GiB written: the I/O's, the generator's and the checksum's CPU.
        let figure = |k: &str| s["save"][k].as_f64().unwrap_or(0.0);
        let parts = figure("client_cpu_s_per_gib")
            + figure("generate_cpu_s_per_gib")
            + figure("checksum_cpu_s_per_gib");
        assert!(
            (figure("total_cpu_s_per_gib") - parts).abs() < 1e-6 && parts > 0.0,
            "{engine}: {s}"
        );
        assert!(
            s["load"]["server_cpu_s_per_gib"].is_number(),
            "{engine}: {s}"
        );
        // The sink checked every byte written.
        let sink = &s["target"]["server"]["sink"];
        assert_eq!(sink["mismatches"], 0, "{engine}: {s}");
        assert_eq!(
            sink["verified_bytes"].as_u64(),
            Some(2 * per_checkpoint),
            "{engine}"
        );
        let rss = s["peak_rss_bytes"].as_u64().unwrap();
        assert!(
            rss <= s["memory_budget_bytes"].as_u64().unwrap(),
            "{engine}: {s}"
        );
    }
}

/// One request as the test compares it: method, path, query (less its upload id), Range,
/// status.
type Logged = (String, String, String, String, u64);

/// The requests `ringload serve --sink --request-log` saw while `args` ran against it, each as
/// (method, path, query less its upload id, Range, status), sorted: the order in which ranks and
/// parts interleave is the scheduler's, the multiset of requests is the plan's.
fn requests_sent(args: &[&str]) -> Vec<Logged> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = common::spawn_serve(&["--sink", "--request-log", log.to_str().unwrap()]);
    let mut run_args = args.to_vec();
    run_args.extend(["--endpoint", &server.endpoint, "--bucket", "ringload"]);
    run_json_env(&run_args, &[]);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut requests: Vec<_> = text
        .lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let query = r["query"]
                .as_str()
                .unwrap()
                .split('&')
                .filter(|p| !p.starts_with("uploadId="))
                .collect::<Vec<_>>()
                .join("&");
            (
                r["method"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap().to_string(),
                query,
                r["range"].as_str().unwrap_or("").to_string(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    requests.sort();
    requests
}

#[test]
fn both_engines_send_the_same_checkpoint_requests() {
    // Objects not a multiple of a page (8,585,856 and 51,522,816 bytes), restores in 3 blocks
    // of several 1 MiB GETs, the model objects (under 9 MiB) as one PUT: every rule of the
    // shape shows in the requests.
    let args = [
        "llama3_tiny",
        "--np",
        "2",
        "--read-blocks",
        "3",
        "--read-range",
        "1MiB",
        "--part-size",
        "5MiB",
        "--single-put-below",
        "9MiB",
    ];
    let mut sent = Vec::new();
    for engine in ["uring", "baseline"] {
        let mut engine_args = args.to_vec();
        engine_args.extend(["--engine", engine]);
        sent.push(requests_sent(&engine_args));
    }
    let (uring, baseline) = (&sent[0], &sent[1]);
    let count = |method: &str, what: &dyn Fn(&Logged) -> bool| {
        uring.iter().filter(|r| r.0 == method && what(r)).count()
    };
    // The shape shows: single PUTs, parts, ranged GETs, and the set-up's LISTs.
    assert!(count("PUT", &|r| r.2.is_empty()) > 0, "{uring:#?}");
    assert!(
        count("PUT", &|r| r.2.starts_with("partNumber=")) > 0,
        "{uring:#?}"
    );
    assert!(count("GET", &|r| !r.3.is_empty()) > 0, "{uring:#?}");
    for (i, (u, b)) in uring.iter().zip(baseline).enumerate() {
        assert_eq!(u, b, "request {i} of {} differs", uring.len());
    }
    assert_eq!(uring.len(), baseline.len(), "{uring:#?}\n{baseline:#?}");
    // DLIO's cut: blocks of ⌈size ÷ 3⌉ bytes, the last one shorter, never page-rounded.
    let plan = run_json(&["plan", "llama3_tiny", "--np", "2", "--json"]);
    let size = plan["ranks"][0][0]["bytes"].as_u64().unwrap();
    let block = size.div_ceil(3);
    let key = plan["ranks"][0][0]["name"].as_str().unwrap();
    let second = format!(
        "bytes={block}-{}",
        (block + (1 << 20) - 1).min(2 * block - 1)
    );
    assert!(
        uring
            .iter()
            .any(|r| r.0 == "GET" && r.1.ends_with(key) && r.3 == second),
        "no GET {second} of {key} ({size} B): {uring:#?}"
    );
}

/// Over https both engines write and restore checkpoints: the io_uring engine seals each
/// part's records in its registered buffer (with `SEND` and with `SEND_ZC`), each part's
/// CRC32C checked by the server, every restored byte checked (`--verify`); no fallback, no
/// note.
#[test]
fn over_https_both_engines_write_and_restore_checkpoints() {
    let tls = tempfile::tempdir().unwrap();
    let tls_dir = tls.path().join("tls");
    let server = common::spawn_serve(&["--sink", "--tls-self-signed", tls_dir.to_str().unwrap()]);
    assert!(
        server.endpoint.starts_with("https://"),
        "{}",
        server.endpoint
    );
    let ca = tls_dir.join("ca.pem");
    let base = [
        "llama3_tiny",
        "--np",
        "2",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "ringload",
        "--ca-bundle",
        ca.to_str().unwrap(),
        "--part-size",
        "5MiB",
        "--verify",
    ];
    for (engine, zc) in [("uring", "off"), ("uring", "on"), ("baseline", "auto")] {
        let mut args = base.to_vec();
        args.extend(["--engine", engine, "--send-zc", zc]);
        let s = run_json_env(&args, &[]);
        assert_eq!(s["engine"], engine, "{s}");
        // No note of a TLS fallback (the peak-RSS note, when the allocator's peak passes the
        // budget by a few MiB, names "TLS state" among what the budget counts: not a fallback).
        assert!(
            !s["notes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .any(|n| n.contains("TLS") && !n.starts_with("peak RSS")),
            "{s}"
        );
        assert!(s["target"]["tls"]["negotiated"].is_string(), "{s}");
        assert_dlio_fields(&s, 2, 2);
    }
}

/// A directory server with bucket `ringload`, and its root.
fn dir_server(extra: &[&str]) -> (tempfile::TempDir, common::ServeChild) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("ringload")).unwrap();
    let mut args = vec!["--dir", root.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = common::spawn_serve(&args);
    (root, server)
}

#[test]
fn the_directory_backend_stores_real_files_with_dlio_names_and_the_generators_bytes() {
    for engine in ["uring", "baseline"] {
        let (root, server) = dir_server(&[]);
        let ep = server.endpoint.as_str();
        let args = [
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            engine,
            "--endpoint",
            ep,
            "--bucket",
            "ringload",
        ];
        let s = run_json_env(&args, &[]);
        assert_dlio_fields(&s, 2, 2);
        let expected = planned_objects(&["llama3_tiny", "--np", "2"], 2);
        for (key, size) in &expected {
            let file = root.path().join("ringload").join(key);
            let len = std::fs::metadata(&file).map(|m| m.len());
            assert_eq!(len.ok(), Some(*size), "{engine}: {}", file.display());
        }
        let report = check_bucket(ep, "ringload", ("k", "s"), "checkpoints/", &expected);
        assert_clean(&report, engine);
        // A restore with --verify of what is on disk.
        let mut verify = args.to_vec();
        verify.extend(["--verify", "checkpoint.num_checkpoints_write=0"]);
        let s = run_json_env(&verify, &[]);
        assert_dlio_fields(&s, 0, 2);
        // A flipped byte on disk: the restore fails naming the object.
        let victim = root.path().join("ringload").join(&expected[1].0);
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[12_345] ^= 0x40;
        std::fs::write(&victim, &bytes).unwrap();
        let mut cmd = ringload();
        cmd.arg("run").args(&verify);
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(stderr.contains(&expected[1].0), "{engine}: {stderr}");
        // As for another writer's object (issue 35): the line says what else wrote it.
        assert!(
            stderr.contains("another writer") && stderr.contains("without --verify"),
            "{engine}: {stderr}"
        );
    }
}

#[test]
fn garage_holds_every_object_with_dlio_names_sizes_and_content() {
    let Some(g) = common::garage() else { return };
    for engine in ["uring", "baseline"] {
        let folder = format!("checkpoints/tiny-{engine}");
        let override_folder = format!("checkpoint.checkpoint_folder={folder}");
        let env = [
            ("AWS_ENDPOINT_URL", g.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", g.key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", g.secret.as_str()),
            ("AWS_REGION", "us-east-1"),
        ];
        let out = tempfile::tempdir().unwrap();
        let write = [
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            engine,
            "--bucket",
            &g.bucket,
            &override_folder,
            "checkpoint.num_checkpoints_read=0",
            "--output",
            out.path().to_str().unwrap(),
        ];
        let s = run_json_env(&write, &env);
        assert_dlio_fields(&s, 2, 0);
        let expected = planned_objects(&["llama3_tiny", "--np", "2", &override_folder], 2);
        let report = check_bucket(
            &g.endpoint,
            &g.bucket,
            (&g.key, &g.secret),
            &format!("{folder}/"),
            &expected,
        );
        assert_clean(&report, engine);
        // MLPerf's split form: the read run finds what the write run left, and says how long
        // after its end it started.
        let read = [
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            engine,
            "--bucket",
            &g.bucket,
            &override_folder,
            "checkpoint.num_checkpoints_write=0",
            "--verify",
            "--after",
            out.path().to_str().unwrap(),
        ];
        let s = run_json_env(&read, &env);
        assert_dlio_fields(&s, 0, 2);
        let after = s["after_write_run_s"].as_f64().unwrap();
        assert!((0.0..30.0).contains(&after), "{after}");
    }
}

#[test]
fn part_faults_are_retried_and_a_fatal_one_aborts_the_upload() {
    for engine in ["uring", "baseline"] {
        // A 503 on the third part and a cut mid-part: retried, the run completes.
        let (_root, server) = dir_server(&["--faults", "503@part/nth=3,cut=1000000@part/nth=5"]);
        let ep = server.endpoint.as_str();
        let base = [
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            engine,
            "--endpoint",
            ep,
            "--bucket",
            "ringload",
        ];
        let s = run_json_env(&base, &[]);
        assert!(s["save"]["retries"].as_u64().unwrap() >= 2, "{engine}: {s}");
        let expected = planned_objects(&["llama3_tiny", "--np", "2"], 2);
        assert_clean(
            &check_bucket(ep, "ringload", ("k", "s"), "checkpoints/", &expected),
            engine,
        );
        drop(server);

        // Every CompleteMultipartUpload fails: the run fails naming an object, and no upload is
        // left open.
        for fault in ["500@complete/every=1", "200-error@complete/every=1"] {
            let (_root, server) = dir_server(&["--faults", fault]);
            let ep = server.endpoint.as_str();
            let mut cmd = ringload();
            cmd.arg("run")
                .args([
                    "llama3_tiny",
                    "--np",
                    "2",
                    "--engine",
                    engine,
                    "--endpoint",
                    ep,
                ])
                .args(["--bucket", "ringload", "--retries", "1"]);
            let (code, _, stderr) = output(&mut cmd);
            assert_eq!(code, 3, "{engine} {fault}: {stderr}");
            assert!(
                stderr.contains("checkpoints/llama3_tiny/global_epoch1_step1/")
                    && stderr.contains("CompleteMultipartUpload")
                    && stderr.contains("aborted"),
                "{engine} {fault}: {stderr}"
            );
            let report = check_bucket(ep, "ringload", ("k", "s"), "checkpoints/", &[]);
            assert_eq!(report["open_uploads"], 0, "{engine} {fault}: {report}");
        }
    }
}

/// Polls `list_multipart_uploads` until an upload of a key under PREFIX ending in SUFFIX is
/// open, then prints. The suffix picks the rank's largest object (33 parts, one in flight), so
/// the kill that follows lands mid-upload: waiting for any upload raced with the small object's
/// upload completing before the large one's began.
const WAIT_FOR_UPLOAD: &str = r#"
import json, sys, time, boto3
endpoint, bucket, key, secret, prefix, suffix = sys.argv[1:7]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1")
deadline = time.time() + 60
n = 0
while time.time() < deadline:
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    n = sum(1 for u in uploads if u["Key"].endswith(suffix))
    if n:
        break
    time.sleep(0.02)
print(json.dumps({"open": n}))
"#;

#[test]
fn a_killed_writer_leaves_uploads_that_the_next_run_aborts_and_says_so() {
    let Some(g) = common::garage() else { return };
    let folder = "checkpoints/killed";
    let overrides = [
        format!("checkpoint.checkpoint_folder={folder}"),
        // A bigger model, so the kill lands mid-upload: ~1.1 GB of optimizer state per rank.
        "model.transformer.hidden_size=1024".to_string(),
        "model.transformer.ffn_hidden_size=3072".to_string(),
        "checkpoint.num_checkpoints_read=0".to_string(),
        "checkpoint.num_checkpoints_write=1".to_string(),
    ];
    let mut cmd = ringload();
    cmd.arg("run")
        .args([
            "llama3_tiny",
            "--np",
            "1",
            "--engine",
            "baseline",
            "--bucket",
            &g.bucket,
        ])
        .args(&overrides)
        .args(["--parts-in-flight", "1"])
        .env("AWS_ENDPOINT_URL", &g.endpoint)
        .env("AWS_ACCESS_KEY_ID", &g.key)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .env("AWS_REGION", "us-east-1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // The journals live here, for both runs (wherever their --output).
    let state = tempfile::tempdir().unwrap();
    cmd.env("RINGLOAD_STATE_DIR", state.path());
    let mut child = cmd.spawn().unwrap();
    let waited = common::python_json(
        WAIT_FOR_UPLOAD,
        &[
            &g.endpoint,
            &g.bucket,
            &g.key,
            &g.secret,
            &format!("{folder}/"),
            "optim_states.pt",
        ],
    );
    child.kill().unwrap(); // SIGKILL: nothing runs after it.
    let _ = child.wait();
    assert!(waited["open"].as_u64().unwrap() >= 1, "{waited}");
    let report = check_bucket(
        &g.endpoint,
        &g.bucket,
        (&g.key, &g.secret),
        &format!("{folder}/"),
        &[],
    );
    assert!(report["open_uploads"].as_u64().unwrap() >= 1, "{report}");

    // Another writer's upload under the same folder, started with boto3, and one outside it.
    let foreign = common::python_json(
        START_UPLOADS,
        &[
            &g.endpoint,
            &g.bucket,
            &g.key,
            &g.secret,
            &format!("{folder}/foreign.bin"),
            "elsewhere/foreign.bin",
        ],
    );
    let foreign_id = foreign["ids"][0].as_str().unwrap().to_string();

    // The next run of the same workload (into the same folder; the small model, to be quick)
    // aborts the killed run's uploads before it starts, and says so; it names the other
    // writer's and leaves it open.
    let next = |extra: &[&str]| {
        let mut next = ringload();
        next.arg("run")
            .args([
                "llama3_tiny",
                "--np",
                "1",
                "--engine",
                "baseline",
                "--bucket",
                &g.bucket,
            ])
            .args([&overrides[0], &overrides[3], &overrides[4]])
            .args(extra)
            .env("RINGLOAD_STATE_DIR", state.path())
            .env("AWS_ENDPOINT_URL", &g.endpoint)
            .env("AWS_ACCESS_KEY_ID", &g.key)
            .env("AWS_SECRET_ACCESS_KEY", &g.secret)
            .env("AWS_REGION", "us-east-1");
        output(&mut next)
    };
    let (code, _, stderr) = next(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("aborted") && stderr.contains("incomplete multipart upload"),
        "{stderr}"
    );
    let left_alone: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("left alone"))
        .collect();
    assert_eq!(left_alone.len(), 1, "{stderr}");
    assert!(
        left_alone[0].contains(&format!("{folder}/foreign.bin ({foreign_id})"))
            && left_alone[0].contains("--abort-foreign-uploads")
            && !left_alone[0].contains("elsewhere"),
        "{stderr}"
    );
    let open_under = |prefix: &str| {
        check_bucket(&g.endpoint, &g.bucket, (&g.key, &g.secret), prefix, &[])["open_uploads"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        open_under(&format!("{folder}/")),
        1,
        "the foreign upload stays"
    );
    // Nothing journaled is left: a third run aborts nothing of ringload's.
    let (code, _, stderr) = next(&["--abort-foreign-uploads"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("incomplete multipart upload"), "{stderr}");
    assert!(stderr.contains("(--abort-foreign-uploads)"), "{stderr}");
    assert_eq!(open_under(&format!("{folder}/")), 0);
    assert_eq!(
        open_under("elsewhere/"),
        1,
        "outside the folder: never touched"
    );
}

/// Starts a multipart upload of each key given after the credentials; prints their ids.
const START_UPLOADS: &str = r#"
import json, sys, boto3
endpoint, bucket, key, secret = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1")
ids = [s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"] for k in sys.argv[5:]]
print(json.dumps({"ids": ids}))
"#;

#[test]
fn a_read_run_without_checkpoints_names_the_fix() {
    let (_root, server) = dir_server(&[]);
    let (code, _, stderr) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "ringload",
        "checkpoint.num_checkpoints_write=0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("num_checkpoints_read=2") && stderr.contains("finds 0 checkpoints"),
        "{stderr}"
    );
}

/// `serve --sink llama3_tiny --np 2` lists and serves the plan's objects from the start, made
/// by the generator: a read-only run (`num_checkpoints_write=0`) with --verify against the
/// fresh sink finds both checkpoints and every byte checks; a sink serving zeros (--zeros) where
/// the workload's content is random fails that check, naming the object.
#[test]
fn a_read_only_run_restores_from_a_fresh_sink_serving_the_workloads_plan() {
    let server = common::spawn_serve(&["--sink", "llama3_tiny", "--np", "2"]);
    for engine in ["uring", "baseline"] {
        let s = run_json_env(
            &[
                "llama3_tiny",
                "--np",
                "2",
                "--engine",
                engine,
                "--verify",
                "--endpoint",
                &server.endpoint,
                "--bucket",
                "ringload",
                "checkpoint.num_checkpoints_write=0",
            ],
            &[],
        );
        assert_dlio_fields(&s, 0, 2);
        let per_checkpoint = s["checkpoint_bytes"].as_u64().unwrap();
        assert_eq!(s["load"]["bytes"].as_u64(), Some(2 * per_checkpoint), "{s}");
    }
    let zeros = common::spawn_serve(&["--sink", "llama3_tiny", "--np", "2", "--zeros"]);
    let (code, _, stderr) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--verify",
        "--endpoint",
        &zeros.endpoint,
        "--bucket",
        "ringload",
        "checkpoint.num_checkpoints_write=0",
    ]);
    // Zeros where the workload's generator makes random blocks: --verify names the object.
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("checkpoints/llama3_tiny/"), "{stderr}");
}

#[test]
fn an_interrupt_stops_every_rank_between_parts_and_leaves_no_upload_open() {
    for engine in ["uring", "baseline"] {
        let server = common::spawn_serve(&["--sink"]);
        let results = tempfile::tempdir().unwrap();
        let child = ringload()
            .args(["run", "llama3_tiny", "--np", "1", "--engine", engine])
            .args(["--output", results.path().to_str().unwrap()])
            .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
            // A 4 GB model object, then a 25 GB optimizer object: a rank that finished its
            // object before stopping would take far longer than the bound below.
            .args([
                "model.transformer.hidden_size=8192",
                "model.transformer.ffn_hidden_size=24576",
            ])
            .args([
                "checkpoint.num_checkpoints_read=0",
                "--parts-in-flight",
                "2",
            ])
            .args(["--read-blocks", "2", "--read-range", "32MiB"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(4));
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::INT,
        )
        .unwrap();
        let stopped = std::time::Instant::now();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{engine}: {stderr}");
        assert!(stderr.contains("interrupted"), "{engine}: {stderr}");
        // Stopped between parts, not at the end of its object.
        assert!(
            stopped.elapsed().as_secs() < 10,
            "{engine}: {:?}",
            stopped.elapsed()
        );
        let report = check_bucket(
            &server.endpoint,
            "ringload",
            ("k", "s"),
            "checkpoints/",
            &[],
        );
        assert_eq!(report["open_uploads"], 0, "{engine}: {report}");
        // Its summary says so, with what was written until then and no DLIO figure.
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(results.path().join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(s["outcome"], "interrupted", "{engine}: {s}");
        assert!(
            s["failure"].as_str().unwrap().contains("interrupted"),
            "{s}"
        );
        assert!(s.get("metric").is_none(), "{engine}: {s}");
        assert_eq!(s["save"]["completed"], false, "{engine}: {s}");
        assert!(s["save"]["bytes"].as_u64().unwrap() > 0, "{engine}: {s}");
    }
}

/// `checkpoint.checkpoint_folder: s3://bucket/prefix` is DLIO's S3 form: the keys go under the
/// prefix in that bucket (the run's when no other is named); another bucket named by
/// `--bucket` or `storage.storage_root` is one line naming both, exit 2.
#[test]
fn an_s3_checkpoint_folder_names_the_bucket_and_the_prefix() {
    let (root, server) = dir_server(&[]);
    std::fs::create_dir(root.path().join("ckpt-b")).unwrap();
    let ep = server.endpoint.as_str();
    let folder = "checkpoint.checkpoint_folder=s3://ckpt-b/runs/a/";
    let s = run_json_env(&["llama3_tiny", "--np", "2", "--endpoint", ep, folder], &[]);
    assert_eq!(s["outcome"], "completed", "{s}");
    assert_eq!(s["target"]["bucket"], "ckpt-b", "{s}");
    assert_dlio_fields(&s, 2, 2);
    let expected = planned_objects(&["llama3_tiny", "--np", "2", folder], 2);
    for (key, size) in &expected {
        assert!(key.starts_with("runs/a/global_epoch1_step"), "{key}");
        let file = root.path().join("ckpt-b").join(key);
        assert_eq!(
            std::fs::metadata(&file).map(|m| m.len()).ok(),
            Some(*size),
            "{key}"
        );
    }
    // Nothing under a key that starts with the URI.
    assert!(!root.path().join("ringload").join("s3:").exists());
    for other in [
        vec!["--bucket", "ringload"],
        vec!["storage.storage_root=ringload"],
    ] {
        let mut cmd = ringload();
        cmd.args(["run", "llama3_tiny", "--np", "2", "--endpoint", ep, folder])
            .args(&other);
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, 2, "{other:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{other:?}: {stderr}");
        assert!(
            stderr.contains("ckpt-b") && stderr.contains("ringload"),
            "{other:?}: {stderr}"
        );
    }
    // The embedded sink takes the folder's bucket too.
    let s = run_json_env(&["llama3_tiny", "--np", "2", folder], &[]);
    assert_eq!(s["target"]["bucket"], "ckpt-b", "{s}");
}

/// The ranged GETs (a restore's blocks) in a `serve --request-log` file.
fn ranged_gets(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| {
            let r: Value = serde_json::from_str(line).unwrap();
            r["method"] == "GET" && r["range"].is_string()
        })
        .count()
}

/// A read-only run's checkpoint is listed and compared with the plan at set-up: another
/// `--np`, another model and a missing object are each one line and exit 2, before any block
/// is read; the same checkpoint whole restores.
#[test]
fn a_restore_of_another_np_model_or_a_partial_checkpoint_is_refused_before_any_block() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("requests.jsonl");
    let (root, server) = dir_server(&["--request-log", log.to_str().unwrap()]);
    let ep = server.endpoint.as_str();
    let base = ["llama3_tiny", "--endpoint", ep, "--bucket", "ringload"];
    let mut write = base.to_vec();
    write.extend(["--np", "2", "checkpoint.num_checkpoints_read=0"]);
    run_json_env(&write, &[]);
    let restore = |extra: &[&str]| {
        let mut cmd = ringload();
        cmd.arg("run")
            .args(base)
            .arg("checkpoint.num_checkpoints_write=0")
            .args(extra);
        output(&mut cmd)
    };
    let refused = |extra: &[&str], says: &[&str]| {
        let (code, stdout, stderr) = restore(extra);
        assert_eq!(code, 2, "{extra:?}: {stderr}");
        assert!(stdout.is_empty(), "{extra:?}: {stdout}");
        // One line (beside a warning that ranks share this machine's cores).
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("ringload run: WARNING"))
            .collect();
        assert_eq!(lines.len(), 1, "{extra:?}: {stderr}");
        for s in says {
            assert!(stderr.contains(s), "{extra:?}: {s:?} not in {stderr}");
        }
        assert_eq!(ranged_gets(&log), 0, "{extra:?}: a block was read");
    };
    refused(
        &["--np", "4"],
        &[
            "s3://ringload/checkpoints/llama3_tiny/global_epoch1_step1/",
            "another --np",
            "found 2 model files, the plan has 4",
        ],
    );
    refused(
        &["--np", "2", "model.transformer.hidden_size=256"],
        &["bytes, the plan's is", "another model"],
    );
    // One object of the second checkpoint gone, as a write stopped by Ctrl-C leaves it.
    let expected = planned_objects(&["llama3_tiny", "--np", "2"], 2);
    let (gone, _) = expected
        .iter()
        .find(|(k, _)| k.contains("step2/") && k.ends_with("optim_states.pt"))
        .unwrap();
    let file = root.path().join("ringload").join(gone);
    let aside = root.path().join("aside");
    std::fs::rename(&file, &aside).unwrap();
    refused(
        &["--np", "2"],
        &[&format!("s3://ringload/{gone} is missing"), "partial"],
    );
    // Put back, the same restore reads every block.
    std::fs::rename(&aside, &file).unwrap();
    let (code, _, stderr) = restore(&["--np", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(ranged_gets(&log) > 0);
}

/// Every DLIO `metric` name found anywhere in `json`.
fn dlio_names(json: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![json];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "checkpoint_size_GB"
                        || (k.contains("_checkpoint_") && k.ends_with("_second"))
                        || (k.contains("_checkpoint_") && k.ends_with("_seconds"))
                    {
                        found.push(k.clone());
                    }
                    stack.push(v);
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

/// A run whose phase fails says `failed` with its line, and neither its summary.json nor its
/// report carries a DLIO figure for that phase; the phase before it keeps its own; no MLPerf
/// leaf is written.
#[test]
fn a_failed_checkpoint_run_has_outcome_failed_and_no_dlio_figure_for_the_failed_phase() {
    // Every part refused: the save phase fails; nothing completed.
    let server = common::spawn_serve(&["--sink", "--faults", "403@part/every=1"]);
    let out = tempfile::tempdir().unwrap();
    let results = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "ringload",
        "--retries",
        "1",
        "--output",
        out.path().to_str().unwrap(),
        "--results-dir",
        results.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{stderr}");
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["outcome"], "failed", "{s}");
    let failure = s["failure"].as_str().unwrap();
    assert!(stderr.contains(failure), "{failure} vs {stderr}");
    assert!(
        failure.contains("AccessDenied") || failure.contains("403"),
        "{failure}"
    );
    assert!(s.get("metric").is_none(), "{s}");
    assert_eq!(dlio_names(&s), Vec::<String>::new(), "{s}");
    assert_eq!(s["save"]["completed"], false, "{s}");
    // The report: the failure, no headline of DLIO's.
    assert!(stdout.contains("FAILED"), "{stdout}");
    assert!(!stdout.contains("GiB/s, "), "{stdout}");
    assert!(!stdout.contains("DLIO's figures"), "{stdout}");
    assert_eq!(
        std::fs::read_dir(results.path()).unwrap().count(),
        0,
        "a failed run wrote an MLPerf leaf"
    );
    drop(server);

    // Every ranged GET of a block refused: the saves complete and keep DLIO's figures, the
    // restore fails and has none.
    let server = common::spawn_serve(&["--sink", "--faults", "403@rg/every=1"]);
    let (code, stdout, stderr) = run(&[
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "ringload",
        "--retries",
        "1",
        "--json",
    ]);
    assert_eq!(code, 3, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["outcome"], "failed", "{s}");
    assert!(s["failure"].is_string(), "{s}");
    let m = &s["metric"];
    assert!(
        m["save_checkpoint_io_mean_GB_per_second"].is_number(),
        "{m}"
    );
    assert!(dlio_names(m).iter().all(|k| !k.starts_with("load_")), "{m}");
    assert_eq!(s["save"]["completed"], true, "{s}");
    assert_eq!(s["load"]["completed"], false, "{s}");
    // With --json the report is on stderr: save's headline, no load headline.
    assert!(stderr.contains("  save: "), "{stderr}");
    assert!(!stderr.contains("  load: "), "{stderr}");
}

/// Requests counted as the store sees them (issue 35): a write and a restore's creations,
/// parts, completions, checksum HEADs, ranged GETs and the set-up's LISTs, on both engines,
/// equal the embedded server's own log kind by kind.
#[test]
fn requests_by_kind_match_the_servers_own_log_on_both_engines() {
    for engine in ["uring", "baseline"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let server = common::spawn_serve(&["--sink", "--request-log", log.to_str().unwrap()]);
        let args = [
            "llama3_tiny",
            "--np",
            "2",
            "--engine",
            engine,
            "--endpoint",
            &server.endpoint,
            "--bucket",
            "ringload",
        ];
        let s = run_json_env(&args, &[]);
        drop(server);
        let (save, load) = (
            &s["save"]["requests_by_kind"],
            &s["load"]["requests_by_kind"],
        );
        assert_eq!(save["part"], s["save"]["requests"], "{engine}: {s}");
        assert_eq!(load["ranged_get"], s["load"]["requests"], "{engine}: {s}");
        assert!(load["head"].as_u64() > Some(0), "{engine}: {load}");
        let lists = s["lists"].as_u64().unwrap();
        assert!(lists > 0, "{engine}: {s}");
        assert_eq!(
            common::summed_kinds(&[save, load], lists),
            common::logged_kinds(&log),
            "{engine}"
        );
    }
}
