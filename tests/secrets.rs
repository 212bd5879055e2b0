//! No secret in anything ringload writes or prints: a run, a sweep and a failed run, signed
//! with a known secret key (and a session token), against the embedded server requiring that
//! key; every file under their output folders, their stdout and stderr, and the command lines
//! of the sweep's points (what `ps` shows) are searched for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use ringload::server::{Credentials, Server, ServerConfig};

const ACCESS_KEY: &str = "GKsecretstest0123456789ab";
const SECRET_KEY: &str = "Zq8-the-secret-key-of-tests-secrets-rs";
const SESSION_TOKEN: &str = "Tk9-the-session-token-of-tests-secrets-rs";

fn server() -> Server {
    Server::start(ServerConfig {
        credentials: Some(Credentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
        }),
        ..common::server_config(common::virtual_flux(2))
    })
    .unwrap()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    assert!(files > 0, "nothing written under {}", dir.display());
    found
}

fn assert_no_secret(what: &str, stdout: &str, stderr: &str, dir: &Path) {
    for secret in [SECRET_KEY, SESSION_TOKEN] {
        assert!(
            !stdout.contains(secret),
            "{what}: stdout holds {secret}: {stdout}"
        );
        assert!(
            !stderr.contains(secret),
            "{what}: stderr holds {secret}: {stderr}"
        );
        let files = files_holding(dir, secret);
        assert!(files.is_empty(), "{what}: {files:?} hold {secret}");
    }
}

/// The command lines of `parent`'s children now, read from /proc.
fn children_cmdlines(parent: u32) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return lines;
    };
    // A child caught between fork and exec still shows the parent's own command line: not a
    // point's yet.
    let own = std::fs::read(format!("/proc/{parent}/cmdline")).ok();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces, so split after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent)
            && let Ok(cmdline) = std::fs::read(path.join("cmdline"))
            && Some(&cmdline) != own.as_ref()
        {
            lines.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    lines
}

#[test]
fn no_secret_in_the_outputs_of_a_run_a_sweep_and_a_failed_run() {
    let server = server();
    let endpoint = server.endpoint_url();
    let out = tempfile::tempdir().unwrap();
    let keys = ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY];
    let dir = |name: &str| out.path().join(name).to_str().unwrap().to_string();

    // A run, keys on the command line.
    let run_dir = dir("run");
    let mut args = vec!["run", "flux_small", "--files", "2", "--endpoint", &endpoint];
    args.extend(keys);
    args.extend(["--computation-time", "0.001", "--output", &run_dir]);
    let (code, stdout, stderr) = common::run(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert_no_secret("run", &stdout, &stderr, Path::new(&run_dir));

    // A run, keys and a session token from the environment, with --json.
    let env_dir = dir("env-run");
    let (code, stdout, stderr) = common::output(
        common::ringload()
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
            .args(["run", "flux_small", "--files", "2", "--endpoint", &endpoint])
            .args([
                "--computation-time",
                "0.001",
                "--json",
                "--output",
                &env_dir,
            ]),
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert_no_secret("run (environment)", &stdout, &stderr, Path::new(&env_dir));

    // A failed run: a bucket that does not exist.
    let failed_dir = dir("failed");
    let mut args = vec!["run", "flux_small", "--files", "2", "--endpoint", &endpoint];
    args.extend(keys);
    args.extend(["--bucket", "no-such-bucket", "--output", &failed_dir]);
    let (code, stdout, stderr) = common::run(&args);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("NoSuchBucket"), "{stderr}");
    std::fs::create_dir_all(&failed_dir).unwrap();
    std::fs::write(Path::new(&failed_dir).join("stderr"), &stderr).unwrap();
    assert_no_secret("failed run", &stdout, &stderr, Path::new(&failed_dir));

    // A sweep of one point with 0.2 s steps, its point's command line read while it runs.
    let sweep_dir = dir("sweep");
    let mut sweep = common::ringload();
    sweep
        .args([
            "sweep",
            "flux_small",
            "--files",
            "1",
            "--np",
            "1",
            "--endpoint",
            &endpoint,
        ])
        .args(keys)
        .args(["--computation-time", "0.2", "--output", &sweep_dir])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = sweep.spawn().unwrap();
    let pid = child.id();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && seen.is_empty() {
        seen = children_cmdlines(pid);
        std::thread::sleep(Duration::from_millis(5));
    }
    let out_sweep = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out_sweep.stdout).into_owned(),
        String::from_utf8_lossy(&out_sweep.stderr).into_owned(),
    );
    assert!(matches!(out_sweep.status.code(), Some(0 | 1)), "{stderr}");
    assert!(!seen.is_empty(), "no point of the sweep was seen running");
    for line in &seen {
        assert!(line.contains(" run "), "{line}");
        assert!(line.contains(ACCESS_KEY), "{line}");
        assert!(
            !line.contains(SECRET_KEY),
            "a point's command line holds the secret: {line}"
        );
    }
    assert_no_secret("sweep", &stdout, &stderr, Path::new(&sweep_dir));
    let recorded = std::fs::read_to_string(Path::new(&sweep_dir).join("sweep.json")).unwrap();
    assert!(recorded.contains("--secret-key <redacted>"), "{recorded}");
    // The point signed with the secret it was handed: it ran and read its share.
    let sweep_json: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    let point = &sweep_json["points"][0];
    assert!(
        point["summary"]["bytes_read"].as_u64().unwrap() > 0,
        "{point}"
    );
}
