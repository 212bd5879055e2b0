//! Helpers shared by the integration tests: the built binary, and the Python interpreter that
//! has the independent readers (pyarrow) installed by `scripts/install-test-deps`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `ringload` binary built for this test run, with the AWS variables that would point it at
/// another store removed (a test that wants them sets them).
pub fn ringload() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringload"));
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CA_BUNDLE",
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    ] {
        command.env_remove(name);
    }
    // No profile files but the ones a test names.
    command
        .env("AWS_CONFIG_FILE", "/nonexistent/ringload-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/ringload-test/credentials",
        );
    command
}

/// An in-process server's configuration for `store` on a free loopback port: unsigned, no
/// faults, no TLS; tests change what they need with `..server_config(store)`.
pub fn server_config(store: ringload::server::Store) -> ringload::server::ServerConfig {
    ringload::server::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store,
        credentials: None,
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: Default::default(),
        tls: None,
        max_connections: ringload::server::DEFAULT_MAX_CONNECTIONS,
    }
}

/// The virtual flux_small dataset with `files` files, in bucket "ringload".
pub fn virtual_flux(files: u64) -> ringload::server::Store {
    let workload = ringload::cli::WorkloadArgs {
        workload: Some("flux_small".into()),
        overrides: vec![],
        files: Some(files),
    };
    ringload::server::Store::Virtual(
        ringload::commands::virtual_store(&workload, None, false).unwrap(),
    )
}

/// Runs ringload with `args`; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    output(ringload().args(args))
}

