//! The embedded S3 server against real third-party clients: curl's own SigV4 signer and boto3
//! (installed from PyPI by scripts/install-test-deps), over real sockets, with the server
//! started in-process on port 0. A virtual file is checked with pyarrow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{python, python_json, run};
use ringload::cli::WorkloadArgs;
use ringload::commands::virtual_store;
use ringload::server::dir::DirStore;
use ringload::server::{Credentials, Server, ServerConfig, Store};

const ACCESS_KEY: &str = "GK0123456789abcdef01234567";
const SECRET_KEY: &str = "c2VjcmV0LW9mLXRoZS1yaW5nbG9hZC10ZXN0LWtleQ";
const BUCKET: &str = "test-bucket";

fn start(store: Store, signed: bool) -> Server {
    start_throttled(store, signed, None)
}

fn start_throttled(store: Store, signed: bool, throttle_bytes_per_s: Option<u64>) -> Server {
    Server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store,
        credentials: signed.then(|| Credentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
        }),
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s,
        faults: Default::default(),
        tls: None,
        max_connections: ringload::server::DEFAULT_MAX_CONNECTIONS,
    })
    .unwrap()
}

/// A directory server with one bucket.
fn dir_server(signed: bool) -> (tempfile::TempDir, Server) {
    let root = tempfile::tempdir().unwrap();
    let store = DirStore::new(root.path()).unwrap();
    store.create_bucket(BUCKET).unwrap();
    let server = start(Store::Dir(store), signed);
    (root, server)
}

/// The default small Flux workload, virtual, with `files` files, in bucket "ringload".
fn virtual_server(files: u64) -> Server {
    let workload = WorkloadArgs {
        workload: Some("flux_small".into()),
        overrides: vec![],
        files: Some(files),
    };
    start(
        Store::Virtual(virtual_store(&workload, None, false).unwrap()),
        false,
    )
}

const VIRTUAL_KEY: &str = "ringload/data/flux_small/train/train_0000.parquet";

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

