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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::engine::RequestStats;
use crate::metrics::StepTimes;
use crate::plan::RankPlan;
use crate::s3::RequestError;

/// Why a rank stopped early.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// A GET failed after its retries.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Another rank failed first; this one stopped.
    #[error("stopped because another rank failed")]
    Aborted,
    /// A wait ran past its bound.
    #[error("{0}")]
    Stalled(String),
    /// The engine could not do its part.
    #[error("{0}")]
    Engine(String),
}

impl RunError {
    /// The exit code of a run that ended with this error: it started, so 3.
    pub fn exit_code(&self) -> u8 {
        crate::exit::FAILED
    }
}

/// A rank's I/O, as the step loop sees it. One engine object per rank, used only by that
/// rank's thread.
pub trait RankIo {
    /// Issues the epoch's first GETs: up to `prefetch` per reader.
    fn start_epoch(&mut self) -> Result<(), RunError>;
    /// Returns when GET `get` of reader `reader` has arrived whole and checked.
    fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RunError>;
    /// The simulated compute: returns after `duration`, reads going on meanwhile.
    fn compute(&mut self, duration: Duration) -> Result<(), RunError>;
    /// Meets the other ranks. An engine that must keep reaping completions while it waits
    /// overrides this.
    fn barrier(&mut self, barrier: &StepBarrier) -> Result<(), RunError> {
        barrier.wait()
    }
    /// Frees the buffer of a consumed GET; its reader issues its next GET, if any.
    fn release(&mut self, reader: usize, get: usize) -> Result<(), RunError>;
    /// Ends the epoch: releases what a partly consumed last GET still holds and checks that
    /// every GET was issued and consumed.
    fn end_epoch(&mut self) -> Result<(), RunError>;
    /// What the rank's GETs did so far.
    fn stats(&self) -> &RequestStats;
}

/// A barrier for all ranks that can be aborted and that gives up after a timeout.
#[derive(Debug)]
pub struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    turned: Condvar,
    timeout: Duration,
    aborted: AtomicBool,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
}

impl StepBarrier {
    pub fn new(parties: usize, timeout: Duration) -> StepBarrier {
        StepBarrier {
            parties,
            state: Mutex::new(BarrierState::default()),
            turned: Condvar::new(),
            timeout,
            aborted: AtomicBool::new(false),
        }
    }

    /// Waits until all parties have arrived. Fails if the barrier is aborted, or after the
    /// timeout (and then aborts it for the others).
    pub fn wait(&self) -> Result<(), RunError> {
        let deadline = Instant::now() + self.timeout;
        let mut state = self
            .state
            .lock()
            .map_err(|_| RunError::Engine("the step barrier is poisoned".into()))?;
        if self.is_aborted() {
            return Err(RunError::Aborted);
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.turned.notify_all();
            return Ok(());
        }
        let generation = state.generation;
        while state.generation == generation {
            if self.is_aborted() {
                return Err(RunError::Aborted);
            }
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                self.abort();
                return Err(RunError::Stalled(format!(
                    "ranks did not meet at the step barrier within {:?}; a rank is stuck",
                    self.timeout
                )));
            }
            state = self
                .turned
                .wait_timeout(state, deadline - now)
                .map_err(|_| RunError::Engine("the step barrier is poisoned".into()))?
                .0;
        }
        Ok(())
    }

    /// Makes every present and future wait fail with [`RunError::Aborted`].
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        let _guard = self.state.lock();
        self.turned.notify_all();
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// Counters every rank updates as it goes, for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub steps_done: AtomicU64,
    pub compute_ns: AtomicU64,
    pub bytes_received: AtomicU64,
}

/// What one rank measured.
#[derive(Debug, Clone, Default)]
pub struct RankRecord {
    /// `steps[epoch][step]`.
    pub steps: Vec<Vec<StepTimes>>,
    /// Per epoch: from the start (after the epoch barrier) to the end of the last step.
    pub windows_ns: Vec<u64>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Runs one rank's epochs. On error the barrier is aborted, so the other ranks stop too.
pub fn run_rank(
    plan: &RankPlan,
    epochs: u32,
    computation_time: Duration,
    io: &mut dyn RankIo,
    barrier: &StepBarrier,
    progress: &Progress,
) -> Result<RankRecord, RunError> {
    let result = step_loop(plan, epochs, computation_time, io, barrier, progress);
    if result.is_err() {
        barrier.abort();
    }
    result
}

fn step_loop(
    plan: &RankPlan,
    epochs: u32,
    computation_time: Duration,
    io: &mut dyn RankIo,
    barrier: &StepBarrier,
    progress: &Progress,
) -> Result<RankRecord, RunError> {
    let mut record = RankRecord::default();
    for _ in 0..epochs {
        io.barrier(barrier)?;
        let epoch_start = Instant::now();
        io.start_epoch()?;
        let mut steps = Vec::with_capacity(plan.steps.len());
        for takes in &plan.steps {
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
            steps.push(step);
            progress.steps_done.fetch_add(1, Ordering::Relaxed);
            progress
                .compute_ns
                .fetch_add(step.compute_ns, Ordering::Relaxed);
        }
        io.end_epoch()?;
        record.windows_ns.push(ns(epoch_start.elapsed()));
        record.steps.push(steps);
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
        assert!(matches!(waiter.join().unwrap(), Err(RunError::Aborted)));
        assert!(matches!(barrier.wait(), Err(RunError::Aborted)));

        let lonely = StepBarrier::new(2, Duration::from_millis(50));
        assert!(matches!(lonely.wait(), Err(RunError::Stalled(_))));
        assert!(lonely.is_aborted());
    }
}
