//! `ringload generate` writes real Parquet: read back by pyarrow, an independent reader.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{python_json, run, run_json};

/// What pyarrow sees in a file: schema, row groups, writer settings, and how compressible the
/// values are. Prints JSON.
const INSPECT: &str = r#"
import json, sys, zlib
import pyarrow.parquet as pq
path = sys.argv[1]
f = pq.ParquetFile(path)
md = f.metadata
fields = []
for field in f.schema_arrow:
    t = field.type
    entry = {"name": field.name, "nullable": field.nullable, "type": str(t)}
    if hasattr(t, "list_size"):
        entry["list_size"] = t.list_size
        entry["value_name"] = t.value_field.name
        entry["value_nullable"] = t.value_field.nullable
        entry["value_type"] = str(t.value_type)
    fields.append(entry)
groups = []
for i in range(md.num_row_groups):
    rg = md.row_group(i)
    starts, ends, chunks = [], [], []
    for c in range(rg.num_columns):
        col = rg.column(c)
        start = col.data_page_offset
        if col.has_dictionary_page and col.dictionary_page_offset is not None:
            start = min(start, col.dictionary_page_offset)
        starts.append(start)
        ends.append(start + col.total_compressed_size)
        chunks.append({
            "compression": col.compression,
            "has_statistics": col.is_stats_set,
            "has_dictionary": col.has_dictionary_page,
            "encodings": sorted(col.encodings),
        })
    groups.append({"rows": rg.num_rows, "offset": min(starts), "end": max(ends), "chunks": chunks})
table = f.read()
t5 = table.column(0).chunk(0)
with open(path, "rb") as fh:
    fh.seek(groups[0]["offset"])
    sample = fh.read(1 << 20)
print(json.dumps({
    "fields": fields,
    "num_rows": md.num_rows,
    "row_groups": groups,
    "created_by": md.created_by,
    "read_rows": table.num_rows,
    "first_t5_len": len(t5[0]),
    "compress_ratio": len(zlib.compress(sample, 6)) / len(sample),
}))
"#;

fn generate(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let out = dir.to_str().unwrap();
    let mut args = vec!["generate", "flux_small", "--out", out, "--json"];
    args.extend_from_slice(extra);
    run_json(&args)
}

