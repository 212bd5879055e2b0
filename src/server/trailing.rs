//! Bytes after a body (the `extra=N` fault): a server that sends more than its Content-Length
//! on a kept-alive connection.
//!
//! hyper writes exactly a response's Content-Length, so the extra bytes go around it: every
//! connection's socket is wrapped in [`TrailingIo`], and a fault arms the connection's
//! [`Trailing`] with the bytes when its body hands hyper its last frame. hyper then writes that
//! frame and flushes; at that flush every byte of the response has gone to the socket, and the
//! wrapper writes the armed bytes after them.
//!
//! The `key-update` fault rides the same flush: armed with no bytes and [`Trailing::update_keys`],
//! the wrapper has the TLS connection update its keys (a TLS 1.3 KeyUpdate asking for the
//! client's, `refresh_traffic_keys`) once the response is with rustls, so the next response
//! goes out under new keys. Over plain HTTP or TLS 1.2 there are no keys to update.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One connection's pending bytes-after-the-body.
#[derive(Debug, Default)]
pub struct Trailing {
    armed: Mutex<Option<Bytes>>,
    /// The flush that takes the armed bytes also updates the connection's TLS keys.
    update_keys: AtomicBool,
}

impl Trailing {
    /// At the flush that takes the next armed bytes, the connection updates its TLS keys.
    pub fn update_keys(&self) {
        self.update_keys.store(true, Ordering::Relaxed);
    }

    /// Sends `bytes` after what hyper has written, at its next flush.
    pub fn arm(&self, bytes: Bytes) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
    }

    fn take(&self) -> Option<Bytes> {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A connection that can update its TLS keys: a no-op for plain TCP and for TLS 1.2.
pub trait UpdateKeys {
    fn update_keys(&mut self) -> io::Result<()>;
}

impl UpdateKeys for tokio::net::TcpStream {
    fn update_keys(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl UpdateKeys for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn update_keys(&mut self) -> io::Result<()> {
        let tls = self.get_mut().1;
        if tls.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
            return Ok(());
        }
        tls.refresh_traffic_keys().map_err(io::Error::other)
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

impl<S: AsyncWrite + UpdateKeys + Unpin> AsyncWrite for TrailingIo<S> {
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
            if this.writing.is_some() && this.trailing.update_keys.swap(false, Ordering::Relaxed) {
                // The response is with rustls (sealed under the old keys); what follows
                // goes under the new.
                this.inner.update_keys()?;
            }
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
