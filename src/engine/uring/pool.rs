//! The buffer pool of one rank: one anonymous mapping cut into equal buffers, each the size of
//! the rank's largest GET, handed out by index.
//!
//! Everything happens before the clock starts: the mapping is advised to use transparent huge
//! pages (fewer page-table entries to walk and pin), pre-faulted (first touch costs the kernel
//! 2–3 s per GiB of 4 KiB pages; it must not land inside a measured step), and locked, so the
//! pages the kernel writes bodies into never move or get swapped. The ring then registers every
//! buffer once ([`BufferPool::iovecs`]); `ReadFixed` names a buffer by its index.
//!
//! The pool has exactly `readers × prefetch` buffers. A reader never holds more than `prefetch`
//! GETs (issued and not yet released), so [`BufferPool::take`] cannot run dry; it returns `None`
//! rather than panicking, and the engine reports that as a bug.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::ptr::NonNull;

use rustix::mm::{Advice, MapFlags, ProtFlags};

/// A buffer's position in the pool, as registered with the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BufIndex(pub u16);

/// `count` buffers of `buffer_bytes` each, in one locked mapping.
#[derive(Debug)]
pub struct BufferPool {
    base: NonNull<u8>,
    buffer_bytes: usize,
    count: usize,
    free: Vec<BufIndex>,
}

// SAFETY: the pool owns its mapping outright; nothing else holds the pointer except the ring
// that registers it, which lives in the same rank thread. Moving the pool between threads
// moves that ownership.
unsafe impl Send for BufferPool {}

/// The most buffers a ring can register (`IORING_MAX_REG_BUFFERS`).
pub const MAX_BUFFERS: usize = 1 << 14;
/// The largest buffer a ring can register (`SZ_1G` in io_uring/rsrc.c).
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

