//! Rank threads: one per simulated accelerator, each running the same step loop over its
//! engine's I/O.
//!
//! A rank's epoch: all ranks meet at the barrier and start together; the engine issues the
//! first `prefetch` GETs of every reader; then for each step of the plan's batch schedule:
//!
//! 1. **wait** for the step's batch (its GETs complete; almost always one GET of one reader,
//!    readers taken round-robin),
//! 2. **compute** for `computation_time` while reads continue,
//! 3. meet the other ranks at the **barrier** (lockstep, as DLIO's MPI barrier),
//! 4. **release** the buffers whose last row this step consumed; each release lets that reader
//!    issue its next GET (one for one).
//!
//! The loop is the same for every engine; what differs is behind [`RankIo`]. A failing rank
//! aborts the barrier so the others stop instead of waiting for it forever.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub mod checkpoint;
pub mod journal;

use crate::metrics::{CpuReading, RequestStats, StepTimes};
use crate::plan::{RangedGet, RankPlan};

/// A GET that failed for good (past its retries, or with a failure retrying cannot mend), as
/// the step loop sees it: what kind of failure, and the line a user reads. The rank loop names
/// no protocol: engines word their transport's errors into this at their boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IoError {
    pub kind: IoErrorKind,
    /// The whole line: the GET (or the endpoint), what went wrong, a likely fix.
    pub message: String,
}

/// The kinds of [`IoError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoErrorKind {
    /// The server answered with an error status.
    Status,
    /// Nothing listens at the endpoint, or its name does not resolve.
    Unreachable,
    /// The TLS handshake failed (trust, certificate, protocol version).
    Tls,
    /// Something did not come within the time allowed for it.
    Timeout,
    /// The connection broke, or carried bytes past a body.
    Connection,
    /// The answer broke the protocol.
    BadResponse,
    /// `--verify`: the bytes are not what the file holds.
    Corrupt,
    /// A file could not be read or written (missing, unreadable, short, the disk full).
    File,
}

/// Why a rank stopped early.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RankError {
    /// A GET failed after its retries.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Another rank failed first; this one stopped.
    #[error("stopped because another rank failed")]
    Aborted,
    /// The run was told to stop (Ctrl-C or SIGTERM; under `mpirun`, also the launcher ending
    /// the job because another process failed).
    #[error(
        "interrupted (Ctrl-C or SIGTERM; under mpirun also the launcher ending the job when \
         another process failed: see its line) before the last step"
    )]
    Interrupted,
    /// A wait ran past its bound.
    #[error("{0}")]
    Stalled(String),
    /// The engine could not do its part.
    #[error("{0}")]
    Engine(String),
}

/// A rank's I/O, as the step loop sees it. One engine object per rank, used only by that
/// rank's thread.
pub trait RankIo {
    /// Takes `gets[reader]` as the GETs of the next epoch in place of the last one's (an epoch
    /// that reads other files: [`crate::plan::Plan::reshuffled`]). Called between epochs,
    /// before the epoch's barrier: whatever the engine prepares per GET is prepared here,
    /// outside the epoch's clock.
    fn load_epoch(&mut self, gets: Vec<Vec<RangedGet>>) -> Result<(), RankError>;
    /// Issues the epoch's first GETs: up to `prefetch` per reader.
    fn start_epoch(&mut self) -> Result<(), RankError>;
    /// Returns when GET `get` of reader `reader` has arrived whole and checked.
    fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RankError>;
    /// The simulated compute: returns after `duration`, reads going on meanwhile.
    fn compute(&mut self, duration: Duration) -> Result<(), RankError>;
    /// Meets the other ranks. An engine that must keep reaping completions while it waits
    /// overrides this.
    fn barrier(&mut self, barrier: &StepBarrier) -> Result<(), RankError> {
        barrier.wait()
    }
    /// Frees the buffer of a consumed GET; its reader issues its next GET, if any.
    fn release(&mut self, reader: usize, get: usize) -> Result<(), RankError>;
    /// Ends the epoch: releases what a partly consumed last GET still holds and checks that
    /// every GET was issued and consumed.
    fn end_epoch(&mut self) -> Result<(), RankError>;
    /// What the rank's GETs did so far.
    fn stats(&self) -> &RequestStats;
    /// The rank's thread did something else for `pause` (a checkpoint save between steps)
    /// while its GETs stayed in flight: an engine that reads only when its loop runs moves
    /// their timeouts' clocks on by `pause`, the server not being the one that kept them.
    fn paused(&mut self, _pause: Duration) {}
}

