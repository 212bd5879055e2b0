//! Property tests over every parser that reads bytes a server or client sent (page headers
//! and footer hash lists among them): arbitrary and mutated inputs, and the only property
//! asked is the one that matters for a load generator talking to a misbehaving store — no panic, and every rejection is an error value.
//!
//! Random numbers almost never land where arithmetic breaks, so every property also draws
//! from edge values ([`edge_u64`], [`edge_number_text`]): 0, 1, the largest value of each width
//! in play and one less, one past `u64`, and sizes past the bytes that arrived. `scripts/test`
//! turns on overflow checks, so an overflow here fails the property instead of wrapping.
//!
//! Each property runs [`cases`] inputs: 2,000 in the test suite; `scripts/fuzz` runs the same
//! properties with many more (`RINGLOAD_FUZZ_CASES`). Test-only: compiled under `cfg(test)`.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use proptest::prelude::*;

use crate::catalog::{self, CatalogError, ObjectSource};
use crate::engine::uring::http::{HeadReader, dechunk};
use crate::plan::RangedGet;
use crate::s3::{ByteRange, ObjectMeta};
use crate::server::range::RangeSpec;
use crate::server::sigv4::{self, Credentials, SignedRequest};

/// Inputs per property: `RINGLOAD_FUZZ_CASES`, else 2,000.
fn cases() -> u32 {
    std::env::var("RINGLOAD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A valid input with some bytes overwritten, some cut or repeated: near misses reach deeper
/// into a parser than random bytes do.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len().max(1);
    (
        proptest::collection::vec((0..len, any::<u8>()), 0..8),
        0..=len,
        any::<bool>(),
    )
        .prop_map(move |(edits, cut, cut_it)| {
            let mut bytes = base.clone();
            for (at, b) in edits {
                if at < bytes.len() {
                    bytes[at] = b;
                }
            }
            if cut_it {
                bytes.truncate(cut);
            }
            bytes
        })
}

/// Numbers where arithmetic breaks: 0, 1, the largest `u64`, `i64`, `u32` and `i32` and their
/// neighbours, and random ones.
fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) - 1),
        Just(u64::from(u32::MAX) + 1),
        Just(i32::MAX as u64),
        0u64..64,
        any::<u64>(),
    ]
}

/// A decimal number as a server might write one: an edge value, one past `u64`, far past it,
/// negative.
fn edge_number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => edge_u64().prop_map(|n| n.to_string()),
        1 => Just("18446744073709551616".to_string()),
        1 => Just("99999999999999999999999999999999".to_string()),
        1 => Just("-1".to_string()),
        1 => Just(String::new()),
    ]
}

/// A chunked body whose chunk sizes are edge values (in hex, some past `u64`) with fewer or
/// more data bytes than they claim.
fn edge_chunked() -> impl Strategy<Value = Vec<u8>> {
    let size = prop_oneof![
        4 => edge_u64().prop_map(|n| format!("{n:x}")),
        1 => Just("10000000000000000".to_string()),
        1 => Just("1ffffffffffffffff".to_string()),
    ];
    let chunk = (size, proptest::collection::vec(any::<u8>(), 0..24));
    proptest::collection::vec(chunk, 1..4).prop_map(|chunks| {
        let mut raw = Vec::new();
        for (size, data) in chunks {
            raw.extend_from_slice(format!("{size}\r\n").as_bytes());
            raw.extend_from_slice(&data);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        raw
    })
}

/// A response head whose Content-Range and Content-Length numbers are edge values.
fn edge_head() -> impl Strategy<Value = Vec<u8>> {
    (
        edge_number_text(),
        edge_number_text(),
        edge_number_text(),
        edge_number_text(),
    )
        .prop_map(|(first, last, total, length)| {
            format!(
                "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {first}-{last}/{total}\r\n\
                 content-length: {length}\r\n\r\n"
            )
            .into_bytes()
        })
}

/// A Range header with edge numbers in each of its three forms.
fn edge_range() -> impl Strategy<Value = String> {
    (edge_number_text(), edge_number_text(), 0..3).prop_map(|(a, b, form)| match form {
        0 => format!("bytes={a}-{b}"),
        1 => format!("bytes={a}-"),
        _ => format!("bytes=-{a}"),
    })
}

/// Thrift compact varint.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A page header (type, compressed_page_size, then a binary field) whose size and binary
/// length are edge values, then a few body bytes.
fn edge_page() -> impl Strategy<Value = Vec<u8>> {
    (
        edge_u64(),
        edge_u64(),
        proptest::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(size, binary_len, body)| {
            let mut raw = vec![0x15, 0x00, 0x25];
            // compressed_page_size is a zigzag i32: the low 32 bits of an edge value.
            let size = size as u32 as i32;
            raw.extend(varint(u64::from(((size << 1) ^ (size >> 31)) as u32)));
            raw.push(0x18);
            raw.extend(varint(binary_len));
            raw.push(0x00);
            raw.extend(body);
            raw
        })
}

/// An `x-amz-date` at the calendar's edges, or of the right shape with random digits.
fn edge_amz_date() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("00000101T000000Z".to_string()),
        Just("00000229T000000Z".to_string()),
        Just("00000301T000000Z".to_string()),
        Just("19691231T235959Z".to_string()),
        Just("19700101T000000Z".to_string()),
        Just("99991231T235960Z".to_string()),
        "[0-9]{8}T[0-9]{6}Z",
    ]
}

