//! Several client processes under Open MPI's `mpirun`, on this host, against one separately
//! started `ringload serve`: the same plan, bytes and GET lists as one process with the same
//! NP; ranks split over the processes; a host over its memory budget stops every process with
//! exit 2; a process killed mid-run ends the job promptly. Built only with the `mpi` feature
//! (`scripts/test` runs it after the default build's tests).
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use ringload::server::Server;

fn server() -> Server {
    Server::start(common::server_config(common::virtual_flux(8))).unwrap()
}

/// `mpirun -np N` of ringload with `args` (MPI's own environment left alone).
fn mpirun(processes: usize, args: &[&str]) -> Command {
    let mut command = Command::new("mpirun");
    command
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(processes.to_string())
        .arg(env!("CARGO_BIN_EXE_ringload"))
        .args(args);
    for name in ["AWS_ENDPOINT_URL", "AWS_CA_BUNDLE", "AWS_PROFILE"] {
        command.env_remove(name);
    }
    command
}

/// `run flux_small` against `url` with `extra`, `--output out` last (the tests find the
/// processes by it).
fn run_args<'a>(url: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "flux_small",
        "--files",
        "8",
        "--endpoint",
        url,
        "--bucket",
        "ringload",
    ];
    args.extend(extra);
    args.extend(["--output", out]);
    args
}

/// requests.csv's rows, without the timings: (rank, epoch, reader, get, key, offset, len).
fn gets(dir: &std::path::Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("requests.csv")).unwrap();
    let mut rows: Vec<Vec<String>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(7).map(str::to_string).collect())
        .collect();
    rows.sort();
    rows
}

fn summary(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn two_and_three_processes_read_what_one_process_reads() {
    let server = server();
    let url = server.endpoint_url();
    let dir = tempfile::tempdir().unwrap();
    for (processes, np) in [(2usize, None), (3, None), (2, Some("5"))] {
        let np_text = np.map_or(processes.to_string(), str::to_string);
        let single = dir.path().join(format!("single-{processes}-{np_text}"));
        let many = dir.path().join(format!("mpi-{processes}-{np_text}"));
        let (single_s, many_s) = (single.display().to_string(), many.display().to_string());
        let (code, _, stderr) = common::output(common::ringload().args(run_args(
            &url,
            &single_s,
            &["--np", &np_text, "--computation-time", "0.01"],
        )));
        assert!(code == 0 || code == 1, "{stderr}");
        let mut extra: Vec<&str> = np.map_or(vec![], |n| vec!["--np", n]);
        extra.extend(["--computation-time", "0.01"]);
        let out = mpirun(processes, &run_args(&url, &many_s, &extra))
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        assert!(
            code == 0 || code == 1,
            "{processes} processes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (one, all) = (summary(&single), summary(&many));
        assert_eq!(all["np"], one["np"], "NP is the total over the processes");
        assert_eq!(all["num_accelerators"], one["np"]);
        assert_eq!(all["num_hosts"], 1, "one host name");
        assert_eq!(all["bytes_read"], one["bytes_read"]);
        assert_eq!(all["bytes_read"], all["bytes_planned"]);
        assert_eq!(all["requests"], one["requests"]);
        assert_eq!(
            gets(&many),
            gets(&single),
            "{processes} processes: the same GETs"
        );
        let hosts = all["hosts"].as_array().unwrap();
        assert_eq!(hosts.len(), processes);
        let split: Vec<usize> = hosts
            .iter()
            .map(|h| h["ranks"].as_array().unwrap().len())
            .collect();
        if np == Some("5") {
            assert_eq!(split, vec![3, 2]);
        } else {
            assert!(split.iter().all(|&n| n == 1), "{split:?}");
        }
        let bytes: u64 = hosts
            .iter()
            .map(|h| h["bytes_read"].as_u64().unwrap())
            .sum();
        assert_eq!(bytes, all["bytes_read"].as_u64().unwrap());
    }
}

#[test]
fn one_host_over_its_budget_stops_every_process_with_exit_2() {
    let server = server();
    let url = server.endpoint_url();
    let bin = env!("CARGO_BIN_EXE_ringload");
    let common_args = [
        "run",
        "flux_small",
        "--files",
        "8",
        "--endpoint",
        &url,
        "--bucket",
        "ringload",
    ];
    // mpirun's `:` syntax: the second process gets a budget its share cannot fit.
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "1", bin])
        .args(common_args)
        .args([":", "-np", "1", bin])
        .args(common_args)
        .args(["--memory-budget", "10MiB"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("(process 1): memory budget"), "{stderr}");
    assert!(stderr.contains("--memory-budget"), "{stderr}");
}

#[test]
fn a_process_killed_mid_run_ends_the_job_promptly() {
    let server = server();
    let url = server.endpoint_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let mut job = mpirun(
        2,
        &run_args(
            &url,
            &out,
            &["--computation-time", "0.05", "train.epochs=100"],
        ),
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // Once both processes are stepping, kill one.
    std::thread::sleep(Duration::from_secs(3));
    let pids = Command::new("pgrep")
        .args(["-f", &format!("{out}$")])
        .output()
        .unwrap();
    let pids: Vec<String> = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(pids.len() >= 2, "both processes run: {pids:?}");
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &pids[0]])
        .status()
        .unwrap();
    let deadline = killed + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not end after a process was killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    // No process of the job is left waiting at a barrier: each is gone within seconds.
    let gone = Instant::now() + Duration::from_secs(15);
    loop {
        let left = Command::new("pgrep")
            .args(["-f", &format!("{out}$")])
            .output()
            .unwrap();
        if left.stdout.is_empty() {
            break;
        }
        assert!(
            Instant::now() < gone,
            "processes left: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---- checkpoints ----------------------------------------------------------------------------

/// A `ringload serve --dir` child with bucket `ringload`, and its root.
fn dir_server(extra: &[&str]) -> (tempfile::TempDir, common::ServeChild) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("ringload")).unwrap();
    let mut args = vec!["--dir", root.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = common::spawn_serve(&args);
    (root, server)
}

/// `run llama3_tiny --np 2` against `url` into `out`, with `extra`.
fn checkpoint_args<'a>(url: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "llama3_tiny",
        "--np",
        "2",
        "--endpoint",
        url,
        "--bucket",
        "ringload",
    ];
    args.extend(extra);
    args.extend(["--output", out]);
    args
}

