//! `ringload generate` for whole-object workloads: npz read back by numpy, TFRecord files
//! iterated by an independent reader from PyPI (`tfrecord`, with CRC-32C checked by the
//! `crc32c` package), raw jpeg objects of DLIO's sizes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{python_json, run, run_json};
use ringload::config::RawConfig;
use ringload::dataset::ObjectDataset;

/// numpy's view of every npz under a folder: shapes, dtypes, the zip's CRC check, and whether
/// numpy's own `savez` of the same arrays (as DLIO calls it) writes the same bytes.
const NPZ: &str = r#"
import io, json, os, sys, zipfile
import numpy as np
folder = sys.argv[1]
out = []
for name in sorted(os.listdir(folder)):
    path = os.path.join(folder, name)
    data = open(path, "rb").read()
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        members = [i.filename for i in z.infolist()]
    with np.load(path) as f:
        x, y = f["x"], f["y"]
    again = io.BytesIO()
    np.savez(again, x=x, y=[0] * x.shape[2])
    out.append({
        "name": name,
        "size": len(data),
        "members": members,
        "crc_error": bad,
        "x_shape": list(x.shape),
        "x_dtype": str(x.dtype),
        "y_shape": list(y.shape),
        "y_dtype": str(y.dtype),
        "y_zero": bool((y == 0).all()),
        "numpy_size": len(again.getvalue()),
        "same_bytes_as_numpy": again.getvalue() == data,
    })
print(json.dumps(out))
"#;

/// Every TFRecord file under a folder, through the `tfrecord` package's reader (Example
/// parsing by protobuf) and a walk over the framing that checks both masked CRC-32Cs.
const TFRECORD: &str = r#"
import json, os, struct, sys
import crc32c
from tfrecord.reader import tfrecord_loader, tfrecord_iterator
from tfrecord import example_pb2
def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
folder = sys.argv[1]
out = []
for name in sorted(os.listdir(folder)):
    path = os.path.join(folder, name)
    data = open(path, "rb").read()
    at, crc_ok, reserialized = 0, True, True
    while at < len(data):
        (n,) = struct.unpack("<Q", data[at:at + 8])
        (len_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        record = data[at + 12:at + 12 + n]
        (data_crc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        crc_ok &= len_crc == masked(data[at:at + 8]) and data_crc == masked(record)
        example = example_pb2.Example()
        example.ParseFromString(record)
        reserialized &= example.ByteSize() == n
        at += 16 + n
    records = list(tfrecord_loader(path, None, {"image": "byte", "size": "int"}))
    out.append({
        "name": name,
        "size": len(data),
        "records": len(records),
        "raw_records": sum(1 for _ in tfrecord_iterator(path)),
        "image_lengths": [len(r["image"]) for r in records],
        "sizes": [int(r["size"][0]) for r in records],
        "crc_ok": crc_ok,
        "walked_to_end": at == len(data),
        "protobuf_length_agrees": reserialized,
    })
print(json.dumps(out))
"#;

/// Writes a workload YAML and returns its path.
fn workload(dir: &Path, name: &str, dataset: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("model:\n  name: t\ndataset:\n{dataset}")).unwrap();
    path.display().to_string()
}

/// The dataset ringload computes for a workload file (its sizes are what `generate` writes).
fn dataset_of(path: &str) -> ObjectDataset {
    ringload::settings::Settings::resolve(&RawConfig::load(path).unwrap())
        .unwrap()
        .objects
        .expect("a whole-object workload")
}

#[test]
fn npz_files_are_what_numpy_savez_writes_with_the_drawn_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = workload(
        tmp.path(),
        "unet.yaml",
        "  format: npz\n  data_folder: data/unet3d/\n  num_files_train: 6\n  \
         num_samples_per_file: 2\n  record_length_bytes: 40000\n  \
         record_length_bytes_stdev: 15000\n",
    );
    let out = tmp.path().join("out");
    let summary = run_json(&[
        "generate",
        &yaml,
        "--output",
        out.to_str().unwrap(),
        "--jobs",
        "2",
        "--json",
    ]);
    assert_eq!(summary["files"], 6);
    let dataset = dataset_of(&yaml);
    let folder = out.join("data/unet3d/train");
    let files = python_json(NPZ, &[folder.to_str().unwrap()]);
    let files = files.as_array().unwrap();
    assert_eq!(files.len(), 6);
    let mut total = 0;
    let mut shapes = std::collections::BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        let i = i as u64;
        assert_eq!(f["name"], format!("img_{i}_of_6.npz"));
        assert_eq!(f["members"], serde_json::json!(["x.npy", "y.npy"]));
        assert!(f["crc_error"].is_null(), "{f}");
        let (d1, d2) = dataset.dims(i);
        assert_eq!(f["x_shape"], serde_json::json!([d1, d2, 2]), "file {i}");
        assert_eq!(f["x_dtype"], "uint8");
        assert_eq!(f["y_shape"], serde_json::json!([2]));
        assert_eq!(f["y_dtype"], "int64");
        assert_eq!(f["y_zero"], true);
        assert_eq!(f["size"], dataset.object_bytes(i));
        assert_eq!(
            f["numpy_size"], f["size"],
            "numpy's savez of the same arrays"
        );
        assert_eq!(f["same_bytes_as_numpy"], true, "file {i}");
        total += f["size"].as_u64().unwrap();
        shapes.insert((d1, d2));
    }
    assert!(
        shapes.len() > 1,
        "the stdev draws several shapes: {shapes:?}"
    );
    assert_eq!(summary["bytes_written"], total);
}