/// The checkpoints a training run writes between its steps (`workflow.checkpoint` with
/// `workflow.train`), as the step loop sees them: when (`checkpoint::training::Schedule`'s
/// answers) and the rank's save itself (its objects through its engine's `ObjectIo`). The run
/// implements it; the loop times each save and keeps it out of AU as DLIO does (see
/// [`run_rank`]).
pub trait TrainSaves {
    /// Whether a save follows epoch-local step `step` (from 1) of an epoch of `steps` steps.
    fn after_step(&self, step: u64, steps: u64) -> bool;
    /// Whether a save follows the last step of epoch `epoch` (from 1).
    fn after_epoch(&self, epoch: u32) -> bool;
    /// Writes the rank's objects of the save of epoch `epoch` (from 1) after `step` of its
    /// steps: returns the objects and bytes written (none on a rank that writes nothing).
    fn save(&mut self, epoch: u32, step: u64) -> Result<(u32, u64), RankError>;
}

/// One save of one rank, as the step loop timed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SaveRecord {
    /// The epoch, from 1.
    pub epoch: u32,
    /// The epoch's steps done before it.
    pub after_step: u64,
    /// Its number within the epoch, from 1 (DLIO's block, `save_ckpt{n}`).
    pub number: u32,
    /// When it started, from the epoch's start.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// What this rank wrote (0 and 0 on a rank that writes nothing, as DLIO's ranks ≥ mp).
    pub objects: u32,
    pub bytes: u64,
}

/// A barrier for all ranks that can be aborted and that gives up after a timeout.
///
/// Ranks either block in [`StepBarrier::wait`], or (the io_uring engine, which must keep
/// reaping completions) [`StepBarrier::arrive`] and poll [`StepBarrier::passed`], woken by an
/// eventfd they registered with [`StepBarrier::add_waker`]: the last rank to arrive, and an
/// abort, write to every registered eventfd.
#[derive(Debug)]
pub struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    turned: Condvar,
    timeout: Duration,
    aborted: AtomicBool,
    wakers: Mutex<Vec<Arc<OwnedFd>>>,
    /// With several processes: where the last local arrival asks the coordinator thread to
    /// meet the other hosts before the barrier turns (see `crate::cluster`).
    hosts: Mutex<Option<std::sync::mpsc::Sender<u64>>>,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
}

/// A rank's arrival at the barrier, to ask whether it has turned since.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    generation: u64,
    deadline: Instant,
}

impl StepBarrier {
    pub fn new(parties: usize, timeout: Duration) -> StepBarrier {
        StepBarrier {
            parties,
            state: Mutex::new(BarrierState::default()),
            turned: Condvar::new(),
            timeout,
            aborted: AtomicBool::new(false),
            wakers: Mutex::new(Vec::new()),
            hosts: Mutex::new(None),
        }
    }

    /// Links the barrier to other processes: from now on the last local arrival sends the
    /// barrier's generation to `coordinator`, which turns it with [`StepBarrier::turn`] once
    /// every host has arrived.
    pub fn link_hosts(&self, coordinator: std::sync::mpsc::Sender<u64>) {
        if let Ok(mut hosts) = self.hosts.lock() {
            *hosts = Some(coordinator);
        }
    }

