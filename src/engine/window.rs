//! The reader window, written once for every engine.
//!
//! Each reader of a rank walks its GETs in order and keeps at most `prefetch` of them held: in
//! flight, or arrived and not yet released by the step loop. The window is where that rule
//! lives, with the life of one GET:
//!
//! ```text
//! NotIssued ─issue─▶ InFlight ─arrived─▶ Arrived ─release─▶ Released
//!                        └──────failed──▶ Failed (the rank stops at its next wait)
//! ```
//!
//! - **start of epoch**: every GET is `NotIssued`; each reader issues its first `prefetch`.
//! - **size classes** (whole objects of spread sizes, when the plan's budget chose them:
//!   [`SmallBuffers`]): of a reader's `prefetch` buffers, `per_reader` are small; a GET takes a
//!   small one if it fits and one is free, else a large one, and waits (is not issued yet)
//!   while none is free. A reader has as many large buffers as one step needs of it, and its
//!   GETs are issued and released in order, so the GETs a step waits for always get theirs.
//! - **release**: the step loop consumed a GET's last row; its buffer goes back to the
//!   transport and the reader issues its next GET at once (one for one).
//! - **end of epoch**: every GET was issued; what is still in flight is waited for; a partly
//!   consumed last GET gives its buffer back.
//! - **recording**: each arrival is counted once in [`RequestStats`] (bytes, attempts,
//!   latencies, the trace for requests.csv), however many attempts it took.
//!
//! What differs between engines is only the [`Transport`]: how a GET is started, how the rank
//! thread waits for progress, and what an arrived GET holds (a registered buffer index, or a
//! heap buffer). [`WindowedRank`] joins the two into the [`RankIo`] the step loop drives, so
//! both engines issue the refill GET at the same moment, fail at the same moment, and count
//! the same way.

use std::fmt;
use std::time::{Duration, Instant};

use crate::budget::SmallBuffers;
use crate::metrics::{self, GetRecord, RequestStats};
use crate::plan::RangedGet;
use crate::rank::{RankError, RankIo, StepBarrier};
use crate::s3::RequestError;
use crate::verify::{self, Verified};

/// Where a GET is. `F` is what the transport keeps for a GET in flight, `H` what an arrived GET
/// holds until the step loop releases it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot<F, H> {
    NotIssued,
    InFlight(F),
    Arrived(H),
    Released,
    Failed,
}

impl<F, H> Slot<F, H> {
    fn describe(&self) -> &'static str {
        match self {
            Slot::NotIssued => "not issued yet",
            Slot::InFlight(_) => "in flight",
            Slot::Arrived(_) => "arrived",
            Slot::Released => "released already",
            Slot::Failed => "failed",
        }
    }

    fn is_held(&self) -> bool {
        matches!(self, Slot::InFlight(_) | Slot::Arrived(_))
    }
}

impl<F, H> Reader<F, H> {
    /// GET `get` no longer holds its buffer (released, or failed).
    fn let_go(&mut self, get: usize) {
        self.held -= 1;
        self.free[usize::from(self.class[get])] += 1;
    }
}

#[derive(Debug)]
struct Reader<F, H> {
    gets: Vec<RangedGet>,
    slots: Vec<Slot<F, H>>,
    /// GETs issued this epoch (the index of the next one to issue).
    issued: usize,
    /// GETs in flight or arrived and not released.
    held: usize,
    /// Free buffers of each size class ([`LARGE`], [`SMALL`]).
    free: [usize; 2],
    /// `class[get]`: the size class of the buffer GET `get` holds (while held).
    class: Vec<u8>,
}

/// The size class of a reader's buffers that holds any GET.
pub const LARGE: usize = 0;
/// The size class of a reader's smaller buffers ([`SmallBuffers`]).
pub const SMALL: usize = 1;

/// What fetching a GET that arrived whole took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Attempts beyond the first.
    pub retries: u32,
    /// From sending the (last) attempt to its response head.
    pub first_byte: Duration,
    /// From the first attempt to the last body byte, retries included.
    pub total: Duration,
    /// The endpoint (of the target's list) it came through.
    pub endpoint: usize,
}

/// The GETs of one rank's readers and where each one is.
#[derive(Debug)]
pub struct Window<F, H> {
    readers: Vec<Reader<F, H>>,
    prefetch: usize,
    /// Size classes, if the plan chose them.
    small: Option<SmallBuffers>,
    epochs_started: u32,
    stats: RequestStats,
    /// The first GET that failed past its retries.
    failure: Option<RequestError>,
    /// `s3://bucket/`, to name a GET in errors.
    location: String,
    /// Where `--verify` makes a whole object's expected bytes, a piece at a time: grown once,
    /// reused by every GET.
    scratch: Vec<u8>,
    /// The time series' counters of the rank ([`Window::count_into`]).
    live: Option<crate::timeseries::Counter>,
}

