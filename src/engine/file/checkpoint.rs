//! The file engine's checkpoint I/O ([`ObjectIo`]): each checkpoint object is a file under the
//! data directory, DLIO's names and sizes (`<checkpoint_folder>/global_epoch1_step<k>/…`),
//! written from the rank's registered buffers and read back in DLIO's blocks.
//!
//! **Writes.** The parent folder is made (DLIO `makedirs` at every save), the file opened
//! `O_WRONLY | O_CREAT | O_TRUNC`. Each chunk of `part_bytes` (DLIO's 32 MiB) is generated
//! straight into a registered buffer and written with `WRITE_FIXED`:
//! - `O_DIRECT` (the default): up to `parts_in_flight` chunks in flight at their offsets. A
//!   file whose size is not a multiple of the file system's alignment gets its last chunk
//!   written whole blocks long, then the file is cut to its size with `ftruncate` (so every
//!   write stays `O_DIRECT`; the bytes past the end never reach the file's size).
//! - `--direct off`, DLIO's own pattern (its `file_writer.py`): one chunk at a time, in order,
//!   each followed by `posix_fadvise(DONTNEED)` on its range.
//!
//! Either way the file is `fsync`ed once at close, as DLIO's writer always does whatever
//! `checkpoint.fsync` says. A write that fails (the disk full, say) or a run stopped mid-file
//! removes the file it was writing and says so.
//!
//! **Reads.** As DLIO's streaming reader: `read_blocks` contiguous blocks of ⌈size ÷ n⌉ bytes
//! read in parallel, each with sequential reads of at most `read_range_bytes` (128 MiB);
//! buffered reads advise `RANDOM` on open and `DONTNEED` after each read, as DLIO's reader.
//! With `O_DIRECT` a block's byte-granular edges are widened to the alignment and only the
//! planned bytes count. `--verify` checks every byte read against the content generator.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::ring::{Completion, FileRing};
use super::{FileEngine, read_error};
use crate::checkpoint::ObjectIoShape;
use crate::engine::pool::{BufIndex, BufferPool};
use crate::files::{Align, DataDir, cause_of, describe_io};
use crate::metrics::{GetRecord, thread_cpu};
use crate::rank::checkpoint::{ObjectIo, ObjectSpec, ObjectStats};
use crate::rank::journal::UploadJournal;
use crate::rank::{IoError, RankError};
use crate::s3::RequestError;

/// The longest one write or read may take before the rank calls it stalled.
const STALL: Duration = Duration::from_secs(600);

/// One rank's checkpoint I/O on the file engine.
#[derive(Debug)]
pub struct FileCheckpoint {
    ring: FileRing,
    dir: DataDir,
    shape: ObjectIoShape,
    stats: ObjectStats,
    /// Buffers not in use.
    free: Vec<BufIndex>,
    /// The file being written, removed if the write does not finish.
    writing: Option<PathBuf>,
    stop: Option<Arc<AtomicBool>>,
    live: crate::timeseries::Counter,
    completions: Vec<Completion>,
}

/// One write or read in flight in a buffer.
#[derive(Debug, Clone, Copy)]
struct Op {
    /// The aligned file offset and length the operation covers, and the bytes of it done.
    offset: u64,
    len: u64,
    done: u64,
    /// The planned bytes: file offset and length (inside the covered range).
    data_offset: u64,
    data_len: u64,
    /// The restore block it reads (reads only).
    block: usize,
    started: Instant,
}

impl Op {
    /// What must be done before the operation counts as complete: a write all of it, a read
    /// through the planned bytes' end.
    fn needed(&self, write: bool) -> u64 {
        if write {
            self.len
        } else {
            self.data_offset + self.data_len - self.offset
        }
    }
}

impl FileEngine {
    /// The checkpoint I/O of rank `rank`: `shape.connections()` registered buffers of a part
    /// or a read range each (a few blocks more, for ranges widened to the alignment), one file
    /// slot. Call it in the rank's thread, before the clock.
    pub fn checkpoint(
        &self,
        _rank: usize,
        shape: ObjectIoShape,
    ) -> Result<FileCheckpoint, RankError> {
        let engine = |what: &str, e: std::io::Error| RankError::Engine(format!("{what}: {e}"));
        let n = shape.connections();
        let slack = 2 * self.dir.align.offset.max(4096);
        let bytes = (shape.buffer_bytes() + slack).div_ceil(4096) * 4096;
        let bytes = usize::try_from(bytes)
            .map_err(|_| RankError::Engine(format!("checkpoint buffers of {bytes} bytes")))?;
        let mut pool = BufferPool::new(n, bytes)
            .map_err(|e| engine("cannot set up the checkpoint buffers", e))?;
        let free: Vec<BufIndex> = (0..n).filter_map(|_| pool.take()).rev().collect();
        let ring = FileRing::new(pool, 1).map_err(|e| engine("cannot set up the file ring", e))?;
        Ok(FileCheckpoint {
            ring,
            dir: self.dir.clone(),
            shape,
            stats: ObjectStats::default(),
            free,
            writing: None,
            stop: None,
            live: Default::default(),
            completions: Vec::with_capacity(n + 4),
        })
    }
}

