//! The checkpoint writer's and reader's requests on the ring, without the I/O: each request's
//! method, path and query ([`Request`]) and its head formatted (and SigV4-signed with
//! `x-amz-content-sha256: UNSIGNED-PAYLOAD` by default: hashing 32 MiB parts costs about 0.6
//! CPU-second per GiB; the additional checksum, `x-amz-checksum-*`, goes as a header instead,
//! its digest computed when the part is generated; with `--payload-signing sha256`, the
//! body's SHA-256 computed in that pass, [`Request::payload_sha256`]). Which requests a checkpoint sends — its parts, its restore blocks and
//! their ranges, the single-PUT rule — is the plan's (`checkpoint::ObjectIoShape`), the same
//! for both engines; the XML S3 answers and asks for is `s3::xml`'s.

use std::io::Write;
use std::ops::Range;
use std::time::SystemTime;

use crate::plan::RangedGet;
use crate::s3::chunked::Chunked;
use crate::s3::sign::{Payload, Signer};

/// What a connection's request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// CreateMultipartUpload (`POST ?uploads`).
    Create,
    /// UploadPart `number` (from 1): object bytes `offset..offset + len`, sent from the
    /// connection's buffer.
    Part {
        number: u32,
        offset: u64,
        len: usize,
    },
    /// CompleteMultipartUpload (`POST ?uploadId=`), its XML after the head.
    Complete,
    /// One PutObject of `len` bytes from the connection's buffer.
    Put { len: usize },
    /// AbortMultipartUpload (`DELETE ?uploadId=`).
    Abort,
    /// A ranged GET into the connection's buffer.
    Range,
    /// A HEAD of the object (settling a CompleteMultipartUpload whose answer was lost).
    Head,
}

/// One request: what it is, and what goes on the wire.
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: Kind,
    pub method: &'static str,
    /// The object's key (for messages).
    pub key: String,
    /// Path and `?query`, as sent and signed.
    pub path_query: String,
    /// Bytes sent after the head from the connection's registered buffer.
    pub body_bytes: usize,
    /// Bytes sent after the head from the request buffer (CompleteMultipartUpload's XML).
    pub inline_body: Vec<u8>,
    /// Headers sent (and signed) beside the head's own: the checksum's (`x-amz-checksum-*`).
    pub headers: Vec<(&'static str, String)>,
    /// The body's SHA-256 (hex), signed as `x-amz-content-sha256` (`--payload-signing
    /// sha256`); `None`: `UNSIGNED-PAYLOAD`.
    pub payload_sha256: Option<String>,
    /// The body goes `aws-chunked`: its chunk header after the head (from the request
    /// buffer), its data then its tail from the registered buffer ([`Request::format`]
    /// gives the tail; `body_bytes` counts it).
    pub chunked: Option<Chunked>,
    /// What `Conn::on_completion` checks a `206` against (an empty range for the others).
    pub get: RangedGet,
}

impl Request {
    /// `kind` on object `key` (at `path`, as the target formats it), with the query `pairs`.
    pub fn new(kind: Kind, key: &str, path: &str, pairs: &[(&str, &str)]) -> Request {
        let query = crate::s3::sign::query(pairs);
        let path_query = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let (method, body_bytes) = match kind {
            Kind::Create | Kind::Complete => ("POST", 0),
            Kind::Part { len, .. } | Kind::Put { len } => ("PUT", len),
            Kind::Abort => ("DELETE", 0),
            Kind::Range => ("GET", 0),
            Kind::Head => ("HEAD", 0),
        };
        Request {
            kind,
            method,
            key: key.to_string(),
            path_query,
            body_bytes,
            inline_body: Vec::new(),
            headers: Vec::new(),
            payload_sha256: None,
            chunked: None,
            get: RangedGet {
                whole: false,
                fetch: None,
                object: None,
                key: key.to_string(),
                offset: 0,
                len_bytes: 0,
                check: None,
                extents: None,
            },
        }
    }

    /// A ranged GET of `key`'s bytes `range`.
    pub fn range(key: &str, path: &str, range: Range<u64>) -> Request {
        Request {
            get: RangedGet {
                whole: false,
                fetch: None,
                object: None,
                key: key.to_string(),
                offset: range.start,
                len_bytes: range.end - range.start,
                check: None,
                extents: None,
            },
            ..Request::new(Kind::Range, key, path, &[])
        }
    }

    /// The S3 operation, for messages: `UploadPart s3://bucket/key (part 3 of 4)`.
    pub fn operation(&self, client: &crate::s3::Client, parts: u32) -> String {
        let name = match self.kind {
            Kind::Create => "CreateMultipartUpload",
            Kind::Part { .. } => "UploadPart",
            Kind::Complete => "CompleteMultipartUpload",
            Kind::Put { .. } => "PutObject",
            Kind::Abort => "AbortMultipartUpload",
            Kind::Range => "GET",
            Kind::Head => "HEAD",
        };
        let operation = client.operation(name, Some(&self.key));
        match self.kind {
            Kind::Part { number, .. } => format!("{operation} (part {number} of {parts})"),
            Kind::Range => format!("{operation} ({})", self.get.range_header()),
            _ => operation,
        }
    }

