//! Bytes after a body, as hyper's client meets them: each pooled connection's socket is
//! wrapped in [`Watched`], which follows the HTTP/1.1 framing of what it carries (one request
//! at a time, as hyper's client sends them) and notices bytes where none may be: after a
//! response's Content-Length with no request outstanding, or where a response head should start
//! and something else does. hyper drops such a connection on its own (it reads the bytes as an
//! unexpected message) and takes a fresh one for the next request; this makes the drop
//! counted and named, with the GET whose body the bytes followed, as the io_uring engine names
//! it.
//!
//! A connection whose framing the watcher cannot follow (a chunked or close-delimited answer, a
//! head over 64 KiB) is not watched further.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::stream::Stream;

/// The longest response head followed.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// Connections dropped for bytes after a body, over all of a client's connections.
#[derive(Debug, Default)]
pub struct StrayLog {
    seen: AtomicU64,
    taken: AtomicU64,
    /// The request whose response the latest stray bytes followed.
    latest: Mutex<Option<String>>,
    /// `s3://bucket` when requests address the bucket virtual-hosted (their paths lack it).
    virtual_bucket: Option<String>,
}

impl StrayLog {
    /// A log for requests to `virtual_bucket` virtual-hosted, or path-style (`None`).
    pub fn new(virtual_bucket: Option<&str>) -> StrayLog {
        StrayLog {
            virtual_bucket: virtual_bucket.map(|b| format!("s3://{b}")),
            ..StrayLog::default()
        }
    }

    fn record(&self, after: String) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(after);
        self.seen.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections dropped since the last call, with the request the latest one followed.
    pub fn take_new(&self) -> Option<(u64, String)> {
        let seen = self.seen.load(Ordering::Relaxed);
        let taken = self.taken.swap(seen, Ordering::Relaxed);
        let new = seen.saturating_sub(taken);
        if new == 0 {
            return None;
        }
        let after = self
            .latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        Some((new, after))
    }
}

/// Where a connection is in its responses.
#[derive(Debug)]
enum Phase {
    /// No request outstanding: nothing may arrive.
    Idle,
    /// A request was sent: its response head, as far as it came.
    Head(Vec<u8>),
    /// This many body bytes are still due.
    Body(u64),
    /// Framing this watcher does not follow, or the connection already broke.
    Unwatched,
}

/// A connection's socket, watched for bytes after a body.
#[derive(Debug)]
pub struct Watched {
    inner: Stream,
    log: Arc<StrayLog>,
    phase: Phase,
    /// The request outstanding (or last answered), in words: `GET /bucket/key (bytes=a-b)`.
    request: String,
    head_request: bool,
}

impl Watched {
    pub fn new(inner: Stream, log: Arc<StrayLog>) -> Watched {
        Watched {
            inner,
            log,
            phase: Phase::Idle,
            request: String::new(),
            head_request: false,
        }
    }

    fn sent(&mut self, bytes: &[u8]) {
        if matches!(self.phase, Phase::Idle) && !bytes.is_empty() {
            self.request = describe_request(bytes, self.log.virtual_bucket.as_deref());
            self.head_request = bytes.starts_with(b"HEAD ");
            self.phase = Phase::Head(Vec::new());
        }
    }

    fn stray(&mut self) {
        self.log.record(self.request.clone());
        self.phase = Phase::Unwatched;
    }

    fn received(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.phase {
                Phase::Unwatched => return,
                Phase::Idle => return self.stray(),
                Phase::Body(due) => {
                    let n = (*due).min(bytes.len() as u64);
                    *due -= n;
                    bytes = &bytes[n as usize..];
                    if *due == 0 {
                        self.phase = Phase::Idle;
                    }
                }
                Phase::Head(head) => {
                    // Only the head's own bytes are kept: up to its blank line, which may
                    // straddle the previous read.
                    let end = head_end(head, bytes);
                    let taken = end.unwrap_or(bytes.len());
                    head.extend_from_slice(&bytes[..taken]);
                    let prefix = head.len().min(5);
                    if head[..prefix] != b"HTTP/"[..prefix] {
                        return self.stray();
                    }
                    if end.is_none() {
                        if head.len() > MAX_HEAD_BYTES {
                            self.phase = Phase::Unwatched;
                        }
                        return;
                    }
                    let next = after_head(head, self.head_request);
                    bytes = &bytes[taken..];
                    self.phase = match next {
                        After::Body(0) => Phase::Idle,
                        After::Body(n) => Phase::Body(n),
                        After::Head => Phase::Head(Vec::new()),
                        After::Unknown => Phase::Unwatched,
                    };
                }
            }
        }
    }
}

