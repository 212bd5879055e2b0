//! SigV4 request signing with the `aws-sigv4` crate (no SDK), and S3's path-style addressing.
//!
//! Signing is a pure function of the method, the URL, the headers that will be sent and the
//! payload's hash; it returns the headers to add (`authorization`, `x-amz-date`,
//! `x-amz-content-sha256`, `x-amz-security-token`). Both engines and the control-plane client
//! use it, so every request ringload sends is signed the same way. S3's settings: the path is
//! encoded once and not normalized, and `x-amz-content-sha256` is always sent.

use std::time::SystemTime;

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;

use super::sigv4::uri_encode;
use super::target::{Credentials, Endpoint};

/// The SigV4 service name of S3.
const SERVICE: &str = "s3";

/// What `x-amz-content-sha256` says about the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// `UNSIGNED-PAYLOAD`: the body is not hashed (GETs, and uploads by default).
    Unsigned,
    /// The body's bytes, hashed into the signature.
    Bytes(&'a [u8]),
    /// The body's SHA-256, lowercase hex, computed beforehand (as the part was generated).
    Sha256(&'a str),
    /// An `aws-chunked` body's streaming form (`STREAMING-…`, `super::chunked`): its chunks
    /// carry their own signatures, chained from the head's ([`Signer::signed_with_chain`]).
    Streaming(&'static str),
}

/// Signs requests for one set of credentials and region; without credentials, requests go
/// unsigned.
#[derive(Debug, Clone)]
pub struct Signer {
    credentials: Option<Credentials>,
    region: String,
}

impl Signer {
    pub fn new(credentials: Option<Credentials>, region: &str) -> Signer {
        Signer {
            credentials,
            region: region.to_string(),
        }
    }

    /// Whether requests are signed.
    pub fn signs(&self) -> bool {
        self.credentials.is_some()
    }

    /// The headers that sign a request. `url` is the full URL as sent (path and query already
    /// encoded); `headers` are the other headers that will be sent, `host` among them.
    pub fn headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload: Payload<'_>,
        time: SystemTime,
    ) -> Result<Vec<(&'static str, String)>, String> {
        Ok(self
            .signed_with_chain(method, url, headers, payload, time)?
            .0)
    }

    /// [`Signer::headers`], and the chain an `aws-chunked` body's chunk signatures follow
    /// (`None` without keys, or for a payload that is not `Streaming`): the head's signature
    /// seeds it.
    #[allow(clippy::type_complexity)]
    pub fn signed_with_chain(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload: Payload<'_>,
        time: SystemTime,
    ) -> Result<
        (
            Vec<(&'static str, String)>,
            Option<super::sigv4::ChunkSigning>,
        ),
        String,
    > {
        let Some(credentials) = &self.credentials else {
            return Ok((Vec::new(), None));
        };
        let identity = aws_credential_types::Credentials::new(
            credentials.access_key_id.clone(),
            credentials.secret_access_key.clone(),
            credentials.session_token.clone(),
            None,
            "ringload",
        )
        .into();
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| format!("cannot sign: {e}"))?
            .into();
        let streaming = matches!(payload, Payload::Streaming(_));
        let body = match payload {
            Payload::Unsigned => SignableBody::UnsignedPayload,
            Payload::Bytes(b) => SignableBody::Bytes(b),
            Payload::Sha256(hex) => SignableBody::Precomputed(hex.to_string()),
            Payload::Streaming(form) => SignableBody::Precomputed(form.to_string()),
        };
        let request = SignableRequest::new(method, url, headers.iter().copied(), body)
            .map_err(|e| format!("cannot sign {method} {url}: {e}"))?;
        let (instructions, seed) = sign(request, &params)
            .map_err(|e| format!("cannot sign {method} {url}: {e}"))?
            .into_parts();
        let (signed, _params) = instructions.into_parts();
        let signed: Vec<_> = signed
            .into_iter()
            .map(|h| (h.name(), h.value().to_string()))
            .collect();
        if !streaming {
            // Only an aws-chunked body's chunks chain from the head's signature.
            return Ok((signed, None));
        }
        let amz_date = signed
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("x-amz-date"))
            .map(|(_, value)| value.clone())
            .ok_or_else(|| format!("signing {method} {url} gave no x-amz-date (a bug)"))?;
        let date = amz_date.get(..8).unwrap_or_default().to_string();
        let key =
            super::sigv4::signing_key(&credentials.secret_access_key, &date, &self.region, SERVICE);
        let chain = super::sigv4::ChunkSigning {
            key,
            amz_date,
            scope: format!("{date}/{}/{SERVICE}/aws4_request", self.region),
            seed_signature: seed,
        };
        Ok((signed, Some(chain)))
    }
}

/// The path of an object, path-style: `/bucket/key` with the key URI-encoded (slashes kept).
pub fn object_path(bucket: &str, key: &str) -> String {
    format!("/{bucket}/{}", uri_encode(key, true))
}