impl Reply {
    /// The S3 error code in the body.
    fn code(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        match (text.find("<Code>"), text.find("</Code>")) {
            (Some(a), Some(b)) => text[a + 6..b].to_string(),
            _ => String::new(),
        }
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Runs curl; `args` are curl's after the common ones.
fn curl(args: &[&str]) -> Reply {
    let tmp = tempfile::tempdir().unwrap();
    let (body, headers) = (tmp.path().join("body"), tmp.path().join("headers"));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-o"])
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Reply {
        status: String::from_utf8_lossy(&out.stdout).trim().parse().unwrap(),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

/// curl's SigV4 signer with `key:secret`, plus the payload header strict servers need.
fn signed_by(user: &str) -> Vec<String> {
    [
        "--aws-sigv4",
        "aws:amz:us-east-1:s3",
        "--user",
        user,
        "-H",
        "x-amz-content-sha256: UNSIGNED-PAYLOAD",
    ]
    .map(String::from)
    .to_vec()
}

fn signed_curl(extra: &[&str]) -> Reply {
    let mut args = signed_by(&format!("{ACCESS_KEY}:{SECRET_KEY}"));
    args.extend(extra.iter().map(|s| s.to_string()));
    curl(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut fill = ringload::datagen::Fill::for_file(seed, 0);
    let mut out = vec![0; n];
    fill.fill(&mut out);
    out
}

#[test]
fn curl_signed_put_ranged_and_suffix_gets_head_list_delete() {
    let (root, server) = dir_server(true);
    let url = format!("{}/{BUCKET}/dir/object.bin", server.endpoint_url());
    let data = random_bytes(1 << 20, 1);
    let file = root.path().join("upload.bin");
    std::fs::write(&file, &data).unwrap();

    let put = signed_curl(&["-T", file.to_str().unwrap(), &url]);
    assert_eq!(put.status, 200, "{put:?}");
    let etag = put.header("etag").unwrap();

    let get = signed_curl(&["-r", "10-19", &url]);
    assert_eq!(get.status, 206);
    assert_eq!(get.body, &data[10..20]);
    assert_eq!(get.header("content-range").unwrap(), "bytes 10-19/1048576");
    assert_eq!(get.header("etag").unwrap(), etag);

    let suffix = signed_curl(&["-r", "-8", &url]);
    assert_eq!(suffix.status, 206);
    assert_eq!(suffix.body, &data[data.len() - 8..]);
    let open_ended = signed_curl(&["-r", "1048570-", &url]);
    assert_eq!(open_ended.body, &data[1_048_570..]);
    let whole = signed_curl(&[&url]);
    assert_eq!((whole.status, whole.body.len()), (200, data.len()));
    assert!(whole.body == data);

    let head = signed_curl(&["-I", &url]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length").unwrap(), "1048576");
    assert_eq!(head.header("etag").unwrap(), etag);

    let past_end = signed_curl(&["-r", "2000000-", &url]);
    assert_eq!(
        (past_end.status, past_end.code()),
        (416, "InvalidRange".into())
    );

    let list = signed_curl(&[&format!(
        "{}/{BUCKET}?list-type=2&prefix=dir/",
        server.endpoint_url()
    )]);
    let text = String::from_utf8_lossy(&list.body);
    assert!(text.contains("<Key>dir/object.bin</Key>"), "{text}");
    assert!(text.contains("<Size>1048576</Size>"), "{text}");

    let delete = signed_curl(&["-X", "DELETE", &url]);
    assert_eq!(delete.status, 204);
    let gone = signed_curl(&[&url]);
    assert_eq!((gone.status, gone.code()), (404, "NoSuchKey".into()));
    let stats = server.shutdown();
    assert_eq!(stats.requests, 10);
    assert_eq!(stats.errors, 2, "416 and 404");
    assert_eq!(stats.bytes_received, 1 << 20);
}

#[test]
fn bad_and_missing_signatures_are_refused_with_403() {
    let (_root, server) = dir_server(true);
    let url = format!("{}/{BUCKET}?list-type=2", server.endpoint_url());
    let ok = signed_curl(&[&url]);
    assert_eq!(ok.status, 200);

    let wrong_secret = signed_by(&format!("{ACCESS_KEY}:not-the-secret"));
    let mut args: Vec<&str> = wrong_secret.iter().map(String::as_str).collect();
    args.push(&url);
    let r = curl(&args);
    assert_eq!((r.status, r.code()), (403, "SignatureDoesNotMatch".into()));
    assert!(String::from_utf8_lossy(&r.body).contains("<CanonicalRequest>"));

    let wrong_key = signed_by(&format!("SOMEONEELSE:{SECRET_KEY}"));
    let mut args: Vec<&str> = wrong_key.iter().map(String::as_str).collect();
    args.push(&url);
    let r = curl(&args);
    assert_eq!((r.status, r.code()), (403, "InvalidAccessKeyId".into()));

    let r = curl(&[&url]);
    assert_eq!((r.status, r.code()), (403, "AccessDenied".into()));
    assert_eq!(server.stats().errors, 3);
}

#[test]
fn a_throttled_server_paces_each_body_and_sends_it_whole() {
    // 2 MiB at 8 MiB/s takes at least 0.25 s, however loaded the machine: pacing only slows.
    let workload = WorkloadArgs {
        workload: Some("flux_small".into()),
        overrides: vec![],
        files: Some(1),
    };
    let store = || Store::Virtual(virtual_store(&workload, None, false).unwrap());
    let plain = start(store(), false);
    let throttled = start_throttled(store(), false, Some(8 << 20));
    let len = 2 << 20;
    let get = |server: &Server| {
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = format!(
            "GET /{VIRTUAL_KEY} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-{}\r\nConnection: close\r\n\r\n",
            len - 1
        );
        let started = std::time::Instant::now();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).unwrap();
        let head_end = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        (started.elapsed(), reply.split_off(head_end))
    };
    let (_, expected) = get(&plain);
    let (elapsed, body) = get(&throttled);
    assert_eq!(body.len(), len);
    assert!(
        body == expected,
        "the throttled body differs from the plain one"
    );
    assert!(
        elapsed >= Duration::from_millis(240),
        "2 MiB at 8 MiB/s arrived in {elapsed:?}"
    );
}

/// Sends raw bytes and returns the status line of the reply.
fn raw_request(server: &Server, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[test]
fn malformed_requests_get_s3_errors_and_the_server_keeps_serving() {
    let server = virtual_server(2);
    let url = format!("{}/{VIRTUAL_KEY}", server.endpoint_url());
    let base = server.endpoint_url();

    // A Range that does not parse is ignored, as S3 does: 200 and the whole object.
    let whole = curl(&[&url]);
    assert_eq!(whole.status, 200);
    for range in ["Range: bytes=abc", "Range: bytes=9-3", "Range: items=0-1"] {
        let ignored = curl(&["-H", range, &url]);
        assert_eq!(ignored.status, 200, "{range}");
        assert!(ignored.body == whole.body, "{range}: not the whole object");
    }
    let multi = curl(&["-H", "Range: bytes=0-1,5-9", &url]);
    assert_eq!((multi.status, multi.code()), (501, "NotImplemented".into()));
    let past_end = curl(&["-r", "999999999-", &url]);
    assert_eq!(
        (past_end.status, past_end.code()),
        (416, "InvalidRange".into())
    );

    let unknown_op = curl(&[&format!("{base}/ringload?torrent")]);
    assert_eq!(
        (unknown_op.status, unknown_op.code()),
        (501, "NotImplemented".into())
    );
    let unknown_object_op = curl(&[&format!("{url}?tagging")]);
    assert_eq!(unknown_object_op.code(), "NotImplemented");

    let big_header = format!("X-Filler: {}", "x".repeat(10 << 10));
    let oversized = curl(&["-H", &big_header, &url]);
    assert_eq!(
        (oversized.status, oversized.code()),
        (400, "RequestHeaderSectionTooLarge".into())
    );
    // Past hyper's own limit the answer is its bare 431: still an answer, not a crash.
    let huge_header = format!("X-Filler: {}", "x".repeat(100 << 10));
    assert_eq!(curl(&["-H", &huge_header, &url]).status, 431);

    let no_bucket = curl(&[&format!("{base}/no-such-bucket/key")]);
    assert_eq!(
        (no_bucket.status, no_bucket.code()),
        (404, "NoSuchBucket".into())
    );
    let no_key = curl(&[&format!("{base}/ringload/nope")]);
    assert_eq!((no_key.status, no_key.code()), (404, "NoSuchKey".into()));
    let bad_utf8 = curl(&[&format!("{base}/ringload/%ff%fe")]);
    assert_eq!(bad_utf8.status, 400);
    let read_only = curl(&["-X", "PUT", "--data-binary", "x", &url]);
    assert_eq!(
        (read_only.status, read_only.code()),
        (405, "MethodNotAllowed".into())
    );
    let streaming = curl(&[
        "-X",
        "PUT",
        "-H",
        "x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        &url,
    ]);
    // An aws-chunked body without the data's length (x-amz-decoded-content-length).
    assert_eq!(
        (streaming.status, streaming.code()),
        (411, "MissingContentLength".into())
    );

    assert!(raw_request(&server, b"GARBAGE\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(
        raw_request(
            &server,
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n"
        )
        .starts_with("HTTP/1.1 400")
    );

    let fine = curl(&["-r", "0-3", &url]);
    assert_eq!(
        (fine.status, fine.body.as_slice()),
        (206, b"PAR1".as_slice())
    );
}

#[test]
fn an_interrupted_upload_leaves_no_object_and_no_temporary_file() {
    let (root, server) = dir_server(false);
    let head = format!(
        "PUT /{BUCKET}/half HTTP/1.1\r\nHost: {}\r\nContent-Length: 1000000\r\n\r\n",
        server.addr()
    );
    {
        let mut stream = TcpStream::connect(server.addr()).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&[7u8; 4096]).unwrap();
        // Dropped: the client goes away mid-body.
    }
    // The server notices the closed connection; wait (up to 10 s) until it has counted the
    // failed request or connection, which happens after the upload's temporary file is dropped.
    let noticed = (0..1000).any(|_| {
        let stats = server.stats();
        std::thread::sleep(Duration::from_millis(10));
        stats.connection_errors + stats.errors > 0
    });
    assert!(
        noticed,
        "the cut-off upload was never noticed: {:?}",
        server.stats()
    );
    let r = curl(&[&format!("{}/{BUCKET}/half", server.endpoint_url())]);
    assert_eq!((r.status, r.code()), (404, "NoSuchKey".into()));
    let leftovers: Vec<_> = std::fs::read_dir(root.path().join(".ringload-tmp"))
        .unwrap()
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// boto3 against the directory backend: everything a data pipeline does to S3.
const BOTO3: &str = r#"
import hashlib, json, sys
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, key, secret, bucket = sys.argv[1:5]
def client(secret=secret):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))
s3 = client()
out = {}
def error_of(fn):
    try:
        fn()
        return None
    except ClientError as e:
        return [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]

out["create_existing"] = error_of(lambda: s3.create_bucket(Bucket=bucket))
s3.create_bucket(Bucket="second-bucket")
out["buckets"] = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
out["head_bucket"] = s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"]
out["head_missing_bucket"] = error_of(lambda: s3.head_bucket(Bucket="no-such-bucket"))

for i in range(25):
    s3.put_object(Bucket=bucket, Key=f"page/k{i:02d}", Body=f"value {i}".encode())
keys, pages = [], 0
for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="page/", PaginationConfig={"PageSize": 10}):
    pages += 1
    keys += [o["Key"] for o in page.get("Contents", [])]
out["paged_keys"], out["pages"] = keys, pages

for k in ["tree/a/1", "tree/a/2", "tree/b", "tree/c/d/e"]:
    s3.put_object(Bucket=bucket, Key=k, Body=b"x")
r = s3.list_objects_v2(Bucket=bucket, Prefix="tree/", Delimiter="/")
out["delimited"] = {"contents": [o["Key"] for o in r.get("Contents", [])],
                    "prefixes": [p["Prefix"] for p in r.get("CommonPrefixes", [])]}
v1 = s3.list_objects(Bucket=bucket, Prefix="tree/", Delimiter="/", MaxKeys=2)
out["v1"] = {"truncated": v1["IsTruncated"],
             "prefixes": [p["Prefix"] for p in v1.get("CommonPrefixes", [])],
             "contents": [o["Key"] for o in v1.get("Contents", [])]}

odd = "odd name+plus/é (1).bin"
s3.put_object(Bucket=bucket, Key=odd, Body=b"odd bytes")
out["odd_get"] = s3.get_object(Bucket=bucket, Key=odd)["Body"].read().decode()
out["odd_listed"] = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="odd")["Contents"]]

data = bytes((i * 7919) % 251 for i in range(1 << 20)) * 20
up = s3.create_multipart_upload(Bucket=bucket, Key="big/object")
parts = []
for n in range(4):
    chunk = data[n * (5 << 20):(n + 1) * (5 << 20)]
    r = s3.upload_part(Bucket=bucket, Key="big/object", UploadId=up["UploadId"],
                       PartNumber=n + 1, Body=chunk)
    parts.append({"PartNumber": n + 1, "ETag": r["ETag"]})
s3.complete_multipart_upload(Bucket=bucket, Key="big/object", UploadId=up["UploadId"],
                             MultipartUpload={"Parts": parts})
got = s3.get_object(Bucket=bucket, Key="big/object")["Body"].read()
out["multipart_sha256_match"] = hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
out["multipart_size"] = s3.head_object(Bucket=bucket, Key="big/object")["ContentLength"]
r = s3.get_object(Bucket=bucket, Key="big/object", Range="bytes=5242870-5242889")
out["range_ok"] = r["Body"].read() == data[5242870:5242890]
out["range_status"] = r["ResponseMetadata"]["HTTPStatusCode"]
out["content_range"] = r["ContentRange"]
r = s3.get_object(Bucket=bucket, Key="big/object", Range="bytes=-100")
out["suffix_ok"] = r["Body"].read() == data[-100:]
out["past_end"] = error_of(lambda: s3.get_object(Bucket=bucket, Key="big/object",
                                                Range=f"bytes={len(data)}-"))

small = s3.create_multipart_upload(Bucket=bucket, Key="too-small")
p1 = s3.upload_part(Bucket=bucket, Key="too-small", UploadId=small["UploadId"], PartNumber=1, Body=b"a")
p2 = s3.upload_part(Bucket=bucket, Key="too-small", UploadId=small["UploadId"], PartNumber=2, Body=b"b")
out["too_small"] = error_of(lambda: s3.complete_multipart_upload(
    Bucket=bucket, Key="too-small", UploadId=small["UploadId"],
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]}))

