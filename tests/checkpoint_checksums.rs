//! Checkpoints with S3's additional checksums (`--checksum`), on both engines: each algorithm
//! completes against the embedded sink and a `serve --dir` store, which verify every part's
//! and completion's checksum (the sink counts them; the directory returns the object's
//! checksum to a HEAD with `x-amz-checksum-mode: ENABLED`); a byte changed in flight
//! (`serve --faults flip-upload=N`) is refused as `BadDigest`, tried again and caught, or,
//! changed on every try, fails the run naming the part; garage, a third-party store, takes
//! CRC32C and CRC64NVME (it verifies them on UploadPart and PutObject) and signed SHA-256
//! payloads (`--payload-signing sha256`), which the embedded server checks too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{output, ringload};
use serde_json::Value;

/// `ringload run llama3_tiny --np 2` with 5 MiB parts (several per object), write only, on
/// `engine`, against `endpoint` (`None`: the embedded sink): (exit code, summary, stderr).
fn write_run(engine: &str, endpoint: Option<&str>, extra: &[&str]) -> (i32, Value, String) {
    let mut cmd = ringload();
    cmd.arg("run")
        .args(["llama3_tiny", "--np", "2", "--engine", engine])
        .args([
            "--part-size",
            "5MiB",
            "checkpoint.num_checkpoints_read=0",
            "--json",
        ])
        .args(extra);
    if let Some(endpoint) = endpoint {
        cmd.args(["--endpoint", endpoint, "--bucket", "ringload"]);
    }
    let (code, stdout, stderr) = output(&mut cmd);
    let summary = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (code, summary, stderr)
}

#[test]
fn every_checksum_completes_and_the_sink_verified_each_part_and_completion() {
    for engine in ["uring", "baseline"] {
        for checksum in ["crc32c", "crc64nvme", "sha256", "none"] {
            let (code, s, stderr) = write_run(engine, None, &["--checksum", checksum]);
            assert_eq!(code, 0, "{engine} {checksum}: {stderr}");
            let server = &s["target"]["server"];
            let parts = s["save"]["requests"].as_u64().unwrap();
            let verified = server["checksums_verified"].as_u64().unwrap();
            assert_eq!(
                server["checksums_refused"], 0,
                "{engine} {checksum}: {server}"
            );
            if checksum == "none" {
                assert_eq!(verified, 0, "{engine}: {server}");
                assert_eq!(s["save"]["checksum_cpu_s"], 0.0, "{engine}: {s}");
            } else {
                // Every part, and every completion (4 objects per checkpoint, 2 checkpoints):
                // CRCs by the object's combined FULL_OBJECT header, SHA-256 by each part's
                // listed checksum.
                let objects = server["sink"]["objects_written"].as_u64().unwrap();
                assert_eq!(objects, 8, "{engine}: {server}");
                assert_eq!(verified, parts + objects, "{engine} {checksum}: {server}");
                assert!(parts > objects, "{engine}: several parts per object: {s}");
                assert!(
                    s["save"]["checksum_cpu_s_per_gib"].is_number(),
                    "{engine} {checksum}: {s}"
                );
            }
        }
    }
}

/// HEAD with `x-amz-checksum-mode: ENABLED` of every object under the bucket, through boto3:
/// `{key: [ChecksumType, the algorithm's field]}`.
const HEAD_CHECKSUMS_PY: &str = r#"
import json, sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="x", aws_secret_access_key="x",
    region_name="us-east-1", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
field = sys.argv[3]
out = {}
for o in s3.list_objects_v2(Bucket=sys.argv[2]).get("Contents", []):
    h = s3.head_object(Bucket=sys.argv[2], Key=o["Key"], ChecksumMode="ENABLED")
    out[o["Key"]] = [h.get("ChecksumType"), h.get(field)]
print(json.dumps(out))
"#;

