//! `ringload serve WORKLOAD` for whole-object workloads (npz, jpeg, tfrecord): the virtual
//! store serves DLIO's names and sizes without a disk, lists them in key order 1,000 per page
//! as S3 does, and serves each object's bytes (whole, ranged, HEAD) as the dataset makes them —
//! checked with boto3 and with the content generator written again in Python from
//! docs/checkpoints.md's description; retinanet's 1,170,301 objects list page by page in a
//! small, bounded RSS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use ringload::dataset::{DLIO_GENERATION_SEED, Format, ObjectDataset};

/// A DLIO-style workload file of a jpeg dataset of `files` objects.
fn jpeg_workload(dir: &Path, files: u64) -> String {
    let path = dir.join("objects.yaml");
    std::fs::write(
        &path,
        format!(
            "model:\n  name: retinanet\nframework: pytorch\nworkflow:\n  train: true\n\
             dataset:\n  data_folder: data/retinanet/\n  format: jpeg\n  \
             num_files_train: {files}\n  num_samples_per_file: 1\n  \
             record_length_bytes: 322957\n  record_length_bytes_stdev: 0\n\
             reader:\n  batch_size: 24\n  read_threads: 8\n\
             storage:\n  storage_type: s3\n  storage_root: objects\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// What the server should serve for that workload, computed in-process.
fn jpeg_dataset(files: u64) -> ObjectDataset {
    ObjectDataset {
        format: Format::Jpeg,
        train_prefix: "data/retinanet/train/".into(),
        num_files: files,
        samples_per_file: 1,
        record_length: 322_957.0,
        record_length_stdev: 0.0,
        seed: DLIO_GENERATION_SEED,
        randomize: true,
        content: Default::default(),
    }
}

/// boto3 against the served dataset: paging (V2 and V1), names, sizes, HEAD, GET whole and
/// ranged (bytes written to OUT for the test to compare with `read_at`), the errors of a
/// read-only store. DLIO's names and the content are written here independently.
const OBJECTS_PY: &str = concat!(
    include_str!("py/content.py"),
    r#"
import json, sys
import numpy as np
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
endpoint, bucket, n, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
prefix = "data/retinanet/train/"
# DLIO's names: img_<i zero-padded to len(str(N))>_of_<N>.jpeg
names = [prefix + "img_{}_of_{}.jpeg".format(str(i).zfill(len(str(n))), n) for i in range(n)]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                  region_name="us-east-1", config=Config(retries={"total_max_attempts": 1}))
def error_of(f):
    try:
        f()
        return None
    except ClientError as e:
        return [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]
out = {"pages": [], "keys_are_dlios": False, "sizes": [], "etags": {}}
keys, kw = [], {}
while True:
    r = s3.list_objects_v2(Bucket=bucket, **kw)
    page = r.get("Contents", [])
    out["pages"].append([len(page), r["KeyCount"], r["MaxKeys"], r["IsTruncated"]])
    keys += [o["Key"] for o in page]
    out["sizes"] = sorted(set(out["sizes"]) | {o["Size"] for o in page})
    for o in page[:2]:
        out["etags"][o["Key"]] = o["ETag"]
    if not r["IsTruncated"]:
        break
    kw = {"ContinuationToken": r["NextContinuationToken"]}
out["keys_are_dlios"] = keys == names
# MaxKeys above S3's cap is capped; StartAfter from the middle; a prefix; a delimiter.
r = s3.list_objects_v2(Bucket=bucket, MaxKeys=5000, StartAfter=names[1199])
out["capped"] = [r["KeyCount"], r["MaxKeys"], r["Contents"][0]["Key"] == names[1200]]
r = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "img_01")
out["prefix"] = [k["Key"] for k in r["Contents"]] == names[100:200]
r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", Prefix="data/")
out["delimiter"] = [p["Prefix"] for p in r.get("CommonPrefixes", [])] + [r["KeyCount"]]
out["past_end"] = s3.list_objects_v2(Bucket=bucket, StartAfter=names[-1])["KeyCount"]
# ListObjects (V1): markers.
v1, marker = [], ""
while True:
    r = s3.list_objects(Bucket=bucket, Marker=marker)
    v1.append(len(r.get("Contents", [])))
    if not r["IsTruncated"]:
        break
    marker = r["Contents"][-1]["Key"]
out["v1_pages"] = v1
# HEAD, GET whole and ranged.
key = names[1234]
h = s3.head_object(Bucket=bucket, Key=key)
out["head"] = [h["ContentLength"], h["ETag"], "LastModified" in h]
whole = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
rng = s3.get_object(Bucket=bucket, Key=key, Range="bytes=100000-200000")
part = rng["Body"].read()
out["range"] = [rng["ContentRange"], len(part)]
out["independent"] = [whole == gen(key, 0, len(whole)), part == gen(key, 100000, 100001)]
open(out_dir + "/whole", "wb").write(whole)
open(out_dir + "/part", "wb").write(part)
out["etag_again"] = s3.head_object(Bucket=bucket, Key=names[0])["ETag"]
out["missing"] = error_of(lambda: s3.head_object(Bucket=bucket, Key=prefix + "img_1_of_2500.jpeg"))
out["no_bucket"] = error_of(lambda: s3.list_objects_v2(Bucket="other"))
out["put"] = error_of(lambda: s3.put_object(Bucket=bucket, Key=names[0], Body=b"x"))
print(json.dumps(out))
"#
);

#[test]
fn a_jpeg_workload_is_served_listed_in_pages_of_1000_and_read_as_dlio_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let workload = jpeg_workload(dir.path(), 2500);
    let served = common::spawn_serve(&[&workload, "--threads", "2"]);
    let out = common::python_json(
        OBJECTS_PY,
        &[
            &served.endpoint,
            "objects",
            "2500",
            dir.path().to_str().unwrap(),
        ],
    );
    let d = jpeg_dataset(2500);
    assert_eq!(
        out["pages"],
        serde_json::json!([
            [1000, 1000, 1000, true],
            [1000, 1000, 1000, true],
            [500, 500, 1000, false]
        ])
    );
    assert_eq!(out["keys_are_dlios"], true);
    // 568 × 568 raw bytes, not the configured 322,957 (DLIO's ⌊√L⌋²).
    assert_eq!(out["sizes"], serde_json::json!([322_624]));
    assert_eq!(out["capped"], serde_json::json!([1000, 1000, true]));
    assert_eq!(out["prefix"], true);
    assert_eq!(out["delimiter"], serde_json::json!(["data/retinanet/", 1]));
    assert_eq!(out["past_end"], 0);
    assert_eq!(out["v1_pages"], serde_json::json!([1000, 1000, 500]));
    let listed_etag = &out["etags"][d.key(0)];
    assert_eq!(
        &out["etag_again"], listed_etag,
        "HEAD's ETag is the listing's"
    );
    assert_eq!(out["head"][0], 322_624);
    assert_eq!(out["head"][2], true);
    assert_eq!(
        out["range"],
        serde_json::json!(["bytes 100000-200000/322624", 100_001])
    );
    assert_eq!(out["independent"], serde_json::json!([true, true]));
    // The bytes are the dataset's read_at.
    let mut want = vec![0u8; 322_624];
    d.read_at(1234, 0, &mut want);
    assert!(std::fs::read(dir.path().join("whole")).unwrap() == want);
    assert!(std::fs::read(dir.path().join("part")).unwrap() == want[100_000..=200_000]);
    assert_eq!(out["missing"], serde_json::json!(["404", 404]));
    assert_eq!(out["no_bucket"], serde_json::json!(["NoSuchBucket", 404]));
    assert_eq!(
        out["put"],
        serde_json::json!(["MethodNotAllowed", 405]),
        "a read-only store refuses writes"
    );
}

