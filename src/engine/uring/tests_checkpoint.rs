//! Checkpoint I/O on the ring against the embedded server's directory store (real sockets,
//! the file on disk compared byte by byte) and against scripted servers that fail parts.

use super::*;
use crate::checkpoint::ObjectIoShape;
use crate::content::Content;
use crate::rank::IoErrorKind;
use crate::rank::checkpoint::{ObjectIo, ObjectSpec};
use crate::s3::{Credentials, Endpoint, Target};
use crate::server::dir::DirStore;
use crate::server::{Server, ServerConfig, Store};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;

const MIB: u64 = 1 << 20;
const BUCKET: &str = "bkt";

fn shape(part_bytes: u64, single_put_below: u64, send_zc: bool) -> ObjectIoShape {
    ObjectIoShape {
        part_bytes,
        parts_in_flight: 2,
        single_put_below,
        single_put_bytes: single_put_below.saturating_sub(1),
        read_range_bytes: 2 * MIB,
        read_blocks: 2,
        send_zc,
        verify: true,
        checksum: crate::checksum::Checksum::Crc32c,
        payload: Default::default(),
        checksum_form: Default::default(),
        restore_check: false,
        tls: false,
        content: Default::default(),
    }
}

fn object(key: &str, bytes: u64) -> ObjectSpec {
    ObjectSpec {
        key: key.into(),
        bytes,
        content: Content::of(key, true),
    }
}

fn expected(object: &ObjectSpec) -> Vec<u8> {
    let mut bytes = vec![0u8; object.bytes as usize];
    object.content.fill(0, &mut bytes);
    bytes
}

/// The embedded server on a directory with bucket `b`; with `signed`, every request must be
/// signed by the test's keys.
fn dir_server(signed: bool) -> (tempfile::TempDir, Server) {
    let root = tempfile::tempdir().unwrap();
    let store = DirStore::new(root.path()).unwrap();
    store.create_bucket(BUCKET).unwrap();
    let server = Server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        store: Store::Dir(store),
        credentials: signed.then(|| crate::server::Credentials {
            access_key_id: "AK".into(),
            secret_access_key: "SK".into(),
        }),
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: Default::default(),
        max_connections: crate::server::DEFAULT_MAX_CONNECTIONS,
        tls: None,
    })
    .unwrap();
    (root, server)
}

/// The engine for `url`, or `None` (skipped) where io_uring is not available.
fn engine(url: &str, signed: bool, policy: RetryPolicy) -> Option<UringEngine> {
    if let Some(cause) = unavailable_cause() {
        eprintln!("skipping: io_uring is not available here: {cause}");
        return None;
    }
    let credentials = signed.then(|| Credentials {
        access_key_id: "AK".into(),
        secret_access_key: "SK".into(),
        session_token: None,
    });
    let target = Target::simple(Endpoint::parse(url).unwrap(), BUCKET, credentials);
    Some(UringEngine::new(Client::new(target, policy).unwrap()).unwrap())
}

