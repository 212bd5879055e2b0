//! HTTP/1.1 for ranged GETs, without the I/O: the request head, and reading the response head
//! out of a socket whose body must stay in the socket.
//!
//! The body of a `206` must land in a registered buffer, read there by the kernel, so the head
//! cannot be read with one large receive (that would pull body bytes into the scratch buffer and
//! force a user-space copy). [`HeadReader`] instead *peeks* at what has arrived, parses it with
//! `httparse`, and consumes exactly the head's bytes:
//!
//! 1. peek into `scratch[consumed..]`;
//! 2. complete head → consume its remaining bytes (they are in the socket, so that receive
//!    returns at once) and hand over to the body reads;
//! 3. partial head → consume everything peeked (all of it is head) and peek again, which waits
//!    for more.
//!
//! Every byte is peeked at most twice and consumed once; no body byte is ever consumed here.

use std::io::Write;

use crate::engine::common::{check_partial_content, check_whole_object};
use crate::plan::RangedGet;

/// The most header lines a response may have.
const MAX_HEADERS: usize = 32;

/// Formats a GET request head into `out` (cleared first; its capacity is kept).
pub fn request_head(
    out: &mut Vec<u8>,
    method: &str,
    path: &str,
    host: &str,
    range: &RangedGet,
    signed: &[(&str, String)],
) {
    out.clear();
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    if !range.whole {
        let _ = write!(
            out,
            "Range: bytes={}-{}\r\n",
            range.offset,
            range.last_byte()
        );
    }
    for (name, value) in signed {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A parsed response head: what the engine needs from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub content_length: Option<u64>,
    /// The response's own checks against the GET, done at parse time: `Ok` for a `206` whose
    /// `Content-Range` and `Content-Length` match.
    pub partial: Result<(), String>,
    /// `Connection: close`, or HTTP/1.0: the connection ends after this response.
    pub closes: bool,
    /// `Transfer-Encoding: chunked`: the body is framed in chunks, not by a length.
    pub chunked: bool,
    /// The `Retry-After` header, as sent.
    pub retry_after: Option<String>,
    /// The `ETag` header, as sent (an UploadPart's answer).
    pub etag: Option<String>,
    /// The object's checksum a HEAD with `x-amz-checksum-mode: ENABLED` returns.
    pub checksum: Option<crate::checksum::StoredChecksum>,
    /// The head's length in bytes, up to and including the blank line.
    pub len: usize,
}

/// What to do after a peek.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadStep {
    /// The head is not complete: consume `n` bytes (all peeked, all head) and peek again.
    Consume(usize),
    /// The head is complete: consume `n` more bytes (the rest of the head), then read the body.
    Complete { head: ResponseHead, consume: usize },
}

/// Why a response head cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the connection closed before a response head ({0} bytes of it arrived)")]
    Closed(usize),
    #[error("the response head is longer than {0} bytes")]
    TooLong(usize),
    #[error("the response head is not HTTP/1.1: {0}")]
    Malformed(String),
}

/// Reads one response head through peeks into a scratch buffer.
#[derive(Debug, Clone, Default)]
pub struct HeadReader {
    /// Head bytes received (consumed from the socket) so far; they sit at `scratch[..consumed]`.
    consumed: usize,
}

impl HeadReader {
    pub fn new() -> HeadReader {
        HeadReader::default()
    }

    /// Where the next peek writes: `scratch[at..]`.
    pub fn peek_at(&self) -> usize {
        self.consumed
    }

    /// Takes the result of a peek of `n` bytes into `scratch[peek_at()..]`.
    pub fn on_peek(
        &mut self,
        scratch: &[u8],
        n: usize,
        get: &RangedGet,
    ) -> Result<HeadStep, HeadError> {
        if n == 0 {
            return Err(HeadError::Closed(self.consumed));
        }
        let seen = self.consumed + n;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&scratch[..seen]) {
            Ok(httparse::Status::Complete(len)) => {
                let head = head_of(&response, len, get);
                Ok(HeadStep::Complete {
                    head,
                    consume: len - self.consumed,
                })
            }
            Ok(httparse::Status::Partial) => {
                if seen >= scratch.len() {
                    return Err(HeadError::TooLong(scratch.len()));
                }
                Ok(HeadStep::Consume(n))
            }
            Err(e) => Err(HeadError::Malformed(e.to_string())),
        }
    }

    /// Takes the result of consuming `n` bytes; with [`HeadStep::Consume`] the next peek
    /// follows them.
    pub fn on_consumed(&mut self, n: usize) {
        self.consumed += n;
    }
}

