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
