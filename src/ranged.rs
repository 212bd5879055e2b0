//! One GET as an engine sends it ([`RangedGet`]): the object's key, the byte range or the whole
//! object, and what goes with it — `--verify`'s check, s3dlio's way of fetching it under the
//! dlio loader. The plan makes them ([`crate::plan::Plan::ranged`]); the engines send them.

use crate::dataset::check::ObjectRef;
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
}

impl RangedGet {
    /// What the GET asks for, in messages: `bytes=a-b`, or `whole object, N bytes`.
    pub fn describe(&self) -> String {
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