/// The middle and the last page of retinanet's listing with boto3, then every page walked
/// with plain HTTP (continuation tokens, key order checked), and the server's RSS.
const MILLION_PY: &str = r#"
import json, re, sys, urllib.parse, urllib.request
import boto3
endpoint, bucket, n, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
prefix = "data/retinanet/train/"
name = lambda i: prefix + "img_{}_of_{}.jpeg".format(str(i).zfill(len(str(n))), n)
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                  region_name="us-east-1")
def status():
    fields = dict(l.split(":", 1) for l in open("/proc/%s/status" % pid))
    return {k: int(fields[k].split()[0]) * 1024 for k in ["VmRSS", "VmHWM"]}
out = {"before": status()}
mid = n // 2
r = s3.list_objects_v2(Bucket=bucket, StartAfter=name(mid))
c = r["Contents"]
out["middle"] = [r["KeyCount"], r["IsTruncated"], c[0]["Key"] == name(mid + 1),
                 c[-1]["Key"] == name(mid + 1000), sorted({o["Size"] for o in c})]
r = s3.list_objects_v2(Bucket=bucket, StartAfter=name(n - 501))
c = r["Contents"]
out["last"] = [r["KeyCount"], r["IsTruncated"], c[0]["Key"] == name(n - 500),
               c[-1]["Key"] == name(n - 1)]
