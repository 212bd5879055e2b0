//! Verification of AWS Signature Version 4 header signatures, as S3 does it.
//!
//! The server rebuilds the canonical request from what arrived (method, path, query, the headers
//! the client says it signed, and the payload hash in `x-amz-content-sha256`), derives the
//! signing key from the secret and the credential scope, and compares signatures. The payload
//! hash itself is checked by the caller while it reads the body ([`PayloadHash`]).
//!
//! `x-amz-content-sha256` also names S3's streaming payloads, an `aws-chunked` body of
//! size-prefixed chunks ([`Streaming`]): `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (chunks, then a
//! trailer with the body's checksum), `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` (each chunk signed,
//! chained from the request's own signature) and `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`
//! (signed chunks and a signed trailer). A verified signature hands back what the chunks'
//! signatures are checked with ([`ChunkSigning`]); `server::chunked` decodes and checks the body.
//!
//! Canonical URI and query: S3 signs the path encoded once and the query parameters encoded and
//! sorted. Clients differ in how faithfully they do this: the SDKs send exactly the encoded
//! forms they signed, while curl 7.88 signs the path and the query as it sends them (a `/` in a
//! query value stays a `/`). So the spec's canonical forms are tried first and then the forms as
//! received; any match proves the client holds the secret.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, StatusCode};
use sha2::{Digest, Sha256};

use super::error::S3Error;
use crate::checksum::Algorithm;
pub use crate::s3::sigv4::ChunkSigning;
use crate::s3::sigv4::{hex, hmac_sha256, signing_key, uri_encode};

/// How far a request's time may be from the server's (S3: 15 minutes).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

/// The access key the server accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// An aws-chunked body as its headers announce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streaming {
    /// Each chunk header carries `;chunk-signature=` (the `STREAMING-AWS4-HMAC-SHA256-*`
    /// forms), and the trailer, when there is one, `x-amz-trailer-signature:`.
    pub signed: bool,
    /// The checksum the trailer carries (`x-amz-trailer`), or none.
    pub trailer: Option<Algorithm>,
    /// `x-amz-decoded-content-length`: the data's bytes, without the framing.
    pub decoded_length: u64,
    /// What the chunks' signatures are checked with; `None` on a server without credentials,
    /// which checks no signature (the chunks are decoded all the same).
    pub signing: Option<ChunkSigning>,
}

/// What `x-amz-content-sha256` promises about the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadHash {
    /// `UNSIGNED-PAYLOAD`, or no header on an unsigned request.
    Unsigned,
    /// The SHA-256 of the body; the body must hash to it.
    Sha256([u8; 32]),
    /// An aws-chunked body (`STREAMING-*`), decoded and checked by `server::chunked`.
    Streaming(Box<Streaming>),
}

impl PayloadHash {
    /// Reads `x-amz-content-sha256` (and, for a streaming payload, the headers that come with
    /// it). `signing` is what the header signature's check handed back: `None` when the server
    /// has no credentials.
    pub fn from_headers(
        headers: &HeaderMap,
        signing: Option<ChunkSigning>,
    ) -> Result<PayloadHash, S3Error> {
        let Some(value) = headers.get("x-amz-content-sha256") else {
            return Ok(PayloadHash::Unsigned);
        };
        let value = value.to_str().unwrap_or("");
        if value == "UNSIGNED-PAYLOAD" {
            return Ok(PayloadHash::Unsigned);
        }
        if value.starts_with("STREAMING-") {
            return streaming(headers, value, signing);
        }
        match decode_hex32(value) {
            Some(hash) => Ok(PayloadHash::Sha256(hash)),
            None => Err(S3Error::invalid_argument(format!(
                "x-amz-content-sha256: '{value}' is neither UNSIGNED-PAYLOAD nor a hex SHA-256"
            ))),
        }
    }

