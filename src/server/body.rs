//! Response bodies: a short list of shared `Bytes` slices (an mmap'd file range, template
//! slices of a virtual file, or an XML document), handed to hyper one frame each, so the bytes
//! are written to the socket from where they already are. Bytes are counted as hyper takes them.
//!
//! A throttled server (`serve --throttle-mib-per-s`) paces each body instead: frames of at most
//! [`PACED_FRAME_BYTES`], each handed over no earlier than the rate allows since the body's
//! first byte — a slow store, on loopback. A server-wide limit (`serve --bandwidth-mib-per-s`,
//! [`super::bandwidth`]) paces every body's frames against one bucket shared by all of them.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::bandwidth::Bandwidth;
use super::trailing::Trailing;

/// The largest frame of a paced body.
pub const PACED_FRAME_BYTES: usize = 64 << 10;
/// The largest frame of a generated body: memory per response in flight.
pub const GENERATED_FRAME_BYTES: usize = 1 << 20;

/// Makes `len` bytes of a body from `offset` on (a sink object's content).
pub type MakeBytes = Arc<dyn Fn(u64, usize) -> Bytes + Send + Sync>;

/// Bytes of a body made a frame at a time, as hyper takes them: offsets `next..end`.
struct Generated {
    next: u64,
    end: u64,
    make: MakeBytes,
}

impl std::fmt::Debug for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Generated({}..{})", self.next, self.end)
    }
}

impl Generated {
    /// The next frame, or `None` at the end.
    fn next_frame(&mut self) -> Option<Bytes> {
        if self.next >= self.end {
            return None;
        }
        let len = (self.end - self.next).min(GENERATED_FRAME_BYTES as u64) as usize;
        let bytes = (self.make)(self.next, len);
        self.next += len as u64;
        Some(bytes)
    }
}

/// A body's pace: `rate_bytes_per_s` from its first frame on.
#[derive(Debug)]
struct Pace {
    rate_bytes_per_s: u64,
    started: Option<tokio::time::Instant>,
    taken_bytes: u64,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A body's share of the server-wide limit: the frame it has reserved (when it may go, its
/// length) and the wait for it.
#[derive(Debug)]
struct SharedPace {
    bandwidth: Arc<Bandwidth>,
    reserved: Option<(tokio::time::Instant, usize)>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How a body ends: whole, or (an injected fault) cut off after some bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ending {
    #[default]
    Whole,
    /// After this many bytes the body fails: hyper drops the connection mid-body.
    FailAfter(u64),
    /// After this many bytes nothing more is sent, and the connection stays open.
    StallAfter(u64),
    /// This many bytes before its end the body ends, short of its Content-Length.
    ShortBy(u64),
}

/// A response body of known length.
#[derive(Debug, Default)]
pub struct Body {
    chunks: VecDeque<Bytes>,
    remaining_bytes: u64,
    sent_bytes: Option<Arc<AtomicU64>>,
    pace: Option<Pace>,
    shared: Option<SharedPace>,
    ending: Ending,
    taken_bytes: u64,
    /// Sent with `Transfer-Encoding: chunked` (no length given to hyper).
    chunked: bool,
    /// Bytes to send after the body, armed on the connection with the last frame.
    then: Option<(Arc<Trailing>, Bytes)>,
    /// Bytes made on demand after `chunks`.
    generated: Option<Generated>,
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
            pace: None,
            shared: None,
            ending: Ending::Whole,
            taken_bytes: 0,
            chunked: false,
            then: None,
            generated: None,
        }
    }