fn policy(retries: u32) -> RetryPolicy {
    RetryPolicy {
        retries,
        timeout: Duration::from_secs(20),
        first_backoff: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}

#[test]
fn a_multipart_object_lands_whole_and_reads_back_verified() {
    let (root, server) = dir_server(true);
    let Some(uring) = engine(&server.endpoint_url(), true, policy(2)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(5 * MIB, 0, false)).unwrap();
    // 3.5 parts of 5 MiB, two in flight.
    let o = object("ckpt/m/global_epoch1_step1/model_states.pt", 35 * MIB / 2);
    io.put(&o).unwrap();
    let file = root.path().join(BUCKET).join(&o.key);
    let written = std::fs::read(&file).unwrap();
    assert!(
        written == expected(&o),
        "the file differs from the generator's bytes"
    );
    let stats = io.stats().write.clone();
    assert_eq!((stats.objects, stats.parts), (1, 4));
    assert_eq!(stats.bytes_written, o.bytes);
    assert_eq!(stats.part_latency.count(), 4);
    assert_eq!((stats.zc_sends, stats.retries, stats.aborted), (0, 0, 0));

    // Read back in two blocks of 2 MiB GETs, every byte checked.
    io.get(&o).unwrap();
    let read = &io.stats().read;
    assert_eq!(read.bytes_read, o.bytes);
    // Two blocks of 8.75 MiB (rounded to pages): 5 GETs each.
    assert_eq!(read.requests, 10);
    assert_eq!(read.verify.gets, 10);

    // A flipped byte is caught, named by the key and its offset.
    let mut bad = written;
    let at = 11 * MIB as usize + 3;
    bad[at] ^= 1;
    std::fs::write(&file, &bad).unwrap();
    let Err(RankError::Io(error)) = io.get(&o) else {
        panic!("a corrupted object read back without complaint");
    };
    assert_eq!(error.kind, IoErrorKind::Corrupt, "{}", error.message);
    assert!(error.message.contains(&o.key), "{}", error.message);
    assert!(
        error.message.contains(&format!("byte {at} ")),
        "{}",
        error.message
    );
    // The connections are all back, and the next read works.
    std::fs::write(&file, expected(&o)).unwrap();
    io.get(&o).unwrap();
}

#[test]
fn a_tiny_object_as_a_multipart_upload_and_as_one_put() {
    // An empty object is one empty part of a multipart upload, as the baseline and the
    // fork's writer send it; a restore of it sends nothing.
    {
        let (root, server) = dir_server(false);
        let Some(uring) = engine(&server.endpoint_url(), false, policy(2)) else {
            return;
        };
        let mut io = uring.checkpoint(0, shape(5 * MIB, 0, false)).unwrap();
        let o = object("tiny/empty.pt", 0);
        io.put(&o).unwrap();
        let written = std::fs::read(root.path().join(BUCKET).join(&o.key)).unwrap();
        assert!(written.is_empty());
        assert_eq!((io.stats().write.objects, io.stats().write.parts), (1, 1));
        io.get(&o).unwrap();
        assert_eq!(io.stats().read.requests, 0);
    }
    let (root, server) = dir_server(false);
    let Some(uring) = engine(&server.endpoint_url(), false, policy(2)) else {
        return;
    };
    for (single_put_below, parts) in [(0, 1), (MIB, 1)] {
        let mut io = uring
            .checkpoint(0, shape(5 * MIB, single_put_below, false))
            .unwrap();
        let o = object(&format!("tiny/{single_put_below}.pt"), 32_000);
        io.put(&o).unwrap();
        let written = std::fs::read(root.path().join(BUCKET).join(&o.key)).unwrap();
        assert!(written == expected(&o), "{single_put_below}");
        assert_eq!(io.stats().write.parts, parts);
        io.get(&o).unwrap();
        assert_eq!(io.stats().read.bytes_read, 32_000);
    }
}

#[test]
fn send_zc_sends_from_the_registered_buffers_and_loopback_copies() {
    let (root, server) = dir_server(false);
    let Some(uring) = engine(&server.endpoint_url(), false, policy(2)) else {
        return;
    };
    let mut io = match uring.checkpoint(0, shape(5 * MIB, 0, true)) {
        Ok(io) => io,
        Err(e) if e.to_string().contains("lacks SEND_ZC") => {
            eprintln!("skipping: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let o = object("zc/o.pt", 12 * MIB + 5);
    io.put(&o).unwrap();
    io.put(&o).unwrap();
    let written = std::fs::read(root.path().join(BUCKET).join(&o.key)).unwrap();
    assert!(written == expected(&o));
    let stats = &io.stats().write;
    assert_eq!(stats.parts, 6);
    assert!(stats.zc_sends >= 6, "{stats:?}");
    // Loopback hands the pages to the receiver's socket: the kernel copies them.
    assert!(stats.zc_copied > 0, "{stats:?}");
    assert!(stats.zc_copied <= stats.zc_sends);
    // A restore right after: each buffer is read into only once its notification came.
    io.get(&o).unwrap();
    assert_eq!(io.stats().read.bytes_read, o.bytes);
}

/// A scripted S3 server for uploads: it reads each request whole, records its request line,
/// and answers from `answer(line, count of earlier requests with that line)`.
fn scripted(answer: fn(&str, usize) -> Vec<u8>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let log = Arc::clone(&log);
            std::thread::spawn(move || serve(stream, &log, answer));
        }
    });
    (url, seen)
}

/// A request head read a byte at a time (`None`: the client went away).
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8(head).unwrap())
}