    /// Checks a body's hash against the promise.
    pub fn check(&self, actual: &[u8; 32]) -> Result<(), S3Error> {
        match self {
            PayloadHash::Sha256(want) if want != actual => Err(S3Error::new(
                StatusCode::BAD_REQUEST,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
            .with("ClientComputedContentSHA256", hex(want))
            .with("S3ComputedContentSHA256", hex(actual))),
            _ => Ok(()),
        }
    }
}

fn decode_hex32(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// A `STREAMING-*` payload's form and the headers that come with it: `x-amz-decoded-content-length`
/// always, `x-amz-trailer` for the trailer forms (one algorithm the server verifies).
/// `Content-Encoding: aws-chunked` is not required (not every client sends it).
fn streaming(
    headers: &HeaderMap,
    value: &str,
    signing: Option<ChunkSigning>,
) -> Result<PayloadHash, S3Error> {
    let (signed, trailer) = match value {
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => (false, true),
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => (true, false),
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => (true, true),
        "STREAMING-UNSIGNED-PAYLOAD" => {
            return Err(S3Error::invalid_request(
                "x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD without a trailer is not a \
                 valid combination; send STREAMING-UNSIGNED-PAYLOAD-TRAILER with x-amz-trailer, \
                 or UNSIGNED-PAYLOAD",
            ));
        }
        _ => {
            return Err(S3Error::not_implemented(format!(
                "x-amz-content-sha256: {value} is not a streaming payload ringload serve \
                 takes (STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, \
                 STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER)"
            )));
        }
    };
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let decoded_length = match text("x-amz-decoded-content-length") {
        Some(n) => n.parse::<u64>().map_err(|_| {
            S3Error::invalid_argument(format!(
                "x-amz-decoded-content-length: '{n}' is not a number of bytes"
            ))
        })?,
        None => {
            return Err(S3Error::new(
                StatusCode::LENGTH_REQUIRED,
                "MissingContentLength",
                format!("{value} needs x-amz-decoded-content-length: the data's bytes"),
            ));
        }
    };
    let trailer = match (trailer, text("x-amz-trailer")) {
        (false, None) => None,
        (false, Some(t)) => {
            return Err(S3Error::invalid_request(format!(
                "x-amz-trailer: {t} with {value}, which has no trailer; send {value}-TRAILER"
            )));
        }
        (true, None) => {
            return Err(S3Error::invalid_request(format!(
                "{value} needs x-amz-trailer naming the trailer's checksum \
                 (x-amz-checksum-crc32, -crc32c, -crc64nvme or -sha256)"
            )));
        }
        (true, Some(t)) => Some(trailer_algorithm(t)?),
    };
    Ok(PayloadHash::Streaming(Box::new(Streaming {
        signed,
        trailer,
        decoded_length,
        signing: signing.filter(|_| signed),
    })))
}

/// The algorithm `x-amz-trailer` names: one checksum header the server verifies.
fn trailer_algorithm(name: &str) -> Result<Algorithm, S3Error> {
    crate::checksum::ALGORITHMS
        .into_iter()
        .find(|a| a.header().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            S3Error::invalid_request(format!(
                "x-amz-trailer: {name} is not a checksum ringload serve verifies \
                 (x-amz-checksum-crc32, x-amz-checksum-crc32c, x-amz-checksum-crc64nvme, \
                 x-amz-checksum-sha256)"
            ))
        })
}

/// Percent-decodes a path or query component (`+` stays `+`).
pub fn percent_decode(text: &str) -> Result<String, S3Error> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| S3Error::invalid_argument(format!("'{text}' does not decode to UTF-8")))
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn malformed(message: impl Into<String>) -> S3Error {
    S3Error::new(
        StatusCode::BAD_REQUEST,
        "AuthorizationHeaderMalformed",
        message,
    )
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, S3Error> {
    let Some(rest) = value.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(S3Error::invalid_request(
            "the Authorization header is not AWS4-HMAC-SHA256; only Signature Version 4 is \
             supported",
        ));
    };
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {
                return Err(malformed(format!(
                    "unexpected '{}' in Authorization",
                    part.trim()
                )));
            }
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(malformed(
            "Authorization needs Credential=, SignedHeaders= and Signature=",
        ));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, "aws4_request"] = scope[..] else {
        return Err(malformed(format!(
            "Credential '{credential}' is not KEY/YYYYMMDD/REGION/s3/aws4_request"
        )));
    };
    Ok(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed.split(';').collect(),
        signature,
    })
}

/// Seconds since the epoch of an ISO 8601 basic time `YYYYMMDDTHHMMSSZ`.
fn parse_amz_date(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), for years ≥ 1970.
    // Year 0000 has no year before it here (a date before 1970 is refused below anyway).
    let y = if mo <= 2 { y.checked_sub(1)? } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3600 + mi * 60 + s)
}