ab = s3.create_multipart_upload(Bucket=bucket, Key="aborted")
s3.upload_part(Bucket=bucket, Key="aborted", UploadId=ab["UploadId"], PartNumber=1, Body=b"x" * 1000)
s3.abort_multipart_upload(Bucket=bucket, Key="aborted", UploadId=ab["UploadId"])
out["part_after_abort"] = error_of(lambda: s3.upload_part(
    Bucket=bucket, Key="aborted", UploadId=ab["UploadId"], PartNumber=2, Body=b"y"))
out["aborted_object"] = error_of(lambda: s3.head_object(Bucket=bucket, Key="aborted"))

s3.delete_object(Bucket=bucket, Key="page/k00")
out["deleted"] = error_of(lambda: s3.get_object(Bucket=bucket, Key="page/k00"))
out["delete_missing"] = s3.delete_object(Bucket=bucket, Key="never-was")["ResponseMetadata"]["HTTPStatusCode"]
r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "page/k01"}, {"Key": "page/k02"},
                                                 {"Key": "never-was-either"}]})
out["bulk_deleted"] = sorted(d["Key"] for d in r.get("Deleted", []))
out["bulk_errors"] = r.get("Errors", [])
out["after_bulk"] = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="page/k0")["Contents"]]
out["missing_bucket"] = error_of(lambda: s3.get_object(Bucket="no-such-bucket", Key="x"))
out["bad_secret"] = error_of(lambda: client("wrong").list_objects_v2(Bucket=bucket))
print(json.dumps(out))
"#;

#[test]
fn boto3_lists_pages_ranges_heads_puts_multiparts_aborts_and_deletes() {
    let (_root, server) = dir_server(true);
    let out = python_json(
        BOTO3,
        &[&server.endpoint_url(), ACCESS_KEY, SECRET_KEY, BUCKET],
    );
    let expected: Vec<String> = (0..25).map(|i| format!("page/k{i:02}")).collect();
    assert_eq!(
        out["create_existing"],
        serde_json::json!(["BucketAlreadyOwnedByYou", 409])
    );
    assert_eq!(out["buckets"], serde_json::json!(["second-bucket", BUCKET]));
    assert_eq!(out["head_bucket"], 200);
    assert_eq!(out["head_missing_bucket"], serde_json::json!(["404", 404]));
    assert_eq!(out["paged_keys"], serde_json::json!(expected));
    assert_eq!(out["pages"], 3);
    assert_eq!(
        out["delimited"],
        serde_json::json!({"contents": ["tree/b"], "prefixes": ["tree/a/", "tree/c/"]})
    );
    assert_eq!(
        out["v1"],
        serde_json::json!({"truncated": true, "prefixes": ["tree/a/"], "contents": ["tree/b"]})
    );
    assert_eq!(out["odd_get"], "odd bytes");
    assert_eq!(
        out["odd_listed"],
        serde_json::json!(["odd name+plus/é (1).bin"])
    );
    assert_eq!(out["multipart_sha256_match"], true);
    assert_eq!(out["multipart_size"], 20 << 20);
    assert_eq!(out["range_ok"], true);
    assert_eq!(out["range_status"], 206);
    assert_eq!(out["content_range"], "bytes 5242870-5242889/20971520");
    assert_eq!(out["suffix_ok"], true);
    assert_eq!(out["past_end"], serde_json::json!(["InvalidRange", 416]));
    assert_eq!(out["too_small"], serde_json::json!(["EntityTooSmall", 400]));
    assert_eq!(
        out["part_after_abort"],
        serde_json::json!(["NoSuchUpload", 404])
    );
    assert_eq!(out["aborted_object"], serde_json::json!(["404", 404]));
    assert_eq!(out["deleted"], serde_json::json!(["NoSuchKey", 404]));
    assert_eq!(out["delete_missing"], 204);
    assert_eq!(
        out["missing_bucket"],
        serde_json::json!(["NoSuchBucket", 404])
    );
    assert_eq!(
        out["bad_secret"],
        serde_json::json!(["SignatureDoesNotMatch", 403])
    );
}

/// Downloads a virtual file with boto3 and reads it with pyarrow.
const VIRTUAL_READBACK: &str = r#"
import json, subprocess, sys, tempfile
import boto3
import pyarrow.parquet as pq
endpoint, bucket, key, HASHES = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                  region_name="us-east-1")
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="data/flux_small/train/")["Contents"]]
with tempfile.NamedTemporaryFile(suffix=".parquet") as f:
    s3.download_fileobj(bucket, key, f)
    f.flush()
    hashes = json.loads(subprocess.run([sys.executable, "-c", HASHES, f.name],
                                       capture_output=True, check=True).stdout)
    pf = pq.ParquetFile(f.name)
    table = pf.read()
    print(json.dumps({
        "keys": keys,
        "size": f.tell(),
        "row_groups": pf.metadata.num_row_groups,
        "rows": pf.metadata.num_rows,
        "read_rows": table.num_rows,
        "columns": [(fld.name, getattr(fld.type, "list_size", 1)) for fld in pf.schema_arrow],
        "t5_nonzero": any(v != 0 for v in table.column("t5_encodings").chunk(0).values[:1000].to_pylist()),
        "hashes": hashes,
    }))
"#;

#[test]
fn a_virtual_file_downloaded_with_boto3_reads_back_with_pyarrow() {
    let server = virtual_server(3);
    let key = VIRTUAL_KEY.trim_start_matches("ringload/");
    let out = python_json(
        VIRTUAL_READBACK,
        &[
            &server.endpoint_url(),
            "ringload",
            key,
            common::CHUNK_HASHES,
        ],
    );
    assert_eq!(
        out["keys"],
        serde_json::json!([
            "data/flux_small/train/train_0000.parquet",
            "data/flux_small/train/train_0001.parquet",
            "data/flux_small/train/train_0002.parquet"
        ])
    );
    assert_eq!(out["row_groups"], 6);
    assert_eq!(out["rows"], 288);
    assert_eq!(out["read_rows"], 288);
    assert_eq!(
        out["columns"],
        serde_json::json!([
            ["t5_encodings", 8192],
            ["clip_encodings", 409],
            ["mean", 8232],
            ["logvar", 8232],
            ["timestamp", 7]
        ])
    );
    assert_eq!(out["t5_nonzero"], true, "row groups carry random values");
    // The footer's chunk hashes match the served bytes, as an independent hasher computes them.
    assert_eq!(out["hashes"]["matched"], 30, "{}", out["hashes"]);
    let stats = server.shutdown();
    let size = out["size"].as_u64().unwrap();
    assert!(stats.bytes_sent >= size, "{stats:?} for a {size}-byte file");
    assert!(stats.cpu_s > 0.0);
    assert_eq!(stats.errors, 0);
}

#[test]
fn curl_signed_queries_of_several_parameters_with_a_raw_slash_are_accepted() {
    let (root, server) = dir_server(true);
    std::fs::create_dir_all(root.path().join(BUCKET).join("data/x")).unwrap();
    std::fs::write(root.path().join(BUCKET).join("data/x/a"), b"hi").unwrap();
    let base = format!("{}/{BUCKET}", server.endpoint_url());
    for query in [
        "list-type=2&max-keys=1&prefix=data/x/",
        "prefix=data/x/&list-type=2",
        "max-keys=5&list-type=2&prefix=data/x/&delimiter=/",
    ] {
        let r = signed_curl(&[&format!("{base}?{query}")]);
        assert_eq!(r.status, 200, "{query}: {r:?}");
        assert!(
            String::from_utf8_lossy(&r.body).contains("<Key>data/x/a</Key>"),
            "{query}"
        );
    }
}

