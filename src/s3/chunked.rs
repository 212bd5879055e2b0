//! `aws-chunked` request bodies, S3's streaming payloads, as ringload sends them: the
//! additional checksum as a trailer after the body (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, the
//! AWS SDKs' form over https), the body signed chunk by chunk
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`), or both
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`, the SDKs' form over http).
//!
//! A body goes as ONE data chunk (the whole part) and the final zero-length chunk: the bytes
//! stay where they were generated, with the chunk's header just before them (after the
//! request head) and the rest — the CRLF closing the data, the final chunk, the trailer and
//! its signature — just after them ([`Chunked::frame`]). The SDKs cut 64 KiB chunks, which
//! costs a store one HMAC per 64 KiB besides the same SHA-256 over the bytes; one chunk keeps
//! the client's cost that of the SHA-256 alone, computed as the part is generated. Every
//! length is known before the head is signed (the signatures are fixed-width), so
//! `Content-Length` is exact.
//!
//! Signatures chain as AWS's "sigv4-streaming" pages say: the head's own signature seeds the
//! first chunk's, each chunk's string to sign is `AWS4-HMAC-SHA256-PAYLOAD`, the time, the
//! scope, the previous signature, the SHA-256 of nothing and the chunk's SHA-256; the trailer's
//! is `AWS4-HMAC-SHA256-TRAILER`, …, the final chunk's signature and the SHA-256 of
//! `name:value\n` ([`ChunkSigning`]).

use super::sigv4::ChunkSigning;
use crate::checksum::Digest;

/// `x-amz-content-sha256` of a body signed chunk by chunk.
pub const STREAMING_SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// … signed chunk by chunk, with a trailer.
pub const STREAMING_SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// … unsigned, with a trailer.
pub const STREAMING_UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// The most bytes any form puts after the data: CRLF, a signed final chunk, the longest
/// checksum trailer (SHA-256's, 44 base64 characters), its signature line and the closing
/// CRLF come to 246. A buffer keeps this much room after a body.
pub const MAX_TAIL_BYTES: usize = crate::budget::CHUNKED_TAIL_BYTES as usize;

/// `;chunk-signature=` and 64 hex digits.
const SIGNATURE_FIELD_BYTES: usize = 17 + 64;

/// One body sent `aws-chunked`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunked {
    /// The body's bytes (`x-amz-decoded-content-length`).
    pub data_len: u64,
    /// Chunks signed: the body's SHA-256, computed as it was generated. `None`: the chunks
    /// go unsigned (with a trailer: `STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
    pub data_sha256: Option<[u8; 32]>,
    /// The additional checksum, sent as the trailer.
    pub trailer: Option<Digest>,
}

/// The SHA-256 of nothing, as bytes: a final chunk's data hash.
const EMPTY_DATA_SHA256: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

