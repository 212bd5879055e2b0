//! The time series of a run (`timeseries.csv`, summary.json's `timeseries`, `timeseries.html`)
//! against the embedded server over sockets: a pause of the whole server mid-run shows as
//! samples with no bytes while a GET is in flight, between samples with bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use ringload::server::Server;
use ringload::server::faults::Faults;
use serde_json::Value;

/// `timeseries.csv` as rows of named fields (empty fields as `None`).
fn csv_rows(text: &str) -> Vec<Vec<(String, Option<f64>)>> {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|line| {
            header
                .iter()
                .cloned()
                .zip(line.split(',').map(|v| v.parse::<f64>().ok()))
                .collect()
        })
        .collect()
}

fn field(row: &[(String, Option<f64>)], name: &str) -> Option<f64> {
    row.iter().find(|(n, _)| n == name).and_then(|(_, v)| *v)
}

#[test]
fn a_pause_of_the_whole_server_shows_as_samples_without_bytes() {
    // The fifth ranged GET (of 12, one per step) is held 3 s, with every other answer.
    let server = Server::start(ringload::server::ServerConfig {
        faults: Faults::parse("pause=3000@rg/nth=5", 1).unwrap(),
        ..common::server_config(common::virtual_flux(2))
    })
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let url = server.endpoint_url();
    let (code, _, stderr) = common::run(&[
        "run",
        "flux_small",
        "--files",
        "2",
        "--endpoint",
        &url,
        "--bucket",
        "ringload",
        "--np",
        "1",
        "--read-threads",
        "1",
        "--prefetch",
        "1",
        "--computation-time",
        "0.2",
        "--first-byte-timeout",
        "10",
        "--idle-timeout",
        "10",
        "--sample-interval",
        "0.5",
        "--output",
        out.path().to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "exit {code}: {stderr}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    let series = &summary["timeseries"];
    assert_eq!(series["interval_s"], 0.5);
    let samples = series["samples"].as_array().unwrap();
    let rows = csv_rows(&std::fs::read_to_string(out.path().join("timeseries.csv")).unwrap());
    // The CSV and summary.json hold the same samples.
    assert_eq!(rows.len(), samples.len());
    assert!(samples.len() >= 8, "{} samples: {series}", samples.len());
    for (row, sample) in rows.iter().zip(samples) {
        for name in ["bytes_read", "requests_completed", "in_flight", "retries"] {
            assert_eq!(
                field(row, name),
                sample[name].as_u64().map(|v| v as f64),
                "{name}"
            );
        }
        let t = field(row, "t_s").unwrap();
        assert!((t - sample["t_s"].as_f64().unwrap()).abs() < 1e-3);
        assert_eq!(
            field(row, "latency_p99_ms").is_some(),
            !sample["latency_p99_ms"].is_null()
        );
    }
    // Every byte the run reports, in the samples.
    let bytes: Vec<u64> = samples
        .iter()
        .map(|s| s["bytes_read"].as_u64().unwrap())
        .collect();
    assert_eq!(
        bytes.iter().sum::<u64>(),
        summary["bytes_read"].as_u64().unwrap()
    );
    // The pause: the longest run of samples with no bytes while a GET is in flight.
    let stalled: Vec<bool> = samples
        .iter()
        .map(|s| s["bytes_read"] == 0 && s["in_flight"].as_u64().unwrap() >= 1)
        .collect();
    let (mut best, mut at, mut run) = (0, 0, 0);
    for (i, &s) in stalled.iter().enumerate() {
        run = if s { run + 1 } else { 0 };
        if run > best {
            (best, at) = (run, i + 1 - run);
        }
    }
    let table: Vec<String> = samples
        .iter()
        .map(|s| format!("{} {} {}", s["t_s"], s["bytes_read"], s["in_flight"]))
        .collect();
    assert!(best >= 2, "no stall of 2 samples or more: {table:?}");
    // 3 s at 0.5 s a sample: at most 7 samples touch it.
    assert!(best <= 7, "{table:?}");
    assert!(
        bytes[..at].iter().any(|&b| b > 0),
        "nothing before: {table:?}"
    );
    assert!(
        bytes[at + best..].iter().any(|&b| b > 0),
        "nothing after: {table:?}"
    );
    // The GET held through the pause completed after it: its latency is above 3 s.
    let p99_max = samples
        .iter()
        .filter_map(|s| s["latency_p99_ms"].as_f64())
        .fold(0.0, f64::max);
    assert!(p99_max >= 2900.0, "{p99_max} ms");
    let html = std::fs::read_to_string(out.path().join("timeseries.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 2);
    assert!(html.contains("requests in flight"));
    assert_eq!(server.stats().faults.get("pause=3000@rg/nth=5"), Some(&1));
}

#[test]
fn a_bad_sample_interval_is_one_line() {
    for bad in ["0", "x", "-1", "7200"] {
        let (code, _, stderr) = common::run(&["run", "--sample-interval", bad]);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--sample-interval"), "{stderr}");
        // A negative number is refused by the parser of every flag, before ours.
        if bad != "-1" {
            assert!(stderr.contains("from 0.05 to 3600"), "{stderr}");
        }
    }
}
