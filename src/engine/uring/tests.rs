//! The engine against a scripted HTTP server on a real loopback socket: each accepted
//! connection reads request heads and answers each with the next scripted response, written
//! in the pieces the script gives (with pauses, so they arrive apart), or closes.
#![allow(clippy::needless_range_loop)]

use super::*;
use crate::rank::{IoError, IoErrorKind, RankIo};
use crate::s3::{Endpoint, Target};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

impl UringRank<'_> {
    /// The body of an arrived GET, as the kernel wrote it into the pool.
    pub(super) fn body(&self, reader: usize, get: usize) -> &[u8] {
        let crate::engine::window::Slot::Arrived(buf) = *self.window.slot(reader, get) else {
            panic!("GET {reader}.{get} has not arrived");
        };
        let len = self.window.get(reader, get).len_bytes as usize;
        self.transport.ring.filled(buf, len)
    }
}

#[derive(Clone)]
enum Piece {
    Write(Vec<u8>),
    Pause,
    Close,
}

/// The bytes of `get`'s range: a pattern that shows any shift or loss.
pub(super) fn pattern(get: &RangedGet) -> Vec<u8> {
    (get.offset..get.offset + get.len_bytes)
        .map(|i| (i % 251) as u8)
        .collect()
}

pub(super) fn head_206(get: &RangedGet) -> Vec<u8> {
    format!(
        "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {}-{}/1000000\r\n\
         content-length: {}\r\n\r\n",
        get.offset,
        get.last_byte(),
        get.len_bytes
    )
    .into_bytes()
}

fn whole(get: &RangedGet) -> Vec<Piece> {
    vec![Piece::Write([head_206(get), pattern(get)].concat())]
}

/// A scripted server: its URL and how many connections it accepted.
pub(super) struct Scripted {
    pub(super) url: String,
    pub(super) accepted: Arc<AtomicUsize>,
}

/// The script of responses, taken in order by every connection.
pub(super) type Script<P> = Mutex<std::vec::IntoIter<Vec<P>>>;

/// Accepts connections on a loopback port (`scheme://` in its URL), counting them, and hands
/// each to `answer` on a thread of its own with the shared script of `responses`.
pub(super) fn accept_each<P: Send + 'static>(
    scheme: &str,
    responses: Vec<Vec<P>>,
    answer: impl Fn(TcpStream, &Script<P>) + Clone + Send + 'static,
) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let script = Arc::new(Mutex::new(responses.into_iter()));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let (script, answer) = (Arc::clone(&script), answer.clone());
            std::thread::spawn(move || answer(stream, &script));
        }
    });
    Scripted { url, accepted }
}

/// Serves `responses` in order, one per request, over however many connections it takes.
fn serve(responses: Vec<Vec<Piece>>) -> Scripted {
    accept_each("http", responses, answer)
}

fn answer(mut stream: TcpStream, script: &Script<Piece>) {
    stream.set_nodelay(true).unwrap();
    loop {
        // Read one request head.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let Some(pieces) = script.lock().unwrap().next() else {
            return;
        };
        for piece in pieces {
            match piece {
                Piece::Write(bytes) => {
                    if stream.write_all(&bytes).is_err() {
                        return;
                    }
                }
                Piece::Pause => std::thread::sleep(Duration::from_millis(3)),
                Piece::Close => return,
            }
        }
    }
}

pub(super) fn get(offset: u64, len_bytes: u64) -> RangedGet {
    RangedGet {
        whole: false,
        fetch: None,
        object: None,
        key: "train/f.parquet".into(),
        offset,
        len_bytes,
        check: None,
        extents: None,
    }
}

