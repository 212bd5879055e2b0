//! Where a GET sent as several requests is, on the io_uring engine (`s3dlio.rs` drives it):
//! an object fetched as the DLIO fork's s3dlio loader fetches it, or a column subset's row
//! groups read chunk by chunk ([`crate::extents`]): its requests, the next to start, the ones
//! in flight.

use std::time::{Duration, Instant};

use crate::loader::ObjectFetch;
use crate::plan::RangedGet;

/// How a GET's requests are made.
#[derive(Debug, Clone, Copy)]
pub enum Pieces {
    /// s3dlio's fetch of a whole object: a HEAD first when `head`, then its ranged chunks.
    Object(ObjectFetch),
    /// A column subset: its chunks' ranged GETs, one after the other (`RangedGet::pieces`).
    Extents,
}

/// Where one GET's requests are: kept per buffer (a GET in flight holds one).
#[derive(Debug, Clone, Copy)]
pub struct ObjectState {
    pub reader: usize,
    pub get: usize,
    pub size: u64,
    pub pieces: Pieces,
    /// Requests after any HEAD (1 when an object is not split), and the next to start.
    pub ranges: u64,
    pub next: u64,
    /// Requests of the GET in flight (its HEAD or ranges).
    pub outstanding: u32,
    pub retries: u32,
    pub started: Instant,
    pub first_byte: Option<Duration>,
    /// A request failed past its retries: the GET failed; nothing more starts.
    pub failed: bool,
}

impl ObjectState {
    /// The most requests of the GET in flight at once.
    pub fn limit(&self) -> u32 {
        match self.pieces {
            Pieces::Object(rules) => rules.most_in_flight(self.size),
            Pieces::Extents => 1,
        }
    }

    /// Request `i` of the GET `get` (the window's).
    pub fn range(&self, i: u64, get: &RangedGet) -> Part {
        let rules = match self.pieces {
            Pieces::Object(rules) => rules,
            Pieces::Extents => {
                let placed = get
                    .extents
                    .as_ref()
                    .and_then(|e| e.placed().nth(i as usize));
                let (extent, at) = placed.unwrap_or_default();
                return Part {
                    offset: extent.offset,
                    len: extent.len_bytes,
                    at,
                    head: false,
                    whole: false,
                };
            }
        };
        if !rules.splits(self.size) {
            return Part {
                offset: 0,
                len: self.size,
                at: 0,
                head: false,
                whole: true,
            };
        }
        let chunk = rules.chunk_bytes_for(self.size).max(1);
        let offset = i * chunk;
        Part {
            offset,
            len: chunk.min(self.size - offset),
            at: offset,
            head: false,
            whole: false,
        }
    }
}

/// One request of a GET sent as several: of an object fetched as the DLIO fork's s3dlio loader
/// fetches it ([`crate::loader::ObjectFetch`]), its HEAD, a ranged GET of `len` bytes at
/// `offset`, or, for an object not split, its plain GET; of a column subset's row groups, one
/// column chunk's ranged GET. Its body lands at `at` in the GET's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub offset: u64,
    pub len: u64,
    /// Where the body lands in the GET's buffer.
    pub at: u64,
    /// A HEAD: answered `200` with the object's size, no body.
    pub head: bool,
    /// No `Range` (the HEAD, or the whole object).
    pub whole: bool,
}

impl Part {
    /// The request as the connection checks its answer: the range, or the whole object (the
    /// key is not needed there, so none is allocated).
    pub fn as_get(&self) -> RangedGet {
        RangedGet {
            key: String::new(),
            offset: self.offset,
            len_bytes: self.len,
            check: None,
            whole: self.whole,
            fetch: None,
            object: None,
            extents: None,
        }
    }
}
