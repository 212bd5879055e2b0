//! `--loader dlio` on whole objects: what the DLIO fork's s3dlio loader does to the store — a
//! window of objects per reader, a HEAD before each object when the records are 16 MiB or
//! more, and objects of 32 MiB or more fetched as concurrent 4/8 MiB ranged GETs — counted by
//! the embedded server over real sockets, and the budget's refusal of s3dlio's default window
//! of unet3d objects.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{run, run_json};
use ringload::loader::ObjectFetch;
use ringload::server::Server;
use serde_json::Value;

/// unet3d with smaller objects (mean 40 MB: some over s3dlio's 32 MiB range threshold, some
/// under) so that the test stays quick.
const OVERRIDES: [&str; 4] = [
    "dataset.num_files_train=28",
    "dataset.record_length_bytes=40000000",
    "dataset.record_length_bytes_stdev=10000000",
    "train.epochs=1",
];

#[test]
fn the_dlio_loader_heads_then_splits_unet3d_objects_as_s3dlio_does() {
    let workload = ringload::cli::WorkloadArgs {
        workload: Some("unet3d_b200".into()),
        overrides: OVERRIDES.iter().map(|o| o.to_string()).collect(),
        files: None,
    };
    let store = ringload::commands::serve_store(&workload, None, false).unwrap();
    let server = Server::start(common::server_config(store)).unwrap();
    let endpoint = server.endpoint_url();
    let mut args = vec!["unet3d_b200", "--loader", "dlio", "--np", "1"];
    args.extend(OVERRIDES);
    args.push("storage.storage_options.prefetch_window=4");
    // The plan: every object it reads, with its size.
    let mut plan_args = vec!["plan"];
    plan_args.extend(&args);
    plan_args.push("--json");
    let plan = run_json(&plan_args);
    assert_eq!(
        plan["window_per_reader"], 4,
        "s3dlio's window, from prefetch_window"
    );
    assert_eq!(
        plan["object_fetch"]["head"], true,
        "40 MB records: DLIO turns the HEAD on"
    );
    let sizes: Vec<u64> = plan["ranks"][0]["readers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["gets"].as_array().unwrap().clone())
        .map(|g| g["len_bytes"].as_u64().unwrap())
        .collect();
    let rules = ObjectFetch::for_record_length(40_000_000).unwrap();
    let split = sizes.iter().filter(|&&s| rules.splits(s)).count();
    assert!(
        split > 0 && split < sizes.len(),
        "some objects over 32 MiB, some under: {sizes:?}"
    );
    let ranged: u64 = sizes
        .iter()
        .filter(|&&s| rules.splits(s))
        .map(|&s| rules.chunks(s).len() as u64)
        .sum();

    for engine in ["uring", "baseline"] {
        let before = server.stats();
        let mut run_args = vec!["run"];
        run_args.extend(&args);
        run_args.extend([
            "--endpoint",
            &endpoint,
            "--bucket",
            "ringload",
            "--engine",
            engine,
            "--json",
        ]);
        let (code, stdout, stderr) = run(&run_args);
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
        assert_eq!(s["engine"], engine);
        assert_eq!(
            s["requests"].as_u64().unwrap(),
            sizes.len() as u64,
            "objects"
        );
        assert_eq!(s["bytes_read"].as_u64().unwrap(), sizes.iter().sum::<u64>());
        let after = server.stats();
        // One HEAD per object; a ranged GET per 4 MiB chunk of each split object, a plain GET
        // of each other one; and the run's listing (one page, one bucket check).
        assert_eq!(after.heads - before.heads, sizes.len() as u64, "{engine}");
        assert_eq!(after.ranged_gets - before.ranged_gets, ranged, "{engine}");
        let plain = (sizes.len() - split) as u64;
        let listing =
            after.requests - before.requests - (after.heads - before.heads) - ranged - plain;
        assert!(listing <= 2, "{engine}: {after:?} {before:?}");
        // Every byte read came from the server (and the listing's XML besides).
        assert!(after.bytes_sent - before.bytes_sent >= s["bytes_read"].as_u64().unwrap());
    }

    // retinanet's 323 KB records: no HEAD, one plain GET per object, on either engine.
    let plan = run_json(&[
        "plan",
        "retinanet_b200",
        "--loader",
        "dlio",
        "dataset.num_files_train=24000",
        "--json",
    ]);
    assert_eq!(plan["object_fetch"]["head"], false);
    assert_eq!(plan["window_per_reader"], 64);
}

#[test]
fn s3dlios_default_window_of_unet3d_objects_is_refused_naming_the_largest_that_fits() {
    // The full unet3d_b200 dataset at one rank: 4 readers × 64 objects of up to 447 MiB.
    let (code, _, stderr) = run(&[
        "plan",
        "unet3d_b200",
        "--loader",
        "dlio",
        "--np",
        "1",
        "--memory-budget",
        "20GiB",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let largest: u32 = stderr
        .split("storage.storage_options.prefetch_window=")
        .nth(1)
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        stderr.contains("a window of 64 objects per reader does not fit"),
        "{stderr}"
    );
    // The window it names fits; one more does not.
    for (window, fits) in [(largest, true), (largest + 1, false)] {
        let (code, _, stderr) = run(&[
            "plan",
            "unet3d_b200",
            "--loader",
            "dlio",
            "--np",
            "1",
            "--memory-budget",
            "20GiB",
            &format!("storage.storage_options.prefetch_window={window}"),
        ]);
        assert_eq!(code == 0, fits, "window {window}: {stderr}");
    }
    // With 8 files a reader has 2 objects: the window holds those, whatever 64 says, and fits.
    let plan = run_json(&[
        "plan",
        "unet3d_b200",
        "--loader",
        "dlio",
        "--np",
        "1",
        "--memory-budget",
        "20GiB",
        "dataset.num_files_train=8",
        "--json",
    ]);
    assert_eq!(plan["window_per_reader"], 2);
    assert_eq!(plan["settings"]["prefetch_window"], 64);
}

#[test]
fn a_failed_range_is_retried_and_one_past_its_retries_fails_the_object_on_both_engines() {
    let workload = ringload::cli::WorkloadArgs {
        workload: Some("unet3d_b200".into()),
        overrides: OVERRIDES.iter().map(|o| o.to_string()).collect(),
        files: None,
    };
    let faulty = |spec: &str| {
        let store = ringload::commands::serve_store(&workload, None, false).unwrap();
        Server::start(ringload::server::ServerConfig {
            faults: ringload::server::faults::Faults::parse(spec, 1).unwrap(),
            ..common::server_config(store)
        })
        .unwrap()
    };
    // Every 25th request a 503 (HEADs and ranges alike), the 5th range cut short: retried.
    let server = faulty("503@any/every=25,cut=200000@rg/nth=5");
    let endpoint = server.endpoint_url();
    for engine in ["uring", "baseline"] {
        let (code, stdout, stderr) = run(&dlio_run(&endpoint, engine, &["--json"]));
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
        assert!(
            s["retries"].as_u64().unwrap() >= 2,
            "{engine}: {}",
            s["retries"]
        );
        assert_eq!(s["errors"], 0, "{engine}");
        assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}");
    }
    // Every range but each object's last answered 503, no retry: the run fails, saying so.
    let server = faulty("503@rg/every=1");
    let endpoint = server.endpoint_url();
    for engine in ["uring", "baseline"] {
        let (code, _, stderr) = run(&dlio_run(&endpoint, engine, &["--retries", "0"]));
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(stderr.contains("503"), "{engine}: {stderr}");
    }
}

/// Over https (the embedded server's TLS 1.3), both engines fetch as s3dlio does: on the
/// io_uring engine each range goes through its connection's staging area to its offset in the
/// object's buffer (a record beyond it would overwrite its neighbour), an object fetched whole
/// lands in place; a range cut short is retried, and every byte is checked (`--verify`).
#[test]
fn over_https_both_engines_fetch_heads_and_ranges_to_their_offsets_verified() {
    let workload = ringload::cli::WorkloadArgs {
        workload: Some("unet3d_b200".into()),
        overrides: OVERRIDES.iter().map(|o| o.to_string()).collect(),
        files: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let (tls, files) =
        ringload::server::tls::self_signed("127.0.0.1:0".parse().unwrap(), dir.path()).unwrap();
    let store = ringload::commands::serve_store(&workload, None, false).unwrap();
    let server = Server::start(ringload::server::ServerConfig {
        faults: ringload::server::faults::Faults::parse("cut=200000@rg/every=20", 1).unwrap(),
        tls: Some(tls),
        ..common::server_config(store)
    })
    .unwrap();
    let endpoint = server.endpoint_url();
    assert!(endpoint.starts_with("https://"), "{endpoint}");
    let ca = files.ca_pem.display().to_string();
    for engine in ["uring", "baseline"] {
        let extra = ["--json", "--verify", "--ca-bundle", &ca];
        let (code, stdout, stderr) = run(&dlio_run(&endpoint, engine, &extra));
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let s: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["outcome"], "completed", "{engine}: {stderr}");
        assert_eq!(s["engine"], engine, "{engine}: {stderr}");
        assert_eq!(s["errors"], 0, "{engine}");
        assert_eq!(s["bytes_read"], s["bytes_planned"], "{engine}");
        assert!(s["retries"].as_u64().unwrap() >= 1, "{engine}: {s}");
    }
}

/// `ringload run` of the small unet3d with `--loader dlio` (window 4) against `endpoint` on
/// `engine`, then `extra`.
fn dlio_run<'a>(endpoint: &'a str, engine: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "unet3d_b200", "--loader", "dlio", "--np", "1"];
    args.extend(OVERRIDES);
    args.extend([
        "storage.storage_options.prefetch_window=4",
        "--endpoint",
        endpoint,
        "--bucket",
        "ringload",
        "--engine",
        engine,
    ]);
    args.extend(extra);
    args
}
