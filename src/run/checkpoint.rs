//! `ringload run` of a checkpoint workload (`workflow.checkpoint: True`), from its flags to its
//! exit code, as DLIO's `_checkpoint_write` and `_checkpoint_read` run it:
//!
//! 1. set-up ([`CheckpointSession::prepare`], after the part every run shares,
//!    [`super::prepare`]): the plan, the target (else the embedded server's sink), the memory
//!    budget, the engine (the same choice training runs make),
//!    incomplete uploads a killed run left under the checkpoint folder aborted, and, for a
//!    read-only run, every object of the checkpoints it reads listed and compared with the
//!    plan ([`super::checkpoint_list`]: a difference is one line, exit 2, before the clock);
//! 2. `num_checkpoints_write` saves: sleep, barrier, each rank's objects in sequence;
//! 3. one LIST of the checkpoint folder (process 0; its count broadcast) checked against
//!    `num_checkpoints_read`;
//! 4. `num_checkpoints_read` loads of the same objects by the same ranks;
//! 5. the summary (DLIO's names, [`crate::summary::checkpoint`]; its `outcome`, and no DLIO
//!    figure for a phase that did not complete) and the phases, returned as the outcome
//!    ([`CheckpointSession::execute`] runs 2–5; the caller writes and renders it).
//!
//! Under mpirun (the `mpi` feature) each process runs its share of the ranks against one
//! endpoint, meeting the others at every barrier; each host's share of the memory budget is
//! checked on that host and agreed by all; process 0 alone cleans up and lists (sharing what it
//! found); at the end process 0 gathers every process's phases and volume and reports for the
//! job ([`super::checkpoint_hosts`]). A failure on any process ends the job (`commands::run`).

use std::io::IsTerminal;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::RunConfig;
use super::checkpoint_after;
use super::checkpoint_hosts::{self, HostCheckpoint, PhaseResult, agreed};
use super::checkpoint_store::{CheckpointStore, FileStore, S3Store};
use super::checkpoint_uploads;
use super::objects::{PhaseFailure, PhaseMeasurements, run_objects_phase};
use super::prepare::Prepared;
use super::request::RunRequest;
use super::session::{Finished, RunFailed};
use crate::checkpoint::restore::too_few;
use crate::checkpoint::settings::CheckpointSettings;
use crate::checkpoint::{CheckpointOptions, CheckpointPlan, IoOptions};
use crate::cluster::Cluster;
use crate::config::RawConfig;
use crate::content::Content;
use crate::engine::{Engine, EngineKind};
use crate::exit::{self, UsageError};
use crate::files::DataDir;
use crate::metrics::{self, CpuReading};
use crate::mlperf::checkpoint_rules::{self, CheckpointFacts};
use crate::rank::RankError;
use crate::rank::checkpoint::{ObjectSpec, Phase};
use crate::rank::journal::UploadJournal;
use crate::s3::{self, Client};
use crate::setup::engine::EngineNeeds;
use crate::setup::store::env;
use crate::summary::Outcome;
use crate::summary::checkpoint::{
    CheckpointSummary, DlioCheckpointMetric, HostVolume, PhaseIo, rows,
};
use crate::{affinity, budget, server, setup};

/// Blocks a restore reads in parallel on a file system: DLIO's streaming file reader's 4.
const FILE_READ_BLOCKS: usize = 4;

/// A checkpoint run set up and ready to start: everything before its first phase.
#[derive(Debug)]
pub struct CheckpointSession<'a> {
    request: &'a RunRequest,
    cluster: &'a Cluster,
    started_wall: SystemTime,
    interrupt: Arc<AtomicBool>,
    setup_done: Arc<AtomicBool>,
    /// The plan's ranks this process runs.
    local: Range<usize>,
    config: RawConfig,
    plan: CheckpointPlan,
    limits: budget::MemoryLimits,
    /// The store: S3 (with the embedded sink when no target was given) or a data directory.
    store: CheckpointStore,
    /// Shut down once the phases end (before the embedded server stops).
    engine: Option<Engine>,
    engine_kind: EngineKind,
    engine_threads: usize,
    cpus: Vec<usize>,
    notes: Vec<String>,
    /// This host's share of the memory budget.
    host_budget_bytes: u64,
    /// Uploads an earlier run left open under the checkpoint folder, aborted at set-up.
    stale: usize,
    /// [`crate::s3::client::lists_sent`] when set-up started: the run's LISTs are those since.
    lists_at_start: u64,
    /// This process's journal of the uploads it starts (`rank::journal`).
    journal: UploadJournal,
    /// `--after`: seconds from the end of the write run to this run's start.
    after_write_run_s: Option<f64>,
}