    /// A body of bytes `first..=last` made `GENERATED_FRAME_BYTES` at a time by `make` as hyper
    /// takes them, so a large range never sits in memory whole.
    pub fn generated(first: u64, last: u64, make: MakeBytes) -> Body {
        Body {
            remaining_bytes: last + 1 - first,
            generated: Some(Generated {
                next: first,
                end: last + 1,
                make,
            }),
            ..Body::default()
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

    /// Hands the body over no faster than `rate_bytes_per_s` (`None`: as fast as it is taken).
    pub fn paced(mut self, rate_bytes_per_s: Option<u64>) -> Body {
        self.pace = rate_bytes_per_s
            .filter(|&r| r > 0)
            .map(|rate_bytes_per_s| Pace {
                rate_bytes_per_s,
                started: None,
                taken_bytes: 0,
                sleep: None,
            });
        self
    }

    /// Hands the body over in frames of at most [`PACED_FRAME_BYTES`], each when the server-wide
    /// `bandwidth` allows it (at once while it has no limit).
    pub fn shared_pace(mut self, bandwidth: &Arc<Bandwidth>) -> Body {
        if bandwidth.limit().is_some() {
            self.shared = Some(SharedPace {
                bandwidth: bandwidth.clone(),
                reserved: None,
                sleep: None,
            });
        }
        self
    }

    /// Waits until the server-wide limit lets `len` bytes out (reserving them on the first
    /// call); the length reserved, which later calls keep until it is sent.
    fn poll_shared(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<usize> {
        let Some(shared) = &mut self.shared else {
            return Poll::Ready(len);
        };
        let (due, len) = *shared.reserved.get_or_insert_with(|| {
            let len = len.min(PACED_FRAME_BYTES);
            match shared.bandwidth.reserve(len as u64) {
                Some(due) => (due, len),
                None => (tokio::time::Instant::now(), len),
            }
        });
        if due > tokio::time::Instant::now() {
            let sleep = shared
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            sleep.as_mut().reset(due);
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        shared.reserved = None;
        Poll::Ready(len)
    }

    /// Ends the body as `ending` says.
    pub fn ending(mut self, ending: Ending) -> Body {
        self.ending = ending;
        self
    }

    /// Has `bytes` sent after the body, on the same connection, past its Content-Length.
    pub fn then_send(mut self, trailing: Arc<Trailing>, bytes: Bytes) -> Body {
        self.then = Some((trailing, bytes));
        self
    }

    /// Sends the body chunked, without a length.
    pub fn chunked(mut self) -> Body {
        self.chunked = true;
        self
    }

    /// The bytes of the whole body (for small bodies that a fault rewrites).
    pub fn into_bytes(mut self) -> Vec<u8> {
        let mut out: Vec<u8> = self.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        while let Some(frame) = self.generated.as_mut().and_then(Generated::next_frame) {
            out.extend_from_slice(&frame);
        }
        out
    }

    /// Whether no chunk is left, after making the next generated one if there is one.
    fn refill(&mut self) -> bool {
        if self.chunks.is_empty()
            && let Some(frame) = self.generated.as_mut().and_then(Generated::next_frame)
        {
            self.chunks.push_back(frame);
        }
        self.chunks.is_empty()
    }

    /// The most bytes the ending lets out from here, if it limits them.
    fn allowance(&self) -> Option<u64> {
        let total = self.taken_bytes + self.remaining_bytes;
        match self.ending {
            Ending::Whole => None,
            Ending::FailAfter(n) | Ending::StallAfter(n) => {
                Some(n.saturating_sub(self.taken_bytes))
            }
            Ending::ShortBy(n) => Some(total.saturating_sub(n).saturating_sub(self.taken_bytes)),
        }
    }

    /// Waits until the pace allows the next frame; its size.
    fn poll_pace(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        let Some(pace) = &mut self.pace else {
            return Poll::Ready(usize::MAX);
        };
        let now = tokio::time::Instant::now();
        let started = *pace.started.get_or_insert(now);
        let due = started
            + Duration::from_secs_f64(pace.taken_bytes as f64 / pace.rate_bytes_per_s as f64);
        if due > now {
            let sleep = pace
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            sleep.as_mut().reset(due);
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        Poll::Ready(PACED_FRAME_BYTES)
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.refill() {
            return Poll::Ready(None);
        }
        let allowed = self.allowance();
        if allowed == Some(0) {
            return match self.ending {
                Ending::FailAfter(n) => Poll::Ready(Some(Err(std::io::Error::other(format!(
                    "injected fault: the connection is cut after {n} body bytes"
                ))))),
                // Never woken: the client's timeout ends it.
                Ending::StallAfter(_) => Poll::Pending,
                Ending::ShortBy(_) | Ending::Whole => Poll::Ready(None),
            };
        }
        let Poll::Ready(most) = self.poll_pace(cx) else {
            return Poll::Pending;
        };
        let most = allowed.map_or(most, |a| most.min(a.min(usize::MAX as u64) as usize));
        let front = self.chunks.front().map_or(0, Bytes::len);
        let Poll::Ready(most) = self.poll_shared(cx, most.min(front)) else {
            return Poll::Pending;
        };
        let Some(mut chunk) = self.chunks.pop_front() else {
            return Poll::Ready(None);
        };
        if chunk.len() > most {
            let rest = chunk.split_off(most);
            self.chunks.push_front(rest);
        }
        if let Some(pace) = &mut self.pace {
            pace.taken_bytes += chunk.len() as u64;
        }
        self.taken_bytes += chunk.len() as u64;
        self.remaining_bytes -= chunk.len() as u64;
        if let Some(counter) = &self.sent_bytes {
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        if self.remaining_bytes == 0
            && let Some((trailing, bytes)) = self.then.take()
        {
            trailing.arm(bytes);
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.generated.as_ref().is_none_or(|g| g.next >= g.end)
    }

    fn size_hint(&self) -> SizeHint {
        if self.chunked {
            return SizeHint::default();
        }
        SizeHint::with_exact(self.remaining_bytes)
    }
}