impl FileCheckpoint {
    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The error of `what` on checkpoint file `key`.
    fn file_error(&self, what: &str, key: &str, e: &std::io::Error) -> RankError {
        let error = RequestError::File {
            operation: format!("{what} checkpoint file {}", self.dir.path(key).display()),
            reason: describe_io(e),
            cause: cause_of(e.raw_os_error().unwrap_or(0)),
        };
        RankError::Io(error.into())
    }

    /// Opens `key` to write (`write`) or read, `O_DIRECT` unless the run is buffered.
    fn open(&mut self, key: &str, write: bool) -> Result<File, RankError> {
        let path = self.dir.path(key);
        let mut options = std::fs::OpenOptions::new();
        if write {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| self.file_error("making the folder of", key, &e))?;
            }
            options.write(true).create(true).truncate(true);
        } else {
            options.read(true);
        }
        if self.dir.direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let what = if write { "creating" } else { "opening" };
        let file = options
            .open(&path)
            .map_err(|e| self.file_error(what, key, &e))?;
        self.ring
            .set_file(0, &file)
            .map_err(|e| self.file_error("registering", key, &e))?;
        Ok(file)
    }

    /// Waits for a completion; returns the buffer and result of each.
    fn reap(&mut self) -> Result<Vec<(BufIndex, i32)>, RankError> {
        let mut completions = std::mem::take(&mut self.completions);
        self.ring
            .wait(Some(Duration::from_millis(100)), &mut completions)
            .map_err(|e| RankError::Engine(format!("io_uring_enter: {e}")))?;
        let done = completions
            .iter()
            .map(|c| (BufIndex(c.tag as u16), c.result))
            .collect();
        self.completions = completions;
        Ok(done)
    }

    /// Waits out every operation in `ops` (a failure or a stop: nothing new starts).
    fn drain(&mut self, ops: &mut [Option<Op>]) {
        let deadline = Instant::now() + STALL;
        while ops.iter().any(Option::is_some) && Instant::now() < deadline {
            let Ok(done) = self.reap() else { return };
            for (buf, _) in done {
                if let Some(op) = ops.get_mut(usize::from(buf.0)) {
                    *op = None;
                    self.free.push(buf);
                    self.live.ended();
                }
            }
        }
    }

    /// Removes the file being written, if any: the run does not leave half a checkpoint.
    fn remove_partial(&mut self) -> Option<String> {
        let path = self.writing.take()?;
        Some(match std::fs::remove_file(&path) {
            Ok(()) => format!("{} (half written) was removed", path.display()),
            Err(e) => format!(
                "{} is left half written (removing it failed: {})",
                path.display(),
                describe_io(&e)
            ),
        })
    }

    /// A failed write: in-flight writes waited out, the file removed, the error worded.
    fn write_failed(&mut self, ops: &mut [Option<Op>], error: RankError) -> RankError {
        self.drain(ops);
        let removed = self.remove_partial();
        match (error, removed) {
            (RankError::Io(mut io), Some(removed)) => {
                io.message = format!("{}; {removed}", io.message);
                RankError::Io(io)
            }
            (error, _) => error,
        }
    }

    /// Queues the rest of `op` in `buf`.
    fn submit(&mut self, buf: BufIndex, op: &Op, write: bool) -> Result<(), RankError> {
        let at = (op.done) as usize;
        let (len, offset) = ((op.len - op.done) as usize, op.offset + op.done);
        let queued = if write {
            self.ring.write(0, buf, at, len, offset)
        } else {
            self.ring.read(0, buf, at, len, offset)
        };
        queued.map_err(|e| RankError::Engine(format!("queueing a file operation: {e}")))?;
        Ok(())
    }
}

