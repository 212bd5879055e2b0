//! Running one phase of a checkpoint run (the saves, or the loads): a pinned thread per local
//! rank, each with its engine's [`ObjectIo`] set up before the clock, then
//! [`run_phase`] over the rank's objects per checkpoint. The barrier, the interrupt and (under
//! mpirun) the hosts' barrier work as for training ([`super::spawn_watchers`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{RunConfig, join_ranks, root_cause, spawn_watchers};
use crate::affinity;
use crate::checkpoint::ObjectIoShape;
use crate::engine::Engine;
use crate::metrics::CpuReading;
use crate::rank::checkpoint::{ObjectSpec, ObjectStats, Phase, PhaseRecord, PhaseSpec, run_phase};
use crate::rank::journal::UploadJournal;
use crate::rank::{Progress, RankError, StepBarrier};

/// What one phase of the local ranks did.
#[derive(Debug, Clone)]
pub struct PhaseMeasurements {
    pub phase: Phase,
    /// Per local rank, in rank order.
    pub records: Vec<PhaseRecord>,
    pub stats: Vec<ObjectStats>,
    /// From the clock's start (every local rank set up) to the last rank's end.
    pub wall_s: f64,
    /// The process's (and the embedded server's) CPU when the clock started.
    pub ready_cpu: CpuReading,
    pub ready_at: Instant,
    /// One sample per interval from `ready_at` to the phase's end.
    pub timeseries: crate::timeseries::Series,
}

/// A phase that failed: the root cause, and what was measured up to it once the clock started.
#[derive(Debug)]
pub struct PhaseFailure {
    pub error: RankError,
    pub partial: Option<PhaseMeasurements>,
}

/// The objects of one phase: `objects(rank)[i]` is rank `rank`'s objects of the phase's i-th
/// checkpoint.
pub type ObjectsOf<'a> = dyn Fn(usize) -> Vec<Vec<ObjectSpec>> + Sync + 'a;

