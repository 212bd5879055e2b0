//! Column-projected reads: the byte extents of the column chunks a workload reads, and how a
//! GET over some row groups turns them into requests ([`ColumnGets`]).
//!
//! A workload that reads a subset of its columns (DLRM: 40 of 200, `read: true`) has the
//! selected chunks' extents in its catalog, per file, in offset order
//! ([`in_order`]). A GET over row groups `a..b` then sends, in order:
//!
//! - [`ColumnGets::Chunk`] (the default): one ranged GET per selected column chunk, as
//!   pyarrow's `ParquetFile.read_row_group(i, columns=…)` reads through a plain file object
//!   without pre-buffering (pyarrow ≤ 25's default; the DLIO fork's pyarrow Parquet readers);
//! - [`ColumnGets::Coalesced`]: those chunks merged as pyarrow ≥ 26's pre-buffering merges them
//!   (`CacheOptions` defaults: a hole of at most [`HOLE_SIZE_LIMIT`] bytes is read through, a
//!   merged range grows to at most [`RANGE_SIZE_LIMIT`]);
//! - [`ColumnGets::Span`]: one ranged GET from the first selected chunk to the end of the last
//!   (the DLIO fork's S3 iterable and s3dlio readers), the columns between them included.
//!
//! The bytes of a GET land packed, extent after extent, in its one buffer.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// pyarrow's `CacheOptions.hole_size_limit` default: a gap this small is read through.
pub const HOLE_SIZE_LIMIT: u64 = 8192;
/// pyarrow's `CacheOptions.range_size_limit` default: a merged range grows no larger.
pub const RANGE_SIZE_LIMIT: u64 = 32 << 20;

/// One byte range of a file that a request fetches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub offset: u64,
    pub len_bytes: u64,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.offset + self.len_bytes
    }
}

/// How a GET of a column subset is sent (`storage.storage_options.column_gets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnGets {
    /// One ranged GET per selected column chunk.
    #[default]
    Chunk,
    /// Selected chunks merged as pyarrow's pre-buffering merges them.
    Coalesced,
    /// One ranged GET from the first selected chunk to the end of the last.
    Span,
}

impl ColumnGets {
    /// Every form, with its name in the workload key.
    pub const ALL: [(ColumnGets, &'static str); 3] = [
        (ColumnGets::Chunk, "chunk"),
        (ColumnGets::Coalesced, "coalesced"),
        (ColumnGets::Span, "span"),
    ];

    pub fn parse(name: &str) -> Option<ColumnGets> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(g, _)| *g)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(g, _)| *g == self)
            .map_or("chunk", |(_, n)| n)
    }

    /// What a GET of this form sends, in words for the plan.
    pub fn describe(self) -> &'static str {
        match self {
            ColumnGets::Chunk => {
                "one ranged GET per column chunk read (pyarrow's read_row_group without pre-buffering)"
            }
            ColumnGets::Coalesced => {
                "column chunks read merged across holes of at most 8 KiB, up to 32 MiB a GET (pyarrow's pre-buffering)"
            }
            ColumnGets::Span => {
                "one ranged GET from the first column chunk read to the end of the last"
            }
        }
    }
}

/// The extents of one GET: a run of a shared list (a file's selected chunks), or a list of its
/// own (merged ranges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extents {
    list: Arc<[Extent]>,
    range: Range<usize>,
}