const HEAD: &[u8] = b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-99/1000\r\n\
content-length: 100\r\nconnection: keep-alive\r\n\r\n";

const LISTING: &[u8] = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>
<Contents><Key>d/train/a.parquet</Key><Size>10</Size></Contents>
<Contents><Key>d/train/b.parquet</Key><Size>20</Size></Contents></ListBucketResult>"#;

fn get() -> RangedGet {
    RangedGet {
        whole: false,
        fetch: None,
        object: None,
        key: "k".into(),
        offset: 0,
        len_bytes: 100,
        check: None,
        extents: None,
    }
}

/// Feeds `bytes` to a head reader as peeks of the given sizes, as a socket might deliver them.
fn read_head(bytes: &[u8], pieces: &[usize]) {
    let mut scratch = vec![0u8; 256];
    let mut reader = HeadReader::new();
    let mut arrived = 0;
    for &piece in pieces {
        let at = reader.peek_at();
        if at >= scratch.len() {
            return;
        }
        let n = piece
            .min(bytes.len().saturating_sub(arrived))
            .min(scratch.len() - at);
        scratch[at..at + n].copy_from_slice(&bytes[arrived..arrived + n]);
        match reader.on_peek(&scratch, n, &get()) {
            Ok(crate::engine::uring::http::HeadStep::Consume(k)) => {
                reader.on_consumed(k);
                arrived += k;
            }
            Ok(crate::engine::uring::http::HeadStep::Complete { .. }) | Err(_) => return,
        }
    }
}

/// One object in memory, as an object source for the footer decoder; the listing may claim
/// another size than the bytes it holds (a server's listing can lie).
struct OneObject(Vec<u8>, Option<u64>);

impl ObjectSource for OneObject {
    fn describe(&self, prefix: &str) -> String {
        format!("memory/{prefix}")
    }

    fn list(&self, _: &str) -> Result<Vec<ObjectMeta>, CatalogError> {
        Ok(vec![self.meta()])
    }

    fn get_range(&self, _: &str, range: ByteRange) -> Result<Bytes, CatalogError> {
        let len = self.0.len() as u64;
        let (first, last) = match range {
            ByteRange::Bounded { first, last } => (first, last.min(len.saturating_sub(1))),
            ByteRange::Suffix(n) => (len.saturating_sub(n), len.saturating_sub(1)),
        };
        if len == 0 || first > last {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(
            &self.0[first as usize..=last as usize],
        ))
    }
}

impl OneObject {
    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            key: "d/train/x.parquet".into(),
            size_bytes: self.1.unwrap_or(self.0.len() as u64),
        }
    }
}