/// The request as the signature covers it.
#[derive(Debug)]
pub struct SignedRequest<'a> {
    pub method: &'a Method,
    /// The path as it arrived (still percent-encoded).
    pub raw_path: &'a str,
    /// The query string as it arrived, without `?`.
    pub raw_query: &'a str,
    pub headers: &'a HeaderMap,
}

fn canonical_query(raw_query: &str) -> Result<String, S3Error> {
    let mut pairs = Vec::new();
    for item in raw_query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = item.split_once('=').unwrap_or((item, ""));
        pairs.push((
            uri_encode(&percent_decode(k)?, false),
            uri_encode(&percent_decode(v)?, false),
        ));
    }
    pairs.sort();
    Ok(pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&"))
}

/// The query's parameters sorted, as they arrived (what curl 7.88 signs for a sorted query).
fn as_sent_query(raw_query: &str) -> String {
    let mut items: Vec<&str> = raw_query.split('&').filter(|s| !s.is_empty()).collect();
    items.sort();
    items.join("&")
}

fn canonical_header_value(headers: &HeaderMap, name: &str) -> String {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Checks the request's signature against `credentials` and the server's `region`, at time
/// `now`; a valid one hands back what an aws-chunked body's signatures are checked with.
pub fn verify(
    request: &SignedRequest<'_>,
    credentials: &Credentials,
    region: &str,
    now: SystemTime,
) -> Result<ChunkSigning, S3Error> {
    let Some(header) = request.headers.get(http::header::AUTHORIZATION) else {
        if request.raw_query.contains("X-Amz-Signature=") {
            return Err(S3Error::access_denied(
                "presigned URLs are not supported by ringload serve; sign the Authorization header",
            ));
        }
        return Err(S3Error::access_denied(
            "Access Denied: the server has credentials set and the request is not signed",
        ));
    };
    let header = header
        .to_str()
        .map_err(|_| malformed("the Authorization header is not ASCII"))?;
    let auth = parse_authorization(header)?;
    if auth.access_key_id != credentials.access_key_id {
        return Err(S3Error::new(
            StatusCode::FORBIDDEN,
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
        )
        .with("AWSAccessKeyId", auth.access_key_id));
    }
    if auth.region != region {
        // As S3 answers a signature scoped to another region.
        return Err(malformed(format!(
            "The authorization header is malformed; the region '{}' is wrong; expecting '{region}'",
            auth.region
        ))
        .with("Region", region));
    }
    if auth.service != "s3" {
        return Err(malformed(format!(
            "the credential scope names service '{}', not 's3'",
            auth.service
        )));
    }
    if !auth.signed_headers.contains(&"host") {
        return Err(S3Error::access_denied(
            "the signature must cover the Host header",
        ));
    }
    let amz_date = request
        .headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            S3Error::access_denied("AWS authentication requires an x-amz-date header")
        })?;
    let request_s = parse_amz_date(amz_date).ok_or_else(|| {
        S3Error::access_denied(format!("x-amz-date '{amz_date}' is not YYYYMMDDTHHMMSSZ"))
    })?;
    if !amz_date.starts_with(auth.date) {
        return Err(malformed(format!(
            "the credential date {} is not the date of x-amz-date {amz_date}",
            auth.date
        )));
    }
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    if request_s.abs_diff(now_s) > MAX_CLOCK_SKEW.as_secs() {
        return Err(S3Error::new(
            StatusCode::FORBIDDEN,
            "RequestTimeTooSkewed",
            "The difference between the request time and the server's time is too large.",
        )
        .with("RequestTime", amz_date));
    }
    let payload_hash = request
        .headers
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            S3Error::invalid_request(
                "Missing required header for this request: x-amz-content-sha256",
            )
        })?;

    let headers: String = auth
        .signed_headers
        .iter()
        .map(|name| format!("{name}:{}\n", canonical_header_value(request.headers, name)))
        .collect();
    // SigV4's canonical form first; then what curl 7.88 signs: the query as it was sent,
    // with its parameters sorted or in their order.
    let queries = [
        canonical_query(request.raw_query)?,
        as_sent_query(request.raw_query),
        request.raw_query.to_string(),
    ];
    let scope = format!("{}/{}/s3/aws4_request", auth.date, auth.region);
    let key = signing_key(&credentials.secret_access_key, auth.date, auth.region, "s3");
    let reencoded = uri_encode(&percent_decode(request.raw_path)?, true);
    let mut first_canonical = None;
    let paths = [reencoded.as_str(), request.raw_path];
    for (path, query) in paths
        .iter()
        .flat_map(|p| queries.iter().map(move |q| (p, q)))
    {
        let canonical = format!(
            "{}\n{path}\n{query}\n{headers}\n{}\n{payload_hash}",
            request.method,
            auth.signed_headers.join(";")
        );
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let expected = hex(&hmac_sha256(&key, string_to_sign.as_bytes()));
        if constant_time_eq(expected.as_bytes(), auth.signature.as_bytes()) {
            return Ok(ChunkSigning {
                key,
                amz_date: amz_date.to_string(),
                scope,
                seed_signature: expected,
            });
        }
        first_canonical.get_or_insert((canonical, string_to_sign));
    }
    let (canonical, string_to_sign) = first_canonical.unwrap_or_default();
    Err(S3Error::new(
        StatusCode::FORBIDDEN,
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. Check \
         your key and signing method.",
    )
    .with("AWSAccessKeyId", auth.access_key_id)
    .with("StringToSign", string_to_sign)
    .with("CanonicalRequest", canonical))
}

