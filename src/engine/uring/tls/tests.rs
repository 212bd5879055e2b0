//! The record layer against a real rustls server in memory ([`super::harness`]): every suite of
//! both versions, records split at every byte, and the rules of RFC 8446 §4.6 and §5 (and
//! RFC 5246's renegotiation request) with crafted records.

use rustls::crypto::ring::cipher_suite as suites;

use super::harness::{Harness, all_suites};
use super::record::{
    ALERT, APPLICATION_DATA, CHANGE_CIPHER_SPEC, HANDSHAKE, MAX_PLAINTEXT, SEQ_LIMIT, Version,
};
use super::*;

const TLS13: (Version, rustls::SupportedCipherSuite) =
    (Version::Tls13, suites::TLS13_AES_128_GCM_SHA256);
const TLS12: (Version, rustls::SupportedCipherSuite) = (
    Version::Tls12,
    suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
);

fn message(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn error(result: Result<(Vec<u8>, bool), RecordError>) -> String {
    match result {
        Ok((plain, closed)) => panic!("accepted: {} bytes, closed {closed}", plain.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_suite_of_both_versions_reads_records_received_a_byte_at_a_time() {
    for (version, suite) in all_suites() {
        let mut h = Harness::live(version, suite);
        assert_eq!(h.session.rx.version(), version);
        let name = format!("{:?}", suite.suite());
        assert!(
            h.session.negotiated.ends_with(&name),
            "{}",
            h.session.negotiated
        );
        // The tickets (TLS 1.3) are taken and nothing is delivered.
        assert_eq!(h.deliver(1).unwrap(), (vec![], false), "{name}");
        let sent: Vec<u8> = [message(3, 1), message(20_000, 2), message(1, 3)].concat();
        h.server_sends(&sent[..3]);
        h.server_sends(&sent[3..20_003]);
        h.server_sends(&sent[20_003..]);
        let (got, closed) = h.deliver(1).unwrap();
        assert!(!closed);
        assert_eq!(got, sent, "{name}");
        // Requests go the other way, and the server reads them.
        assert_eq!(
            h.client_sends(b"GET / HTTP/1.1\r\n\r\n"),
            b"GET / HTTP/1.1\r\n\r\n"
        );
        h.server().send_close_notify();
        h.pull();
        assert_eq!(h.deliver(7).unwrap(), (vec![], true), "{name}");
    }
}

#[test]
fn a_stream_split_in_two_at_every_byte_reads_the_same() {
    for (version, suite) in [TLS13, TLS12] {
        let mut h = Harness::crafted(version, suite);
        let tickets = std::mem::take(&mut h.wire);
        let mut stream = tickets.clone();
        stream.extend(h.craft(APPLICATION_DATA, b"first", 0));
        stream.extend(h.craft(APPLICATION_DATA, b"", 0));
        stream.extend(h.craft(APPLICATION_DATA, &message(70, 9), 3));
        stream.extend(h.craft(ALERT, &[1, 0], 0));
        let expected = [b"first".to_vec(), message(70, 9)].concat();
        for split in 0..=stream.len() {
            let mut h = Harness::crafted(version, suite);
            // The same handshake keys are not the same: craft again under this one's.
            let mut again = std::mem::take(&mut h.wire);
            again.extend(h.craft(APPLICATION_DATA, b"first", 0));
            again.extend(h.craft(APPLICATION_DATA, b"", 0));
            again.extend(h.craft(APPLICATION_DATA, &message(70, 9), 3));
            again.extend(h.craft(ALERT, &[1, 0], 0));
            assert_eq!(again.len(), stream.len());
            let at = split.min(again.len());
            let (mut got, closed) = h.feed(&again[..at], usize::MAX).unwrap();
            if !closed {
                let (rest, closed) = h.feed(&again[at..], usize::MAX).unwrap();
                got.extend(rest);
                assert!(closed, "{version:?} split at {split}");
            }
            assert_eq!(got, expected, "{version:?} split at {split}");
        }
    }
}

#[test]
fn the_record_overhead_is_what_each_record_carries_beyond_its_plaintext() {
    for ((version, suite), overhead) in all_suites().into_iter().zip([22, 22, 22, 29, 29, 21]) {
        let mut h = Harness::live(version, suite);
        h.deliver(usize::MAX).unwrap();
        assert_eq!(h.session.record_overhead(), overhead, "{:?}", suite.suite());
        h.server_sends(&message(1000, 1));
        assert_eq!(h.wire.len(), 1000 + overhead, "{:?}", suite.suite());
        assert_eq!(h.deliver(usize::MAX).unwrap().0, message(1000, 1));
    }
}

#[test]
fn a_key_update_that_asks_for_ours_is_answered_and_the_server_reads_us_under_the_new_key() {
    let mut h = Harness::live(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    h.server_sends(b"first response");
    // The server updates its keys between two responses and asks for ours.
    h.server().refresh_traffic_keys().unwrap();
    h.server_sends(b"second response");
    let (got, closed) = h.deliver(1).unwrap();
    assert_eq!(got, b"first responsesecond response");
    assert!(!closed);
    assert!(h.session.key_update_owed);
    // Our KeyUpdate goes out in front of the next request; rustls reads both.
    assert_eq!(h.client_sends(b"GET /next"), b"GET /next");
    assert!(!h.session.key_update_owed);
    h.server_sends(b"third response");
    assert_eq!(h.deliver(usize::MAX).unwrap().0, b"third response");
    assert_eq!(h.client_sends(b"GET /last"), b"GET /last");
    // Twice more, a record at a time.
    for round in 0..2 {
        h.server().refresh_traffic_keys().unwrap();
        h.server_sends(b"again");
        assert_eq!(h.deliver(usize::MAX).unwrap().0, b"again", "{round}");
        assert_eq!(h.client_sends(b"GET /again"), b"GET /again", "{round}");
    }
}

#[test]
fn our_key_update_answer_says_update_not_requested_under_the_old_key() {
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    h.session.key_update_owed = true;
    let records = h.client_records(b"GET /");
    // Only the first opens under the server's copy of our old key; that one is ours.
    assert_eq!(records, vec![(HANDSHAKE, vec![24, 0, 0, 1, 0])]);
}

#[test]
fn a_key_update_body_is_validated_and_must_end_its_record() {
    for (body, why) in [
        (&[24u8, 0, 0, 1, 2][..], "not 0 or 1"),
        (&[24, 0, 0, 2, 0, 0][..], "not 0 or 1"),
        (&[24, 0, 0, 0][..], "not 0 or 1"),
        (&[24, 0, 0, 1, 0, 4, 0][..], "does not end its record"),
    ] {
        let mut h = Harness::crafted(TLS13.0, TLS13.1);
        h.deliver(usize::MAX).unwrap();
        let record = h.craft(HANDSHAKE, body, 0);
        let e = error(h.feed(&record, usize::MAX));
        assert!(e.contains(why), "{body:?}: {e}");
    }
}

#[test]
fn change_cipher_spec_after_the_handshake_is_fatal() {
    for (version, suite) in [TLS13, TLS12] {
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        let mut stream = h.craft(APPLICATION_DATA, b"before", 0);
        stream.extend([CHANGE_CIPHER_SPEC, 3, 3, 0, 1, 1]);
        let e = error(h.feed(&stream, usize::MAX));
        assert!(e.contains("ChangeCipherSpec"), "{version:?}: {e}");
    }
    // Protected, as an inner type, it is no better.
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    let record = h.craft(CHANGE_CIPHER_SPEC, &[1], 0);
    assert!(error(h.feed(&record, usize::MAX)).contains("content type 20"));
}

#[test]
fn nothing_after_close_notify_is_delivered() {
    for (version, suite) in [TLS13, TLS12] {
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        let mut stream = h.craft(APPLICATION_DATA, b"all of it", 0);
        stream.extend(h.craft(ALERT, &[1, 0], 0));
        stream.extend(h.craft(APPLICATION_DATA, b"and more", 0));
        stream.extend([0xff; 9]);
        assert_eq!(
            h.feed(&stream, usize::MAX).unwrap(),
            (b"all of it".to_vec(), true),
            "{version:?}"
        );
        assert_eq!(h.session.pending(), 0);
        assert_eq!(h.session.free_from(), 0, "{version:?}: the rest is dropped");
    }
}

#[test]
fn alerts_close_warn_or_end_the_connection() {
    for (version, suite) in [TLS13, TLS12] {
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        // user_canceled is a warning; close_notify follows it.
        let mut stream = h.craft(ALERT, &[1, 90], 0);
        stream.extend(h.craft(APPLICATION_DATA, b"x", 0));
        stream.extend(h.craft(ALERT, &[1, 0], 0));
        assert_eq!(h.feed(&stream, 5).unwrap(), (b"x".to_vec(), true));
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        let record = h.craft(ALERT, &[2, 40], 0);
        assert!(error(h.feed(&record, usize::MAX)).contains("alert 40"));
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        let record = h.craft(ALERT, &[2, 40, 0], 0);
        assert!(error(h.feed(&record, usize::MAX)).contains("not one alert"));
    }
}

#[test]
fn padding_is_taken_off_and_an_all_padding_record_is_refused() {
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    let mut stream = Vec::new();
    for padding in [0, 1, 200, MAX_PLAINTEXT - 10] {
        stream.extend(h.craft(APPLICATION_DATA, b"0123456789", padding));
    }
    let (got, _) = h.feed(&stream, 4096).unwrap();
    assert_eq!(got, b"0123456789".repeat(4));
    // Zeros only: no content type.
    let mut record = vec![0u8; 10];
    h.server_tx().seal_oversized(0, &mut record, 0).unwrap();
    assert!(error(h.feed(&record, usize::MAX)).contains("no content type"));
}

#[test]
fn plaintext_over_the_limit_is_record_overflow() {
    for (version, suite) in [TLS13, TLS12] {
        // The most plaintext a record may carry is read.
        let mut h = Harness::crafted(version, suite);
        h.deliver(usize::MAX).unwrap();
        let full = h.craft(APPLICATION_DATA, &message(MAX_PLAINTEXT, 1), 0);
        assert_eq!(h.feed(&full, 999).unwrap().0, message(MAX_PLAINTEXT, 1));
        // One byte more is not.
        let mut over = message(MAX_PLAINTEXT + 1, 1);
        h.server_tx()
            .seal_oversized(APPLICATION_DATA, &mut over, 0)
            .unwrap();
        let e = error(h.feed(&over, usize::MAX));
        assert!(e.contains("record_overflow"), "{version:?}: {e}");
    }
    // TLS 1.3: inner plaintext of 2^14 + 1 with padding is the limit, + 2 is over.
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    let mut over = b"ab".to_vec();
    h.server_tx()
        .seal_oversized(APPLICATION_DATA, &mut over, MAX_PLAINTEXT - 1)
        .unwrap();
    assert!(error(h.feed(&over, usize::MAX)).contains("2^14 + 1"));
    // A header that says more than 2^14 + 256 is refused before the rest arrives.
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    let len = (MAX_PLAINTEXT + 257) as u16;
    let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
    assert!(error(h.feed(&header, usize::MAX)).contains("record_overflow"));
}

#[test]
fn a_handshake_message_split_over_records_is_gathered() {
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    // A NewSessionTicket: lifetime, age_add, nonce, ticket, no extensions.
    let payload = [0, 0, 0, 60, 0, 0, 0, 1, 1, 0x55, 0, 4, 1, 2, 3, 4, 0, 0];
    let mut ticket = vec![4, 0, 0, payload.len() as u8];
    ticket.extend(payload);
    for cut in [1, 3, 4, 10, ticket.len() - 1] {
        let mut stream = h.craft(HANDSHAKE, &ticket[..cut], 0);
        stream.extend(h.craft(HANDSHAKE, &ticket[cut..], 0));
        stream.extend(h.craft(APPLICATION_DATA, b"after", 0));
        assert_eq!(
            h.feed(&stream, usize::MAX).unwrap().0,
            b"after",
            "cut {cut}"
        );
        assert!(h.session.handshake.is_empty());
    }
    // Two messages in one record, the second split into the next.
    let two = [ticket.clone(), ticket.clone()].concat();
    let mut stream = h.craft(HANDSHAKE, &two[..ticket.len() + 2], 0);
    stream.extend(h.craft(HANDSHAKE, &two[ticket.len() + 2..], 0));
    assert_eq!(h.feed(&stream, 1).unwrap().0, b"");
    // A message that says it is longer than any may be is refused.
    let record = h.craft(HANDSHAKE, &[4, 0xff, 0xff, 0xff], 0);
    assert!(error(h.feed(&record, usize::MAX)).contains("over its bound"));
}

#[test]
fn sequence_numbers_never_wrap() {
    let mut h = Harness::crafted(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    h.session.rx.set_seq(SEQ_LIMIT - 1);
    h.server_tx().set_seq(SEQ_LIMIT - 1);
    let mut stream = h.craft(APPLICATION_DATA, b"a", 0);
    stream.extend(h.craft(APPLICATION_DATA, b"b", 0));
    assert_eq!(h.feed(&stream, usize::MAX).unwrap().0, b"ab");
    assert_eq!(h.session.rx.seq(), SEQ_LIMIT + 1);
    // The next would need a number past the limit: the connection ends.
    h.server_tx().set_seq(SEQ_LIMIT);
    let mut record = b"c".to_vec();
    // (Sealed under the limit's number: the receiver refuses before it opens.)
    h.server_tx()
        .seal_oversized(APPLICATION_DATA, &mut record, 0)
        .unwrap();
    assert!(error(h.feed(&record, usize::MAX)).contains("would wrap"));
    // Sending too.
    let mut h = Harness::crafted(TLS12.0, TLS12.1);
    h.session.tx.set_seq(SEQ_LIMIT);
    let mut request = b"GET /".to_vec();
    h.session.seal(&mut request).unwrap();
    let mut request = b"GET /".to_vec();
    assert!(
        h.session
            .seal(&mut request)
            .unwrap_err()
            .contains("would wrap")
    );
}

#[test]
fn a_tls12_renegotiation_request_ends_the_connection_with_its_own_cause() {
    let mut h = Harness::crafted(TLS12.0, TLS12.1);
    let mut stream = h.craft(APPLICATION_DATA, b"body", 0);
    stream.extend(h.craft(HANDSHAKE, &[0, 0, 0, 0], 0));
    let e = h.feed(&stream, usize::MAX).unwrap_err();
    assert_eq!(e, RecordError::Renegotiation);
    assert_eq!(e.cause(), RENEGOTIATION);
    // One line with the cause and a fix; the final error once retries run out says it too,
    // so it claims no reconnect.
    let words = e.to_string();
    assert!(words.contains("renegotiate"), "{words}");
    assert!(words.contains("--engine baseline"), "{words}");
    assert!(
        !words.contains("opened again") && !words.contains('\n'),
        "{words}"
    );
    // Any other handshake message after a TLS 1.2 handshake is a protocol error.
    let mut h = Harness::crafted(TLS12.0, TLS12.1);
    let record = h.craft(HANDSHAKE, &[4, 0, 0, 0], 0);
    let e = h.feed(&record, usize::MAX).unwrap_err();
    assert_eq!(e.cause(), PROTOCOL);
}

#[test]
fn unexpected_records_and_tampering_are_errors() {
    for (version, suite) in [TLS13, TLS12] {
        // A heartbeat (24), unprotected or as a TLS 1.2 record type.
        let mut h = Harness::crafted(version, suite);
        let e = error(h.feed(&[24, 3, 3, 0, 3, 1, 2, 3], usize::MAX));
        assert!(e.contains("type 24"), "{version:?}: {e}");
        // A record version other than 3.3.
        let mut h = Harness::crafted(version, suite);
        let mut record = h.craft(APPLICATION_DATA, b"x", 0);
        record[2] = 1;
        assert!(error(h.feed(&record, usize::MAX)).contains("version 3.1"));
        // A flipped bit anywhere in the body.
        for at in [5, 6, 12, 20] {
            let mut h = Harness::crafted(version, suite);
            let mut record = h.craft(APPLICATION_DATA, b"twelve bytes", 0);
            record[at] ^= 1;
            let e = error(h.feed(&record, usize::MAX));
            assert!(e.contains("authentication"), "{version:?} at {at}: {e}");
        }
        // Shorter than a tag.
        let mut h = Harness::crafted(version, suite);
        assert!(h.feed(&[APPLICATION_DATA, 3, 3, 0, 3, 1, 2, 3], 2).is_err());
    }
}

/// A record decrypted straight to the front of its region, over any gap before its body (the
/// headers and tags of the records before it, in the engine), reads as one decrypted in place,
/// for each AEAD of both versions and any alignment; a changed byte still fails.
#[test]
fn a_record_opened_toward_the_front_lands_its_plaintext_there() {
    use super::record::Keys;
    use rustls::ConnectionTrafficSecrets as Secrets;
    use rustls::crypto::cipher::{AeadKey, Iv};
    let secrets = |chacha: bool| {
        let (key, iv) = (AeadKey::from([7u8; 32]), Iv::new([9u8; 12]));
        if chacha {
            Secrets::Chacha20Poly1305 { key, iv }
        } else {
            Secrets::Aes256Gcm { key, iv }
        }
    };
    for version in [Version::Tls13, Version::Tls12] {
        for chacha in [false, true] {
            for gap in [0, 1, 15, 16, 22, 29, 1000] {
                for len in [0, 1, 17, 4096 + 5, MAX_PLAINTEXT] {
                    let case = format!("{version:?} chacha {chacha} gap {gap} len {len}");
                    let keys = || Keys::new(version, 5, secrets(chacha)).unwrap();
                    let plain = message(len, gap as u8);
                    let mut record = plain.clone();
                    keys().seal(APPLICATION_DATA, &mut record, 0, 0).unwrap();
                    let header: [u8; 5] = record[..5].try_into().unwrap();
                    let mut region = vec![0xee; gap];
                    region.extend_from_slice(&record[5..]);
                    let mut tampered = region.clone();
                    let opened = keys().open_within(header, &mut region, gap).unwrap();
                    assert_eq!(opened.content_type, APPLICATION_DATA, "{case}");
                    assert_eq!(opened.content.start, 0, "{case}");
                    assert!(region[opened.content] == plain[..], "{case}");
                    *tampered.last_mut().unwrap() ^= 1;
                    assert!(
                        keys().open_within(header, &mut tampered, gap).is_err(),
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_body_read_never_waits_for_more_than_the_ciphertext_certain_to_come() {
    const MIB: usize = 1 << 20;
    // The edges: the threshold while what must still come reaches it, else 1.
    assert_eq!(body_lowat(MIB, MIB, 0), MIB);
    assert_eq!(body_lowat(MIB, MIB + 100, 100), MIB);
    assert_eq!(body_lowat(MIB, MIB + 100, 101), 1);
    assert_eq!(body_lowat(MIB, MIB, 1), 1);
    assert_eq!(body_lowat(MIB, MIB - 1, 0), 1);
    assert_eq!(body_lowat(MIB, 10, 20_000), 1);
    assert_eq!(body_lowat(MIB, 0, 0), 1);
    assert_eq!(body_lowat(1, 5 * MIB, 16_000), 1);
    assert_eq!(body_lowat(MIB, usize::MAX, usize::MAX), 1);
    // Against real records of every suite: a body of 1 MiB + 8 KiB of which a part of the
    // first record is held (the case: 10 000 bytes held leaves 1 048 198 to come in
    // TLS 1.3, under a MiB). The threshold never exceeds what is still to come.
    let owed = MIB + (8 << 10);
    for (version, suite) in all_suites() {
        let mut h = Harness::crafted(version, suite);
        let mut wire = Vec::new();
        for chunk in message(owed, 5).chunks(MAX_PLAINTEXT) {
            wire.extend(h.craft(APPLICATION_DATA, chunk, 0));
        }
        let first_record = MAX_PLAINTEXT + h.session.record_overhead();
        for held in [0, 1, 5, 13, 100, 1430, 10_000, first_record - 1] {
            let to_come = wire.len() - held;
            let lowat = body_lowat(MIB, owed, held);
            assert!(lowat <= to_come, "{:?} held {held}: {lowat}", suite.suite());
            if held == 10_000 && version == Version::Tls13 {
                assert!(to_come < MIB, "the issue's case: {to_come}");
                assert_eq!(lowat, 1);
            }
        }
    }
}

#[test]
fn more_than_the_staging_area_after_a_body_is_kept_in_part_and_ends_the_session() {
    for (version, suite) in [TLS13, TLS12] {
        // Fits; plaintext over the room; plaintext under it but not with the partial record
        // behind it (that record is dropped, with the rest of the stream).
        for (extra, cut) in [(1000, false), (100 << 10, true), (STAGE_BYTES - 3, true)] {
            let mut h = Harness::crafted(version, suite);
            h.deliver(usize::MAX).unwrap();
            // A 100-byte body, then `extra` bytes that are not HTTP, landing in place.
            let body = message(100, 1);
            let garbage = vec![b'x'; extra];
            let mut wire = h.craft(APPLICATION_DATA, &body, 0);
            for chunk in garbage.chunks(MAX_PLAINTEXT) {
                wire.extend(h.craft(APPLICATION_DATA, chunk, 0));
            }
            // A partial record behind them.
            let partial = h.craft(APPLICATION_DATA, b"next", 0);
            wire.extend(&partial[..7]);
            let mut region = vec![0u8; wire.len() + 100];
            h.session.enter_body();
            region[..wire.len()].copy_from_slice(&wire);
            h.session.received(&mut region, wire.len()).unwrap();
            assert_eq!(h.session.pending(), 100 + extra);
            let rest = h.session.leave_body(100, STAGE_BYTES);
            assert!(rest.len() <= STAGE_BYTES, "{version:?} {extra}: {rest:?}");
            assert_eq!(rest.start, 100);
            assert!(!h.session.in_body());
            assert_eq!(h.session.closed(), cut, "{version:?} {extra}");
            if cut {
                // As much of the stray plaintext as fits, for the next head to find; the rest
                // of the stream is dropped.
                let kept = extra.min(STAGE_BYTES);
                assert_eq!(rest.len(), kept, "{version:?} {extra}");
                assert_eq!(h.session.pending(), kept, "{version:?} {extra}");
                assert_eq!(h.session.free_from(), kept, "{version:?} {extra}");
            } else {
                // The stray plaintext and the partial record behind it.
                assert_eq!(rest.len(), extra + 7);
                assert_eq!(h.session.pending(), extra);
                assert_eq!(h.session.free_from(), extra + 7);
            }
            assert!(
                region[rest]
                    .iter()
                    .take(extra.min(STAGE_BYTES))
                    .all(|&b| b == b'x')
            );
        }
    }
}

/// A request body generated laid out record by record and sealed where it lies: the records
/// follow one another from the buffer's start, and rustls reads the body back whole, in every
/// suite of both versions, at every length around a record's edge. Sealed before the head,
/// it is refused (the head takes the sequence number before it).
#[test]
fn a_body_laid_out_record_by_record_is_sealed_in_place_and_rustls_reads_it() {
    for (version, suite) in all_suites() {
        let name = format!("{:?}", suite.suite());
        let mut h = Harness::live(version, suite);
        h.deliver(usize::MAX).unwrap();
        let layout = h.session.layout();
        assert_eq!(
            layout.lead + layout.trail,
            h.session.record_overhead(),
            "{name}"
        );
        assert!(layout.lead + layout.trail <= MAX_RECORD_OVERHEAD, "{name}");
        for len in [
            1,
            MAX_PLAINTEXT - 1,
            MAX_PLAINTEXT,
            MAX_PLAINTEXT + 1,
            3 * MAX_PLAINTEXT + 7,
        ] {
            let body = message(len, len as u8);
            // Room as the plan gives it (the widest record's overhead per record), filled with
            // garbage the sealing must not send.
            let room = len + len.div_ceil(MAX_PLAINTEXT) * MAX_RECORD_OVERHEAD;
            let mut buf = vec![0xA5; room];
            let mut at = 0;
            for piece in layout.pieces(len) {
                let n = piece.len();
                buf[piece].copy_from_slice(&body[at..at + n]);
                at += n;
            }
            assert_eq!(at, len, "{name}");
            let head = format!("PUT /k HTTP/1.1\r\nContent-Length: {len}\r\n\r\n");
            assert_eq!(h.client_sends(head.as_bytes()), head.as_bytes(), "{name}");
            let sealed = h.session.seal_body(&mut buf, len).unwrap();
            assert_eq!(sealed, layout.sealed_len(len), "{name} {len}");
            assert_eq!(h.server_reads(&buf[..sealed]), body, "{name} {len}");
        }
    }
}

/// A request longer than a record (a CompleteMultipartUpload of many parts) goes as several.
#[test]
fn a_request_over_a_record_goes_as_several_records() {
    for (version, suite) in [TLS13, TLS12] {
        let mut h = Harness::live(version, suite);
        h.deliver(usize::MAX).unwrap();
        let request = message(2 * MAX_PLAINTEXT + 100, 9);
        assert_eq!(h.client_sends(&request), request, "{version:?}");
    }
}

/// A body sealed while a KeyUpdate is owed (before the head that carries it) is a bug, refused.
#[test]
fn a_body_is_never_sealed_before_its_head() {
    let mut h = Harness::live(TLS13.0, TLS13.1);
    h.deliver(usize::MAX).unwrap();
    h.server().refresh_traffic_keys().unwrap();
    h.server_sends(b"an answer");
    assert_eq!(h.deliver(usize::MAX).unwrap().0, b"an answer");
    let mut buf = vec![0; 100];
    let err = h.session.seal_body(&mut buf, 10).unwrap_err();
    assert!(err.contains("a bug"), "{err}");
}