impl<F, H> Window<F, H> {
    /// The window over `gets[reader]`, `prefetch` held per reader (of them `small`'s
    /// `per_reader` in small buffers), for `epochs` epochs: the trace is reserved for every GET
    /// of every epoch here, so recording never allocates. `location` (`s3://bucket/`) names the
    /// GETs' objects in errors.
    pub fn new(
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        small: Option<SmallBuffers>,
        epochs: u32,
        location: String,
    ) -> Window<F, H> {
        let prefetch = prefetch.max(1);
        let small = small.filter(|s| (s.per_reader as usize) < prefetch);
        let per_epoch: usize = gets.iter().map(Vec::len).sum();
        let mut stats = RequestStats::default();
        stats
            .trace
            .reserve_exact(per_epoch.saturating_mul(epochs as usize));
        Window {
            readers: gets
                .into_iter()
                .map(|gets| Reader {
                    slots: gets.iter().map(|_| Slot::NotIssued).collect(),
                    class: vec![LARGE as u8; gets.len()],
                    gets,
                    issued: 0,
                    held: 0,
                    free: [0, 0],
                })
                .collect(),
            prefetch,
            small,
            epochs_started: 0,
            stats,
            failure: None,
            location,
            scratch: Vec::new(),
            live: None,
        }
    }

    /// Counts each GET issued, arrived (bytes, latency), failed and retried into `counter`,
    /// the time series' live counters of the rank.
    pub fn count_into(&mut self, counter: crate::timeseries::Counter) {
        self.live = Some(counter);
    }

    pub fn readers(&self) -> usize {
        self.readers.len()
    }

    /// The GETs of `reader`, in issue order.
    pub fn gets(&self, reader: usize) -> &[RangedGet] {
        &self.readers[reader].gets
    }

    pub fn get(&self, reader: usize, get: usize) -> &RangedGet {
        &self.readers[reader].gets[get]
    }

    pub fn slot(&self, reader: usize, get: usize) -> &Slot<F, H> {
        &self.readers[reader].slots[get]
    }

    pub fn stats(&self) -> &RequestStats {
        &self.stats
    }

    /// GETs held (in flight or arrived, not released) over all readers.
    pub fn held(&self) -> usize {
        self.readers.iter().map(|r| r.held).sum()
    }

    /// The first GET that failed past its retries, if any.
    pub fn failure(&self) -> Option<&RequestError> {
        self.failure.as_ref()
    }

    /// Buffers per reader of each size class: `[large, small]`.
    pub fn buffers_per_reader(&self) -> [usize; 2] {
        let small = self.small.map_or(0, |s| s.per_reader as usize);
        [self.prefetch - small, small]
    }

    /// Takes `gets[reader]` as the GETs of the epoch about to start, in place of the last
    /// epoch's (a reshuffled epoch: [`RankIo::load_epoch`]). Between epochs only, when nothing
    /// is held; the trace gets room for every GET of the epoch now, so recording still never
    /// allocates.
    fn load(&mut self, gets: Vec<Vec<RangedGet>>) -> Result<(), RankError> {
        if gets.len() != self.readers.len() || self.held() != 0 {
            return Err(RankError::Engine(format!(
                "an epoch's GETs for {} readers handed to a window of {} readers holding {} GETs \
                 (a bug)",
                gets.len(),
                self.readers.len(),
                self.held()
            )));
        }
        self.stats.trace.reserve(gets.iter().map(Vec::len).sum());
        for (reader, gets) in self.readers.iter_mut().zip(gets) {
            reader.slots = gets.iter().map(|_| Slot::NotIssued).collect();
            reader.class = vec![LARGE as u8; gets.len()];
            reader.gets = gets;
        }
        Ok(())
    }

    fn begin_epoch(&mut self) {
        self.epochs_started += 1;
        let free = self.buffers_per_reader();
        for reader in &mut self.readers {
            reader.issued = 0;
            reader.held = 0;
            reader.free = free;
            reader.slots.iter_mut().for_each(|s| *s = Slot::NotIssued);
        }
    }

    /// The next GET of `reader` to issue and the size class of the buffer it takes, if it has
    /// one, room in its window and a free buffer it fits.
    fn next_to_issue(&self, reader: usize) -> Option<(usize, usize)> {
        let r = &self.readers[reader];
        if r.issued >= r.gets.len() || r.held >= self.prefetch {
            return None;
        }
        let fits_small = self
            .small
            .is_some_and(|s| r.gets[r.issued].len_bytes <= s.get_bytes);
        let class = if fits_small && r.free[SMALL] > 0 {
            SMALL
        } else if r.free[LARGE] > 0 {
            LARGE
        } else {
            return None;
        };
        Some((r.issued, class))
    }

    fn mark_issued(&mut self, reader: usize, get: usize, class: usize, in_flight: F) {
        let r = &mut self.readers[reader];
        debug_assert_eq!(r.issued, get, "GETs are issued in order");
        r.issued += 1;
        r.held += 1;
        r.free[class] -= 1;
        r.class[get] = class as u8;
        r.slots[get] = Slot::InFlight(in_flight);
        if let Some(live) = &self.live {
            live.issued();
        }
        debug_assert_eq!(
            r.held,
            r.slots.iter().filter(|s| s.is_held()).count(),
            "the held count matches the slots"
        );
    }

