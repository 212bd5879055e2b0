//! The buffer pool of one rank: one anonymous mapping cut into buffers, each the size of the
//! rank's largest GET — or, with size classes, a second class of smaller buffers for whole
//! objects of spread sizes (`budget::SmallBuffers`) — handed out by index.
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

/// Buffers in classes (`(count, bytes)` each), in one locked mapping: class 0's buffers first,
/// then class 1's.
#[derive(Debug)]
pub struct BufferPool {
    base: NonNull<u8>,
    /// The mapping's length.
    len: usize,
    /// `classes[c]`: the size of class `c`'s buffers.
    classes: Vec<usize>,
    /// `class_of[i]`: buffer `i`'s class.
    class_of: Vec<u8>,
    /// `offsets[i]`: buffer `i`'s start in the mapping.
    offsets: Vec<usize>,
    /// `free[c]`: class `c`'s buffers not handed out.
    free: Vec<Vec<BufIndex>>,
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
        BufferPool::with_classes(&[(count, buffer_bytes)])
    }

    /// [`BufferPool::new`] with buffers in classes: `(count, bytes)` for class 0, 1, …; a
    /// class may have no buffers, the pool must have some.
    pub fn with_classes(classes: &[(usize, usize)]) -> io::Result<BufferPool> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let count: usize = classes.iter().map(|&(n, _)| n).sum();
        if count == 0 || count > MAX_BUFFERS {
            return Err(invalid(format!(
                "{count} buffers: a ring registers 1 to {MAX_BUFFERS}"
            )));
        }
        for &(_, buffer_bytes) in classes {
            if buffer_bytes == 0
                || buffer_bytes > MAX_BUFFER_BYTES
                || !buffer_bytes.is_multiple_of(4096)
            {
                return Err(invalid(format!(
                    "buffers of {buffer_bytes} bytes: a registered buffer is whole pages, at most \
                     1 GiB (lower --coalesce-rgs)"
                )));
            }
        }
        let mut offsets = Vec::with_capacity(count);
        let mut class_of = Vec::with_capacity(count);
        let mut len = 0usize;
        for (class, &(n, buffer_bytes)) in classes.iter().enumerate() {
            for _ in 0..n {
                offsets.push(len);
                class_of.push(class as u8);
                len = len
                    .checked_add(buffer_bytes)
                    .ok_or_else(|| invalid("the pool's size overflows".into()))?;
            }
        }
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
            len,
            classes: classes.iter().map(|&(_, bytes)| bytes).collect(),
            // Handed out from the end: each class's lowest-numbered buffer first.
            free: (0..classes.len())
                .map(|c| {
                    (0..count as u16)
                        .rev()
                        .filter(|&i| usize::from(class_of[usize::from(i)]) == c)
                        .map(BufIndex)
                        .collect()
                })
                .collect(),
            class_of,
            offsets,
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

    /// The size of buffer `index`.
    pub fn buffer_len(&self, index: BufIndex) -> usize {
        self.classes[usize::from(self.class_of[usize::from(index.0)])]
    }

    pub fn count(&self) -> usize {
        self.offsets.len()
    }

    /// The size of the largest class's buffers (the largest GET they hold).
    pub fn largest_buffer(&self) -> usize {
        self.classes.iter().copied().max().unwrap_or(0)
    }

    /// Buffers not handed out.
    pub fn free_count(&self) -> usize {
        self.free.iter().map(Vec::len).sum()
    }

    /// A free buffer of class 0, or `None` when all are out (which the window makes
    /// impossible).
    pub fn take(&mut self) -> Option<BufIndex> {
        self.take_class(0)
    }

    /// A free buffer of class `class`, or `None` when all are out (or it has none).
    pub fn take_class(&mut self, class: usize) -> Option<BufIndex> {
        self.free.get_mut(class)?.pop()
    }

    /// Returns a buffer. Giving back one that is free already is a bug, caught here.
    pub fn give(&mut self, index: BufIndex) {
        let i = usize::from(index.0);
        assert!(
            i < self.count() && !self.free.iter().any(|f| f.contains(&index)),
            "buffer {} given back twice or out of range (a bug)",
            index.0
        );
        self.free[usize::from(self.class_of[i])].push(index);
    }

    /// The start of buffer `index`. The kernel writes through it; Rust code only reads it
    /// through [`BufferPool::bytes`] once the write is complete (`Ring::filled` checks that).
    pub fn ptr(&self, index: BufIndex) -> *mut u8 {
        assert!(
            usize::from(index.0) < self.count(),
            "buffer {} out of range",
            index.0
        );
        // SAFETY: `index < count`, so the offset is inside the mapping.
        unsafe { self.base.as_ptr().add(self.offsets[usize::from(index.0)]) }
    }

    /// The first `len` bytes of buffer `index`, to read what the kernel wrote.
    ///
    /// # Safety
    ///
    /// No write into buffer `index` may be in flight, nor start while the slice lives: the
    /// kernel writes through registered buffers behind Rust's back. Use `Ring::filled`, which
    /// knows which buffers its reads fill.
    pub unsafe fn bytes(&self, index: BufIndex, len: usize) -> &[u8] {
        assert!(len <= self.buffer_len(index));
        // SAFETY: inside the mapping (asserted); the mapping lives as long as `self`; no write
        // into the buffer is in flight (the caller's obligation above).
        unsafe { std::slice::from_raw_parts(self.ptr(index), len) }
    }

    /// One iovec per buffer, in index order, for `register_buffers`.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count() as u16)
            .map(|i| libc::iovec {
                iov_base: self.ptr(BufIndex(i)).cast(),
                iov_len: self.buffer_len(BufIndex(i)),
            })
            .collect()
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // SAFETY: the mapping is this pool's; the ring that registered it unregisters it first
        // (see `Ring`'s `Drop`), or leaks the pool if operations are still in flight.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
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
    fn classes_hand_out_their_own_buffers_back_to_back_in_one_mapping() {
        let mut pool = BufferPool::with_classes(&[(2, 8192), (3, 4096)]).unwrap();
        assert_eq!(pool.count(), 5);
        let large = pool.take_class(0).unwrap();
        let small = pool.take_class(1).unwrap();
        assert_eq!(
            (pool.buffer_len(large), pool.buffer_len(small)),
            (8192, 4096)
        );
        // Class 0 first, then class 1, each buffer right after the one before.
        assert_eq!(
            pool.ptr(small) as usize - pool.ptr(large) as usize,
            2 * 8192
        );
        assert_eq!(pool.take_class(0).map(|b| b.0), Some(1));
        assert_eq!(pool.take_class(0), None);
        assert_eq!(pool.take_class(2), None);
        pool.give(small);
        assert_eq!(
            pool.take_class(1),
            Some(small),
            "a buffer goes back to its class"
        );
        let iov = pool.iovecs();
        assert_eq!(
            iov.iter().map(|v| v.iov_len).sum::<usize>(),
            2 * 8192 + 3 * 4096
        );
        assert!(BufferPool::with_classes(&[(0, 8192), (0, 4096)]).is_err());
        assert!(BufferPool::with_classes(&[(1, 8192), (1, 4095)]).is_err());
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