fn serve(mut stream: TcpStream, log: &Mutex<Vec<String>>, answer: fn(&str, usize) -> Vec<u8>) {
    while let Some(head) = read_head(&mut stream) {
        let line = head.lines().next().unwrap().to_string();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |l| l.trim().parse().unwrap());
        let mut body = vec![0u8; length];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let earlier = {
            let mut log = log.lock().unwrap();
            let n = log.iter().filter(|l| **l == line).count();
            log.push(line.clone());
            n
        };
        let reply = answer(&line, earlier);
        if reply.is_empty() || stream.write_all(&reply).is_err() {
            return;
        }
    }
}

/// A store that answers each part `404 NoSuchUpload` as soon as it has its head, and then
/// neither reads the body nor closes: the part's sender must notice the answer (its body
/// would otherwise block on a full socket until the request's timeout). The connection stays
/// open until the client leaves. Everything else is answered as `upload_answer` does.
fn answers_parts_at_their_head() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                // A small receive buffer, so that an unread body fills it soon.
                let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&stream, 4096);
                while let Some(head) = read_head(&mut stream) {
                    let line = head.lines().next().unwrap().to_string();
                    log.lock().unwrap().push(line.clone());
                    if line.starts_with("PUT") {
                        let _ = stream.write_all(&reply(
                            "404 Not Found",
                            "",
                            "<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>",
                        ));
                        // The body is neither read nor the connection closed: a sender that
                        // does not notice the answer blocks until its idle timeout.
                        std::thread::sleep(Duration::from_secs(60));
                        return;
                    }
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |l| l.trim().parse().unwrap());
                    let mut body = vec![0u8; length];
                    if stream.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = stream.write_all(&upload_answer(&line, 0, |_| false));
                }
            });
        }
    });
    (url, seen)
}

/// A part answered `404 NoSuchUpload` before its body was read ends at once with that code,
/// not retried (the store will not take the upload), on a connection that kept sending
/// nothing after the answer; the upload is aborted.
#[test]
fn a_part_answered_before_its_body_was_read_ends_with_that_answer() {
    let (url, seen) = answers_parts_at_their_head();
    let Some(uring) = engine(&url, false, policy(3)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(5 * MIB, 0, false)).unwrap();
    let started = Instant::now();
    let error = io.put(&object("a/o.pt", 12 * MIB)).unwrap_err();
    let RankError::Io(error) = error else {
        panic!("{error}")
    };
    assert!(
        error.message.contains("404 NoSuchUpload"),
        "{}",
        error.message
    );
    assert!(error.message.contains("aborted"), "{}", error.message);
    // Well before the request's 20 s timeout: the answer was noticed while sending.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let stats = &io.stats().write;
    assert_eq!((stats.retries, stats.parts), (0, 0), "{stats:?}");
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|l| l.starts_with("DELETE")), "{seen:?}");
}

