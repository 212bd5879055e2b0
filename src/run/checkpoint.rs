//! `ringload run` of a checkpoint workload (`workflow.checkpoint: True`), from its flags to its
//! exit code, as DLIO's `_checkpoint_write` and `_checkpoint_read` run it:
//!
//! 1. set-up: settings, the target (else the embedded server's sink), the plan and its memory
//!    budget, incomplete uploads a killed run left under the checkpoint folder aborted;
//! 2. `num_checkpoints_write` saves: sleep, barrier, each rank's objects in sequence;
//! 3. one LIST of the checkpoint folder (process 0; its count broadcast) checked against
//!    `num_checkpoints_read`;
//! 4. `num_checkpoints_read` loads of the same objects by the same ranks;
//! 5. the summary (DLIO's names, [`crate::summary::checkpoint`]), its file and the report.
//!
//! Under mpirun (the `mpi` feature) each process runs its share of the ranks against one
//! endpoint, meeting the others at every barrier; each host's share of the memory budget is
//! checked on that host and agreed by all; process 0 alone cleans up and lists (sharing what it
//! found); at the end process 0 gathers every process's phases and volume and reports for the
//! job ([`super::checkpoint_hosts`]). A failure on any process ends the job (`commands::run`).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::checkpoint_hosts::{self, HostCheckpoint, PhaseResult, agreed};
use super::objects::{PhaseFailure, PhaseMeasurements, run_objects_phase};
use super::store::{env, prepare_output};
use super::{RunConfig, session::RunFailed};
use crate::checkpoint::settings::CheckpointSettings;
use crate::checkpoint::{CheckpointOptions, CheckpointPlan};
use crate::cli::{RunArgs, load_config};
use crate::cluster::Cluster;
use crate::content::Content;
use crate::engine::{Engine, EngineKind};
use crate::exit::{self, UsageError};
use crate::metrics::{self, CpuReading};
use crate::mlperf::checkpoint_rules::{self, CheckpointFacts};
use crate::rank::RankError;
use crate::rank::checkpoint::{ObjectSpec, Phase};
use crate::results as leaf;
use crate::results::dlio::PhaseTimes;
use crate::s3::{self, Client};
use crate::signals::{exit_if_stopped_in_setup, raise_on_stop_signals};
use crate::summary::TargetSummary;
use crate::summary::checkpoint::{
    CheckpointSummary, DlioCheckpointMetric, HostVolume, PhaseIo, rows,
};
use crate::{affinity, budget, report, server};

