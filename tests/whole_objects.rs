//! Whole-object training workloads (npz, jpeg, tfrecord) end to end: both engines against the
//! embedded virtual store (`ringload serve` of the workload, its listing summed by boto3) and
//! against garage (a third-party S3 server) holding a dataset written by numpy and boto3 as
//! DLIO's generators write it (tests/py/dlio_objects.py): every planned byte read, one GET per
//! object, steps as DLIO computes them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload, run, run_json};
use serde_json::Value;

const WRITER: &str = include_str!("py/dlio_objects.py");

/// `ringload run ARGS --json` with `env`: its summary (exit 0, or 1 for a missed AU target,
/// which a loaded 2-core machine may give; the summary says which).
fn run_json_env(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = ringload();
    cmd.arg("run").args(args).arg("--json");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (code, stdout, stderr) = output(&mut cmd);
    assert!(
        code == 0 || code == 1,
        "run {args:?} failed ({code}): {stderr}"
    );
    let s: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        s["au_target_met"],
        code == 0,
        "exit {code} says the AU target: {stderr}"
    );
    s
}

/// (key, size) of every object under `prefix`, listed by boto3.
const LIST: &str = r#"
import json, sys, boto3
endpoint, bucket, prefix = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                  region_name="us-east-1")
out = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    out += [[o["Key"], o["Size"]] for o in page.get("Contents", [])]
print(json.dumps(out))
"#;

/// Checks a completed run read each of the first `files` objects once, whole: the bytes the
/// listing gives them, one GET each, and DLIO's steps.
fn assert_read_whole(s: &Value, sizes: &[u64], batch: u64, np: u64, spf: u64, what: &str) {
    assert_eq!(s["outcome"], "completed", "{what}");
    let steps = sizes.len() as u64 * spf / (batch * np);
    assert_eq!(s["steps_per_rank"], steps, "{what}: ⌊spf·N/(B·P)⌋");
    // Every object of the share is read whole: with rank sharding the shares are the first
    // steps·B·P samples' objects.
    let objects = (steps * batch * np).div_ceil(spf) as usize;
    let bytes: u64 = sizes[..objects].iter().sum();
    assert_eq!(s["requests"], objects as u64, "{what}: one GET per object");
    assert_eq!(
        s["bytes_read"], bytes,
        "{what}: the listed sizes of the objects read"
    );
    assert_eq!(s["bytes_planned"], bytes, "{what}");
    assert_eq!(s["errors"], 0, "{what}");
    assert!(
        s["metric"]["train_au_mean_percentage"].as_f64().is_some(),
        "{what}: DLIO's metric"
    );
}

#[test]
fn both_engines_read_every_object_whole_from_the_virtual_store() {
    // (workload, overrides, batch, np, samples per file)
    let cases: [(&str, &[&str], u64, u64, u64); 3] = [
        (
            "retinanet_b200",
            &["dataset.num_files_train=480", "train.epochs=1"],
            24,
            2,
            1,
        ),
        (
            // unet3d's npz with a smaller record (and spread) so the test stays quick.
            "unet3d_b200",
            &[
                "dataset.num_files_train=28",
                "dataset.record_length_bytes=2000000",
                "dataset.record_length_bytes_stdev=900000",
                "train.epochs=1",
            ],
            7,
            2,
            1,
        ),
        (
            // resnet50's TFRecord files: one GET per file of 40 records.
            "resnet50_h100",
            &[
                "dataset.num_files_train=6",
                "dataset.num_samples_per_file=40",
                "reader.batch_size=20",
                "train.epochs=1",
            ],
            20,
            2,
            40,
        ),
    ];
    for (workload, overrides, batch, np, spf) in cases {
        let mut serve_args = vec![workload];
        serve_args.extend_from_slice(overrides);
        let served = common::spawn_serve(&serve_args);
        let listed = common::python_json(LIST, &[&served.endpoint, "ringload", "data/"]);
        let sizes: Vec<u64> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o[1].as_u64().unwrap())
            .collect();
        let files: usize = overrides
            .iter()
            .find_map(|o| o.strip_prefix("dataset.num_files_train="))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            sizes.len(),
            files,
            "{workload}: the server lists the dataset"
        );
        let np_text = np.to_string();
        for engine in ["uring", "baseline"] {
            let mut args = vec![
                workload,
                "--np",
                &np_text,
                "--engine",
                engine,
                "--endpoint",
                &served.endpoint,
                "--bucket",
                "ringload",
            ];
            args.extend_from_slice(overrides);
            let s = run_json_env(&args, &[]);
            assert_read_whole(&s, &sizes, batch, np, spf, &format!("{workload} {engine}"));
        }
    }
}