impl ObjectIo for FileCheckpoint {
    fn put(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        let file = self.open(&object.key, true)?;
        self.writing = Some(self.dir.path(&object.key));
        let align = if self.dir.direct {
            self.dir.align
        } else {
            Align::NONE
        };
        let in_flight = if self.dir.direct {
            self.shape.parts_in_flight.max(1)
        } else {
            1
        };
        let parts: Vec<_> = self
            .shape
            .parts(object.bytes)
            .filter(|(_, r)| r.end > r.start)
            .collect();
        let mut parts = parts.into_iter();
        let mut ops: Vec<Option<Op>> = vec![None; self.ring.buffers().0];
        let mut running = 0usize;
        let mut exhausted = false;
        loop {
            if self.stopped() {
                let _ = self.write_failed(&mut ops, RankError::Aborted);
                return Err(RankError::Aborted);
            }
            while !exhausted && running < in_flight && !self.free.is_empty() {
                let Some((_, range)) = parts.next() else {
                    exhausted = true;
                    break;
                };
                let buf = self.free.pop().unwrap_or(BufIndex(0));
                let data_len = range.end - range.start;
                let filled = super::super::common::fill_and_digest(
                    &object.content,
                    range.start,
                    &mut self.ring.buffer_mut(buf)[..data_len as usize],
                    Default::default(),
                );
                self.stats.write.generate_cpu += filled.generate_cpu;
                // An O_DIRECT write is whole blocks: the last chunk's tail is cut off below.
                let (_, len) = align.widen(range.start, data_len);
                let op = Op {
                    offset: range.start,
                    len,
                    done: 0,
                    data_offset: range.start,
                    data_len,
                    block: 0,
                    started: Instant::now(),
                };
                if let Err(e) = self.submit(buf, &op, true) {
                    return Err(self.write_failed(&mut ops, e));
                }
                ops[usize::from(buf.0)] = Some(op);
                running += 1;
                self.live.issued();
            }
            if running == 0 {
                break;
            }
            for (buf, result) in self.reap()? {
                let Some(mut op) = ops[usize::from(buf.0)].take() else {
                    continue;
                };
                if result < 0 {
                    self.free.push(buf);
                    self.live.ended();
                    let e = std::io::Error::from_raw_os_error(-result);
                    let error = self.file_error("writing", &object.key, &e);
                    return Err(self.write_failed(&mut ops, error));
                }
                op.done += result as u64;
                if op.done < op.needed(true) && result > 0 {
                    if let Err(e) = self.submit(buf, &op, true) {
                        self.free.push(buf);
                        return Err(self.write_failed(&mut ops, e));
                    }
                    ops[usize::from(buf.0)] = Some(op);
                    continue;
                }
                running -= 1;
                self.free.push(buf);
                self.live.ended();
                if op.done < op.needed(true) {
                    let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
                    let error = self.file_error("writing (a write wrote nothing)", &object.key, &e);
                    return Err(self.write_failed(&mut ops, error));
                }
                if !self.dir.direct {
                    // DLIO's writer drops each chunk from the page cache as it goes.
                    let _ = rustix::fs::fadvise(
                        &file,
                        op.offset,
                        std::num::NonZeroU64::new(op.data_len),
                        rustix::fs::Advice::DontNeed,
                    );
                }
                let latency = op.started.elapsed();
                self.live.counted(0, op.data_len, latency);
                let w = &mut self.stats.write;
                w.parts += 1;
                w.sent.part += 1;
                w.bytes_written += op.data_len;
                w.part_latency.record(latency);
            }
        }
        // The last block's bytes past the object's end are cut; then one fsync, at close.
        let finish = (|| {
            if file.metadata()?.len() != object.bytes {
                file.set_len(object.bytes)?;
            }
            rustix::fs::fsync(&file)?;
            Ok::<(), std::io::Error>(())
        })();
        if let Err(e) = finish {
            let error = self.file_error("syncing", &object.key, &e);
            return Err(self.write_failed(&mut ops, error));
        }
        self.writing = None;
        self.stats.write.objects += 1;
        Ok(())
    }

