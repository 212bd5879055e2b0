//! The ring of one rank of the file engine, and the memory its operations point into.
//!
//! Every pointer an SQE carries points into memory this struct owns: the registered
//! [`BufferPool`], the compute timer's timespec, the barrier eventfd's 8-byte counter. Each
//! buffer has at most one operation in flight (asserted), and its bytes can only be touched by
//! Rust code while none is ([`FileRing::filled`] and [`FileRing::buffer_mut`] assert it). Files
//! are registered in a sparse table, one slot per buffer (a read's file goes in its buffer's
//! slot) or per file written; an operation names its file by slot (`IOSQE_FIXED_FILE`), so the
//! kernel takes no file reference per I/O. On drop every operation still in flight is
//! cancelled and reaped before the memory goes, or the memory is leaked rather than freed
//! under the kernel. So the engine above is safe code; this file and `engine/pool.rs` are its
//! only `unsafe`.
//!
//! As the S3 engine's ring: created in the rank's thread with `SINGLE_ISSUER | DEFER_TASKRUN`
//! (completions run in this thread, when it waits, and nowhere else), no SQPOLL.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use io_uring::types::{CancelBuilder, Fd, Fixed, SubmitArgs, Timespec};
use io_uring::{IoUring, opcode};

use crate::engine::pool::{BufIndex, BufferPool};

/// The tag of the compute timer's completion.
pub const COMPUTE_TAG: u64 = u64::MAX - 1;
/// The tag of the barrier eventfd's read.
pub const WAKE_TAG: u64 = u64::MAX - 2;
const CANCEL_TAG: u64 = u64::MAX;
/// How long a dropped ring waits for the kernel to give back cancelled operations.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// One completion: its tag (a buffer index, or one of the tags above) and result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub result: i32,
}

/// A rank's ring, its registered buffers and its registered file slots.
pub struct FileRing {
    ring: ManuallyDrop<IoUring>,
    pool: ManuallyDrop<BufferPool>,
    timespec: ManuallyDrop<Box<Timespec>>,
    wake_counter: ManuallyDrop<Box<u64>>,
    /// `busy[buf]`: an operation into or out of buffer `buf` is in flight.
    busy: Vec<bool>,
    /// Registered file slots.
    slots: u32,
    in_flight: usize,
}