impl Extents {
    pub fn as_slice(&self) -> &[Extent] {
        &self.list[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Bytes the extents hold: what lands in the GET's buffer.
    pub fn bytes(&self) -> u64 {
        self.as_slice().iter().map(|e| e.len_bytes).sum()
    }

    /// Each extent with its place in the GET's buffer: `(extent, buffer offset)`.
    pub fn placed(&self) -> impl Iterator<Item = (Extent, u64)> + '_ {
        self.as_slice().iter().scan(0u64, |at, e| {
            let placed = (*e, *at);
            *at += e.len_bytes;
            Some(placed)
        })
    }
}

/// The requests of a GET over file bytes `from..to` of a file whose selected chunks are
/// `selected` (in offset order), as `gets` sends them; `None` for [`ColumnGets::Span`].
pub fn requests(selected: &Arc<[Extent]>, from: u64, to: u64, gets: ColumnGets) -> Option<Extents> {
    let first = selected.partition_point(|e| e.offset < from);
    let last = first + selected[first..].partition_point(|e| e.end() <= to);
    match gets {
        ColumnGets::Span => None,
        ColumnGets::Chunk => Some(Extents {
            list: Arc::clone(selected),
            range: first..last,
        }),
        ColumnGets::Coalesced => {
            let merged = coalesce(&selected[first..last], HOLE_SIZE_LIMIT, RANGE_SIZE_LIMIT);
            let n = merged.len();
            Some(Extents {
                list: merged.into(),
                range: 0..n,
            })
        }
    }
}

/// Merges `extents` (in offset order) as Arrow's `ReadRangeCache` coalesces ranges: the next
/// extent joins the current range when the hole before it is at most `hole` bytes and the
/// merged range stays within `limit` bytes.
pub fn coalesce(extents: &[Extent], hole: u64, limit: u64) -> Vec<Extent> {
    let mut merged: Vec<Extent> = Vec::with_capacity(extents.len());
    for e in extents {
        match merged.last_mut() {
            Some(last)
                if e.offset.saturating_sub(last.end()) <= hole
                    && e.end() - last.offset <= limit =>
            {
                last.len_bytes = e.end().max(last.end()) - last.offset;
            }
            _ => merged.push(*e),
        }
    }
    merged
}

/// `extents` (a file's selected column chunks) in offset order, as the catalog keeps them;
/// two that overlap, or an empty one, are a corrupt footer.
pub fn in_order(mut extents: Vec<Extent>) -> Result<Arc<[Extent]>, String> {
    if let Some(e) = extents.iter().find(|e| e.len_bytes == 0) {
        return Err(format!(
            "a column chunk at byte {} is 0 bytes long",
            e.offset
        ));
    }
    extents.sort_by_key(|e| e.offset);
    if extents.windows(2).any(|w| w[0].end() > w[1].offset) {
        return Err("two column chunks overlap".into());
    }
    Ok(extents.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(offset: u64, len_bytes: u64) -> Extent {
        Extent { offset, len_bytes }
    }

    #[test]
    fn holes_up_to_the_limit_are_read_through_and_ranges_stop_at_the_size_limit() {
        // Adjacent, an 8,192-byte hole (bridged), an 8,193-byte hole (not).
        let list = [e(100, 50), e(150, 50), e(200 + 8192, 10), e(8402 + 8193, 5)];
        assert_eq!(
            coalesce(&list, HOLE_SIZE_LIMIT, RANGE_SIZE_LIMIT),
            vec![e(100, 8402 - 100), e(8402 + 8193, 5)]
        );
        // A range that would pass the limit starts a new one.
        assert_eq!(
            coalesce(&[e(0, 60), e(60, 60)], 0, 100),
            vec![e(0, 60), e(60, 60)]
        );
    }

    #[test]
    fn a_get_takes_the_chunks_inside_its_bytes_packed_in_order() {
        let selected: Arc<[Extent]> = vec![e(4, 10), e(20, 10), e(40, 10), e(60, 10)].into();
        let chunk = requests(&selected, 20, 50, ColumnGets::Chunk).unwrap();
        assert_eq!(chunk.as_slice(), &[e(20, 10), e(40, 10)]);
        assert_eq!(chunk.bytes(), 20);
        let placed: Vec<(Extent, u64)> = chunk.placed().collect();
        assert_eq!(placed, vec![(e(20, 10), 0), (e(40, 10), 10)]);
        let merged = requests(&selected, 0, 100, ColumnGets::Coalesced).unwrap();
        assert_eq!(merged.as_slice(), &[e(4, 66)]);
        assert!(requests(&selected, 0, 100, ColumnGets::Span).is_none());
    }

    #[test]
    fn names_round_trip() {
        for (gets, name) in ColumnGets::ALL {
            assert_eq!(ColumnGets::parse(name), Some(gets));
            assert_eq!(gets.name(), name);
        }
        assert_eq!(ColumnGets::parse("rowgroup"), None);
    }
}
