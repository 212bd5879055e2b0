//! The command line as a user meets it: plans that reproduce the study, exit codes, and one-line
//! errors that name the input and the fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{run, run_json};

const STUDY: &[&str] = &[
    "plan",
    "flux_b200",
    "--files",
    "500",
    "--prefetch",
    "2",
    "--coalesce-rgs",
    "1",
];

fn study(extra: &[&str]) -> Vec<String> {
    STUDY
        .iter()
        .chain(extra)
        .map(|s| (*s).to_string())
        .collect()
}

fn run_owned(args: &[String]) -> (i32, String, String) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs)
}

#[test]
fn the_readme_quick_start_plan_runs() {
    let (code, stdout, stderr) = run(&["plan"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ringload plan: flux_small"), "{stdout}");
    assert!(stdout.contains("48 per rank per epoch"), "{stdout}");
}

#[test]
fn study_plan_np8_rt8_needs_12_4_gib_before_any_data_exists() {
    let args = study(&["--np", "8", "--read-threads", "8", "--json"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let plan = run_json(&refs);
    assert_eq!(plan["steps_per_rank"], 375);
    assert_eq!(plan["largest_get_bytes"], 103_915_069);
    // The study's file (623,498,435 bytes) and 537 bytes more in the footer: the chunk hashes
    // `run --verify` checks (key, 30 × 16 hex digits and separators, Thrift framing). The row
    // groups, which is what a run reads, are where the study's are.
    assert_eq!(plan["catalog"]["files"][0]["size_bytes"], 623_498_435 + 537);
    assert_eq!(
        plan["catalog"]["files"][0]["row_groups"][5]["offset"],
        4 + 5 * 103_915_069
    );
    let pool = plan["memory"]["pool_bytes"].as_u64().unwrap();
    let gib = pool as f64 / (1u64 << 30) as f64;
    assert!((gib - 12.39).abs() < 0.01, "{gib} GiB");
    assert_eq!(plan["memory"]["buffers_per_rank"], 16);
    assert_eq!(plan["ranks"].as_array().unwrap().len(), 8);
    // The human form says the same.
    let args = study(&["--np", "8", "--read-threads", "8"]);
    let (code, stdout, _) = run_owned(&args);
    assert_eq!(code, 0);
    assert!(stdout.contains("= 12.39 GiB"), "{stdout}");
    assert!(
        stdout.contains("375 per rank per epoch: floor(288 × 500 / 48 / 8) = 375"),
        "{stdout}"
    );
}

#[test]
fn study_steps_per_rank_at_np_1_2_4_8() {
    for (np, steps) in [(1, 3000), (2, 1500), (4, 750), (8, 375)] {
        let args = study(&["--np", &np.to_string(), "--read-threads", "1", "--json"]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let plan = run_json(&refs);
        assert_eq!(plan["steps_per_rank"], steps, "NP={np}");
    }
}

#[test]
fn np16_rt8_is_refused_on_a_24_gib_machine() {
    // Deterministic on any machine: cap the budget at this machine class's 24 GiB.
    let np16_rt8 = |budget: &str| {
        run_owned(&study(&[
            "--np",
            "16",
            "--read-threads",
            "8",
            "--memory-budget",
            budget,
        ]))
    };
    let (code, stdout, stderr) = np16_rt8("24GiB");
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("ringload: memory budget 24.90 GiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("exceeds --memory-budget 24.00 GiB"),
        "{stderr}"
    );
    // What fits must fit every limit, this machine's MemAvailable too: under 24 GiB of budget
    // the suggestion moves with what the machine has free (RT 7 needs 21.8 GiB, within a few
    // hundred MiB of a busy 24 GiB machine's). Under 20 GiB the budget binds on any machine
    // with 18.8 GiB free: the line names exactly what fits it.
    let (code, _, stderr) = np16_rt8("20GiB");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("exceeds --memory-budget 20.00 GiB"),
        "{stderr}"
    );
    assert!(stderr.contains("largest that fit: --read-threads 6 (at --prefetch 2), or --prefetch 1 (at --read-threads 8)"), "{stderr}");

    // And on this machine as it is, when it is the 24 GiB kind the study's limit is about.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let avail_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    if avail_kib * 1024 < 24_900_000_000 {
        let (code, _, stderr) = run_owned(&study(&["--np", "16", "--read-threads", "8"]));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("exceeds MemAvailable"), "{stderr}");
    } else {
        eprintln!(
            "skipping the uncapped NP=16 check: this machine has more than 24.9 GB available"
        );
    }
}

#[test]
fn dlio_sharding_gives_every_rank_the_same_walk() {
    let args = study(&[
        "--np",
        "4",
        "--read-threads",
        "8",
        "--sharding",
        "dlio",
        "--json",
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let plan = run_json(&refs);
    let ranks = plan["ranks"].as_array().unwrap();
    for rank in ranks {
        assert_eq!(rank["readers"], ranks[0]["readers"]);
    }
    // 750 steps of 48 rows: the first 125 files, reader k taking files k, k+8, ...
    let reader3: Vec<u64> = ranks[0]["readers"][3]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_u64().unwrap())
        .collect();
    assert_eq!(reader3, (3..125).step_by(8).collect::<Vec<u64>>());
}

#[test]
fn overrides_and_flags_reach_the_plan() {
    let plan = run_json(&[
        "plan",
        "flux_b200",
        "++workload.dataset.num_files_train=10",
        "workload.train.computation_time=0.05",
        "reader.read_threads=2",
        "--coalesce-rgs",
        "2",
        "--json",
    ]);
    let s = &plan["settings"];
    assert_eq!(s["num_files"], 10);
    assert_eq!(s["computation_time_s"], 0.05);
    assert_eq!(s["workload_computation_time_s"], 1.35);
    assert_eq!(s["read_threads"], 2);
    assert_eq!(s["coalesce_rgs"], 2);
    assert_eq!(plan["largest_get_bytes"], 2 * 103_915_069);
    let notes = plan["notes"].as_array().unwrap();
    assert!(
        notes[0]
            .as_str()
            .unwrap()
            .contains("differs from the workload's 1.35 s"),
        "{notes:?}"
    );
    let ignored: Vec<&str> = s["ignored_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert!(
        ignored.contains(&"framework") && ignored.contains(&"reader.file_shuffle"),
        "{ignored:?}"
    );
}

#[test]
fn a_dlio_workload_file_loads_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dlrm_like.yaml");
    std::fs::write(
        &path,
        "model:\n  name: example\n  type: transformer\nframework: pytorch\nworkflow:\n  generate_data: True\n  train: True\n  profiling: False\n\
         dataset:\n  data_folder: data/ex/\n  format: parquet\n  num_files_train: 4\n  num_samples_per_file: 64\n  compression: none\n\
         \x20 parquet:\n    row_group_size: 16\n    generation_batch_size: 64\n    columns:\n      - name: label\n        dtype: float32\n        size: 1\n\
         \x20     - name: features\n        dtype: float32\n        size: 128\n      - name: aux\n        dtype: int8\n        size: 64\n        read: false\n\
         reader:\n  data_loader: pytorch\n  batch_size: 32\n  read_threads: 2\n  computation_threads: 4\n  prefetch_size: 2\n\
         train:\n  epochs: 2\n  computation_time: {mean: 0.01, stdev: 0.001}\n  seed: 42\n\
         checkpoint:\n  checkpoint_folder: ckpt/\nevaluation:\n  eval_time: 0.1\noutput:\n  folder: out/\n\
         storage:\n  storage_type: s3\n  storage_root: mybucket\n  storage_options:\n    storage_library: s3dlio\n    endpoint_url: http://127.0.0.1:9000\n    coalesce_rgs: 1\n\
         metric:\n  au: 0.7\n",
    )
    .unwrap();
    let plan = run_json(&["plan", path.to_str().unwrap(), "--json"]);
    let s = &plan["settings"];
    assert_eq!(s["record_bytes"], 4 + 512 + 64);
    assert_eq!(s["columns_read"], serde_json::json!(["label", "features"]));
    assert_eq!(s["computation_time_s"], 0.01);
    assert_eq!(s["epochs"], 2);
    assert_eq!(s["storage"]["bucket"], "mybucket");
    assert_eq!(s["storage"]["endpoint_url"], "http://127.0.0.1:9000");
    assert_eq!(plan["steps_per_rank"], 4 * 64 / 32);
    // Row groups of 16 rows, batches of 32: each step takes two GETs of one reader.
    assert_eq!(plan["ranks"][0]["max_gets_held_per_reader"], 2);
}

/// Every bad input: exit code 2 and one line naming the input and the fix.
#[test]
fn the_parsers_errors_keep_their_lines() {
    // clap's message, its first line with where help is, and its other lines as it wrote them
    // (not run into the sentence before).
    let table: [(&[&str], &[&str]); 5] = [
        (
            &["run", "--engine", "fast"],
            &[
                "ringload: invalid value 'fast' for '--engine <ENGINE>'; see 'ringload --help'",
                "  [possible values: uring, baseline, file]",
            ],
        ),
        (
            &["plan", "flux_small", "--sharding", "sideways"],
            &[
                "ringload: invalid value 'sideways' for '--sharding <SHARDING>'; see 'ringload --help'",
                "  [possible values: rank, dlio]",
            ],
        ),
        (
            &["plan", "flux_small", "--fils", "3"],
            &[
                "ringload: unexpected argument '--fils' found; see 'ringload --help'",
                "  tip: a similar argument exists: '--files'",
            ],
        ),
        (
            &["plan", "--np"],
            &[
                "ringload: a value is required for '--np <N>' but none was supplied; see 'ringload --help'",
            ],
        ),
        (
            &["sweep", "flux_small"],
            &[
                "ringload: the following required arguments were not provided: --output <DIR>; see 'ringload --help'",
            ],
        ),
    ];
    for (args, expected) in table {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        let lines: Vec<&str> = stderr.trim_end().lines().collect();
        assert_eq!(lines, expected, "{args:?}");
    }
}

#[test]
fn bad_input_gets_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bad_yaml = d.join("bad.yaml");
    std::fs::write(&bad_yaml, "reader: [1, 2\n").unwrap();
    let typo_yaml = d.join("typo.yaml");
    std::fs::write(
        &typo_yaml,
        "dataset:\n  format: parquet\nreader:\n  batchsize: 4\n",
    )
    .unwrap();
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    // A dataset with one real file and one that is not Parquet.
    let (code, _, stderr) = run(&[
        "generate",
        "flux_small",
        "--files",
        "1",
        "--out",
        d.join("ds").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let train = d.join("ds/data/flux_small/train");
    std::fs::write(train.join("train_0001.parquet"), vec![0u8; 100]).unwrap();
    let ds = d.join("ds");
    let table: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["plan", "flux_b20"],
            "unknown workload 'flux_b20': not a built-in (flux_b200, flux_mi355, flux_small, llama3_8b, llama3_70b, llama3_405b, llama3_1t, llama3_tiny, llama3_demo, dlrm_b200, dlrm_mi355, unet3d_b200, unet3d_h100, retinanet_b200, retinanet_mi355, resnet50_h100, cosmoflow_h100) and no such file; did you mean 'flux_b200'",
        ),
        (
            vec!["plan", "missing/x.yaml"],
            "cannot read workload file 'missing/x.yaml'",
        ),
        (
            vec!["plan", bad_yaml.to_str().unwrap()],
            "is not valid YAML",
        ),
        (
            vec!["plan", typo_yaml.to_str().unwrap()],
            "unknown key 'reader.batchsize'",
        ),
        (
            vec!["plan", "flux_small", "reader.read_thread=4"],
            "did you mean 'reader.read_threads'?",
        ),
        (
            vec!["plan", "flux_small", "reader.read_threads=four"],
            "reader.read_threads = 'four' (override 'reader.read_threads=four') must be a positive integer",
        ),
        (
            vec!["plan", "flux_small", "read_threads"],
            "override 'read_threads' is not key=value",
        ),
        (
            // A value forgotten with no workload named: an override, not a workload name.
            vec!["plan", "train.computation_time"],
            "override 'train.computation_time' is not key=value (for example",
        ),
        (
            vec!["plan", "flux_small", "--read-threads", "0"],
            "needs at least one reader",
        ),
        (
            vec!["plan", "flux_small", "--np", "0"],
            "--np 0: a run needs at least one rank",
        ),
        (
            vec!["plan", "flux_small", "--np", "1000"],
            "0 steps per rank",
        ),
        (
            vec!["plan", "flux_small", "--memory-budget", "lots"],
            "'lots' is not a size",
        ),
        (
            vec!["plan", "flux_small", "--memory-budget", "1MiB"],
            "exceeds --memory-budget 1.00 MiB",
        ),
        (
            vec!["plan", "flux_small", "--dir", empty.to_str().unwrap()],
            "does not exist; create the dataset with `ringload generate",
        ),
        (
            vec![
                "plan",
                "flux_small",
                "--dir",
                ds.to_str().unwrap(),
                "--files",
                "3",
            ],
            "found 2 Parquet files under",
        ),
        (
            vec![
                "plan",
                "flux_small",
                "--dir",
                ds.to_str().unwrap(),
                "--files",
                "2",
            ],
            "train_0001.parquet is not Parquet: it does not end with the PAR1 magic",
        ),
        (
            vec!["plan", "flux_small", "--np", "-1"],
            "--np -1: negative values are not allowed",
        ),
        (
            vec!["run", "--computation-time", "-0.5"],
            "--computation-time -0.5: negative values are not allowed",
        ),
        (
            vec!["generate", "flux_small"],
            "pass --output DIR, or --endpoint URL --bucket NAME",
        ),
        (
            vec!["run", "--endpoint", "ftp://s3.example.com", "--bucket", "b"],
            "--endpoint 'ftp://s3.example.com' is not an endpoint URL; write http[s]://HOST[:PORT]",
        ),
        (
            vec![
                "run",
                "--endpoint",
                "http://127.0.0.1:9",
                "--bucket",
                "b",
                "--resolve",
                "nonsense",
            ],
            "--resolve 'nonsense' is not HOST:PORT:ADDR",
        ),
        (
            vec![
                "run",
                "--endpoint",
                "http://127.0.0.1:9",
                "--bucket",
                "Bad_Bucket",
                "--addressing",
                "virtual",
            ],
            "cannot be addressed virtual-hosted",
        ),
        (
            // No bucket anywhere: the one `ringload serve` serves, 'ringload'.
            vec!["run", "--endpoint", "http://127.0.0.1:9"],
            "s3://ringload/: cannot connect to http://127.0.0.1:9",
        ),
        (
            vec![
                "run",
                "--endpoint",
                "http://127.0.0.1:9",
                "--access-key",
                "K",
            ],
            "--access-key needs its secret: pass --secret-key-file FILE or set \
             AWS_SECRET_ACCESS_KEY",
        ),
        (vec!["run", "--secret-key", "S"], "--access-key <KEY>"),
        (
            vec!["run", "--np", "0"],
            "--np 0: a run needs at least one rank",
        ),
        (
            vec!["run", "--request-timeout", "0"],
            "not a time in seconds",
        ),
        (
            vec!["run", "--engine-threads", "0"],
            "'0' is not a thread count; write 1 or more",
        ),
        (
            vec![
                "run",
                "--endpoint",
                "http://127.0.0.1:9",
                "--bucket",
                "bkt/data",
            ],
            "--bucket: 'bkt/data' is not a bucket name: it has a '/'",
        ),
        (
            vec![
                "run",
                "--endpoint",
                "http://127.0.0.1:9",
                "--bucket",
                "../etc",
            ],
            "--bucket: '../etc' is not a bucket name",
        ),
        (
            vec!["run", "--endpoint", "http://127.0.0.1:9", "--bucket", ""],
            "--bucket: the bucket name is empty",
        ),
        // Refused before the warning about ranks sharing cores: one line.
        (vec!["run", "--np", "100000"], "0 steps per rank"),
        (
            vec!["run", "--output", "/proc/ringload-results"],
            "cannot write results into --output /proc/ringload-results",
        ),
        (
            vec!["run", "--output", "/etc/hostname/results"],
            "cannot write results into --output /etc/hostname/results",
        ),
        (
            vec!["run", "--cpus", "x"],
            "--cpus 'x' is not a CPU list; write e.g. 0-3,6",
        ),
        (
            vec!["run", "--cpus", "0,1000"],
            "--cpus 0,1000: CPU 1000 is not in this process's affinity mask",
        ),
    ];
    for (args, expected) in table {
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {stderr}"
        );
        assert!(stderr.starts_with("ringload: "), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
    }
}

#[test]
fn help_and_version() {
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for word in ["plan", "generate", "Exit codes"] {
        assert!(stdout.contains(word), "{stdout}");
    }
    let (code, stdout, _) = run(&["plan", "--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("--memory-budget <SIZE>"), "{stdout}");
    let (code, stdout, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("ringload "), "{stdout}");
}

/// A build without the `mpi` feature, started by mpirun as one of several processes, refuses
/// in one line (exit 2) instead of running the same job twice.
#[cfg(not(feature = "mpi"))]
#[test]
fn without_the_mpi_feature_mpirun_gets_exit_2_and_how_to_rebuild() {
    let out = std::process::Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(env!("CARGO_BIN_EXE_ringload"))
        .args(["run", "flux_small", "--files", "2"])
        .output()
        .expect("mpirun (Debian's openmpi-bin, installed by scripts/install-test-deps)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ringload: "))
        .collect();
    assert_eq!(lines.len(), 2, "one line per process: {stderr}");
    assert!(
        lines.iter().all(|l| l.contains("built without MPI")
            && l.contains("cargo build --release --features mpi")),
        "{stderr}"
    );
}

/// The study's NP=8, RT=8 point as a user types it: refused at the built-in coalesce_rgs 8,
/// and the refusal says that `--coalesce-rgs 1`, the study's setting, fits. Not said when it
/// would not fit, or is already the setting.
#[test]
fn a_refusal_at_coalesce_8_offers_the_studys_coalesce_1_when_it_fits() {
    let (code, stdout, stderr) = run(&[
        "run",
        "flux_b200",
        "--np",
        "8",
        "--read-threads",
        "8",
        "--memory-budget",
        "16GiB",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("594.61 MiB buffers"), "{stderr}");
    assert!(
        stderr.contains("--coalesce-rgs 1, the study's setting (one row group per GET), fits"),
        "{stderr}"
    );
    assert!(
        stderr.contains("GETs of 99.10 MiB instead of 594.61 MiB at coalesce_rgs 8"),
        "{stderr}"
    );
    for args in [
        // Too small for coalesce_rgs 1 too.
        &[
            "run",
            "flux_b200",
            "--np",
            "8",
            "--read-threads",
            "8",
            "--memory-budget",
            "4GiB",
        ][..],
        // Already the study's setting.
        &[
            "run",
            "flux_b200",
            "--np",
            "8",
            "--read-threads",
            "8",
            "--coalesce-rgs",
            "1",
            "--memory-budget",
            "4GiB",
        ],
    ] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 2, "{stderr}");
        assert!(!stderr.contains("--coalesce-rgs 1,"), "{args:?}: {stderr}");
    }
}

/// Every figure of a budget refusal adds up, the in-process server's share among them
/// (issue 22, 11: the parts printed summed to 461 MiB beside a total of 601.77 MiB).
#[test]
fn a_budget_refusal_with_the_in_process_server_adds_up() {
    let (code, _, stderr) = run(&[
        "run",
        "flux_b200",
        "--files",
        "4",
        "--np",
        "2",
        "--read-threads",
        "2",
        "--prefetch",
        "1",
        "--coalesce-rgs",
        "1",
        "--memory-budget",
        "470MiB",
    ]);
    assert_eq!(code, 2, "{stderr}");
    // Figures in MiB up to the limit (the suggestion follows the first ';').
    let head = stderr.split(';').next().unwrap();
    let words: Vec<&str> = head.split_whitespace().collect();
    let mib: Vec<f64> = words
        .windows(2)
        .filter_map(|w| {
            let value: f64 = w[0].trim_start_matches('(').parse().ok()?;
            match w[1].trim_end_matches([',', ')']) {
                "MiB" => Some(value),
                "KiB" => Some(value / 1024.0),
                "GiB" => Some(value * 1024.0),
                _ => None,
            }
        })
        .collect();
    assert!(head.contains("for the in-process server"), "{stderr}");
    // total, one buffer, the pool, the parts after it, the limit.
    let (total, buffer, parts, limit) =
        (mib[0], mib[1], &mib[2..mib.len() - 1], mib[mib.len() - 1]);
    let sum: f64 = parts.iter().sum();
    assert!(
        (sum - total).abs() <= 0.006 * (parts.len() + 1) as f64,
        "{sum} ≠ {total}: {stderr}"
    );
    assert!((4.0 * buffer - parts[0]).abs() <= 0.03, "{stderr}");
    assert_eq!(limit, 470.0, "{stderr}");
}

/// `ringload plan` of a checkpoint workload (issue 23): DLIO's objects and totals, not a
/// dataset; the 70B checkpoint at its MLPerf CLOSED count.
#[test]
fn plan_of_llama3_70b_at_64_ranks_shows_dlios_objects_and_totals() {
    let (code, stdout, stderr) = run(&["plan", "llama3_70b", "--np", "64"]);
    assert_eq!(code, 0, "{stderr}");
    for line in [
        "ringload plan: llama3_70b (built-in llama3_70b), model llama3_70b, checkpoint workload",
        "  sharding    NP 64 = data 8 × tensor 8 × pipeline 1, ZeRO-3, mode default; fp16 model, fp32 optimizer",
        "  size        checkpoint_size_GB 911.21 (GiB, as DLIO reports it: model 130.18 + optimizer 781.03); 978,406,572,032 B",
        "  objects     128 per checkpoint under checkpoints/llama3_70b/global_epoch1_step<k>/",
        "  per rank    14.24 GiB (every rank)",
        "  ranks 0–63 (64), each: 2 objects, 14.24 GiB",
        "        2,184,120,320 B  zero_pp_rank_0_mp_rank_0_model_states.pt",
        "       13,103,482,368 B  zero_pp_rank_0_mp_rank_0_optim_states.pt",
        "  host 0: ranks 0–63, 911.21 GiB per checkpoint",
        "  read        2 parallel blocks of each object, ranged GETs of up to 128.00 MiB",
        "  buffers     64 ranks × max(2 parts, 2 blocks) × max(32.00 MiB, 128.00 MiB) = 16.00 GiB (a buffer per connection, registered)",
        "  ! checkpoint.fsync is a no-op for objects (as in DLIO)",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in\n{stdout}"
        );
    }
    // Machine-readable: DLIO's field name, every object.
    let plan = run_json(&["plan", "llama3_70b", "--np", "64", "--json"]);
    assert_eq!(plan["objects_per_checkpoint"], 128);
    assert_eq!(plan["ranks"].as_array().unwrap().len(), 64);
    assert_eq!(
        plan["ranks"][9][1]["name"],
        "zero_pp_rank_1_mp_rank_1_optim_states.pt"
    );
    let gib = plan["checkpoint_size_GB"].as_f64().unwrap();
    assert!((gib - 911.21).abs() < 0.005, "{gib}");
}