    /// GET `get` of `reader` arrived whole and [`verified`](Window::verify): it holds `held`
    /// until released. Returns what the transport kept for it while it was in flight.
    pub fn arrived(
        &mut self,
        reader: usize,
        get: usize,
        held: H,
        arrival: Fetched,
    ) -> Result<F, RankError> {
        let slot = std::mem::replace(&mut self.readers[reader].slots[get], Slot::Arrived(held));
        let Slot::InFlight(in_flight) = slot else {
            let state = slot.describe();
            self.readers[reader].slots[get] = slot;
            return Err(schedule_bug("an arrival of", reader, get, state));
        };
        let len_bytes = self.readers[reader].gets[get].len_bytes;
        let sent = self.readers[reader].gets[get].requests();
        if let Some(live) = &self.live {
            live.completed(len_bytes, 0, arrival.total);
        }
        let stats = &mut self.stats;
        stats.requests += 1;
        stats.by_kind.merge(&sent);
        stats.retries += u64::from(arrival.retries);
        stats.bytes_read += len_bytes;
        stats.first_byte.record(arrival.first_byte);
        stats.total.record(arrival.total);
        let by_endpoint = stats.endpoint(arrival.endpoint);
        by_endpoint.requests += 1;
        by_endpoint.bytes_read += len_bytes;
        by_endpoint.total.record(arrival.total);
        // Reserved at set-up for every GET of every epoch: this push does not allocate.
        debug_assert!(stats.trace.len() < stats.trace.capacity());
        stats.trace.push(GetRecord {
            epoch: self.epochs_started.saturating_sub(1),
            reader,
            get,
            attempts: arrival.retries + 1,
            first_byte_us: micros(arrival.first_byte),
            total_us: micros(arrival.total),
            endpoint: arrival.endpoint,
        });
        Ok(in_flight)
    }

    /// Checks the body of GET `get` of `reader`, landed and not yet [`arrived`]
    /// (Window::arrived), when the GET has a check (`--verify`): a Parquet range against what
    /// the file's footer says, a whole object byte for byte against what `ringload generate`
    /// writes for it ([`crate::dataset::check::ObjectRef::compare`], in the window's reused scratch buffer). Every
    /// transport calls it on each body before reporting the arrival, so the step loop never
    /// consumes unchecked bytes. A mismatch fails the GET and ends the rank.
    pub fn verify(
        &mut self,
        reader: usize,
        get: usize,
        endpoint: usize,
        body: &[u8],
    ) -> Result<(), RankError> {
        let ranged = &self.readers[reader].gets[get];
        if ranged.check.is_none() && ranged.object.is_none() {
            return Ok(());
        }
        let started = metrics::thread_cpu();
        let result = match (&ranged.check, &ranged.object) {
            (Some(check), _) => match &ranged.extents {
                Some(extents) => verify::verify_packed(
                    check,
                    extents.as_slice().iter().map(|e| (e.offset, e.len_bytes)),
                    body,
                ),
                None => verify::verify(check, ranged.offset, body),
            }
            .map_err(|m| m.to_string()),
            (None, Some(object)) => object
                .compare(body, &mut self.scratch)
                .map(|bytes| Verified {
                    objects: 1,
                    object_bytes: bytes,
                    ..Verified::default()
                })
                .map_err(|m| m.to_string()),
            (None, None) => Ok(Verified::default()),
        };
        let stats = &mut self.stats.verify;
        stats.cpu += metrics::thread_cpu().saturating_sub(started);
        match result {
            Ok(verified) => {
                stats.gets += 1;
                stats.verified.add(verified);
                Ok(())
            }
            Err(reason) => {
                let error = RequestError::Corrupt {
                    operation: format!(
                        "GET {}{} ({})",
                        self.location,
                        ranged.key,
                        ranged.describe()
                    ),
                    reason,
                };
                let r = &mut self.readers[reader];
                r.slots[get] = Slot::Failed;
                r.let_go(get);
                if let Some(live) = &self.live {
                    live.ended();
                }
                self.stats.errors += 1;
                self.stats.endpoint(endpoint).errors += 1;
                *self.stats.errors_by_cause.entry(error.cause()).or_default() += 1;
                self.failure.get_or_insert(error.clone());
                Err(RankError::Io(error.into()))
            }
        }
    }

    /// GET `get` of `reader` failed after `retries` retries: counted, and kept as the rank's
    /// failure if it is the first. Returns what the transport kept for it.
    pub fn failed(
        &mut self,
        reader: usize,
        get: usize,
        endpoint: usize,
        retries: u32,
        error: RequestError,
    ) -> Result<F, RankError> {
        let r = &mut self.readers[reader];
        let slot = std::mem::replace(&mut r.slots[get], Slot::Failed);
        let Slot::InFlight(in_flight) = slot else {
            let state = slot.describe();
            r.slots[get] = slot;
            return Err(schedule_bug("a failure of", reader, get, state));
        };
        r.let_go(get);
        if let Some(live) = &self.live {
            live.ended();
        }
        self.stats.retries += u64::from(retries);
        self.stats.errors += 1;
        self.stats.endpoint(endpoint).errors += 1;
        *self.stats.errors_by_cause.entry(error.cause()).or_default() += 1;
        self.failure.get_or_insert(error);
        Ok(in_flight)
    }

    /// `connections` kept-alive connections carried bytes after a body and were dropped; the
    /// latest followed the GET `after`.
    pub fn stray_bytes(&mut self, connections: u64, after: &str) {
        self.stats.stray_connections += connections;
        self.stats
            .stray_after
            .get_or_insert_with(|| after.to_string());
    }

    /// An attempt through `endpoint` failed with `cause` and its GET will be tried again.
    pub fn retrying(&mut self, cause: &'static str, endpoint: usize) {
        *self.stats.retries_by_cause.entry(cause).or_default() += 1;
        self.stats.endpoint(endpoint).retries += 1;
        if let Some(live) = &self.live {
            live.retried();
        }
    }

