//! The file engine on real file systems made in the test: the machine's own disk (a folder in
//! the target directory) and xfs on a loop device from a sparse file; ramfs (refused under
//! `O_DIRECT`) and tmpfs (named as memory). Both DLIO layouts — Parquet row groups
//! (flux_small) and whole objects (a small unet3d's npz, a small retinanet's jpeg) — are
//! generated with `ringload generate`, read back by numpy and pyarrow, and run with `O_DIRECT`
//! and `--direct off`: every planned byte read (`--verify`), the steps the plan computes. A
//! checkpoint is written and restored with `--verify`, its files' sizes checked against the
//! plan. Faults: a file missing, shorter than planned, unreadable, and a full disk under a
//! checkpoint: one line each, exit 3, nothing half written left.
//!
//! Mounting needs root, `mount`, `losetup` and mkfs.xfs (xfsprogs, installed by
//! scripts/install-test-deps); without them the tests that need them skip with a line, unless
//! RINGLOAD_REQUIRE_MOUNTS=1 (scripts/test sets it), which makes them fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{python_json, run};

/// A file system mounted for a test, unmounted when dropped.
struct Mounted {
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Lazily when something still holds it: detached now, gone when let go.
        let quiet = || std::process::Stdio::null();
        let unmounted = Command::new("umount")
            .arg(&self.dir)
            .stderr(quiet())
            .status();
        if !unmounted.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Skips (with a line) or, under RINGLOAD_REQUIRE_MOUNTS=1, fails.
fn unavailable(why: &str) -> Option<Mounted> {
    if std::env::var("RINGLOAD_REQUIRE_MOUNTS").is_ok_and(|v| v == "1") {
        panic!("RINGLOAD_REQUIRE_MOUNTS=1 but {why}");
    }
    eprintln!("skipped: {why}");
    None
}

fn sh(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A fresh file system of `kind` in a folder of the target directory: `xfs` or `ext4` on a
/// loop device from a sparse file of `mib` MiB, `ramfs` or `tmpfs`.
fn mount(kind: &str, mib: u64) -> Option<Mounted> {
    if !is_root() {
        return unavailable(&format!("mounting {kind} needs root"));
    }
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = tmp.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let made = match kind {
        "ramfs" | "tmpfs" => sh("mount", &["-t", kind, kind, d]),
        _ => {
            let image = tmp.path().join("image");
            let f = std::fs::File::create(&image).unwrap();
            f.set_len(mib << 20).unwrap();
            let i = image.to_str().unwrap();
            let mkfs = if kind == "xfs" {
                sh("mkfs.xfs", &["-q", "-f", i])
            } else {
                sh("mkfs.ext4", &["-q", "-F", i])
            };
            mkfs.and_then(|()| sh("mount", &["-o", "loop", i, d]))
        }
    };
    match made {
        Ok(()) => Some(Mounted { dir, _tmp: tmp }),
        Err(why) => unavailable(&format!("cannot mount {kind}: {why}")),
    }
}

/// The machine's own disk: a folder in the target directory.
fn disk() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// The small shapes of the three workloads: (workload, overrides).
const SHAPES: [(&str, &[&str]); 3] = [
    (
        "flux_small",
        &["dataset.num_files_train=2", "train.epochs=1"],
    ),
    (
        "unet3d_b200",
        &[
            "dataset.num_files_train=12",
            "dataset.record_length_bytes=3000000",
            "dataset.record_length_bytes_stdev=0",
            "reader.batch_size=2",
            "train.epochs=2",
        ],
    ),
    (
        "retinanet_b200",
        &[
            "dataset.num_files_train=96",
            "reader.batch_size=8",
            "train.epochs=1",
        ],
    ),
];

/// numpy's and pyarrow's view of what `generate` wrote under a folder: every npz's arrays
/// loaded, every Parquet file's rows, every jpeg's size. Prints JSON.
const READ_BACK: &str = r#"
import json, sys, glob, os
root = sys.argv[1]
out = {"npz": 0, "parquet_rows": 0, "jpeg_bytes": 0}
for path in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
    if path.endswith(".npz"):
        import numpy as np
        with np.load(path) as f:
            assert f["x"].size > 0, path
        out["npz"] += 1
    elif path.endswith(".parquet"):
        import pyarrow.parquet as pq
        out["parquet_rows"] += pq.ParquetFile(path).metadata.num_rows
    elif path.endswith(".jpeg"):
        out["jpeg_bytes"] += os.path.getsize(path)
print(json.dumps(out))
"#;

fn generate(workload: &str, overrides: &[&str], dir: &Path) {
    let mut args = vec!["generate", workload, "--output", dir.to_str().unwrap()];
    args.extend(overrides);
    let (code, _, stderr) = run(&args);
    assert_eq!(code, 0, "{stderr}");
}

/// `ringload run` with `--json`: exit code, summary, stderr.
fn run_json(args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut full = args.to_vec();
    full.push("--json");
    let (code, stdout, stderr) = run(&full);
    let summary = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (code, summary, stderr)
}

/// The plan's steps per rank for `workload` with `overrides` on `np` ranks.
fn planned_steps(workload: &str, overrides: &[&str], np: &str) -> u64 {
    let mut args = vec!["plan", workload, "--np", np, "--json"];
    args.extend(overrides);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    plan["steps_per_rank"].as_u64().unwrap()
}

/// Generates each shape under `root`, reads it back with numpy and pyarrow, and runs it with
/// `O_DIRECT` and through the page cache: every planned byte read and verified, the steps
/// the plan computes, the file system named in the summary.
fn every_shape_reads_whole(root: &Path, fs: &str) {
    for (workload, overrides) in SHAPES {
        generate(workload, overrides, root);
        let seen = python_json(READ_BACK, &[root.to_str().unwrap()]);
        match workload {
            "flux_small" => assert!(seen["parquet_rows"].as_u64().unwrap() > 0, "{seen}"),
            "unet3d_b200" => assert_eq!(seen["npz"], 12, "{seen}"),
            _ => assert!(seen["jpeg_bytes"].as_u64().unwrap() > 0, "{seen}"),
        }
        let steps = planned_steps(workload, overrides, "2");
        for direct in ["on", "off"] {
            let mut args = vec![
                "run",
                workload,
                "--np",
                "2",
                "--data-dir",
                root.to_str().unwrap(),
                "--direct",
                direct,
                "--verify",
            ];
            args.extend(overrides);
            let (code, s, stderr) = run_json(&args);
            assert!(
                code == 0 || code == 1,
                "{workload} {direct} on {fs}: {stderr}"
            );
            let what = format!("{workload} --direct {direct} on {fs}: {s}");
            assert_eq!(s["engine"], "file", "{what}");
            assert_eq!(s["bytes_read"], s["bytes_planned"], "{what}");
            assert!(s["bytes_read"].as_u64().unwrap() > 0, "{what}");
            assert_eq!(s["steps_per_rank"].as_u64().unwrap(), steps, "{what}");
            assert_eq!(s["errors"], 0, "{what}");
            assert!(s["verify"]["gets"].as_u64().unwrap() > 0, "{what}");
            let files = &s["target"]["files"];
            assert_eq!(files["fs"], fs, "{what}");
            assert_eq!(files["direct"], direct == "on", "{what}");
            if direct == "off" {
                let cache = &files["page_cache"];
                assert!(cache["file_bytes"].as_u64().unwrap() > 0, "{what}");
                assert!(
                    s["notes"].to_string().contains("--direct off:"),
                    "the cache rule's note: {what}"
                );
            } else {
                assert!(files["align_bytes"].as_u64().unwrap() >= 512, "{what}");
            }
        }
    }
}

#[test]
fn both_layouts_read_every_planned_byte_on_the_machines_disk() {
    let root = disk();
    let fs = python_json(
        "import json, subprocess, sys; print(json.dumps(subprocess.run(['stat', '-f', '-c', '%T', sys.argv[1]], capture_output=True, text=True).stdout.strip()))",
        &[root.path().to_str().unwrap()],
    );
    // stat names ext4 "ext2/ext3" (one magic number for the family).
    let fs = match fs.as_str().unwrap() {
        "ext2/ext3" => "ext4".to_string(),
        other => other.to_string(),
    };
    every_shape_reads_whole(root.path(), &fs);
}

#[test]
fn both_layouts_read_every_planned_byte_on_xfs() {
    // xfs's smallest file system is 300 MiB: a sparse image costs only what is written.
    let Some(xfs) = mount("xfs", 320) else { return };
    every_shape_reads_whole(&xfs.dir, "xfs");
}

/// A checkpoint written and restored with `--verify` under `root`, with `O_DIRECT` or not: the
/// files where DLIO puts them, each the plan's size.
fn checkpoint_round_trip(root: &Path, direct: &str) {
    let args = [
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--data-dir",
        root.to_str().unwrap(),
        "--direct",
        direct,
        "--verify",
        "checkpoint.num_checkpoints_write=1",
        "checkpoint.num_checkpoints_read=1",
    ];
    let (code, s, stderr) = run_json(&args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(s["outcome"], "completed", "{s}");
    assert_eq!(s["target"]["files"]["direct"], direct == "on", "{s}");
    let (written, read) = (
        &s["hosts"][0]["bytes_written"],
        &s["hosts"][0]["bytes_read"],
    );
    assert_eq!(written, read, "{s}");
    let (code, stdout, stderr) = run(&["plan", "llama3_tiny", "--np", "2", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let folder = root.join("checkpoints/llama3_tiny/global_epoch1_step1");
    let mut planned = 0;
    for object in plan["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap())
    {
        let path = folder.join(object["name"].as_str().unwrap());
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            size,
            object["bytes"].as_u64().unwrap(),
            "{}",
            path.display()
        );
        planned += size;
    }
    assert_eq!(written.as_u64().unwrap(), planned, "{s}");
    // A model file whose size is no multiple of the block: written whole blocks, then cut.
    assert!(planned % 4096 != 0 || direct == "off");
}

#[test]
fn a_checkpoint_is_written_and_restored_on_the_disk_and_on_xfs() {
    let root = disk();
    checkpoint_round_trip(root.path(), "on");
    checkpoint_round_trip(root.path(), "off");
    if let Some(xfs) = mount("xfs", 320) {
        checkpoint_round_trip(&xfs.dir, "on");
    }
}

#[test]
fn ramfs_is_refused_under_o_direct_and_tmpfs_named_as_memory() {
    let Some(ram) = mount("ramfs", 0) else { return };
    let (workload, overrides) = SHAPES[2];
    // ramfs has no size (statfs says 0 B free): the dataset is made on disk and copied in.
    let made = disk();
    generate(workload, overrides, made.path());
    let copy = |to: &Path| {
        sh(
            "cp",
            &[
                "-a",
                &format!("{}/.", made.path().display()),
                to.to_str().unwrap(),
            ],
        )
        .unwrap()
    };
    copy(&ram.dir);
    let mut args = vec!["run", workload, "--data-dir", ram.dir.to_str().unwrap()];
    args.extend(overrides);
    let (code, _, stderr) = run(&args);
    assert_eq!(code, 2, "{stderr}");
    let line = stderr.lines().last().unwrap();
    assert!(
        line.contains("ramfs") && line.contains("O_DIRECT") && line.contains("--direct off"),
        "{stderr}"
    );
    args.extend(["--direct", "off"]);
    let (code, _, stderr) = run(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stderr.contains("lives in memory"), "{stderr}");
    drop(ram);
    let Some(tmpfs) = mount("tmpfs", 0) else {
        return;
    };
    copy(&tmpfs.dir);
    let mut args = vec!["run", workload, "--data-dir", tmpfs.dir.to_str().unwrap()];
    args.extend(overrides);
    let (code, s, stderr) = run_json(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(s["target"]["files"]["fs"], "tmpfs", "{s}");
    assert!(
        s["notes"]
            .to_string()
            .contains("tmpfs, which lives in memory"),
        "{s}"
    );
}

/// The retinanet shape's files under `root`, named by a manifest (so a run reads exactly
/// these, missing or not): the manifest's path.
fn manifest(root: &Path, entries: &[(String, u64)]) -> PathBuf {
    let path = root.join("manifest.txt");
    let text: String = entries.iter().map(|(k, s)| format!("{k} {s}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_missing_short_or_unreadable_file_is_one_line_and_exit_3() {
    let root = disk();
    let (workload, overrides) = SHAPES[2];
    generate(workload, overrides, root.path());
    let train = "data/retinanet/train";
    let mut entries: Vec<(String, u64)> = std::fs::read_dir(root.path().join(train))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (format!("{train}/{name}"), e.metadata().unwrap().len())
        })
        .collect();
    entries.sort();
    let run_with = |entries: &[(String, u64)], extra: &[&str]| {
        let m = manifest(root.path(), entries);
        let mut args = vec![
            "run",
            workload,
            "--data-dir",
            root.path().to_str().unwrap(),
            "--manifest",
            m.to_str().unwrap(),
        ];
        args.extend(overrides);
        args.extend(extra);
        run(&args)
    };
    // Missing: the manifest names a file that is not there.
    let mut missing = entries.clone();
    missing[3].0 = format!("{train}/img_gone.jpeg");
    let (code, _, stderr) = run_with(&missing, &[]);
    assert_eq!(code, 3, "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("img_gone.jpeg") && last.contains("no such file"),
        "{stderr}"
    );
    // Shorter than planned: the manifest says more bytes than the file holds.
    let mut short = entries.clone();
    short[5].1 += 4096;
    let (code, _, stderr) = run_with(&short, &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .unwrap()
            .contains("shorter than the plan"),
        "{stderr}"
    );
    // Unreadable: a file of mode 000, read by an unprivileged user (root reads anything).
    let victim = root.path().join(&entries[7].0);
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    if !is_root() {
        let (code, _, stderr) = run_with(&entries, &[]);
        assert_eq!(code, 3, "{stderr}");
        assert!(stderr.contains("permission denied"), "{stderr}");
        return;
    }
    let m = manifest(root.path(), &entries);
    // The unprivileged user reaches the folders (its locked memory, 8 MiB by default, holds
    // this small run's buffers).
    let top = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut p = root.path().to_path_buf();
    while p.pop() && p.starts_with(top) {
        sh("chmod", &["o+x", p.to_str().unwrap()]).unwrap();
    }
    sh("chmod", &["-R", "o+rX", root.path().to_str().unwrap()]).unwrap();
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let bin = env!("CARGO_BIN_EXE_ringload");
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin])
        .args(["run", workload, "--data-dir", root.path().to_str().unwrap()])
        .args(["--manifest", m.to_str().unwrap()])
        .args(overrides)
        .current_dir(root.path());
    let (code, _, stderr) = common::output(&mut cmd);
    assert_eq!(code, 3, "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains(&entries[7].0) && last.contains("permission denied"),
        "{stderr}"
    );
}

#[test]
fn a_full_disk_under_a_checkpoint_is_one_line_and_leaves_no_half_file() {
    // 64 MiB of ext4 cannot hold llama3_tiny's 115 MiB checkpoint.
    let Some(small) = mount("ext4", 64) else {
        return;
    };
    let (code, _, stderr) = run(&[
        "run",
        "llama3_tiny",
        "--data-dir",
        small.dir.to_str().unwrap(),
        "checkpoint.num_checkpoints_write=1",
        "checkpoint.num_checkpoints_read=0",
    ]);
    assert_eq!(code, 3, "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("no space left") && last.contains("(half written) was removed"),
        "{stderr}"
    );
    let half = last
        .split("; ")
        .last()
        .unwrap()
        .trim_end_matches(" (half written) was removed");
    assert!(!Path::new(half).exists(), "{half} is left");
}

#[test]
fn checkpoints_during_training_are_files_beside_the_dataset() {
    // unet3d made tiny: a save after epochs 2 and 3.
    let tiny = common::TINY_CHECKPOINTING;
    let root = disk();
    generate("unet3d_h100", tiny, root.path());
    let mut args = vec![
        "run",
        "unet3d_h100",
        "--np",
        "2",
        "--data-dir",
        root.path().to_str().unwrap(),
    ];
    args.extend(tiny);
    let (code, s, stderr) = run_json(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(
        s["checkpoints"]["saves"].as_array().unwrap().len(),
        2,
        "{s}"
    );
    let saved: Vec<PathBuf> = common::walk(&root.path().join("checkpoints/unet3d"));
    assert_eq!(saved.len(), 2, "{saved:?}");
    for file in saved {
        let size = std::fs::metadata(&file).unwrap().len();
        assert_eq!(
            size,
            s["checkpoints"]["bytes_per_save"].as_u64().unwrap(),
            "{}",
            file.display()
        );
    }
}

#[test]
fn find_max_np_searches_a_file_system_with_the_file_engine() {
    let root = disk();
    let (workload, overrides) = SHAPES[0];
    generate(workload, overrides, root.path());
    let out = root.path().join("maxnp");
    let mut args = vec![
        "sweep",
        workload,
        "--find-max-np",
        "--runs",
        "2",
        "--np",
        "1,2",
        "--data-dir",
        root.path().to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(overrides);
    let (code, stdout, stderr) = run(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(
        stderr.contains("file-np1"),
        "every point on the file engine: {stderr}"
    );
    assert!(!stderr.contains("failed,"), "{stderr}");
    assert!(!stdout.is_empty());
}

#[test]
fn a_column_subset_is_read_chunk_by_chunk_widened_and_verified() {
    // DLRM: 2 files of two 6,144-row groups, 40 of 200 columns read (tests/dlrm.rs's shape).
    let shape = [
        "dataset.num_files_train=2",
        "dataset.num_samples_per_file=12288",
    ];
    let root = disk();
    generate("dlrm_b200", &shape, root.path());
    for direct in ["on", "off"] {
        let mut args = vec![
            "run",
            "dlrm_b200",
            "--data-dir",
            root.path().to_str().unwrap(),
            "--direct",
            direct,
            "--verify",
        ];
        args.extend(shape);
        let (code, s, stderr) = run_json(&args);
        assert!(code == 0 || code == 1, "{stderr}");
        let what = format!("--direct {direct}: {s}");
        assert_eq!(s["bytes_read"], s["bytes_planned"], "{what}");
        // One read per column chunk: 40 columns × 2 row groups × 2 files.
        assert_eq!(s["requests_by_kind"]["ranged_get"], 160, "{what}");
        assert_eq!(s["errors"], 0, "{what}");
        assert!(s["verify"]["gets"].as_u64().unwrap() > 0, "{what}");
    }
}