fn reply(status: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An S3 that answers every upload request well, but `part 2` as `fail_part` says.
fn upload_answer(line: &str, earlier: usize, fail_part: impl Fn(usize) -> bool) -> Vec<u8> {
    if line.starts_with("POST") && line.contains("?uploads") {
        reply(
            "200 OK",
            "",
            "<InitiateMultipartUploadResult><UploadId>up-1</UploadId></InitiateMultipartUploadResult>",
        )
    } else if line.starts_with("PUT") && line.contains("partNumber=2&") && fail_part(earlier) {
        reply(
            "503 Slow Down",
            "",
            "<Error><Code>SlowDown</Code><Message>busy</Message></Error>",
        )
    } else if line.starts_with("PUT") {
        reply("200 OK", "etag: \"e\"\r\n", "")
    } else if line.starts_with("POST") {
        reply(
            "200 OK",
            "",
            "<CompleteMultipartUploadResult><ETag>\"x\"</ETag></CompleteMultipartUploadResult>",
        )
    } else if line.starts_with("DELETE") {
        reply("204 No Content", "", "")
    } else {
        reply("400 Bad Request", "", "")
    }
}

#[test]
fn a_part_answered_503_is_retried() {
    let (url, seen) = scripted(|line, earlier| upload_answer(line, earlier, |n| n == 0));
    let Some(uring) = engine(&url, false, policy(2)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(MIB, 0, false)).unwrap();
    io.put(&object("r/o.pt", 3 * MIB)).unwrap();
    let stats = &io.stats().write;
    assert_eq!((stats.objects, stats.parts, stats.retries), (1, 3, 1));
    assert_eq!(stats.retries_by_cause.get("503"), Some(&1));
    let seen = seen.lock().unwrap();
    let part2 = seen.iter().filter(|l| l.contains("partNumber=2&")).count();
    assert_eq!(part2, 2, "{seen:?}");
    assert!(!seen.iter().any(|l| l.starts_with("DELETE")), "{seen:?}");
}

#[test]
fn a_part_whose_connection_is_cut_is_retried() {
    // The first attempt of part 2 is read whole, then the server closes without answering.
    let (url, seen) = scripted(|line, earlier| {
        if line.contains("partNumber=2&") && earlier == 0 {
            return Vec::new();
        }
        upload_answer(line, earlier, |_| false)
    });
    let Some(uring) = engine(&url, false, policy(2)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(MIB, 0, false)).unwrap();
    io.put(&object("c/o.pt", 3 * MIB)).unwrap();
    let stats = &io.stats().write;
    assert_eq!((stats.objects, stats.parts, stats.retries), (1, 3, 1));
    assert_eq!(
        stats.retries_by_cause.get("connection"),
        Some(&1),
        "{stats:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1 + 4 + 1);
}

#[test]
fn a_completion_answered_200_with_an_error_aborts_the_upload() {
    let (url, seen) = scripted(|line, earlier| {
        if line.starts_with("POST") && line.contains("?uploadId=") {
            let error = "<Error><Code>InternalError</Code><Message>try again</Message></Error>";
            return reply("200 OK", "", error);
        }
        upload_answer(line, earlier, |_| false)
    });
    let Some(uring) = engine(&url, false, policy(2)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(MIB, 0, false)).unwrap();
    let Err(RankError::Io(error)) = io.put(&object("d/o.pt", 2 * MIB)) else {
        panic!("a completion answered with an error document did not fail the upload");
    };
    assert!(
        error
            .message
            .contains("CompleteMultipartUpload s3://bkt/d/o.pt"),
        "{}",
        error.message
    );
    assert!(error.message.contains("InternalError"), "{}", error.message);
    assert!(error.message.contains("aborted"), "{}", error.message);
    assert_eq!(io.stats().write.aborted, 1);
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter()
            .any(|l| l.starts_with("DELETE /bkt/d/o.pt?uploadId=up-1 ")),
        "{seen:?}"
    );
}

#[test]
fn a_part_past_its_retries_aborts_the_upload() {
    let (url, seen) = scripted(|line, earlier| upload_answer(line, earlier, |_| true));
    let Some(uring) = engine(&url, false, policy(1)) else {
        return;
    };
    let mut io = uring.checkpoint(0, shape(MIB, 0, false)).unwrap();
    let o = object("a/o.pt", 3 * MIB);
    let Err(RankError::Io(error)) = io.put(&o) else {
        panic!("a part that always fails did not fail the upload");
    };
    assert!(
        error.message.contains("s3://bkt/a/o.pt"),
        "{}",
        error.message
    );
    assert!(error.message.contains("part 2 of 3"), "{}", error.message);
    assert!(error.message.contains("aborted"), "{}", error.message);
    let stats = &io.stats().write;
    let seen = seen.lock().unwrap();
    assert_eq!(
        (stats.objects, stats.aborted, stats.retries),
        (0, 1, 1),
        "retries by cause {:?}; requests {seen:?}",
        stats.retries_by_cause
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with("DELETE /bkt/a/o.pt?uploadId=up-1 ")),
        "{seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|l| l.starts_with("POST /bkt/a/o.pt?uploadId=")),
        "{seen:?}"
    );
    drop(seen);
    // Nothing left open.
    assert_eq!(io.abort_open(), 0);
}

