//! Running a plan: rank threads over an engine, a progress line, and the measurements that
//! become the summary.
//!
//! The caller has already resolved the plan (footers read, memory budget checked) and started
//! whatever the run needs (an in-process server). Here: the engine is built, one thread per rank
//! is started and pinned, each sets up its I/O (the io_uring engine maps, pre-faults, locks and
//! registers its buffer pool), and when every rank is ready the clock starts: the process's CPU
//! time is read, and every rank runs [`crate::rank::run_rank`].
//!
//! Around it: [`session`] takes `ringload run` from its flags to its exit code (prepare:
//! store, catalog, plan, engine; execute: this module's run, the hosts' merge, the summary and
//! its files); `crate::setup` sets up what a run or sweep reads from and which engine it
//! takes.

pub mod checkpoint;
mod checkpoint_after;
pub mod checkpoint_hosts;
mod checkpoint_list;
mod checkpoint_store;
mod checkpoint_uploads;
pub mod objects;
pub mod prepare;
pub mod request;
pub mod saves;
pub mod session;
pub mod source;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::affinity;
use crate::checkpoint::training::TrainCheckpointPlan;
use crate::engine::{Engine, EngineKind, Reach};
use crate::metrics::{CpuReading, RequestStats};
use crate::plan::Plan;
use crate::rank::{
    EpochPlan, Progress, RankError, RankRecord, RunMeasurements, StepBarrier, run_rank,
};
use crate::s3::RetryPolicy;

/// How a run is carried out, beyond its plan.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub engine: EngineKind,
    /// Worker threads of the baseline engine's runtime.
    pub engine_threads: usize,
    /// Print a progress line on stderr.
    pub show_progress: bool,
    /// The CPUs rank threads are pinned to, round-robin (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Set (by a signal) to stop the run: every rank stops within [`INTERRUPT_POLL`].
    pub interrupt: Arc<AtomicBool>,
    /// The plan's ranks this process runs (all of them in one process; a share of them under
    /// MPI, with global numbers).
    pub ranks: std::ops::Range<usize>,
    /// Other processes run the other ranks: each step barrier also meets them
    /// (`crate::cluster`).
    pub hosts: bool,
    /// The time series' interval (`--sample-interval`).
    pub sample_interval: Duration,
}

/// How often the run looks at [`RunConfig::interrupt`].
pub const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// A run that failed: the first rank's error (the root cause), and what was measured up to it
/// when the clock had started.
#[derive(Debug)]
pub struct RunFailure {
    pub error: RankError,
    pub partial: Option<RunMeasurements>,
}