/// What a checkpoint run produced: the data its caller writes (`--output`, MLPerf's results
/// tree) and renders.
#[derive(Debug)]
pub struct CheckpointOutcome {
    pub summary: CheckpointSummary,
    /// The job's phases, in the order they ran.
    pub results: Vec<PhaseResult>,
    /// When each phase's clock started.
    pub clocks: Vec<SystemTime>,
    pub started_wall: SystemTime,
    pub ended_wall: SystemTime,
    /// The workload's configuration, for MLPerf's results tree.
    pub config: RawConfig,
    /// Why the phases ended early, when they did.
    pub failure: Option<CheckpointFailure>,
}

/// Why a run's phases ended early (one process: under mpirun a failure ends the job).
#[derive(Debug, Clone)]
pub struct CheckpointFailure {
    /// The one line exit 3 prints.
    pub line: String,
    /// Ctrl-C or SIGTERM stopped it.
    pub interrupted: bool,
    /// The phase that did not complete: its DLIO figures are left out of the summary.
    pub phase: Phase,
}

/// What the phases of a run left: each phase's result, when its clock started, and the
/// failure that ended the run early.
struct Phases {
    results: Vec<PhaseResult>,
    clocks: Vec<SystemTime>,
    failure: Option<CheckpointFailure>,
}