    /// The step loop is done with GET `get` of `reader`: what it held, to give back.
    fn release(&mut self, reader: usize, get: usize) -> Result<H, RankError> {
        let r = &mut self.readers[reader];
        let slot = std::mem::replace(&mut r.slots[get], Slot::Released);
        match slot {
            Slot::Arrived(held) => {
                r.let_go(get);
                Ok(held)
            }
            other => {
                let state = other.describe();
                r.slots[get] = other;
                Err(schedule_bug("a release of", reader, get, state))
            }
        }
    }

    /// The rank's error when a GET failed, else `None`.
    fn failed_error(&self) -> Option<RankError> {
        self.failure.clone().map(|e| RankError::Io(e.into()))
    }
}

/// The step loop asked for a GET in the wrong state. The plan's schedule and the prefetch
/// window make this impossible; it is reported, not panicked on.
fn schedule_bug(what: &str, reader: usize, get: usize, state: &str) -> RankError {
    RankError::Engine(format!(
        "{what} GET {get} of reader {reader}, which is {state}; the plan's schedule and the \
         prefetch window disagree (a bug)"
    ))
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

/// How one engine moves the bytes of the GETs a [`Window`] issues.
pub trait Transport {
    /// What the transport keeps for a GET in flight (e.g. its connection).
    type InFlight: fmt::Debug;
    /// What an arrived GET holds until the step loop releases it (its buffer).
    type Held: fmt::Debug;

    /// Starts GET `get` of `reader` into a buffer of size class `class` ([`LARGE`] or
    /// [`SMALL`]). The window has room for it.
    fn start(
        &mut self,
        window: &Window<Self::InFlight, Self::Held>,
        reader: usize,
        get: usize,
        class: usize,
    ) -> Result<Self::InFlight, RankError>;

    /// Moves I/O forward: returns once something completed, or at `until` at the latest
    /// (a transport may return earlier, e.g. to let the caller check for an abort). Arrivals
    /// and failures are reported to `window`.
    fn progress(
        &mut self,
        window: &mut Window<Self::InFlight, Self::Held>,
        until: Instant,
    ) -> Result<(), RankError>;

    /// The simulated compute: returns after `duration`, GETs going on meanwhile.
    fn compute(
        &mut self,
        window: &mut Window<Self::InFlight, Self::Held>,
        duration: Duration,
    ) -> Result<(), RankError>;

    /// Meets the other ranks; a transport that must keep serving its GETs while it waits
    /// overrides this.
    fn barrier(
        &mut self,
        _window: &mut Window<Self::InFlight, Self::Held>,
        barrier: &StepBarrier,
    ) -> Result<(), RankError> {
        barrier.wait()
    }

    /// Takes back what a released (or never consumed) GET held.
    fn give_back(&mut self, held: Self::Held);

    /// Takes the GETs `window` now holds for the epoch about to start (a reshuffled epoch),
    /// before its barrier: what the transport prepares per GET is prepared again here.
    fn load(&mut self, _window: &Window<Self::InFlight, Self::Held>) -> Result<(), RankError> {
        Ok(())
    }

    /// Checks the transport's own accounting at the end of an epoch, when nothing is held.
    fn check_idle(&self) -> Result<(), RankError> {
        Ok(())
    }

    /// The rank's thread did something else for `pause` ([`RankIo::paused`]).
    fn paused(&mut self, _pause: Duration) {}
}

/// One rank's I/O: its window and its engine's transport.
#[derive(Debug)]
pub struct WindowedRank<'a, T: Transport> {
    pub(crate) window: Window<T::InFlight, T::Held>,
    pub(crate) transport: T,
    barrier: &'a StepBarrier,
    /// The longest a rank waits for one GET before calling the run stalled.
    wait_limit: Duration,
}

impl<'a, T: Transport> WindowedRank<'a, T> {
    pub fn new(
        window: Window<T::InFlight, T::Held>,
        transport: T,
        barrier: &'a StepBarrier,
        wait_limit: Duration,
    ) -> WindowedRank<'a, T> {
        WindowedRank {
            window,
            transport,
            barrier,
            wait_limit,
        }
    }

    /// Issues GETs of `reader` while its window has room.
    fn fill(&mut self, reader: usize) -> Result<(), RankError> {
        while let Some((get, class)) = self.window.next_to_issue(reader) {
            let in_flight = self.transport.start(&self.window, reader, get, class)?;
            self.window.mark_issued(reader, get, class, in_flight);
        }
        Ok(())
    }
}

