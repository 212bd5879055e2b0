//! What a new user trips on (issue 34), each case with its exit code and its line: output
//! paths checked before anything runs, no silent wrong number, advice that fits the mistake,
//! and the line that says what limited a run. Every case runs the real binary; the runs are
//! small (the embedded default, seconds each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::run;

/// A path under a regular file: no folder can ever be made there, whoever runs the test.
fn unwritable(dir: &std::path::Path) -> String {
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    file.join("results").to_str().unwrap().to_string()
}

// Item 1: no work lost to a late check.

#[test]
fn run_checks_results_dir_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let results = unwritable(dir.path());
    let (code, stdout, stderr) = run(&["run", "--results-dir", &results]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "--results-dir {results}: cannot write its folders"
        )) && stderr.contains("choose another folder"),
        "{stderr}"
    );
    // Refused before the run: no table, no progress.
    assert!(stdout.is_empty(), "{stdout}");
    assert!(!stderr.contains("steps"), "{stderr}");
    // A checkpoint run the same.
    let (code, _, stderr) = run(&["run", "llama3_tiny", "--results-dir", &results]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot write its folders"), "{stderr}");
}

#[test]
fn find_max_np_checks_results_dir_before_the_first_point() {
    let dir = tempfile::tempdir().unwrap();
    let results = unwritable(dir.path());
    let out = dir.path().join("search");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "--find-max-np",
        "--runs",
        "2",
        "--results-dir",
        &results,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("cannot write its folders"), "{stderr}");
    // Nothing ran: no point folder was made.
    assert!(!out.join("points").exists());
}

/// A search whose end fails (here: the answer's runs cannot be copied into the results tree,
/// whose system folder is a file) still leaves its study.md and report.html.
#[test]
fn a_search_that_fails_at_its_end_still_writes_its_study() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    std::fs::write(results.join("rig"), b"not a folder").unwrap();
    let out = dir.path().join("search");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "--find-max-np",
        "--runs",
        "2",
        "--np",
        "1,2",
        "--computation-time",
        "0.05",
        "--results-dir",
        results.to_str().unwrap(),
        "--system",
        "rig",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(code == 2 || code == 3, "{code}: {stdout}\n{stderr}");
    for file in ["study.md", "report.html", "sweep.json"] {
        assert!(out.join(file).is_file(), "no {file}: {stderr}");
    }
    let study = std::fs::read_to_string(out.join("study.md")).unwrap();
    assert!(study.contains("Largest NP that holds AU: "), "{study}");
    assert!(
        stderr.contains("the answer's runs could not be copied there; the study is in ")
            && stderr.contains("results/rig/training/flux-small/run/"),
        "{stderr}"
    );
}

// Item 2: no silent wrong number.

#[test]
fn a_memory_size_without_a_unit_is_refused_naming_the_units() {
    let (code, stdout, stderr) = run(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512",
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("'512' has no unit; write 512GiB or 512GB")
            && stderr.contains("--client-host-memory-in-gb 512 is 512GB here"),
        "{stderr}"
    );
    // With its unit, the rule's figure: 5 × 512 GiB ÷ 322,957 B.
    let (code, stdout, stderr) = run(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("8,511,284 files"), "{stdout}");
    let (code, _, stderr) = run(&["run", "llama3_tiny", "--accelerator-memory", "180"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'180' has no unit"), "{stderr}");
}

#[test]
fn find_max_np_on_whole_objects_counts_the_files_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("search");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "retinanet_b200",
        "--files",
        "96",
        "--np",
        "1,1",
        "--find-max-np",
        "--runs",
        "2",
        "--computation-time",
        "0.001",
        "train.epochs=1",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("FAIL  dataset size: 96 files < the "),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("dataset size: 0 files"), "{stdout}");
}

/// A million-GET run (400,000 small objects: 399,984 GETs per epoch, 3 epochs): the peak resident set stays
/// within the budget, which counts the plan's GETs and their records; `plan` shows that line.
#[test]
fn the_budget_counts_the_gets_a_run_holds() {
    let args = [
        "retinanet_b200",
        "--files",
        "400000",
        "dataset.record_length_bytes=100",
        "--computation-time",
        "0",
        "train.epochs=3",
    ];
    let mut plan = vec!["plan"];
    plan.extend(args);
    let (code, stdout, stderr) = run(&plan);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("GETs") && l.contains("for 399,984 GETs"))
        .unwrap_or_else(|| panic!("no GETs line in {stdout}"));
    assert!(line.contains("a record per GET of every epoch"), "{line}");
    let mut json = vec!["run"];
    json.extend(args);
    json.push("--json");
    let (code, stdout, stderr) = run(&json);
    assert!(code == 0 || code == 1, "{stderr}");
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["requests"], 1_199_952, "{stderr}");
    let (peak, budget) = (
        s["peak_rss_bytes"].as_u64().unwrap(),
        s["memory_budget_bytes"].as_u64().unwrap(),
    );
    assert!(peak <= budget, "peak {peak} over budget {budget}: {stderr}");
    assert!(!stderr.contains("went past the memory budget"), "{stderr}");
}

