//! Checkpoints during training (`workflow.checkpoint: True` with `workflow.train: True`): a tiny
//! unet3d run against the embedded server's store (the virtual dataset with a sink for the
//! checkpoint folder), in-process so its request log and its listing can be read: the objects
//! written between the steps, their names and sizes, through both engines' write path; the
//! summary's fields; the step mode; `compare` on hand-built DLIO training summaries that carry
//! checkpoint fields. Seconds, not minutes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::TINY_CHECKPOINTING as TINY;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio-output")
}

/// The embedded server's store for unet3d_h100 with `overrides`, on a free port, logging its
/// requests to `log`.
fn server(overrides: &[&str], log: &Path) -> ringload::server::Server {
    let workload = ringload::cli::WorkloadArgs {
        workload: Some("unet3d_h100".into()),
        overrides: overrides.iter().map(|o| o.to_string()).collect(),
        files: None,
    };
    let store = ringload::commands::serve_store(&workload, None, false).unwrap();
    let server = ringload::server::Server::start(common::server_config(store)).unwrap();
    server.log_requests(log).unwrap();
    server
}

/// `ringload run unet3d_h100 OVERRIDES --np 2 --endpoint URL --engine ENGINE --json`.
fn run(overrides: &[&str], endpoint: &str, engine: &str) -> Value {
    let mut args = vec!["run", "unet3d_h100"];
    args.extend_from_slice(overrides);
    args.extend([
        "--np",
        "2",
        "--endpoint",
        endpoint,
        "--engine",
        engine,
        "--json",
    ]);
    common::run_json(&args)
}

/// The objects in the server's bucket under each save folder of `epochs_steps`
/// (`checkpoints/unet3d/global_epoch{E}_step{K}/`; the client's LIST has a `/` delimiter):
/// (key, size).
fn listed(endpoint: &str, epochs_steps: &[(u32, u64)]) -> Vec<(String, u64)> {
    let target = ringload::s3::target::Target::simple(
        ringload::s3::target::Endpoint::parse(endpoint).unwrap(),
        "ringload",
        None,
    );
    let bucket = ringload::s3::Bucket::new(target, ringload::s3::RetryPolicy::default()).unwrap();
    let mut objects: Vec<(String, u64)> = epochs_steps
        .iter()
        .flat_map(|(e, k)| {
            bucket
                .list(&format!("checkpoints/unet3d/global_epoch{e}_step{k}/"))
                .unwrap()
        })
        .map(|o| (o.key, o.size_bytes))
        .collect();
    objects.sort();
    objects
}

/// The requests of the log that wrote under the checkpoint folder: (method, key).
fn writes(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["method"] != "GET" && r["method"] != "HEAD")
        .map(|r| {
            assert_eq!(r["status"], 200, "{r}");
            let path = r["path"].as_str().unwrap();
            (
                r["method"].as_str().unwrap().to_string(),
                path.trim_start_matches("/ringload/").to_string(),
            )
        })
        .collect()
}

