//! Property tests over every parser that reads bytes a server or client sent (page headers
//! and footer hash lists among them): arbitrary and mutated inputs, and the only property
//! asked is the one that matters for a load generator talking to a misbehaving store — no panic, and every rejection is an error value.
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

const HEAD: &[u8] = b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-99/1000\r\n\
content-length: 100\r\nconnection: keep-alive\r\n\r\n";

const LISTING: &[u8] = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>
<Contents><Key>d/train/a.parquet</Key><Size>10</Size></Contents>
<Contents><Key>d/train/b.parquet</Key><Size>20</Size></Contents></ListBucketResult>"#;

fn get() -> RangedGet {
    RangedGet {
        key: "k".into(),
        offset: 0,
        len_bytes: 100,
        check: None,
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

/// One object in memory, as an object source for the footer decoder.
struct OneObject(Vec<u8>);

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
            size_bytes: self.0.len() as u64,
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
        ],
    ) {
        let _ = dechunk(&bytes);
    }

    #[test]
    fn range_headers_never_panic(text in ".{0,40}", size in any::<u64>()) {
        if let Some((first, last)) = RangeSpec::parse(&text).ok().and_then(|s| s.resolve(size)) {
            prop_assert!(first <= last && last < size);
        }
    }

    #[test]
    fn range_headers_of_the_right_shape_parse(a in any::<u32>(), b in any::<u32>()) {
        let text = format!("bytes={a}-{b}");
        prop_assert_eq!(RangeSpec::parse(&text).is_ok(), a <= b);
    }

    #[test]
    fn xml_readers_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            mutated(LISTING.to_vec()),
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
        ],
    ) {
        let _ = crate::verify::walk_pages(&bytes);
        if let Ok((header, _)) = crate::verify::page_header(&bytes) {
            prop_assert!(header <= bytes.len());
        }
    }

    #[test]
    fn chunk_hash_lists_never_panic(text in "[0-9a-f,;x]{0,80}", groups in 0usize..4, columns in 0usize..4) {
        if let Ok(hashes) = crate::verify::decode_hashes(&text, groups, columns) {
            prop_assert_eq!(hashes.len(), groups * columns);
        }
    }

    #[test]
    fn sigv4_verification_never_panics(
        authorization in "(AWS4-HMAC-SHA256 )?[ -~]{0,120}",
        date in "[0-9TZ]{0,20}",
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
        let source = OneObject(bytes);
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