#[test]
fn flags_the_workload_would_ignore_are_refused() {
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "sweep",
                "flux_small",
                "--part-size",
                "8MiB",
                "--output",
                "/nonexistent/s",
            ],
            "--part-size: flux_small is a training workload and --part-size shapes a \
             checkpoint run's writes and reads, so it would be ignored",
        ),
        (
            &["run", "llama3_tiny", "--read-threads", "2"],
            "--read-threads: llama3_tiny is a checkpoint workload, which reads no training \
             dataset, so --read-threads would be ignored; drop it",
        ),
        (
            &["run", "llama3_tiny", "--files", "8"],
            "--files: llama3_tiny is a checkpoint workload",
        ),
        (
            &["run", "flux_small", "--part-size", "8MiB"],
            "--part-size: flux_small is a training workload and --part-size shapes a \
             checkpoint run's writes and reads, so it would be ignored",
        ),
        (
            &["run", "llama3_tiny", "--after", "/tmp"],
            "--after /tmp: this run also writes 2 checkpoints \
             (checkpoint.num_checkpoints_write), and --after times MLPerf's split form's read \
             run from its write run's end; add checkpoint.num_checkpoints_write=0",
        ),
    ];
    for (args, line) in cases {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(line), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}

// Item 3: advice that fits the mistake.

#[test]
fn usage_mistakes_get_advice_that_fits() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["run", "np=4"],
            "override 'np=4' is not a key of DLIO's configuration: 'np' is ringload's flag \
             --np; pass --np 4",
        ),
        (
            &["generate", "llama3_8b"],
            "llama3_8b: a checkpoint workload writes its objects when it runs",
        ),
        (
            &["plan", "flux_b200", "--memory-budget", "100MiB"],
            "even the smallest run (NP 1, --read-threads 1 --prefetch 1) needs ",
        ),
        (
            &[
                "plan",
                "flux_small",
                "--files",
                "1",
                "reader.batch_size=1000",
            ],
            "0 steps per rank: floor(288 × 1 / 1000 / 1) = 0; one step of 1 rank needs 4 files \
             (--files 4)",
        ),
        (
            &["run", "--hosts", "2"],
            "--hosts is not a flag of `ringload run`: a run over several client hosts is one \
             ringload process per host started by mpirun",
        ),
        (
            &[
                "run",
                "--endpoint",
                "http://nosuchhost.invalid:9000",
                "--bucket",
                "b",
            ],
            "the name 'nosuchhost.invalid' does not resolve",
        ),
    ];
    for (args, line) in cases {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(line), "{args:?}: {stderr}");
        assert!(!stderr.contains("is the server running"), "{stderr}");
        assert!(!stderr.contains("lower --np"), "{args:?}: {stderr}");
    }
}

/// A server that answers every request with `404` and no body, as a web server or a proxy
/// without S3 behind it may.
fn empty_404_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        let answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
                        if stream.write_all(answer).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    endpoint
}

#[test]
fn an_empty_404_is_not_s3() {
    let endpoint = empty_404_server();
    let (code, stdout, stderr) = run(&["run", "--endpoint", &endpoint, "--bucket", "b"]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "this does not look like an S3 endpoint: {endpoint} answered HTTP 404 with an empty \
             body"
        )),
        "{stderr}"
    );
}