/// Runs a prepared command; returns (exit code, stdout, stderr).
pub fn output(command: &mut Command) -> (i32, String, String) {
    let out: Output = command.output().expect("run ringload");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs ringload and parses its stdout as JSON, failing the test on a non-zero exit.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 0, "ringload {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// A Python interpreter with pyarrow: $RINGLOAD_PYTHON, else the repository's .venv.
/// Fails the test (it does not skip) when there is none: run scripts/install-test-deps.
pub fn python() -> PathBuf {
    let candidates = [
        std::env::var_os("RINGLOAD_PYTHON").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")),
    ];
    for candidate in candidates.into_iter().flatten() {
        let ok = Command::new(&candidate)
            .args(["-c", "import pyarrow"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return candidate;
        }
    }
    panic!(
        "no Python with pyarrow: run scripts/install-test-deps (or scripts/test), or set RINGLOAD_PYTHON"
    );
}

/// Runs a Python script with `args`, returning its stdout parsed as JSON.
pub fn python_json(script: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python printed JSON")
}

/// Checks the chunk hashes ringload puts in a Parquet footer with independent code: pyarrow
/// for the layout, the `xxhash` package for XXH3-64. Prints how many chunks matched.
#[allow(dead_code)]
pub const CHUNK_HASHES: &str = r#"
import json, sys, xxhash, pyarrow.parquet as pq
path = sys.argv[1]
md = pq.ParquetFile(path).metadata
groups = [g.split(",") for g in md.metadata[b"ringload.chunk_xxh3_64"].decode().split(";")]
data = open(path, "rb").read()
matched, mismatched = 0, []
for i in range(md.num_row_groups):
    rg = md.row_group(i)
    for c in range(rg.num_columns):
        col = rg.column(c)
        start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
        h = format(xxhash.xxh3_64_intdigest(data[start:start + col.total_compressed_size]), "016x")
        if h == groups[i][c]:
            matched += 1
        else:
            mismatched.append([i, c, h, groups[i][c]])
print(json.dumps({"groups": len(groups), "matched": matched, "mismatched": mismatched}))
"#;

/// A `ringload serve` child process: its endpoint (the first line it printed), stopped with
/// SIGTERM when dropped.
pub struct ServeChild {
    pub child: std::process::Child,
    pub endpoint: String,
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

/// Starts `ringload serve --listen 127.0.0.1:0 ARGS` and waits for the endpoint it prints.
pub fn spawn_serve(args: &[&str]) -> ServeChild {
    use std::io::BufRead;
    let mut child = ringload()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start ringload serve");
    let mut endpoint = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut endpoint)
        .unwrap();
    let endpoint = endpoint.trim().to_string();
    assert!(
        endpoint.starts_with("http"),
        "serve {args:?} printed {endpoint:?}"
    );
    ServeChild { child, endpoint }
}

// ---- garage -------------------------------------------------------------------------------

#[allow(dead_code)]
pub struct Garage {
    pub endpoint: String,
    pub bucket: String,
    pub key: String,
    pub secret: String,
}

/// The garage server scripts/with-garage started, or `None` (the test skips) when there is
/// none and RINGLOAD_REQUIRE_GARAGE is not set.
#[allow(dead_code)]
pub fn garage() -> Option<Garage> {
    let var = |n: &str| std::env::var(n).ok();
    match (
        var("RINGLOAD_GARAGE_ENDPOINT"),
        var("RINGLOAD_GARAGE_BUCKET"),
        var("RINGLOAD_GARAGE_ACCESS_KEY"),
        var("RINGLOAD_GARAGE_SECRET_KEY"),
    ) {
        (Some(endpoint), Some(bucket), Some(key), Some(secret)) => Some(Garage {
            endpoint,
            bucket,
            key,
            secret,
        }),
        _ if var("RINGLOAD_REQUIRE_GARAGE").is_some() => {
            panic!("RINGLOAD_REQUIRE_GARAGE is set but no garage runs: use scripts/with-garage")
        }
        _ => {
            eprintln!("skipping: no garage server (run the tests with scripts/test)");
            None
        }
    }
}

#[allow(dead_code)]
impl Garage {
    /// ringload with garage's endpoint and keys in the AWS environment variables.
    pub fn ringload(&self, args: &[&str]) -> (i32, String, String) {
        output(
            ringload()
                .args(args)
                .env("AWS_ENDPOINT_URL", &self.endpoint)
                .env("AWS_ACCESS_KEY_ID", &self.key)
                .env("AWS_SECRET_ACCESS_KEY", &self.secret)
                .env("AWS_REGION", "us-east-1"),
        )
    }
}

/// stunnel (OpenSSL) in front of garage: a third-party TLS stack and a third-party S3 server.
/// Accepts TLS on a free port of 127.0.0.1 with a certificate for that address, signed by a CA
/// made here, and forwards to garage. Killed on drop.
pub struct Terminator {
    child: std::process::Child,
    pub port: u16,
    pub ca: String,
    _dir: tempfile::TempDir,
}

impl Drop for Terminator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// stunnel accepting TLS and forwarding to the plain-HTTP `upstream`, with `extra` lines in its
/// service section (`sslVersionMax = TLSv1.2`, `ciphers = …`).
pub fn tls_terminator(upstream: &str, extra: &str) -> Terminator {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    std::fs::write(path("ca.pem"), ca.pem()).unwrap();
    std::fs::write(path("cert.pem"), cert.pem()).unwrap();
    std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
    // A free port: bound, read and let go just before stunnel binds it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let upstream = upstream.trim_start_matches("http://");
    let config = format!(
        "foreground = yes\npid =\n[s3]\naccept = 127.0.0.1:{port}\nconnect = {upstream}\n\
         cert = {}\nkey = {}\n{extra}",
        path("cert.pem"),
        path("key.pem")
    );
    std::fs::write(path("stunnel.conf"), config).unwrap();
    let child = std::process::Command::new("stunnel")
        .arg(path("stunnel.conf"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("stunnel (Debian's stunnel4, installed by scripts/install-test-deps)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "stunnel did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Terminator {
        child,
        port,
        ca: path("ca.pem"),
        _dir: dir,
    }
}

/// The requests `serve --request-log` recorded in `log`, counted by kind as ringload's
/// summaries count them (`requests_by_kind`): `head`, `get` (no Range), `ranged_get`, `list`
/// (a GET of the bucket with `list-type` or `uploads`), `put`, `part` (a PUT with
/// `partNumber`), `create` (a POST with `uploads`), `complete` (a POST with `uploadId`),
/// `abort` (a DELETE with `uploadId`); anything else as `other`.
#[allow(dead_code)]
pub fn logged_kinds(log: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut kinds = std::collections::BTreeMap::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let (method, path) = (r["method"].as_str().unwrap(), r["path"].as_str().unwrap());
        let query = r["query"].as_str().unwrap_or("");
        let has = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
        let bucket = path.trim_end_matches('/').matches('/').count() == 1;
        let kind = match method {
            "HEAD" => "head",
            "GET" if bucket && (has("list-type") || has("uploads")) => "list",
            "GET" if r["range"].is_string() => "ranged_get",
            "GET" => "get",
            "PUT" if has("partNumber") => "part",
            "PUT" => "put",
            "POST" if has("uploads") => "create",
            "POST" if has("uploadId") => "complete",
            "DELETE" if has("uploadId") => "abort",
            _ => "other",
        };
        *kinds.entry(kind.to_string()).or_insert(0) += 1;
    }
    kinds
}

/// A summary's `requests_by_kind` objects added up, the kinds never sent left out: comparable
/// with [`logged_kinds`].
#[allow(dead_code)]
pub fn summed_kinds(
    parts: &[&serde_json::Value],
    lists: u64,
) -> std::collections::BTreeMap<String, u64> {
    let mut kinds = std::collections::BTreeMap::new();
    for part in parts {
        for (kind, n) in part.as_object().unwrap() {
            *kinds.entry(kind.clone()).or_insert(0) += n.as_u64().unwrap();
        }
    }
    *kinds.entry("list".to_string()).or_insert(0) += lists;
    kinds.retain(|_, n| *n > 0);
    kinds
}

/// Every file under `dir`, at any depth (none when it cannot be read).
#[allow(dead_code)]
pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// unet3d_h100 made tiny: 8 objects of 64 KiB, batch 2, one reader, NP 2 → 2 steps per rank
/// per epoch; 3 epochs, a checkpoint after epochs 2 and 3 (epoch mode).
pub const TINY_CHECKPOINTING: &[&str] = &[
    "workflow.checkpoint=True",
    "metric.au=0.01",
    "dataset.num_files_train=8",
    "dataset.record_length_bytes=65536",
    "dataset.record_length_bytes_stdev=0",
    "reader.batch_size=2",
    "reader.read_threads=1",
    "train.epochs=3",
    "train.computation_time=0.01",
    "checkpoint.checkpoint_after_epoch=2",
    "checkpoint.epochs_between_checkpoints=1",
];