/// Runs the plan's ranks against the store `reach` names (an S3 bucket or a directory), with `checkpoints` written between their
/// steps when the workload checkpoints during training. The first rank error stops every rank
/// and is returned with the measurements up to it.
pub fn run_ranks(
    plan: &Plan,
    checkpoints: Option<&TrainCheckpointPlan>,
    reach: Reach<'_>,
    config: &RunConfig,
    server_cpu_s: &(dyn Fn() -> f64 + Sync),
) -> Result<RunMeasurements, Box<RunFailure>> {
    let not_started = |error| {
        Box::new(RunFailure {
            error,
            partial: None,
        })
    };
    let np = config.ranks.len();
    let policy = reach.policy();
    let computation_time = Duration::from_secs_f64(plan.settings.computation_time_s);
    // The longest a rank may legitimately keep the others at the barrier: one GET with all of
    // its attempts and backoffs, and a compute step.
    let barrier_timeout = policy.timeout * (policy.retries + 1)
        + computation_time
        + Duration::from_secs(60)
        + save_timeout(checkpoints, &policy);
    // Raised when the barrier is aborted: a rank's save stops between parts.
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = StepBarrier::new(np, barrier_timeout);
    let (to_coordinator, coordinator) = std::sync::mpsc::channel::<u64>();
    if config.hosts {
        barrier.link_hosts(to_coordinator);
    }
    let progress = Progress::new(np);
    let engine = Engine::prepare(
        config.engine,
        reach,
        plan,
        config.ranks.clone(),
        config.engine_threads,
    )
    .map_err(not_started)?;
    let epochs = plan.settings.epochs;
    let total_steps = plan.steps_per_rank * np as u64 * u64::from(epochs);
    let done = std::sync::atomic::AtomicBool::new(false);
    // When the last rank became ready: (instant, process CPU, server CPU).
    let ready: OnceLock<(Instant, CpuReading)> = OnceLock::new();
    // Each rank's record and request stats so far, and how it ended.
    type RankResult = RankOutcome<RankRecord, RequestStats>;
    let (results, timeseries) = std::thread::scope(|scope| {
        let sampler = spawn_sampler(scope, config, &progress, &ready, &done);
        let ranks: Vec<_> = config
            .ranks
            .clone()
            .map(|rank| {
                let gets = plan.ranged_gets(&plan.ranks[rank]);
                let (engine, barrier, progress, ready) = (&engine, &barrier, &progress, &ready);
                let stop = &stop;
                let local = rank - config.ranks.start;
                let cpu = (!config.cpus.is_empty()).then(|| config.cpus[local % config.cpus.len()]);
                std::thread::Builder::new()
                    .name(format!("ringload-rank-{rank}"))
                    .spawn_scoped(scope, move || -> RankResult {
                        let mut record = RankRecord::default();
                        let set_up = || {
                            if let Some(cpu) = cpu {
                                affinity::pin(cpu).map_err(RankError::Engine)?;
                            }
                            let io = engine.rank(rank, gets, plan, barrier, progress)?;
                            let saves = match checkpoints {
                                Some(c) => Some(rank_saves(engine, c, rank, stop)?),
                                None => None,
                            };
                            Ok((io, saves))
                        };
                        let (mut io, mut saves) = match set_up() {
                            Ok(set) => set,
                            Err(e) => {
                                barrier.abort();
                                return (record, RequestStats::default(), Err(e));
                            }
                        };
                        // Every rank set up: the clock starts.
                        let ran = barrier.wait().and_then(|()| {
                            ready.get_or_init(|| (Instant::now(), CpuReading::now(server_cpu_s())));
                            run_rank(
                                &plan.ranks[rank],
                                &|epoch| reshuffled(plan, epoch, rank),
                                epochs,
                                computation_time,
                                io.as_mut(),
                                barrier,
                                progress,
                                &mut record,
                                saves
                                    .as_mut()
                                    .map(|s| s as &mut dyn crate::rank::TrainSaves),
                            )
                        });
                        if ran.is_err()
                            && let Some(io) = saves.as_mut().and_then(|s| s.io.as_mut())
                        {
                            io.abort_open();
                        }
                        (record, io.stats().clone(), ran)
                    })
            })
            .collect();
        if config.show_progress {
            let (progress, done, ready) = (&progress, &done, &ready);
            scope.spawn(move || show_progress(progress, done, total_steps, ready));
        }
        spawn_watchers(scope, config, &barrier, &done, coordinator);
        if checkpoints.is_some() {
            spawn_stopper(scope, &barrier, &done, &stop);
        }
        let results: Vec<RankResult> = join_ranks(ranks, &barrier);
        done.store(true, Ordering::Relaxed);
        (results, sampler.join().unwrap_or_default())
    });
    let ended = Instant::now();
    engine.shutdown();
    // The root cause, not the "stopped because another rank failed" of the others.
    let error = root_cause(&results, config.interrupt.load(Ordering::Relaxed));
    let (records, stats): (Vec<RankRecord>, _) =
        results.into_iter().map(|(r, s, _)| (r, s)).unzip();
    // The clock stops at the end of the last rank's last step: GETs landing after it (the
    // dlio loader's overshoot) are not waited for, as DLIO's clock does not.
    let clock_stop = records
        .iter()
        .filter_map(|r| r.last_step_end)
        .max()
        .unwrap_or(ended);
    // Measurements exist once the clock started, failed run or not.
    let partial = ready
        .get()
        .copied()
        .map(|(ready_at, ready_cpu)| RunMeasurements {
            records,
            stats,
            wall_s: clock_stop.saturating_duration_since(ready_at).as_secs_f64(),
            ready_cpu,
            ready_at,
            timeseries,
        });
    match (error, partial) {
        (None, Some(measured)) => Ok(measured),
        (Some(error), partial) => Err(Box::new(RunFailure { error, partial })),
        (None, None) => Err(not_started(RankError::Engine(
            "the ranks finished without starting (a bug)".into(),
        ))),
    }
}