fn parquet_file() -> Vec<u8> {
    let spec = crate::datagen::tests::tiny_spec();
    crate::datagen::write_file(
        &spec,
        crate::datagen::Fill::for_file(1, 0),
        Vec::new(),
        |_| {},
    )
    .unwrap_or_default()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn response_heads_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            mutated(HEAD.to_vec()),
            edge_head(),
        ],
        pieces in proptest::collection::vec(1usize..64, 1..12),
    ) {
        read_head(&bytes, &pieces);
    }

    #[test]
    fn chunked_framing_never_panics(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            mutated(b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nt: 1\r\n\r\n".to_vec()),
            edge_chunked(),
        ],
    ) {
        if let Ok(Some(body)) = dechunk(&bytes) {
            prop_assert!(body.len() <= bytes.len());
        }
    }

    #[test]
    fn range_headers_never_panic(text in prop_oneof![".{0,40}", edge_range()], size in edge_u64()) {
        if let Some((first, last)) = RangeSpec::parse(&text).ok().and_then(|s| s.resolve(size)) {
            prop_assert!(first <= last && last < size);
        }
    }

    #[test]
    fn range_headers_of_the_right_shape_parse(a in edge_u64(), b in edge_u64()) {
        let text = format!("bytes={a}-{b}");
        prop_assert_eq!(RangeSpec::parse(&text).is_ok(), a <= b);
    }

    #[test]
    fn xml_readers_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            mutated(LISTING.to_vec()),
            edge_number_text().prop_map(|n| format!(
                "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>\
                 <Size>{n}</Size></Contents></ListBucketResult>"
            ).into_bytes()),
        ],
    ) {
        let _ = crate::s3::xml::walk(&bytes, |_, _| Ok(()));
        let _ = crate::s3::client::parse_list_page(&bytes);
        let _ = crate::s3::error::error_document(&bytes);
        let _ = crate::s3::xml::completed_parts(&bytes);
        let _ = crate::s3::xml::delete_request(&bytes);
    }

    #[test]
    fn page_headers_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            mutated(parquet_file().get(4..300).unwrap_or_default().to_vec()),
            edge_page(),
        ],
    ) {
        let _ = crate::verify::walk_pages(&bytes);
        if let Ok((header, _)) = crate::verify::page_header(&bytes) {
            prop_assert!(header <= bytes.len());
        }
    }

    #[test]
    fn chunk_hash_lists_never_panic(
        text in "[0-9a-f,;x]{0,80}",
        groups in prop_oneof![0usize..4, Just(usize::MAX), Just(usize::MAX - 1)],
        columns in prop_oneof![0usize..4, Just(usize::MAX), Just(usize::MAX - 1)],
    ) {
        if let Ok(hashes) = crate::verify::decode_hashes(&text, groups, columns) {
            prop_assert_eq!(Some(hashes.len()), groups.checked_mul(columns));
        }
    }

    #[test]
    fn sigv4_verification_never_panics(
        authorization in prop_oneof![
            "(AWS4-HMAC-SHA256 )?[ -~]{0,120}",
            // Well formed, so the date is read.
            Just("AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, \
                  SignedHeaders=host;x-amz-date, Signature=00".to_string()),
        ],
        date in prop_oneof!["[0-9TZ]{0,20}", edge_amz_date()],
        path in "/[ -~]{0,30}",
        query in "[ -~]{0,40}",
    ) {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&authorization) {
            headers.insert(http::header::AUTHORIZATION, v);
        }
        if let Ok(v) = HeaderValue::from_str(&date) {
            headers.insert("x-amz-date", v);
        }
        headers.insert("host", HeaderValue::from_static("127.0.0.1"));
        headers.insert("x-amz-content-sha256", HeaderValue::from_static("UNSIGNED-PAYLOAD"));
        let request = SignedRequest {
            method: &Method::GET,
            raw_path: &path,
            raw_query: &query,
            headers: &headers,
        };
        let credentials = Credentials {
            access_key_id: "AK".into(),
            secret_access_key: "SK".into(),
        };
        prop_assert!(sigv4::verify(&request, &credentials, "us-east-1", std::time::SystemTime::now()).is_err());
    }
}