keys_re = re.compile(r"<Key>([^<]*)</Key>")
token_re = re.compile(r"<NextContinuationToken>([^<]*)</NextContinuationToken>")
count, pages, in_order, last, token = 0, 0, True, "", None
while True:
    q = {"list-type": "2"}
    if token:
        q["continuation-token"] = token
    body = urllib.request.urlopen(endpoint + "/" + bucket + "?" + urllib.parse.urlencode(q)).read().decode()
    keys = keys_re.findall(body)
    pages += 1
    in_order = in_order and (not keys or keys[0] > last) and keys == sorted(keys)
    if keys:
        last = keys[-1]
    count += len(keys)
    m = token_re.search(body)
    if not m:
        break
    token = m.group(1)
out["walk"] = [count, pages, in_order, last == name(n - 1)]
out["after"] = status()
print(json.dumps(out))
"#;

#[test]
fn retinanets_million_objects_list_page_by_page_in_a_small_rss() {
    let n: u64 = 1_170_301;
    let dir = tempfile::tempdir().unwrap();
    let workload = jpeg_workload(dir.path(), n);
    let served = common::spawn_serve(&[&workload, "--threads", "2"]);
    let pid = served.child.id().to_string();
    let out = common::python_json(
        MILLION_PY,
        &[&served.endpoint, "objects", &n.to_string(), &pid],
    );
    assert_eq!(
        out["middle"],
        serde_json::json!([1000, true, true, true, [322_624]])
    );
    assert_eq!(out["last"], serde_json::json!([500, false, true, true]));
    assert_eq!(out["walk"], serde_json::json!([n, 1171, true, true]));
    // Holding the listing would take at least its keys and ETags (~75 bytes of text per
    // object: ~88 MB) and several times that as structs; the store holds nothing per object,
    // so the server's peak RSS over the whole walk stays that of an idle server plus one page
    // in flight (a few MB). 48 MiB is well above that and well below any full listing.
    let bound = 48u64 << 20;
    for when in ["before", "after"] {
        let peak = out[when]["VmHWM"].as_u64().unwrap();
        assert!(
            peak < bound,
            "{when}: the server's peak RSS is {peak} bytes, over {bound}: {out}"
        );
    }
}

#[test]
fn serve_refuses_subfolders_and_a_zero_record_length_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let workload = jpeg_workload(dir.path(), 10);
    for (bad, key) in [
        (
            "dataset.num_subfolders_train=2",
            "dataset.num_subfolders_train",
        ),
        (
            "dataset.record_length_bytes=0",
            "dataset.record_length_bytes",
        ),
        ("dataset.data_folder=../up", "dataset.data_folder"),
    ] {
        let (code, _, stderr) = common::run(&["serve", "--listen", "127.0.0.1:0", &workload, bad]);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(stderr.contains(key), "{bad}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{bad}: {stderr}");
    }
}