#[test]
fn checkpoint_plans_refuse_bad_process_counts_in_one_line() {
    let (code, stdout, stderr) = run(&["plan", "llama3_70b", "--np", "60"]);
    assert_eq!(code, 2, "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        "ringload: --np 60 is not a multiple of model.parallelism.tensor × pipeline (8 × 1 = \
         8), as DLIO's default checkpoint mode needs: use --np 56 or 64"
    );
    let (code, _, stderr) = run(&["plan", "llama3_8b", "--np", "8", "--part-size", "4MiB"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("outside S3's limits for parts"), "{stderr}");
    let (code, _, stderr) = run(&["plan", "llama3_tiny", "model.parallelism.pipeline=2"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("ZeRO stage 3 is not compatible with pipeline parallelism"),
        "{stderr}"
    );
}

#[test]
fn whole_object_workloads_plan_without_a_server() {
    // The catalog is computed from DLIO's names and sizes: nothing is listed or read.
    // unet3d's default shape buffers its largest object (~450 MiB) 16 times per rank, more
    // than a CI runner may have: a small shape of it here.
    for (args, expected) in [
        (
            &[
                "unet3d_b200",
                "--read-threads",
                "1",
                "reader.batch_size=1",
                "dataset.num_files_train=56",
            ][..],
            "format      npz",
        ),
        (&["retinanet_b200", "--np", "8"][..], "format      jpeg"),
    ] {
        let workload = args[0];
        let (code, stdout, stderr) = run(&[&["plan"][..], args].concat());
        assert_eq!(code, 0, "{workload}: {stderr}");
        for line in [
            expected,
            "objects     ",
            "steps       ",
            "GETs per step",
            "total       ",
        ] {
            assert!(
                stdout.contains(line),
                "{workload}: no {line:?} in\n{stdout}"
            );
        }
    }
    // With --dir the objects are listed, and too few are named with the fix.
    let d = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(&[
        "plan",
        "unet3d_b200",
        "--dir",
        d.path().to_str().unwrap(),
        "dataset.num_files_train=4",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("does not exist") || stderr.contains("no .npz objects under"),
        "{stderr}"
    );
}