#[test]
fn a_directory_store_keeps_each_objects_checksum_for_a_head_that_asks() {
    for (checksum, field, kind) in [
        ("crc64nvme", "ChecksumCRC64NVME", "FULL_OBJECT"),
        ("sha256", "ChecksumSHA256", "COMPOSITE"),
    ] {
        for engine in ["uring", "baseline"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("ringload")).unwrap();
            let server = common::spawn_serve(&["--dir", dir.path().to_str().unwrap()]);
            let args = ["--checksum", checksum];
            let (code, _, stderr) = write_run(engine, Some(&server.endpoint), &args);
            assert_eq!(code, 0, "{engine} {checksum}: {stderr}");
            let heads =
                common::python_json(HEAD_CHECKSUMS_PY, &[&server.endpoint, "ringload", field]);
            let heads = heads.as_object().unwrap();
            assert_eq!(heads.len(), 8, "{engine} {checksum}: {heads:?}");
            for (key, head) in heads {
                assert_eq!(head[0], kind, "{engine} {key}: {head}");
                let value = head[1].as_str().unwrap_or_else(|| panic!("{key}: {head}"));
                // COMPOSITE ends with its part count.
                assert_eq!(value.contains('-'), kind == "COMPOSITE", "{key}: {value}");
            }
        }
    }
}