#[test]
fn the_embedded_default_runs_unet3d_and_retinanet_with_their_au_targets() {
    for (workload, files, target) in [
        ("unet3d_b200", "dataset.num_files_train=14", 90.0),
        ("retinanet_b200", "dataset.num_files_train=480", 85.0),
    ] {
        let mut cmd = ringload();
        cmd.args(["run", workload, files, "train.epochs=1", "--np", "1"]);
        if workload == "unet3d_b200" {
            // Small objects keep the test quick; the AU target is the workload's.
            cmd.args([
                "dataset.record_length_bytes=1000000",
                "dataset.record_length_bytes_stdev=300000",
            ]);
        }
        let (code, stdout, stderr) = output(&mut cmd);
        // Exit 1 is a missed AU target, which a loaded 2-core machine may give.
        assert!(code == 0 || code == 1, "{workload}: {stderr}");
        assert!(
            stdout.contains(&format!("(target {target}%")),
            "{workload}: {stdout}"
        );
        assert!(stdout.contains("train_au_mean_percentage"), "{stdout}");
        // The header says what a GET is: a whole object, nothing coalesced, no footer.
        let format = if workload == "unet3d_b200" {
            "npz"
        } else {
            "jpeg"
        };
        assert!(
            stdout.contains(&format!("whole {format} objects")),
            "{stdout}"
        );
        assert!(
            !stdout.contains("coalesce_rgs") && !stdout.contains("footers 0 B once"),
            "{stdout}"
        );
    }
}

#[test]
fn size_classes_keep_both_engines_within_a_budget_that_largest_object_buffers_exceed() {
    // unet3d's spread sizes, scaled down (mean 20 MB, stdev 10 MB) to keep the test quick.
    let workload = [
        "unet3d_b200",
        "dataset.num_files_train=56",
        "dataset.record_length_bytes=20000000",
        "dataset.record_length_bytes_stdev=10000000",
        "train.epochs=1",
        "--np",
        "2",
    ];
    let plan = |cap: Option<&str>| {
        let mut args = vec!["plan"];
        args.extend(workload);
        args.push("--json");
        if let Some(cap) = cap {
            args.extend(["--memory-budget", cap]);
        }
        run_json(&args)
    };
    // Every buffer the largest object: prefetch 4 × the largest per reader.
    let uniform = plan(None);
    assert!(
        uniform["memory"]["small_buffers"].is_null(),
        "{}",
        uniform["memory"]
    );
    let uniform_total = uniform["memory"]["total_bytes"].as_u64().unwrap();
    let cap = (uniform_total * 3 / 4).to_string();
    let classes = plan(Some(&cap));
    let small = &classes["memory"]["small_buffers"];
    assert_eq!(small["per_reader"], 2, "{}", classes["memory"]);
    let largest = classes["largest_get_bytes"].as_u64().unwrap();
    assert!(small["get_bytes"].as_u64().unwrap() < largest, "{small}");
    let budget = classes["memory"]["total_bytes"].as_u64().unwrap();
    assert!(budget <= uniform_total * 3 / 4, "{budget} {uniform_total}");
    let bytes_per_epoch = classes["bytes_per_epoch"].as_u64().unwrap();
    for engine in ["uring", "baseline"] {
        let mut args = vec!["run"];
        args.extend(workload);
        args.extend(["--engine", engine, "--memory-budget", &cap, "--json"]);
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
        // 4 steps × 7 samples × 2 ranks, every planned byte read.
        assert_eq!(s["requests"], 56, "{engine}");
        assert_eq!(
            s["bytes_read"].as_u64().unwrap(),
            bytes_per_epoch,
            "{engine}"
        );
        assert_eq!(s["peak_rss_since_setup"], true);
        let peak = s["peak_rss_bytes"].as_u64().unwrap();
        // The run's budget also counts the in-process server's few KiB.
        let run_budget = s["memory_budget_bytes"].as_u64().unwrap();
        assert!(
            run_budget.abs_diff(budget) < 1 << 20,
            "{engine}: {run_budget} {budget}"
        );
        assert!(
            peak <= run_budget && run_budget <= uniform_total * 3 / 4,
            "{engine}: peak RSS {peak} over the budget {run_budget}"
        );
    }
}