/// Runs one phase over the local ranks (`config.ranks`). The first rank error stops every rank
/// (each aborts the uploads it has open) and is returned with the measurements up to it.
#[allow(clippy::too_many_arguments)]
pub fn run_objects_phase(
    engine: &Engine,
    shape: ObjectIoShape,
    phase: Phase,
    objects: &ObjectsOf<'_>,
    sleep: Duration,
    rank_sync: bool,
    barrier_timeout: Duration,
    config: &RunConfig,
    journal: &UploadJournal,
    server_cpu_s: &(dyn Fn() -> f64 + Sync),
) -> Result<PhaseMeasurements, Box<PhaseFailure>> {
    let np = config.ranks.len();
    let barrier = StepBarrier::new(np, barrier_timeout);
    let (to_coordinator, coordinator) = std::sync::mpsc::channel::<u64>();
    if config.hosts {
        barrier.link_hosts(to_coordinator);
    }
    let progress = Progress::new(np);
    let done = AtomicBool::new(false);
    // Raised when the barrier is aborted (a rank failed, an interrupt): every rank's engine
    // stops between parts and GETs instead of finishing its object.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let ready: OnceLock<(Instant, CpuReading)> = OnceLock::new();
    let mut total_bytes = 0u64;
    let mut total_checkpoints = 0u64;
    let per_rank: Vec<Vec<Vec<ObjectSpec>>> = config
        .ranks
        .clone()
        .map(|rank| {
            let list = objects(rank);
            total_checkpoints += list.len() as u64;
            total_bytes += list.iter().flatten().map(|o| o.bytes).sum::<u64>();
            list
        })
        .collect();
    type RankResult = super::RankOutcome<PhaseRecord, ObjectStats>;
    let (results, timeseries) = std::thread::scope(|scope| {
        let sampler = super::spawn_sampler(scope, config, &progress, &ready, &done);
        let ranks: Vec<_> = config
            .ranks
            .clone()
            .zip(&per_rank)
            .map(|(rank, checkpoints)| {
                let (barrier, progress, ready) = (&barrier, &progress, &ready);
                let stop = std::sync::Arc::clone(&stop);
                let local = rank - config.ranks.start;
                let cpu = (!config.cpus.is_empty()).then(|| config.cpus[local % config.cpus.len()]);
                std::thread::Builder::new()
                    .name(format!("ringload-rank-{rank}"))
                    .spawn_scoped(scope, move || -> RankResult {
                        let mut record = PhaseRecord::default();
                        let set_up = || {
                            if let Some(cpu) = cpu {
                                affinity::pin(cpu).map_err(RankError::Engine)?;
                            }
                            engine.checkpoint(rank, shape)
                        };
                        let mut io = match set_up() {
                            Ok(io) => io,
                            Err(e) => {
                                barrier.abort();
                                return (record, ObjectStats::default(), Err(e));
                            }
                        };
                        io.set_stop(stop);
                        io.set_journal(journal.clone());
                        io.count_into(progress.counter(local));
                        let spec = PhaseSpec {
                            phase,
                            checkpoints,
                            sleep,
                            rank_sync,
                        };
                        // Every rank set up: the clock starts.
                        let ran = barrier.wait().and_then(|()| {
                            let (clock, _) = *ready
                                .get_or_init(|| (Instant::now(), CpuReading::now(server_cpu_s())));
                            run_phase(io.as_mut(), &spec, barrier, progress, clock, &mut record)
                        });
                        if ran.is_err() {
                            barrier.abort();
                            io.abort_open();
                        }
                        (record, io.stats().clone(), ran)
                    })
            })
            .collect();
        if config.show_progress {
            let (progress, done, ready) = (&progress, &done, &ready);
            scope.spawn(move || {
                show_progress(phase, progress, done, total_checkpoints, total_bytes, ready)
            });
        }
        spawn_watchers(scope, config, &barrier, &done, coordinator);
        let (barrier_ref, done_ref, stop_ref) = (&barrier, &done, &stop);
        scope.spawn(move || {
            while !done_ref.load(Ordering::Relaxed) {
                if barrier_ref.is_aborted() {
                    stop_ref.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(super::INTERRUPT_POLL);
            }
        });
        let results: Vec<RankResult> = join_ranks(ranks, &barrier);
        done.store(true, Ordering::Relaxed);
        (results, sampler.join().unwrap_or_default())
    });
    let ended = Instant::now();
    let error = root_cause(&results, config.interrupt.load(Ordering::Relaxed));
    let (records, stats): (Vec<PhaseRecord>, Vec<ObjectStats>) =
        results.into_iter().map(|(r, s, _)| (r, s)).unzip();
    let partial = ready.get().copied().map(|(ready_at, ready_cpu)| {
        // The phase's clock stops when its last checkpoint ends on the slowest rank.
        let last_end = records
            .iter()
            .filter_map(|r| r.spans_s.last().map(|s| s.1))
            .fold(0.0f64, f64::max);
        let wall_s = if error.is_some() {
            ended.saturating_duration_since(ready_at).as_secs_f64()
        } else {
            last_end
        };
        PhaseMeasurements {
            phase,
            records,
            stats,
            wall_s,
            ready_cpu,
            ready_at,
            timeseries,
        }
    });
    match (error, partial) {
        (None, Some(measured)) => Ok(measured),
        (Some(error), partial) => Err(Box::new(PhaseFailure { error, partial })),
        (None, None) => Err(Box::new(PhaseFailure {
            error: RankError::Engine("the ranks finished without starting (a bug)".into()),
            partial: None,
        })),
    }
}

/// Rewrites one stderr line twice a second: checkpoints done, GiB moved, GiB/s.
fn show_progress(
    phase: Phase,
    progress: &Progress,
    done: &AtomicBool,
    total_checkpoints: u64,
    total_bytes: u64,
    ready: &OnceLock<(Instant, CpuReading)>,
) {
    use std::io::Write;
    let mut stderr = std::io::stderr();
    let verb = match phase {
        Phase::Save => "written",
        Phase::Load => "restored",
    };
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let Some((started, _)) = ready.get() else {
            let _ = write!(stderr, "\r\x1b[2Ksetting up the ranks' buffers…");
            let _ = stderr.flush();
            continue;
        };
        let elapsed = started.elapsed().as_secs_f64();
        let bytes = progress.bytes_received.load(Ordering::Relaxed) as f64;
        let gib = crate::units::MIB * 1024.0;
        let _ = write!(
            stderr,
            "\r\x1b[2K{phase:?}: rank checkpoints {}/{total_checkpoints} · {:.2}/{:.2} GiB {verb} \
             · {:.2} GiB/s · {elapsed:.1} s",
            progress.steps_done.load(Ordering::Relaxed),
            bytes / gib,
            total_bytes as f64 / gib,
            bytes / gib / elapsed.max(1e-9),
        );
        let _ = stderr.flush();
    }
    let _ = write!(stderr, "\r\x1b[2K");
}