#[test]
fn flux_small_reads_back_with_pyarrow() {
    let dir = tempfile::tempdir().unwrap();
    let summary = generate(dir.path(), &[]);
    assert_eq!(summary["files"], 8);
    let train = dir.path().join("data/flux_small/train");
    let mut names: Vec<String> = std::fs::read_dir(&train)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let expected: Vec<String> = (0..8).map(|i| format!("train_{i:04}.parquet")).collect();
    assert_eq!(
        names, expected,
        "no temporary files left, nothing else written"
    );
    let on_disk: u64 = names
        .iter()
        .map(|n| std::fs::metadata(train.join(n)).unwrap().len())
        .sum();
    assert_eq!(summary["bytes_written"].as_u64().unwrap(), on_disk);

    let info = python_json(
        INSPECT,
        &[train.join("train_0003.parquet").to_str().unwrap()],
    );
    // The Flux schema: five non-nullable FixedSizeList<float32> columns, child field `element`.
    let widths = [
        ("t5_encodings", 8192),
        ("clip_encodings", 409),
        ("mean", 8232),
        ("logvar", 8232),
        ("timestamp", 7),
    ];
    let fields = info["fields"].as_array().unwrap();
    assert_eq!(fields.len(), widths.len());
    for (field, (name, width)) in fields.iter().zip(widths) {
        assert_eq!(field["name"], name);
        assert_eq!(field["nullable"], false, "{name}");
        assert_eq!(field["list_size"], width, "{name}");
        assert_eq!(field["value_name"], "element", "{name}");
        assert_eq!(field["value_nullable"], false, "{name}");
        assert_eq!(field["value_type"], "float", "{name}");
    }
    // 288 rows in six row groups of 48, back to back from byte 4.
    assert_eq!(info["num_rows"], 288);
    assert_eq!(info["read_rows"], 288);
    assert_eq!(info["first_t5_len"], 8192);
    let groups = info["row_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 6);
    assert_eq!(groups[0]["offset"], 4);
    for pair in groups.windows(2) {
        assert_eq!(pair[0]["end"], pair[1]["offset"]);
    }
    for group in groups {
        assert_eq!(group["rows"], 48);
        for chunk in group["chunks"].as_array().unwrap() {
            assert_eq!(chunk["compression"], "UNCOMPRESSED");
            assert_eq!(chunk["has_statistics"], false);
            assert_eq!(chunk["has_dictionary"], false);
            let encodings: Vec<&str> = chunk["encodings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap())
                .collect();
            assert!(encodings.contains(&"PLAIN"), "{encodings:?}");
            assert!(
                !encodings.iter().any(|e| e.contains("DICT")),
                "{encodings:?}"
            );
        }
    }
    assert!(
        info["created_by"]
            .as_str()
            .unwrap()
            .starts_with("parquet-rs")
    );
    // Each column chunk's XXH3-64 is in the footer, as an independent hasher computes it.
    let hashes = python_json(
        common::CHUNK_HASHES,
        &[train.join("train_0003.parquet").to_str().unwrap()],
    );
    assert_eq!(hashes["groups"], 6);
    assert_eq!(hashes["matched"], 30, "{hashes}");
    assert_eq!(hashes["mismatched"], serde_json::json!([]));

    // Random values: zlib cannot shrink them.
    let ratio = info["compress_ratio"].as_f64().unwrap();
    assert!(ratio > 0.99, "compressible data: ratio {ratio}");

    // The plan reads the same row-group ranges from the footers that pyarrow reports, and they
    // equal the layout computed without any file.
    let from_dir = run_json(&[
        "plan",
        "flux_small",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    let computed = run_json(&["plan", "flux_small", "--json"]);
    let file3 = &from_dir["catalog"]["files"][3];
    assert_eq!(file3["key"], "data/flux_small/train/train_0003.parquet");
    for (span, group) in file3["row_groups"].as_array().unwrap().iter().zip(groups) {
        assert_eq!(span["offset"], group["offset"]);
        assert_eq!(
            span["offset"].as_u64().unwrap() + span["len_bytes"].as_u64().unwrap(),
            group["end"].as_u64().unwrap()
        );
    }
    assert_eq!(from_dir["catalog"]["files"], computed["catalog"]["files"]);
    assert_eq!(from_dir["ranks"], computed["ranks"]);
}

#[test]
fn files_are_seeded_distinct_and_reproducible() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    generate(a.path(), &["--files", "2", "--jobs", "1"]);
    generate(b.path(), &["--files", "2", "--jobs", "2"]);
    let read = |dir: &Path, i: usize| {
        std::fs::read(dir.join(format!("data/flux_small/train/train_{i:04}.parquet"))).unwrap()
    };
    assert!(
        read(a.path(), 0) == read(b.path(), 0),
        "same seed, same bytes"
    );
    assert!(read(a.path(), 0) != read(a.path(), 1), "files differ");
    let c = tempfile::tempdir().unwrap();
    generate(c.path(), &["--files", "1", "train.seed=7"]);
    assert!(
        read(a.path(), 0) != read(c.path(), 0),
        "another seed, other bytes"
    );
    assert_eq!(read(a.path(), 0).len(), read(c.path(), 0).len());
}

#[test]
fn generate_refuses_what_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let table: &[(&[&str], &str)] = &[
        (
            &[
                "generate",
                "flux_small",
                "--out",
                out,
                "dataset.compression=snappy",
            ],
            "ringload writes uncompressed Parquet",
        ),
        (
            &["generate", "flux_small", "--out", blocker.to_str().unwrap()],
            "choose another --output",
        ),
        (
            &[
                "generate",
                "flux_small",
                "--out",
                out,
                "dataset.format=hdf5",
            ],
            "or whole objects (npz, jpeg, tfrecord); set dataset.format to one of them",
        ),
    ];
    for (args, expected) in table {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    }
}
