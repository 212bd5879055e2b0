//! Where a container's segments meet a read: the arithmetic npz and TFRecord share.

use std::ops::Range;

/// Where a segment (object bytes `at..at + len`) meets a read (`offset..offset + out_len`):
/// the offset into the segment and the range of the read's buffer.
pub(super) fn overlap(
    at: u64,
    len: u64,
    offset: u64,
    out_len: usize,
) -> Option<(u64, Range<usize>)> {
    let start = at.max(offset);
    let end = (at + len).min(offset + out_len as u64);
    (start < end).then(|| {
        (
            start - at,
            (start - offset) as usize..(end - offset) as usize,
        )
    })
}

/// Copies the part of `src` (object bytes from `at`) that falls in `out` (from `offset`).
pub(super) fn copy(at: u64, src: &[u8], offset: u64, out: &mut [u8]) {
    if let Some((from, range)) = overlap(at, src.len() as u64, offset, out.len()) {
        let from = from as usize;
        let n = range.len();
        out[range].copy_from_slice(&src[from..from + n]);
    }
}