#[test]
fn connections_past_the_limit_are_closed_and_counted_while_the_others_are_served() {
    let workload = WorkloadArgs {
        workload: Some("flux_small".into()),
        overrides: vec![],
        files: Some(1),
    };
    let server = Server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store: Store::Virtual(virtual_store(&workload, None, false).unwrap()),
        credentials: None,
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: Default::default(),
        tls: None,
        max_connections: 2,
    })
    .unwrap();
    // Two idle connections (a slowloris's) take the two places.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(server.addr()).unwrap())
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.stats().connections < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // A third is closed before any answer.
    let mut third = TcpStream::connect(server.addr()).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = third.write_all(b"GET /ringload HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut reply = Vec::new();
    let _ = third.read_to_end(&mut reply);
    assert!(reply.is_empty(), "{}", String::from_utf8_lossy(&reply));
    assert_eq!(server.stats().connections_refused, 1);
    // Once one closes, a new client is served again.
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = curl(&[
            &format!("{}/{VIRTUAL_KEY}", server.endpoint_url()),
            "-r",
            "0-9",
        ]);
        if r.status == 206 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never served again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_signature_for_another_region_is_refused_as_s3_refuses_it() {
    let (_root, server) = dir_server(true);
    let url = format!("{}/{BUCKET}?list-type=2", server.endpoint_url());
    let ok = signed_curl(&[&url]);
    assert_eq!(ok.status, 200, "{ok:?}");
    let r = curl(&[
        "--aws-sigv4",
        "aws:amz:eu-west-3:s3",
        "--user",
        &format!("{ACCESS_KEY}:{SECRET_KEY}"),
        "-H",
        "x-amz-content-sha256: UNSIGNED-PAYLOAD",
        &url,
    ]);
    assert_eq!(
        (r.status, r.code()),
        (400, "AuthorizationHeaderMalformed".into())
    );
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.contains("the region 'eu-west-3' is wrong; expecting 'us-east-1'")
            && text.contains("<Region>us-east-1</Region>"),
        "{text}"
    );
}

#[test]
fn the_directory_backend_keeps_to_its_root() {
    let (root, server) = dir_server(false);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), b"not for clients").unwrap();
    let bucket = root.path().join(BUCKET);
    std::fs::write(bucket.join("inside.txt"), b"served").unwrap();
    // A link to a file outside --dir, a link to a folder outside it, a link that stays inside.
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), bucket.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), bucket.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(bucket.join("inside.txt"), bucket.join("alias.txt")).unwrap();
    let base = format!("{}/{BUCKET}", server.endpoint_url());
    for key in ["leak.txt", "elsewhere/secret.txt"] {
        let r = curl(&[&format!("{base}/{key}")]);
        assert_eq!((r.status, r.code()), (404, "NoSuchKey".into()), "{key}");
    }
    let alias = curl(&[&format!("{base}/alias.txt")]);
    assert_eq!((alias.status, alias.body.as_slice()), (200, &b"served"[..]));
    let list = curl(&[&format!("{base}?list-type=2")]);
    let text = String::from_utf8_lossy(&list.body);
    assert!(text.contains("<Key>alias.txt</Key>"), "{text}");
    assert!(
        !text.contains("leak") && !text.contains("elsewhere"),
        "{text}"
    );
    // Writing through the link to a folder outside --dir is refused.
    let file = root.path().join("upload.bin");
    std::fs::write(&file, b"x").unwrap();
    let put = curl(&[
        "-T",
        file.to_str().unwrap(),
        &format!("{base}/elsewhere/new.txt"),
    ]);
    assert_eq!((put.status, put.code()), (403, "AccessDenied".into()));
    assert!(!outside.path().join("new.txt").exists());
    // A key the directory cannot hold does not exist: NoSuchKey, not a complaint about storing.
    let r = curl(&["--path-as-is", &format!("{base}/a//b")]);
    assert_eq!((r.status, r.code()), (404, "NoSuchKey".into()));
}

/// Starts `ringload ARGS`, reads the endpoint line serve prints, stops it with SIGTERM:
/// the endpoint, the exit status and stderr.
fn serve_until_term(args: &[&str]) -> (String, std::process::ExitStatus, String) {
    let mut child = common::ringload()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut endpoint = String::new();
    stdout.read_line(&mut endpoint).unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        endpoint,
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_warns_about_folders_it_cannot_serve_as_buckets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ab")).unwrap();
    std::fs::create_dir(dir.path().join("Data_Set")).unwrap();
    std::fs::create_dir(dir.path().join("good-bucket")).unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let (_, _, stderr) = serve_until_term(&["serve", "--listen", "127.0.0.1:0", "--dir", dir_arg]);
    for folder in ["ab", "Data_Set"] {
        assert!(
            stderr.contains(&format!(
                "warning: folder '{folder}' in --dir is not served"
            )),
            "{stderr}"
        );
    }
    assert!(!stderr.contains("'good-bucket'"), "{stderr}");
}