#[test]
fn tfrecord_files_are_iterated_by_an_independent_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = workload(
        tmp.path(),
        "cosmo.yaml",
        "  format: tfrecord\n  data_folder: data/cosmoflow\n  num_files_train: 3\n  \
         num_samples_per_file: 4\n  record_length_bytes: 5000\n  \
         record_length_bytes_stdev: 1000\n",
    );
    let out = tmp.path().join("out");
    run_json(&[
        "generate",
        &yaml,
        "--output",
        out.to_str().unwrap(),
        "--json",
    ]);
    let dataset = dataset_of(&yaml);
    let folder = out.join("data/cosmoflow/train");
    let files = python_json(TFRECORD, &[folder.to_str().unwrap()]);
    let files = files.as_array().unwrap();
    assert_eq!(files.len(), 3);
    for (i, f) in files.iter().enumerate() {
        let i = i as u64;
        assert_eq!(f["name"], format!("img_{i}_of_3.tfrecord"));
        assert_eq!(f["crc_ok"], true, "{f}");
        assert_eq!(f["walked_to_end"], true);
        assert_eq!(f["protobuf_length_agrees"], true);
        assert_eq!(f["records"], 4);
        assert_eq!(f["raw_records"], 4);
        let (d1, d2) = dataset.dims(i);
        assert_eq!(f["image_lengths"], serde_json::json!(vec![d1 * d2; 4]));
        // DLIO's `size` feature: ⌊√record_length⌋.
        assert_eq!(f["sizes"], serde_json::json!(vec![70; 4]));
        assert_eq!(f["size"], dataset.object_bytes(i));
    }
}

#[test]
fn jpeg_objects_are_raw_568_squared_for_retinanet() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = workload(
        tmp.path(),
        "retinanet.yaml",
        "  format: jpeg\n  data_folder: data/retinanet\n  num_files_train: 12\n  \
         record_length_bytes: 322957\n",
    );
    let out = tmp.path().join("out");
    let summary = run_json(&[
        "generate",
        &yaml,
        "--output",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(summary["bytes_written"], 12 * 322_624);
    for i in 0..12 {
        let path = out.join(format!("data/retinanet/train/img_{i:02}_of_12.jpeg"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 322_624, "{path:?}");
    }
}

#[test]
fn a_bad_format_names_the_key_and_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = workload(tmp.path(), "bad.yaml", "  format: hdf5\n");
    let out = tmp.path().join("out");
    let (code, _, stderr) = run(&["generate", &yaml, "--output", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("dataset.format = 'hdf5'") && stderr.contains("one of them"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing written");
}