impl Chunked {
    /// `x-amz-content-sha256`: which streaming form the body is.
    pub fn content_sha256(&self) -> &'static str {
        match (self.data_sha256.is_some(), self.trailer.is_some()) {
            (true, true) => STREAMING_SIGNED_TRAILER,
            (true, false) => STREAMING_SIGNED,
            (false, _) => STREAMING_UNSIGNED_TRAILER,
        }
    }

    /// The headers an aws-chunked body comes with (sent and signed).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-encoding", "aws-chunked".to_string()),
            ("x-amz-decoded-content-length", self.data_len.to_string()),
        ];
        if let Some(digest) = &self.trailer {
            headers.push(("x-amz-trailer", digest.algorithm.header().to_string()));
        }
        headers
    }

    fn signed(&self) -> bool {
        self.data_sha256.is_some()
    }

    /// The data chunk's header: `hex(len)[;chunk-signature=…]\r\n` (none for an empty body,
    /// whose only chunk is the final one).
    pub fn prefix_len(&self) -> usize {
        if self.data_len == 0 {
            return 0;
        }
        let signature = if self.signed() {
            SIGNATURE_FIELD_BYTES
        } else {
            0
        };
        format!("{:x}", self.data_len).len() + signature + 2
    }

    /// Everything after the data: its CRLF, the final chunk, the trailer and the closing CRLF.
    pub fn tail_len(&self) -> usize {
        let crlf = if self.data_len == 0 { 0 } else { 2 };
        let last =
            1 + if self.signed() {
                SIGNATURE_FIELD_BYTES
            } else {
                0
            } + 2;
        let trailer = self.trailer.as_ref().map_or(0, |d| {
            let line = d.algorithm.header().len() + 1 + d.base64().len() + 2;
            let signature = if self.signed() {
                "x-amz-trailer-signature:".len() + 64 + 2
            } else {
                0
            };
            line + signature
        });
        crlf + last + trailer + 2
    }

    /// The body's bytes on the wire (`Content-Length`).
    pub fn encoded_len(&self) -> u64 {
        (self.prefix_len() + self.tail_len()) as u64 + self.data_len
    }

    /// The bytes before the data and after it. `chain` signs them (the head's signature
    /// seeding it); without one a signed form's signatures cannot be made: `Err`.
    pub fn frame(&self, chain: Option<&ChunkSigning>) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut prefix = Vec::with_capacity(self.prefix_len());
        let mut tail = Vec::with_capacity(self.tail_len());
        if self.data_sha256.is_none() && self.trailer.is_none() {
            // S3 has no form for it (STREAMING-UNSIGNED-PAYLOAD without a trailer).
            return Err("an aws-chunked body neither signed nor with a trailer (a bug)".into());
        }
        let mut previous = String::new();
        let chain = match (&self.data_sha256, chain) {
            (Some(sha256), Some(chain)) => {
                previous = chain.seed_signature.clone();
                if self.data_len > 0 {
                    previous = chain.chunk(&previous, sha256);
                }
                Some(chain)
            }
            (Some(_), None) => return Err("chunk signatures need keys (a bug)".into()),
            (None, _) => None,
        };
        if self.data_len > 0 {
            prefix.extend_from_slice(format!("{:x}", self.data_len).as_bytes());
            if chain.is_some() {
                prefix.extend_from_slice(format!(";chunk-signature={previous}").as_bytes());
            }
            prefix.extend_from_slice(b"\r\n");
            tail.extend_from_slice(b"\r\n");
        }
        tail.push(b'0');
        if let Some(chain) = chain {
            previous = chain.chunk(&previous, &EMPTY_DATA_SHA256);
            tail.extend_from_slice(format!(";chunk-signature={previous}").as_bytes());
        }
        tail.extend_from_slice(b"\r\n");
        if let Some(digest) = &self.trailer {
            let canonical = format!("{}:{}\n", digest.algorithm.header(), digest.base64());
            tail.extend_from_slice(canonical.trim_end().as_bytes());
            tail.extend_from_slice(b"\r\n");
            if let Some(chain) = chain {
                let signature = chain.trailer(&previous, canonical.as_bytes());
                tail.extend_from_slice(
                    format!("x-amz-trailer-signature:{signature}\r\n").as_bytes(),
                );
            }
        }
        tail.extend_from_slice(b"\r\n");
        // Content-Length and the tail's place in a buffer were set from these lengths.
        if (prefix.len(), tail.len()) != (self.prefix_len(), self.tail_len()) {
            return Err(format!(
                "an aws-chunked frame of {} + {} bytes where {} + {} were counted (a bug)",
                prefix.len(),
                tail.len(),
                self.prefix_len(),
                self.tail_len()
            ));
        }
        Ok((prefix, tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Algorithm;
    use sha2::{Digest as _, Sha256};

    fn chain() -> ChunkSigning {
        ChunkSigning {
            key: super::super::sigv4::signing_key("secret", "20130524", "us-east-1", "s3"),
            amz_date: "20130524T000000Z".into(),
            scope: "20130524/us-east-1/s3/aws4_request".into(),
            seed_signature: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
                .into(),
        }
    }

    #[test]
    fn the_empty_data_hash_is_sha256_of_nothing() {
        assert_eq!(EMPTY_DATA_SHA256, <[u8; 32]>::from(Sha256::digest(b"")));
        assert_eq!(
            super::super::sigv4::hex(&EMPTY_DATA_SHA256),
            super::super::sigv4::EMPTY_SHA256
        );
    }

    fn crc32c(data: &[u8]) -> Digest {
        crate::checksum::digest(Algorithm::Crc32c, data)
    }

    #[test]
    fn each_form_frames_one_data_chunk_and_its_lengths_are_exact() {
        let data = b"hello, chunks";
        let chain = chain();
        let sha: [u8; 32] = Sha256::digest(data).into();
        let forms = [
            (None, Some(crc32c(data)), STREAMING_UNSIGNED_TRAILER),
            (Some(sha), None, STREAMING_SIGNED),
            (Some(sha), Some(crc32c(data)), STREAMING_SIGNED_TRAILER),
        ];
        for (data_sha256, trailer, name) in forms {
            let c = Chunked {
                data_len: data.len() as u64,
                data_sha256,
                trailer,
            };
            assert_eq!(c.content_sha256(), name);
            let (prefix, tail) = c.frame(Some(&chain)).unwrap();
            assert!(tail.len() <= MAX_TAIL_BYTES);
            let mut body = prefix.clone();
            body.extend_from_slice(data);
            body.extend_from_slice(&tail);
            assert_eq!(body.len() as u64, c.encoded_len(), "{name}");
            let text = String::from_utf8(body).unwrap();
            assert!(text.starts_with('d'), "{text}");
            assert!(text.contains("\r\nhello, chunks\r\n0"), "{text}");
            assert!(text.ends_with("\r\n\r\n"), "{text}");
            let signed = c.data_sha256.is_some();
            assert_eq!(
                text.matches(";chunk-signature=").count(),
                2 * signed as usize
            );
            if signed {
                // The data chunk's signature chains from the seed, the final one from it.
                let first = chain.chunk(&chain.seed_signature, &sha);
                let last = chain.chunk(&first, &EMPTY_DATA_SHA256);
                assert!(text.starts_with(&format!("d;chunk-signature={first}\r\n")));
                assert!(text.contains(&format!("\r\n0;chunk-signature={last}\r\n")));
            }
            if let Some(d) = &c.trailer {
                let line = format!("\r\nx-amz-checksum-crc32c:{}\r\n", d.base64());
                assert!(text.contains(&line), "{text}");
                assert_eq!(text.contains("x-amz-trailer-signature:"), signed, "{text}");
            }
            let headers = c.headers();
            assert!(headers.contains(&("x-amz-decoded-content-length", "13".into())));
            assert_eq!(
                headers.iter().any(|(n, _)| *n == "x-amz-trailer"),
                c.trailer.is_some()
            );
        }
        // A signed form without keys is a bug, said.
        let signed = Chunked {
            data_len: 1,
            data_sha256: Some(sha),
            trailer: None,
        };
        assert!(signed.frame(None).is_err());
        // Neither signed nor with a trailer: no S3 form.
        let neither = Chunked {
            data_len: 1,
            data_sha256: None,
            trailer: None,
        };
        assert!(neither.frame(None).is_err());
    }

    /// The longest tail, SHA-256's trailer signed after a signed final chunk, fits the room
    /// a buffer keeps for it.
    #[test]
    fn the_longest_tail_fits_the_buffers_room() {
        let data = vec![7u8; 5 << 20];
        let c = Chunked {
            data_len: data.len() as u64,
            data_sha256: Some(Sha256::digest(&data).into()),
            trailer: Some(crate::checksum::digest(Algorithm::Sha256, &data)),
        };
        let (prefix, tail) = c.frame(Some(&chain())).unwrap();
        assert_eq!(tail.len(), 246);
        assert!(tail.len() <= MAX_TAIL_BYTES);
        assert_eq!(
            (prefix.len() + tail.len()) as u64 + c.data_len,
            c.encoded_len()
        );
    }

    #[test]
    fn an_empty_body_is_the_final_chunk_alone() {
        let c = Chunked {
            data_len: 0,
            data_sha256: None,
            trailer: Some(crc32c(b"")),
        };
        let (prefix, tail) = c.frame(None).unwrap();
        assert!(prefix.is_empty());
        assert_eq!(
            String::from_utf8(tail).unwrap(),
            "0\r\nx-amz-checksum-crc32c:AAAAAA==\r\n\r\n"
        );
        assert_eq!(c.encoded_len(), c.tail_len() as u64);
    }
}