#[test]
fn serve_prints_its_endpoint_and_its_totals_on_sigterm() {
    let mut child = common::ringload()
        .args(["serve", "--listen", "127.0.0.1:0", "--files", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut endpoint = String::new();
    stdout.read_line(&mut endpoint).unwrap();
    let endpoint = endpoint.trim();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
    let r = curl(&["-r", "0-99", &format!("{endpoint}/{VIRTUAL_KEY}")]);
    assert_eq!((r.status, r.body.len()), (206, 100));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    let stats: serde_json::Value = serde_json::from_str(&rest).unwrap();
    assert_eq!(stats["requests"], 1);
    assert_eq!(stats["bytes_sent"], 100);
    assert_eq!(stats["errors"], 0);
}

/// `--tls-self-signed` without DIR, wherever it stands, serves HTTPS from a temporary folder
/// (it once exited 2 with "a value is required").
#[test]
fn serve_tls_self_signed_needs_no_dir_wherever_the_flag_stands() {
    let lines: [&[&str]; 2] = [
        &[
            "serve",
            "--virtual",
            "flux_small",
            "--tls-self-signed",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--files",
            "1",
            "--tls-self-signed",
        ],
    ];
    for args in lines {
        let (endpoint, status, stderr) = serve_until_term(args);
        assert!(
            endpoint.starts_with("https://127.0.0.1:"),
            "{args:?}: {endpoint} {stderr}"
        );
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
    }
}

#[test]
fn serve_refuses_bad_setups_in_one_line_with_exit_2() {
    let missing = run(&["serve", "--dir", "/nonexistent/ringload-data"]);
    assert_eq!(missing.0, 2, "{missing:?}");
    assert!(
        missing.2.contains("--dir /nonexistent/ringload-data"),
        "{}",
        missing.2
    );
    assert_eq!(missing.2.trim().lines().count(), 1);

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let busy = run(&["serve", "--files", "1", "--listen", &addr]);
    assert_eq!(busy.0, 2, "{busy:?}");
    assert!(
        busy.2.contains(&format!("cannot listen on {addr}")),
        "{}",
        busy.2
    );

    let bucket = run(&["serve", "--files", "1", "--bucket", "Bad_Name"]);
    assert_eq!(bucket.0, 2, "{bucket:?}");
    assert!(bucket.2.contains("'Bad_Name' is not a valid bucket name"));

    let dir = tempfile::tempdir().unwrap();
    let overrides = run(&[
        "serve",
        "--dir",
        dir.path().to_str().unwrap(),
        "dataset.num_files_train=3",
    ]);
    assert_eq!(overrides.0, 2, "{overrides:?}");

    let half_key = run(&["serve", "--access-key", "AK"]);
    assert_eq!(half_key.0, 2, "{half_key:?}");

    for rate in ["0", "-5", "fast"] {
        let throttle = run(&["serve", "--files", "1", "--throttle-mib-per-s", rate]);
        assert_eq!(throttle.0, 2, "{throttle:?}");
        assert!(
            throttle.2.contains("is not a rate in MiB/s"),
            "{}",
            throttle.2
        );
        assert_eq!(throttle.2.trim().lines().count(), 1, "{}", throttle.2);
    }
    let _ = python();
}

#[test]
fn two_servers_on_port_0_and_a_prompt_shutdown_with_idle_and_busy_connections() {
    let first = virtual_server(1);
    let server = virtual_server(1);
    assert_ne!(first.addr(), server.addr());
    assert_eq!(first.shutdown().requests, 0);

    let _idle = TcpStream::connect(server.addr()).unwrap();
    let url = format!("{}/{VIRTUAL_KEY}", server.endpoint_url());
    // 27.6 MiB at 1 MiB/s: still in flight when the server is told to stop.
    let mut slow = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--limit-rate", "1M", &url])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let stats = server.shutdown();
    let took = started.elapsed();
    assert!(
        took < ringload::server::SHUTDOWN_GRACE + Duration::from_secs(3),
        "shutdown took {took:?}"
    );
    assert_eq!(stats.requests, 1);
    let status = slow.wait().unwrap();
    assert!(
        !status.success(),
        "the slow download was cut off at shutdown"
    );
}

/// The README's pairing: `ringload serve`, then `ringload run --endpoint URL` with no bucket
/// named anywhere reads the bucket `serve` serves (it once failed with "no bucket").
#[test]
fn run_against_serve_needs_no_bucket() {
    let server = common::spawn_serve(&["--files", "1"]);
    let (code, stdout, stderr) = run(&[
        "run",
        "flux_small",
        "--files",
        "1",
        "--endpoint",
        &server.endpoint,
        "--computation-time",
        "0.001",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stdout.contains("| 1 | 2 |"), "{stdout}");
}

/// `generate` then `serve --dir` then `run`: into a bucket's folder the three pair with no
/// bucket named; into the folder's root the failure names the real fix, which works. The old
/// flag names (`generate --out`, `serve --virtual`, `serve --threads`) still work.
#[test]
fn generate_serve_dir_and_run_pair_and_old_flag_names_still_work() {
    let root = tempfile::tempdir().unwrap();
    let gen_dir = root.path().join("gen");
    let into_bucket = gen_dir.join("ringload");
    let generate = |flag: &str, dir: &std::path::Path| {
        let (code, _, stderr) = run(&[
            "generate",
            "flux_small",
            "--files",
            "1",
            flag,
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
    };
    generate("--out", &into_bucket);
    let served = common::spawn_serve(&["--dir", gen_dir.to_str().unwrap(), "--threads", "2"]);
    let read = |endpoint: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "flux_small",
            "--files",
            "1",
            "--computation-time",
            "0.001",
            "--endpoint",
            endpoint,
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let (code, stdout, stderr) = read(&served.endpoint, &[]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stdout.contains("| 1 | 2 |"), "{stdout}");

    // Generated into the root: bucket 'data' holds flux_small/train/….
    let flat = root.path().join("flat");
    generate("--output", &flat);
    let served = common::spawn_serve(&["--dir", flat.to_str().unwrap(), "--server-threads", "2"]);
    let (code, _, stderr) = read(&served.endpoint, &["--bucket", "data"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no Parquet objects under s3://data/data/flux_small/train/")
            && stderr.contains("ringload generate --output DIR/ringload")
            && stderr.contains("dataset.data_folder=flux_small/"),
        "{stderr}"
    );
    let (code, _, stderr) = read(
        &served.endpoint,
        &["--bucket", "data", "dataset.data_folder=flux_small/"],
    );
    assert!(code == 0 || code == 1, "{stderr}");

    // The workload is positional, as everywhere; `--virtual W` still works.
    for args in [
        &["flux_small", "--files", "1"][..],
        &["--virtual", "flux_small", "dataset.num_files_train=1"][..],
        &["dataset.num_files_train=1"][..],
    ] {
        let served = common::spawn_serve(args);
        let (code, _, stderr) = read(&served.endpoint, &[]);
        assert!(code == 0 || code == 1, "serve {args:?}: {stderr}");
    }
}

/// The content generator in Python with numpy (tests/py/content.py, written from README's
/// description, not from ringload's code): `gen(key, offset, n)`.
const GEN_PY: &str = concat!(
    include_str!("py/content.py"),
    r#"
import json, sys
import numpy as np
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
endpoint, bucket = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                  region_name="us-east-1", config=Config(retries={"total_max_attempts": 1}))
def error_of(f):
    try:
        f()
        return None
    except ClientError as e:
        return [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"],
                e.response["Error"].get("Message", "")]
def uploads(prefix):
    r = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [u["Key"] for u in r.get("Uploads", [])]
MiB = 1 << 20
out = {}
"#
);

/// Multipart uploads with parts out of order, a retried part and a tiny last part; the
/// uploads listed while open and not after complete or abort; the object read back.
const MULTIPART_PY: &str = r#"
key = "ckpt/global_epoch1_step1/model.pt"
sizes = [5 * MiB, 5 * MiB, 5]
off = lambda n: sum(sizes[:n - 1])
up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
other = s3.create_multipart_upload(Bucket=bucket, Key="elsewhere/x")["UploadId"]
r = s3.list_multipart_uploads(Bucket=bucket, Prefix="ckpt/")
out["open"] = [[u["Key"], u["UploadId"] == up, "Initiated" in u] for u in r.get("Uploads", [])]
out["all_open"] = uploads("")
etags = {}
for n in [2, 3, 1, 2]:
    etags[n] = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n,
                              Body=gen(key, off(n), sizes[n - 1]))["ETag"]
parts = [{"PartNumber": n, "ETag": etags[n]} for n in [1, 2, 3]]
out["out_of_order"] = error_of(lambda: s3.complete_multipart_upload(
    Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts[::-1]}))
out["complete"] = s3.complete_multipart_upload(
    Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})["ResponseMetadata"]["HTTPStatusCode"]
out["after_complete"] = uploads("")
total = sum(sizes)
out["size"] = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
out["whole_ok"] = s3.get_object(Bucket=bucket, Key=key)["Body"].read() == gen(key, 0, total)
r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=5242870-5242889")
out["range_ok"] = r["Body"].read() == gen(key, 5242870, 20)
out["listed"] = [[o["Key"], o["Size"]] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ckpt/")["Contents"]]
s3.upload_part(Bucket=bucket, Key="elsewhere/x", UploadId=other, PartNumber=1, Body=gen("elsewhere/x", 0, 1000))
out["abort"] = s3.abort_multipart_upload(Bucket=bucket, Key="elsewhere/x", UploadId=other)["ResponseMetadata"]["HTTPStatusCode"]
out["after_abort"] = uploads("")
out["abort_again"] = error_of(lambda: s3.abort_multipart_upload(Bucket=bucket, Key="elsewhere/x", UploadId=other))[:2]
out["abort_unknown"] = error_of(lambda: s3.abort_multipart_upload(Bucket=bucket, Key="elsewhere/x", UploadId="0123abcd"))[:2]
out["part_after_abort"] = error_of(lambda: s3.upload_part(Bucket=bucket, Key="elsewhere/x", UploadId=other,
                                                          PartNumber=2, Body=b"y"))[:2]
print(json.dumps(out))
"#;

fn check_multipart(out: &serde_json::Value, what: &str) {
    let key = "ckpt/global_epoch1_step1/model.pt";
    let total = (10 << 20) + 5;
    let expect = serde_json::json!({
        "open": [[key, true, true]],
        "all_open": ["ckpt/global_epoch1_step1/model.pt", "elsewhere/x"],
        "out_of_order": ["InvalidPartOrder", 400],
        "complete": 200,
        "after_complete": ["elsewhere/x"],
        "size": total,
        "whole_ok": true,
        "range_ok": true,
        "listed": [[key, total]],
        "abort": 204,
        "after_abort": [],
        "abort_again": ["NoSuchUpload", 404],
        "abort_unknown": ["NoSuchUpload", 404],
        "part_after_abort": ["NoSuchUpload", 404],
    });
    let mut out = out.clone();
    // The message of InvalidPartOrder is S3's own; only the code and status are compared.
    out["out_of_order"] = serde_json::json!(out["out_of_order"].as_array().unwrap()[..2]);
    assert_eq!(out, expect, "{what}");
}

#[test]
fn boto3_multipart_to_dir_and_sink_lists_open_uploads_until_complete_or_abort() {
    let script = format!("{GEN_PY}{MULTIPART_PY}");
    let (_root, dir) = dir_server(false);
    let out = python_json(&script, &[&dir.endpoint_url(), BUCKET]);
    check_multipart(&out, "dir");
    let stats = dir.shutdown();
    assert!(stats.bytes_received >= (15 << 20) + 5, "{stats:?}");
    assert!(stats.cpu_s_per_gib_received.is_some(), "{stats:?}");

    for verify in [false, true] {
        let sink = start(
            Store::sink(BUCKET, vec![], true, verify, Default::default()),
            false,
        );
        let out = python_json(&script, &[&sink.endpoint_url(), BUCKET]);
        check_multipart(&out, &format!("sink, verify {verify}"));
        let stats = sink.shutdown();
        let s = stats.sink.unwrap();
        assert_eq!((s.objects_written, s.mismatches), (1, 0), "{s:?}");
        let verified = if verify { (15 << 20) + 5 + 1000 } else { 0 };
        assert_eq!(s.verified_bytes, verified, "{s:?}");
    }
}

/// Uploads to a verifying sink: right content passes, each kind of wrong content is refused
/// with BadDigest naming the object and offset.
const VERIFY_PY: &str = r#"
out["right_put"] = s3.put_object(Bucket=bucket, Key="v/right", Body=gen("v/right", 0, 100000))["ResponseMetadata"]["HTTPStatusCode"]
bad = bytearray(gen("v/flipped", 0, 100000)); bad[1000] ^= 1
out["flipped_put"] = error_of(lambda: s3.put_object(Bucket=bucket, Key="v/flipped", Body=bytes(bad)))
out["other_key_put"] = error_of(lambda: s3.put_object(Bucket=bucket, Key="v/other", Body=gen("v/another", 0, 4096)))
key = "v/mp"
up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
p2 = bytearray(gen(key, 5 * MiB, 5 * MiB)); p2[3] ^= 0x80
out["bad_part"] = error_of(lambda: s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=bytes(p2)))
key = "v/swapped"
up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
e1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=gen(key, 0, 5 * MiB))["ETag"]
e2 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=gen(key, 6 * MiB, 5 * MiB))["ETag"]
out["misplaced"] = error_of(lambda: s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]}))
out["listed"] = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="v/").get("Contents", [])]
print(json.dumps(out))
"#;