/// What follows a response head.
enum After {
    /// This many body bytes (a Content-Length, or none at all).
    Body(u64),
    /// Another head: this one was `1xx`.
    Head,
    /// A body framed otherwise (chunked, close-delimited), or a head that does not parse.
    Unknown,
}

/// Where, in `bytes` (read after `head`), the head's blank line ends: the count of `bytes`
/// that belong to the head, or `None` when all do and it goes on.
fn head_end(head: &[u8], bytes: &[u8]) -> Option<usize> {
    let tail = &head[head.len().saturating_sub(3)..];
    let mut edge = tail.to_vec();
    edge.extend_from_slice(&bytes[..bytes.len().min(3)]);
    edge.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4 - tail.len())
        .or_else(|| {
            bytes
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|p| p + 4)
        })
}

/// What a response head (to a HEAD request when `head_request`) says follows it.
fn after_head(head: &[u8], head_request: bool) -> After {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let (Ok(httparse::Status::Complete(_)), Some(status)) = (response.parse(head), response.code)
    else {
        return After::Unknown;
    };
    if (100..200).contains(&status) {
        return After::Head;
    }
    if head_request || status == 204 || status == 304 {
        return After::Body(0);
    }
    let mut length = None;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return After::Unknown;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        }
    }
    length.map_or(After::Unknown, After::Body)
}

/// `GET s3://bucket/key (bytes=a-b)` from a request's first bytes (`bucket`, `s3://bucket`,
/// when virtual-hosted): named as the uring engine names its GETs.
fn describe_request(bytes: &[u8], bucket: Option<&str>) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(' ');
    let method = words.next().unwrap_or_default();
    let target = words.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let range = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("range")
            .then(|| value.trim().to_string())
    });
    match range {
        Some(range) => format!("{method} {}{path} ({range})", bucket.unwrap_or("s3:/")),
        None => format!("{method} {}{path}", bucket.unwrap_or("s3:/")),
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            // Looked at where hyper read them: a body's bytes are only counted, never copied.
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                this.received(new);
            }
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            this.sent(&buf[..n]);
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result
            && let Some(first) = bufs.iter().find(|b| !b.is_empty())
        {
            let n = n.min(first.len());
            self.sent(&first[..n]);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connection for Watched {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched() -> (Watched, Arc<StrayLog>) {
        // A socket is needed only to build one; these tests feed bytes by hand.
        let log = Arc::new(StrayLog::default());
        let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std.local_addr().unwrap();
        let stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_nonblocking(true).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        (Watched::new(Stream::Plain(stream), log.clone()), log)
    }

    const GET: &[u8] = b"GET /b/k?x=1 HTTP/1.1\r\nhost: h\r\nrange: bytes=0-4\r\n\r\n";
    const ANSWER: &[u8] = b"HTTP/1.1 206 Partial Content\r\ncontent-length: 5\r\n\r\nhello";

    #[test]
    fn whole_responses_in_any_pieces_are_not_stray() {
        let (mut w, log) = watched();
        for _ in 0..3 {
            w.sent(GET);
            for piece in ANSWER.chunks(7) {
                w.received(piece);
            }
        }
        assert_eq!(log.take_new(), None);
        assert!(matches!(w.phase, Phase::Idle));
    }

    #[test]
    fn bytes_after_a_body_are_named_with_the_get_they_followed() {
        let (mut w, log) = watched();
        w.sent(GET);
        w.received(&[ANSWER, b"JUNK"].concat());
        assert_eq!(log.take_new(), Some((1, "GET s3://b/k (bytes=0-4)".into())));
        assert_eq!(log.take_new(), None);
        // Bytes where the next head should start, after a new request.
        let (mut w, log) = watched();
        w.sent(GET);
        w.received(ANSWER);
        w.sent(GET);
        w.received(b"JUNKHTTP/1.1 200 OK\r\n");
        assert_eq!(log.take_new().map(|(n, _)| n), Some(1));
    }

    #[test]
    fn framing_it_cannot_follow_is_left_alone() {
        let (mut w, log) = watched();
        w.sent(GET);
        w.received(
            b"HTTP/1.1 503 Slow Down\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        );
        w.received(b"anything");
        assert_eq!(log.take_new(), None);
        let (mut w, log) = watched();
        w.sent(b"HEAD /b/k HTTP/1.1\r\n\r\n");
        w.received(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n");
        assert!(matches!(w.phase, Phase::Idle));
        assert_eq!(log.take_new(), None);
    }
}
