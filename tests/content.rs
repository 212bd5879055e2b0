//! Content version 2's data reduction end to end: the dedupe and compression ratios asked of
//! `generate` measured on a 256 MiB object by an independent check in Python (zstandard level 1
//! over 128 KiB chunks, distinct SHA-256 digests of 4 KiB blocks); a reduced checkpoint
//! written by both engines, checked byte for byte by the embedded sink and by the restore, its
//! bytes on disk checked by the generator written again in Python (tests/py/content.py), a
//! changed byte refused; ratios below 1 refused with exit 2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload, run};
use serde_json::Value;

const RATIOS: &str = include_str!("py/ratios.py");
const CHECKER: &str = concat!(
    include_str!("py/content.py"),
    include_str!("py/checkpoint_content.py")
);

/// `ringload run ARGS --json`: exit code, summary (when JSON), stderr.
fn run_json(args: &[&str]) -> (i32, Value, String) {
    let mut cmd = ringload();
    cmd.arg("run").args(args).arg("--json");
    let (code, stdout, stderr) = output(&mut cmd);
    (
        code,
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stderr,
    )
}

#[test]
fn the_ratios_asked_are_the_ratios_an_independent_check_measures() {
    let dir = tempfile::tempdir().unwrap();
    for (r, c) in [(1, 1), (2, 1), (4, 1), (1, 2), (1, 4), (2, 2)] {
        let out = dir.path().join(format!("r{r}c{c}"));
        let (code, stdout, stderr) = run(&[
            "generate",
            "retinanet_b200",
            "--output",
            out.to_str().unwrap(),
            "--dedupe-ratio",
            &r.to_string(),
            "--compress-ratio",
            &c.to_string(),
            "dataset.num_files_train=1",
            "dataset.record_length_bytes=268435456",
            "dataset.record_length_bytes_stdev=0",
        ]);
        assert_eq!(code, 0, "R {r} C {c}: {stderr}");
        let want = if (r, c) == (1, 1) {
            "content version 2: unique, incompressible".to_string()
        } else {
            format!("content version 2: dedupe {r}:1 over 4096-byte blocks, compression {c}:1")
        };
        assert!(stdout.contains(&want), "{want}: {stdout}");
        let file = common::walk(&out).pop().expect("one object");
        let m = common::python_json(RATIOS, &[file.to_str().unwrap()]);
        assert!(m["bytes"].as_u64().unwrap() >= 256 << 20, "{m}");
        for (field, asked) in [("dedupe_ratio", r), ("compress_ratio", c)] {
            let got = m[field].as_f64().unwrap();
            let asked = asked as f64;
            assert!(
                (got - asked).abs() <= 0.1 * asked,
                "R {r} C {c}: {field} {got:.3}, asked {asked}: {m}"
            );
        }
        std::fs::remove_dir_all(&out).unwrap();
    }
}

const REDUCED: [&str; 4] = ["--dedupe-ratio", "2", "--compress-ratio", "2"];