impl<'a> CheckpointSession<'a> {
    /// Sets the run up after the common part ([`Prepared`]): the plan (its objects, then its
    /// memory with the embedded sink's share), the sink when no target was given, the memory
    /// budget (each host's under mpirun, agreed by all), the engine (the one choice every run
    /// makes), and the uploads an earlier run left open aborted (process 0).
    pub fn prepare(prepared: Prepared<'a>) -> anyhow::Result<CheckpointSession<'a>> {
        let hosts = prepared.hosts();
        let lead = prepared.lead();
        let Prepared {
            request,
            cluster,
            started_wall,
            interrupt,
            setup_done,
            np,
            local,
            workload,
            target: resolved,
            dir,
            cpus,
            shared_cores,
            lists_at_start: prepared_lists,
            ..
        } = prepared;
        let Some(settings) = workload.checkpoint().cloned() else {
            return Err(UsageError(format!(
                "{}: a training workload, run by the training session (a bug)",
                workload.name()
            ))
            .into());
        };
        let limits = budget::probe();
        // RLIMIT_MEMLOCK binds only the io_uring engine's locked pool: the engine choice
        // checks it, as for training.
        let unlocked = budget::MemoryLimits {
            memlock_bytes: None,
            ..limits.clone()
        };
        // The embedded sink (no `--endpoint`) is plain HTTP.
        let tls = resolved
            .as_ref()
            .is_some_and(|t| t.endpoints.iter().any(|e| e.is_tls()));
        let plan_for = |server_bytes| {
            CheckpointPlan::resolve(
                &settings,
                &CheckpointOptions {
                    np,
                    hosts: cluster.processes() as u32,
                    io: IoOptions {
                        tls,
                        // DLIO's file reader: 4 readers over a file's blocks.
                        read_blocks: (request.checkpoint.io.read_blocks)
                            .or(dir.is_some().then_some(FILE_READ_BLOCKS)),
                        files: dir.is_some(),
                        ..request.checkpoint.io
                    },
                    memory_cap_bytes: request.plan.memory_cap_bytes,
                    server_bytes,
                },
                &unlocked,
                &env,
            )
        };
        // The plan first without the server, to know its objects; the budget is checked with
        // the server's share once it runs.
        let (server, target) = match resolved {
            _ if dir.is_some() => (None, None),
            Some(target) => (None, Some(target)),
            None => {
                let draft = plan_for(0)?;
                let (server, target) = start_sink(
                    &draft,
                    &settings,
                    request.bucket.as_deref(),
                    request.server_threads,
                    request.verify,
                )?;
                (Some(server), Some(target))
            }
        };
        let server_bytes = match server {
            Some(_) => metrics::rss_bytes().unwrap_or(0),
            None => 0,
        };
        let mut plan = plan_for(server_bytes)?;
        let loopback = target
            .as_ref()
            .is_none_or(|t| t.endpoints.iter().all(|e| e.is_loopback()));
        plan.io.send_zc = plan.send_zc.enabled(loopback);
        // Each host's share against its own memory; a refusal anywhere is every process's.
        let host_shape = plan.budget_shape(local.len() as u32, server_bytes);
        let cap = request.plan.memory_cap_bytes;
        if hosts {
            let mine = budget::check_objects(&host_shape, &unlocked, cap).map(|_| ());
            cluster
                .agree(mine.map_err(|e| e.to_string()))
                .map_err(|e| agreed(cluster, e))?;
        } else {
            plan.check_budget()?;
        }
        let host_budget_bytes = budget::object_budget(&host_shape, &unlocked, cap).total_bytes;
        let mut notes = plan_notes(&plan, dir.is_some(), shared_cores);
        let needs = EngineNeeds {
            pool_bytes: u64::from(host_shape.ranks) * host_shape.rank_buffer_bytes(),
            files: dir.is_some(),
        };
        let choice = choose_engine(request.engine, &needs, &limits, cluster, &mut notes)?;
        plan.io.send_zc = choose_send_zc(&plan, loopback, choice.kind, cluster, &mut notes)?;
        let store = open_store(request, &plan, server, target, dir)?;
        let engine_threads = request.engine_threads.unwrap_or_else(affinity::cores);
        let engine = Engine::for_checkpoint(choice.kind, store.reach(), engine_threads)
            .map_err(|e| UsageError(format!("cannot start the {} engine: {e}", choice.kind)))?;
        let cleaned = clean_up(&store, cluster, request, &plan, &mut notes)?;
        let session = CheckpointSession {
            request,
            cluster,
            started_wall,
            interrupt,
            setup_done,
            local,
            config: workload.config,
            plan,
            limits,
            store,
            engine: Some(engine),
            engine_kind: choice.kind,
            engine_threads,
            cpus,
            notes,
            host_budget_bytes,
            stale: cleaned.aborted,
            lists_at_start: prepared_lists,
            journal: cleaned.journal,
            after_write_run_s: checkpoint_after::after_write_run_s(request, lead, started_wall)?,
        };
        let s = &session.plan.settings;
        if s.num_checkpoints_write == 0 && s.num_checkpoints_read > 0 {
            // A restore of an earlier run's checkpoint: every object it reads, checked now.
            session
                .store
                .restore_checked(session.cluster, &session.plan)?;
        }
        Ok(session)
    }

    /// Runs the saves, the LIST and the loads, and merges the hosts' phases under mpirun:
    /// process 0's [`Finished::Outcome`] is the job's summary and phases, for the caller to
    /// write and render (a phase that failed once its clock started keeps what the phases
    /// measured, with its failure); another process's is the exit code process 0 sends.
    pub fn execute(mut self) -> anyhow::Result<Finished<CheckpointOutcome>> {
        let hosts = !self.cluster.is_single();
        let peak_rss_since_setup = metrics::reset_peak_rss();
        self.setup_done
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.store.clock_started();
        let clock = Instant::now();
        let Phases {
            results,
            clocks,
            failure,
        } = self.run_phases()?;
        self.store.clock_stopped(clock.elapsed().as_secs_f64());
        let ended_wall = SystemTime::now();
        // The engine before the server: the baseline's runtime stops while its peer is up.
        if let Some(engine) = self.engine.take() {
            engine.shutdown();
        }
        let server_stats = self.store.stop_server();
        // Removed when every upload ended; kept, for the next run, when one is left open.
        std::mem::take(&mut self.journal).close();
        if results.is_empty() && failure.is_none() {
            return Err(UsageError(
                "nothing to do: checkpoint.num_checkpoints_write and num_checkpoints_read are \
                 both 0"
                    .into(),
            )
            .into());
        }
        let volume = self.volume(&results);
        let (results, host_volumes) = if hosts {
            let mine = HostCheckpoint::new(volume, &results);
            let Some(job) = checkpoint_hosts::gather(self.cluster, &mine)? else {
                // Process 0 reports for the job; its exit code is everyone's.
                let code = self.cluster.broadcast(Vec::new());
                return Ok(Finished::Follower(
                    code.first().copied().unwrap_or(exit::FAILED),
                ));
            };
            job
        } else {
            (results, vec![volume])
        };
        let peak_rss_bytes = host_volumes.iter().filter_map(|h| h.peak_rss_bytes).max();
        let plan_bytes = self.plan.memory.total_bytes;
        if let Some(warning) = metrics::rss_over_budget_note(peak_rss_bytes, plan_bytes) {
            eprintln!("ringload run: WARNING: {warning}");
            self.notes.push(warning);
        }
        if !peak_rss_since_setup {
            self.notes.push(
                "peak RSS is the process's since its start (this kernel cannot reset it)".into(),
            );
        }
        let summary = self.summary(
            &results,
            host_volumes,
            peak_rss_bytes,
            server_stats,
            ended_wall,
            failure.as_ref(),
        );
        Ok(Finished::Outcome(CheckpointOutcome {
            summary,
            results,
            clocks,
            started_wall: self.started_wall,
            ended_wall,
            config: self.config,
            failure,
        }))
    }

    /// The saves, then (when there are checkpoints to read) the LIST and the loads. Under
    /// mpirun a failed phase ends the job at once (`commands::run` aborts it: this process's
    /// ranks aborted their open uploads as they stopped); in one process it ends the phases
    /// and the run reports what they measured.
    fn run_phases(&self) -> anyhow::Result<Phases> {
        let hosts = !self.cluster.is_single();
        let s = &self.plan.settings;
        let (writes, reads) = (s.num_checkpoints_write, s.num_checkpoints_read);
        let mut phases = Phases {
            results: Vec::new(),
            clocks: Vec::new(),
            failure: None,
        };
        let run_clock = Instant::now();
        let run = |phases: &mut Phases, phase: Phase, steps: u32| -> anyhow::Result<()> {
            match self.run_phase(phase, (1..=steps).collect(), run_clock) {
                Ok(o) => {
                    phases.clocks.push(clock_of(&o));
                    phases.results.push(o);
                }
                Err(e) if hosts => return Err(failed(e.0)),
                Err(e) => {
                    let (error, partial) = *e;
                    phases.results.extend(partial);
                    let interrupted = matches!(error, RankError::Interrupted);
                    // One process: no mpirun to name; nothing measured yet: the set-up.
                    let line = match (interrupted, phases.results.is_empty()) {
                        (true, true) => SETUP_INTERRUPTED.to_string(),
                        (true, false) => {
                            "interrupted (Ctrl-C or SIGTERM) before the last step".into()
                        }
                        (false, _) => error.to_string().replace('\n', " "),
                    };
                    phases.failure = Some(CheckpointFailure {
                        interrupted,
                        line,
                        phase,
                    });
                }
            }
            Ok(())
        };
        if writes > 0 {
            self.drop_caches()?;
            run(&mut phases, Phase::Save, writes)?;
        }
        if phases.failure.is_none() && reads > 0 {
            // A read-only run listed and checked its checkpoint at set-up.
            let found = match writes {
                0 => reads,
                _ => self.store.checkpoints_listed(self.cluster, &self.plan)?,
            };
            if found >= reads {
                self.drop_caches()?;
                run(&mut phases, Phase::Load, reads)?;
            } else {
                let line = too_few(&self.plan, reads, found);
                if phases.results.is_empty() {
                    return Err(agreed(self.cluster, UsageError(line)));
                }
                if hosts {
                    return Err(agreed(self.cluster, RunFailed(line)));
                }
                phases.failure = Some(CheckpointFailure {
                    line,
                    interrupted: false,
                    phase: Phase::Load,
                });
            }
        }
        Ok(phases)
    }

    /// `--drop-caches` on a file system: the page cache written back and dropped before a
    /// phase's clock (between the saves and the restores, as the rules ask below 3× memory).
    fn drop_caches(&self) -> anyhow::Result<()> {
        if self.request.files.drop_caches && matches!(self.store, CheckpointStore::Files(_)) {
            crate::files::cache::drop_caches().map_err(UsageError)?;
        }
        Ok(())
    }

    /// One phase over the local ranks, its CPU costs measured around it.
    fn run_phase(
        &self,
        phase: Phase,
        steps: Vec<u32>,
        run_clock: Instant,
    ) -> Result<PhaseResult, Box<(RankError, Option<PhaseResult>)>> {
        let server = self.store.server();
        let server_cpu_now = || server.map_or(0.0, |s| s.stats().cpu_s);
        let s = &self.plan.settings;
        let sleep = Duration::from_secs_f64(s.time_between_checkpoints_s.max(0.0));
        let barrier_timeout =
            self.store.policy().longest_request() * 4 + sleep + Duration::from_secs(600);
        let config = RunConfig {
            engine: self.engine_kind,
            engine_threads: self.engine_threads,
            show_progress: std::io::stderr().is_terminal(),
            cpus: self.cpus.clone(),
            interrupt: Arc::clone(&self.interrupt),
            ranks: self.local.clone(),
            hosts: !self.cluster.is_single(),
            sample_interval: self.request.sample_interval,
        };
        let start = CpuReading::now(server_cpu_now());
        let plan = &self.plan;
        let objects = |rank: usize| objects_of(plan, rank, &steps);
        let Some(engine) = &self.engine else {
            let error = RankError::Engine("the engine was shut down (a bug)".into());
            return Err(Box::new((error, None)));
        };
        let result = run_objects_phase(
            engine,
            self.plan.io,
            phase,
            &objects,
            sleep,
            s.rank_sync,
            barrier_timeout,
            &config,
            &self.journal,
            &server_cpu_now,
        );
        let end = CpuReading::now(server_cpu_now());
        let outcome = |measured: PhaseMeasurements| {
            let costs = metrics::CpuCosts::between(start, measured.ready_cpu, end);
            PhaseResult {
                phase,
                steps: steps.clone(),
                records: measured.records,
                stats: measured.stats,
                wall_s: measured.wall_s,
                client_cpu_s: costs.client_cpu_s,
                server_cpu_s: self.store.server().map(|_| costs.server_cpu_s),
                started_s: measured
                    .ready_at
                    .saturating_duration_since(run_clock)
                    .as_secs_f64(),
                timeseries: measured.timeseries,
            }
        };
        match result {
            Ok(measured) => Ok(outcome(measured)),
            Err(boxed) => {
                let PhaseFailure { error, partial } = *boxed;
                Err(Box::new((error, partial.map(outcome))))
            }
        }
    }

    /// What this process wrote and read, and the memory it held.
    fn volume(&self, results: &[PhaseResult]) -> HostVolume {
        let bytes_of = |phase: Phase| -> u64 {
            results
                .iter()
                .filter(|r| r.phase == phase)
                .flat_map(|r| &r.stats)
                .map(|s| match phase {
                    Phase::Save => s.write.bytes_written,
                    Phase::Load => s.read.bytes_read,
                })
                .sum()
        };
        HostVolume {
            host: Cluster::host(),
            ranks: self.local.clone().collect(),
            bytes_per_checkpoint: (self.plan.host_bytes)
                .get(self.cluster.process())
                .copied()
                .unwrap_or(0),
            bytes_written: bytes_of(Phase::Save),
            bytes_read: bytes_of(Phase::Load),
            peak_rss_bytes: metrics::peak_rss_bytes(),
            memory_budget_bytes: self.host_budget_bytes,
        }
    }

    /// The run's summary, from the job's phases and hosts.
    fn summary(
        &mut self,
        results: &[PhaseResult],
        host_volumes: Vec<HostVolume>,
        peak_rss_bytes: Option<u64>,
        server_stats: Option<server::ServerStats>,
        ended_wall: SystemTime,
        failure: Option<&CheckpointFailure>,
    ) -> CheckpointSummary {
        let plan = &self.plan;
        let size_gib = plan.checkpoint_size_gb;
        let mut all_rows = Vec::new();
        for r in results {
            all_rows.extend(rows(r.phase, &r.records, &r.steps, size_gib));
        }
        let completed = |phase: Phase| failure.is_none_or(|f| f.phase != phase);
        let phase_io = |phase: Phase| {
            results.iter().find(|r| r.phase == phase).map(|r| PhaseIo {
                completed: completed(phase),
                ..PhaseIo::of(phase, &r.stats, r.wall_s, r.client_cpu_s, r.server_cpu_s)
            })
        };
        // DLIO's figures of the phases that completed only (DLIO writes no summary for a
        // run that failed; the rows of a phase that did not complete stay, as ringload's).
        let completed_rows: Vec<_> = all_rows
            .iter()
            .filter(|r| completed(r.phase))
            .cloned()
            .collect();
        let metric = (!completed_rows.is_empty())
            .then(|| DlioCheckpointMetric::of(size_gib, &completed_rows));
        let outcome = match failure {
            None => Outcome::Completed,
            Some(f) if f.interrupted => Outcome::Interrupted,
            Some(_) => Outcome::Failed,
        };
        let (save, load) = (phase_io(Phase::Save), phase_io(Phase::Load));
        let limit = crate::summary::limit::checkpoint_limit(&crate::summary::limit::LimitFacts {
            wall_s: results.iter().map(|r| r.wall_s).sum(),
            // Under mpirun the client's CPU is every host's: against every host's cores.
            cores: crate::affinity::cores() * host_volumes.len().max(1),
            ranks: plan.np as usize,
            client_cpu_s: results.iter().map(|r| r.client_cpu_s).sum(),
            server_cpu_s: results.iter().map(|r| r.server_cpu_s).sum(),
            peak_rss_bytes,
            budget_bytes: plan.memory.total_bytes,
            au_percent: None,
            au_target_percent: 0.0,
        });
        let rules = checkpoint_rules::rules(&CheckpointFacts {
            writes: plan.settings.num_checkpoints_write,
            reads: plan.settings.num_checkpoints_read,
            after_write_run_s: self.after_write_run_s,
            processes: plan.np,
            hosts: host_volumes.len() as u32,
            bytes_per_checkpoint_per_host: plan.host_bytes.iter().copied().max().unwrap_or(0),
            host_memory_bytes: self.limits.mem_total_bytes,
            checkpoint_bytes: plan.checkpoint_bytes,
            accelerator_memory_bytes: (self.request.checkpoint.accelerator_memory_bytes)
                .unwrap_or(checkpoint_rules::B200_MEMORY_BYTES),
            model: plan.settings.model_name.clone(),
            restores_cached: matches!(&self.store, CheckpointStore::Files(f) if !f.dir.direct),
        });
        CheckpointSummary {
            kind: "checkpoint",
            outcome,
            failure: failure.map(|f| f.line.clone()),
            ringload_version: env!("CARGO_PKG_VERSION"),
            workload: plan.settings.workload.name.clone(),
            model: plan.settings.model_name.clone(),
            engine: self.engine_kind,
            np: plan.np as usize,
            num_hosts: host_volumes.len(),
            start: checkpoint_after::rfc3339(self.started_wall),
            end: checkpoint_after::rfc3339(ended_wall),
            metric,
            checkpoint_bytes: plan.checkpoint_bytes,
            objects_per_checkpoint: plan.objects_per_checkpoint,
            checkpoints: all_rows,
            save,
            load,
            hosts: host_volumes,
            io_shape: plan.io,
            peak_rss_bytes,
            memory_budget_bytes: plan.memory.total_bytes,
            target: self.store.target_summary(
                server_stats,
                results.iter().filter_map(|r| r.server_cpu_s).sum(),
            ),
            after_write_run_s: self.after_write_run_s,
            stale_uploads_aborted: self.stale,
            lists: crate::s3::client::lists_sent() - self.lists_at_start,
            rules,
            notes: std::mem::take(&mut self.notes),
            limit,
            timeseries: phases_series(results),
        }
    }
}

/// The engine (the one choice every run makes); under mpirun process 0's choice is every
/// process's, one engine per job as its summary says. Its note, process 0's, is printed and
/// kept.
fn choose_engine(
    asked: Option<EngineKind>,
    needs: &EngineNeeds,
    limits: &budget::MemoryLimits,
    cluster: &Cluster,
    notes: &mut Vec<String>,
) -> anyhow::Result<setup::engine::EngineChoice> {
    let lead = cluster.process() == 0;
    let mut choice = setup::engine::choose(asked, needs, limits).map_err(UsageError)?;
    if !cluster.is_single() {
        choice.kind = cluster.share(lead.then_some(choice.kind))?;
    }
    if let Some(note) = choice.note.clone().filter(|_| lead) {
        eprintln!("ringload run: NOTE: {note}");
        notes.push(note);
    }
    Ok(choice)
}

/// The run's store: the data directory (its `O_DIRECT` probed in the checkpoint folder), or
/// the S3 target (the embedded sink's, or the one given) with the phases' client and the
/// set-up requests' own.
fn open_store(
    request: &RunRequest,
    plan: &CheckpointPlan,
    server: Option<server::Server>,
    target: Option<s3::Target>,
    dir: Option<DataDir>,
) -> anyhow::Result<CheckpointStore> {
    let policy = request.retry;
    if let Some(mut dir) = dir {
        dir.probe_direct_in(&dir.path(&plan.prefix()))
            .map_err(UsageError)?;
        return Ok(CheckpointStore::Files(FileStore::new(dir, policy)));
    }
    let Some(target) = target else {
        return Err(UsageError("a checkpoint run with no store (a bug)".into()).into());
    };
    let client = Client::new(target.clone(), policy)?;
    let (setup_client, setup_runtime) = set_up_client(&target, policy)?;
    Ok(CheckpointStore::S3(S3Store {
        server,
        target,
        client,
        setup_client,
        setup_runtime,
    }))
}

/// The plan's notes, a file run's fsync rule in place of the objects' one, and the warning of
/// ranks sharing cores (printed).
fn plan_notes(plan: &CheckpointPlan, files: bool, shared_cores: Option<String>) -> Vec<String> {
    let mut notes = plan.notes.clone();
    if files {
        // A file is fsynced at close whatever checkpoint.fsync says, as DLIO's writer does.
        notes.retain(|n| !n.starts_with("checkpoint.fsync"));
        notes.push(
            "checkpoint.fsync: each file is fsynced once, at close, whatever it says (as DLIO's \
             file writer does)"
                .into(),
        );
    }
    if let Some(note) = shared_cores {
        eprintln!("ringload run: WARNING: {note}");
        notes.push(note);
    }
    notes
}

/// Process 0 aborts the uploads an earlier run left open under the checkpoint folder (S3);
/// files have none to leave open: a failed write removes its file.
fn clean_up(
    store: &CheckpointStore,
    cluster: &Cluster,
    request: &RunRequest,
    plan: &CheckpointPlan,
    notes: &mut Vec<String>,
) -> anyhow::Result<checkpoint_uploads::CleanedUp> {
    match store {
        CheckpointStore::S3(s3) => checkpoint_uploads::clean_up(
            cluster,
            &checkpoint_uploads::Where {
                client: &s3.setup_client,
                runtime: &s3.setup_runtime,
                prefix: &plan.prefix(),
                embedded: s3.server.is_some(),
                abort_foreign: request.checkpoint.abort_foreign_uploads,
            },
            notes,
        ),
        CheckpointStore::Files(_) => Ok(checkpoint_uploads::CleanedUp::default()),
    }
}

/// The client and runtime of the requests outside the phases (the clean-up, the LISTs).
fn set_up_client(
    target: &s3::Target,
    policy: s3::RetryPolicy,
) -> anyhow::Result<(Client, tokio::runtime::Runtime)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the set-up runtime")?;
    Ok((Client::new(target.clone(), policy)?, runtime))
}

