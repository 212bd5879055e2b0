//! DLRM (MLPerf Storage v3.0's `dlrm_b200`): `ringload generate` writes its 200 mixed-type
//! columns as pyarrow reads them, and a run reads exactly the column chunks of the 40
//! `read: true` columns — the extents pyarrow's own metadata gives — one ranged GET per chunk,
//! on both engines, from the embedded default, `serve --dir` and garage (a third-party server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{output, python_json, ringload};

/// Two files of two 6,144-row groups: small, and every column chunk of DLRM's shape.
const SHAPE: [&str; 2] = [
    "dataset.num_files_train=2",
    "dataset.num_samples_per_file=12288",
];

/// What pyarrow sees: the schema's types, the row groups' rows, and the byte extents of the
/// chunks of the columns named read: true in the workload (`sys.argv[2]`, comma-separated),
/// every file's. Prints JSON.
const EXTENTS: &str = r#"
import json, sys, glob, os
import pyarrow.parquet as pq
root, read = sys.argv[1], set(sys.argv[2].split(","))
out = {"files": [], "extents": []}
for path in sorted(glob.glob(os.path.join(root, "*.parquet"))):
    f = pq.ParquetFile(path)
    md = f.metadata
    out["files"].append({
        "name": os.path.basename(path),
        "types": {field.name: str(field.type) for field in f.schema_arrow},
        "rows": [md.row_group(i).num_rows for i in range(md.num_row_groups)],
        "columns": md.num_columns,
    })
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema not in read:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            out["extents"].append([os.path.basename(path), start, col.total_compressed_size])
    f.read(columns=sorted(read))
print(json.dumps(out))
"#;

/// The 40 columns dlrm_b200.yaml marks read: true, and every column's type as the YAML gives it.
fn yaml_columns() -> (Vec<String>, Vec<(String, String)>) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/dlrm_b200.yaml"),
    )
    .unwrap();
    let (mut read, mut all) = (Vec::new(), Vec::new());
    let mut name = String::new();
    let mut dtype = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("- name: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("dtype: ") {
            dtype = d.to_string();
        } else if let Some(r) = line.strip_prefix("read: ") {
            all.push((name.clone(), dtype.clone()));
            if r == "true" {
                read.push(name.clone());
            }
        }
    }
    (read, all)
}

/// The ranged GETs of data (not the footers' suffix reads) `serve --request-log` recorded:
/// `(file name, first byte, length)`.
fn logged_ranges(log: &Path) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut ranges = Vec::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let Some(range) = r["range"].as_str().and_then(|r| r.strip_prefix("bytes=")) else {
            continue;
        };
        if range.starts_with('-') || r["method"] != "GET" {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
        let name = r["path"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        ranges.push((name, a, b - a + 1));
    }
    ranges
}

fn expected(pyarrow: &serde_json::Value) -> (BTreeSet<(String, u64, u64)>, u64) {
    let extents: BTreeSet<(String, u64, u64)> = pyarrow["extents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e[0].as_str().unwrap().to_string(),
                e[1].as_u64().unwrap(),
                e[2].as_u64().unwrap(),
            )
        })
        .collect();
    let bytes = extents.iter().map(|e| e.2).sum();
    (extents, bytes)
}