#[test]
fn a_reduced_checkpoint_is_checked_by_the_sink_the_restore_and_python_and_a_change_refused() {
    for engine in ["uring", "baseline"] {
        // The embedded sink checks every byte written, the restore every byte read.
        let mut args = vec!["llama3_tiny", "--np", "2", "--engine", engine, "--verify"];
        args.extend(REDUCED);
        let (code, s, stderr) = run_json(&args);
        assert_eq!(code, 0, "{engine}: {stderr}");
        let sink = &s["target"]["server"]["sink"];
        assert_eq!(sink["mismatches"], 0, "{engine}: {s}");
        let per_checkpoint = s["checkpoint_bytes"].as_u64().unwrap();
        assert_eq!(sink["verified_bytes"].as_u64(), Some(2 * per_checkpoint));
        assert_eq!(s["load"]["bytes"].as_u64(), Some(2 * per_checkpoint));
        let content = &s["io_shape"]["content"];
        assert_eq!(content["version"], 2, "{s}");
        assert_eq!(content["dedupe_ratio"], 2.0, "{s}");
        assert_eq!(content["compress_ratio"], 2.0, "{s}");

        // On disk, recomputed by the Python generator with the same layout.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("ringload")).unwrap();
        let server = common::spawn_serve(&["--dir", root.path().to_str().unwrap()]);
        let against = |server: &common::ServeChild| {
            let mut args = vec!["llama3_tiny", "--np", "2", "--engine", engine];
            args.extend(["--endpoint", &server.endpoint, "--bucket", "ringload"]);
            args.iter().map(|a| a.to_string()).collect::<Vec<String>>()
        };
        let mut args = against(&server);
        args.extend(REDUCED.map(String::from));
        args.push("checkpoint.num_checkpoints_read=0".into());
        let (code, _, stderr) = run_json(&strs(&args));
        assert_eq!(code, 0, "{engine}: {stderr}");
        let report = common::python_json(
            CHECKER,
            &[
                &server.endpoint,
                "ringload",
                "k",
                "s",
                "checkpoints/",
                &serde_json::to_string(&listed(root.path())).unwrap(),
                "true",
                "[2, 4096, 2]",
            ],
        );
        for field in ["missing", "unexpected", "wrong_size", "mismatches"] {
            let n = report[field].as_array().map(Vec::len);
            assert_eq!(n, Some(0), "{engine}: {field}: {report}");
        }
        assert!(report["ranges_checked"].as_u64().unwrap() > 0, "{report}");
        // The same bytes read as unreduced content are wrong: the layout matters.
        let mut args = against(&server);
        args.extend(
            [
                "--verify",
                "checkpoint.num_checkpoints_write=0",
                "checkpoint.num_checkpoints_read=1",
            ]
            .map(String::from),
        );
        let (code, _, stderr) = run_json(&strs(&args));
        assert_ne!(code, 0, "{engine}: read as unreduced: {stderr}");

        // A byte changed on every try, with no checksum to catch it: the sink's content
        // check refuses it, naming the offset.
        let mut sink = vec![
            "--sink",
            "--verify",
            "--faults",
            "flip-upload=1000@part/every=1",
        ];
        sink.extend(REDUCED);
        let server = common::spawn_serve(&sink);
        let mut args = against(&server);
        args.extend(["--checksum", "none", "checkpoint.num_checkpoints_read=0"].map(String::from));
        args.extend(REDUCED.map(String::from));
        let (code, _, stderr) = run_json(&strs(&args));
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(
            stderr.contains("BadDigest") && stderr.contains("offset"),
            "{engine}: {stderr}"
        );
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The objects under `root`/ringload, by bucket-relative key and size.
fn listed(root: &std::path::Path) -> Vec<(String, u64)> {
    let bucket = root.join("ringload");
    let mut out: Vec<(String, u64)> = common::walk(&bucket)
        .into_iter()
        .map(|p| {
            let key = p
                .strip_prefix(&bucket)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            (key, std::fs::metadata(&p).unwrap().len())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_reduced_whole_object_dataset_is_verified_with_its_ratios_and_refused_without() {
    let tmp = tempfile::tempdir().unwrap();
    let overrides = [
        "dataset.num_files_train=4",
        "dataset.record_length_bytes=3000000",
        "dataset.record_length_bytes_stdev=0",
        "reader.batch_size=2",
        "train.epochs=1",
    ];
    let out = tmp.path().join("ringload");
    let mut generate = vec!["generate", "unet3d_b200", "--output", out.to_str().unwrap()];
    generate.extend(overrides);
    generate.extend(REDUCED);
    let (code, _, stderr) = run(&generate);
    assert_eq!(code, 0, "{stderr}");
    let server = common::spawn_serve(&["--dir", tmp.path().to_str().unwrap()]);
    for (reduced, want) in [(true, 0), (false, 3)] {
        let mut args = vec![
            "run",
            "unet3d_b200",
            "--np",
            "1",
            "--verify",
            "--retries",
            "0",
        ];
        args.extend(["--endpoint", &server.endpoint, "--bucket", "ringload"]);
        args.extend(overrides);
        if reduced {
            args.extend(REDUCED);
        }
        let (code, _, stderr) = run(&args);
        assert!(
            code == want || (want == 0 && code == 1),
            "reduced {reduced}: {stderr}"
        );
        if want == 3 {
            assert!(stderr.contains("content version 2"), "{stderr}");
        }
    }
    // Parquet's --verify reads footer hashes: the ratios would be ignored, so they are refused.
    let (code, _, stderr) = run(&["run", "flux_small", "--dedupe-ratio", "2"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--dedupe-ratio: flux_small reads Parquet"),
        "{stderr}"
    );
}

#[test]
fn the_python_layout_rounds_halves_up_as_ringloads() {
    // The same numbers src/content/mod.rs's `halves_round_up_as_readme_says` checks.
    let script = concat!(
        include_str!("py/content.py"),
        "import json\nprint(json.dumps([shape_of(1.25, 1536, 1), shape_of(1, 4096, 65.536), \
         shape_of(2.5, 3072, 1)]))\n"
    );
    let got = common::python_json(script, &[]);
    assert_eq!(
        got,
        serde_json::json!([
            [1536, 1536, 682, 853],
            [4096, 63, 256, 256],
            [3072, 3072, 341, 853]
        ]),
    );
}

#[test]
fn bad_ratios_and_ratio_flags_where_nothing_is_generated_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    for args in [
        vec!["run", "llama3_tiny", "--dedupe-ratio", "0.5"],
        vec!["plan", "llama3_tiny", "--compress-ratio", "0"],
        vec![
            "generate",
            "retinanet_b200",
            "--output",
            out,
            "--compress-ratio",
            "0.9",
        ],
        vec!["serve", "--sink", "--dedupe-ratio", "0.5"],
        vec!["serve", "--dir", out, "--dedupe-ratio", "2"],
        vec!["serve", "--sink", "--zeros", "--compress-ratio", "2"],
        vec!["run", "llama3_tiny", "--dedupe-block", "1000"],
    ] {
        let (code, _, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        let flags = ["--dedupe-ratio", "--dedupe-block", "--compress-ratio"];
        let flag = args.iter().find(|a| flags.contains(a)).unwrap();
        assert!(
            stderr.lines().count() == 1 && stderr.contains(flag),
            "{args:?}: {stderr}"
        );
    }
}
