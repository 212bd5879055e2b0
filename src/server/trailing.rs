//! Bytes after a body (the `extra=N` fault): a server that sends more than its Content-Length
//! on a kept-alive connection.
//!
//! hyper writes exactly a response's Content-Length, so the extra bytes go around it: every
//! connection's socket is wrapped in [`TrailingIo`], and a fault arms the connection's
//! [`Trailing`] with the bytes when its body hands hyper its last frame. hyper then writes that
//! frame and flushes; at that flush every byte of the response has gone to the socket, and the
//! wrapper writes the armed bytes after them.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One connection's pending bytes-after-the-body.
#[derive(Debug, Default)]
pub struct Trailing {
    armed: Mutex<Option<Bytes>>,
}

impl Trailing {
    /// Sends `bytes` after what hyper has written, at its next flush.
    pub fn arm(&self, bytes: Bytes) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
    }

    fn take(&self) -> Option<Bytes> {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A connection's socket, writing armed bytes after a response.
#[derive(Debug)]
pub struct TrailingIo<S> {
    inner: S,
    trailing: Arc<Trailing>,
    /// Armed bytes taken, not yet all written.
    writing: Option<Bytes>,
}

impl<S> TrailingIo<S> {
    pub fn new(inner: S, trailing: Arc<Trailing>) -> TrailingIo<S> {
        TrailingIo {
            inner,
            trailing,
            writing: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TrailingIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TrailingIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.writing.is_none() {
            this.writing = this.trailing.take();
        }
        while let Some(bytes) = this.writing.as_mut() {
            if bytes.is_empty() {
                this.writing = None;
                break;
            }
            match Pin::new(&mut this.inner).poll_write(cx, bytes) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => bytes.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