fn head_of(response: &httparse::Response<'_, '_>, len: usize, get: &RangedGet) -> ResponseHead {
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let status = response.code.unwrap_or(0);
    let partial = if get.whole {
        check_whole_object(status, header("content-length"), get)
    } else if status == 206 {
        check_partial_content(header("content-range"), header("content-length"), get)
    } else if (200..300).contains(&status) {
        Err(format!(
            "answered {status} instead of 206 Partial Content: the server ignores Range"
        ))
    } else {
        Err(format!("answered {status} instead of 206 Partial Content"))
    };
    let closes = response.version == Some(0)
        || header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
    ResponseHead {
        status,
        content_length: header("content-length").and_then(|l| l.trim().parse().ok()),
        partial,
        closes,
        chunked: header("transfer-encoding")
            .is_some_and(|t| t.to_ascii_lowercase().contains("chunked")),
        retry_after: header("retry-after").map(str::to_string),
        etag: header("etag").map(str::to_string),
        // A HEAD's (no range, not a whole object: a control-plane request); never a GET's.
        checksum: (get.len_bytes == 0 && !get.whole)
            .then(|| crate::checksum::StoredChecksum::from_headers(header))
            .flatten(),
        len,
    }
}

/// Decodes a whole chunked body (RFC 9112 §7.1) from `raw`: `Some(body)` once its last chunk
/// and the trailer's end have arrived, `None` while more is needed, `Err` when it is not
/// chunked framing. A chunk size is hex digits only, and one whose end no buffer could reach
/// is an error: the sizes come from the server, so every offset is checked, never wrapped.
pub fn dechunk(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_len) = raw[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&raw[at..at + line_len])
            .map_err(|_| "a chunk size line is not text".to_string())?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        if size_text.is_empty() || !size_text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("'{size_text}' is not a chunk size"));
        }
        at += line_len + 2;
        // The chunk's data and its CRLF end at `data_end + 2`.
        let data_end = usize::from_str_radix(size_text, 16)
            .ok()
            .and_then(|size| at.checked_add(size))
            .filter(|end| end.checked_add(2).is_some())
            .ok_or_else(|| format!("a chunk size of 0x{size_text} bytes is past any buffer"))?;
        if data_end == at {
            // The last chunk: trailer fields, then an empty line.
            let rest = &raw[at..];
            if rest.starts_with(b"\r\n") {
                return Ok(Some(body));
            }
            return Ok(rest.windows(4).position(|w| w == b"\r\n\r\n").map(|_| body));
        }
        let Some(chunk) = raw.get(at..data_end + 2) else {
            return Ok(None);
        };
        let (data, end) = chunk.split_at(chunk.len() - 2);
        if end != b"\r\n" {
            return Err("a chunk does not end with CRLF".into());
        }
        body.extend_from_slice(data);
        at = data_end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get() -> RangedGet {
        RangedGet {
            whole: false,
            fetch: None,
            object: None,
            key: "train/f.parquet".into(),
            offset: 100,
            len_bytes: 10,
            check: None,
            extents: None,
        }
    }

    const HEAD: &str = "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 100-109/1000\r\n\
                        content-length: 10\r\naccept-ranges: bytes\r\n\r\n";

    /// A socket that delivers `stream` in the given pieces: a peek sees everything delivered
    /// and not consumed, as MSG_PEEK does.
    struct Wire<'a> {
        stream: &'a [u8],
        cuts: Vec<usize>,
        delivered: usize,
        consumed: usize,
    }

    impl Wire<'_> {
        fn peek(&mut self, into: &mut [u8]) -> usize {
            if self.delivered == self.consumed {
                // A peek waits for the next piece.
                self.delivered = self
                    .cuts
                    .iter()
                    .copied()
                    .find(|&c| c > self.delivered)
                    .unwrap_or(self.stream.len());
            }
            let n = (self.delivered - self.consumed).min(into.len());
            into[..n].copy_from_slice(&self.stream[self.consumed..self.consumed + n]);
            n
        }
        fn consume(&mut self, into: &mut [u8], n: usize) {
            assert!(
                self.consumed + n <= self.delivered,
                "consumed bytes that had not arrived"
            );
            into[..n].copy_from_slice(&self.stream[self.consumed..self.consumed + n]);
            self.consumed += n;
        }
    }

    /// Drives a HeadReader over the wire; returns the head and how many bytes it consumed.
    fn read_head(
        wire: &mut Wire<'_>,
        scratch_len: usize,
    ) -> Result<(ResponseHead, usize), HeadError> {
        let mut scratch = vec![0u8; scratch_len];
        let mut reader = HeadReader::new();
        for _ in 0..10_000 {
            let at = reader.peek_at();
            let n = wire.peek(&mut scratch[at..]);
            match reader.on_peek(&scratch, n, &get())? {
                HeadStep::Consume(n) => {
                    wire.consume(&mut scratch[at..], n);
                    reader.on_consumed(n);
                }
                HeadStep::Complete { head, consume } => {
                    wire.consume(&mut scratch[at..], consume);
                    reader.on_consumed(consume);
                    return Ok((head, wire.consumed));
                }
            }
        }
        panic!("the head reader did not finish");
    }

    #[test]
    fn every_split_point_reads_the_same_head_and_leaves_the_body() {
        let stream = format!("{HEAD}0123456789");
        let stream = stream.as_bytes();
        // Two pieces, cut at every byte; then the head in one-byte pieces.
        let mut cut_sets: Vec<Vec<usize>> = (1..stream.len()).map(|c| vec![c]).collect();
        cut_sets.push((1..stream.len()).collect());
        for cuts in cut_sets {
            let mut wire = Wire {
                stream,
                cuts: cuts.clone(),
                delivered: 0,
                consumed: 0,
            };
            let (head, consumed) = read_head(&mut wire, 1024).unwrap();
            assert_eq!(consumed, HEAD.len(), "cuts {cuts:?}");
            assert_eq!(head.len, HEAD.len());
            assert_eq!((head.status, head.content_length), (206, Some(10)));
            assert_eq!(head.partial, Ok(()));
            assert!(!head.closes);
            // The body is still in the socket for the fixed-buffer reads.
            assert_eq!(&stream[wire.consumed..], b"0123456789");
        }
    }

    #[test]
    fn bad_answers_are_named() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n",
                "answered 200 instead of 206",
            ),
            (
                "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 100-108/1000\r\ncontent-length: 9\r\n\r\n",
                "Content-Range is 'bytes 100-108/1000'",
            ),
            (
                "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 100-109/1000\r\ncontent-length: 11\r\n\r\n",
                "Content-Length is 11",
            ),
            (
                "HTTP/1.1 206 Partial Content\r\ncontent-length: 10\r\n\r\n",
                "no Content-Range",
            ),
            (
                "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 100-109/1000\r\n\r\n",
                "no Content-Length",
            ),
        ];
        for (head, expected) in cases {
            let mut wire = Wire {
                stream: head.as_bytes(),
                cuts: vec![],
                delivered: 0,
                consumed: 0,
            };
            let (parsed, _) = read_head(&mut wire, 1024).unwrap();
            let err = parsed.partial.unwrap_err();
            assert!(err.contains(expected), "{head:?}: {err}");
        }
        let closes = "HTTP/1.1 503 Slow Down\r\nConnection: close\r\ncontent-length: 0\r\n\r\n";
        let mut wire = Wire {
            stream: closes.as_bytes(),
            cuts: vec![],
            delivered: 0,
            consumed: 0,
        };
        let (parsed, _) = read_head(&mut wire, 1024).unwrap();
        assert_eq!(
            (parsed.status, parsed.closes, parsed.content_length),
            (503, true, Some(0))
        );
    }

    #[test]
    fn a_closed_connection_a_long_head_and_garbage_are_errors() {
        let mut wire = Wire {
            stream: &HEAD.as_bytes()[..20],
            cuts: vec![],
            delivered: 0,
            consumed: 0,
        };
        let mut scratch = vec![0u8; 1024];
        let mut reader = HeadReader::new();
        let n = wire.peek(&mut scratch);
        let HeadStep::Consume(n) = reader.on_peek(&scratch, n, &get()).unwrap() else {
            panic!()
        };
        reader.on_consumed(n);
        assert_eq!(
            reader.on_peek(&scratch, 0, &get()),
            Err(HeadError::Closed(20))
        );

        let mut wire = Wire {
            stream: HEAD.as_bytes(),
            cuts: vec![],
            delivered: 0,
            consumed: 0,
        };
        assert_eq!(
            read_head(&mut wire, 32).unwrap_err(),
            HeadError::TooLong(32)
        );

        let mut wire = Wire {
            stream: b"SSH-2.0-OpenSSH\r\n\r\n",
            cuts: vec![],
            delivered: 0,
            consumed: 0,
        };
        assert!(matches!(
            read_head(&mut wire, 1024),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn the_request_head_names_the_range_and_signs() {
        let mut out = Vec::with_capacity(256);
        let signed = vec![("authorization", "AWS4-HMAC-SHA256 x".to_string())];
        request_head(
            &mut out,
            "GET",
            "/b/train/f.parquet",
            "127.0.0.1:9000",
            &get(),
            &signed,
        );
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "GET /b/train/f.parquet HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nRange: bytes=100-109\r\n\
             authorization: AWS4-HMAC-SHA256 x\r\n\r\n"
        );
        // A whole-object GET: no Range, and its 200 of the object's size is what it expects.
        let whole = RangedGet {
            whole: true,
            fetch: None,
            object: None,
            offset: 0,
            ..get()
        };
        request_head(&mut out, "GET", "/b/train/f.npz", "h", &whole, &[]);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "GET /b/train/f.npz HTTP/1.1\r\nHost: h\r\n\r\n"
        );
        // s3dlio's HEAD before an object's ranges: no Range either.
        request_head(&mut out, "HEAD", "/b/train/f.npz", "h", &whole, &[]);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "HEAD /b/train/f.npz HTTP/1.1\r\nHost: h\r\n\r\n"
        );
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        let head = |get: &RangedGet| match HeadReader::new().on_peek(answer, answer.len(), get) {
            Ok(HeadStep::Complete { head, .. }) => head,
            other => panic!("{other:?}"),
        };
        assert_eq!(head(&whole).partial, Ok(()));
        let ranged = head(&get()).partial.unwrap_err();
        assert!(ranged.contains("ignores Range"), "{ranged}");
    }

    #[test]
    fn chunked_bodies_decode_once_whole() {
        let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
        assert_eq!(dechunk(raw), Ok(Some(b"hello world".to_vec())));
        // Every prefix is incomplete, never an error.
        for cut in 0..raw.len() {
            assert_eq!(dechunk(&raw[..cut]), Ok(None), "cut at {cut}");
        }
        let trailer = b"2\r\nok\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(dechunk(trailer), Ok(Some(b"ok".to_vec())));
        assert!(dechunk(b"zz\r\nhello\r\n").is_err());
        assert!(dechunk(b"2\r\nokX\r\n0\r\n\r\n").is_err());
    }

    /// Chunk sizes at the edges: 0, the largest a `usize` holds and one less, one past it, and
    /// sizes past what has arrived. A size whose end cannot be addressed is an error, never an
    /// overflow (a hostile server's chunked error reply panicked the rank before).
    #[test]
    fn chunk_sizes_at_the_edges_are_errors_or_wait_never_overflow() {
        let max = format!("{:x}", usize::MAX);
        let max_less_one = format!("{:x}", usize::MAX - 1);
        let past_max = format!("1{max}");
        for size in [&max, &max_less_one, &past_max] {
            let raw = format!("{size}\r\nhello\r\n0\r\n\r\n");
            let err = dechunk(raw.as_bytes()).unwrap_err();
            assert!(err.contains(size.as_str()), "{size}: {err}");
            // After a first chunk too, where the offset is not zero.
            let raw = format!("2\r\nok\r\n{size}\r\nhello\r\n");
            assert!(dechunk(raw.as_bytes()).is_err(), "{size}");
        }
        // Sizes past the bytes that arrived: more is needed, not an error.
        for size in ["6", "ff", "ffffffff"] {
            let raw = format!("{size}\r\nhello");
            assert_eq!(dechunk(raw.as_bytes()), Ok(None), "{size}");
        }
        assert_eq!(dechunk(b"0\r\n\r\n"), Ok(Some(Vec::new())));
        // Only hex digits: no sign, no blank size.
        for size in ["+5", "-5", "", " "] {
            let raw = format!("{size}\r\nhello\r\n0\r\n\r\n");
            assert!(dechunk(raw.as_bytes()).is_err(), "{size:?}");
        }
    }
}