/// Checks a `--verify` run's summary says every GET's object was compared, every byte.
fn assert_verified_whole(s: &Value, what: &str) {
    assert_eq!(s["outcome"], "completed", "{what}");
    assert_eq!(s["errors"], 0, "{what}");
    let v = &s["verify"];
    assert_eq!(v["check"], "generated bytes", "{what}: {v}");
    assert!(s["requests"].as_u64().unwrap() > 0, "{what}");
    assert_eq!(v["objects"], s["requests"], "{what}: every object: {v}");
    assert_eq!(v["gets"], s["requests"], "{what}: {v}");
    assert_eq!(
        v["object_bytes"], s["bytes_read"],
        "{what}: every byte: {v}"
    );
    assert_eq!(s["bytes_read"], s["bytes_planned"], "{what}");
    assert_eq!(
        (&v["hashed_bytes"], &v["page_checked_bytes"]),
        (&Value::from(0), &Value::from(0)),
        "{what}"
    );
    assert!(v["cpu_s"].as_f64().unwrap() > 0.0, "{what}: {v}");
}

#[test]
fn both_engines_verify_every_whole_object_of_the_embedded_default_byte_for_byte() {
    for (workload, overrides) in [
        ("retinanet_b200", &["dataset.num_files_train=48"][..]),
        (
            "unet3d_b200",
            &[
                "dataset.num_files_train=14",
                "dataset.record_length_bytes=1000000",
                "dataset.record_length_bytes_stdev=300000",
            ][..],
        ),
        (
            "resnet50_h100",
            &[
                "dataset.num_files_train=6",
                "dataset.num_samples_per_file=40",
                "reader.batch_size=20",
            ][..],
        ),
    ] {
        for engine in ["uring", "baseline"] {
            let mut args = vec![workload, "train.epochs=1", "--np", "1", "--engine", engine];
            args.extend_from_slice(overrides);
            args.push("--verify");
            let s = run_json_env(&args, &[]);
            assert_verified_whole(&s, &format!("{workload} {engine}"));
        }
    }
    // The report says it in words.
    let (code, stdout, stderr) = run(&[
        "run",
        "retinanet_b200",
        "dataset.num_files_train=48",
        "train.epochs=1",
        "--np",
        "1",
        "--verify",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(
        stdout.contains("verified 14.77 MiB in 48 whole objects (48 GETs), byte for byte"),
        "{stdout}"
    );
}

#[test]
fn verify_finds_one_flipped_byte_in_a_generated_dataset_with_both_engines_and_the_dlio_loader() {
    // `ringload generate` writes unet3d npz objects (17 MB: the dlio loader sends its HEAD and
    // splits them) into a directory an in-process server serves; every run checks them whole,
    // s3dlio's reassembled ranged chunks included. Then one byte of object 1 is flipped.
    let tmp = tempfile::tempdir().unwrap();
    let overrides = [
        "dataset.num_files_train=4",
        "dataset.record_length_bytes=17000000",
        "dataset.record_length_bytes_stdev=1000000",
        "reader.batch_size=2",
        "train.epochs=1",
    ];
    let mut generate = vec!["generate", "unet3d_b200"];
    generate.extend(overrides);
    let out = tmp.path().join("ringload");
    generate.extend(["--output", out.to_str().unwrap()]);
    let (code, _, stderr) = run(&generate);
    assert_eq!(code, 0, "{stderr}");
    let chunks: u64 = std::fs::read_dir(out.join("data/unet3d/train"))
        .unwrap()
        .map(|f| f.unwrap().metadata().unwrap().len().div_ceil(4 << 20))
        .sum();
    let store = ringload::server::dir::DirStore::new(tmp.path()).unwrap();
    let server =
        ringload::server::Server::start(common::server_config(ringload::server::Store::Dir(store)))
            .unwrap();
    let endpoint = server.endpoint_url();
    let s3dlio = [
        ("S3DLIO_RANGE_THRESHOLD_MB", "1"),
        ("S3DLIO_CHUNK_SIZE", "4194304"),
    ];
    let runs: [(&str, &[&str]); 3] = [
        ("uring", &["--engine", "uring"]),
        ("baseline", &["--engine", "baseline"]),
        ("dlio loader", &["--loader", "dlio"]),
    ];
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec![
            "run",
            "unet3d_b200",
            "--np",
            "1",
            "--verify",
            "--retries",
            "0",
        ];
        args.extend(overrides);
        args.extend(extra);
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend([
            "--endpoint".into(),
            endpoint.clone(),
            "--bucket".into(),
            "ringload".into(),
        ]);
        args
    };
    for (what, extra) in runs {
        let before = server.stats();
        let mut cmd = ringload();
        cmd.args(args(extra)).arg("--json").envs(s3dlio);
        let (code, stdout, stderr) = output(&mut cmd);
        assert!(code == 0 || code == 1, "{what}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_verified_whole(&s, what);
        assert_eq!(s["requests"], 4, "{what}");
        let ranged = server.stats().ranged_gets - before.ranged_gets;
        if what == "dlio loader" {
            // Each object in 4 MiB chunks, one ranged GET each.
            assert_eq!(ranged, chunks, "{what}: s3dlio's ranged chunks");
        } else {
            assert_eq!(ranged, 0, "{what}: whole-object GETs");
        }
    }
    let object = out.join("data/unet3d/train/img_1_of_4.npz");
    let mut bytes = std::fs::read(&object).unwrap();
    // In the x array's payload, past the first 4 MiB chunk.
    bytes[5_000_000] ^= 0x01;
    std::fs::write(&object, &bytes).unwrap();
    for (what, extra) in runs {
        let mut cmd = ringload();
        cmd.args(args(extra)).envs(s3dlio);
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, 3, "{what}: {stderr}");
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.starts_with("ringload: "))
                .count(),
            1,
            "{what}: {stderr}"
        );
        assert!(
            stderr.contains("img_1_of_4.npz")
                && stderr.contains("byte 5000000 is")
                && stderr.contains(
                    "the store's bytes are not what `ringload generate` writes for this dataset"
                )
                && stderr.contains("run without --verify"),
            "{what}: {stderr}"
        );
    }
}