/// The longest a save may keep the other ranks at the barrier: each part of the most any rank
/// writes, with all of its attempts, one after the other (0 without checkpoints).
fn save_timeout(checkpoints: Option<&TrainCheckpointPlan>, policy: &RetryPolicy) -> Duration {
    checkpoints.map_or(Duration::ZERO, |c| {
        let bytes: u64 = c
            .objects
            .ranks
            .iter()
            .map(|objects| objects.iter().map(|o| o.bytes).sum::<u64>())
            .max()
            .unwrap_or(0);
        let parts = bytes / c.objects.io.part_bytes.max(1) + 1;
        policy.timeout * (policy.retries + 1) * parts.min(1 << 16) as u32
    })
}

/// The thread that raises `stop` once the barrier is aborted, so a save stops between parts.
fn spawn_stopper<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    barrier: &'scope StepBarrier,
    done: &'scope AtomicBool,
    stop: &'scope Arc<AtomicBool>,
) {
    scope.spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if barrier.is_aborted() {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(INTERRUPT_POLL);
        }
    });
}

/// Rank `rank`'s saves: its checkpoint I/O set up (buffers for the plan's requests) when it
/// writes anything, stopped by `stop`.
fn rank_saves<'a>(
    engine: &'a Engine,
    checkpoints: &'a TrainCheckpointPlan,
    rank: usize,
    stop: &Arc<AtomicBool>,
) -> Result<saves::RankSaves<'a>, RankError> {
    let io = if saves::RankSaves::writes(checkpoints, rank) {
        let mut io = engine.checkpoint(rank, checkpoints.objects.io)?;
        io.set_stop(Arc::clone(stop));
        Some(io)
    } else {
        None
    };
    Ok(saves::RankSaves::new(checkpoints, rank, io))
}

/// A rank thread's result: its record, its stats, and how it ended.
pub(crate) type RankOutcome<R, S> = (R, S, Result<(), RankError>);

/// Joins the rank threads in rank order. A thread that panicked or could not start aborts the
/// barrier (so the others stop) and counts as that failure.
pub(crate) fn join_ranks<R: Default, S: Default>(
    spawned: Vec<std::io::Result<std::thread::ScopedJoinHandle<'_, RankOutcome<R, S>>>>,
    barrier: &StepBarrier,
) -> Vec<RankOutcome<R, S>> {
    let failed = |e: RankError| (R::default(), S::default(), Err(e));
    spawned
        .into_iter()
        .map(|spawned| match spawned {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                barrier.abort();
                failed(RankError::Engine("a rank thread panicked".into()))
            }),
            Err(e) => {
                barrier.abort();
                failed(RankError::Engine(format!(
                    "cannot start a rank thread: {e}"
                )))
            }
        })
        .collect()
}

/// The root cause of a failed run: the first error that is not "stopped because another rank
/// failed", and an abort that the interrupt caused is the interrupt.
pub(crate) fn root_cause<R, S>(
    results: &[RankOutcome<R, S>],
    interrupted: bool,
) -> Option<RankError> {
    let errors = || results.iter().filter_map(|(_, _, r)| r.as_ref().err());
    errors()
        .find(|e| !matches!(e, RankError::Aborted))
        .or_else(|| errors().next())
        .cloned()
        .map(|e| match e {
            RankError::Aborted if interrupted => RankError::Interrupted,
            other => other,
        })
}

