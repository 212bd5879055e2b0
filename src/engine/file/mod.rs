//! The file engine: a rank's reads of a mounted file system (`--data-dir`), through the same
//! reader window as the S3 engines, with no copy at all by default.
//!
//! One ring per rank, created in the rank's (pinned) thread, with the rank's buffers
//! registered (`engine/pool.rs`, as the io_uring S3 engine's) and a sparse table of registered
//! files, one slot per buffer. A GET is a file read:
//!
//! ```text
//! open (O_DIRECT by default) ─▶ fstat: shorter than planned? ─▶ file into its buffer's slot
//!   ─▶ READ_FIXED of the range widened to O_DIRECT's alignment (each piece of a column subset
//!      in turn) ─▶ short read: the rest again; EOF short of the plan: failed ─▶ arrived
//! ```
//!
//! With `O_DIRECT` the device DMAs straight into the registered buffer: no CPU copy. A range
//! not aligned to the file system's `STATX_DIOALIGN` is read widened (whole blocks), and only
//! the planned bytes count as data. `--direct off` reads through the page cache, as DLIO does.
//! Checkpoints are files written and read back by [`checkpoint`].

pub mod checkpoint;
mod ring;

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::ring::{COMPUTE_TAG, Completion, FileRing, WAKE_TAG};
use super::pool::{BufIndex, BufferPool};
use super::window::{Fetched, Transport, Window, WindowedRank};
use crate::budget::SmallBuffers;
use crate::files::{Align, DataDir};
use crate::plan::RangedGet;
use crate::rank::{RankError, StepBarrier};
use crate::s3::{RequestError, RetryPolicy};

/// How often a waiting rank looks at whether another rank failed.
const POLL: Duration = Duration::from_millis(100);

/// What every rank of a file run shares: the directory and how to read it.
#[derive(Debug, Clone)]
pub struct FileEngine {
    pub dir: DataDir,
    policy: RetryPolicy,
}

/// One rank's reads on the file engine.
pub type FileRank<'a> = WindowedRank<'a, FileIo>;

/// The window as the file engine keeps it: a GET in flight knows its buffer, an arrived one
/// holds it.
type FileWindow = Window<BufIndex, BufIndex>;

impl FileEngine {
    pub fn new(dir: DataDir, policy: RetryPolicy) -> FileEngine {
        FileEngine { dir, policy }
    }

    /// The I/O of one rank for `epochs` epochs, set up in full: its pool mapped, pre-faulted,
    /// locked and registered, one file slot per buffer. Each buffer holds the largest GET
    /// widened to the alignment (`buffer_bytes` and a few blocks). Call it in the rank's
    /// thread.
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        small: Option<SmallBuffers>,
        epochs: u32,
        buffer_bytes: usize,
        barrier: &'a StepBarrier,
    ) -> Result<FileRank<'a>, RankError> {
        let engine = |what: &str, e: std::io::Error| RankError::Engine(format!("{what}: {e}"));
        let align = self.dir.align;
        let widest = gets.iter().flatten().map(|g| footprint(g, align)).max();
        let large = page_round(buffer_bytes.max(widest.unwrap_or(0) as usize));
        let buffers = (gets.len() * prefetch).max(1);
        let small_per_reader = small.map_or(0, |s| s.per_reader as usize).min(prefetch);
        let small_buffers = gets.len() * small_per_reader;
        let small_bytes = small.map_or(4096, |s| {
            let widened = align.widen(0, s.get_bytes).1 + align.offset;
            page_round((s.buffer_bytes.max(widened)) as usize)
        });
        let pool = BufferPool::with_classes(&[
            (buffers - small_buffers, large),
            (small_buffers, small_bytes),
        ])
        .map_err(|e| engine("cannot set up the buffer pool", e))?;
        let mut ring = FileRing::new(pool, buffers as u32)
            .map_err(|e| engine("cannot set up the file ring", e))?;
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| engine("cannot create the barrier's eventfd", e.into()))?;
        let wake = Arc::new(wake);
        barrier.add_waker(Arc::clone(&wake));
        ring.watch(wake.as_fd())
            .map_err(|e| engine("cannot watch the barrier's eventfd", e))?;
        let transport = FileIo {
            ring,
            reads: vec![None; buffers],
            failed: Vec::new(),
            completions: Vec::with_capacity(buffers + 8),
            dir: self.dir.clone(),
            compute_running: false,
            wake,
        };
        let location = format!("{}/", self.dir.root.display());
        Ok(WindowedRank::new(
            Window::new(gets, prefetch, small, epochs, location),
            transport,
            barrier,
            self.policy.longest_request(),
        ))
    }
}