#[test]
fn verify_refuses_objects_without_dlios_names_rather_than_skipping_them() {
    // A manifest of other names: what `generate` writes for them is unknown.
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("other.txt");
    let text: String = (0..48)
        .map(|i| format!("data/retinanet/train/photo_{i:02}.jpeg 322624\n"))
        .collect();
    std::fs::write(&manifest, text).unwrap();
    let (code, _, stderr) = run(&[
        "run",
        "retinanet_b200",
        "dataset.num_files_train=48",
        "--manifest",
        manifest.to_str().unwrap(),
        "--verify",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--verify")
            && stderr.contains("DLIO name")
            && stderr.contains("photo_00.jpeg")
            && stderr.contains("run without --verify"),
        "{stderr}"
    );
}

#[test]
fn both_engines_read_a_dlio_style_dataset_written_by_numpy_into_garage() {
    let Some(g) = common::garage() else { return };
    let env = [
        ("AWS_ENDPOINT_URL", g.endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", g.key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", g.secret.as_str()),
        ("AWS_REGION", "us-east-1"),
    ];
    // (workload, format, files, record length, stdev, batch)
    for (workload, format, files, length, stdev, batch) in [
        ("unet3d_b200", "npz", 42u64, "1000000", "300000", 7u64),
        ("retinanet_b200", "jpeg", 96, "322957", "0", 24),
    ] {
        let folder = format!("whole/{workload}");
        let written = common::python_json(
            WRITER,
            &[
                &g.endpoint,
                &g.bucket,
                &g.key,
                &g.secret,
                &format!("{folder}/train/"),
                format,
                &files.to_string(),
                length,
                stdev,
                "1",
            ],
        );
        let objects = written["objects"].as_array().unwrap();
        let sizes: Vec<u64> = objects.iter().map(|o| o[1].as_u64().unwrap()).collect();
        if format == "jpeg" {
            assert!(sizes.iter().all(|&s| s == 568 * 568), "raw 568² bytes");
        }
        let overrides = [
            format!("dataset.data_folder={folder}"),
            format!("dataset.num_files_train={files}"),
            format!("dataset.record_length_bytes={length}"),
            format!("dataset.record_length_bytes_stdev={stdev}"),
            "train.epochs=1".to_string(),
        ];
        for engine in ["uring", "baseline"] {
            let mut args = vec![
                workload, "--np", "2", "--engine", engine, "--bucket", &g.bucket,
            ];
            args.extend(overrides.iter().map(String::as_str));
            let s = run_json_env(&args, &env);
            assert_read_whole(
                &s,
                &sizes,
                batch,
                2,
                1,
                &format!("garage {workload} {engine}"),
            );
        }
        // numpy's bytes are not the ones `ringload generate` writes: --verify fails the run on
        // the first object it checks, saying so in one line.
        for engine in ["uring", "baseline"] {
            let mut cmd = ringload();
            cmd.args(["run", workload, "--np", "2", "--engine", engine])
                .args(["--bucket", &g.bucket, "--verify", "--retries", "0"])
                .args(&overrides)
                .envs(env);
            let (code, _, stderr) = output(&mut cmd);
            assert_eq!(code, 3, "garage {workload} {engine} --verify: {stderr}");
            assert!(
                stderr.contains(&format!("{folder}/train/img_"))
                    && stderr.contains("the store's bytes are not what `ringload generate` writes")
                    && stderr.contains("run without --verify"),
                "garage {workload} {engine} --verify: {stderr}"
            );
        }
        if workload == "unet3d_b200" {
            // The DLIO fork's s3dlio loader against garage: a HEAD per object (DLIO sends one
            // for records of 16 MiB or more, so the run says 20 MB; the objects are as listed)
            // and every object over 1 MiB fetched as concurrent 256 KiB ranged GETs (s3dlio's
            // own variables, honoured as s3dlio honours them).
            let mut args = vec![
                workload,
                "--np",
                "2",
                "--loader",
                "dlio",
                "--bucket",
                &g.bucket,
                "storage.storage_options.prefetch_window=4",
            ];
            args.extend(overrides.iter().map(String::as_str));
            args.push("dataset.record_length_bytes=20000000");
            let mut env = env.to_vec();
            env.extend([
                ("S3DLIO_RANGE_THRESHOLD_MB", "1"),
                ("S3DLIO_CHUNK_SIZE", "262144"),
            ]);
            for engine in ["uring", "baseline"] {
                let mut args = args.clone();
                args.extend(["--engine", engine]);
                let s = run_json_env(&args, &env);
                assert_eq!(s["outcome"], "completed", "garage s3dlio loader {engine}");
                assert_eq!(s["engine"], engine);
                assert_eq!(s["errors"], 0, "{engine}");
                assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}");
                // ⌊42 ÷ 2⌋ objects per rank: 3 steps of 7 each consume them all.
                assert_eq!(
                    s["requests"], 42,
                    "{engine}: every object of both shares, once"
                );
            }
        }
    }
}