impl<T: Transport> RankIo for WindowedRank<'_, T> {
    fn start_epoch(&mut self) -> Result<(), RankError> {
        self.window.begin_epoch();
        for reader in 0..self.window.readers() {
            self.fill(reader)?;
        }
        Ok(())
    }

    fn load_epoch(&mut self, gets: Vec<Vec<RangedGet>>) -> Result<(), RankError> {
        self.window.load(gets)?;
        self.transport.load(&self.window)
    }

    fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RankError> {
        let deadline = Instant::now() + self.wait_limit;
        loop {
            // Any GET that failed past its retries ends the rank now, not when it is reached.
            if let Some(error) = self.window.failed_error() {
                return Err(error);
            }
            match self.window.slot(reader, get) {
                Slot::Arrived(_) => return Ok(()),
                Slot::InFlight(_) => {}
                other => {
                    return Err(schedule_bug("a wait for", reader, get, other.describe()));
                }
            }
            if self.barrier.is_aborted() {
                return Err(RankError::Aborted);
            }
            if Instant::now() >= deadline {
                return Err(RankError::Stalled(format!(
                    "GET {} of reader {reader} did not complete within {:?}",
                    self.window.get(reader, get).describe(),
                    self.wait_limit
                )));
            }
            self.transport.progress(&mut self.window, deadline)?;
        }
    }

    fn compute(&mut self, duration: Duration) -> Result<(), RankError> {
        self.transport.compute(&mut self.window, duration)
    }

    fn paused(&mut self, pause: Duration) {
        self.transport.paused(pause);
    }

    fn barrier(&mut self, barrier: &StepBarrier) -> Result<(), RankError> {
        self.transport.barrier(&mut self.window, barrier)
    }

    fn release(&mut self, reader: usize, get: usize) -> Result<(), RankError> {
        let held = self.window.release(reader, get)?;
        self.transport.give_back(held);
        self.fill(reader)
    }

    fn end_epoch(&mut self) -> Result<(), RankError> {
        for reader in 0..self.window.readers() {
            let (issued, gets) = {
                let r = &self.window.readers[reader];
                (r.issued, r.gets.len())
            };
            if issued != gets {
                return Err(RankError::Engine(format!(
                    "reader {reader} issued {issued} of its {gets} GETs this epoch (a bug)"
                )));
            }
            for get in 0..gets {
                if matches!(self.window.slot(reader, get), Slot::InFlight(_)) {
                    self.wait_for(reader, get)?;
                }
                // A partly consumed last GET still holds its buffer.
                if matches!(self.window.slot(reader, get), Slot::Arrived(_)) {
                    let held = self.window.release(reader, get)?;
                    self.transport.give_back(held);
                }
            }
        }
        debug_assert_eq!(self.window.held(), 0, "nothing is held after an epoch");
        self.transport.check_idle()
    }

    fn stats(&self) -> &RequestStats {
        self.window.stats()
    }
}

#[cfg(test)]
mod tests {
    //! The window against a fake transport that completes GETs in the order they were
    //! started, one per `progress`, failing the ones it is told to.
    use super::*;
    use crate::rank::{IoError, IoErrorKind};
    use std::collections::VecDeque;
    use std::sync::Arc;

    const LEN: u64 = 100;

    #[derive(Debug, Default)]
    struct Fake {
        /// Every start, in order: (reader, get).
        started: Vec<(usize, usize)>,
        in_flight: VecDeque<(usize, usize, u32)>,
        given_back: Vec<(usize, usize)>,
        /// GETs that fail past their retries instead of arriving.
        fail: Vec<(usize, usize)>,
        /// Completes nothing (a server that never answers).
        stall: bool,
        /// The most GETs one reader held when the window started another, plus that one.
        most_held: usize,
        /// How often the window asked the transport to check its own accounting.
        idle_checks: std::cell::Cell<usize>,
        /// The size class of every start, in order.
        classes: Vec<usize>,
    }

    fn body(reader: usize, get: usize) -> Vec<u8> {
        vec![(reader * 16 + get) as u8; LEN as usize]
    }

    fn status_503(operation: &str) -> RequestError {
        RequestError::Status {
            operation: operation.into(),
            status: 503,
            code: Some("SlowDown".into()),
            message: None,
            hint: String::new(),
            retry_after: None,
        }
    }

    impl Transport for Fake {
        type InFlight = u32;
        type Held = (usize, usize);

        fn start(
            &mut self,
            window: &Window<u32, (usize, usize)>,
            reader: usize,
            get: usize,
            class: usize,
        ) -> Result<u32, RankError> {
            self.classes.push(class);
            self.most_held = self.most_held.max(window.readers[reader].held + 1);
            self.started.push((reader, get));
            let token = self.started.len() as u32;
            self.in_flight.push_back((reader, get, token));
            Ok(token)
        }

        fn progress(
            &mut self,
            window: &mut Window<u32, (usize, usize)>,
            until: Instant,
        ) -> Result<(), RankError> {
            if self.stall {
                std::thread::sleep(
                    until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(10)),
                );
                return Ok(());
            }
            let Some((reader, get, token)) = self.in_flight.pop_front() else {
                return Ok(());
            };
            let endpoint = reader % 2;
            let kept = if self.fail.contains(&(reader, get)) {
                let error = status_503(&format!("GET {reader}.{get}"));
                window.failed(reader, get, endpoint, 2, error)?
            } else {
                window.verify(reader, get, endpoint, &body(reader, get))?;
                let arrival = Fetched {
                    retries: 1,
                    first_byte: Duration::from_millis(1),
                    total: Duration::from_millis(2),
                    endpoint,
                };
                window.arrived(reader, get, (reader, get), arrival)?
            };
            assert_eq!(kept, token, "the window gives back what the start kept");
            Ok(())
        }

        fn compute(
            &mut self,
            _: &mut Window<u32, (usize, usize)>,
            _: Duration,
        ) -> Result<(), RankError> {
            Ok(())
        }