fn page_round(n: usize) -> usize {
    n.div_ceil(4096).max(1) * 4096
}

/// The bytes a GET's reads take in its buffer: each piece widened to `align`, placed at an
/// aligned offset after the one before.
fn footprint(get: &RangedGet, align: Align) -> u64 {
    spans(get, align).last().map_or(0, |s| s.at as u64 + s.len)
}

/// The error of a read of `get` under `dir`: `cause` went wrong with its file.
fn read_error(dir: &DataDir, get: &RangedGet, cause: &'static str, reason: String) -> RequestError {
    RequestError::File {
        operation: format!("read {} ({})", dir.path(&get.key).display(), get.describe()),
        reason,
        cause,
    }
}

/// One read of a GET: the aligned range it reads, where it lands, and where its data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    /// The aligned file offset and length read.
    offset: u64,
    len: u64,
    /// Where the read lands in the buffer.
    at: usize,
    /// The planned bytes inside it: file offset and length, and where they land.
    data_offset: u64,
    data_len: u64,
    /// Where the planned bytes would be with every piece packed (`Piece::at`).
    packed_at: u64,
}

impl Span {
    /// The bytes of the read that must arrive: through the planned bytes' end.
    fn needed(&self) -> u64 {
        self.data_offset + self.data_len - self.offset
    }

    fn data_at(&self) -> usize {
        self.at + (self.data_offset - self.offset) as usize
    }
}

/// The reads of `get`: one, or one per column chunk of a column subset, each widened to
/// `align` and placed at an aligned offset of the buffer.
fn spans(get: &RangedGet, align: Align) -> Vec<Span> {
    let pieces: Vec<(u64, u64, u64)> = match get.pieces() {
        Some(pieces) => pieces
            .iter()
            .map(|p| (p.offset, p.len_bytes, p.at))
            .collect(),
        None => vec![(get.offset, get.len_bytes, 0)],
    };
    let mut at = 0u64;
    pieces
        .into_iter()
        .map(|(offset, len, packed_at)| {
            let (start, widened) = align.widen(offset, len);
            let span = Span {
                offset: start,
                len: widened,
                at: at as usize,
                data_offset: offset,
                data_len: len,
                packed_at,
            };
            at = (at + widened).div_ceil(align.memory.max(1)) * align.memory.max(1);
            span
        })
        .collect()
}

/// A GET being read into its buffer.
#[derive(Debug, Clone)]
struct Read {
    reader: usize,
    get: usize,
    spans: Vec<Span>,
    /// The span in flight, and the bytes of it read so far.
    next: usize,
    done: u64,
    started: Instant,
    first: Option<Duration>,
}

/// The file engine's transport: one ring, a read per buffer, and the completion loop.
#[derive(Debug)]
pub struct FileIo {
    ring: FileRing,
    /// `reads[buf]`: the GET being read into buffer `buf`.
    reads: Vec<Option<Read>>,
    /// GETs that failed before any read was queued (a missing or short file): reported to
    /// the window at the next progress.
    failed: Vec<(usize, usize, RequestError)>,
    completions: Vec<Completion>,
    dir: DataDir,
    compute_running: bool,
    wake: Arc<OwnedFd>,
}

impl FileIo {
    fn engine_error(what: &str, e: std::io::Error) -> RankError {
        RankError::Engine(format!("io_uring: {what}: {e}"))
    }

    /// The error of a read of `get`: `what` went wrong with its file.
    fn error(&self, get: &RangedGet, cause: &'static str, reason: String) -> RequestError {
        read_error(&self.dir, get, cause, reason)
    }