/// Whether parts go with `SEND_ZC`: `--send-zc` on the engine chosen, after the probe
/// (`setup::engine::send_zc`); a fallback's note printed by process 0 and kept.
fn choose_send_zc(
    plan: &CheckpointPlan,
    loopback: bool,
    kind: EngineKind,
    cluster: &Cluster,
    notes: &mut Vec<String>,
) -> anyhow::Result<bool> {
    let zc = setup::engine::send_zc(
        plan.send_zc,
        loopback,
        kind,
        crate::engine::uring::send_zc_cause,
    )
    .map_err(UsageError)?;
    if let Some(note) = zc.note.filter(|_| cluster.process() == 0) {
        eprintln!("ringload run: NOTE: {note}");
        notes.push(note);
    }
    Ok(zc.on)
}

/// Rank `rank`'s objects of each of `steps`: `[i]` is checkpoint `steps[i]`'s.
fn objects_of(plan: &CheckpointPlan, rank: usize, steps: &[u32]) -> Vec<Vec<ObjectSpec>> {
    steps
        .iter()
        .map(|&step| {
            plan.ranks[rank]
                .iter()
                .map(|o| {
                    let key = plan.key(step, o);
                    ObjectSpec {
                        content: Content::of(&key, plan.settings.randomize_tensor)
                            .reduced(plan.io.content),
                        key,
                        bytes: o.bytes,
                    }
                })
                .collect()
        })
        .collect()
}