#[test]
fn a_verifying_sink_refuses_bytes_that_are_not_the_generators_and_names_where() {
    let sink = start(
        Store::sink(BUCKET, vec![], true, true, Default::default()),
        false,
    );
    let out = python_json(
        &format!("{GEN_PY}{VERIFY_PY}"),
        &[&sink.endpoint_url(), BUCKET],
    );
    assert_eq!(out["right_put"], 200);
    let refused = |name: &str, needle: &str| {
        let e = out[name]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {out}"));
        assert_eq!(
            (e[0].as_str(), e[1].as_u64()),
            (Some("BadDigest"), Some(400)),
            "{name}"
        );
        let message = e[2].as_str().unwrap();
        assert!(message.contains(needle), "{name}: {message}");
    };
    refused(
        "flipped_put",
        "object 'v/flipped': the byte at object offset 1000 ",
    );
    refused(
        "other_key_put",
        "object 'v/other': the byte at object offset 0 ",
    );
    refused(
        "bad_part",
        &format!(
            "object 'v/mp' (part 2): the byte at object offset {} ",
            (5 << 20) + 3
        ),
    );
    refused(
        "misplaced",
        &format!(
            "(part 2): its bytes are the generator's for object offset {}, but the part lies at \
             offset {}",
            6 << 20,
            5 << 20
        ),
    );
    assert_eq!(out["listed"], serde_json::json!(["v/right"]));
    let s = sink.shutdown().sink.unwrap();
    assert_eq!((s.objects_written, s.mismatches), (1, 4), "{s:?}");
}

#[test]
fn a_fresh_sink_serves_its_listed_objects_as_the_generator_makes_them() {
    let size: u64 = 3_000_001;
    let key = "ckpt/a/zero_pp_rank_0_mp_rank_0_model_states.pt";
    for randomize in [true, false] {
        let server = start(
            Store::sink(
                "ckpt-bucket",
                vec![(key.into(), size)],
                randomize,
                false,
                Default::default(),
            ),
            false,
        );
        let base = format!("{}/ckpt-bucket", server.endpoint_url());
        let content = ringload::content::Content::of(key, randomize);
        let r = curl(&["-r", "1000-2999999", &format!("{base}/{key}")]);
        assert_eq!(r.status, 206);
        let mut expected = vec![0u8; 2_999_000];
        content.fill(1000, &mut expected);
        assert!(r.body == expected, "randomize {randomize}");
        let r = curl(&[&format!("{base}/{key}")]);
        let mut whole = vec![0u8; size as usize];
        content.fill(0, &mut whole);
        assert_eq!((r.status, r.body.len()), (200, size as usize));
        assert!(r.body == whole);
        let r = curl(&[&format!("{base}?list-type=2&prefix=ckpt/")]);
        let text = String::from_utf8_lossy(&r.body);
        assert!(
            text.contains(&format!("<Key>{key}</Key>")) && text.contains("<Size>3000001</Size>"),
            "{text}"
        );
        let r = curl(&[&format!("{base}/ckpt/missing")]);
        assert_eq!((r.status, r.code()), (404, "NoSuchKey".into()));
    }
}

/// One upload of three 5 MiB parts and its completion, each request tried once and, when it
/// fails, once more: what each first try got.
const PART_FAULTS_PY: &str = r#"
def attempt(f):
    try:
        f()
        return ["ok"]
    except ClientError as e:
        return ["error", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]
    except Exception as e:
        return ["connection", type(e).__name__]
key = "f/obj"
up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
events, parts = [], []
for n in [1, 2, 3]:
    body = gen(key, (n - 1) * 5 * MiB, 5 * MiB)
    put = lambda: parts.append({"PartNumber": n, "ETag": s3.upload_part(
        Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=body)["ETag"]})
    events.append(attempt(put))
    if events[-1] != ["ok"]:
        put()
complete = lambda: s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                                MultipartUpload={"Parts": parts})
events.append(attempt(complete))
out["open_after_first_complete"] = uploads("f/")
if events[-1] != ["ok"]:
    complete()
out["events"] = events
out["size"] = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
out["open_at_end"] = uploads("f/")
print(json.dumps(out))
"#;

#[test]
fn part_and_complete_faults_fail_what_they_name_and_a_retry_succeeds() {
    let ok = serde_json::json!(["ok"]);
    let cases: [(&str, usize, serde_json::Value); 4] = [
        (
            "503@part/nth=2",
            1,
            serde_json::json!(["error", "SlowDown", 503]),
        ),
        ("cut=100000@part/nth=3", 2, serde_json::json!("connection")),
        (
            "500@complete",
            3,
            serde_json::json!(["error", "InternalError", 500]),
        ),
        ("200-error@complete", 3, serde_json::json!("InternalError")),
    ];
    let script = format!("{GEN_PY}{PART_FAULTS_PY}");
    for (spec, failed, first_try) in cases {
        let server = Server::start(ServerConfig {
            faults: ringload::server::faults::Faults::parse(spec, 1).unwrap(),
            ..common::server_config(Store::sink(BUCKET, vec![], true, true, Default::default()))
        })
        .unwrap();
        let out = python_json(&script, &[&server.endpoint_url(), BUCKET]);
        let events = out["events"].as_array().unwrap();
        for (i, event) in events.iter().enumerate() {
            if i != failed {
                assert_eq!(event, &ok, "{spec}: {out}");
            } else if first_try.is_string() {
                let got = &event.as_array().unwrap()[..2];
                assert!(
                    got.contains(&first_try) || got.contains(&serde_json::json!("connection")),
                    "{spec}: {out}"
                );
            } else {
                assert_eq!(event, &first_try, "{spec}: {out}");
            }
        }
        let open = if failed == 3 { vec!["f/obj"] } else { vec![] };
        assert_eq!(
            out["open_after_first_complete"],
            serde_json::json!(open),
            "{spec}"
        );
        assert_eq!(out["size"], 15 << 20, "{spec}");
        assert_eq!(out["open_at_end"], serde_json::json!([]), "{spec}");
        let stats = server.shutdown();
        assert_eq!(stats.faults[spec], 1, "{spec}: {stats:?}");
        let s = stats.sink.clone().unwrap();
        assert_eq!((s.objects_written, s.mismatches), (1, 0), "{spec}: {s:?}");
        if spec.starts_with("cut") {
            assert!(stats.connection_errors >= 1, "{stats:?}");
        }
    }
}