    /// Opens GET `get`'s file into buffer `buf`'s slot, checks it holds the planned bytes.
    fn open(&mut self, get: &RangedGet, buf: BufIndex) -> Result<(), RequestError> {
        let path = self.dir.path(&get.key);
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        if self.dir.direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let dir = &self.dir;
        let io = |e: std::io::Error| {
            let errno = e.raw_os_error().unwrap_or(0);
            let mut reason = crate::files::describe_io(&e);
            if errno == libc::EINVAL && dir.direct {
                reason.push_str(" (O_DIRECT refused: run with --direct off)");
            }
            read_error(dir, get, crate::files::cause_of(errno), reason)
        };
        let file: File = options.open(&path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        // The planned bytes' end: the last chunk's, or the range's.
        let end = match &get.extents {
            Some(extents) => extents
                .as_slice()
                .iter()
                .map(|e| e.end())
                .max()
                .unwrap_or(0),
            None => get.offset + get.len_bytes,
        };
        if size < end {
            return Err(read_error(
                dir,
                get,
                "short_file",
                format!(
                    "the file is {size} bytes, shorter than the plan reads (to byte {end}); it \
                     changed since the catalog was read: generate the dataset again"
                ),
            ));
        }
        let set = self.ring.set_file(u32::from(buf.0), &file);
        set.map_err(|e| read_error(&self.dir, get, "io", format!("registering the file: {e}")))
    }

    /// Queues the next read of the GET in buffer `buf`.
    fn queue(&mut self, buf: BufIndex) -> Result<(), RankError> {
        let Some(read) = &self.reads[usize::from(buf.0)] else {
            return Err(RankError::Engine(format!(
                "buffer {} has no read (a bug)",
                buf.0
            )));
        };
        let span = read.spans[read.next];
        let done = read.done;
        self.ring
            .read(
                u32::from(buf.0),
                buf,
                span.at + done as usize,
                (span.len - done) as usize,
                span.offset + done,
            )
            .map_err(|e| Self::engine_error("queueing a read", e))
    }

    fn poll_once(
        &mut self,
        window: &mut FileWindow,
        until: Option<Instant>,
    ) -> Result<(), RankError> {
        for (reader, get, error) in std::mem::take(&mut self.failed) {
            let buf = window.failed(reader, get, 0, 0, error)?;
            self.reads[usize::from(buf.0)] = None;
            self.ring.give_buffer(buf);
        }
        let now = Instant::now();
        let wake = until.unwrap_or(now + POLL).min(now + POLL);
        let mut completions = std::mem::take(&mut self.completions);
        let waited = self
            .ring
            .wait(Some(wake.saturating_duration_since(now)), &mut completions);
        let handled = waited
            .map_err(|e| Self::engine_error("io_uring_enter", e))
            .and_then(|()| {
                completions
                    .iter()
                    .try_for_each(|&c| self.on_completion(window, c))
            });
        self.completions = completions;
        handled
    }

    fn on_completion(&mut self, window: &mut FileWindow, c: Completion) -> Result<(), RankError> {
        match c.tag {
            COMPUTE_TAG => self.compute_running = false,
            WAKE_TAG => {
                let wake = Arc::clone(&self.wake);
                self.ring
                    .watch(wake.as_fd())
                    .map_err(|e| Self::engine_error("re-arming the barrier's eventfd", e))?;
            }
            tag => self.on_read(window, BufIndex(tag as u16), c.result)?,
        }
        Ok(())
    }

    /// A read into `buf` completed with `result`: the next read, the rest again, the
    /// arrival, or the failure.
    fn on_read(
        &mut self,
        window: &mut FileWindow,
        buf: BufIndex,
        result: i32,
    ) -> Result<(), RankError> {
        let Some(mut read) = self.reads[usize::from(buf.0)].take() else {
            return Err(RankError::Engine(format!(
                "a read completed into buffer {}, which has none (a bug)",
                buf.0
            )));
        };
        let get = window.get(read.reader, read.get);
        // What the arrival needs of the GET, taken now: no copy of it per completion.
        let (packed, checked, len) = (
            get.check.is_some(),
            get.check.is_some() || get.object.is_some(),
            get.len_bytes as usize,
        );
        let failure = if result < 0 {
            let e = std::io::Error::from_raw_os_error(-result);
            Some(self.error(
                get,
                crate::files::cause_of(-result),
                crate::files::describe_io(&e),
            ))
        } else {
            read.first.get_or_insert_with(|| read.started.elapsed());
            read.done += result as u64;
            let span = read.spans[read.next];
            if read.done >= span.needed() {
                read.next += 1;
                read.done = 0;
                None
            } else if result == 0 {
                Some(self.error(
                    get,
                    "short_file",
                    format!(
                        "the file ended {} bytes into a read of {} at offset {}: it is shorter \
                         than planned",
                        read.done,
                        span.needed(),
                        span.offset
                    ),
                ))
            } else {
                None
            }
        };
        if let Some(error) = failure {
            let buf = window.failed(read.reader, read.get, 0, 0, error)?;
            self.ring.give_buffer(buf);
            return Ok(());
        }
        let (reader, g) = (read.reader, read.get);
        if read.next < read.spans.len() {
            self.reads[usize::from(buf.0)] = Some(read);
            return self.queue(buf);
        }
        // Every planned byte is in: checked where it landed, then handed to the window.
        let body = if read.spans.len() == 1 {
            let s = read.spans[0];
            s.data_at()..s.data_at() + s.data_len as usize
        } else {
            // A column subset's chunks, packed in order as the S3 engines land them (only
            // --verify reads them).
            if packed {
                for s in &read.spans {
                    self.ring
                        .pack(buf, s.data_at(), s.packed_at as usize, s.data_len as usize);
                }
            }
            0..len
        };
        if checked {
            let bytes = self.ring.filled(buf, body);
            if let Err(e) = window.verify(reader, g, 0, bytes) {
                self.ring.give_buffer(buf);
                return Err(e);
            }
        }
        let total = read.started.elapsed();
        let arrival = Fetched {
            retries: 0,
            first_byte: read.first.unwrap_or(total),
            total,
            endpoint: 0,
        };
        window.arrived(reader, g, buf, arrival)?;
        Ok(())
    }
}

impl Transport for FileIo {
    type InFlight = BufIndex;
    type Held = BufIndex;