/// The plan of llama3_tiny at NP 2: its folder and each rank's objects (name, bytes).
fn checkpoint_plan() -> (String, Vec<Vec<(String, u64)>>) {
    let (code, stdout, stderr) =
        common::output(common::ringload().args(["plan", "llama3_tiny", "--np", "2", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let folder = plan["settings"]["folder"].as_str().unwrap().to_string();
    let ranks = plan["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rank| {
            rank.as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    (
                        o["name"].as_str().unwrap().to_string(),
                        o["bytes"].as_u64().unwrap(),
                    )
                })
                .collect()
        })
        .collect();
    (folder, ranks)
}

#[test]
fn a_checkpoint_run_over_two_processes_writes_what_one_process_writes() {
    let (root_one, one) = dir_server(&[]);
    let (root_many, many) = dir_server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (single, all) = (dir.path().join("single"), dir.path().join("mpi"));
    let (single_s, all_s) = (single.display().to_string(), all.display().to_string());
    let (code, _, stderr) =
        common::output(common::ringload().args(checkpoint_args(&one.endpoint, &single_s, &[])));
    assert_eq!(code, 0, "one process: {stderr}");
    let out = mpirun(2, &checkpoint_args(&many.endpoint, &all_s, &[]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "two processes: {stderr}");
    // One report for the job, from process 0.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("checkpoint on 2 ranks").count(),
        1,
        "{stdout}"
    );
    let (s, s1) = (summary(&all), summary(&single));
    assert_eq!(s["kind"], "checkpoint");
    assert_eq!(s["np"], 2);
    assert_eq!(s["num_hosts"], 2, "one volume per process");
    assert_eq!(s["failure"], serde_json::Value::Null);
    let phase_rows = |phase: &str| {
        s["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["phase"] == phase)
            .count() as u64
    };
    let (writes, reads) = (phase_rows("save"), phase_rows("load"));
    assert!(writes > 0 && reads > 0, "{s}");
    assert_eq!(
        s["checkpoints"].as_array().unwrap().len(),
        s1["checkpoints"].as_array().unwrap().len()
    );
    assert!(
        s["metric"]["save_checkpoint_io_mean_GB_per_second"].is_number(),
        "{s}"
    );
    assert!(
        s["metric"]["load_checkpoint_io_mean_GB_per_second"].is_number(),
        "{s}"
    );
    for phase in ["save", "load"] {
        assert_eq!(s[phase]["bytes"], s1[phase]["bytes"], "{phase}");
        assert_eq!(s[phase]["requests"], s1[phase]["requests"], "{phase}");
        assert!(
            s[phase]["latency_ms"]["count"].as_u64().unwrap() > 0,
            "{phase}: {s}"
        );
    }
    // Each host's bytes are its own ranks' objects (uneven: the model's writer is rank 0).
    let (folder, ranks) = checkpoint_plan();
    let hosts = s["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    for (process, host) in hosts.iter().enumerate() {
        let mine: Vec<u64> = host["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect();
        assert_eq!(mine, vec![process as u64], "one rank per process");
        let per_checkpoint: u64 = ranks[process].iter().map(|o| o.1).sum();
        assert_eq!(host["bytes_per_checkpoint"], per_checkpoint, "{host}");
        assert_eq!(host["bytes_written"], per_checkpoint * writes, "{host}");
        assert_eq!(host["bytes_read"], per_checkpoint * reads, "{host}");
    }
    // Every object on disk with the plan's size, and the bytes one process writes.
    for step in 1..=writes {
        for (name, bytes) in ranks.iter().flatten() {
            let key = format!("ringload/{folder}/global_epoch1_step{step}/{name}");
            let (a, b) = (root_many.path().join(&key), root_one.path().join(&key));
            let written = std::fs::read(&a).unwrap_or_else(|e| panic!("{}: {e}", a.display()));
            assert_eq!(written.len() as u64, *bytes, "{key}");
            assert!(
                written == std::fs::read(&b).unwrap(),
                "{key}: the same bytes as one process"
            );
        }
    }
}

#[test]
fn a_checkpoint_refusal_or_failure_ends_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    // Restores with nothing written: process 0's LIST is every process's refusal.
    let (_root, server) = dir_server(&[]);
    let args = checkpoint_args(
        &server.endpoint,
        &out,
        &["checkpoint.num_checkpoints_write=0"],
    );
    let job = mpirun(2, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&job.stderr);
    assert_eq!(job.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("finds 0 checkpoints").count(),
        1,
        "one line for the job: {stderr}"
    );
    // A host over its share of the budget: every process refuses, with one line naming it.
    let bin = env!("CARGO_BIN_EXE_ringload");
    let job = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "1", bin])
        .args(&args)
        .args([":", "-np", "1", bin])
        .args(&args)
        .args(["--memory-budget", "10MiB"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&job.stderr);
    assert_eq!(job.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("(process 1): memory budget").count(),
        1,
        "{stderr}"
    );
    drop(server);
    // Every completion fails: the failing process aborts its upload and ends the job, exit 3.
    let (_root, server) = dir_server(&["--faults", "500@complete/every=1"]);
    let args = checkpoint_args(&server.endpoint, &out, &["--retries", "1"]);
    let started = Instant::now();
    let job = mpirun(2, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&job.stderr);
    assert_eq!(job.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("CompleteMultipartUpload") && stderr.contains("aborted"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(120), "{stderr}");
}

/// A shared file system (here the machine's disk): two processes read what one reads, and
/// write each rank's checkpoint files, every rank its own, as one process does.
#[test]
fn on_a_file_system_two_processes_read_and_write_what_one_process_does() {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = data.path().to_str().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_ringload"))
        .args(["generate", "flux_small", "--files", "4", "--output", root])
        .status()
        .unwrap();
    assert!(status.success());
    let outs = tempfile::tempdir().unwrap();
    let (one, two) = (outs.path().join("one"), outs.path().join("two"));
    let args = |out: &std::path::Path| -> Vec<String> {
        [
            "run",
            "flux_small",
            "--files",
            "4",
            "--np",
            "2",
            "--data-dir",
            root,
            "--output",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([out.display().to_string()])
        .collect()
    };
    let single = Command::new(env!("CARGO_BIN_EXE_ringload"))
        .args(args(&one))
        .output()
        .unwrap();
    assert!(single.status.code().is_some_and(|c| c <= 1), "{single:?}");
    let job = mpirun(
        2,
        &args(&two).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .output()
    .unwrap();
    assert!(job.status.code().is_some_and(|c| c <= 1), "{job:?}");
    assert_eq!(gets(&one), gets(&two));
    let (s1, s2) = (summary(&one), summary(&two));
    assert_eq!(s2["engine"], "file");
    assert_eq!(s1["bytes_read"], s2["bytes_read"]);
    assert_eq!(s2["hosts"].as_array().map(Vec::len), Some(2), "{s2}");
    // Checkpoints: each rank writes its own files, the same as one process writes.
    let ckpt = |processes: usize| {
        let folder = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let args = [
            "run",
            "llama3_tiny",
            "--np",
            "2",
            "--data-dir",
            folder.path().to_str().unwrap(),
            "--verify",
            "checkpoint.num_checkpoints_write=1",
            "checkpoint.num_checkpoints_read=1",
        ];
        let out = match processes {
            1 => Command::new(env!("CARGO_BIN_EXE_ringload"))
                .args(args)
                .output()
                .unwrap(),
            n => mpirun(n, &args).output().unwrap(),
        };
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let mut files: Vec<(String, u64)> = common::walk(folder.path())
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(folder.path()).unwrap().display().to_string();
                (rel, std::fs::metadata(p).unwrap().len())
            })
            .collect();
        files.sort();
        files
    };
    let (by_one, by_two) = (ckpt(1), ckpt(2));
    assert_eq!(by_one.len(), 4, "{by_one:?}");
    assert_eq!(by_one, by_two);
}