/// Runs a checkpoint workload; `Ok` carries the exit code. Under mpirun each process runs its
/// share of the ranks against one endpoint, and process 0 reports for the job
/// ([`super::checkpoint_hosts`]).
pub fn run(args: &RunArgs, cluster: &Cluster) -> anyhow::Result<u8> {
    let started_wall = SystemTime::now();
    let interrupt = Arc::new(AtomicBool::new(false));
    let setup_done = Arc::new(AtomicBool::new(false));
    raise_on_stop_signals(Arc::clone(&interrupt))?;
    exit_if_stopped_in_setup(Arc::clone(&interrupt), Arc::clone(&setup_done), "run")?;
    let hosts = !cluster.is_single();
    // Process 0 cleans up, lists, and reports for the job.
    let lead = cluster.process() == 0;
    let options = &args.options;
    let mut shape = args.shape.clone();
    if hosts && !super::session::np_given() {
        // As DLIO under mpirun: one rank per process.
        shape.np = cluster.processes() as u32;
    }
    let np = shape.np;
    let local = Cluster::ranks_of(cluster.process(), cluster.processes(), np as usize);
    if hosts && local.is_empty() {
        return Err(UsageError(format!(
            "--np {np} is fewer than the {} processes mpirun started; pass --np {} or more",
            cluster.processes(),
            cluster.processes()
        ))
        .into());
    }
    let cfg = load_config(&args.workload, Some(&shape))?;
    let settings = CheckpointSettings::resolve(&cfg)?;
    if let Some(dir) = args.output.as_ref().filter(|_| lead) {
        prepare_output(dir)?;
    }
    let limits = budget::probe();
    let resolved = s3::target::resolve(&options.s3.target_flags(), &settings.storage, env)?;
    if hosts && resolved.is_none() {
        return Err(UsageError(
            "under mpirun, pass --endpoint (or AWS_ENDPOINT_URL): the embedded server would be \
             one per process; start one `ringload serve` (--dir DIR to keep the objects) for all \
             of them"
                .into(),
        )
        .into());
    }
    let io_options = args.options.checkpoint.io_options(options.verify);
    let plan_for = |server_bytes| {
        CheckpointPlan::resolve(
            &settings,
            &CheckpointOptions {
                np,
                hosts: cluster.processes() as u32,
                io: io_options,
                memory_cap_bytes: options.shape.memory_budget,
                server_bytes,
            },
            &limits,
            &env,
        )
    };
    // The plan first without the server, to know its objects; the budget is checked with the
    // server's share once it runs.
    let draft = plan_for(0)?;
    let (server, target) = match resolved {
        Some(target) => (None, target),
        None => {
            let (server, target) =
                start_sink(&draft, &settings, args.server_threads, options.verify)?;
            (Some(server), target)
        }
    };
    let server_bytes = if server.is_some() {
        metrics::rss_bytes().unwrap_or(0)
    } else {
        0
    };
    let mut plan = plan_for(server_bytes)?;
    let loopback = target.endpoints.iter().all(|e| e.is_loopback());
    plan.io.send_zc = plan.send_zc.enabled(loopback);
    // Each host's share against its own memory; a refusal anywhere is every process's.
    let host_shape = plan.budget_shape(local.len() as u32, server_bytes);
    let cap = options.shape.memory_budget;
    if hosts {
        let mine = budget::check_objects(&host_shape, &limits, cap).map(|_| ());
        cluster
            .agree(mine.map_err(|e| e.to_string()))
            .map_err(|e| agreed(cluster, e))?;
    } else {
        plan.check_budget()?;
    }
    let host_budget_bytes = budget::object_budget(&host_shape, &limits, cap).total_bytes;
    let mut notes = plan.notes.clone();
    let (cpus, shared_cores) = affinity::choose_cpus(options.cpus.as_deref(), local.len() as u32)?;
    if let Some(note) = shared_cores {
        eprintln!("ringload run: WARNING: {note}");
        notes.push(note);
    }
    let policy = options.s3.retry_policy();
    let client = Client::new(target.clone(), policy)?;
    let engine_kind = args.engine.unwrap_or(EngineKind::Uring);
    let threads = options.engine_threads.unwrap_or_else(affinity::cores);
    let engine = Engine::for_checkpoint(engine_kind, &client, threads)
        .map_err(|e| UsageError(format!("cannot start the {engine_kind} engine: {e}")))?;
    // Set-up requests (the cleanup, the LIST) on a small runtime and a client of their own: a
    // connection pooled by one runtime hangs when another runtime picks it up.
    let setup_client = Client::new(target.clone(), policy)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the set-up runtime")?;
    let prefix = plan.prefix();
    // Process 0 cleans up before any process writes: the others wait for its count.
    let stale = lead.then(|| {
        runtime
            .block_on(abort_stale_uploads(&setup_client, &prefix))
            .map_err(|e| format!("cannot clean up the checkpoint folder: {e}"))
    });
    let stale = cluster
        .share(stale)?
        .map_err(|e| agreed(cluster, UsageError(e)))?;
    if stale > 0 && lead {
        let line = format!(
            "aborted {stale} incomplete multipart upload{} under {prefix} that an earlier run \
             left (killed or failed before it could abort them)",
            if stale == 1 { "" } else { "s" }
        );
        eprintln!("ringload run: {line}");
        notes.push(line);
    }
    let after_write_run_s = match args.options.checkpoint.after.as_ref().filter(|_| lead) {
        Some(dir) => Some(seconds_since_end_of(dir, started_wall)?),
        None => None,
    };
    let s = &plan.settings;
    let config = RunConfig {
        engine: engine_kind,
        engine_threads: threads,
        show_progress: std::io::stderr().is_terminal(),
        cpus,
        interrupt: Arc::clone(&interrupt),
        ranks: local.clone(),
        hosts,
        sample_interval: Duration::from_secs_f64(args.options.sample_interval.unwrap_or(1.0)),
    };
    let sleep = Duration::from_secs_f64(s.time_between_checkpoints_s.max(0.0));
    let barrier_timeout = client.policy().longest_request() * 4 + sleep + Duration::from_secs(600);
    let server_cpu_now = || server.as_ref().map_or(0.0, |s| s.stats().cpu_s);
    let peak_rss_since_setup = metrics::reset_peak_rss();
    setup_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let objects_of = |steps: Vec<u32>| {
        let plan = &plan;
        move |rank: usize| -> Vec<Vec<ObjectSpec>> {
            steps
                .iter()
                .map(|&step| {
                    plan.ranks[rank]
                        .iter()
                        .map(|o| {
                            let key = plan.key(step, o);
                            ObjectSpec {
                                content: Content::of(&key, plan.settings.randomize_tensor),
                                key,
                                bytes: o.bytes,
                            }
                        })
                        .collect()
                })
                .collect()
        }
    };
    let mut failure: Option<(String, bool)> = None;
    let mut results: Vec<PhaseResult> = Vec::new();
    let run_clock = std::time::Instant::now();
    // When each phase's clock started (its end less its wall time), for --results-dir.
    let mut phase_clocks: Vec<SystemTime> = Vec::new();
    let clock_of = |r: &PhaseResult| SystemTime::now() - Duration::from_secs_f64(r.wall_s);
    let run_phase = |phase: Phase,
                     steps: Vec<u32>|
     -> Result<PhaseResult, Box<(RankError, Option<PhaseResult>)>> {
        let start = CpuReading::now(server_cpu_now());
        let objects = objects_of(steps.clone());
        let result = run_objects_phase(
            &engine,
            plan.io,
            phase,
            &objects,
            sleep,
            s.rank_sync,
            barrier_timeout,
            &config,
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
                server_cpu_s: server.as_ref().map(|_| costs.server_cpu_s),
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
    };
    // Under mpirun a failed phase ends the job at once (`commands::run` aborts it): this
    // process's ranks aborted their open uploads as they stopped.
    let failed = |error: RankError| -> anyhow::Error {
        if matches!(error, RankError::Interrupted) {
            super::session::RunInterrupted.into()
        } else {
            RunFailed(error.to_string().replace('\n', " ")).into()
        }
    };
    let writes = s.num_checkpoints_write;
    let reads = s.num_checkpoints_read;
    if writes > 0 {
        match run_phase(Phase::Save, (1..=writes).collect()) {
            Ok(o) => {
                phase_clocks.push(clock_of(&o));
                results.push(o);
            }
            Err(e) if hosts => return Err(failed(e.0)),
            Err(e) => {
                let (error, partial) = *e;
                results.extend(partial);
                failure = Some((error.to_string(), matches!(error, RankError::Interrupted)));
            }
        }
    }
    if failure.is_none() && reads > 0 {
        // One LIST of the checkpoint folder (process 0's, its count shared), as the DLIO fork
        // does before its reads.
        let found = lead.then(|| {
            runtime
                .block_on(setup_client.list_folders(&prefix))
                .map(|found| {
                    found
                        .iter()
                        .filter(|f| {
                            f.strip_prefix(&prefix)
                                .is_some_and(|r| r.starts_with("global_epoch"))
                        })
                        .count() as u32
                })
                .map_err(|e| format!("the LIST before the restores failed: {e}"))
        });
        let steps = cluster
            .share(found)?
            .map_err(|e| agreed(cluster, RunFailed(e)))?;
        if steps < reads {
            let line = format!(
                "checkpoint.num_checkpoints_read={reads} but the LIST of {prefix} finds {steps} \
                 checkpoint{} (global_epoch1_step<k>/): write them first (a run with \
                 checkpoint.num_checkpoints_write={reads}) or read fewer",
                if steps == 1 { "" } else { "s" }
            );
            if results.is_empty() {
                return Err(agreed(cluster, UsageError(line)));
            }
            if hosts {
                return Err(agreed(cluster, RunFailed(line)));
            }
            failure = Some((line, false));
        } else {
            match run_phase(Phase::Load, (1..=reads).collect()) {
                Ok(o) => {
                    phase_clocks.push(clock_of(&o));
                    results.push(o);
                }
                Err(e) if hosts => return Err(failed(e.0)),
                Err(e) => {
                    let (error, partial) = *e;
                    results.extend(partial);
                    failure = Some((error.to_string(), matches!(error, RankError::Interrupted)));
                }
            }
        }
    }
    let ended_wall = SystemTime::now();
    engine.shutdown();
    let server_stats = server.map(|s| s.shutdown());
    if results.is_empty() {
        if let Some((line, _)) = failure {
            return Err(RunFailed(line).into());
        }
        return Err(UsageError(
            "nothing to do: checkpoint.num_checkpoints_write and num_checkpoints_read are both 0"
                .into(),
        )
        .into());
    }
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
    let volume = HostVolume {
        host: Cluster::host(),
        ranks: local.clone().collect(),
        bytes_per_checkpoint: plan.host_bytes.get(cluster.process()).copied().unwrap_or(0),
        bytes_written: bytes_of(Phase::Save),
        bytes_read: bytes_of(Phase::Load),
        peak_rss_bytes: metrics::peak_rss_bytes(),
        memory_budget_bytes: host_budget_bytes,
    };
    let (results, host_volumes) = if hosts {
        let mine = HostCheckpoint::new(volume, &results);
        let Some(job) = checkpoint_hosts::gather(cluster, &mine)? else {
            // Process 0 reports for the job; its exit code is everyone's.
            let code = cluster.broadcast(Vec::new());
            return Ok(code.first().copied().unwrap_or(exit::FAILED));
        };
        job
    } else {
        (results, vec![volume])
    };
    let peak_rss_bytes = host_volumes.iter().filter_map(|h| h.peak_rss_bytes).max();
    if let Some(over) = metrics::rss_over_budget(peak_rss_bytes, plan.memory.total_bytes) {
        let warning = report::run::rss_over_budget(plan.memory.total_bytes, over);
        eprintln!("ringload run: WARNING: {warning}");
        notes.push(warning);
    }
    if !peak_rss_since_setup {
        notes
            .push("peak RSS is the process's since its start (this kernel cannot reset it)".into());
    }
    let size_gib = plan.checkpoint_size_gb;
    let mut all_rows = Vec::new();
    for r in &results {
        all_rows.extend(rows(r.phase, &r.records, &r.steps, size_gib));
    }
    let phase_io = |phase: Phase| {
        results
            .iter()
            .find(|r| r.phase == phase)
            .map(|r| PhaseIo::of(phase, &r.stats, r.wall_s, r.client_cpu_s, r.server_cpu_s))
    };
    let rules = checkpoint_rules::rules(&CheckpointFacts {
        writes: plan.settings.num_checkpoints_write,
        reads: plan.settings.num_checkpoints_read,
        after_write_run_s,
        processes: np,
        hosts: host_volumes.len() as u32,
        bytes_per_checkpoint_per_host: plan.host_bytes.iter().copied().max().unwrap_or(0),
        host_memory_bytes: limits.mem_total_bytes,
        checkpoint_bytes: plan.checkpoint_bytes,
        accelerator_memory_bytes: (options.checkpoint.accelerator_memory)
            .unwrap_or(checkpoint_rules::B200_MEMORY_BYTES),
    });
    let summary = CheckpointSummary {
        kind: "checkpoint",
        ringload_version: env!("CARGO_PKG_VERSION"),
        workload: plan.settings.workload.name.clone(),
        model: plan.settings.model_name.clone(),
        engine: engine_kind,
        np: np as usize,
        num_hosts: host_volumes.len(),
        start: rfc3339(started_wall),
        end: rfc3339(ended_wall),
        metric: DlioCheckpointMetric::of(size_gib, &all_rows),
        checkpoint_bytes: plan.checkpoint_bytes,
        objects_per_checkpoint: plan.objects_per_checkpoint,
        checkpoints: all_rows,
        save: phase_io(Phase::Save),
        load: phase_io(Phase::Load),
        hosts: host_volumes,
        io_shape: plan.io,
        peak_rss_bytes,
        memory_budget_bytes: plan.memory.total_bytes,
        target: TargetSummary::of(
            &target,
            client.tls_negotiated(),
            server_stats,
            results.iter().filter_map(|r| r.server_cpu_s).sum(),
        ),
        after_write_run_s,
        stale_uploads_aborted: stale,
        rules,
        notes,
        failure: failure.as_ref().map(|(line, _)| line.clone()),
        timeseries: phases_series(&results),
    };
    let human = write_report(args, &summary)?;
    if options.results.results_dir.is_some() && failure.is_none() {
        let phases: Vec<PhaseTimes> = results
            .iter()
            .zip(&phase_clocks)
            .map(|(r, &clock_start)| PhaseTimes {
                phase: r.phase,
                steps: &r.steps,
                records: &r.records,
                clock_start,
            })
            .collect();
        let hosts_n = summary.num_hosts as u32;
        let (fields, ranks) =
            leaf::dlio::checkpoint(&summary, &phases, hosts_n, started_wall, ended_wall);
        let written = leaf::write(&leaf::Leaf {
            benchmark: leaf::Benchmark::Checkpointing,
            args,
            config: &cfg,
            model: &plan.settings.model_name,
            np,
            hosts: hosts_n,
            accelerator: options
                .checkpoint
                .accelerator_memory
                .map_or(Some("b200".into()), |_| None),
            start: started_wall,
            end: ended_wall,
            summary: fields,
            ranks,
            ringload_summary: serde_json::to_value(&summary)?,
            stdout: human,
            stderr: summary
                .notes
                .iter()
                .map(|n| format!("ringload run: {n}\n"))
                .collect(),
        })?;
        eprintln!("ringload run: MLPerf results in {}", written.display());
    }
    let code = match failure {
        Some((_, true)) => return Err(super::session::RunInterrupted.into()),
        Some((line, false)) => return Err(RunFailed(line).into()),
        None => exit::OK,
    };
    if hosts {
        cluster.broadcast(vec![code]);
    }
    Ok(code)
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

/// summary.json into --output, the summary on stdout with --json, and the report (returned).
fn write_report(args: &RunArgs, summary: &CheckpointSummary) -> anyhow::Result<String> {
    if let Some(dir) = &args.output {
        let heading = format!(
            "ringload run: {} checkpoints, NP {}, {} engine",
            summary.workload, summary.np, summary.engine
        );
        let series = &summary.timeseries;
        let html = report::timeseries::html(&heading, series).map_err(|e| anyhow::anyhow!(e))?;
        for (name, text) in [("timeseries.csv", series.csv()), ("timeseries.html", html)] {
            std::fs::write(dir.join(name), text)
                .with_context(|| format!("writing {}", dir.join(name).display()))?;
        }
        let path = dir.join("summary.json");
        let tmp = dir.join(".summary.json.tmp");
        let text = serde_json::to_string_pretty(summary)?;
        std::fs::write(&tmp, text + "\n")
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, summary)?;
        writeln!(stdout)?;
    }
    let human = report::checkpoint_run::render(summary);
    if args.json {
        eprint!("{human}");
    } else {
        print!("{human}");
    }
    Ok(human)
}

/// Aborts every multipart upload open under `prefix` (only there: never another run's
/// uploads elsewhere in the bucket); how many it aborted.
async fn abort_stale_uploads(client: &Client, prefix: &str) -> Result<usize, s3::RequestError> {
    if prefix.is_empty() {
        // The bucket's root: too wide to clean up blindly.
        return Ok(0);
    }
    let open = client.list_uploads(prefix).await?;
    for upload in &open {
        client
            .abort_multipart(&upload.key, &upload.upload_id)
            .await?;
    }
    Ok(open.len())
}

/// Seconds from the end of the write run whose `--output` is `dir` (its summary.json's `end`)
/// to `now`.
fn seconds_since_end_of(dir: &std::path::Path, now: SystemTime) -> anyhow::Result<f64> {
    let path = dir.join("summary.json");
    let fix = "pass --after the --output folder of the write run";
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UsageError(format!(
            "--after {}: cannot read {}: {e}; {fix}",
            dir.display(),
            path.display()
        ))
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "--after {}: {} is not JSON ({e}); {fix}",
            dir.display(),
            path.display()
        ))
    })?;
    let end = json
        .get("end")
        .and_then(|v| v.as_str())
        .and_then(parse_rfc3339)
        .ok_or_else(|| {
            UsageError(format!(
                "--after {}: {} has no `end` time of a ringload checkpoint run; {fix}",
                dir.display(),
                path.display()
            ))
        })?;
    Ok(now
        .duration_since(end)
        .map(|d| d.as_secs_f64())
        .unwrap_or_else(|e| -e.duration().as_secs_f64()))
}

