//! Where an object fetched as the DLIO fork's s3dlio loader fetches it is, on the io_uring
//! engine (`s3dlio.rs` drives it): its ranges, the next to start, the requests in flight.

use std::time::{Duration, Instant};

use super::conn::Part;
use crate::loader::ObjectFetch;

/// Where one object's fetch is: kept per buffer (an object in flight holds one).
#[derive(Debug, Clone, Copy)]
pub struct ObjectState {
    pub reader: usize,
    pub get: usize,
    pub size: u64,
    pub rules: ObjectFetch,
    /// Ranges (1 when the object is not split) and the next to start.
    pub ranges: u64,
    pub next: u64,
    /// Requests of the object in flight (its HEAD or ranges).
    pub outstanding: u32,
    pub retries: u32,
    pub started: Instant,
    pub first_byte: Option<Duration>,
    /// A request failed past its retries: the object failed; nothing more starts.
    pub failed: bool,
}

impl ObjectState {
    /// Range `i`: `(offset, len)`.
    pub fn range(&self, i: u64) -> Part {
        if !self.rules.splits(self.size) {
            return Part {
                offset: 0,
                len: self.size,
                head: false,
                whole: true,
            };
        }
        let chunk = self.rules.chunk_bytes_for(self.size).max(1);
        let offset = i * chunk;
        Part {
            offset,
            len: chunk.min(self.size - offset),
            head: false,
            whole: false,
        }
    }
}