#[test]
fn a_byte_changed_in_flight_is_refused_as_bad_digest_and_sent_again() {
    for engine in ["uring", "baseline"] {
        for (store, fault, extra) in [
            ("--sink", "flip-upload=1000@part/nth=2", vec![]),
            (
                "--dir",
                "flip-upload=7@part/nth=3",
                vec!["--checksum", "crc64nvme"],
            ),
            (
                "--sink",
                "flip-upload=3@put/nth=2",
                vec!["--single-put-below", "1GiB", "--checksum", "sha256"],
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("ringload")).unwrap();
            let mut args = vec![store, "--faults", fault];
            if store == "--dir" {
                args.insert(1, dir.path().to_str().unwrap());
            }
            let server = common::spawn_serve(&args);
            let (code, s, stderr) = write_run(engine, Some(&server.endpoint), &extra);
            assert_eq!(code, 0, "{engine} {fault}: {stderr}");
            let retries = &s["save"]["retries_by_cause"];
            assert_eq!(retries["bad_digest"], 1, "{engine} {fault}: {s}");
        }
        // Without a checksum the same change goes unseen: the sink stores the part.
        let server = common::spawn_serve(&["--sink", "--faults", "flip-upload=1000@part/nth=2"]);
        let (code, s, stderr) = write_run(engine, Some(&server.endpoint), &["--checksum", "none"]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        assert_eq!(s["save"]["retries"], 0, "{engine}: {s}");
    }
}

#[test]
fn a_byte_changed_on_every_try_fails_the_run_naming_the_part_and_bad_digest() {
    for engine in ["uring", "baseline"] {
        let server = common::spawn_serve(&["--sink", "--faults", "flip-upload=1000@part/every=1"]);
        let (code, _, stderr) = write_run(engine, Some(&server.endpoint), &[]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("BadDigest"))
            .unwrap_or_else(|| panic!("{engine}: {stderr}"));
        assert!(
            line.contains("part") && line.contains("--checksum none"),
            "{engine}: {line}"
        );
    }
}

/// `ringload run llama3_tiny --np 2` on `engine` against garage's bucket (5 MiB parts), with
/// the override `folder` and `extra`: its summary, the run having exited 0.
fn garage_run(g: &common::Garage, engine: &str, folder: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", "llama3_tiny", "--np", "2", "--engine", engine];
    args.extend([
        "--bucket",
        &g.bucket,
        "--part-size",
        "5MiB",
        folder,
        "--json",
    ]);
    args.extend(extra);
    let (code, stdout, stderr) = g.ringload(&args);
    assert_eq!(code, 0, "{engine} {extra:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn garage_takes_crc32c_and_crc64nvme_parts_and_completions_and_signed_payloads() {
    let Some(g) = common::garage() else { return };
    for engine in ["uring", "baseline"] {
        for (checksum, payload) in [
            ("crc32c", "unsigned"),
            ("crc64nvme", "unsigned"),
            ("crc32c", "sha256"),
        ] {
            let folder =
                format!("checkpoint.checkpoint_folder=checksums/{engine}-{checksum}-{payload}");
            let extra = ["--checksum", checksum, "--payload-signing", payload];
            let read = "checkpoint.num_checkpoints_read=0";
            let s = garage_run(&g, engine, &folder, &[&extra[..], &[read]].concat());
            assert_eq!(s["outcome"], "completed", "{engine} {checksum}: {s}");
            // garage echoes the object's checksum in each completion: it took them.
            assert_eq!(
                s["save"]["checksum_unconfirmed"], 0,
                "{engine} {checksum}: {}",
                s["save"]
            );
        }
    }
}

/// The aws-chunked forms, on both engines: the checksum as a trailer
/// (STREAMING-UNSIGNED-PAYLOAD-TRAILER), and the body signed as one chunk
/// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) with its checksum as a header: garage decodes each,
/// checks the chunk signatures and the trailer's CRC, and the restore reads every byte back.
/// (garage 2.5 signs a trailer with `AWS4-HMAC-SHA256-PAYLOAD` where AWS and the SDKs use
/// `AWS4-HMAC-SHA256-TRAILER`: the signed trailer form is tested against the embedded server.)
#[test]
fn garage_decodes_aws_chunked_trailers_and_signed_chunks() {
    let Some(g) = common::garage() else { return };
    for engine in ["uring", "baseline"] {
        for (form, payload) in [("trailer", "unsigned"), ("header", "streaming")] {
            let folder = format!("checkpoint.checkpoint_folder=chunked/{engine}-{form}-{payload}");
            let extra = [
                "--checksum-form",
                form,
                "--payload-signing",
                payload,
                "--verify",
            ];
            let s = garage_run(&g, engine, &folder, &extra);
            assert_eq!(s["outcome"], "completed", "{engine} {form} {payload}: {s}");
            assert_eq!(
                s["save"]["checksum_unconfirmed"], 0,
                "{engine} {form} {payload}: {}",
                s["save"]
            );
        }
    }
    // Over TLS (OpenSSL in front of garage), the io_uring engine's tail is sealed with the
    // data.
    if ringload::engine::uring::unavailable_cause().is_none() {
        let tls = common::tls_terminator(&g.endpoint, "");
        let endpoint = format!("https://127.0.0.1:{}", tls.port);
        let folder = "checkpoint.checkpoint_folder=chunked/sealed-trailer";
        let extra = [
            "--endpoint",
            &endpoint,
            "--ca-bundle",
            &tls.ca,
            "--checksum-form",
            "trailer",
            "--verify",
        ];
        let s = garage_run(&g, "uring", folder, &extra);
        assert_eq!(s["outcome"], "completed", "{s}");
    }
}

/// Third-party stacks on both sides of the io_uring engine's sealed records: OpenSSL (stunnel,
/// TLS 1.3, then TLS 1.2 at most with AES-GCM's explicit nonces) opens every record of every
/// part, and garage behind it verifies each part's CRC32C; the restore reads the objects back
/// through the same terminator, every byte checked (`--verify`).
#[test]
fn garage_behind_openssl_takes_sealed_parts_with_crc32c_and_they_restore_verified() {
    let Some(g) = common::garage() else { return };
    if ringload::engine::uring::unavailable_cause().is_some() {
        return;
    }
    let tls12 = "sslVersionMax = TLSv1.2\nciphers = ECDHE-ECDSA-AES256-GCM-SHA384\n";
    for (name, extra) in [("tls13", ""), ("tls12", tls12)] {
        let tls = common::tls_terminator(&g.endpoint, extra);
        let endpoint = format!("https://127.0.0.1:{}", tls.port);
        let folder = format!("checkpoint.checkpoint_folder=sealed/{name}");
        let extra = [
            "--endpoint",
            &endpoint,
            "--ca-bundle",
            &tls.ca,
            "--checksum",
            "crc32c",
        ];
        let s = garage_run(&g, "uring", &folder, &[&extra[..], &["--verify"]].concat());
        assert_eq!(s["outcome"], "completed", "{name}: {s}");
        assert_eq!(s["engine"], "uring", "{name}: {s}");
        let negotiated = s["target"]["tls"]["negotiated"]
            .as_str()
            .unwrap()
            .to_string();
        // TLS 1.2 with AES-GCM: every record carries its 8-byte explicit nonce.
        let version = if name == "tls12" {
            "TLSv1_2 TLS_ECDHE_ECDSA_WITH_AES_256_GCM"
        } else {
            "TLSv1_3"
        };
        assert!(negotiated.starts_with(version), "{name}: {negotiated}");
    }
}

/// `--payload-signing sha256`: each body's SHA-256, computed as the part is generated, signed
/// as `x-amz-content-sha256`, on both engines (over https too on the io_uring engine, the
/// parts sealed in place): a server that checks signatures takes every part, and a byte
/// changed in flight is refused (`XAmzContentSHA256Mismatch`) even with no checksum; the plan
/// says which form the bodies go in.
#[test]
fn signed_payloads_are_checked_by_the_server_and_a_changed_byte_is_refused() {
    let keys = [
        "--access-key",
        "AKSIGNED",
        "--secret-key",
        "signed-payload-secret",
    ];
    let plan = |extra: &[&str]| {
        let mut cmd = ringload();
        cmd.args(["plan", "llama3_tiny", "--np", "2"]).args(extra);
        output(&mut cmd).1
    };
    assert!(
        plan(&[]).contains("bodies unsigned (UNSIGNED-PAYLOAD"),
        "{}",
        plan(&[])
    );
    let signed = plan(&["--payload-signing", "sha256"]);
    assert!(
        signed.contains("x-amz-content-sha256: the body's SHA-256"),
        "{signed}"
    );
    let tls = tempfile::tempdir().unwrap();
    let tls_dir = tls.path().join("tls");
    let ca = tls_dir.join("ca.pem").display().to_string();
    for (engine, scheme) in [("uring", "http"), ("uring", "https"), ("baseline", "http")] {
        for (faults, checksum) in [
            (None, "crc32c"),
            (Some("flip-upload=1000@part/every=1"), "none"),
        ] {
            let mut serve = vec!["--sink"];
            serve.extend(keys);
            if let Some(f) = faults {
                serve.extend(["--faults", f]);
            }
            if scheme == "https" {
                serve.extend(["--tls-self-signed", tls_dir.to_str().unwrap()]);
            }
            let server = common::spawn_serve(&serve);
            let mut extra = keys.to_vec();
            extra.extend(["--payload-signing", "sha256", "--checksum", checksum]);
            if scheme == "https" {
                extra.extend(["--ca-bundle", &ca]);
            }
            let (code, s, stderr) = write_run(engine, Some(&server.endpoint), &extra);
            let what = format!("{engine} {scheme} {faults:?}");
            if faults.is_none() {
                assert_eq!(code, 0, "{what}: {stderr}");
                assert_eq!(s["outcome"], "completed", "{what}: {s}");
            } else {
                assert_eq!(code, 3, "{what}: {stderr}");
                assert!(
                    stderr.contains("XAmzContentSHA256Mismatch"),
                    "{what}: {stderr}"
                );
            }
        }
    }
}

/// The aws-chunked forms against the embedded server with keys, on both engines (over https
/// too on the io_uring engine, the tail sealed with the data): the CRC32C as a trailer, the
/// body signed as one chunk, and both; the server decodes each, checks every chunk's and the
/// trailer's signature and the checksum, and a byte changed in flight is refused — as
/// `BadDigest` by the trailer's CRC, as `SignatureDoesNotMatch` by the chunk's signature with
/// no checksum. The plan says which forms the bodies and checksums go in.
#[test]
fn aws_chunked_bodies_are_decoded_and_checked_and_a_changed_byte_is_refused() {
    let keys = ["--access-key", "AKCHUNK", "--secret-key", "chunked-secret"];
    let mut cmd = ringload();
    cmd.args(["plan", "llama3_tiny", "--np", "2"]).args([
        "--checksum-form",
        "trailer",
        "--payload-signing",
        "streaming",
    ]);
    let plan = output(&mut cmd).1;
    assert!(plan.contains("as an aws-chunked trailer"), "{plan}");
    assert!(plan.contains("STREAMING-AWS4-HMAC-SHA256-"), "{plan}");
    // One chunk per part: the plan names MinIO's 16 MiB limit where a part is larger.
    let mut cmd = ringload();
    cmd.args([
        "plan",
        "llama3_8b",
        "--np",
        "8",
        "--checksum-form",
        "trailer",
    ]);
    let plan = output(&mut cmd).1;
    assert!(plan.contains("MinIO refuses chunks over 16 MiB"), "{plan}");
    let tls = tempfile::tempdir().unwrap();
    let tls_dir = tls.path().join("tls");
    let ca = tls_dir.join("ca.pem").display().to_string();
    let forms: [(&str, &str, &str, Option<&str>); 5] = [
        ("unsigned", "trailer", "crc32c", None),
        ("streaming", "header", "crc32c", None),
        ("streaming", "trailer", "crc64nvme", None),
        ("unsigned", "trailer", "crc32c", Some("BadDigest")),
        ("streaming", "header", "none", Some("SignatureDoesNotMatch")),
    ];
    // A write run of `engine` over `scheme` against a keyed sink serving `faults`.
    let run = |engine: &str, scheme: &str, faults: Option<&str>, flags: &[&str]| {
        let mut serve = vec!["--sink"];
        serve.extend(keys);
        serve.extend(faults.iter().flat_map(|f| ["--faults", f]));
        let mut extra = keys.to_vec();
        extra.extend(flags);
        if scheme == "https" {
            serve.extend(["--tls-self-signed", tls_dir.to_str().unwrap()]);
            extra.extend(["--ca-bundle", &ca]);
        }
        let server = common::spawn_serve(&serve);
        write_run(engine, Some(&server.endpoint), &extra)
    };
    for (engine, scheme) in [("uring", "http"), ("uring", "https"), ("baseline", "http")] {
        for (payload, form, checksum, refused) in forms {
            let faults = refused.map(|_| "flip-upload=1000@part/every=1");
            let flags = [
                "--payload-signing",
                payload,
                "--checksum-form",
                form,
                "--checksum",
                checksum,
            ];
            let (code, s, stderr) = run(engine, scheme, faults, &flags);
            let what = format!("{engine} {scheme} {payload} {form} {checksum}");
            match refused {
                None => {
                    assert_eq!(code, 0, "{what}: {stderr}");
                    assert_eq!(s["outcome"], "completed", "{what}: {s}");
                    assert_eq!(s["save"]["checksum_unconfirmed"], 0, "{what}: {s}");
                }
                Some(answer) => {
                    assert_eq!(code, 3, "{what}: {stderr}");
                    assert!(stderr.contains(answer), "{what}: {stderr}");
                }
            }
        }
        // A part answered 503 is sent again: signed again, its tail framed and placed again
        // (sealed again over https), and the server checks it anew.
        let flags = [
            "--payload-signing",
            "streaming",
            "--checksum-form",
            "trailer",
        ];
        let (code, s, stderr) = run(engine, scheme, Some("503@part/nth=2"), &flags);
        assert_eq!(code, 0, "{engine} {scheme} 503: {stderr}");
        assert_eq!(
            s["save"]["retries"], 1,
            "{engine} {scheme} 503: {}",
            s["save"]
        );
    }
}

/// A store that ignores checksums (`serve --faults ignore-checksums@any/every=1`: the headers
/// dropped before it reads them) completes every upload without the object's checksum in its
/// result: the run completes and says, in the summary and the report's line, how many
/// completions carried none back, naming `--checksum none`.
#[test]
fn a_store_that_ignores_checksums_is_named_in_the_summary_and_the_report() {
    for engine in ["uring", "baseline"] {
        let server = common::spawn_serve(&["--sink", "--faults", "ignore-checksums@any/every=1"]);
        let (code, s, stderr) = write_run(engine, Some(&server.endpoint), &[]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        // Every object of every checkpoint written is a multipart upload here.
        let saves = s["checkpoints"].as_array().unwrap().len() as u64;
        let multipart = s["objects_per_checkpoint"].as_u64().unwrap() * saves;
        assert!(multipart > 0, "{engine}: {s}");
        assert_eq!(
            s["save"]["checksum_unconfirmed"], multipart,
            "{engine}: {}",
            s["save"]
        );
        // The same run's report (without --json) says it in its written line; with keys, the
        // store's signature check covers the headers as sent before it drops them.
        let keys = [
            "--access-key",
            "AKIGNORES",
            "--secret-key",
            "ignores-checksums-secret",
        ];
        let mut serve = vec!["--sink", "--faults", "ignore-checksums@any/every=1"];
        serve.extend(keys);
        let server = common::spawn_serve(&serve);
        let mut cmd = ringload();
        cmd.args(["run", "llama3_tiny", "--np", "2", "--engine", engine])
            .args(["--part-size", "5MiB", "checkpoint.num_checkpoints_read=0"])
            .args(["--endpoint", &server.endpoint, "--bucket", "ringload"])
            .args(keys);
        let (code, stdout, stderr) = output(&mut cmd);
        assert_eq!(code, 0, "{engine}: {stderr}");
        assert!(
            stdout.contains("completions carried no checksum back")
                && stdout.contains("--checksum none"),
            "{engine}: {stdout}"
        );
    }
}

/// `ringload run` of llama3_tiny at NP 2, written and restored (1 MiB ranges: several per
/// block), against `endpoint` on `engine`, then `extra`: (exit code, summary or null, stderr).
fn restore_run(engine: &str, endpoint: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut cmd = ringload();
    cmd.args(["run", "llama3_tiny", "--np", "2", "--engine", engine])
        .args(["--read-range", "1MiB", "--part-size", "5MiB", "--json"])
        .args(["--endpoint", endpoint, "--bucket", "ringload"])
        .args(extra);
    let (code, stdout, stderr) = output(&mut cmd);
    (
        code,
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stderr,
    )
}

/// Restores check each object's FULL_OBJECT CRC, from one HEAD with `x-amz-checksum-mode:
/// ENABLED`, against the CRCs of the blocks they read, on both engines without `--verify`: a
/// byte changed in a ranged GET (`serve --faults flip=N@rg`) fails the run naming both CRCs;
/// `--restore-checksum off` sends DLIO's requests only (the change goes unseen); a COMPOSITE
/// SHA-256 cannot be checked from blocks and is counted unchecked. The plan says which.
#[test]
fn restores_check_each_objects_crc_and_catch_a_changed_byte_without_verify() {
    let mut cmd = ringload();
    cmd.args(["plan", "llama3_tiny", "--np", "2"]);
    let plan = output(&mut cmd).1;
    assert!(
        plan.contains("restore     checksum on: one HEAD per object"),
        "{plan}"
    );
    for engine in ["uring", "baseline"] {
        let server = common::spawn_serve(&["--sink"]);
        let (code, s, stderr) = restore_run(engine, &server.endpoint, &[]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        let restored = s["objects_per_checkpoint"].as_u64().unwrap() * 2;
        assert_eq!(
            s["load"]["checksum_checked"], restored,
            "{engine}: {}",
            s["load"]
        );
        assert!(
            s["load"]["checksum_cpu_s_per_gib"].as_f64().unwrap() > 0.0,
            "{engine}"
        );

        let server = common::spawn_serve(&["--sink", "--faults", "flip=1000@rg/nth=3"]);
        let (code, _, stderr) = restore_run(engine, &server.endpoint, &[]);
        assert_eq!(code, 3, "{engine}: {stderr}");
        assert!(
            stderr.contains("the CRC32C of the bytes read") && stderr.contains("from a HEAD"),
            "{engine}: {stderr}"
        );

        let server = common::spawn_serve(&["--sink", "--faults", "flip=1000@rg/nth=3"]);
        let (code, s, stderr) =
            restore_run(engine, &server.endpoint, &["--restore-checksum", "off"]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        assert_eq!(s["load"]["checksum_checked"], 0, "{engine}: {}", s["load"]);

        let server = common::spawn_serve(&["--sink"]);
        let (code, s, stderr) = restore_run(engine, &server.endpoint, &["--checksum", "sha256"]);
        assert_eq!(code, 0, "{engine}: {stderr}");
        assert_eq!(
            s["load"]["checksum_unchecked"], restored,
            "{engine}: {}",
            s["load"]
        );
    }
}

/// garage, a third-party store, returns each object's FULL_OBJECT CRC32C to a HEAD with
/// `x-amz-checksum-mode: ENABLED`, and the restores of both engines check it against the
/// CRCs of the blocks they read.
#[test]
fn garage_returns_the_crcs_restores_check() {
    let Some(g) = common::garage() else { return };
    for engine in ["uring", "baseline"] {
        let folder = format!("checkpoint.checkpoint_folder=restore-check/{engine}");
        let s = garage_run(&g, engine, &folder, &["--read-range", "1MiB"]);
        let restored = s["objects_per_checkpoint"].as_u64().unwrap() * 2;
        assert_eq!(
            s["load"]["checksum_checked"], restored,
            "{engine}: {}",
            s["load"]
        );
    }
}