/// `t` as RFC 3339 UTC with milliseconds, e.g. `2026-12-06T01:02:03.456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = crate::units::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The inverse of [`rfc3339`] (the `Z` form it writes).
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let millis: u64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    let (m, day) = (u32::try_from(m).ok()?, u32::try_from(day).ok()?);
    let secs = crate::units::days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60 + s;
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(secs).ok()?)
            + Duration::from_millis(millis),
    )
}

/// The embedded server of a checkpoint run with no endpoint: a sink that discards what is
/// written (checking it with `--verify`) and serves the plan's objects by generating them.
fn start_sink(
    plan: &CheckpointPlan,
    settings: &CheckpointSettings,
    server_threads: Option<usize>,
    verify: bool,
) -> anyhow::Result<(server::Server, s3::Target)> {
    let bucket = settings
        .storage
        .bucket
        .as_deref()
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = super::store::checked_bucket(bucket)?.to_string();
    let objects = super::store::checkpoint_sink_objects(plan);
    super::store::start_sink_server(
        &bucket,
        objects,
        settings.randomize_tensor,
        verify,
        server_threads,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        for secs in [0u64, 951_782_400, 1_796_000_123, 4_102_444_800] {
            let t = SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + 789);
            let text = rfc3339(t);
            assert_eq!(parse_rfc3339(&text), Some(t), "{text}");
        }
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