#[test]
fn epoch_mode_writes_dlios_objects_between_epochs_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["baseline", "uring"] {
        let log = dir.path().join(format!("{engine}.jsonl"));
        let server = server(TINY, &log);
        let endpoint = server.endpoint_url();
        let summary = run(TINY, &endpoint, engine);
        let keys = [
            "checkpoints/unet3d/global_epoch2_step3/model_states-0.pt",
            "checkpoints/unet3d/global_epoch3_step3/model_states-0.pt",
        ];
        // Rank 0 only, 10,240 B each (model.model_size_bytes' default; model.model_size is
        // not read), folder step = steps + 1 (DLIO's overall_step after the loop).
        assert_eq!(
            listed(&endpoint, &[(1, 3), (2, 3), (3, 3)]),
            keys.iter()
                .map(|k| (k.to_string(), 10240))
                .collect::<Vec<_>>(),
            "{engine}"
        );
        // Each through the write path: an upload, its part, its completion, in epoch order.
        let w = writes(&log);
        let expected: Vec<(String, String)> = keys
            .iter()
            .flat_map(|k| {
                ["POST", "PUT", "POST"]
                    .iter()
                    .map(move |m| (m.to_string(), k.to_string()))
            })
            .collect();
        assert_eq!(w, expected, "{engine}");
        server.shutdown();

        let c = &summary["checkpoints"];
        assert_eq!(c["schedule"]["mode"], "epochs", "{engine}");
        assert_eq!(c["checkpoint_size_GB"], 9.5367431640625e-06);
        assert_eq!(
            (c["objects_per_save"].as_u64(), c["bytes_per_save"].as_u64()),
            (Some(1), Some(10240))
        );
        let saves = c["saves"].as_array().unwrap();
        assert_eq!(saves.len(), 2, "{engine}");
        for (save, (epoch, key)) in saves.iter().zip([(2, keys[0]), (3, keys[1])]) {
            assert_eq!(save["epoch"], epoch);
            assert_eq!(save["after_step"], 2);
            assert_eq!(save["keys"][0], key);
            assert_eq!(save["bytes"], 10240);
            let d = save["rank0_duration_s"].as_f64().unwrap();
            let rate = save["rank0_gib_per_second"].as_f64().unwrap();
            assert!(
                d > 0.0 && (rate * d - 9.5367431640625e-06).abs() < 1e-12,
                "{save}"
            );
        }
        let m = &c["metric"];
        for k in [
            "save_checkpoint_io_mean_GB_per_second",
            "save_checkpoint_io_stdev_GB_per_second",
            "save_checkpoint_duration_mean_seconds",
            "save_checkpoint_duration_stdev_seconds",
        ] {
            assert!(m[k].is_number(), "{k}: {m}");
        }
        // The training figures as ever: the saves are outside AU.
        assert!(summary["au_percent"].is_number(), "{engine}");
        assert_eq!(
            summary["metric"]["train_au_percentage"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}

#[test]
fn step_mode_saves_after_every_s_steps_and_the_results_leaf_carries_dlios_keys() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("steps.jsonl");
    // 8 objects, batch 1 → 4 steps per rank; a save after steps 2 and 4 of each of 2 epochs.
    let overrides = [
        "workflow.checkpoint=True",
        "metric.au=0.01",
        "dataset.num_files_train=8",
        "dataset.record_length_bytes=65536",
        "dataset.record_length_bytes_stdev=0",
        "reader.batch_size=1",
        "reader.read_threads=1",
        "train.epochs=2",
        "train.computation_time=0.01",
        "checkpoint.steps_between_checkpoints=2",
        "checkpoint.checkpoint_after_epoch=7",
    ];
    let server = server(&overrides, &log);
    let endpoint = server.endpoint_url();
    let results = dir.path().join("results");
    let mut args = vec!["run", "unet3d_h100"];
    args.extend_from_slice(&overrides);
    args.extend([
        "--np",
        "2",
        "--endpoint",
        &endpoint,
        "--engine",
        "baseline",
        "--json",
        "--results-dir",
        results.to_str().unwrap(),
    ]);
    let summary = common::run_json(&args);
    // Step mode: every epoch, at epoch-local steps 2 and 4 (the last leaves an empty block);
    // the folder's step is the epoch-local step.
    let at = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 4)];
    let names: Vec<String> = listed(&endpoint, &at).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        names,
        [
            "checkpoints/unet3d/global_epoch1_step2/model_states-0.pt",
            "checkpoints/unet3d/global_epoch1_step4/model_states-0.pt",
            "checkpoints/unet3d/global_epoch2_step2/model_states-0.pt",
            "checkpoints/unet3d/global_epoch2_step4/model_states-0.pt",
        ]
    );
    // Each block's first step is excluded as an epoch's: AU is defined (blocks of 2 steps).
    assert!(summary["au_percent"].is_number(), "{summary}");
    server.shutdown();
    assert_eq!(summary["checkpoints"]["schedule"]["mode"], "steps");
    assert_eq!(summary["checkpoints"]["saves"].as_array().unwrap().len(), 4);

    // The leaf's summary.json: DLIO's checkpoint keys beside the train_* ones.
    let leaf = common::walk(&results)
        .into_iter()
        .find(|p| p.ends_with("summary.json") && !p.ends_with("ringload_summary.json"))
        .expect("a leaf summary.json");
    let dlio: Value = serde_json::from_str(&std::fs::read_to_string(&leaf).unwrap()).unwrap();
    let keys: Vec<&str> = dlio["metric"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "save_checkpoint_io_mean_GB_per_second",
        "save_checkpoint_io_stdev_GB_per_second",
        "save_checkpoint_duration_mean_seconds",
        "save_checkpoint_duration_stdev_seconds",
        "checkpoint_size_GB",
        "train_au_percentage",
        "train_au_mean_percentage",
        "train_io_mean_MB_per_second",
    ] {
        assert!(keys.contains(&k), "{k}: {keys:?}");
    }
    assert_eq!(keys.len(), 14, "{keys:?}");
    // The per-epoch stats carry each save as DLIO does: save_ckpt1, save_ckpt2.
    let stats = leaf.with_file_name("0_per_epoch_stats.json");
    let stats: Value = serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap();
    assert!(stats["1"]["save_ckpt2"]["duration"].is_number(), "{stats}");
    // And the blocks the saves cut, as DLIO's: block1 (steps 1-2), save_ckpt1, block2 (steps
    // 3-4), save_ckpt2, block3 (empty), each block starting where the save before it ended.
    for b in ["block1", "block2", "block3"] {
        assert!(stats["1"][b]["start"].is_string(), "{b}: {stats}");
    }
    assert!(stats["1"].get("block4").is_none(), "{stats}");
    assert_eq!(
        stats["1"]["block2"]["start"],
        stats["1"]["save_ckpt1"]["end"]
    );
    assert_eq!(
        stats["1"]["block3"]["start"],
        stats["1"]["save_ckpt2"]["end"]
    );
    let output = leaf.with_file_name("0_output.json");
    let output: Value = serde_json::from_str(&std::fs::read_to_string(output).unwrap()).unwrap();
    let steps_of = |b: &str| output["1"]["load"][b].as_array().map(Vec::len);
    assert_eq!(
        (steps_of("block1"), steps_of("block2"), steps_of("block3")),
        (Some(2), Some(2), Some(0)),
        "{output}"
    );
    assert!(output["1"]["au"]["block2"].is_number(), "{output}");
}

