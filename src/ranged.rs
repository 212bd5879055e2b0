//! One GET as an engine sends it ([`RangedGet`]): the object's key, the byte range or the whole
//! object, and what goes with it — `--verify`'s check, s3dlio's way of fetching it under the
//! dlio loader. The plan makes them ([`crate::plan::Plan::ranged`]); the engines send them.

use crate::dataset::check::ObjectRef;
use crate::extents::Extents;
use crate::loader::ObjectFetch;
use crate::verify::Check;

/// One ranged GET as it goes on the wire: the object's key and the byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangedGet {
    pub key: String,
    pub offset: u64,
    pub len_bytes: u64,
    /// What `--verify` checks the landed bytes against (`None` without it).
    pub check: Option<Check>,
    /// A whole-object GET, as DLIO reads npz, jpeg and TFRecord objects: no `Range` header,
    /// answered `200 OK` with exactly `len_bytes` (the object's size; `offset` is 0).
    pub whole: bool,
    /// With the dlio loader on whole objects: fetched as s3dlio fetches it (a HEAD, ranged
    /// chunks) rather than one GET.
    pub fetch: Option<ObjectFetch>,
    /// Under `--verify`, the whole object the body must be, byte for byte (`None` otherwise).
    pub object: Option<ObjectRef>,
    /// A column subset read chunk by chunk: the ranges the GET's requests fetch, one after
    /// the other, landing packed in its buffer (`len_bytes` is their sum, `offset` the first's).
    pub extents: Option<Extents>,
}

/// One request of a GET sent as several (a column subset's chunks, s3dlio's ranged chunks of
/// an object): the bytes it asks for, and where they land in the GET's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub len_bytes: u64,
    /// Offset in the GET's buffer.
    pub at: u64,
}

impl Piece {
    /// The piece as a ranged GET of `key` (checked as its range).
    pub fn as_get(&self, key: &str) -> RangedGet {
        RangedGet {
            key: key.to_string(),
            offset: self.offset,
            len_bytes: self.len_bytes,
            check: None,
            whole: false,
            fetch: None,
            object: None,
            extents: None,
        }
    }
}

impl RangedGet {
    /// A column subset's GET: its chunks' requests in order, each with its place in the
    /// buffer (`None` for a GET sent as one request).
    pub fn pieces(&self) -> Option<Vec<Piece>> {
        let extents = self.extents.as_ref()?;
        Some(
            extents
                .placed()
                .map(|(e, at)| Piece {
                    offset: e.offset,
                    len_bytes: e.len_bytes,
                    at,
                })
                .collect(),
        )
    }

    /// What the GET asks for, in messages: `bytes=a-b`, or `whole object, N bytes`.
    pub fn describe(&self) -> String {
        if let Some(extents) = &self.extents {
            let (first, last) = (extents.as_slice().first(), extents.as_slice().last());
            return format!(
                "{} column-chunk ranges of {} bytes in bytes={}-{}",
                extents.len(),
                extents.bytes(),
                first.map_or(0, |e| e.offset),
                last.map_or(0, |e| e.end().saturating_sub(1))
            );
        }
        if self.whole {
            format!("whole object, {} bytes", self.len_bytes)
        } else {
            self.range_header()
        }
    }

    /// The requests this GET sends, as the store sees them: one GET of the whole object, one
    /// ranged GET, or (fetched as s3dlio fetches it) a HEAD and a GET or its ranged chunks.
    pub fn requests(&self) -> crate::metrics::RequestKinds {
        let mut kinds = crate::metrics::RequestKinds::default();
        match self.fetch {
            Some(rules) => {
                kinds.head = u64::from(rules.head);
                if rules.splits(self.len_bytes) {
                    kinds.ranged_get = rules.ranges(self.len_bytes);
                } else {
                    kinds.get = 1;
                }
            }
            None if self.whole => kinds.get = 1,
            None if self.extents.is_some() => {
                kinds.ranged_get = self.extents.as_ref().map_or(1, |e| e.len() as u64);
            }
            None => kinds.ranged_get = 1,
        }
        kinds
    }

    /// The inclusive last byte, as `Range: bytes=offset-last` states it.
    pub fn last_byte(&self) -> u64 {
        self.offset + self.len_bytes - 1
    }

    /// The `Range` header value: `bytes=first-last`.
    pub fn range_header(&self) -> String {
        format!("bytes={}-{}", self.offset, self.last_byte())
    }
}
