//! An object fetched as the DLIO fork's s3dlio loader fetches it ([`ObjectFetch`], the dlio
//! loader on whole objects), on the ring: a HEAD first (when the workload's records are 16 MiB
//! or more), then the object's ranged GETs — at most `concurrency_for(size)` in flight, each on
//! a connection of the reader's own, each landing at its offset in the object's one registered
//! buffer (`READ_FIXED` at `offset + received`) — or, for an object not split, its plain GET.
//! Each request retries on its own as any GET does; the object arrives when its last range
//! has, and fails with the first request past its retries (its buffer goes back to the pool
//! only once none of its ranges is in flight any more).
//!
//! A column subset's row groups ([`crate::extents`]) go the same way, without the HEAD: their
//! chunks' ranged GETs one after the other on one connection, each landing after the last.

use std::time::Instant;

use super::conn::Job;
use super::fetch::{ObjectState, Part, Pieces};
use super::{RingIo, UringWindow};
use crate::engine::pool::BufIndex;
use crate::engine::window::Fetched;
use crate::rank::RankError;
use crate::s3::RequestError;

impl RingIo<'_> {
    /// Starts GET `get` of `reader` (`size` bytes, its requests made as `pieces` says) into a
    /// buffer of `class`: its HEAD, or its first ranges. Returns a connection it started on.
    pub(super) fn start_object(
        &mut self,
        window: &UringWindow,
        reader: usize,
        get: usize,
        class: usize,
        pieces: Pieces,
    ) -> Result<usize, RankError> {
        let buf = self.ring.take_buffer_of(class).ok_or_else(|| {
            RankError::Engine("the buffer pool ran dry inside the prefetch window (a bug)".into())
        })?;
        let size = window.get(reader, get).len_bytes;
        let (ranges, head) = match pieces {
            Pieces::Object(rules) => (rules.ranges(size), rules.head),
            Pieces::Extents => {
                let extents = window.get(reader, get).extents.as_ref();
                (extents.map_or(0, |e| e.len()) as u64, false)
            }
        };
        self.objects[usize::from(buf.0)] = Some(ObjectState {
            reader,
            get,
            size,
            pieces,
            ranges,
            next: 0,
            outstanding: 0,
            retries: 0,
            started: Instant::now(),
            first_byte: None,
            failed: false,
        });
        if head {
            let head = Part {
                offset: 0,
                len: size,
                at: 0,
                head: true,
                whole: true,
            };
            let c = self.free_reader_conn(reader)?;
            self.start_part(window, c, buf, head)?;
            return Ok(c);
        }
        self.start_ranges(window, buf, None)
    }

    /// Starts as many of the object's next ranges as its concurrency allows, the first on `c`
    /// when given (a connection it just finished a request on). Returns one it started on.
    fn start_ranges(
        &mut self,
        window: &UringWindow,
        buf: BufIndex,
        mut c: Option<usize>,
    ) -> Result<usize, RankError> {
        let mut first = None;
        while let Some(state) = self.objects[usize::from(buf.0)] {
            if state.failed || state.next >= state.ranges || state.outstanding >= state.limit() {
                break;
            }
            let part = state.range(state.next, window.get(state.reader, state.get));
            let conn = match c.take() {
                Some(conn) => conn,
                None => self.free_reader_conn(state.reader)?,
            };
            if let Some(s) = self.objects[usize::from(buf.0)].as_mut() {
                s.next += 1;
            }
            self.start_part(window, conn, buf, part)?;
            first.get_or_insert(conn);
        }
        first.ok_or_else(|| RankError::Engine("an object with nothing to start (a bug)".into()))
    }

    /// Sends `part` of the object in `buf` on connection `c`.
    fn start_part(
        &mut self,
        window: &UringWindow,
        c: usize,
        buf: BufIndex,
        part: Part,
    ) -> Result<(), RankError> {
        let Some(state) = self.objects[usize::from(buf.0)].as_mut() else {
            return Err(RankError::Engine("a range of no object (a bug)".into()));
        };
        state.outstanding += 1;
        let (reader, get) = (state.reader, state.get);
        let now = Instant::now();
        self.conns[c].assign(Job {
            part: Some(part),
            ..Job::new(reader, get, buf, now)
        });
        let op = self.conns[c].start_attempt(now);
        self.queue(window, c, op)
    }

    /// The lowest-numbered idle connection of `reader`: the window and the plan's connections
    /// per reader (prefetch × the most ranges an object has in flight) guarantee one.
    fn free_reader_conn(&self, reader: usize) -> Result<usize, RankError> {
        self.free_conn(reader).ok_or_else(|| {
            RankError::Engine("no idle connection for an object's range (a bug)".into())
        })
    }

    /// A request of an object arrived on connection `c` (already finished): the next range
    /// goes out on `c`; the object arrives when its last range has.
    pub(super) fn part_arrived(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        job: Job,
    ) -> Result<(), RankError> {
        let i = usize::from(job.buf.0);
        let Some(state) = self.objects[i].as_mut() else {
            return Err(RankError::Engine("an arrival of no object (a bug)".into()));
        };
        state.outstanding -= 1;
        state.retries += job.retries;
        let at = job.first_started.saturating_duration_since(state.started) + job.first_byte;
        state.first_byte = Some(state.first_byte.map_or(at, |t| t.min(at)));
        let state = *state;
        if state.failed {
            return self.let_go_if_idle(job.buf);
        }
        if state.next < state.ranges {
            self.start_ranges(window, job.buf, Some(c))?;
            return Ok(());
        }
        if state.outstanding > 0 {
            return Ok(());
        }
        self.objects[i] = None;
        let endpoint = self.conn_endpoint[c];
        let arrival = Fetched {
            retries: state.retries,
            first_byte: state.first_byte.unwrap_or_default(),
            total: state.started.elapsed(),
            endpoint,
        };
        let len = state.size as usize;
        window.verify(
            state.reader,
            state.get,
            endpoint,
            self.ring.filled(job.buf, len),
        )?;
        window.arrived(state.reader, state.get, job.buf, arrival)?;
        Ok(())
    }

    /// A request of an object failed past its retries: the object fails (once); its buffer
    /// goes back when none of its ranges is in flight.
    pub(super) fn part_failed(
        &mut self,
        window: &mut UringWindow,
        endpoint: usize,
        job: Job,
        error: RequestError,
    ) -> Result<(), RankError> {
        let Some(state) = self.objects[usize::from(job.buf.0)].as_mut() else {
            return Err(RankError::Engine("a failure of no object (a bug)".into()));
        };
        state.outstanding -= 1;
        let retries = state.retries + job.retries;
        if !state.failed {
            state.failed = true;
            window.failed(job.reader, job.get, endpoint, retries, error)?;
        }
        self.let_go_if_idle(job.buf)
    }

    /// A failed object's buffer goes back once none of its requests is in flight.
    fn let_go_if_idle(&mut self, buf: BufIndex) -> Result<(), RankError> {
        let i = usize::from(buf.0);
        if self.objects[i].is_some_and(|s| s.outstanding == 0) {
            self.objects[i] = None;
            self.ring.give_buffer(buf);
        }
        Ok(())
    }
}