/// Whether two byte strings are equal, in a time that does not tell where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::s3::sigv4::EMPTY_SHA256;

    /// AWS's documented example: GET /test.txt with Range: bytes=0-9, signed by
    /// AKIAIOSFODNN7EXAMPLE at 20130524T000000Z (S3 API reference, "Signature Calculations for
    /// the Authorization Header: Example: GET Object").
    fn aws_example() -> (HeaderMap, Credentials) {
        let mut h = HeaderMap::new();
        h.insert("host", "examplebucket.s3.amazonaws.com".parse().unwrap());
        h.insert("range", "bytes=0-9".parse().unwrap());
        h.insert("x-amz-content-sha256", EMPTY_SHA256.parse().unwrap());
        h.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
        h.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
                .parse()
                .unwrap(),
        );
        let creds = Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
        };
        (h, creds)
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn accepts_the_aws_documented_example() {
        let (headers, creds) = aws_example();
        let request = SignedRequest {
            method: &Method::GET,
            raw_path: "/test.txt",
            raw_query: "",
            headers: &headers,
        };
        let t = parse_amz_date("20130524T000000Z").unwrap();
        assert_eq!(t, 1_369_353_600);
        verify(&request, &creds, "us-east-1", at(t + 60)).unwrap();
    }

    #[test]
    fn rejects_a_wrong_secret_a_changed_request_and_a_skewed_clock() {
        let (headers, creds) = aws_example();
        let t = parse_amz_date("20130524T000000Z").unwrap();
        let get = |path: &'static str| SignedRequest {
            method: &Method::GET,
            raw_path: path,
            raw_query: "",
            headers: &headers,
        };
        let wrong = Credentials {
            secret_access_key: "not-the-secret".into(),
            ..creds.clone()
        };
        assert_eq!(
            verify(&get("/test.txt"), &wrong, "us-east-1", at(t))
                .unwrap_err()
                .code,
            "SignatureDoesNotMatch"
        );
        assert_eq!(
            verify(&get("/other.txt"), &creds, "us-east-1", at(t))
                .unwrap_err()
                .code,
            "SignatureDoesNotMatch"
        );
        assert_eq!(
            verify(&get("/test.txt"), &creds, "us-east-1", at(t + 3600))
                .unwrap_err()
                .code,
            "RequestTimeTooSkewed"
        );
        let other_key = Credentials {
            access_key_id: "SOMEONEELSE".into(),
            ..creds
        };
        assert_eq!(
            verify(&get("/test.txt"), &other_key, "us-east-1", at(t))
                .unwrap_err()
                .code,
            "InvalidAccessKeyId"
        );
    }

    #[test]
    fn canonical_query_sorts_and_encodes() {
        assert_eq!(
            canonical_query("prefix=a%2Fb&list-type=2&delimiter=/&uploads").unwrap(),
            "delimiter=%2F&list-type=2&prefix=a%2Fb&uploads="
        );
        assert_eq!(uri_encode("a b/c~d", true), "a%20b/c~d");
    }

    #[test]
    fn payload_hash_header() {
        let mut h = HeaderMap::new();
        assert_eq!(
            PayloadHash::from_headers(&h, None).unwrap(),
            PayloadHash::Unsigned
        );
        h.insert("x-amz-content-sha256", EMPTY_SHA256.parse().unwrap());
        let PayloadHash::Sha256(want) = PayloadHash::from_headers(&h, None).unwrap() else {
            panic!("not a hash")
        };
        let empty: [u8; 32] = Sha256::digest(b"").into();
        assert_eq!(want, empty);
        PayloadHash::Sha256(want).check(&empty).unwrap();
        let other: [u8; 32] = Sha256::digest(b"x").into();
        assert_eq!(
            PayloadHash::Sha256(want).check(&other).unwrap_err().code,
            "XAmzContentSHA256Mismatch"
        );
        h.insert("x-amz-content-sha256", "zz".parse().unwrap());
        assert_eq!(
            PayloadHash::from_headers(&h, None).unwrap_err().code,
            "InvalidArgument"
        );
    }

    fn streaming_headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn streaming_payloads_need_their_headers_and_name_one_known_checksum() {
        let code = |pairs: &[(&'static str, &str)]| {
            PayloadHash::from_headers(&streaming_headers(pairs), None)
                .unwrap_err()
                .code
        };
        let sha = "x-amz-content-sha256";
        let (len, trailer) = ("x-amz-decoded-content-length", "x-amz-trailer");
        let unsigned = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
        assert_eq!(code(&[(sha, unsigned)]), "MissingContentLength");
        assert_eq!(code(&[(sha, unsigned), (len, "ten")]), "InvalidArgument");
        assert_eq!(code(&[(sha, unsigned), (len, "10")]), "InvalidRequest");
        let sha1 = [
            (sha, unsigned),
            (len, "10"),
            (trailer, "x-amz-checksum-sha1"),
        ];
        assert_eq!(code(&sha1), "InvalidRequest");
        let bare = [(sha, "STREAMING-UNSIGNED-PAYLOAD"), (len, "10")];
        assert_eq!(code(&bare), "InvalidRequest");
        let signed = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
        let extra = [
            (sha, signed),
            (len, "10"),
            (trailer, "x-amz-checksum-crc32c"),
        ];
        assert_eq!(code(&extra), "InvalidRequest");
        assert_eq!(
            code(&[(sha, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")]),
            "NotImplemented"
        );
        let ok = [
            (sha, unsigned),
            (len, "10"),
            (trailer, "X-Amz-Checksum-CRC64NVME"),
        ];
        assert_eq!(
            PayloadHash::from_headers(&streaming_headers(&ok), None).unwrap(),
            PayloadHash::Streaming(Box::new(Streaming {
                signed: false,
                trailer: Some(Algorithm::Crc64nvme),
                decoded_length: 10,
                signing: None,
            }))
        );
    }

    /// AWS's documented signed aws-chunked PUT (S3 API reference, "Transferring Payload in
    /// Multiple Chunks"): its header signature is the seed its chunks' signatures chain from.
    #[test]
    fn a_streaming_request_hands_back_its_seed_signature() {
        let (_, creds) = aws_example();
        let seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
        let mut h = streaming_headers(&[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ]);
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
             x-amz-decoded-content-length;x-amz-storage-class,Signature={seed}"
        );
        h.insert("authorization", auth.parse().unwrap());
        let request = SignedRequest {
            method: &Method::PUT,
            raw_path: "/examplebucket/chunkObject.txt",
            raw_query: "",
            headers: &h,
        };
        let t = parse_amz_date("20130524T000000Z").unwrap();
        let signing = verify(&request, &creds, "us-east-1", at(t)).unwrap();
        assert_eq!(signing.seed_signature, seed);
        assert_eq!(signing.scope, "20130524/us-east-1/s3/aws4_request");
        let PayloadHash::Streaming(streaming) =
            PayloadHash::from_headers(&h, Some(signing)).unwrap()
        else {
            panic!("not streaming")
        };
        assert!(streaming.signed && streaming.trailer.is_none());
        assert_eq!(streaming.decoded_length, 66560);
        assert!(streaming.signing.is_some());
    }
}