#[test]
fn no_such_bucket_names_the_buckets_there() {
    let dir = tempfile::tempdir().unwrap();
    for bucket in ["ringload", "training-data"] {
        std::fs::create_dir(dir.path().join(bucket)).unwrap();
    }
    let server = common::spawn_serve(&["--dir", dir.path().to_str().unwrap()]);
    let (code, stdout, stderr) = run(&[
        "run",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "trainig-data",
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("bucket 'trainig-data' does not exist")
            && stderr.contains("the endpoint has: ringload, training-data"),
        "{stderr}"
    );
}

#[test]
fn a_refused_certificate_names_the_ca_bundle_it_was_checked_against() {
    let dir = tempfile::tempdir().unwrap();
    let (other, served) = (dir.path().join("other"), dir.path().join("served"));
    // Another server's CA: a bundle that does not hold the served certificate's.
    drop(common::spawn_serve(&[
        "--tls-self-signed",
        other.to_str().unwrap(),
    ]));
    let server = common::spawn_serve(&["--tls-self-signed", served.to_str().unwrap()]);
    let bundle = other.join("ca.pem");
    let (code, stdout, stderr) = common::output(
        common::ringload()
            .args([
                "run",
                "--endpoint",
                &server.endpoint,
                "--bucket",
                "ringload",
            ])
            .env("AWS_CA_BUNDLE", &bundle),
    );
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "is not signed by a CA in {} (named by AWS_CA_BUNDLE)",
            bundle.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_short_write_run_of_the_split_form_is_told_to_stay_split() {
    let (code, stdout, stderr) = run(&["run", "llama3_tiny", "checkpoint.num_checkpoints_read=0"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "FAIL  10 writes then 10 reads: 2 saves and 0 restores; for the split form's write \
             run set checkpoint.num_checkpoints_write=10 (its read run then reads 10)"
        ),
        "{stdout}"
    );
}

// Item 4: say what limited a run.

/// The report's last line names the limit, and summary.json has it as a word.
fn limit_of(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut full = args.to_vec();
    full.extend(["--output", out.to_str().unwrap()]);
    let (code, stdout, stderr) = run(&full);
    assert!(code == 0 || code == 1, "{args:?}: {stderr}");
    let last = stdout.lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("limit: "), "{args:?}: {stdout}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        format!("limit: {}", summary["limit"]["line"].as_str().unwrap()),
        last
    );
    (last, summary)
}

#[test]
fn every_run_ends_naming_its_limit() {
    // The embedded default meets its AU: nothing held the steps back.
    let (line, summary) = limit_of(&["run"]);
    assert_eq!(summary["limit"]["kind"], "none", "{line}");
    assert!(line.starts_with("limit: none reached: AU "), "{line}");
    // A store of 40 MiB/s for a loader that asks ~4.59 MiB per 0.05 s: the storage.
    let server = common::spawn_serve(&["--bandwidth-mib-per-s", "40"]);
    let (line, summary) = limit_of(&[
        "run",
        "--endpoint",
        &server.endpoint,
        "--bucket",
        "ringload",
        "--computation-time",
        "0.05",
    ]);
    assert_eq!(summary["limit"]["kind"], "storage", "{line}");
    assert!(
        line.starts_with("limit: the storage: the steps waited for I/O (AU "),
        "{line}"
    );
}

#[test]
fn a_long_run_says_how_long_before_it_starts() {
    let (code, stdout, stderr) = run(&["plan", "retinanet_b200"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "this run takes at least 5 h 9 min: 48,762 steps × 0.04755 s of compute × 8 \
             epoch(s)"
        ),
        "{stdout}"
    );
    // `run` says it before its first step: read stderr up to that line, then stop the run.
    use std::io::BufRead;
    let mut child = common::ringload()
        .args(["run", "retinanet_b200", "--np", "8"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let found = line.contains("this run takes at least 38 min: 6,095 steps × 0.04755 s");
        seen.push(line);
        if found {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let last = seen.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("ringload run: NOTE: this run takes at least 38 min"),
        "{seen:?}"
    );
}

// Item 5: help and the built-in checkpoint for trying the workflow.

#[test]
fn every_commands_help_names_every_built_in_workload() {
    for command in ["plan", "run", "sweep", "generate", "serve", "datasize"] {
        let (code, stdout, stderr) = run(&[command, "--help"]);
        assert_eq!(code, 0, "{command}: {stderr}");
        // clap wraps help lines: compare the words, not the line breaks.
        let text = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        for (name, _) in ringload::config::BUILTIN_WORKLOADS {
            assert!(
                text.contains(name),
                "{command} --help lacks {name}: {stdout}"
            );
        }
    }
    let (_, stdout, _) = run(&["generate", "--help"]);
    let text = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for format in [
        "Parquet for flux_*",
        "npz for unet3d_*",
        "JPEG for retinanet_*",
        "TFRecord for resnet50_h100 and cosmoflow_h100",
    ] {
        assert!(
            text.contains(format),
            "generate --help lacks {format}: {stdout}"
        );
    }
}

#[test]
fn the_demo_checkpoint_runs_mlperfs_sequence_and_says_it_is_not_mlperfs_model() {
    let (code, stdout, stderr) = run(&["run", "llama3_demo", "--np", "8"]);
    assert_eq!(code, 0, "{stderr}");
    for line in [
        "llama3_demo checkpoint on 8 ranks",
        "PASS  10 writes then 10 reads: 10 saves then 10 restores in one run",
        "PASS  more than 4 processes per host: 8 processes on 1 host",
        "FAIL  one of MLPerf's models: llama3_demo is not one of MLPerf's checkpointing models \
         (llama3_8b, llama3_70b, llama3_405b, llama3_1t)",
    ] {
        assert!(stdout.contains(line), "{line} not in {stdout}");
    }
    // Its last line names what limited it.
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("  limit: "), "{stdout}");
}

#[test]
fn verify_on_the_embedded_sink_says_what_it_checked() {
    let (code, stdout, stderr) = run(&["run", "llama3_tiny", "--np", "2", "--verify"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("verified: every byte restored (")
            && stdout.contains(
                "every byte written was checked by the embedded sink as it arrived, against the \
                 same generator"
            ),
        "{stdout}"
    );
    // Without --verify, no such claim.
    let (_, stdout, _) = run(&["run", "llama3_tiny", "--np", "2"]);
    assert!(!stdout.contains("verified:"), "{stdout}");
}