impl BufferPool {
    /// Maps, advises, pre-faults and locks `count` buffers of `buffer_bytes` (a multiple of the
    /// page size). Fails with the step that failed.
    pub fn new(count: usize, buffer_bytes: usize) -> io::Result<BufferPool> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        if count == 0 || count > MAX_BUFFERS {
            return Err(invalid(format!(
                "{count} buffers: a ring registers 1 to {MAX_BUFFERS}"
            )));
        }
        if buffer_bytes == 0
            || buffer_bytes > MAX_BUFFER_BYTES
            || !buffer_bytes.is_multiple_of(4096)
        {
            return Err(invalid(format!(
                "buffers of {buffer_bytes} bytes: a registered buffer is whole pages, at most 1 GiB \
                 (lower --coalesce-rgs)"
            )));
        }
        let len = count
            .checked_mul(buffer_bytes)
            .ok_or_else(|| invalid("the pool's size overflows".into()))?;
        // SAFETY: a fresh private anonymous mapping aliases nothing; the pointer is checked for
        // null and owned by the pool until `Drop` unmaps it.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| io::Error::new(e.kind(), format!("mmap of {len} bytes: {e}")))?;
        let base = NonNull::new(base.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        let pool = BufferPool {
            base,
            buffer_bytes,
            count,
            // Handed out from the end: buffer 0 first.
            free: (0..count as u16).rev().map(BufIndex).collect(),
        };
        let region = pool.base.as_ptr().cast::<c_void>();
        // SAFETY (all three): `region..region + len` is exactly the mapping this pool owns, and
        // no Rust reference into it exists yet. Huge pages are a hint: without THP the pool
        // works on 4 KiB pages.
        let _ = unsafe { rustix::mm::madvise(region, len, Advice::LinuxHugepage) };
        // MADV_POPULATE_WRITE (Linux 5.14) faults every page in; else touch each page.
        let populated =
            unsafe { rustix::mm::madvise(region, len, Advice::LinuxPopulateWrite) }.is_ok();
        if !populated {
            for page in (0..len).step_by(4096) {
                // SAFETY: `page < len`, inside the mapping; a volatile write so it is not elided.
                unsafe { pool.base.as_ptr().add(page).write_volatile(0) };
            }
        }
        unsafe { rustix::mm::mlock(region, len) }.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mlock of the {len}-byte buffer pool: {e} (raise RLIMIT_MEMLOCK with \
                     `ulimit -l unlimited`, or grant CAP_IPC_LOCK)"
                ),
            )
        })?;
        Ok(pool)
    }

    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Buffers not handed out.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// A free buffer, or `None` when all are out (which the window makes impossible).
    pub fn take(&mut self) -> Option<BufIndex> {
        self.free.pop()
    }

    /// Returns a buffer. Giving back one that is free already is a bug, caught here.
    pub fn give(&mut self, index: BufIndex) {
        assert!(
            usize::from(index.0) < self.count && !self.free.contains(&index),
            "buffer {} given back twice or out of range (a bug)",
            index.0
        );
        self.free.push(index);
    }

    /// The start of buffer `index`. The kernel writes through it; Rust code only reads it
    /// through [`BufferPool::bytes`] once the write is complete (`Ring::filled` checks that).
    pub fn ptr(&self, index: BufIndex) -> *mut u8 {
        assert!(
            usize::from(index.0) < self.count,
            "buffer {} out of range",
            index.0
        );
        // SAFETY: `index < count`, so the offset is inside the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(usize::from(index.0) * self.buffer_bytes)
        }
    }

    /// The first `len` bytes of buffer `index`, to read what the kernel wrote.
    ///
    /// # Safety
    ///
    /// No write into buffer `index` may be in flight, nor start while the slice lives: the
    /// kernel writes through registered buffers behind Rust's back. Use `Ring::filled`, which
    /// knows which buffers its reads fill.
    pub unsafe fn bytes(&self, index: BufIndex, len: usize) -> &[u8] {
        assert!(len <= self.buffer_bytes);
        // SAFETY: inside the mapping (asserted); the mapping lives as long as `self`; no write
        // into the buffer is in flight (the caller's obligation above).
        unsafe { std::slice::from_raw_parts(self.ptr(index), len) }
    }

    /// One iovec per buffer, in index order, for `register_buffers`.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count as u16)
            .map(|i| libc::iovec {
                iov_base: self.ptr(BufIndex(i)).cast(),
                iov_len: self.buffer_bytes,
            })
            .collect()
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // SAFETY: the mapping is this pool's; the ring that registered it unregisters it first
        // (see `Ring`'s `Drop`), or leaks the pool if operations are still in flight.
        let _ = unsafe {
            rustix::mm::munmap(self.base.as_ptr().cast(), self.count * self.buffer_bytes)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_handed_out_once_and_come_back() {
        let mut pool = BufferPool::new(3, 8192).unwrap();
        assert_eq!(pool.count(), 3);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        let c = pool.take().unwrap();
        assert_eq!((a, b, c), (BufIndex(0), BufIndex(1), BufIndex(2)));
        assert_eq!(pool.take(), None);
        assert_eq!(pool.ptr(b) as usize - pool.ptr(a) as usize, 8192);
        pool.give(b);
        assert_eq!(pool.free_count(), 1);
        assert_eq!(pool.take(), Some(b));
        // Pre-faulted and zeroed.
        // SAFETY: no ring exists, so nothing writes into the pool.
        assert!(unsafe { pool.bytes(c, 8192) }.iter().all(|&x| x == 0));
        assert_eq!(pool.iovecs().len(), 3);
    }

    #[test]
    #[should_panic(expected = "given back twice")]
    fn a_buffer_given_back_twice_is_caught() {
        let mut pool = BufferPool::new(2, 4096).unwrap();
        let a = pool.take().unwrap();
        pool.give(a);
        pool.give(a);
    }

    #[test]
    fn sizes_a_ring_cannot_register_are_refused() {
        assert!(BufferPool::new(0, 4096).is_err());
        assert!(BufferPool::new(1, 4095).is_err());
        let e = BufferPool::new(1, MAX_BUFFER_BYTES + 4096).unwrap_err();
        assert!(e.to_string().contains("--coalesce-rgs"), "{e}");
    }
}