    fn get(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        let file = self.open(&object.key, false)?;
        let size = file
            .metadata()
            .map_err(|e| self.file_error("reading", &object.key, &e))?
            .len();
        if size < object.bytes {
            let get = crate::ranged::Piece {
                offset: 0,
                len_bytes: object.bytes,
                at: 0,
            }
            .as_get(&object.key);
            let reason = format!(
                "the file is {size} bytes, the checkpoint's object {}: it is shorter than \
                 planned",
                object.bytes
            );
            return Err(RankError::Io(
                read_error(&self.dir, &get, "short_file", reason).into(),
            ));
        }
        if !self.dir.direct {
            // DLIO's reader turns readahead off on each reader's descriptor.
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
        }
        let align = if self.dir.direct {
            self.dir.align
        } else {
            Align::NONE
        };
        let mut blocks: Vec<_> = self
            .shape
            .restore_blocks(object.bytes)
            .into_iter()
            .map(|b| self.shape.block_gets(b))
            .collect();
        let mut ops: Vec<Option<Op>> = vec![None; self.ring.buffers().0];
        let mut running = 0usize;
        let first: Vec<_> = blocks.iter_mut().map(Iterator::next).collect();
        for (block, range) in first.into_iter().enumerate() {
            if let Some(range) = range {
                self.start_read(&mut ops, block, range, align)?;
                running += 1;
            }
        }
        while running > 0 {
            if self.stopped() {
                self.drain(&mut ops);
                return Err(RankError::Aborted);
            }
            for (buf, result) in self.reap()? {
                let Some(mut op) = ops[usize::from(buf.0)].take() else {
                    continue;
                };
                let failure = if result < 0 {
                    let e = std::io::Error::from_raw_os_error(-result);
                    Some(self.file_error("reading", &object.key, &e))
                } else {
                    op.done += result as u64;
                    (result == 0 && op.done < op.needed(false)).then(|| {
                        let e = std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the file ended before the planned bytes",
                        );
                        self.file_error("reading", &object.key, &e)
                    })
                };
                if let Some(error) = failure {
                    self.free.push(buf);
                    self.live.ended();
                    self.stats.read.errors += 1;
                    self.drain(&mut ops);
                    return Err(error);
                }
                if op.done < op.needed(false) {
                    self.submit(buf, &op, false)?;
                    ops[usize::from(buf.0)] = Some(op);
                    continue;
                }
                self.live.ended();
                self.read_done(object, buf, &op, &file)?;
                self.free.push(buf);
                running -= 1;
                if let Some(range) = blocks[op.block].next() {
                    self.start_read(&mut ops, op.block, range, align)?;
                    running += 1;
                }
            }
        }
        Ok(())
    }

    fn set_stop(&mut self, stop: Arc<AtomicBool>) {
        self.stop = Some(stop);
    }

    fn count_into(&mut self, counter: crate::timeseries::Counter) {
        self.live = counter;
    }

    /// Files have no uploads to journal.
    fn set_journal(&mut self, _journal: UploadJournal) {}

    /// The file being written, if a write was cut short, removed.
    fn abort_open(&mut self) -> usize {
        match self.remove_partial() {
            Some(line) => {
                eprintln!("ringload run: {line}");
                1
            }
            None => 0,
        }
    }

    fn stats(&self) -> &ObjectStats {
        &self.stats
    }
}

impl FileCheckpoint {
    /// Starts reading `range` of the open file for restore block `block`, widened to `align`.
    fn start_read(
        &mut self,
        ops: &mut [Option<Op>],
        block: usize,
        range: std::ops::Range<u64>,
        align: Align,
    ) -> Result<(), RankError> {
        let buf = self
            .free
            .pop()
            .ok_or_else(|| RankError::Engine("no free checkpoint buffer (a bug)".into()))?;
        let data_len = range.end - range.start;
        let (offset, len) = align.widen(range.start, data_len);
        let op = Op {
            offset,
            len,
            done: 0,
            data_offset: range.start,
            data_len,
            block,
            started: Instant::now(),
        };
        self.submit(buf, &op, false)?;
        ops[usize::from(buf.0)] = Some(op);
        self.live.issued();
        Ok(())
    }

    /// A restore read is in: checked (`--verify`), dropped from the cache (buffered, as
    /// DLIO), counted.
    fn read_done(
        &mut self,
        object: &ObjectSpec,
        buf: BufIndex,
        op: &Op,
        file: &File,
    ) -> Result<(), RankError> {
        let total = op.started.elapsed();
        if self.shape.verify {
            let cpu = thread_cpu();
            let at = (op.data_offset - op.offset) as usize;
            let body = self.ring.filled(buf, at..at + op.data_len as usize);
            let checked = object.content.check(op.data_offset, body);
            let read = &mut self.stats.read;
            read.verify.gets += 1;
            read.verify.cpu += thread_cpu().saturating_sub(cpu);
            if let Err(at) = checked {
                let error = RequestError::Corrupt {
                    operation: format!(
                        "read checkpoint file {} (bytes={}-{})",
                        self.dir.path(&object.key).display(),
                        op.data_offset,
                        op.data_offset + op.data_len - 1
                    ),
                    reason: object.content.mismatch(at),
                };
                self.stats.read.errors += 1;
                return Err(RankError::Io(IoError::from(error)));
            }
        }
        if !self.dir.direct {
            let _ = rustix::fs::fadvise(
                file,
                op.data_offset,
                std::num::NonZeroU64::new(op.data_len),
                rustix::fs::Advice::DontNeed,
            );
        }
        self.live.counted(op.data_len, 0, total);
        let read = &mut self.stats.read;
        read.requests += 1;
        read.by_kind.ranged_get += 1;
        read.bytes_read += op.data_len;
        read.first_byte.record(total);
        read.total.record(total);
        let e = read.endpoint(0);
        e.requests += 1;
        e.bytes_read += op.data_len;
        read.trace.push(GetRecord {
            epoch: 0,
            reader: op.block,
            get: 0,
            attempts: 1,
            first_byte_us: total.as_micros() as u64,
            total_us: total.as_micros() as u64,
            endpoint: 0,
        });
        Ok(())
    }
}
