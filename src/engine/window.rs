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

use crate::metrics::{self, GetRecord, RequestStats};
use crate::plan::RangedGet;
use crate::rank::{RankError, RankIo, StepBarrier};
use crate::s3::RequestError;
use crate::verify;

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

#[derive(Debug)]
struct Reader<F, H> {
    gets: Vec<RangedGet>,
    slots: Vec<Slot<F, H>>,
    /// GETs issued this epoch (the index of the next one to issue).
    issued: usize,
    /// GETs in flight or arrived and not released.
    held: usize,
}

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
    epochs_started: u32,
    stats: RequestStats,
    /// The first GET that failed past its retries.
    failure: Option<RequestError>,
    /// `s3://bucket/`, to name a GET in errors.
    location: String,
}

impl<F, H> Window<F, H> {
    /// The window over `gets[reader]`, `prefetch` held per reader, for `epochs` epochs: the
    /// trace is reserved for every GET of every epoch here, so recording never allocates.
    /// `location` (`s3://bucket/`) names the GETs' objects in errors.
    pub fn new(
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        epochs: u32,
        location: String,
    ) -> Window<F, H> {
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
                    gets,
                    issued: 0,
                    held: 0,
                })
                .collect(),
            prefetch: prefetch.max(1),
            epochs_started: 0,
            stats,
            failure: None,
            location,
        }
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

    fn begin_epoch(&mut self) {
        self.epochs_started += 1;
        for reader in &mut self.readers {
            reader.issued = 0;
            reader.held = 0;
            reader.slots.iter_mut().for_each(|s| *s = Slot::NotIssued);
        }
    }

    /// The next GET of `reader` to issue, if it has one and room in its window.
    fn next_to_issue(&self, reader: usize) -> Option<usize> {
        let r = &self.readers[reader];
        (r.issued < r.gets.len() && r.held < self.prefetch).then_some(r.issued)
    }

    fn mark_issued(&mut self, reader: usize, get: usize, in_flight: F) {
        let r = &mut self.readers[reader];
        debug_assert_eq!(r.issued, get, "GETs are issued in order");
        r.issued += 1;
        r.held += 1;
        r.slots[get] = Slot::InFlight(in_flight);
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
        let stats = &mut self.stats;
        stats.requests += 1;
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
    /// (Window::arrived), against what the file's footer says, when the GET has a check
    /// (`--verify`). Every transport calls it on each body before reporting the arrival, so
    /// the step loop never consumes unchecked bytes. A mismatch fails the GET and ends the
    /// rank.
    pub fn verify(
        &mut self,
        reader: usize,
        get: usize,
        endpoint: usize,
        body: &[u8],
    ) -> Result<(), RankError> {
        let ranged = &self.readers[reader].gets[get];
        let Some(check) = &ranged.check else {
            return Ok(());
        };
        let started = metrics::thread_cpu();
        let result = verify::verify(check, ranged.offset, body);
        let stats = &mut self.stats.verify;
        stats.cpu += metrics::thread_cpu().saturating_sub(started);
        match result {
            Ok(verified) => {
                stats.gets += 1;
                stats.verified.add(verified);
                Ok(())
            }
            Err(mismatch) => {
                let error = RequestError::Corrupt {
                    operation: format!(
                        "GET {}{} ({})",
                        self.location,
                        ranged.key,
                        ranged.range_header()
                    ),
                    reason: mismatch.to_string(),
                };
                let r = &mut self.readers[reader];
                r.slots[get] = Slot::Failed;
                r.held -= 1;
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
        r.held -= 1;
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
    }

    /// The step loop is done with GET `get` of `reader`: what it held, to give back.
    fn release(&mut self, reader: usize, get: usize) -> Result<H, RankError> {
        let r = &mut self.readers[reader];
        let slot = std::mem::replace(&mut r.slots[get], Slot::Released);
        match slot {
            Slot::Arrived(held) => {
                r.held -= 1;
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

    /// Starts GET `get` of `reader`. The window has room for it.
    fn start(
        &mut self,
        window: &Window<Self::InFlight, Self::Held>,
        reader: usize,
        get: usize,
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

    /// Checks the transport's own accounting at the end of an epoch, when nothing is held.
    fn check_idle(&self) -> Result<(), RankError> {
        Ok(())
    }
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
        while let Some(get) = self.window.next_to_issue(reader) {
            let in_flight = self.transport.start(&self.window, reader, get)?;
            self.window.mark_issued(reader, get, in_flight);
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
                    self.window.get(reader, get).range_header(),
                    self.wait_limit
                )));
            }
            self.transport.progress(&mut self.window, deadline)?;
        }
    }

    fn compute(&mut self, duration: Duration) -> Result<(), RankError> {
        self.transport.compute(&mut self.window, duration)
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
