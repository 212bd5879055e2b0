//! Running a plan: rank threads over an engine, a progress line, and the measurements that
//! become the summary.
//!
//! The caller has already resolved the plan (footers read, memory budget checked) and started
//! whatever the run needs (an in-process server). Here: the engine is built, one thread per rank
//! runs [`crate::rank::run_rank`], and the process's CPU time and peak RSS are read around it.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::baseline::Baseline;
use crate::engine::{EngineKind, RequestStats, rank_gets};
use crate::metrics;
use crate::plan::Plan;
use crate::rank::{Progress, RankIo, RankRecord, RunError, StepBarrier, run_rank};
use crate::s3::Client;

/// How a run is carried out, beyond its plan.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub engine: EngineKind,
    /// Worker threads of the baseline engine's runtime.
    pub engine_threads: usize,
    /// Print a progress line on stderr.
    pub show_progress: bool,
}

/// What a run measured, rank by rank.
#[derive(Debug, Clone)]
pub struct RunMeasurements {
    pub records: Vec<RankRecord>,
    pub stats: Vec<RequestStats>,
    /// From the rank threads' start to their end.
    pub wall_s: f64,
}

/// Runs the plan's ranks against `client`'s bucket. The first rank error stops every rank and
/// is returned.
pub fn execute(
    plan: &Plan,
    client: &Client,
    config: &RunConfig,
) -> Result<RunMeasurements, RunError> {
    let np = plan.ranks.len();
    let policy = client.policy();
    let computation_time = Duration::from_secs_f64(plan.settings.computation_time_s);
    // The longest a rank may legitimately keep the others at the barrier: one GET with all of
    // its attempts and backoffs, and a compute step.
    let barrier_timeout =
        policy.timeout * (policy.retries + 1) + computation_time + Duration::from_secs(60);
    let barrier = StepBarrier::new(np, barrier_timeout);
    let progress = Progress::default();
    let engine = match config.engine {
        EngineKind::Baseline => Baseline::new(client.clone(), config.engine_threads)
            .map_err(|e| RunError::Engine(format!("cannot start the baseline runtime: {e}")))?,
    };
    let prefetch = plan.settings.prefetch as usize;
    let epochs = plan.settings.epochs;
    let total_steps = plan.steps_per_rank * np as u64 * u64::from(epochs);
    let started = Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    let results: Vec<Result<(RankRecord, RequestStats), RunError>> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..np)
            .map(|rank| {
                let gets = rank_gets(plan, rank);
                let (engine, barrier, progress) = (&engine, &barrier, &progress);
                std::thread::Builder::new()
                    .name(format!("ringload-rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let mut io = engine.rank(gets, prefetch, barrier, progress);
                        let record = run_rank(
                            &plan.ranks[rank],
                            epochs,
                            computation_time,
                            &mut io,
                            barrier,
                            progress,
                        )?;
                        Ok((record, io.stats().clone()))
                    })
            })
            .collect();
        if config.show_progress {
            let (progress, done) = (&progress, &done);
            scope.spawn(move || show_progress(progress, done, total_steps, np, started));
        }
        let results = ranks
            .into_iter()
            .map(|spawned| match spawned {
                Ok(handle) => handle.join().unwrap_or_else(|_| {
                    barrier.abort();
                    Err(RunError::Engine("a rank thread panicked".into()))
                }),
                Err(e) => {
                    barrier.abort();
                    Err(RunError::Engine(format!("cannot start a rank thread: {e}")))
                }
            })
            .collect();
        done.store(true, Ordering::Relaxed);
        results
    });
    let wall_s = started.elapsed().as_secs_f64();
    engine.shutdown();
    // The root cause, not the "stopped because another rank failed" of the others.
    if let Some(first) = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .find(|e| !matches!(e, RunError::Aborted))
        .or_else(|| results.iter().find_map(|r| r.as_ref().err()))
    {
        return Err(first.clone());
    }
    let (records, stats) = results.into_iter().filter_map(Result::ok).unzip();
    Ok(RunMeasurements {
        records,
        stats,
        wall_s,
    })
}

/// Rewrites one stderr line twice a second: steps done, AU so far, MiB/s.
fn show_progress(
    progress: &Progress,
    done: &std::sync::atomic::AtomicBool,
    total_steps: u64,
    np: usize,
    started: Instant,
) {
    let mut stderr = std::io::stderr();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let elapsed = started.elapsed().as_secs_f64();
        let steps = progress.steps_done.load(Ordering::Relaxed);
        let compute_s = progress.compute_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let bytes = progress.bytes_received.load(Ordering::Relaxed);
        let _ = write!(
            stderr,
            "\r\x1b[2Kstep {steps}/{total_steps} · AU so far {:.1}% · {:.0} MiB/s · {elapsed:.1} s",
            100.0 * compute_s / (np as f64 * elapsed).max(1e-9),
            bytes as f64 / metrics::MIB / elapsed.max(1e-9),
        );
        let _ = stderr.flush();
    }
    let _ = write!(stderr, "\r\x1b[2K");
}