        fn give_back(&mut self, held: (usize, usize)) {
            self.given_back.push(held);
        }

        fn check_idle(&self) -> Result<(), RankError> {
            self.idle_checks.set(self.idle_checks.get() + 1);
            Ok(())
        }
    }

    fn gets(per_reader: &[usize]) -> Vec<Vec<RangedGet>> {
        per_reader
            .iter()
            .enumerate()
            .map(|(r, &n)| {
                (0..n as u64)
                    .map(|g| RangedGet {
                        whole: false,
                        fetch: None,
                        object: None,
                        key: format!("train/f{r}.parquet"),
                        offset: g * LEN,
                        len_bytes: LEN,
                        check: None,
                        extents: None,
                    })
                    .collect()
            })
            .collect()
    }

    fn rank<'a>(
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        epochs: u32,
        barrier: &'a StepBarrier,
    ) -> WindowedRank<'a, Fake> {
        let window = Window::new(gets, prefetch, None, epochs, "s3://b/".into());
        WindowedRank::new(window, Fake::default(), barrier, Duration::from_secs(5))
    }

    fn barrier() -> StepBarrier {
        StepBarrier::new(1, Duration::from_secs(5))
    }

    /// Consumes every GET of every reader in order, readers round-robin, as a plan's batch
    /// schedule does.
    fn consume_epoch(io: &mut WindowedRank<'_, Fake>, per_reader: &[usize]) {
        io.start_epoch().unwrap();
        let longest = per_reader.iter().copied().max().unwrap_or(0);
        for get in 0..longest {
            for (reader, &n) in per_reader.iter().enumerate() {
                if get < n {
                    io.wait_for(reader, get).unwrap();
                    io.release(reader, get).unwrap();
                }
            }
        }
        io.end_epoch().unwrap();
    }

    #[test]
    fn a_reshuffled_epochs_gets_replace_the_last_ones_between_epochs() {
        let barrier = barrier();
        let per_reader = [3, 2];
        let mut io = rank(gets(&per_reader), 2, 2, &barrier);
        consume_epoch(&mut io, &per_reader);
        let mut next = gets(&per_reader);
        for (r, reader) in next.iter_mut().enumerate() {
            for get in reader.iter_mut() {
                get.key = format!("train/epoch1_{r}.npz");
            }
        }
        io.load_epoch(next).unwrap();
        assert_eq!(io.window.get(1, 1).key, "train/epoch1_1.npz");
        consume_epoch(&mut io, &per_reader);
        let stats = io.stats();
        assert_eq!((stats.requests, stats.trace.len()), (10, 10));
        // As many GETs as epoch 0's: the room reserved at set-up was enough.
        assert_eq!(stats.trace.capacity(), 10);
        // Another reader count, or GETs still held, is a bug, not a hand-over.
        assert!(matches!(
            io.load_epoch(gets(&[1])),
            Err(RankError::Engine(_))
        ));
        io.start_epoch().unwrap();
        assert!(matches!(
            io.load_epoch(gets(&per_reader)),
            Err(RankError::Engine(_))
        ));
    }

    #[test]
    fn an_epoch_starts_with_the_first_prefetch_gets_of_each_reader_in_order() {
        let barrier = barrier();
        let mut io = rank(gets(&[5, 5, 1]), 2, 1, &barrier);
        io.start_epoch().unwrap();
        assert_eq!(
            io.transport.started,
            [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
        );
        assert_eq!(io.window.held(), 5);
        assert!(matches!(io.window.slot(0, 2), Slot::NotIssued));
        assert!(matches!(io.window.slot(1, 1), Slot::InFlight(4)));
    }

    #[test]
    fn a_release_issues_that_readers_next_get_one_for_one() {
        let barrier = barrier();
        let mut io = rank(gets(&[4, 4]), 2, 1, &barrier);
        io.start_epoch().unwrap();
        io.wait_for(0, 0).unwrap();
        // Arrived, not released: nothing new is issued.
        assert_eq!(io.transport.started.len(), 4);
        io.release(0, 0).unwrap();
        assert_eq!(io.transport.started[4..], [(0, 2)]);
        assert_eq!(io.transport.given_back, [(0, 0)]);
        assert!(matches!(io.window.slot(0, 0), Slot::Released));
        // Reader 1's window is its own: reader 0's release issued nothing of it.
        assert_eq!(io.window.readers[1].issued, 2);
        assert_eq!(io.window.held(), 4);
    }

    #[test]
    fn no_reader_ever_holds_more_than_prefetch() {
        for prefetch in 1..=4 {
            let barrier = barrier();
            let per_reader = [7, 3, 5];
            let mut io = rank(gets(&per_reader), prefetch, 1, &barrier);
            consume_epoch(&mut io, &per_reader);
            assert_eq!(io.transport.most_held, prefetch, "prefetch {prefetch}");
            assert_eq!(io.transport.started.len(), 15);
            assert_eq!(io.window.held(), 0);
        }
        // A prefetch of 0 is a window of one, not a window that never issues.
        let barrier = barrier();
        let mut io = rank(gets(&[3, 3]), 0, 1, &barrier);
        io.start_epoch().unwrap();
        assert_eq!(io.transport.started, [(0, 0), (1, 0)]);
    }

    #[test]
    fn with_size_classes_a_large_get_waits_for_a_large_buffer_and_the_epoch_still_ends() {
        let barrier = barrier();
        let sizes = [300, 100, 100, 300, 300, 100, 300];
        let mut reader = gets(&[sizes.len()]);
        for (get, len) in reader[0].iter_mut().zip(sizes) {
            get.len_bytes = len;
        }
        // Three buffers: one large, two that hold GETs up to 150 bytes.
        let small = SmallBuffers {
            per_reader: 2,
            get_bytes: 150,
            buffer_bytes: 4096,
        };
        let window = Window::new(reader, 3, Some(small), 1, "s3://b/".into());
        let mut io = WindowedRank::new(window, Fake::default(), &barrier, Duration::from_secs(5));
        assert_eq!(io.window.buffers_per_reader(), [1, 2]);
        io.start_epoch().unwrap();
        assert_eq!(io.transport.classes, [LARGE, SMALL, SMALL]);
        for get in 0..sizes.len() {
            io.wait_for(0, get).unwrap();
            io.release(0, get).unwrap();
            // Never more large GETs held than large buffers, nor small ones in small buffers.
            let r = &io.window.readers[0];
            assert!(r.free[LARGE] <= 1 && r.free[SMALL] <= 2);
            if get == 1 {
                // GET 4 (300 bytes) waits for GET 3's large buffer though a small one is free.
                assert!(matches!(io.window.slot(0, 4), Slot::NotIssued));
                assert_eq!(r.held, 2);
            }
        }
        io.end_epoch().unwrap();
        let started: Vec<usize> = io.transport.started.iter().map(|&(_, g)| g).collect();
        assert_eq!(started, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            io.transport.classes,
            [LARGE, SMALL, SMALL, LARGE, LARGE, SMALL, LARGE]
        );
        assert_eq!(io.window.held(), 0);
    }

    #[test]
    fn each_arrival_is_recorded_once_in_every_epoch() {
        let barrier = barrier();
        let per_reader = [3, 2];
        let mut io = rank(gets(&per_reader), 2, 2, &barrier);
        consume_epoch(&mut io, &per_reader);
        consume_epoch(&mut io, &per_reader);
        let stats = io.stats();
        assert_eq!(stats.requests, 10);
        assert_eq!(stats.bytes_read, 10 * LEN);
        assert_eq!((stats.retries, stats.errors), (10, 0));
        assert_eq!(stats.trace.len(), 10);
        // The trace was reserved for both epochs up front: recording never grew it.
        assert_eq!(stats.trace.capacity(), 10);
        let epochs: Vec<u32> = stats.trace.iter().map(|t| t.epoch).collect();
        assert_eq!(epochs, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        assert!(stats.trace.iter().all(|t| t.attempts == 2));
        // Reader 0 goes through endpoint 0, reader 1 through endpoint 1.
        let by_endpoint: Vec<u64> = stats.by_endpoint.iter().map(|e| e.requests).collect();
        assert_eq!(by_endpoint, [6, 4]);
        assert_eq!(stats.by_endpoint[1].bytes_read, 4 * LEN);
        assert_eq!(io.transport.given_back.len(), 10);
    }

    #[test]
    fn a_failed_get_ends_the_rank_at_the_next_wait_whichever_get_it_is() {
        let barrier = barrier();
        let mut io = rank(gets(&[3, 3]), 2, 1, &barrier);
        io.transport.fail = vec![(1, 0), (1, 1)];
        io.start_epoch().unwrap();
        io.wait_for(0, 0).unwrap();
        // Completes 0.1, then fails 1.0: the wait for 0.1 (arrived) still ends the rank.
        io.transport
            .progress(&mut io.window, Instant::now())
            .unwrap();
        io.transport
            .progress(&mut io.window, Instant::now())
            .unwrap();
        let error = io.wait_for(0, 1).unwrap_err();
        let expected = status_503("GET 1.0").to_string();
        assert!(
            matches!(&error, RankError::Io(IoError { kind: IoErrorKind::Status, message })
                if *message == expected),
            "{error}"
        );
        assert!(matches!(io.window.slot(1, 0), Slot::Failed));
        // A second failure is counted but does not replace the first.
        io.transport
            .progress(&mut io.window, Instant::now())
            .unwrap();
        assert_eq!(io.window.failure().map(|e| e.to_string()), Some(expected));
        let stats = io.stats();
        // Two arrivals after one retry each, two failures after two.
        assert_eq!((stats.errors, stats.retries), (2, 6));
        assert_eq!(stats.errors_by_cause.get("503"), Some(&2));
        assert_eq!(stats.by_endpoint[1].errors, 2);
        assert_eq!(stats.requests, 2);
    }

    #[test]
    fn a_get_in_the_wrong_state_is_an_error_and_its_slot_is_kept() {
        let barrier = barrier();
        let mut io = rank(gets(&[3]), 1, 1, &barrier);
        io.start_epoch().unwrap();
        let bug = |r: Result<(), RankError>, words: &str| match r {
            Err(RankError::Engine(message)) => {
                assert!(message.contains(words), "{message}");
                assert!(message.ends_with("(a bug)"), "{message}");
            }
            other => panic!("{other:?}"),
        };
        bug(
            io.release(0, 0),
            "a release of GET 0 of reader 0, which is in flight",
        );
        assert!(matches!(io.window.slot(0, 0), Slot::InFlight(1)));
        bug(
            io.wait_for(0, 1),
            "a wait for GET 1 of reader 0, which is not issued yet",
        );
        let arrival = Fetched {
            retries: 0,
            first_byte: Duration::ZERO,
            total: Duration::ZERO,
            endpoint: 0,
        };
        bug(
            io.window.arrived(0, 2, (0, 2), arrival).map(drop),
            "an arrival of GET 2 of reader 0, which is not issued yet",
        );
        assert!(matches!(io.window.slot(0, 2), Slot::NotIssued));
        io.wait_for(0, 0).unwrap();
        io.release(0, 0).unwrap();
        bug(io.release(0, 0), "which is released already");
        bug(
            io.window.failed(0, 0, 0, 0, status_503("GET")).map(drop),
            "a failure of GET 0 of reader 0, which is released already",
        );
        assert_eq!(io.stats().errors, 0, "a misplaced failure is not counted");
    }

    #[test]
    fn the_end_of_an_epoch_waits_for_what_is_in_flight_and_gives_every_buffer_back() {
        let barrier = barrier();
        let mut io = rank(gets(&[3, 2]), 3, 1, &barrier);
        io.start_epoch().unwrap();
        io.wait_for(0, 0).unwrap();
        io.release(0, 0).unwrap();
        // 1.0 and 1.1 consumed in part (arrived, never released); 0.1 and 0.2 still in flight.
        io.wait_for(1, 1).unwrap();
        io.end_epoch().unwrap();
        assert_eq!(io.window.held(), 0);
        let mut back = io.transport.given_back.clone();
        back.sort_unstable();
        assert_eq!(back, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
        assert!(io.transport.in_flight.is_empty());
        assert_eq!(io.transport.idle_checks.get(), 1);
    }

    #[test]
    fn an_epoch_that_left_gets_unissued_ends_with_an_error() {
        let barrier = barrier();
        let mut io = rank(gets(&[3]), 1, 1, &barrier);
        io.start_epoch().unwrap();
        io.wait_for(0, 0).unwrap();
        match io.end_epoch() {
            Err(RankError::Engine(message)) => {
                assert!(
                    message.contains("reader 0 issued 1 of its 3 GETs"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_get_that_never_comes_stalls_the_rank_and_an_abort_stops_the_wait() {
        let barrier = barrier();
        let window = Window::new(gets(&[2]), 1, None, 1, "s3://b/".into());
        let stalled = Fake {
            stall: true,
            ..Fake::default()
        };
        let mut io = WindowedRank::new(window, stalled, &barrier, Duration::from_millis(50));
        io.start_epoch().unwrap();
        let started = Instant::now();
        match io.wait_for(0, 0) {
            Err(RankError::Stalled(message)) => {
                assert!(message.contains("GET bytes=0-99 of reader 0"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_millis(50));
        barrier.abort();
        assert!(matches!(io.wait_for(0, 0), Err(RankError::Aborted)));
    }

    #[test]
    fn a_body_that_fails_its_check_fails_the_get_as_a_content_mismatch() {
        let barrier = barrier();
        let mut per_reader = gets(&[2]);
        for (g, get) in per_reader[0].iter_mut().enumerate() {
            // GET 0's footer hash is right, GET 1's is not.
            let xxh3 = verify::hash(&body(0, g)) + g as u64;
            let chunks: Arc<[verify::Chunk]> = Arc::new([verify::Chunk {
                row_group: 0,
                column: 3,
                offset: get.offset,
                len_bytes: LEN,
                xxh3: Some(xxh3),
            }]);
            get.check = Some(verify::Check::within(&chunks, get.offset, LEN));
        }
        let mut io = rank(per_reader, 2, 1, &barrier);
        io.start_epoch().unwrap();
        io.wait_for(0, 0).unwrap();
        match io.wait_for(0, 1) {
            Err(RankError::Io(IoError {
                kind: IoErrorKind::Corrupt,
                message,
            })) => {
                assert!(
                    message.starts_with("GET s3://b/train/f0.parquet (bytes=100-199): the bytes"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(io.window.slot(0, 1), Slot::Failed));
        let stats = io.stats();
        assert_eq!(
            (stats.verify.gets, stats.verify.verified.hashed_bytes),
            (1, LEN)
        );
        assert_eq!(stats.errors_by_cause.get("content_mismatch"), Some(&1));
        assert_eq!((stats.requests, stats.errors), (1, 1));
    }

    #[test]
    fn retries_and_stray_connections_are_counted_by_cause_and_endpoint() {
        let mut window: Window<u32, ()> = Window::new(gets(&[1]), 1, None, 1, "s3://b/".into());
        window.retrying("503", 2);
        window.retrying("503", 2);
        window.retrying("timeout", 0);
        window.stray_bytes(1, "GET a");
        window.stray_bytes(2, "GET b");
        let stats = window.stats();
        assert_eq!(stats.retries_by_cause.get("503"), Some(&2));
        assert_eq!(stats.retries_by_cause.get("timeout"), Some(&1));
        let retries: Vec<u64> = stats.by_endpoint.iter().map(|e| e.retries).collect();
        assert_eq!(retries, [1, 0, 2]);
        // The first GET such bytes followed is the one named.
        assert_eq!(stats.stray_connections, 3);
        assert_eq!(stats.stray_after.as_deref(), Some("GET a"));
    }
}