/// A run's summary: it completes, meeting its AU target (exit 0) or not (exit 1: two steps).
fn summary(cmd: &mut std::process::Command) -> serde_json::Value {
    let (code, stdout, stderr) = output(cmd);
    assert!(code == 0 || code == 1, "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// `ringload run dlrm_b200` at [`SHAPE`] with `--verify` and `args`.
fn dlrm_run(args: &[&str]) -> std::process::Command {
    let mut cmd = ringload();
    cmd.args(["run", "dlrm_b200", SHAPE[0], SHAPE[1], "--verify"])
        .args(args);
    cmd
}

/// A run's figures: every planned byte read, as many ranged GETs as chunks, all verified.
fn assert_read_chunks(s: &serde_json::Value, bytes: u64, chunks: usize, what: &str) {
    assert_eq!(s["outcome"], "completed", "{what}: {s}");
    assert_eq!(s["bytes_read"], bytes, "{what}: bytes read");
    assert_eq!(s["bytes_planned"], bytes, "{what}: bytes planned");
    assert_eq!(
        s["requests_by_kind"]["ranged_get"], chunks as u64,
        "{what}: one ranged GET per column chunk read"
    );
}

#[test]
fn generated_dlrm_files_are_what_pyarrow_reads_and_a_run_fetches_exactly_the_read_columns_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ringload");
    let (code, _, stderr) = common::run(&[
        "generate",
        "dlrm_b200",
        SHAPE[0],
        SHAPE[1],
        "--output",
        root.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (read, all) = yaml_columns();
    assert_eq!((read.len(), all.len()), (40, 200));
    let train = root.join("data/dlrm/train");
    let pyarrow = python_json(EXTENTS, &[train.to_str().unwrap(), &read.join(",")]);
    let arrow_type = |dtype: &str| match dtype {
        "float16" => "halffloat",
        "float32" => "float",
        "float64" => "double",
        "int8" => "int8",
        other => panic!("a dtype the YAML should not have: {other}"),
    };
    let files = pyarrow["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    for file in files {
        assert_eq!(file["columns"], 200);
        assert_eq!(
            file["rows"],
            serde_json::json!([6144, 6144]),
            "row groups of 6,144"
        );
        for (name, dtype) in &all {
            assert_eq!(file["types"][name], arrow_type(dtype), "column {name}");
        }
    }
    let (extents, bytes) = expected(&pyarrow);
    assert_eq!(extents.len(), 2 * 2 * 40, "40 chunks per row group");

    // The embedded default serves the same layout: the same bytes, chunk by chunk.
    for engine in ["uring", "baseline"] {
        let s = summary(&mut dlrm_run(&["--engine", engine, "--json"]));
        assert_read_chunks(&s, bytes, extents.len(), &format!("embedded {engine}"));
        assert_eq!(s["verify"]["unchecked_bytes"], 0, "{s}");
    }

    // `serve --dir` over the generated files: the ranges on the wire are pyarrow's extents.
    for engine in ["uring", "baseline"] {
        let log = dir.path().join(format!("requests-{engine}.jsonl"));
        let server = common::spawn_serve(&[
            "--dir",
            dir.path().to_str().unwrap(),
            "--request-log",
            log.to_str().unwrap(),
        ]);
        let endpoint = ["--endpoint", &server.endpoint];
        let s = summary(dlrm_run(&["--engine", engine, "--json"]).args(endpoint));
        assert_read_chunks(&s, bytes, extents.len(), &format!("serve --dir {engine}"));
        drop(server);
        let logged = logged_ranges(&log);
        assert_eq!(
            logged.len(),
            extents.len(),
            "{engine}: one request per chunk"
        );
        let logged: BTreeSet<(String, u64, u64)> = logged.into_iter().collect();
        assert_eq!(
            logged, extents,
            "{engine}: the ranges are the read columns' chunks"
        );
    }

    // pyarrow's pre-buffering form merges what its 8 KiB hole rule merges: fewer requests,
    // the same chunks (and nothing else: no hole here is that small).
    let s = summary(&mut dlrm_run(&[
        "storage.storage_options.column_gets=coalesced",
        "--json",
    ]));
    assert_eq!(s["bytes_read"], bytes, "{s}");
    // Arrow's rule on pyarrow's extents, file by file: a hole of at most 8 KiB is read through.
    let mut merged = 0u64;
    let mut last: Option<(String, u64)> = None;
    for (file, offset, len) in &extents {
        match &last {
            Some((f, end)) if f == file && offset - end <= 8192 => {}
            _ => merged += 1,
        }
        last = Some((file.clone(), offset + len));
    }
    assert!(merged < extents.len() as u64, "{merged}");
    assert_eq!(s["requests_by_kind"]["ranged_get"], merged, "{s}");

    // A failing store and TLS: a chunk answered 503, one cut after 100 bytes and one whose
    // byte is flipped (a corrupt store) — the first two retried and landing where they belong
    // (`--verify` checks every chunk where it landed), the third failing the run in one line.
    let certs = dir.path().join("tls");
    for engine in ["uring", "baseline"] {
        let server = common::spawn_serve(&[
            "--dir",
            dir.path().to_str().unwrap(),
            "--tls-self-signed",
            certs.to_str().unwrap(),
            "--faults",
            "503@rg/nth=7,cut=100@rg/nth=23",
        ]);
        let ca = certs.join("ca.pem");
        let tls = [
            "--endpoint",
            &server.endpoint,
            "--ca-bundle",
            ca.to_str().unwrap(),
        ];
        let s = summary(dlrm_run(&["--engine", engine, "--json"]).args(tls));
        assert_read_chunks(
            &s,
            bytes,
            extents.len(),
            &format!("https, faults, {engine}"),
        );
        assert_eq!(s["retries"], 2, "{engine}: {s}");
        assert_eq!(s["verify"]["hashed_bytes"], bytes, "{engine}");
        drop(server);
        let server = common::spawn_serve(&[
            "--dir",
            dir.path().to_str().unwrap(),
            "--faults",
            "flip=5000@rg/nth=9",
        ]);
        let endpoint = ["--endpoint", &server.endpoint];
        let (code, _, stderr) = output(dlrm_run(&["--engine", engine]).args(endpoint));
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(stderr.contains("XXH3-64"), "{engine}: {stderr}");
    }
}

#[test]
fn dlrm_chunks_are_read_from_garage() {
    let Some(g) = common::garage() else { return };
    let folder = "dlrm-chunks";
    let data_folder = format!("dataset.data_folder={folder}");
    let (code, _, stderr) = g.ringload(&[
        "generate",
        "dlrm_b200",
        SHAPE[0],
        SHAPE[1],
        &data_folder,
        "--endpoint",
        &g.endpoint,
        "--bucket",
        &g.bucket,
    ]);
    assert_eq!(code, 0, "{stderr}");
    // The same files in a directory, for pyarrow: the layout does not depend on the values.
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = common::run(&[
        "generate",
        "dlrm_b200",
        SHAPE[0],
        SHAPE[1],
        &data_folder,
        "--output",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (read, _) = yaml_columns();
    let train = dir.path().join(folder).join("train");
    let pyarrow = python_json(EXTENTS, &[train.to_str().unwrap(), &read.join(",")]);
    let (extents, bytes) = expected(&pyarrow);
    for engine in ["uring", "baseline"] {
        let mut cmd = dlrm_run(&[&data_folder, "--engine", engine, "--json"]);
        cmd.args(["--bucket", &g.bucket])
            .env("AWS_ENDPOINT_URL", &g.endpoint)
            .env("AWS_ACCESS_KEY_ID", &g.key)
            .env("AWS_SECRET_ACCESS_KEY", &g.secret)
            .env("AWS_REGION", "us-east-1");
        let s = summary(&mut cmd);
        assert_read_chunks(&s, bytes, extents.len(), &format!("garage {engine}"));
    }
}