/// The embedded server over TLS 1.3 on a directory, with `faults`; its CA's path.
fn tls_dir_server(faults: &str) -> (tempfile::TempDir, Server, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let store = DirStore::new(root.path()).unwrap();
    store.create_bucket(BUCKET).unwrap();
    let listen = "127.0.0.1:0".parse().unwrap();
    let (tls, files) = crate::server::tls::self_signed(listen, &root.path().join("tls")).unwrap();
    let server = Server::start(ServerConfig {
        listen,
        store: Store::Dir(store),
        credentials: None,
        region: "us-east-1".into(),
        worker_threads: 2,
        throttle_bytes_per_s: None,
        faults: crate::server::faults::Faults::parse(faults, 1).unwrap(),
        max_connections: crate::server::DEFAULT_MAX_CONNECTIONS,
        tls: Some(tls),
    })
    .unwrap();
    (root, server, files.ca_pem)
}

/// Rank 0's checkpoint I/O on the io_uring engine over TLS to `server` (trusting `ca`), 5 MiB
/// parts, with `retries` and `zc`.
fn tls_checkpoint(
    server: &Server,
    ca: std::path::PathBuf,
    retries: u32,
    zc: bool,
) -> super::checkpoint::RingCheckpoint {
    let url = server.endpoint_url();
    let mut target = Target::simple(Endpoint::parse(&url).unwrap(), BUCKET, None);
    target.tls.ca_bundle = Some(ca);
    let uring = UringEngine::new(Client::new(target, policy(retries)).unwrap()).unwrap();
    let tls = ObjectIoShape {
        tls: true,
        ..shape(5 * MIB, 0, zc)
    };
    uring.checkpoint(0, tls).unwrap()
}

/// Over TLS: parts generated laid out record by record and sealed in their buffers, a part
/// cut mid-body retried (generated and sealed again, on a new connection), a part whose byte
/// was changed on the way refused by its CRC32C (`BadDigest`), the object on disk exactly the
/// generator's bytes, and the restore's ranges decrypted in place and verified.
#[test]
fn over_tls_parts_are_sealed_in_place_retried_sealed_again_and_read_back() {
    for zc in [false, true] {
        if unavailable_cause().is_some() {
            return;
        }
        let (root, server, ca) = tls_dir_server("cut=100000@part/nth=2");
        let mut io = tls_checkpoint(&server, ca, 2, zc);
        // 3.5 parts of 5 MiB, two in flight; the second part's first attempt is cut.
        let o = object("ckpt/t/global_epoch1_step1/model_states.pt", 35 * MIB / 2);
        io.put(&o).unwrap();
        let written = std::fs::read(root.path().join(BUCKET).join(&o.key)).unwrap();
        assert!(written == expected(&o), "the file differs (zc {zc})");
        let stats = io.stats().write.clone();
        assert_eq!(
            (stats.objects, stats.parts, stats.retries),
            (1, 4, 1),
            "zc {zc}"
        );
        io.get(&o).unwrap();
        let read = &io.stats().read;
        assert_eq!(read.bytes_read, o.bytes, "zc {zc}");
        assert_eq!(read.verify.gets, read.requests, "zc {zc}");
        drop(io);
        drop(server);
    }
    // A byte changed between the client and the store: the part's checksum refuses it.
    let (_root, server, ca) = tls_dir_server("flip-upload=1000@part/every=1");
    let mut io = tls_checkpoint(&server, ca, 1, false);
    let error = io
        .put(&object("ckpt/f/o.pt", 6 * MIB))
        .unwrap_err()
        .to_string();
    assert!(error.contains("BadDigest"), "{error}");
}
