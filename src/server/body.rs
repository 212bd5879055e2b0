//! Response bodies: a short list of shared `Bytes` slices (an mmap'd file range, template
//! slices of a virtual file, or an XML document), handed to hyper one frame each, so the bytes
//! are written to the socket from where they already are. Bytes are counted as hyper takes them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A response body of known length.
#[derive(Debug, Default)]
pub struct Body {
    chunks: VecDeque<Bytes>,
    remaining_bytes: u64,
    sent_bytes: Option<Arc<AtomicU64>>,
}

impl Body {
    pub fn empty() -> Body {
        Body::default()
    }

    pub fn from_chunks(chunks: Vec<Bytes>) -> Body {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        Body {
            remaining_bytes: chunks.iter().map(|c| c.len() as u64).sum(),
            chunks,
            sent_bytes: None,
        }
    }

    pub fn text(text: String) -> Body {
        Body::from_chunks(vec![Bytes::from(text)])
    }

    /// Adds each chunk's length to `counter` when hyper takes it.
    pub fn counted(mut self, counter: Arc<AtomicU64>) -> Body {
        self.sent_bytes = Some(counter);
        self
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(chunk) = self.chunks.pop_front() else {
            return Poll::Ready(None);
        };
        self.remaining_bytes -= chunk.len() as u64;
        if let Some(counter) = &self.sent_bytes {
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining_bytes)
    }
}
