//! A request body of a few `Bytes` sent one after another: an aws-chunked body's chunk header,
//! its data and its tail go as three frames, so the data is never copied to be framed (the
//! baseline's parts are 32 MiB); any other body is one frame.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// The frames of one request body, in order.
#[derive(Debug, Clone, Default)]
pub struct RequestBody {
    frames: VecDeque<Bytes>,
    len: u64,
}

impl RequestBody {
    /// `parts` sent one after another (empty ones left out).
    pub fn of(parts: impl IntoIterator<Item = Bytes>) -> RequestBody {
        let frames: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        let len = frames.iter().map(|b| b.len() as u64).sum();
        RequestBody { frames, len }
    }

    /// The body's bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> RequestBody {
        RequestBody::of([bytes])
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.frames.pop_front().map(|data| {
            this.len -= data.len() as u64;
            Ok(Frame::data(data))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn frames_go_in_order_and_the_size_is_exact() {
        let body = RequestBody::of([
            Bytes::from_static(b"5\r\n"),
            Bytes::new(),
            Bytes::from_static(b"hello"),
            Bytes::from_static(b"\r\n0\r\n\r\n"),
        ]);
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(15));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let collected = runtime.block_on(body.collect()).unwrap().to_bytes();
        assert_eq!(&collected[..], b"5\r\nhello\r\n0\r\n\r\n");
        assert!(RequestBody::from(Bytes::new()).is_empty());
    }
}