proptest! {
    // Footers get more cases: a corrupt one that made the parquet crate panic turned up only
    // after about ten thousand.
    #![proptest_config(ProptestConfig { cases: cases().saturating_mul(5), ..config() })]

    #[test]
    fn footers_never_panic(bytes in mutated_footer()) {
        let source = OneObject(bytes, None);
        let _ = catalog::read_layout(&source, &source.meta(), None, true);
    }
    #[test]
    fn footers_at_the_edges_never_panic(
        metadata_len in edge_u64(),
        claimed in prop_oneof![Just(None), edge_u64().prop_map(Some)],
        near in prop_oneof![Just(None), (0u64..16).prop_map(Some)],
    ) {
        // The trailer's metadata length, and the listing's size, at edge values: past the
        // file, past what the storage returns, just inside.
        let mut bytes = parquet_file();
        let len = bytes.len();
        let metadata_len = match near {
            Some(k) => (len as u64 + 8).wrapping_sub(k),
            None => metadata_len,
        };
        if len >= 8 {
            bytes[len - 8..len - 4].copy_from_slice(&(metadata_len as u32).to_le_bytes());
        }
        let source = OneObject(bytes, claimed);
        let _ = catalog::read_layout(&source, &source.meta(), None, true);
    }
}

/// A real Parquet file with its last 2 KiB (the footer and its trailer) mutated, or cut short.
fn mutated_footer() -> impl Strategy<Value = Vec<u8>> {
    let file = parquet_file();
    let tail_start = file.len().saturating_sub(2048);
    let tail = file[tail_start..].to_vec();
    mutated(tail).prop_map(move |tail| {
        let mut bytes = file[..tail_start].to_vec();
        bytes.extend_from_slice(&tail);
        bytes
    })
}

// The TLS record layer against crafted records from a real rustls server's keys (every suite
// of TLS 1.3 and 1.2): any split into receives, any padding; an untouched stream arrives whole,
// and a tampered one is an error value or a stream cut short, never a panic.
mod tls_records {
    use proptest::prelude::*;

    use super::config;
    use crate::engine::uring::tls::harness::{Harness, all_suites};

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn tls_records_never_panic_and_arrive_whole(
            suite in 0usize..6,
            messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 1..5),
            paddings in proptest::collection::vec(0usize..300, 5),
            chunks in proptest::collection::vec(1usize..6000, 1..8),
            tamper in proptest::option::of((any::<prop::sample::Index>(), 1u8..=255)),
            close in any::<bool>(),
        ) {
            let (version, cipher) = all_suites()[suite];
            let mut h = Harness::crafted(version, cipher);
            let mut stream = std::mem::take(&mut h.wire);
            for (message, padding) in messages.iter().zip(&paddings) {
                stream.extend(h.craft(23, message, *padding));
            }
            if close {
                stream.extend(h.craft(21, &[1, 0], 0));
            }
            if let Some((at, flip)) = tamper {
                let at = at.index(stream.len());
                stream[at] ^= flip;
            }
            let mut got = Vec::new();
            let mut closed = false;
            let mut failed = false;
            let mut rest = &stream[..];
            for turn in 0.. {
                if rest.is_empty() || closed {
                    break;
                }
                let n = chunks[turn % chunks.len()].min(rest.len());
                match h.feed(&rest[..n], n) {
                    Ok((plain, c)) => {
                        got.extend(plain);
                        closed = c;
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
                rest = &rest[n..];
            }
            if tamper.is_none() {
                prop_assert!(!failed);
                prop_assert_eq!(got, messages.concat());
                prop_assert_eq!(closed, close);
            }
        }
    }
}

/// `scripts/test` and `scripts/fuzz` build ringload with overflow checks and set
/// `RINGLOAD_REQUIRE_OVERFLOW_CHECKS`: there an overflow must panic, or the properties above
/// would let a wrapped offset pass. Elsewhere (a plain `cargo test --release`) it only says so.
#[test]
fn overflow_checks_are_on() {
    let wraps = std::panic::catch_unwind(|| {
        std::hint::black_box(u64::MAX).wrapping_add(0) + std::hint::black_box(1u64)
    })
    .is_ok();
    if std::env::var_os("RINGLOAD_REQUIRE_OVERFLOW_CHECKS").is_some() {
        assert!(
            !wraps,
            "u64::MAX + 1 wrapped: this build has no overflow checks (scripts/test passes \
             --config 'profile.release.package.ringload.overflow-checks=true')"
        );
    } else if wraps {
        eprintln!(
            "overflow checks are off in this build; scripts/test turns them on (its --config)"
        );
    }
}