pub(super) fn policy(retries: u32, timeout_ms: u64) -> RetryPolicy {
    RetryPolicy {
        retries,
        timeout: Duration::from_millis(timeout_ms),
        first_backoff: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}

pub(super) fn uring(url: &str, policy: RetryPolicy) -> Option<UringEngine> {
    if let Some(cause) = unavailable_cause() {
        eprintln!("skipping: io_uring is not available here: {cause}");
        return None;
    }
    let mut target = Target::simple(Endpoint::parse(url).unwrap(), "b", None);
    // The scripted TLS servers' certificate is made for the test, for `localhost`.
    target.tls.insecure = url.starts_with("https://");
    Some(UringEngine::new(Client::new(target, policy).unwrap()).unwrap())
}

/// Runs one reader's GETs one at a time (prefetch 1); the error of the first that fails.
pub(super) fn fetch_all(
    url: &str,
    policy: RetryPolicy,
    gets: Vec<RangedGet>,
) -> Option<(Result<(), RankError>, crate::metrics::RequestStats)> {
    let uring = uring(url, policy)?;
    let barrier = StepBarrier::new(1, Duration::from_secs(10));
    let progress = Progress::default();
    let n = gets.len();
    let expected: Vec<Vec<u8>> = gets.iter().map(pattern).collect();
    let largest = gets.iter().map(|g| g.len_bytes as usize).max().unwrap_or(1);
    // Over TLS each buffer has room for a record beyond its body, as the plan gives it.
    let slack = if url.starts_with("https://") {
        crate::budget::TLS_RECORD_SLACK_BYTES as usize
    } else {
        0
    };
    let mut rank = uring
        .rank(
            vec![gets],
            1,
            None,
            1,
            1,
            0,
            (largest + slack).next_multiple_of(4096),
            &barrier,
            &progress,
        )
        .unwrap();
    let result = (|| {
        rank.start_epoch()?;
        for i in 0..n {
            rank.wait_for(0, i)?;
            assert_eq!(rank.body(0, i), &expected[i][..], "GET {i}'s body");
            rank.release(0, i)?;
        }
        rank.end_epoch()
    })();
    Some((result, rank.stats().clone()))
}

#[test]
fn a_head_in_pieces_and_body_bytes_arriving_with_it() {
    let g = get(1000, 3000);
    let head = head_206(&g);
    let body = pattern(&g);
    // The head a byte at a time for its first 40 bytes, then its rest with 100 body bytes,
    // then the body in three pieces.
    let mut pieces = Vec::new();
    for b in &head[..40] {
        pieces.push(Piece::Write(vec![*b]));
        pieces.push(Piece::Pause);
    }
    pieces.push(Piece::Write([&head[40..], &body[..100]].concat()));
    pieces.push(Piece::Pause);
    pieces.push(Piece::Write(body[100..1500].to_vec()));
    pieces.push(Piece::Pause);
    pieces.push(Piece::Write(body[1500..].to_vec()));
    // The head and the whole body in one write.
    let server = serve(vec![pieces, whole(&get(5, 4000))]);
    let Some((result, stats)) = fetch_all(&server.url, policy(0, 5000), vec![g, get(5, 4000)])
    else {
        return;
    };
    result.unwrap();
    assert_eq!(
        (stats.requests, stats.bytes_read, stats.retries),
        (2, 7000, 0)
    );
    // Both over one keep-alive connection.
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn wrong_answers_are_errors_and_are_not_retried() {
    let g = get(0, 100);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n".to_vec(),
            "answered 200 instead of 206 Partial Content: the server ignores Range",
        ),
        (
            b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-98/1000\r\ncontent-length: 99\r\n\r\n".to_vec(),
            "Content-Range is 'bytes 0-98/1000'",
        ),
        (
            b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-99/1000\r\ncontent-length: 101\r\n\r\n".to_vec(),
            "Content-Length is 101",
        ),
        (
            {
                let doc = "<Error><Code>AccessDenied</Code><Message>no</Message></Error>";
                format!("HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\n\r\n{doc}", doc.len())
                    .into_bytes()
            },
            "HTTP 403 AccessDenied (no)",
        ),
    ];
    for (answer, expected) in cases {
        let server = serve(vec![vec![Piece::Write(answer.clone())]]);
        let Some((result, stats)) = fetch_all(&server.url, policy(3, 5000), vec![g.clone()]) else {
            return;
        };
        let err = result.unwrap_err().to_string();
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(
            err.contains("GET s3://b/train/f.parquet (bytes=0-99)"),
            "{err}"
        );
        assert_eq!((stats.retries, stats.errors), (0, 1), "{expected}");
    }
}