/// `serve --sink --verify` takes a PUT and serves it back in one lifetime, refuses a wrong
/// upload, and reports what it took; its flags are refused where they do not apply.
#[test]
fn serve_sink_takes_writes_and_serves_them_back_in_one_lifetime() {
    let mut child = common::ringload()
        .args([
            "serve",
            "--sink",
            "--verify",
            "--listen",
            "127.0.0.1:0",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut endpoint = String::new();
    stdout.read_line(&mut endpoint).unwrap();
    let url = format!("{}/ringload/ckpt/obj.pt", endpoint.trim());
    let content = ringload::content::Content::of("ckpt/obj.pt", true);
    let mut bytes = vec![0u8; 1 << 20];
    content.fill(0, &mut bytes);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();
    let put = curl(&["-T", file.path().to_str().unwrap(), &url]);
    assert_eq!(put.status, 200, "{put:?}");
    let got = curl(&["-r", "1000-1999", &url]);
    assert!(got.status == 206 && got.body == bytes[1000..2000]);
    bytes[5] ^= 1;
    std::fs::write(file.path(), &bytes).unwrap();
    let wrong = curl(&["-T", file.path().to_str().unwrap(), &url]);
    assert_eq!((wrong.status, wrong.code()), (400, "BadDigest".into()));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let stats: serde_json::Value = serde_json::from_str(&rest).unwrap();
    assert_eq!(stats["bytes_received"], 2 << 20);
    assert!(
        stats["cpu_s_per_gib_received"].as_f64().is_some(),
        "{stats}"
    );
    assert_eq!(
        stats["sink"],
        serde_json::json!({"objects_written": 1, "verified_bytes": 2 << 20, "mismatches": 1})
    );

    let (_, status, stderr) =
        serve_until_term(&["serve", "--sink", "--zeros", "--listen", "127.0.0.1:0"]);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("sink (zero content, 0 objects listed"),
        "{stderr}"
    );
    let verify_alone = run(&["serve", "--verify"]);
    assert_eq!(verify_alone.0, 2, "{verify_alone:?}");
    let with_workload = run(&["serve", "--sink", "flux_small"]);
    assert_eq!(with_workload.0, 2, "{with_workload:?}");
    // A training workload: --sink takes a checkpoint workload's plan, not training files.
    assert!(
        with_workload
            .2
            .contains("serve --sink flux_small: not a checkpoint workload"),
        "{}",
        with_workload.2
    );
    let np_alone = run(&["serve", "--np", "2"]);
    assert_eq!(np_alone.0, 2, "{np_alone:?}");
}

/// The form of an aws-chunked body a raw request sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    UnsignedTrailer,
    Signed,
    SignedTrailer,
}

impl Chunked {
    fn content_sha256(self) -> &'static str {
        match self {
            Chunked::UnsignedTrailer => "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            Chunked::Signed => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            Chunked::SignedTrailer => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        }
    }
}

/// Sends `data` as an aws-chunked PUT of `path_and_query` over a raw socket, signed with the
/// crate's signer (the header signature) and AWS's chunk and trailer signatures, in chunks of
/// 64 KiB; the trailer carries `crc32c` (the data's, unless a test says otherwise).
fn chunked_put(
    server: &Server,
    path_and_query: &str,
    form: Chunked,
    data: &[u8],
    crc32c: &str,
) -> Reply {
    chunked_put_by(server, path_and_query, form, data, crc32c, SECRET_KEY)
}

/// [`chunked_put`] with the chunks and trailer signed by `chunk_secret`.
fn chunked_put_by(
    server: &Server,
    path_and_query: &str,
    form: Chunked,
    data: &[u8],
    crc32c: &str,
    chunk_secret: &str,
) -> Reply {
    use ringload::s3::sigv4::{chunk_signature, signing_key, trailer_signature};
    use sha2::Digest;
    let host = server.addr().to_string();
    let url = format!("{}{path_and_query}", server.endpoint_url());
    let decoded = data.len().to_string();
    let mut headers = vec![
        ("host", host.as_str()),
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", decoded.as_str()),
    ];
    if form != Chunked::Signed {
        headers.push(("x-amz-trailer", "x-amz-checksum-crc32c"));
    }
    let signer = ringload::s3::sign::Signer::new(
        Some(ringload::s3::target::Credentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            session_token: None,
        }),
        "us-east-1",
    );
    let payload = ringload::s3::sign::Payload::Sha256(form.content_sha256());
    let now = std::time::SystemTime::now();
    let signed = signer.headers("PUT", &url, &headers, payload, now).unwrap();
    let value = |name: &str| signed.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let amz_date = value("x-amz-date");
    let mut previous = value("authorization")
        .rsplit("Signature=")
        .next()
        .unwrap()
        .to_string();
    let key = signing_key(chunk_secret, &amz_date[..8], "us-east-1", "s3");
    let scope = format!("{}/us-east-1/s3/aws4_request", &amz_date[..8]);

    let mut body = Vec::new();
    for piece in data.chunks(64 << 10).chain([&[][..]]) {
        if form == Chunked::UnsignedTrailer {
            body.extend(format!("{:x}\r\n", piece.len()).bytes());
        } else {
            let hash = sha2::Sha256::digest(piece).into();
            previous = chunk_signature(&key, &amz_date, &scope, &previous, &hash);
            body.extend(format!("{:x};chunk-signature={previous}\r\n", piece.len()).bytes());
        }
        if !piece.is_empty() || form == Chunked::Signed {
            body.extend_from_slice(piece);
            body.extend_from_slice(b"\r\n");
        }
    }
    let line = format!("x-amz-checksum-crc32c:{crc32c}");
    match form {
        Chunked::Signed => {}
        Chunked::UnsignedTrailer => body.extend(format!("{line}\r\n\r\n").bytes()),
        Chunked::SignedTrailer => {
            let lines = format!("{line}\n");
            let sig = trailer_signature(&key, &amz_date, &scope, &previous, lines.as_bytes());
            body.extend(format!("{line}\r\nx-amz-trailer-signature:{sig}\r\n\r\n").bytes());
        }
    }

    let mut request = format!("PUT {path_and_query} HTTP/1.1\r\n");
    for (name, value) in headers
        .iter()
        .map(|(n, v)| (*n, v.to_string()))
        .chain(signed)
    {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    // Sent in uneven writes, so the server's frames split the framing anywhere (a server
    // that answers before the body, as to a refused request, may close before the end).
    for piece in body.chunks(7919) {
        if stream.write_all(piece).is_err() {
            break;
        }
    }
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let split = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&reply[..split]).into_owned();
    Reply {
        status: head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        headers: head,
        body: reply[split + 4..].to_vec(),
    }
}