#[test]
fn bad_checkpoint_schedules_are_refused_in_one_line() {
    let (code, _, stderr) = common::run(&[
        "plan",
        "unet3d_h100",
        "workflow.checkpoint=True",
        "checkpoint.checkpoint_after_epoch=0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("checkpoint.checkpoint_after_epoch") && stderr.contains("1 or more"),
        "{stderr}"
    );
    // The plan says when and what.
    let (code, stdout, stderr) = common::run(&[
        "plan",
        "unet3d_h100",
        "workflow.checkpoint=True",
        "--np",
        "8",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout
            .contains("checkpoints/unet3d/global_epoch5_step4/model_states-0.pt (10240 B, rank 0)"),
        "{stdout}"
    );
}

#[test]
fn compare_reads_dlio_training_summaries_with_checkpoint_fields() {
    let compare = |a: &str, b: &str| -> Value {
        let (code, stdout, stderr) = common::run(&[
            "compare",
            fixtures().join(a).to_str().unwrap(),
            fixtures().join(b).to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str(&stdout).unwrap()
    };
    let c = compare("unet3d-ckpt-np2", "unet3d-ckpt-nosave-np2");
    // Training figures, matched at NP 2, RT 2, the checkpoint's beside them.
    let line = &c["lines"][0];
    let saved = &line["entries"][0];
    assert_eq!(saved["au_percent"], 91.66);
    assert_eq!(saved["checkpoint"]["duration_mean_s"], 0.004512);
    assert_eq!(
        saved["checkpoint"]["checkpoint_size_gib"],
        9.5367431640625e-06
    );
    let none = &line["entries"][1];
    assert!(none["au_percent"].is_number(), "{none}");
    assert!(none["checkpoint"]["duration_mean_s"].is_null(), "{none}");
    assert!(
        c["notes"]
            .to_string()
            .contains("no save (DLIO reports the size only)"),
        "{}",
        c["notes"]
    );
    // The markdown table shows them beside the training columns.
    let (code, stdout, _) = common::run(&[
        "compare",
        fixtures().join("unet3d-ckpt-np2").to_str().unwrap(),
        fixtures().join("unet3d-tiny-np2").to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("checkpoint save s A: dlio"), "{stdout}");
}
