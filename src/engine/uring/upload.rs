//! The checkpoint writer's and reader's requests, without the I/O: each request's method,
//! path and query ([`Request`]), its head formatted (and SigV4-signed with
//! `x-amz-content-sha256: UNSIGNED-PAYLOAD`: hashing 32 MiB parts would cost about half a
//! CPU-second per GiB), the XML S3 answers and asks for, and how an object is cut into parts
//! and blocks.

use std::io::Write;
use std::ops::Range;
use std::time::SystemTime;

use crate::plan::RangedGet;
use crate::s3::sign::{Payload, Signer};
use crate::s3::xml::{self, XmlWriter};

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
        };
        Request {
            kind,
            method,
            key: key.to_string(),
            path_query,
            body_bytes,
            inline_body: Vec::new(),
            get: RangedGet {
                whole: false,
                fetch: None,
                object: None,
                key: key.to_string(),
                offset: 0,
                len_bytes: 0,
                check: None,
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
        };
        let operation = client.operation(name, Some(&self.key));
        match self.kind {
            Kind::Part { number, .. } => format!("{operation} (part {number} of {parts})"),
            Kind::Range => format!("{operation} ({})", self.get.range_header()),
            _ => operation,
        }
    }

    /// Formats (and signs, when `signer` has keys) the head into `out`, followed by the
    /// inline body. `url_prefix` is `scheme://host` for signing.
    pub fn format(
        &self,
        out: &mut Vec<u8>,
        host: &str,
        url_prefix: &str,
        signer: &Signer,
    ) -> Result<(), String> {
        let range = (self.kind == Kind::Range).then(|| self.get.range_header());
        let length = self.body_bytes + self.inline_body.len();
        let signed = if signer.signs() {
            let url = format!("{url_prefix}{}", self.path_query);
            let mut to_sign = vec![("host", host)];
            if let Some(range) = &range {
                to_sign.push(("range", range.as_str()));
            }
            signer.headers(
                self.method,
                &url,
                &to_sign,
                Payload::Unsigned,
                SystemTime::now(),
            )?
        } else {
            Vec::new()
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
        for (name, value) in signed {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.inline_body);
        Ok(())
    }
}

/// The `UploadId` of a CreateMultipartUpload answer.
pub fn upload_id(document: &[u8]) -> Option<String> {
    let mut id = None;
    let _ = xml::walk(document, |path, text| {
        if path.last().map(String::as_str) == Some("UploadId") {
            id = Some(text);
        }
        Ok(())
    });
    id.filter(|id| !id.is_empty())
}

/// CompleteMultipartUpload's body: the parts' ETags, in part order.
pub fn complete_xml(etags: &[String]) -> Vec<u8> {
    let mut xml = XmlWriter::document();
    xml.open("CompleteMultipartUpload");
    for (i, etag) in etags.iter().enumerate() {
        xml.open("Part");
        xml.element("PartNumber", i + 1);
        xml.element("ETag", etag);
        xml.close("Part");
    }
    xml.close("CompleteMultipartUpload");
    xml.finish().into_bytes()
}

/// Part `number`'s (from 1) bytes of an object of `bytes` in parts of `part_bytes`.
pub fn part(bytes: u64, part_bytes: u64, number: u32) -> Range<u64> {
    let start = u64::from(number - 1) * part_bytes;
    start..(start + part_bytes).min(bytes)
}

/// How many parts an object of `bytes` has (at least one).
pub fn parts(bytes: u64, part_bytes: u64) -> u32 {
    bytes.div_ceil(part_bytes).max(1) as u32
}

/// The `blocks` contiguous blocks a restore reads in parallel: equal but the last, whole
/// pages (none empty but where the object has fewer pages than blocks).
pub fn blocks(bytes: u64, blocks: usize) -> Vec<Range<u64>> {
    let size = bytes
        .div_ceil(blocks.max(1) as u64)
        .next_multiple_of(4096)
        .max(4096);
    (0..blocks as u64)
        .map(|b| (b * size).min(bytes)..((b + 1) * size).min(bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_blocks_cover_the_object_once() {
        let mib = 1 << 20;
        assert_eq!(parts(0, 5 * mib), 1);
        assert_eq!(parts(5 * mib, 5 * mib), 1);
        assert_eq!(parts(5 * mib + 1, 5 * mib), 2);
        assert_eq!(part(17 * mib, 5 * mib, 4), 15 * mib..17 * mib);
        for (bytes, n) in [(0, 2), (100, 4), (10 * mib + 3, 3), (1 << 30, 16)] {
            let b = blocks(bytes, n);
            assert_eq!(b.len(), n);
            assert_eq!(b[0].start, 0);
            assert_eq!(b[n - 1].end, bytes);
            for w in b.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
    }

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
        r.kind = Kind::Complete;
        r.body_bytes = 0;
        r.inline_body = complete_xml(&["\"e1\"".into()]);
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
        assert_eq!(upload_id(answer).as_deref(), Some("abc-1"));
        assert_eq!(upload_id(b"<Error><Code>x</Code></Error>"), None);
    }
}
