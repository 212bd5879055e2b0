//! SigV4's primitives, shared by the client's signer ([`super::sign`]) and the embedded
//! server's verifier (`server::sigv4`, `server::chunked`): lowercase hex, S3's UriEncode, the
//! signing key, and the signatures of an aws-chunked body's chunks and trailer (S3's
//! `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]` forms), each chained to the one before it.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The SHA-256 of nothing, lowercase hex: a chunk signature's hash of the (absent) chunk
/// headers, and a final chunk's hash of its empty data.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// S3's UriEncode: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX` (uppercase); `/` kept when
/// `keep_slash`.
pub fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => {
                out.push('%');
                out.push_str(&format!("{b:02X}"));
            }
        }
    }
    out
}

/// HMAC-SHA256 of `data` under `key`.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// SigV4's signing key of `secret` for one day (`YYYYMMDD`), region and service.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    key
}

/// The signature of one aws-chunked chunk whose data hashes to `data_sha256`: HMAC of
/// `AWS4-HMAC-SHA256-PAYLOAD`, the request's time, its scope, the signature before it (the
/// request's own for the first chunk), the empty hash and the data's hash, one a line. The
/// final zero-length chunk is signed the same way, over no data.
pub fn chunk_signature(
    key: &[u8; 32],
    amz_date: &str,
    scope: &str,
    previous: &str,
    data_sha256: &[u8; 32],
) -> String {
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{previous}\n{EMPTY_SHA256}\n{}",
        hex(data_sha256)
    );
    hex(&hmac_sha256(key, string_to_sign.as_bytes()))
}

/// The signature of an aws-chunked body's trailer, chained to the final chunk's signature
/// (`previous`): HMAC of `AWS4-HMAC-SHA256-TRAILER`, the request's time, its scope, `previous`
/// and the hash of the trailer lines as signed (`x-amz-checksum-crc32c:VALUE\n`, each line
/// ending in a bare newline). AWS's form; garage 2.5 puts `-PAYLOAD` on the first line.
pub fn trailer_signature(
    key: &[u8; 32],
    amz_date: &str,
    scope: &str,
    previous: &str,
    trailer_lines: &[u8],
) -> String {
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256-TRAILER\n{amz_date}\n{scope}\n{previous}\n{}",
        hex(&Sha256::digest(trailer_lines))
    );
    hex(&hmac_sha256(key, string_to_sign.as_bytes()))
}

/// What signs, or checks, a signed aws-chunked body's chunks: the signing key, the request's
/// time and scope, and its signature (the seed each chunk's signature is chained from). The
/// client's signer makes it with the head's signature, the server's verifier hands it on.
#[derive(Clone, PartialEq, Eq)]
pub struct ChunkSigning {
    pub key: [u8; 32],
    /// `x-amz-date`, `YYYYMMDDTHHMMSSZ`.
    pub amz_date: String,
    /// `YYYYMMDD/REGION/s3/aws4_request`.
    pub scope: String,
    /// The request's own signature, lowercase hex.
    pub seed_signature: String,
}

impl std::fmt::Debug for ChunkSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSigning")
            .field("amz_date", &self.amz_date)
            .field("scope", &self.scope)
            .field("seed_signature", &self.seed_signature)
            .finish_non_exhaustive()
    }
}

impl ChunkSigning {
    /// The signature of a chunk whose data hashes to `data_sha256`, after `previous`.
    pub fn chunk(&self, previous: &str, data_sha256: &[u8; 32]) -> String {
        chunk_signature(
            &self.key,
            &self.amz_date,
            &self.scope,
            previous,
            data_sha256,
        )
    }

    /// The trailer's signature, after the final chunk's (`previous`): `lines` as signed,
    /// each `name:value\n`.
    pub fn trailer(&self, previous: &str, lines: &[u8]) -> String {
        trailer_signature(&self.key, &self.amz_date, &self.scope, previous, lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's documented example of a signed aws-chunked upload (S3 API reference, "Signature
    /// Calculations for the Authorization Header: Transferring Payload in Multiple Chunks"): a
    /// PUT of 66,560 bytes of `a` in chunks of 64 KiB, 1 KiB and 0, by the example secret at
    /// 20130524T000000Z, each chunk's signature chained to the one before it.
    #[test]
    fn chunk_signatures_match_the_aws_documented_example() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "20130524",
            "us-east-1",
            "s3",
        );
        let (date, scope) = ("20130524T000000Z", "20130524/us-east-1/s3/aws4_request");
        let seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
        let sha = |n: usize| -> [u8; 32] { Sha256::digest(vec![b'a'; n]).into() };
        let first = chunk_signature(&key, date, scope, seed, &sha(65536));
        assert_eq!(
            first,
            "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
        );
        let second = chunk_signature(&key, date, scope, &first, &sha(1024));
        assert_eq!(
            second,
            "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"
        );
        let last = chunk_signature(&key, date, scope, &second, &sha(0));
        assert_eq!(
            last,
            "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"
        );
    }

    #[test]
    fn the_empty_hash_is_the_hash_of_nothing() {
        assert_eq!(hex(&Sha256::digest(b"")), EMPTY_SHA256);
    }
}
