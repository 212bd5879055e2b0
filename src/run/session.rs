//! A training run, after the set-up every run shares ([`super::prepare`]):
//! [`Session::prepare`] sets everything up before the clock (the store, the catalog, the plan
//! and its memory budget, the engine), and [`Session::execute`] runs it
//! ([`crate::run::run_ranks`]), merges the hosts' results under mpirun, and returns the
//! outcome (the summary and the measurements) for the caller to write and render.

use std::io::IsTerminal;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use super::prepare::Prepared;
use super::request::RunRequest;
use super::source::Source;
use super::{RunConfig, RunFailure, run_ranks};
use crate::catalog::Catalog;
use crate::catalog::objects::ObjectKeys;
use crate::checkpoint::training::{TrainCheckpointPlan, TrainCheckpointSettings};
use crate::checkpoint::{CheckpointOptions, IoOptions};
use crate::cluster::{Cluster, HostReport, Merged};
use crate::dataset::ObjectDataset;
use crate::dataset::check::ObjectRef;
use crate::engine::EngineKind;
use crate::exit::{self, ExitClass, UsageError};
use crate::metrics::{self, CpuCosts, CpuReading};
use crate::plan::{Plan, PlanOptions};
use crate::rank::RankError;
use crate::rank::RunMeasurements;
use crate::settings::Settings;
use crate::setup::{self, engine::EngineNeeds};
use crate::summary::train_checkpoint::TrainCheckpointSummary;
use crate::summary::{HostSummary, RunContext, RunSummary};
use crate::{affinity, budget, cluster};

/// How a run's process ends: process 0 (the only one, without mpirun) with the job's
/// outcome, which its caller writes and renders; another process under mpirun with the exit
/// code process 0 sent.
#[derive(Debug)]
pub enum Finished<T> {
    Outcome(T),
    Follower(u8),
}

/// What a training run produced: the data its caller writes (`--output`, MLPerf's results
/// tree) and renders.
#[derive(Debug)]
pub struct TrainingOutcome {
    pub summary: RunSummary,
    pub measured: RunMeasurements,
    pub plan: Plan,
    /// The workload's configuration, for MLPerf's results tree.
    pub config: crate::config::RawConfig,
    /// When set-up started.
    pub started: Instant,
    /// The line of a run that failed once the clock had started (what it measured is above),
    /// and whether it was an interrupt.
    pub failure: Option<String>,
    pub interrupted: bool,
}

/// A run set up and ready to start: everything before the clock.
#[derive(Debug)]
pub struct Session<'a> {
    request: &'a RunRequest,
    cluster: &'a Cluster,
    started: Instant,
    /// The plan's ranks this process runs.
    local: Range<usize>,
    notes: Vec<String>,
    cpus: Vec<usize>,
    /// The store: S3 (with its client) or a file system.
    source: Source,
    setup_cpu: CpuReading,
    peak_rss_since_setup: bool,
    /// With the dlio loader: every rank's footer reads (requests, bytes).
    loader_footers: Option<(u64, u64)>,
    plan: Plan,
    /// The checkpoints written between the steps (`workflow.checkpoint` with training).
    checkpoints: Option<TrainCheckpointPlan>,
    engine: EngineKind,
    /// Raised by Ctrl-C or SIGTERM from the start of set-up.
    interrupt: Arc<AtomicBool>,
    /// Set when the ranks start: a stop signal before it ends the process at once.
    setup_done: Arc<AtomicBool>,
    /// The workload's configuration, for MLPerf's results tree.
    config: crate::config::RawConfig,
    /// [`crate::s3::client::lists_sent`] when set-up started: the run's LISTs are those since.
    lists_at_start: u64,
}