    fn start(
        &mut self,
        window: &FileWindow,
        reader: usize,
        get: usize,
        class: usize,
    ) -> Result<BufIndex, RankError> {
        let buf = self.ring.take_buffer_of(class).ok_or_else(|| {
            RankError::Engine("the buffer pool ran dry inside the prefetch window (a bug)".into())
        })?;
        let ranged = window.get(reader, get);
        let started = Instant::now();
        if let Err(error) = self.open(ranged, buf) {
            self.failed.push((reader, get, error));
            return Ok(buf);
        }
        let spans = spans(ranged, self.dir.align);
        if spans
            .last()
            .is_some_and(|s| s.at + s.len as usize > self.ring.buffer_len(buf))
        {
            return Err(RankError::Engine(format!(
                "a read of {} does not fit the {}-byte buffer (a bug)",
                ranged.describe(),
                self.ring.buffer_len(buf)
            )));
        }
        self.reads[usize::from(buf.0)] = Some(Read {
            reader,
            get,
            spans,
            next: 0,
            done: 0,
            started,
            first: None,
        });
        self.queue(buf)?;
        Ok(buf)
    }

    fn progress(&mut self, window: &mut FileWindow, until: Instant) -> Result<(), RankError> {
        self.poll_once(window, Some(until))
    }

    fn compute(&mut self, window: &mut FileWindow, duration: Duration) -> Result<(), RankError> {
        if duration.is_zero() {
            return Ok(());
        }
        self.ring
            .timeout(duration)
            .map_err(|e| Self::engine_error("queueing the compute timer", e))?;
        self.compute_running = true;
        while self.compute_running {
            self.poll_once(window, None)?;
        }
        Ok(())
    }

    fn barrier(&mut self, window: &mut FileWindow, barrier: &StepBarrier) -> Result<(), RankError> {
        let arrival = barrier.arrive()?;
        loop {
            if barrier.passed(&arrival)? {
                return Ok(());
            }
            self.poll_once(window, None)?;
        }
    }

    fn give_back(&mut self, buf: BufIndex) {
        self.ring.give_buffer(buf);
    }

    /// Nothing was read while the rank saved a checkpoint: reads in flight lose no time.
    fn paused(&mut self, pause: Duration) {
        for read in self.reads.iter_mut().flatten() {
            read.started += pause;
        }
    }

    fn check_idle(&self) -> Result<(), RankError> {
        let (count, free) = self.ring.buffers();
        if free == count {
            return Ok(());
        }
        Err(RankError::Engine(format!(
            "{} of {count} buffers are not back in the pool at the end of an epoch (a bug)",
            count - free
        )))
    }
}
