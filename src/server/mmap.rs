//! File bytes as [`Bytes`] without a copy: the file is mapped read-only and the mapping owned by
//! the `Bytes`, so hyper writes the body from the page cache straight into the socket (one
//! kernel copy, none in user space) and the mapping goes away with the last slice.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use bytes::Bytes;
use memmap2::MmapOptions;

/// Maps `len` bytes of `file` from `offset` (any alignment) as `Bytes`.
pub fn map_range(file: &File, offset: u64, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and private. The directory backend never writes to a
    // file in place: objects are replaced by renaming a new file over the old name, which
    // leaves this inode (and the mapping) intact. A process outside ringload truncating the
    // file while a response is being sent would make the send fault (SIGBUS); serving a
    // directory that others modify in place is documented as unsupported.
    let map = unsafe { MmapOptions::new().offset(offset).len(len).map(file)? };
    // The body is read front to back once.
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Bytes::from_owner(map))
}