/// A query string from `name=value` pairs, each URI-encoded as SigV4 canonicalizes it, so the
/// string sent is the string signed. Sorted by name, as SigV4 requires.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    encoded.sort();
    encoded
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The full URL of a request: endpoint, path, and `?query` if any.
pub fn url(endpoint: &Endpoint, path: &str, query: &str) -> String {
    if query.is_empty() {
        format!("{}{path}", endpoint.url)
    } else {
        format!("{}{path}?{query}", endpoint.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::sigv4::{SignedRequest, verify};

    /// The chain `s3::chunked` signs an aws-chunked body with, from a head signed here, makes
    /// the signatures the AWS SDK's own signer makes (aws-sigv4's `sign_chunk` and
    /// `sign_trailer`), and its seed is the head's signature.
    #[test]
    fn chunk_and_trailer_signatures_are_the_sdk_signers() {
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: secret.into(),
            session_token: None,
        };
        let now = SystemTime::now();
        let (headers, chain) = Signer::new(Some(creds), "eu-west-3")
            .signed_with_chain(
                "PUT",
                "http://h:9000/b/k",
                &[("host", "h:9000"), ("x-amz-decoded-content-length", "9")],
                Payload::Streaming(crate::s3::chunked::STREAMING_SIGNED_TRAILER),
                now,
            )
            .unwrap();
        let chain = chain.unwrap();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert!(header("authorization").ends_with(&format!("Signature={}", chain.seed_signature)));
        assert_eq!(
            header("x-amz-content-sha256"),
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
        );
        let identity =
            aws_credential_types::Credentials::new("AKIDEXAMPLE", secret, None, None, "test")
                .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("eu-west-3")
            .name("s3")
            .time(now)
            .settings(())
            .build()
            .unwrap();
        let data = bytes::Bytes::from_static(b"some data");
        let sha: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&data).into();
        let ours = chain.chunk(&chain.seed_signature, &sha);
        let sdk = v4::sign_chunk(&data, &chain.seed_signature, &params).unwrap();
        assert_eq!(ours, sdk.signature());
        let mut trailer = aws_smithy_runtime_api::http::Headers::new();
        trailer.insert("x-amz-checksum-crc32c", "AAAAAA==");
        let sdk = v4::sign_trailer(&trailer, &ours, &params).unwrap();
        assert_eq!(
            chain.trailer(&ours, b"x-amz-checksum-crc32c:AAAAAA==\n"),
            sdk.signature()
        );
    }

    /// A request signed here verifies with the server's independent SigV4 implementation, and
    /// fails with another secret.
    #[test]
    fn signatures_verify_with_the_servers_checker() {
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let signer = Signer::new(Some(creds), "us-east-1");
        let endpoint = Endpoint::parse("http://127.0.0.1:9000").unwrap();
        let path = object_path("bucket", "data/train file+1.parquet");
        let q = query(&[("prefix", "data/train/"), ("list-type", "2")]);
        assert_eq!(q, "list-type=2&prefix=data%2Ftrain%2F");
        let full = url(&endpoint, &path, &q);
        let now = SystemTime::now();
        let added = signer
            .headers(
                "GET",
                &full,
                &[("host", "127.0.0.1:9000"), ("range", "bytes=0-9")],
                Payload::Unsigned,
                now,
            )
            .unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert("host", "127.0.0.1:9000".parse().unwrap());
        headers.insert("range", "bytes=0-9".parse().unwrap());
        for (name, value) in &added {
            headers.insert(*name, value.parse().unwrap());
        }
        assert_eq!(headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
        let server = |secret: &str| crate::server::sigv4::Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: secret.into(),
        };
        let request = SignedRequest {
            method: &http::Method::GET,
            raw_path: &path,
            raw_query: &q,
            headers: &headers,
        };
        let good = verify(
            &request,
            &server("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            "us-east-1",
            now,
        );
        assert_eq!(good.map(|_| ()).map_err(|e| e.code), Ok(()));
        assert!(verify(&request, &server("other"), "us-east-1", now).is_err());
        // Signed for us-east-1, checked by a server in another region: S3's answer.
        let other_region = verify(
            &request,
            &server("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            "eu-west-3",
            now,
        )
        .unwrap_err();
        assert_eq!(other_region.code, "AuthorizationHeaderMalformed");
        assert!(
            other_region
                .message
                .contains("the region 'us-east-1' is wrong; expecting 'eu-west-3'"),
            "{}",
            other_region.message
        );

        let unsigned = Signer::new(None, "us-east-1");
        assert!(
            unsigned
                .signed_with_chain("PUT", &full, &[], Payload::Unsigned, now)
                .unwrap()
                .1
                .is_none()
        );
        assert!(!unsigned.signs());
        assert!(
            unsigned
                .headers("GET", &full, &[], Payload::Unsigned, now)
                .unwrap()
                .is_empty()
        );
    }
}