impl<'a> Session<'a> {
    /// Sets the run up after the common part ([`Prepared`]): the store (the embedded server
    /// when no target was given), the catalog (process 0 reads it, the others get it), the
    /// plan checked against each host's memory, and the engine.
    pub fn prepare(prepared: Prepared<'a>) -> anyhow::Result<Session<'a>> {
        let Prepared {
            request,
            cluster,
            started,
            interrupt,
            setup_done,
            np,
            local,
            workload,
            target: resolved,
            dir,
            cpus,
            shared_cores,
            lists_at_start,
            ..
        } = prepared;
        let hosts = !cluster.is_single();
        let config = workload.config.clone();
        let Some(settings) = workload.training().cloned() else {
            return Err(UsageError(format!(
                "{}: a checkpoint workload, run by the checkpoint session (a bug)",
                workload.name()
            ))
            .into());
        };
        let mut notes = Vec::new();
        let mut source = Source::open(
            request,
            &settings,
            resolved,
            dir,
            crate::setup::store::CheckpointWrites::of(workload.train_checkpoint.as_deref())
                .as_ref(),
        )?;
        // Costs are counted from here: the virtual dataset's layout above is not the loader's.
        let setup_cpu = CpuReading::now(source.server().map_or(0.0, |s| s.stats().cpu_s));
        let peak_rss_since_setup = metrics::reset_peak_rss();
        let (catalog, loader_footers) = source.catalog(request, &settings, cluster, local.len())?;
        // Whole objects under --verify: each compared with what `generate` writes for its name.
        let verify_objects = match &settings.objects {
            Some(dataset) if request.verify => Some(objects_to_verify(dataset, &catalog)?),
            _ => None,
        };
        let limits = budget::probe();
        let checkpoint_options = CheckpointOptions {
            np,
            hosts: cluster.processes() as u32,
            io: IoOptions {
                tls: source.tls(),
                ..request.checkpoint.io
            },
            memory_cap_bytes: None,
            server_bytes: 0,
        };
        let train_checkpoint = workload.train_checkpoint.as_deref();
        let plan_options = PlanOptions {
            tls: source.tls(),
            np,
            server_bytes: source.server_bytes(),
            checkpoint_bytes: match train_checkpoint {
                Some(c) => checkpoint_bytes(c, &checkpoint_options, &local, settings.epochs)?,
                None => 0,
            },
            ..request.plan.clone()
        };
        let mut plan = plan(
            &settings,
            &catalog,
            &plan_options,
            &limits,
            cluster,
            local.len(),
        )?;
        plan.verify_objects = verify_objects;
        let checkpoints = match train_checkpoint {
            Some(c) => {
                let p = TrainCheckpointPlan::resolve(
                    c,
                    &checkpoint_options,
                    &budget::MemoryLimits::unlimited(),
                    &crate::setup::store::env,
                    settings.epochs,
                    plan.steps_per_rank,
                )?;
                notes.extend(p.notes.iter().cloned());
                Some(p)
            }
            None => None,
        };
        // A long run says so before it starts (process 0, which reports for the job).
        if let Some(line) = plan
            .long_run_estimate(crate::plan::LONG_RUN_S)
            .filter(|_| cluster.process() == 0)
        {
            eprintln!("ringload run: NOTE: {line}");
        }
        // Warned only for a plan that will run.
        if let Some(note) = shared_cores {
            eprintln!("ringload run: WARNING: {note}");
            notes.push(note);
        }
        let files = source.files().is_some();
        let mut engine = choose_engine(request.engine, files, &plan, &limits, &mut notes)?;
        if hosts {
            // Process 0's choice is every process's: one engine per job, as its summary says.
            engine = cluster.share((cluster.process() == 0).then_some(engine))?;
        }
        Ok(Session {
            request,
            cluster,
            started,
            local,
            notes,
            cpus,
            source,
            setup_cpu,
            lists_at_start,
            peak_rss_since_setup,
            loader_footers,
            plan,
            checkpoints,
            engine,
            interrupt,
            setup_done,
            config,
        })
    }

    /// Runs the ranks and merges the hosts' results under mpirun: process 0's
    /// [`Finished::Outcome`] is the job's summary and measurements, for the caller to write
    /// and render (a run that failed or was interrupted once the clock started keeps what it
    /// measured, with its failure); another process's is the exit code process 0 sends.
    pub fn execute(mut self) -> anyhow::Result<Finished<TrainingOutcome>> {
        let hosts = !self.cluster.is_single();
        let files = self
            .source
            .files()
            .map(|f| f.before_clock(&self.plan, self.local.clone()));
        for note in files.iter().flatten() {
            if self.cluster.process() == 0 {
                eprintln!("ringload run: NOTE: {note}");
            }
            self.notes.push(note.clone());
        }
        let outcome = {
            let server = self.source.server();
            let server_cpu_now = || server.map_or(0.0, |s| s.stats().cpu_s);
            let config = RunConfig {
                engine: self.engine,
                engine_threads: (self.request.engine_threads).unwrap_or_else(affinity::cores),
                show_progress: std::io::stderr().is_terminal(),
                cpus: self.cpus.clone(),
                interrupt: Arc::clone(&self.interrupt),
                ranks: self.local.clone(),
                hosts,
                sample_interval: self.request.sample_interval,
            };
            // From here Ctrl-C and SIGTERM stop the run and keep what it measured.
            self.setup_done
                .store(true, std::sync::atomic::Ordering::SeqCst);
            run_ranks(
                &self.plan,
                self.checkpoints.as_ref(),
                self.source.reach(),
                &config,
                &server_cpu_now,
            )
        };
        if hosts && let Err(failure) = &outcome {
            // A failed run ends every process of the job (see `commands::run`).
            return Err(RunFailed(exit_line(&failure.error)).into());
        }
        let server_stats = self.source.stop_server();
        // A run that failed once the clock had started still reports what it measured.
        let mut interrupted = false;
        let (mut measured, failure) = match outcome.map_err(|failure| *failure) {
            Ok(measured) => (measured, None),
            Err(RunFailure {
                error,
                partial: Some(measured),
            }) => {
                interrupted = matches!(error, RankError::Interrupted);
                (measured, Some(exit_line(&error)))
            }
            Err(RunFailure {
                error,
                partial: None,
            }) => return Err(RunFailed(exit_line(&error)).into()),
        };
        let end_cpu = CpuReading::now(server_stats.as_ref().map_or(0.0, |s| s.cpu_s));
        let setup_s = (measured.ready_at - self.started).as_secs_f64();
        let mut costs = CpuCosts::between(self.setup_cpu, measured.ready_cpu, end_cpu);
        let mut peak_rss_bytes = metrics::peak_rss_bytes();
        let mut host_summaries = Vec::new();
        if hosts {
            let tls = self.source.tls();
            let mine = HostReport {
                host: Cluster::host(),
                process: self.cluster.process(),
                ranks: self.local.clone(),
                records: measured.records.clone(),
                stats: measured
                    .stats
                    .iter()
                    .map(metrics::RequestStats::to_wire)
                    .collect(),
                wall_s: measured.wall_s,
                client_cpu_s: costs.client_cpu_s,
                setup_cpu_s: costs.setup_cpu_s,
                peak_rss_bytes,
                memory_budget_bytes: cluster::host_budget_bytes(&self.plan, self.local.len(), tls),
                timeseries: measured.timeseries.clone(),
            };
            let Some(reports) = self.cluster.gather_reports(&mine)? else {
                // Process 0 reports for the job; its exit code is everyone's.
                let code = self.cluster.broadcast(Vec::new());
                return Ok(Finished::Follower(
                    code.first().copied().unwrap_or(exit::FAILED),
                ));
            };
            let merged = Merged::of(&reports);
            measured.records = merged.records;
            measured.stats = merged.stats;
            measured.wall_s = merged.wall_s;
            measured.timeseries = merged.timeseries;
            costs.client_cpu_s = merged.client_cpu_s;
            costs.setup_cpu_s = merged.setup_cpu_s;
            peak_rss_bytes = merged.peak_rss_bytes;
            host_summaries = reports.iter().map(HostSummary::of).collect();
        }
        let plan = &self.plan;
        if let Some(warning) =
            metrics::rss_over_budget_note(peak_rss_bytes, plan.memory.total_bytes)
        {
            eprintln!("ringload run: WARNING: {warning}");
            self.notes.push(warning);
        }
        let wall_s = measured.wall_s;
        let files = self.source.files().map(|f| f.after_clock(wall_s));
        let summary = RunSummary::build(
            plan,
            &measured,
            RunContext {
                engine: self.engine,
                endpoint_urls: self.source.endpoint_urls(),
                target: self
                    .source
                    .target_summary(server_stats, costs.server_cpu_s, files),
                setup_s,
                setup_cpu_s: costs.setup_cpu_s,
                client_cpu_s: costs.client_cpu_s,
                peak_rss_bytes,
                peak_rss_since_setup: self.peak_rss_since_setup,
                notes: std::mem::take(&mut self.notes),
                failure: failure.clone(),
                interrupted,
                loader_footers: self.loader_footers,
                lists: crate::s3::client::lists_sent() - self.lists_at_start,
                overrides: crate::results::overrides(&self.config),
                hosts: host_summaries,
                checkpoints: self
                    .checkpoints
                    .as_ref()
                    .map(|c| TrainCheckpointSummary::of(c, &measured.records)),
            },
        );
        Ok(Finished::Outcome(TrainingOutcome {
            summary,
            measured,
            plan: self.plan,
            config: self.config,
            started: self.started,
            failure,
            interrupted,
        }))
    }
}

/// The memory of the checkpoints' buffers and connections on this process's ranks that write
/// (a training run's `workflow.checkpoint`), counted in the training budget.
fn checkpoint_bytes(
    settings: &TrainCheckpointSettings,
    options: &CheckpointOptions,
    local: &Range<usize>,
    epochs: u32,
) -> anyhow::Result<u64> {
    // The objects do not depend on the steps: planned for one step per epoch.
    let draft = TrainCheckpointPlan::resolve(
        settings,
        options,
        &budget::MemoryLimits::unlimited(),
        &crate::setup::store::env,
        epochs,
        1,
    )?;
    Ok(draft.buffer_bytes(local.clone()))
}

/// The plan: in one process checked against this machine; under mpirun the whole job's plan,
/// the same on every process, each host's share checked against its own memory, and any
/// refusal stopping every process.
fn plan(
    settings: &Settings,
    catalog: &Catalog,
    options: &PlanOptions,
    limits: &budget::MemoryLimits,
    cluster: &Cluster,
    local_ranks: usize,
) -> anyhow::Result<Plan> {
    // RLIMIT_MEMLOCK binds only the io_uring engine's locked pool: checked with the engine.
    let unlocked = budget::MemoryLimits {
        memlock_bytes: None,
        ..limits.clone()
    };
    if cluster.is_single() {
        return Ok(Plan::resolve(settings, catalog, options, &unlocked)?);
    }
    let whole = PlanOptions {
        memory_cap_bytes: None,
        ..options.clone()
    };
    let plan = Plan::resolve(
        settings,
        catalog,
        &whole,
        &budget::MemoryLimits::unlimited(),
    )?;
    cluster.agree_budget(
        &plan,
        local_ranks,
        options.tls,
        &unlocked,
        options.memory_cap_bytes,
    )?;
    Ok(plan)
}

/// The dataset whose objects a whole-object `--verify` compares the bodies with: `dataset` as
/// the catalog names it (its N is the one in the names, which `--files` may exceed), object i
/// being catalog file i. Objects with other names than DLIO's cannot be checked: refused, never
/// skipped.
fn objects_to_verify(dataset: &ObjectDataset, catalog: &Catalog) -> Result<ObjectRef, UsageError> {
    match catalog.objects.as_ref().map(|o| o.keys()) {
        Some(ObjectKeys::Dlio {
            train_prefix,
            names_of,
        }) => Ok(ObjectRef {
            dataset: Arc::new(ObjectDataset {
                train_prefix: train_prefix.clone(),
                num_files: *names_of,
                ..dataset.clone()
            }),
            index: 0,
        }),
        _ => Err(UsageError(format!(
            "--verify compares each {} object with what `ringload generate` writes under its \
             DLIO name ({}img_<i>_of_<N>.{}, i = 0, 1, … in order); the objects read here are \
             named otherwise ({}), so their bytes are not known: run without --verify",
            dataset.format,
            dataset.train_prefix,
            dataset.format,
            match catalog.file_count() {
                0 => "none listed".to_string(),
                _ => format!("the first: {}", catalog.key(0)),
            }
        ))),
    }
}

/// The engine of a training run ([`crate::setup::engine::choose`]).
fn choose_engine(
    asked: Option<EngineKind>,
    files: bool,
    plan: &Plan,
    limits: &budget::MemoryLimits,
    notes: &mut Vec<String>,
) -> anyhow::Result<EngineKind> {
    let needs = EngineNeeds {
        pool_bytes: plan.memory.pool_bytes,
        files,
    };
    let choice = setup::engine::choose(asked, &needs, limits).map_err(UsageError)?;
    if let Some(note) = choice.note {
        eprintln!("ringload run: NOTE: {note}");
        notes.push(note);
    }
    Ok(choice.kind)
}

/// A run that started and failed (exit 3, whatever the cause).
#[derive(Debug, thiserror::Error)]
#[error("the run failed: {0}")]
pub struct RunFailed(pub String);

impl ExitClass for RunFailed {
    fn exit_code(&self) -> u8 {
        exit::FAILED
    }
}

/// A run stopped by Ctrl-C or SIGTERM (exit 3: it started and did not finish).
#[derive(Debug, thiserror::Error)]
#[error(
    "the run was interrupted (Ctrl-C or SIGTERM) before its last step; the figures up to then \
     are in --output and, with --json, on stdout"
)]
pub struct RunInterrupted;

impl ExitClass for RunInterrupted {
    fn exit_code(&self) -> u8 {
        exit::FAILED
    }
}

/// A run stopped by Ctrl-C or SIGTERM while its ranks set up, before any clock started (exit
/// 3, as [`RunInterrupted`]).
#[derive(Debug, thiserror::Error)]
#[error("the run was interrupted (Ctrl-C or SIGTERM) during set-up, before anything was measured")]
pub struct SetupInterrupted;

impl ExitClass for SetupInterrupted {
    fn exit_code(&self) -> u8 {
        exit::FAILED
    }
}

fn exit_line(e: &RankError) -> String {
    e.to_string().replace('\n', " ")
}