/// The 96 keys of retinanet's dataset of 96 files (DLIO's names) and their size, as `KEY SIZE`
/// lines, with a comment and a blank line; `wrong` gives object 5 one byte more.
fn retinanet_manifest(dir: &std::path::Path, name: &str, wrong: bool) -> std::path::PathBuf {
    let mut text = String::from("# key size\n\n");
    // In reverse: the manifest's order is not the run's, key order is.
    for i in (0..96).rev() {
        let size = if wrong && i == 5 { 322_625 } else { 322_624 };
        text.push_str(&format!(
            "data/retinanet/train/img_{i:02}_of_96.jpeg {size}\n"
        ));
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_manifest_replaces_the_listing_for_both_engines() {
    let served = common::spawn_serve(&["retinanet_b200", "dataset.num_files_train=96"]);
    let tmp = tempfile::tempdir().unwrap();
    let good = retinanet_manifest(tmp.path(), "good.txt", false);
    let wrong = retinanet_manifest(tmp.path(), "wrong.txt", true);
    let base = |manifest: &std::path::Path, engine: &'static str| -> Vec<String> {
        [
            "retinanet_b200",
            "dataset.num_files_train=96",
            "train.epochs=1",
            "--np",
            "1",
            "--engine",
            engine,
            "--endpoint",
            &served.endpoint,
            "--bucket",
            "ringload",
            "--manifest",
            manifest.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    for engine in ["uring", "baseline"] {
        let args = base(&good, engine);
        let s = run_json_env(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        assert_eq!(s["outcome"], "completed", "{engine}");
        assert_eq!(s["requests"], 96, "{engine}: one GET per object");
        assert_eq!(s["bytes_read"], 96 * 322_624, "{engine}");
        assert_eq!(s["errors"], 0, "{engine}");
        // The manifest's sizes are the ones checked: one byte off fails the run.
        let mut cmd = ringload();
        cmd.arg("run")
            .args(base(&wrong, engine))
            .args(["--retries", "0"]);
        let (code, _, stderr) = output(&mut cmd);
        assert!(code != 0 && code != 1, "{engine}: {code} {stderr}");
        assert!(
            stderr.contains("img_05_of_96.jpeg")
                && stderr.contains("Content-Length")
                && stderr.contains("the catalog says 322625"),
            "{engine}: {stderr}"
        );
    }
    // Parquet needs its footers, a checkpoint writes its own objects: refused in one line.
    let good_path = good.to_str().unwrap();
    for (command, workload, why) in [
        ("run", "flux_small", "footer"),
        ("plan", "flux_small", "footer"),
        ("run", "llama3_8b", "writes its own objects"),
    ] {
        let (code, _, stderr) = run(&[command, workload, "--manifest", good_path]);
        assert_eq!(code, 2, "{command} {workload}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--manifest") && stderr.contains(why) && !stderr.contains("  "),
            "{stderr}"
        );
    }
    // `plan` takes the manifest's catalog too.
    let (code, stdout, stderr) = run(&[
        "plan",
        "retinanet_b200",
        "dataset.num_files_train=96",
        "--manifest",
        wrong.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("--manifest") && stdout.contains("322625"),
        "{stdout}"
    );
}

#[test]
fn retinanets_full_listing_stays_within_the_budget_the_plan_states() {
    // All 1,170,301 objects listed from the embedded virtual store (1,171 LIST pages), then two
    // steps: the budget counts the listing's peak, and the process's peak RSS (from before the
    // listing: `peak_rss_since_setup`) stays inside it.
    let (code, stdout, stderr) = run(&[
        "run",
        "retinanet_b200",
        "train.total_training_steps=2",
        "train.epochs=1",
        "--np",
        "1",
        "--json",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["outcome"], "completed");
    assert_eq!(s["requests"], 48, "two steps of 24 whole objects");
    assert_eq!(s["peak_rss_since_setup"], true);
    let peak = s["peak_rss_bytes"].as_u64().unwrap();
    let budget = s["memory_budget_bytes"].as_u64().unwrap();
    assert!(
        peak <= budget,
        "peak RSS {peak} over the budget {budget}: {stderr}"
    );
    assert!(!stderr.contains("exceeded the memory budget"), "{stderr}");
}

#[test]
fn a_zero_byte_object_is_planned_and_read_by_both_engines_and_loaders() {
    // retinanet's 48 DLIO names as real files, one of them empty.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ringload/data/retinanet/train");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..48 {
        let size = if i == 3 { 0 } else { 322_624 };
        std::fs::write(dir.join(format!("img_{i:02}_of_48.jpeg")), vec![7u8; size]).unwrap();
    }
    let served = common::spawn_serve(&["--dir", root.path().to_str().unwrap()]);
    for engine in ["uring", "baseline"] {
        for loader in ["ringload", "dlio"] {
            let s = run_json_env(
                &[
                    "retinanet_b200",
                    "dataset.num_files_train=48",
                    "train.epochs=1",
                    "--np",
                    "1",
                    "--engine",
                    engine,
                    "--loader",
                    loader,
                    "--endpoint",
                    &served.endpoint,
                    "--bucket",
                    "ringload",
                ],
                &[],
            );
            let what = format!("{engine} {loader}");
            assert_eq!(s["outcome"], "completed", "{what}");
            assert_eq!(s["errors"], 0, "{what}");
            assert_eq!(s["bytes_read"], 47 * 322_624, "{what}");
        }
    }
}

/// Requests counted as the store sees them (issue 35): the dlio loader's HEAD and ranged GETs
/// per object (40 MB objects: a HEAD, then 4 MiB chunks) and the set-up's LISTs, on both
/// engines, equal the embedded server's own log of what it answered, kind by kind; the report
/// names them.
#[test]
fn requests_by_kind_match_the_servers_own_log_on_both_engines() {
    let overrides = [
        "dataset.num_files_train=4",
        "dataset.record_length_bytes=40000000",
        "dataset.record_length_bytes_stdev=0",
        "reader.batch_size=1",
        "train.epochs=1",
    ];
    for engine in ["uring", "baseline"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let mut serve_args = vec!["unet3d_b200", "--request-log", log.to_str().unwrap()];
        serve_args.extend(overrides);
        let served = common::spawn_serve(&serve_args);
        let mut args = vec![
            "unet3d_b200",
            "--np",
            "1",
            "--engine",
            engine,
            "--loader",
            "dlio",
        ];
        args.extend(["--endpoint", &served.endpoint, "--bucket", "ringload"]);
        args.extend(overrides);
        let s = run_json_env(&args, &[]);
        let kinds = &s["requests_by_kind"];
        assert_eq!(s["requests"], 4, "{engine}: {s}");
        assert_eq!(kinds["head"], 4, "{engine}: {kinds}");
        // ⌈40,000,000 ÷ 4 MiB⌉ = 10 chunks per object.
        assert_eq!(kinds["ranged_get"], 40, "{engine}: {kinds}");
        assert_eq!(
            common::summed_kinds(&[kinds], 0),
            common::logged_kinds(&log),
            "{engine}"
        );
        // The report says it in words.
        let mut text_args = vec!["run"];
        text_args.extend(&args);
        let (code, stdout, stderr) = common::run(&text_args);
        assert_eq!(code, 0, "{stderr}");
        assert!(
            stdout.contains("4 objects (4 HEADs, 40 ranged GETs"),
            "{engine}: {stdout}"
        );
    }
}