    /// Formats (and signs, when `signer` has keys) the head into `out`, followed by the
    /// inline body (an aws-chunked body's chunk header). `url_prefix` is `scheme://host` for
    /// signing. Returns an aws-chunked body's tail, to go after its data (empty otherwise).
    pub fn format(
        &self,
        out: &mut Vec<u8>,
        host: &str,
        url_prefix: &str,
        signer: &Signer,
    ) -> Result<Vec<u8>, String> {
        let range = (self.kind == Kind::Range).then(|| self.get.range_header());
        let chunked_headers = self.chunked.as_ref().map(Chunked::headers);
        let headers: Vec<_> = self
            .headers
            .iter()
            .chain(chunked_headers.iter().flatten())
            .collect();
        let prefix_len = self.chunked.as_ref().map_or(0, Chunked::prefix_len);
        let length = self.body_bytes + self.inline_body.len() + prefix_len;
        let (signed, chain) = if signer.signs() {
            let url = format!("{url_prefix}{}", self.path_query);
            let mut to_sign = vec![("host", host)];
            if let Some(range) = &range {
                to_sign.push(("range", range.as_str()));
            }
            to_sign.extend(headers.iter().map(|(n, v)| (*n, v.as_str())));
            let payload = match (&self.chunked, &self.payload_sha256) {
                (Some(chunked), _) => Payload::Streaming(chunked.content_sha256()),
                (None, Some(hex)) => Payload::Sha256(hex),
                (None, None) => Payload::Unsigned,
            };
            signer.signed_with_chain(self.method, &url, &to_sign, payload, SystemTime::now())?
        } else {
            (Vec::new(), None)
        };
        let (prefix, tail) = match &self.chunked {
            Some(chunked) => chunked.frame(chain.as_ref())?,
            None => Default::default(),
        };
        out.clear();
        // Writing into a Vec cannot fail.
        let _ = write!(
            out,
            "{} {} HTTP/1.1\r\nHost: {host}\r\n",
            self.method, self.path_query
        );
        if let Some(range) = &range {
            let _ = write!(out, "Range: {range}\r\n");
        }
        if self.method == "PUT" || self.method == "POST" {
            let _ = write!(out, "Content-Length: {length}\r\n");
        }
        for (name, value) in headers {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        if let Some(chunked) = self.chunked.as_ref().filter(|_| !signer.signs()) {
            // Unsigned, the form is still named.
            let _ = write!(
                out,
                "x-amz-content-sha256: {}\r\n",
                chunked.content_sha256()
            );
        }
        for (name, value) in signed {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.inline_body);
        out.extend_from_slice(&prefix);
        Ok(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_documents() {
        let mut r = Request::new(
            Kind::Part {
                number: 2,
                offset: 10,
                len: 5,
            },
            "a b",
            "/bkt/a%20b",
            &[("uploadId", "u/1"), ("partNumber", "2")],
        );
        assert_eq!(r.path_query, "/bkt/a%20b?partNumber=2&uploadId=u%2F1");
        let mut out = Vec::new();
        r.format(
            &mut out,
            "h:1",
            "http://h:1",
            &Signer::new(None, "us-east-1"),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "PUT /bkt/a%20b?partNumber=2&uploadId=u%2F1 HTTP/1.1\r\nHost: h:1\r\n\
             Content-Length: 5\r\n\r\n"
        );
        r.headers = vec![("x-amz-checksum-crc32c", "4waSgw==".into())];
        r.format(
            &mut out,
            "h:1",
            "http://h:1",
            &Signer::new(None, "us-east-1"),
        )
        .unwrap();
        assert!(
            String::from_utf8(out.clone())
                .unwrap()
                .ends_with("Content-Length: 5\r\nx-amz-checksum-crc32c: 4waSgw==\r\n\r\n")
        );
        r.headers.clear();
        r.kind = Kind::Complete;
        r.body_bytes = 0;
        r.inline_body = crate::s3::xml::complete_multipart_body(&["\"e1\"".into()]);
        r.format(
            &mut out,
            "h:1",
            "http://h:1",
            &Signer::new(None, "us-east-1"),
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Content-Length: "), "{text}");
        assert!(text.ends_with("</CompleteMultipartUpload>"), "{text}");
        let answer = b"<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>b</Bucket>\
            <Key>k</Key><UploadId>abc-1</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(crate::s3::xml::upload_id(answer).as_deref(), Some("abc-1"));
        assert_eq!(
            crate::s3::xml::upload_id(b"<Error><Code>x</Code></Error>"),
            None
        );
    }
}