/// The threads every run keeps beside its ranks: under mpirun, the coordinator that meets the
/// other processes for each barrier the local ranks all reached, then turns it (the rank
/// threads never call MPI); and the watcher that turns an interrupt into an aborted barrier, so
/// every rank stops at its next wait. Both end when `done` is set.
pub(crate) fn spawn_watchers<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    config: &'scope RunConfig,
    barrier: &'scope StepBarrier,
    done: &'scope AtomicBool,
    coordinator: std::sync::mpsc::Receiver<u64>,
) {
    if config.hosts {
        scope.spawn(move || {
            while !done.load(Ordering::Relaxed) {
                match coordinator.recv_timeout(INTERRUPT_POLL) {
                    Ok(generation) => {
                        let stop = || barrier.is_aborted() || done.load(Ordering::Relaxed);
                        if crate::cluster::host_barrier(&stop) {
                            barrier.turn(generation);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        });
    }
    let interrupt = &config.interrupt;
    scope.spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if interrupt.load(Ordering::Relaxed) {
                barrier.abort();
                return;
            }
            std::thread::sleep(INTERRUPT_POLL);
        }
    });
}

/// The thread that samples the time series ([`crate::timeseries::Sampler`]) from the clock's
/// start (`ready`) until `done`: an empty series if the clock never started.
pub(crate) fn spawn_sampler<'scope, T: Sync + Send>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    config: &RunConfig,
    progress: &'scope Progress,
    ready: &'scope OnceLock<(Instant, T)>,
    done: &'scope AtomicBool,
) -> std::thread::ScopedJoinHandle<'scope, crate::timeseries::Series> {
    let interval = config.sample_interval;
    scope.spawn(move || {
        let start = loop {
            if let Some((start, _)) = ready.get() {
                break *start;
            }
            if done.load(Ordering::Relaxed) {
                return crate::timeseries::Series::default();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let sampler = crate::timeseries::Sampler::new(Arc::clone(&progress.live), interval, start);
        sampler.run(&|| done.load(Ordering::Relaxed))
    })
}

/// Rewrites one stderr line twice a second: steps done, AU so far, MiB/s.
fn show_progress(
    progress: &Progress,
    done: &std::sync::atomic::AtomicBool,
    total_steps: u64,
    ready: &OnceLock<(Instant, CpuReading)>,
) {
    let mut stderr = std::io::stderr();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let Some((started, _)) = ready.get() else {
            let _ = write!(stderr, "\r\x1b[2Ksetting up the ranks' I/O…");
            let _ = stderr.flush();
            continue;
        };
        let elapsed = started.elapsed().as_secs_f64();
        let steps = progress.steps_done.load(Ordering::Relaxed);
        let bytes = progress.bytes_received.load(Ordering::Relaxed);
        // The result's AU (metrics::au_percent), first step excluded: "–" until measured.
        let au = progress
            .au_percent()
            .map_or("–".to_string(), |au| format!("{au:.1}%"));
        let _ = write!(
            stderr,
            "\r\x1b[2Kstep {steps}/{total_steps} · AU so far {au} · {:.0} MiB/s received · \
             {elapsed:.1} s",
            bytes as f64 / crate::units::MIB / elapsed.max(1e-9),
        );
        let _ = stderr.flush();
    }
    let _ = write!(stderr, "\r\x1b[2K");
}

/// Rank `rank`'s own plan and GETs for `epoch` when the plan reshuffles it
/// ([`Plan::reshuffled`]), made in the rank's thread before the epoch's barrier.
fn reshuffled(plan: &Plan, epoch: u32, rank: usize) -> Result<Option<EpochPlan>, RankError> {
    let own = plan
        .reshuffled(epoch, rank)
        .map_err(|e| RankError::Engine(format!("planning epoch {epoch}: {e}")))?;
    Ok(own.map(|own| {
        let gets = plan.ranged_gets(&own);
        (own, gets)
    }))
}