#[test]
fn aws_chunked_puts_and_parts_are_decoded_verified_and_read_back_whole() {
    let (_root, server) = dir_server(true);
    let base = server.endpoint_url();
    let data = random_bytes((300 << 10) + 17, 41);
    let crc = ringload::checksum::digest(ringload::checksum::Algorithm::Crc32c, &data).base64();
    let read_back = |key: &str| signed_curl(&[&format!("{base}/{BUCKET}/{key}")]).body;

    // PutObject, each form: stored whole, the trailer's checksum echoed.
    for (form, key) in [
        (Chunked::UnsignedTrailer, "chunked/unsigned-trailer"),
        (Chunked::Signed, "chunked/signed"),
        (Chunked::SignedTrailer, "chunked/signed-trailer"),
    ] {
        let r = chunked_put(&server, &format!("/{BUCKET}/{key}"), form, &data, &crc);
        assert_eq!(
            r.status,
            200,
            "{form:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let echoed = r.header("x-amz-checksum-crc32c");
        assert_eq!(
            echoed,
            (form != Chunked::Signed).then(|| crc.clone()),
            "{form:?}"
        );
        assert!(read_back(key) == data, "{form:?}: the object differs");
    }
    assert_eq!(server.stats().checksums_verified, 2);

    // A trailer with another checksum: BadDigest, counted, nothing stored.
    let other = ringload::checksum::digest(ringload::checksum::Algorithm::Crc32c, b"x").base64();
    let key = "chunked/wrong";
    let r = chunked_put(
        &server,
        &format!("/{BUCKET}/{key}"),
        Chunked::UnsignedTrailer,
        &data,
        &other,
    );
    assert_eq!((r.status, r.code()), (400, "BadDigest".into()));
    assert_eq!(server.stats().checksums_refused, 1);
    let missing = signed_curl(&[&format!("{base}/{BUCKET}/{key}")]);
    assert_eq!(missing.code(), "NoSuchKey");

    // CreateMultipartUpload of `key` with `algorithm`: its upload id.
    let create_upload = |key: &str, algorithm: &str| {
        let created = signed_curl(&[
            "-X",
            "POST",
            "-H",
            &format!("x-amz-checksum-algorithm: {algorithm}"),
            &format!("{base}/{BUCKET}/{key}?uploads"),
        ]);
        let text = String::from_utf8_lossy(&created.body).into_owned();
        let id = text.split("<UploadId>").nth(1).unwrap().split('<').next();
        id.unwrap().to_string()
    };

    // UploadPart, signed chunks and a signed trailer, into an upload created with CRC32C:
    // the part's digest is kept, so the Complete's part checksum is checked against it.
    let id = create_upload("chunked/mp", "CRC32C");
    let id = id.as_str();
    let part = format!("/{BUCKET}/chunked/mp?partNumber=1&uploadId={id}");
    let r = chunked_put(&server, &part, Chunked::SignedTrailer, &data, &crc);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-amz-checksum-crc32c"), Some(crc.clone()));
    let etag = r.header("etag").unwrap();
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag>\
         <ChecksumCRC32C>{crc}</ChecksumCRC32C></Part></CompleteMultipartUpload>"
    );
    let done = signed_curl(&[
        "-X",
        "POST",
        "--data-binary",
        &complete,
        &format!("{base}/{BUCKET}/chunked/mp?uploadId={id}"),
    ]);
    assert_eq!(done.status, 200, "{}", String::from_utf8_lossy(&done.body));
    assert!(
        read_back("chunked/mp") == data,
        "the completed object differs"
    );

    // A part whose trailer names another algorithm than the upload's, and a part whose
    // chunk is signed with another key (small: the server reads it all before it answers,
    // so its close does not reset the connection before the answer is read).
    let data = &data[..1000];
    let id = create_upload("chunked/mp2", "CRC32");
    let id = id.as_str();
    let part = format!("/{BUCKET}/chunked/mp2?partNumber=1&uploadId={id}");
    let r = chunked_put(&server, &part, Chunked::SignedTrailer, data, &crc);
    assert_eq!((r.status, r.code()), (400, "InvalidRequest".into()));
    let r = chunked_put_by(&server, &part, Chunked::Signed, data, "", "not-the-secret");
    assert_eq!((r.status, r.code()), (403, "SignatureDoesNotMatch".into()));
    assert!(String::from_utf8_lossy(&r.body).contains("chunk 1"));
}

#[test]
fn aws_chunked_bodies_reach_the_sink_decoded() {
    let sink = start(
        Store::sink(BUCKET, vec![], true, false, Default::default()),
        false,
    );
    let data = random_bytes(200_000, 43);
    let crc = ringload::checksum::digest(ringload::checksum::Algorithm::Crc32c, &data).base64();
    let path = format!("/{BUCKET}/chunked/sink");
    let r = chunked_put(&sink, &path, Chunked::UnsignedTrailer, &data, &crc);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-amz-checksum-crc32c"), Some(crc));
    let other = ringload::checksum::digest(ringload::checksum::Algorithm::Crc32c, b"y").base64();
    let r = chunked_put(&sink, &path, Chunked::UnsignedTrailer, &data, &other);
    assert_eq!(r.code(), "BadDigest");
    // Unsigned server: the signed form's chunks are decoded, their signatures not checked.
    let r = chunked_put(&sink, &path, Chunked::Signed, &data, "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let stats = sink.shutdown();
    assert_eq!((stats.checksums_verified, stats.checksums_refused), (1, 1));
    assert_eq!(stats.sink.unwrap().objects_written, 2);
}

/// boto3 over HTTPS, where botocore sends uploads aws-chunked with a CRC32 trailer by default
/// (flexible checksums): a PUT from a file object and a multipart upload, each read back.
const BOTO3_CHUNKED: &str = r#"
import hashlib, io, json, sys
import boto3
from boto3.s3.transfer import TransferConfig
endpoint, ca, access, secret, bucket = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                  aws_secret_access_key=secret, region_name="us-east-1", verify=ca)
sent = []
def text(value):
    return value.decode() if isinstance(value, bytes) else value
def record(request, **kwargs):
    sent.append([text(request.headers.get(h)) for h in ("x-amz-content-sha256", "x-amz-trailer")])
s3.meta.events.register("before-send.s3.PutObject", record)
s3.meta.events.register("before-send.s3.UploadPart", record)
data = bytes(range(256)) * (3 * 4096 + 7)
put = s3.put_object(Bucket=bucket, Key="boto/put", Body=io.BytesIO(data))
got = s3.get_object(Bucket=bucket, Key="boto/put")["Body"].read()
head = s3.head_object(Bucket=bucket, Key="boto/put", ChecksumMode="ENABLED")
big = data * 4
s3.upload_fileobj(io.BytesIO(big), bucket, "boto/multipart",
                  Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20))
got_big = s3.get_object(Bucket=bucket, Key="boto/multipart")["Body"].read()
print(json.dumps({
    "sent": sent,
    "put_checksum": put.get("ChecksumCRC32"),
    "head_checksum": head.get("ChecksumCRC32"),
    "put_same": hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(),
    "size": len(got),
    "multipart_same": got_big == big,
    "multipart_size": len(got_big),
}))
"#;

#[test]
fn boto3_over_https_sends_aws_chunked_trailers_and_reads_back_whole() {
    let root = tempfile::tempdir().unwrap();
    let store = DirStore::new(root.path()).unwrap();
    store.create_bucket(BUCKET).unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (tls, files) =
        ringload::server::tls::self_signed("127.0.0.1:0".parse().unwrap(), certs.path()).unwrap();
    let server = Server::start(ServerConfig {
        credentials: Some(Credentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
        }),
        tls: Some(tls),
        ..common::server_config(Store::Dir(store))
    })
    .unwrap();
    let ca = files.ca_pem.display().to_string();
    let out = python_json(
        BOTO3_CHUNKED,
        &[&server.endpoint_url(), &ca, ACCESS_KEY, SECRET_KEY, BUCKET],
    );
    let size = 256 * (3 * 4096 + 7);
    let crc = ringload::checksum::digest(
        ringload::checksum::Algorithm::Crc32,
        &(0..size).map(|i| i as u8).collect::<Vec<_>>(),
    );
    let sent = out["sent"].as_array().unwrap();
    // One PutObject and at least three parts, each aws-chunked with a CRC32 trailer.
    assert!(sent.len() >= 4, "{out}");
    for request in sent {
        assert_eq!(
            request,
            &serde_json::json!(["STREAMING-UNSIGNED-PAYLOAD-TRAILER", "x-amz-checksum-crc32"]),
            "{out}"
        );
    }
    assert_eq!(out["put_checksum"], crc.base64(), "{out}");
    assert_eq!(out["head_checksum"], crc.base64(), "{out}");
    assert_eq!(
        (out["put_same"].as_bool(), out["size"].as_u64()),
        (Some(true), Some(size as u64))
    );
    assert_eq!(out["multipart_same"], true, "{out}");
    assert_eq!(out["multipart_size"], 4 * size, "{out}");
    let stats = server.shutdown();
    // The PUT's and each part's trailer checksums, and the Complete's.
    assert!(stats.checksums_verified >= 4, "{stats:?}");
    assert_eq!(stats.checksums_refused, 0, "{stats:?}");
}