    /// Turns the barrier of `generation`, which every local party has reached (the
    /// coordinator's call, after the hosts met).
    pub fn turn(&self, generation: u64) {
        let Ok(mut state) = self.lock() else { return };
        if state.generation == generation {
            state.arrived = 0;
            state.generation += 1;
            self.turned.notify_all();
            drop(state);
            self.wake_all();
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, BarrierState>, RankError> {
        self.state
            .lock()
            .map_err(|_| RankError::Engine("the step barrier is poisoned".into()))
    }

    /// Registers an eventfd to be written when the barrier turns or is aborted.
    pub fn add_waker(&self, eventfd: Arc<OwnedFd>) {
        if let Ok(mut wakers) = self.wakers.lock() {
            wakers.push(eventfd);
        }
    }

    fn wake_all(&self) {
        if let Ok(wakers) = self.wakers.lock() {
            for fd in wakers.iter() {
                // An eventfd write adds to its counter; it cannot block short of 2^64 - 1.
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    /// Arrives without waiting. The last party to arrive turns the barrier.
    pub fn arrive(&self) -> Result<Arrival, RankError> {
        let mut state = self.lock()?;
        if self.is_aborted() {
            return Err(RankError::Aborted);
        }
        let arrival = Arrival {
            generation: state.generation,
            deadline: Instant::now() + self.timeout,
        };
        state.arrived += 1;
        if state.arrived == self.parties {
            let hosts = self.hosts.lock().ok().and_then(|h| h.clone());
            match hosts {
                // The other hosts are met first; the coordinator turns it.
                Some(coordinator) => {
                    if coordinator.send(state.generation).is_err() {
                        drop(state);
                        self.abort();
                        return Err(RankError::Engine(
                            "the host coordinator is gone (a bug)".into(),
                        ));
                    }
                }
                None => {
                    state.arrived = 0;
                    state.generation += 1;
                    self.turned.notify_all();
                    drop(state);
                    self.wake_all();
                }
            }
        }
        Ok(arrival)
    }

    /// Whether the barrier has turned since `arrival`. Fails if it was aborted, or once the
    /// timeout has passed (and then aborts it for the others).
    pub fn passed(&self, arrival: &Arrival) -> Result<bool, RankError> {
        let state = self.lock()?;
        if state.generation != arrival.generation {
            return Ok(true);
        }
        if self.is_aborted() {
            return Err(RankError::Aborted);
        }
        if Instant::now() >= arrival.deadline {
            drop(state);
            return Err(self.stalled());
        }
        Ok(false)
    }

    fn stalled(&self) -> RankError {
        self.abort();
        RankError::Stalled(format!(
            "ranks did not meet at the step barrier within {:?}; a rank is stuck",
            self.timeout
        ))
    }

    /// Waits until all parties have arrived. Fails if the barrier is aborted, or after the
    /// timeout (and then aborts it for the others).
    pub fn wait(&self) -> Result<(), RankError> {
        let arrival = self.arrive()?;
        let mut state = self.lock()?;
        while state.generation == arrival.generation {
            if self.is_aborted() {
                return Err(RankError::Aborted);
            }
            let now = Instant::now();
            if now >= arrival.deadline {
                drop(state);
                return Err(self.stalled());
            }
            state = self
                .turned
                .wait_timeout(state, arrival.deadline - now)
                .map_err(|_| RankError::Engine("the step barrier is poisoned".into()))?
                .0;
        }
        Ok(())
    }

    /// Makes every present and future wait fail with [`RankError::Aborted`].
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        let guard = self.state.lock();
        self.turned.notify_all();
        drop(guard);
        self.wake_all();
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// Counters every rank updates as it goes, for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub steps_done: AtomicU64,
    /// Simulated compute of every step but each epoch's first, summed over ranks.
    pub compute_ns: AtomicU64,
    /// Each rank's epoch windows so far less their first step's load and compute, summed:
    /// the denominator of [`crate::metrics::au_percent`], as [`epoch_metrics`](crate::metrics::epoch_metrics) takes it.
    pub measured_ns: AtomicU64,
    pub bytes_received: AtomicU64,
    /// The time series' live counters, a shard per local rank ([`crate::timeseries`]).
    pub live: std::sync::Arc<crate::timeseries::Live>,
}

impl Progress {
    /// Counters for `ranks` local ranks.
    pub fn new(ranks: usize) -> Progress {
        Progress {
            live: std::sync::Arc::new(crate::timeseries::Live::new(ranks)),
            ..Progress::default()
        }
    }

    /// Local rank `index`'s handle on the time series' counters.
    pub fn counter(&self, index: usize) -> crate::timeseries::Counter {
        crate::timeseries::Counter::of(&self.live, index)
    }

    /// AU so far, by the result's definition ([`crate::metrics::au_percent`], each epoch's
    /// first step excluded): the progress line's figure.
    pub fn au_percent(&self) -> Option<f64> {
        crate::metrics::au_percent(
            self.compute_ns.load(Ordering::Relaxed),
            self.measured_ns.load(Ordering::Relaxed),
        )
    }
}

/// What a run measured, rank by rank.
#[derive(Debug, Clone)]
pub struct RunMeasurements {
    pub records: Vec<RankRecord>,
    pub stats: Vec<RequestStats>,
    /// From every rank being ready (its I/O set up) to the end of the last rank's last step
    /// (the clock; to the last rank's end if no step completed). GETs that land later (the
    /// dlio loader's overshoot) are outside it.
    pub wall_s: f64,
    /// The CPU clocks when every rank was ready: costs are counted from there.
    pub ready_cpu: CpuReading,
    /// When every rank was ready.
    pub ready_at: Instant,
    /// One sample per interval from `ready_at` to the ranks' end.
    pub timeseries: crate::timeseries::Series,
}

/// What one rank measured.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RankRecord {
    /// `steps[epoch][step]`.
    pub steps: Vec<Vec<StepTimes>>,
    /// Per epoch: from the start (after the epoch barrier) to the end of the last step. GETs
    /// still landing after it (the dlio loader's overshoot) are outside, as DLIO's clock does
    /// not wait for them either.
    pub windows_ns: Vec<u64>,
    /// Per epoch: from the end of the last step to the end of the epoch, while the GETs past
    /// the last step land (the dlio loader's overshoot; about nothing otherwise).
    pub drain_ns: Vec<u64>,
    /// Row-group bytes received when the last step ended (the clock stopped).
    pub bytes_by_last_step: u64,
    /// When the last step ended: where this process's clock (`RunMeasurements::wall_s`) stops.
    #[serde(skip)]
    pub last_step_end: Option<Instant>,
    /// Per epoch, DLIO's blocks when a checkpoint fell between its steps (step mode): each
    /// from its first step, its window from its start (the epoch's, or the save's end) to the
    /// end of its last step. Empty: the epoch is one block, its window `windows_ns`.
    #[serde(default)]
    pub blocks: Vec<Vec<crate::metrics::Block>>,
    /// Every save of the rank, in order (`workflow.checkpoint`).
    #[serde(default)]
    pub saves: Vec<SaveRecord>,
}

impl RankRecord {
    /// DLIO's AU and samples/s of epoch `epoch` (from 0): its one window, or its blocks'
    /// weighted by their steps ([`crate::metrics::blocks_metrics`]).
    pub fn epoch_metrics(
        &self,
        epoch: usize,
        batch_size: u64,
    ) -> Option<crate::metrics::EpochMetrics> {
        let steps = self.steps.get(epoch)?;
        match self.blocks.get(epoch).filter(|b| !b.is_empty()) {
            Some(blocks) => crate::metrics::blocks_metrics(steps, blocks, batch_size),
            None => crate::metrics::epoch_metrics(
                steps,
                self.windows_ns.get(epoch).copied().unwrap_or(0),
                batch_size,
            ),
        }
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// An epoch's own plan and its readers' GETs.
pub type EpochPlan = (RankPlan, Vec<Vec<RangedGet>>);

/// A later epoch's [`EpochPlan`], when it reads other files than epoch 0
/// ([`crate::plan::Plan::reshuffled`]): `later(e)` for epoch e ≥ 1, `None` to walk epoch 0's.
pub type LaterEpochs<'a> = &'a dyn Fn(u32) -> Result<Option<EpochPlan>, RankError>;

/// Runs one rank's epochs into `record`, each step kept as it completes, so that a failed run
/// still has its figures up to the failure. Epoch 0 walks `plan`, each later one `later`'s
/// plan if it has one, handed to the engine before the epoch's barrier. On error the barrier
/// is aborted, so the other ranks stop too.
///
/// With `saves` (checkpoints during training), at DLIO's points (`main.py` `_train`):
/// - epoch mode: after the epoch's last step and its drain, every rank meets at the barrier,
///   then saves; outside the epoch's window, so AU and samples/s never see it;
/// - step mode: after a step's compute and barrier (and its buffers' release), before the
///   next batch is waited for; the step ends a block and the save's end starts the next, so
///   the save is in neither block's window, and the next block's first step is excluded
///   from AU as an epoch's first step is (DLIO's `metric_exclude_start_steps` per block).
#[allow(clippy::too_many_arguments)]
pub fn run_rank(
    plan: &RankPlan,
    later: LaterEpochs<'_>,
    epochs: u32,
    computation_time: Duration,
    io: &mut dyn RankIo,
    barrier: &StepBarrier,
    progress: &Progress,
    record: &mut RankRecord,
    mut saves: Option<&mut dyn TrainSaves>,
) -> Result<(), RankError> {
    for epoch in 0..epochs {
        let mut run = || {
            let own = if epoch == 0 { None } else { later(epoch)? };
            let walked = match own {
                Some((own, gets)) => {
                    io.load_epoch(gets)?;
                    std::borrow::Cow::Owned(own)
                }
                None => std::borrow::Cow::Borrowed(plan),
            };
            let saves = saves.as_mut().map(|s| &mut **s as &mut dyn TrainSaves);
            let loop_ = EpochLoop {
                epoch: epoch + 1,
                computation_time,
                barrier,
                progress,
            };
            run_epoch(&walked, &loop_, io, record, saves)
        };
        run().inspect_err(|_| barrier.abort())?;
    }
    Ok(())
}

/// What every epoch of a rank shares.
struct EpochLoop<'a> {
    /// The epoch, from 1.
    epoch: u32,
    computation_time: Duration,
    barrier: &'a StepBarrier,
    progress: &'a Progress,
}

/// Saves the rank's checkpoint now and records it: the `number`-th save of the epoch after
/// `after_step` of its steps, timed from `epoch_start`.
fn save_now(
    io: &mut dyn RankIo,
    saves: &mut dyn TrainSaves,
    epoch: u32,
    after_step: u64,
    number: u32,
    epoch_start: Instant,
    record: &mut RankRecord,
) -> Result<(), RankError> {
    let start = Instant::now();
    let (objects, bytes) = saves.save(epoch, after_step)?;
    io.paused(start.elapsed());
    record.saves.push(SaveRecord {
        epoch,
        after_step,
        number,
        start_ns: ns(start - epoch_start),
        duration_ns: ns(start.elapsed()),
        objects,
        bytes,
    });
    Ok(())
}

/// One epoch: its steps' times, its window from the start to the end of its last (completed)
/// step, and its drain after that, until the epoch's GETs have all landed.
fn run_epoch(
    plan: &RankPlan,
    at: &EpochLoop<'_>,
    io: &mut dyn RankIo,
    record: &mut RankRecord,
    mut saves: Option<&mut dyn TrainSaves>,
) -> Result<(), RankError> {
    let (computation_time, barrier, progress) = (at.computation_time, at.barrier, at.progress);
    io.barrier(barrier)?;
    let epoch_start = Instant::now();
    record.steps.push(Vec::with_capacity(plan.steps.len()));
    record.windows_ns.push(0);
    record.blocks.push(Vec::new());
    io.start_epoch()?;
    let mut last_end = epoch_start;
    let steps_in_epoch = plan.steps.len() as u64;
    // The current block: its first step and its start (DLIO's `start_block`).
    let (mut block_first, mut block_start) = (0usize, epoch_start);
    let mut saved = 0u32;
    for (k, takes) in plan.steps.iter().enumerate() {
        let loading = Instant::now();
        for take in takes {
            io.wait_for(take.reader, take.get)?;
        }
        let computing = Instant::now();
        io.compute(computation_time)?;
        let meeting = Instant::now();
        io.barrier(barrier)?;
        let done = Instant::now();
        for take in takes.iter().filter(|t| t.releases) {
            io.release(take.reader, take.get)?;
        }
        let step = StepTimes {
            wait_ns: ns(computing - loading),
            compute_ns: ns(meeting - computing),
            barrier_ns: ns(done - meeting),
        };
        let end = Instant::now();
        if let (Some(steps), Some(window)) = (record.steps.last_mut(), record.windows_ns.last_mut())
        {
            steps.push(step);
            *window = ns(end - epoch_start);
        }
        record.last_step_end = Some(end);
        record.bytes_by_last_step = io.stats().bytes_read;
        // The progress line's sums, as epoch_metrics reads the record: the first step's load
        // and compute are not measured, the rest of the window is (`last_end` starts at the
        // epoch's start).
        let (measured_ns, compute_ns) = if k == block_first {
            let first = step.wait_ns + step.compute_ns;
            (ns(end - last_end).saturating_sub(first), 0)
        } else {
            (ns(end - last_end), step.compute_ns)
        };
        last_end = end;
        progress.steps_done.fetch_add(1, Ordering::Relaxed);
        progress.live.waited(step.wait_ns);
        progress.compute_ns.fetch_add(compute_ns, Ordering::Relaxed);
        progress
            .measured_ns
            .fetch_add(measured_ns, Ordering::Relaxed);
        // Step mode: the block ends here, the save runs, the next block starts after it.
        let done = k as u64 + 1;
        if let Some(s) = saves.as_mut().map(|s| &mut **s as &mut dyn TrainSaves)
            && s.after_step(done, steps_in_epoch)
        {
            if let Some(blocks) = record.blocks.last_mut() {
                blocks.push(crate::metrics::Block {
                    first_step: block_first as u32,
                    window_ns: ns(end - block_start),
                });
            }
            saved += 1;
            save_now(io, s, at.epoch, done, saved, epoch_start, record)?;
            block_first = k + 1;
            block_start = Instant::now();
            last_end = block_start;
        }
    }
    if saved > 0
        && let Some(blocks) = record.blocks.last_mut()
    {
        // The last block, empty when the epoch's last step was followed by a save.
        blocks.push(crate::metrics::Block {
            first_step: block_first as u32,
            window_ns: ns(last_end.saturating_duration_since(block_start)),
        });
    }
    // The clock stopped at the end of the last step; what is still in flight (the dlio
    // loader's GETs past it) lands now, outside the window.
    io.end_epoch()?;
    record.drain_ns.push(ns(last_end.elapsed()));
    // Epoch mode: every rank meets, then saves (DLIO's `end_block`, barrier, save).
    if let Some(s) = saves
        && s.after_epoch(at.epoch)
    {
        io.barrier(barrier)?;
        save_now(io, s, at.epoch, steps_in_epoch, 1, epoch_start, record)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// An engine that records what the step loop asks of it, and can fail one wait.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
        fail_at_wait: Option<usize>,
        waits: usize,
        stats: RequestStats,
        /// Slept in the first wait (a slow first batch) and in every compute.
        first_wait: Duration,
        compute: Duration,
        /// Slept in `end_epoch`: GETs past the last step still landing.
        drain: Duration,
    }

    impl RankIo for Recorder {
        fn load_epoch(&mut self, gets: Vec<Vec<RangedGet>>) -> Result<(), RankError> {
            let counts: Vec<usize> = gets.iter().map(Vec::len).collect();
            self.calls.push(format!("load {counts:?}"));
            Ok(())
        }
        fn start_epoch(&mut self) -> Result<(), RankError> {
            self.calls.push("start".into());
            Ok(())
        }
        fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RankError> {
            self.waits += 1;
            if self.fail_at_wait == Some(self.waits) {
                return Err(RankError::Engine("injected".into()));
            }
            if self.waits == 1 {
                std::thread::sleep(self.first_wait);
            }
            self.calls.push(format!("wait {reader}.{get}"));
            Ok(())
        }
        fn compute(&mut self, _: Duration) -> Result<(), RankError> {
            std::thread::sleep(self.compute);
            self.calls.push("compute".into());
            Ok(())
        }
        fn barrier(&mut self, barrier: &StepBarrier) -> Result<(), RankError> {
            self.calls.push("barrier".into());
            barrier.wait()
        }
        fn release(&mut self, reader: usize, get: usize) -> Result<(), RankError> {
            self.calls.push(format!("release {reader}.{get}"));
            Ok(())
        }
        fn end_epoch(&mut self) -> Result<(), RankError> {
            std::thread::sleep(self.drain);
            self.calls.push("end".into());
            Ok(())
        }
        fn stats(&self) -> &RequestStats {
            &self.stats
        }
    }

    fn take(reader: usize, get: usize, releases: bool) -> crate::plan::BatchPart {
        crate::plan::BatchPart {
            reader,
            get,
            rows: 24,
            releases,
        }
    }

    /// Two steps: the first takes half of GET 0.0, the second the rest of it and half of 1.0
    /// (a batch split across readers).
    fn two_steps() -> RankPlan {
        RankPlan {
            rank: 0,
            readers: Vec::new(),
            steps: vec![
                vec![take(0, 0, false)],
                vec![take(0, 0, true), take(1, 0, false)],
            ],
            get_count: 2,
            row_groups: 2,
            bytes: 0,
            max_gets_held_per_reader: 1,
            overshoot_gets: 0,
            overshoot_bytes: 0,
        }
    }

    /// Saves after the steps `steps` list (step mode) or after epochs `epochs` (epoch mode),
    /// each taking `takes`.
    struct FakeSaves {
        steps: Vec<u64>,
        epochs: Vec<u32>,
        takes: Duration,
        done: Vec<(u32, u64)>,
    }

    impl TrainSaves for FakeSaves {
        fn after_step(&self, step: u64, _: u64) -> bool {
            self.steps.contains(&step)
        }
        fn after_epoch(&self, epoch: u32) -> bool {
            self.epochs.contains(&epoch)
        }
        fn save(&mut self, epoch: u32, step: u64) -> Result<(u32, u64), RankError> {
            std::thread::sleep(self.takes);
            self.done.push((epoch, step));
            Ok((1, 10240))
        }
    }

    #[test]
    fn saves_fall_where_dlio_puts_them_and_outside_every_window() {
        let run = |saves: &mut FakeSaves| {
            let barrier = StepBarrier::new(1, Duration::from_secs(5));
            let mut io = Recorder {
                compute: Duration::from_millis(5),
                ..Recorder::default()
            };
            let mut record = RankRecord::default();
            run_rank(
                &two_steps(),
                &|_| Ok(None),
                2,
                Duration::ZERO,
                &mut io,
                &barrier,
                &Progress::default(),
                &mut record,
                Some(saves),
            )
            .unwrap();
            (io.calls, record)
        };
        // Epoch mode: after epoch 2's end, a barrier, then the save; the window stops before.
        let mut epochs = FakeSaves {
            steps: vec![],
            epochs: vec![2],
            takes: Duration::from_millis(30),
            done: vec![],
        };
        let (calls, record) = run(&mut epochs);
        assert_eq!(epochs.done, [(2, 2)]);
        assert_eq!(&calls[calls.len() - 2..], ["end", "barrier"]);
        let s = record.saves[0];
        assert_eq!(
            (s.epoch, s.after_step, s.number, s.objects, s.bytes),
            (2, 2, 1, 1, 10240)
        );
        assert!(s.duration_ns >= 30_000_000 && record.windows_ns[1] < 30_000_000);
        assert!(record.blocks.iter().all(Vec::is_empty));
        // Step mode: a save after step 1 of each epoch cuts it in two blocks, the second
        // starting after the save; the epoch's figures are the blocks'.
        let mut steps = FakeSaves {
            steps: vec![1],
            epochs: vec![],
            takes: Duration::from_millis(30),
            done: vec![],
        };
        let (_, record) = run(&mut steps);
        assert_eq!(steps.done, [(1, 1), (2, 1)]);
        for blocks in &record.blocks {
            assert_eq!(blocks.len(), 2);
            assert_eq!((blocks[0].first_step, blocks[1].first_step), (0, 1));
            assert!(blocks[1].window_ns < 30_000_000, "{blocks:?}");
        }
        // Blocks of one step each have nothing measured: the epoch's AU is DLIO's 0.
        let m = record.epoch_metrics(0, 48).unwrap();
        assert_eq!((m.au_percent, m.samples_per_s), (0.0, 0.0));
    }

    #[test]
    fn the_step_loop_waits_computes_meets_then_releases() {
        let barrier = StepBarrier::new(1, Duration::from_secs(5));
        let progress = Progress::default();
        let mut io = Recorder::default();
        let mut record = RankRecord::default();
        run_rank(
            &two_steps(),
            &|_| Ok(None),
            2,
            Duration::ZERO,
            &mut io,
            &barrier,
            &progress,
            &mut record,
            None,
        )
        .unwrap();
        let epoch = [
            "barrier",
            "start",
            "wait 0.0",
            "compute",
            "barrier",
            "wait 0.0",
            "wait 1.0",
            "compute",
            "barrier",
            "release 0.0",
            "end",
        ];
        let expected: Vec<&str> = epoch.iter().chain(epoch.iter()).copied().collect();
        assert_eq!(io.calls, expected);
        assert_eq!((record.steps.len(), record.windows_ns.len()), (2, 2));
        assert_eq!(record.steps[1].len(), 2);
        assert_eq!(progress.steps_done.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_reshuffled_epoch_is_handed_over_before_its_barrier_and_walked() {
        // Epoch 1 has its own plan: one step over GET 2 of reader 1. Its GETs reach the
        // engine before the epoch's barrier (outside its clock), and its steps are walked.
        let barrier = StepBarrier::new(1, Duration::from_secs(5));
        let mut io = Recorder::default();
        let later = |epoch: u32| -> Result<Option<EpochPlan>, RankError> {
            assert_eq!(epoch, 1, "epoch 0 walks the plan it was given");
            let own = RankPlan {
                steps: vec![vec![take(1, 2, true)]],
                ..two_steps()
            };
            Ok(Some((own, vec![Vec::new(), Vec::new()])))
        };
        let mut record = RankRecord::default();
        run_rank(
            &two_steps(),
            &later,
            2,
            Duration::ZERO,
            &mut io,
            &barrier,
            &Progress::default(),
            &mut record,
            None,
        )
        .unwrap();
        let epoch_1 = &io.calls[io.calls.len() - 8..];
        assert_eq!(
            epoch_1,
            [
                "load [0, 0]",
                "barrier",
                "start",
                "wait 1.2",
                "compute",
                "barrier",
                "release 1.2",
                "end"
            ]
        );
        assert_eq!(
            io.calls[..2],
            ["barrier", "start"],
            "no hand-over for epoch 0"
        );
        assert_eq!(record.steps[1].len(), 1);
    }

    #[test]
    fn the_progress_au_is_the_results_au_first_step_excluded() {
        // A slow first batch (the study's 91.6% against 99.97%): AU counted from the start
        // would be about 100 × 80 / 180 = 44%; both figures exclude it.
        let barrier = StepBarrier::new(1, Duration::from_secs(5));
        let progress = Progress::default();
        let mut io = Recorder {
            first_wait: Duration::from_millis(100),
            compute: Duration::from_millis(20),
            ..Recorder::default()
        };
        let plan = RankPlan {
            steps: vec![vec![take(0, 0, false)]; 5],
            ..two_steps()
        };
        let mut record = RankRecord::default();
        run_rank(
            &plan,
            &|_| Ok(None),
            1,
            Duration::ZERO,
            &mut io,
            &barrier,
            &progress,
            &mut record,
            None,
        )
        .unwrap();
        let result = crate::metrics::epoch_metrics(&record.steps[0], record.windows_ns[0], 48)
            .unwrap()
            .au_percent;
        let live = progress.au_percent().unwrap();
        assert!(result > 90.0, "{result}");
        assert!((live - result).abs() < 0.5, "live {live}, result {result}");
    }

    #[test]
    fn the_window_closes_at_the_last_step_and_the_drain_is_kept_apart() {
        // GETs past the last step take 300 ms to land: the epoch's window (AU, samples/s)
        // ends before them; the drain records the wait.
        let drain = Duration::from_millis(300);
        let barrier = StepBarrier::new(1, Duration::from_secs(5));
        let mut io = Recorder {
            drain,
            ..Recorder::default()
        };
        let mut record = RankRecord::default();
        let started = Instant::now();
        run_rank(
            &two_steps(),
            &|_| Ok(None),
            2,
            Duration::ZERO,
            &mut io,
            &barrier,
            &Progress::default(),
            &mut record,
            None,
        )
        .unwrap();
        let ended = Instant::now();
        assert_eq!(record.drain_ns.len(), 2);
        for (window, drain_ns) in record.windows_ns.iter().zip(&record.drain_ns) {
            assert!(*drain_ns >= ns(drain), "{drain_ns}");
            // Two epochs, each a window then its drain, fit in the time the rank ran.
            assert!(
                *window < *drain_ns,
                "window {window} ns, drain {drain_ns} ns"
            );
        }
        let total: u64 = record.windows_ns.iter().chain(&record.drain_ns).sum();
        assert!(total <= ns(ended - started));
        // The clock stops at the last step, before the last drain.
        let stop = record.last_step_end.unwrap();
        assert!(ended - stop >= drain);
    }

    #[test]
    fn a_failing_rank_aborts_the_barrier_for_the_others() {
        let barrier = StepBarrier::new(2, Duration::from_secs(30));
        let progress = Progress::default();
        std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                let mut io = Recorder::default();
                run_rank(
                    &two_steps(),
                    &|_| Ok(None),
                    1,
                    Duration::ZERO,
                    &mut io,
                    &barrier,
                    &progress,
                    &mut RankRecord::default(),
                    None,
                )
            });
            let mut failing = Recorder {
                fail_at_wait: Some(2),
                ..Recorder::default()
            };
            let mut record = RankRecord::default();
            let mine = run_rank(
                &two_steps(),
                &|_| Ok(None),
                1,
                Duration::ZERO,
                &mut failing,
                &barrier,
                &progress,
                &mut record,
                None,
            );
            assert!(matches!(mine, Err(RankError::Engine(_))));
            // The step completed before the failure is kept, with its window.
            assert_eq!(record.steps.len(), 1);
            assert_eq!(record.steps[0].len(), 1);
            assert!(record.windows_ns[0] > 0);
            assert!(matches!(other.join().unwrap(), Err(RankError::Aborted)));
        });
    }

    #[test]
    fn barrier_releases_all_parties_each_generation() {
        let barrier = Arc::new(StepBarrier::new(3, Duration::from_secs(10)));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let b = barrier.clone();
                std::thread::spawn(move || (0..50).map(|_| b.wait()).collect::<Vec<_>>())
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap().iter().all(Result::is_ok));
        }
    }

    #[test]
    fn an_aborted_or_abandoned_barrier_does_not_hang() {
        let barrier = Arc::new(StepBarrier::new(2, Duration::from_secs(30)));
        let b = barrier.clone();
        let waiter = std::thread::spawn(move || b.wait());
        std::thread::sleep(Duration::from_millis(50));
        barrier.abort();
        assert!(matches!(waiter.join().unwrap(), Err(RankError::Aborted)));
        assert!(matches!(barrier.wait(), Err(RankError::Aborted)));

        let lonely = StepBarrier::new(2, Duration::from_millis(50));
        assert!(matches!(lonely.wait(), Err(RankError::Stalled(_))));
        assert!(lonely.is_aborted());
    }
}
