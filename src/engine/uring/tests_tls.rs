//! The engine over TLS against a scripted server on a real loopback socket: rustls makes the
//! handshake ([`tls::harness::SocketPeer`]), then each response is records sealed under the
//! server's key and written in the pieces the script gives — bytes after a body, a TLS 1.2
//! renegotiation request.

use super::tests::{
    Script, Scripted, accept_each, fetch_all, get, head_206, pattern, policy, uring,
};
use super::tls::harness::{APPLICATION_DATA_RECORD, HANDSHAKE_RECORD, HELLO_REQUEST, SocketPeer};
use super::*;
use crate::rank::RankIo;
use rustls::crypto::ring::cipher_suite as suites;
use std::sync::Barrier;
use std::sync::atomic::Ordering;

#[derive(Clone)]
enum Piece {
    /// Seal this plaintext as application-data records (written by `Send`).
    Data(Vec<u8>),
    /// Seal a record of this content type and content.
    Record(u8, Vec<u8>),
    /// Write the first N sealed bytes (`usize::MAX`: all).
    Send(usize),
    /// Wait for the test's thread at this barrier.
    Meet(Arc<Barrier>),
}

/// Serves `responses` in order, one per request, over however many connections it takes, as a
/// TLS 1.3 server (AES-128-GCM) or a TLS 1.2 one (ECDHE-ECDSA AES-128-GCM).
fn serve_tls(tls13: bool, responses: Vec<Vec<Piece>>) -> Scripted {
    let suite = if tls13 {
        suites::TLS13_AES_128_GCM_SHA256
    } else {
        suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
    };
    accept_each("https", responses, move |stream, script: &Script<Piece>| {
        let Some(mut peer) = SocketPeer::accept(stream, tls13, suite) else {
            return;
        };
        while peer.read_request().is_some() {
            let Some(pieces) = script.lock().unwrap().next() else {
                return;
            };
            for piece in pieces {
                match piece {
                    Piece::Data(plain) => peer.seal(APPLICATION_DATA_RECORD, &plain),
                    Piece::Record(kind, content) => peer.seal(kind, &content),
                    Piece::Send(n) => {
                        if peer.send(n).is_err() {
                            return;
                        }
                    }
                    Piece::Meet(barrier) => {
                        barrier.wait();
                    }
                }
            }
        }
    })
}

fn whole(g: &RangedGet) -> Vec<Piece> {
    vec![
        Piece::Data([head_206(g), pattern(g)].concat()),
        Piece::Send(usize::MAX),
    ]
}

#[test]
fn over_64_kib_after_a_tls_body_are_stray_bytes_not_a_panic() {
    // A large GET first (its buffer is the pool's size, and its MiB threshold grows the
    // socket's receive buffer), then a 100-byte body followed by 200 KiB that are not HTTP,
    // all of it in the socket before the body's read runs: the read lands the body and the
    // 200 KiB in the buffer, more than the 64 KiB staging area takes back.
    let (big, small, next) = (get(0, 2 << 20), get(3 << 20, 100), get(4 << 20, 100));
    let go = Arc::new(Barrier::new(2));
    let stray = vec![
        Piece::Data(head_206(&small)),
        Piece::Send(usize::MAX),
        Piece::Meet(Arc::clone(&go)),
        Piece::Data([pattern(&small), vec![b'x'; 200 << 10]].concat()),
        Piece::Send(usize::MAX),
    ];
    // The next GET's answer comes after the garbage on the same connection, and again on a
    // new one.
    let server = serve_tls(true, vec![whole(&big), stray, whole(&next), whole(&next)]);
    let Some(uring) = uring(&server.url, policy(2, 30_000)) else {
        return;
    };
    let barrier = StepBarrier::new(1, Duration::from_secs(10));
    let progress = Progress::default();
    let gets = vec![big.clone(), small.clone(), next.clone()];
    let buffer = (big.len_bytes + crate::budget::TLS_RECORD_SLACK_BYTES) as usize;
    let mut rank = uring
        .rank(
            vec![gets],
            1,
            None,
            1,
            1,
            0,
            buffer.next_multiple_of(4096),
            &barrier,
            &progress,
        )
        .unwrap();
    rank.start_epoch().unwrap();
    rank.wait_for(0, 0).unwrap();
    assert_eq!(rank.body(0, 0), &pattern(&big)[..]);
    rank.release(0, 0).unwrap();
    // The small GET's head is read and its body's read queued (in its buffer, nothing staged):
    // only then does the server send the body and what follows it. The rank thread is away
    // from the ring until all of it has arrived, so the read takes it all at once.
    let until = Instant::now() + Duration::from_secs(10);
    while !(rank.transport.conns[0].is_reading_body()
        && rank
            .transport
            .tls
            .session(0)
            .is_some_and(tls::Session::in_body))
    {
        assert!(Instant::now() < until, "the body's read never started");
        let step = Instant::now() + Duration::from_millis(10);
        rank.transport
            .poll_once(&mut rank.window, Some(step))
            .unwrap();
    }
    go.wait();
    std::thread::sleep(Duration::from_millis(300));
    rank.wait_for(0, 1).unwrap();
    assert_eq!(rank.body(0, 1), &pattern(&small)[..]);
    // The read took the body and more than 64 KiB after it: the first 64 KiB went back to the
    // staging area and the session ended there (nothing more is read from it). Nothing else
    // tells this apart from the stray bytes coming in smaller reads that all fit: the counters
    // below come out the same either way. The next GET starts only once this one is released,
    // so the session is still as the body's read left it.
    let session = rank.transport.tls.session(0).expect("a TLS session");
    assert!(
        session.closed(),
        "the 64 KiB cut was not taken: {session:?}"
    );
    assert_eq!(session.pending(), tls::STAGE_BYTES, "{session:?}");
    rank.release(0, 1).unwrap();
    rank.wait_for(0, 2).unwrap();
    assert_eq!(rank.body(0, 2), &pattern(&next)[..]);
    rank.release(0, 2).unwrap();
    rank.end_epoch().unwrap();
    let stats = rank.stats();
    assert_eq!(
        (stats.requests, stats.retries, stats.errors),
        (3, 1, 0),
        "{:?}",
        stats.retries_by_cause
    );
    assert_eq!(stats.retries_by_cause.get("stray_bytes"), Some(&1));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn a_tls12_renegotiation_request_is_retried_under_its_own_cause() {
    let g = get(0, 5000);
    let hello = vec![
        Piece::Record(HANDSHAKE_RECORD, HELLO_REQUEST.to_vec()),
        Piece::Send(usize::MAX),
    ];
    let server = serve_tls(false, vec![hello, whole(&g)]);
    let Some((result, stats)) = fetch_all(&server.url, policy(2, 10_000), vec![g]) else {
        return;
    };
    result.unwrap();
    assert_eq!((stats.requests, stats.retries, stats.errors), (1, 1, 0));
    assert_eq!(
        stats.retries_by_cause.get(tls::RENEGOTIATION),
        Some(&1),
        "{:?}",
        stats.retries_by_cause
    );
    assert_eq!(stats.retries_by_cause.get("connection"), None);
    // Opened again, and answered there.
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}