#[test]
fn a_connection_closed_mid_body_is_retried_then_reported() {
    let g = get(0, 5000);
    let cut = vec![
        Piece::Write([head_206(&g), pattern(&g)[..2000].to_vec()].concat()),
        Piece::Close,
    ];
    // Retried: the second connection answers whole.
    let server = serve(vec![cut.clone(), whole(&g)]);
    let Some((result, stats)) = fetch_all(&server.url, policy(1, 5000), vec![g.clone()]) else {
        return;
    };
    result.unwrap();
    assert_eq!(
        (stats.requests, stats.retries, stats.bytes_read),
        (1, 1, 5000)
    );
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);

    // Out of retries: reported, promptly.
    let server = serve(vec![cut.clone(), cut]);
    let started = Instant::now();
    let (result, stats) = fetch_all(&server.url, policy(1, 5000), vec![g]).unwrap();
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("the connection ended after 2000 of 5000 body bytes"),
        "{err}"
    );
    assert_eq!((stats.retries, stats.errors), (1, 1));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_server_error_is_retried_and_a_silent_server_times_out() {
    let g = get(0, 100);
    let slow_down = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_vec();
    let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
    let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g.clone()]) else {
        return;
    };
    result.unwrap();
    assert_eq!(stats.retries, 1);

    // Reads the request and never answers.
    let server = serve(vec![vec![Piece::Pause; 2000]]);
    let started = Instant::now();
    let (result, _) = fetch_all(&server.url, policy(0, 300), vec![g]).unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.contains("no complete response within 300ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn error_documents_without_a_length_end_the_attempt_at_once() {
    let g = get(0, 100);
    let chunked = |status: &str, doc: &str| {
        format!(
            "HTTP/1.1 {status}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{doc}\r\n0\r\n\r\n",
            doc.len()
        )
        .into_bytes()
    };
    // A 503 sent chunked on a kept-alive connection: retried at once, not after the
    // request timeout (5 s here).
    let slow_down = chunked(
        "503 Slow Down",
        "<Error><Code>SlowDown</Code><Message>m</Message></Error>",
    );
    let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
    let started = Instant::now();
    let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g.clone()]) else {
        return;
    };
    result.unwrap();
    assert_eq!((stats.retries, stats.requests), (1, 1));
    assert!(started.elapsed() < Duration::from_secs(3));

    // A 403 sent chunked: reported at once with its code, and not retried.
    let denied = chunked(
        "403 Forbidden",
        "<Error><Code>AccessDenied</Code><Message>no</Message></Error>",
    );
    let server = serve(vec![vec![Piece::Write(denied)]]);
    let started = Instant::now();
    let (result, stats) = fetch_all(&server.url, policy(2, 5000), vec![g]).unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.contains("HTTP 403 AccessDenied (no)"), "{err}");
    assert_eq!((stats.retries, stats.errors), (0, 1));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn retry_after_is_waited_out_before_the_retry() {
    let g = get(0, 100);
    let slow_down =
        b"HTTP/1.1 503 Slow Down\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n".to_vec();
    let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
    let started = Instant::now();
    let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g]) else {
        return;
    };
    result.unwrap();
    assert_eq!(stats.retries, 1);
    // The backoff alone is at most 5 ms here: the second is the server's.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bytes_after_a_body_drop_the_connection_and_the_next_get_is_retried() {
    let (first, second) = (get(0, 100), get(100, 100));
    let stray = [head_206(&first), pattern(&first), b"GARBAGE\r\n".to_vec()].concat();
    // The second GET's answer comes after the garbage on the same connection, and again
    // on a new one.
    let server = serve(vec![
        vec![Piece::Write(stray)],
        whole(&second),
        whole(&second),
    ]);
    let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![first, second]) else {
        return;
    };
    result.unwrap();
    assert_eq!((stats.requests, stats.retries), (2, 1));
    assert_eq!(stats.retries_by_cause.get("stray_bytes"), Some(&1));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn nothing_listening_is_unreachable() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let Some((result, _)) = fetch_all(&url, policy(1, 1000), vec![get(0, 10)]) else {
        return;
    };
    let err = result.unwrap_err();
    assert!(
        matches!(
            &err,
            RankError::Io(IoError {
                kind: IoErrorKind::Unreachable,
                ..
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("is the server running?"), "{err}");
}

#[test]
fn the_pool_never_runs_dry_inside_the_window() {
    // Two readers, prefetch 2, six GETs each, released in the order the step loop does.
    let readers: Vec<Vec<RangedGet>> = (0..2)
        .map(|r| (0..6).map(|i| get(r * 100_000 + i * 1000, 1000)).collect())
        .collect();
    // Requests go out in whatever order connections become free: answer each by its range.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    buf.clear();
                    while !buf.ends_with(b"\r\n\r\n") {
                        if !matches!(stream.read(&mut byte), Ok(1)) {
                            return;
                        }
                        buf.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&buf);
                    let range = text
                        .lines()
                        .find_map(|l| l.strip_prefix("Range: bytes="))
                        .unwrap();
                    let (a, b) = range.split_once('-').unwrap();
                    let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                    let g = get(a, b - a + 1);
                    if stream
                        .write_all(&[head_206(&g), pattern(&g)].concat())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let Some(uring) = uring(&url, policy(0, 5000)) else {
        return;
    };
    let barrier = StepBarrier::new(1, Duration::from_secs(10));
    let progress = Progress::default();
    let mut rank = uring
        .rank(readers.clone(), 2, None, 1, 2, 0, 4096, &barrier, &progress)
        .unwrap();
    assert_eq!(rank.transport.ring.buffers().0, 4);
    for _ in 0..2 {
        rank.start_epoch().unwrap();
        assert_eq!(
            rank.transport.ring.buffers().1,
            0,
            "the window fills the pool"
        );
        for i in 0..6 {
            for r in 0..2 {
                rank.wait_for(r, i).unwrap();
                assert_eq!(rank.body(r, i), &pattern(&readers[r][i])[..]);
                rank.release(r, i).unwrap();
                let held = rank.window.held();
                assert_eq!(held + rank.transport.ring.buffers().1, 4);
            }
        }
        rank.end_epoch().unwrap();
        assert_eq!(rank.transport.ring.buffers().1, 4);
    }
    assert_eq!(rank.stats().requests, 24);
    // Releasing what is not held is a bug, reported as one.
    assert!(
        rank.release(0, 0)
            .unwrap_err()
            .to_string()
            .contains("a bug")
    );
}