/// A one-process checkpoint run's failure line when a stop signal came before any phase
/// measured anything.
pub const SETUP_INTERRUPTED: &str =
    "interrupted (Ctrl-C or SIGTERM) during set-up, before anything was measured";

/// When a phase's clock started: its end less its wall time.
fn clock_of(r: &PhaseResult) -> SystemTime {
    SystemTime::now() - Duration::from_secs_f64(r.wall_s)
}

/// A failed phase's error as the run's: an interrupt, or a failure in one line.
fn failed(error: RankError) -> anyhow::Error {
    if matches!(error, RankError::Interrupted) {
        super::session::RunInterrupted.into()
    } else {
        RunFailed(error.to_string().replace('\n', " ")).into()
    }
}

/// The run's time series: each phase's, placed after the first phase's clock start (the time
/// between phases, the LIST among it, has no samples).
fn phases_series(results: &[PhaseResult]) -> crate::timeseries::Series {
    let Some(first) = results.first() else {
        return crate::timeseries::Series::default();
    };
    results[1..]
        .iter()
        .fold(first.timeseries.clone(), |run, p| {
            run.then(p.timeseries.clone(), p.started_s - first.started_s)
        })
        .without_histograms()
}

/// The embedded server of a checkpoint run with no endpoint: a sink in the run's bucket
/// (`--bucket`, else the workload's: `storage.storage_root` or the checkpoint folder's) that
/// discards what is written (checking it with `--verify`) and serves the plan's objects by
/// generating them.
fn start_sink(
    plan: &CheckpointPlan,
    settings: &CheckpointSettings,
    bucket_flag: Option<&str>,
    server_threads: Option<usize>,
    verify: bool,
) -> anyhow::Result<(server::Server, s3::Target)> {
    let bucket = bucket_flag
        .or(settings.storage.bucket.as_deref())
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = crate::setup::store::checked_bucket(bucket)?.to_string();
    let objects = crate::setup::store::checkpoint_sink_objects(plan);
    crate::setup::store::start_sink_server(
        &bucket,
        objects,
        settings.randomize_tensor,
        verify,
        plan.io.content,
        server_threads,
    )
}