impl std::fmt::Debug for FileRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRing")
            .field("buffers", &self.pool.count())
            .field("slots", &self.slots)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl FileRing {
    /// A ring with `pool` registered and `slots` empty file slots.
    pub fn new(pool: BufferPool, slots: u32) -> io::Result<FileRing> {
        let entries = (pool.count() + 8).next_power_of_two().max(8) as u32;
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .build(entries)?;
        // SAFETY: the pool's buffers stay mapped while the kernel can write into them: the ring
        // owns the pool, and `Drop` unregisters the buffers and closes the ring before it
        // unmaps the pool (and leaks it if operations could not be reaped).
        unsafe { ring.submitter().register_buffers(&pool.iovecs()) }
            .map_err(|e| io::Error::new(e.kind(), format!("registering the buffer pool: {e}")))?;
        ring.submitter()
            .register_files_sparse(slots.max(1))
            .map_err(|e| io::Error::new(e.kind(), format!("registering file slots: {e}")))?;
        let busy = vec![false; pool.count()];
        Ok(FileRing {
            ring: ManuallyDrop::new(ring),
            pool: ManuallyDrop::new(pool),
            timespec: ManuallyDrop::new(Box::new(Timespec::new())),
            wake_counter: ManuallyDrop::new(Box::new(0)),
            busy,
            slots: slots.max(1),
            in_flight: 0,
        })
    }

    /// Puts `file` in slot `slot` (replacing what was there): operations on the slot use it;
    /// the ring keeps its own reference, so the caller may close `file` at once. The caller
    /// keeps the slot free of operations in flight while replacing it.
    pub fn set_file(&mut self, slot: u32, file: &File) -> io::Result<()> {
        assert!(slot < self.slots, "file slot {slot} out of range");
        self.ring
            .submitter()
            .register_files_update(slot, &[file.as_raw_fd()])
            .map(|_| ())
    }

    /// Reads `len` bytes at file offset `offset` of the file in `slot` into buffer `buf` at
    /// `at`; completes with tag `buf`.
    pub fn read(
        &mut self,
        slot: u32,
        buf: BufIndex,
        at: usize,
        len: usize,
        offset: u64,
    ) -> io::Result<()> {
        let ptr = self.span(buf, at, len);
        let entry = opcode::ReadFixed::new(Fixed(slot), ptr, len as u32, buf.0)
            .offset(offset)
            .build();
        self.push_buf(buf, entry)
    }

    /// Writes buffer `buf`'s bytes `at..at + len` at file offset `offset` of the file in
    /// `slot`; completes with tag `buf`.
    pub fn write(
        &mut self,
        slot: u32,
        buf: BufIndex,
        at: usize,
        len: usize,
        offset: u64,
    ) -> io::Result<()> {
        let ptr = self.span(buf, at, len).cast_const();
        let entry = opcode::WriteFixed::new(Fixed(slot), ptr, len as u32, buf.0)
            .offset(offset)
            .build();
        self.push_buf(buf, entry)
    }

    /// Completes with [`COMPUTE_TAG`] after `duration`.
    pub fn timeout(&mut self, duration: Duration) -> io::Result<()> {
        **self.timespec = Timespec::from(duration);
        let entry = opcode::Timeout::new(&**self.timespec as *const Timespec)
            .build()
            .user_data(COMPUTE_TAG);
        self.push(entry)
    }

    /// Reads the eventfd `fd` (completes with [`WAKE_TAG`] when it is written).
    pub fn watch(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let ptr = (&mut **self.wake_counter as *mut u64).cast::<u8>();
        let entry = opcode::Read::new(Fd(fd.as_raw_fd()), ptr, 8)
            .build()
            .user_data(WAKE_TAG);
        self.push(entry)
    }

    pub fn take_buffer_of(&mut self, class: usize) -> Option<BufIndex> {
        self.pool.take_class(class)
    }

    pub fn give_buffer(&mut self, buf: BufIndex) {
        assert!(!self.busy[usize::from(buf.0)], "buffer {} is in use", buf.0);
        self.pool.give(buf);
    }

    pub fn buffer_len(&self, buf: BufIndex) -> usize {
        self.pool.buffer_len(buf)
    }

    /// (buffers, free buffers).
    pub fn buffers(&self) -> (usize, usize) {
        (self.pool.count(), self.pool.free_count())
    }

    /// Buffer `buf`'s bytes `range`, once nothing is in flight into it.
    pub fn filled(&self, buf: BufIndex, range: std::ops::Range<usize>) -> &[u8] {
        assert!(
            !self.busy[usize::from(buf.0)],
            "buffer {} is being read into",
            buf.0
        );
        // SAFETY: no operation into `buf` is in flight (asserted), and none can start while
        // this shared borrow of the ring lives.
        let bytes = unsafe { self.pool.bytes(buf, range.end) };
        &bytes[range.start..]
    }

    /// Buffer `buf`'s bytes, to fill before a write (nothing in flight into or out of it).
    pub fn buffer_mut(&mut self, buf: BufIndex) -> &mut [u8] {
        assert!(!self.busy[usize::from(buf.0)], "buffer {} is in use", buf.0);
        let len = self.pool.buffer_len(buf);
        // SAFETY: inside the pool's mapping; no operation on `buf` is in flight (asserted) and
        // none can start while this exclusive borrow of the ring lives.
        unsafe { std::slice::from_raw_parts_mut(self.pool.ptr(buf), len) }
    }

    /// Moves `len` bytes inside buffer `buf` from `from` to `to` (packing pieces read at
    /// aligned places), nothing in flight.
    pub fn pack(&mut self, buf: BufIndex, from: usize, to: usize, len: usize) {
        self.buffer_mut(buf).copy_within(from..from + len, to);
    }

    fn span(&self, buf: BufIndex, at: usize, len: usize) -> *mut u8 {
        let buffer_bytes = self.pool.buffer_len(buf);
        assert!(len > 0 && at + len <= buffer_bytes && len <= u32::MAX as usize);
        assert!(
            !self.busy[usize::from(buf.0)],
            "buffer {} has an operation in flight",
            buf.0
        );
        // SAFETY: `at + len <= buffer_bytes`, inside buffer `buf` of the registered pool.
        unsafe { self.pool.ptr(buf).add(at) }
    }

    fn push_buf(&mut self, buf: BufIndex, entry: io_uring::squeue::Entry) -> io::Result<()> {
        self.push(entry.user_data(u64::from(buf.0)))?;
        self.busy[usize::from(buf.0)] = true;
        Ok(())
    }

    fn push(&mut self, entry: io_uring::squeue::Entry) -> io::Result<()> {
        // SAFETY: every pointer the entry carries points into memory this ring owns and keeps
        // until the operation completes (see the module docs).
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            self.ring.submit()?;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("the submission queue is full"))?;
        }
        self.in_flight += 1;
        Ok(())
    }

    /// Submits what is queued and waits until a completion is there or `wait` has passed
    /// (`None`: only reap what is ready). Replaces `out` with the completions.
    pub fn wait(&mut self, wait: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        out.clear();
        let result = match wait {
            Some(d) if self.ring.completion().is_empty() => {
                let ts = Timespec::from(d.max(Duration::from_micros(1)));
                let args = SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            _ => self.ring.submitter().submit_and_wait(0),
        };
        match result {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        let mut completion = self.ring.completion();
        completion.sync();
        for cqe in completion {
            let (tag, result) = (cqe.user_data(), cqe.result());
            if tag == CANCEL_TAG {
                continue;
            }
            self.in_flight -= 1;
            if let Some(busy) = self.busy.get_mut(tag as usize) {
                *busy = false;
            }
            out.push(Completion { tag, result });
        }
        Ok(())
    }

    /// Cancels every operation in flight and reaps them; true when none is left.
    fn drain(&mut self) -> bool {
        if self.in_flight == 0 {
            return true;
        }
        let cancel = opcode::AsyncCancel2::new(CancelBuilder::any())
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancellation points at no memory.
        if unsafe { self.ring.submission().push(&cancel) }.is_err() {
            return false;
        }
        let deadline = Instant::now() + DRAIN_LIMIT;
        let mut reaped = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            if self
                .wait(Some(Duration::from_millis(50)), &mut reaped)
                .is_err()
            {
                return false;
            }
        }
        self.in_flight == 0
    }
}

impl Drop for FileRing {
    fn drop(&mut self) {
        let drained = self.drain();
        if drained {
            let _ = self.ring.submitter().unregister_buffers();
        }
        // SAFETY: `self.ring` is not used after this; closing it also unregisters the buffers
        // and files if the calls above did not.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if drained {
            // SAFETY: nothing was in flight when the ring was closed, so the kernel holds no
            // pointer into these any more; each is dropped once, here.
            unsafe {
                ManuallyDrop::drop(&mut self.timespec);
                ManuallyDrop::drop(&mut self.wake_counter);
                ManuallyDrop::drop(&mut self.pool);
            }
        }
        // Else operations the kernel did not give back may still write into that memory:
        // leak it rather than free it under them.
    }
}
