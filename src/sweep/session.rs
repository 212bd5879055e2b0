//! `ringload sweep`, from its request to its exit code: the grid from the request's lists,
//! every point planned against the store's files, each run as a child `ringload run` (its
//! command line the Face's, [`PointCommandLine`]), then the study's tables, plots and report.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use super::points::{Planner, point_command, point_process, point_run};
use super::request::{PointCommandLine, PointRun, SweepRequest};
use super::{Axes, Planned, Point, Runner, SweepFile, grid, html, latency_lines, plots, table};
use crate::budget;
use crate::checkpoint::{CheckpointOptions, CheckpointPlan, CheckpointSettings};
use crate::exit::{self, ExitClass, UsageError};
use crate::settings::Settings;
use crate::setup::store::{Storage, SweepStore, prepare_output, resolve_target};
use crate::signals::{exit_if_stopped_in_setup, raise_on_stop_signals};
use crate::workload::{Settled, Workload};

/// Runs the sweep `args` asks for, of `workload` as the caller resolved it, each point's
/// command line written by `line`; `Ok` carries the exit code.
pub fn run(
    args: &SweepRequest,
    line: &dyn PointCommandLine,
    workload: Workload,
) -> anyhow::Result<u8> {
    // Ctrl-C or SIGTERM while the grid is planned: one line and exit 3; once points run, the
    // runner stops the running one and keeps what finished.
    let interrupt = Arc::new(AtomicBool::new(false));
    let setup_done = Arc::new(AtomicBool::new(false));
    raise_on_stop_signals(Arc::clone(&interrupt))?;
    exit_if_stopped_in_setup(Arc::clone(&interrupt), Arc::clone(&setup_done), "sweep")?;
    // Every folder the sweep writes is checked before the first point runs: --results-dir
    // here, --output when it is claimed.
    if let Some(root) = &args.results_dir {
        crate::results::check_root(root)?;
    }
    // On a file system the points read with the file engine.
    let files = args.data_dir.is_some() || workload.on_files();
    let settings = match &workload.settled {
        Settled::Checkpoint(settings) => {
            crate::setup::store::refuse_checkpoint_manifest(args.manifest.as_deref())?;
            return run_checkpoint(args, line, settings, files, interrupt, setup_done);
        }
        Settled::Training(settings) => settings.as_ref().clone(),
    };
    claim_output(args)?;
    let points = grid(&axes(args, &settings, files));
    // The store: a data directory each point reads, the one given, or one embedded server
    // for every point.
    let storage = match files_root(args, &workload)? {
        Some(root) => SweepStore::Files(root),
        None => SweepStore::S3(Storage::open(
            resolve_target(&args.target, &settings.storage)?,
            &settings,
            args.bucket.as_deref(),
            args.server_threads,
            crate::setup::store::CheckpointWrites::of(workload.train_checkpoint.as_deref())
                .as_ref(),
        )?),
    };
    limit_server(args, &storage)?;
    if args.find.find_max_np {
        let planner = Planner::new(args, &storage, &workload.config, &settings)?;
        let (code, interrupted) = super::maxnp_search::run(
            args, line, &settings, &storage, &planner, points, interrupt, setup_done,
        )?;
        if interrupted {
            return Err(SweepInterrupted(args.output.display().to_string()).into());
        }
        return Ok(code);
    }
    let planned = plan_points(args, &storage, &workload.config, &settings, points)?;
    let skipped = planned.iter().filter(|p| p.skip.is_some()).count();
    eprintln!(
        "sweep: {} ({} over the memory budget or not plannable, skipped) into {}",
        crate::units::counted(planned.len() as u64, "point"),
        skipped,
        args.output.display()
    );
    let child = point_command(args, line, &storage)?;
    let server_cpu = || storage.server().map(|s| s.stats().cpu_s);
    setup_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let runner = Runner {
        dir: args.output.clone(),
        workload: settings.workload.name.clone(),
        command: args.command.clone(),
        gate: args.gate,
        resume: args.resume,
        child: &child,
        server_cpu_s: &server_cpu,
        interrupt,
    };
    let (sweep, interrupted) = runner.run(&planned)?;
    storage.shutdown();
    write_study(args, &sweep)?;
    if interrupted {
        return Err(SweepInterrupted(args.output.display().to_string()).into());
    }
    Ok(sweep.exit_code())
}

/// The data directory of a sweep on a file system (`--data-dir`, or the workload's
/// `storage.storage_type: local_fs` under `storage.storage_root`), checked once here; each
/// point takes it from its own command line.
fn files_root(
    args: &SweepRequest,
    workload: &crate::workload::Workload,
) -> Result<Option<std::path::PathBuf>, UsageError> {
    let Some(root) = workload.data_root(args.data_dir.as_deref()) else {
        return Ok(None);
    };
    crate::files::DataDir::open(&root, true).map_err(UsageError)?;
    Ok(Some(root))
}

/// `--server-bandwidth-mib-per-s`: the shared embedded server's limit, all points' connections
/// together; refused in one line when an endpoint is given (there is no embedded server).
fn limit_server(args: &SweepRequest, storage: &SweepStore) -> Result<(), UsageError> {
    let Some(mib) = args.find.server_bandwidth_mib_per_s else {
        return Ok(());
    };
    match storage.server() {
        Some(server) => {
            server.limit_bandwidth(Some((mib * crate::units::MIB) as u64));
            Ok(())
        }
        None => Err(UsageError(format!(
            "--server-bandwidth-mib-per-s {mib}: it limits the sweep's embedded server, and an \
             endpoint is given; drop the flag (or start `ringload serve --bandwidth-mib-per-s \
             {mib}` and point --endpoint at it)"
        ))),
    }
}

/// A sweep of a checkpoint workload: NP (and engine, rounds) only, every NP a multiple of
/// tensor × pipeline parallelism (checked before anything runs); each point a child `ringload
/// run` against its own embedded sink unless a target is given; then the checkpoint table
/// ([`super::checkpoint`]), no plots.
fn run_checkpoint(
    args: &SweepRequest,
    line: &dyn PointCommandLine,
    settings: &CheckpointSettings,
    files: bool,
    interrupt: Arc<AtomicBool>,
    setup_done: Arc<AtomicBool>,
) -> anyhow::Result<u8> {
    check_checkpoint_flags(args, settings)?;
    claim_output(args)?;
    let mut axes = axes_of_lists(args, vec![0], files);
    axes.loaders = vec![crate::plan::Loader::Ringload];
    let points = grid(&axes);
    let planned = plan_checkpoint_points(args, settings, points);
    eprintln!(
        "sweep: {} of checkpoint workload {} ({} over the memory budget or not plannable, \
         skipped) into {}",
        crate::units::counted(planned.len() as u64, "point"),
        settings.model_name,
        planned.iter().filter(|p| p.skip.is_some()).count(),
        args.output.display()
    );
    let exe = std::env::current_exe().context("finding the ringload binary for the points")?;
    // Each point against its own embedded sink unless a target is given: the flags as given.
    let child = |point: &Point, folder: &Path| {
        let run = PointRun {
            read_threads: None,
            ..point_run(point, folder)
        };
        point_process(&exe, args, &line.args(&run))
    };
    setup_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let runner = Runner {
        dir: args.output.clone(),
        workload: settings.model_name.clone(),
        command: args.command.clone(),
        gate: args.gate,
        resume: args.resume,
        child: &child,
        server_cpu_s: &|| None,
        interrupt,
    };
    let (sweep, interrupted) = runner.run(&planned)?;
    write_checkpoint_study(args, &sweep)?;
    if interrupted {
        return Err(SweepInterrupted(args.output.display().to_string()).into());
    }
    Ok(sweep.exit_code())
}

/// Refuses a checkpoint sweep's training-only flags and NP values its parallelism cannot take.
fn check_checkpoint_flags(
    args: &SweepRequest,
    settings: &CheckpointSettings,
) -> anyhow::Result<()> {
    if args.find.find_max_np || args.find.server_bandwidth_mib_per_s.is_some() {
        return Err(UsageError(
            "--find-max-np and --server-bandwidth-mib-per-s are for training workloads (AU); a \
             checkpoint workload's sweep varies --np: drop them"
                .into(),
        )
        .into());
    }
    let training_only = [
        ("--read-threads", !args.grid.read_threads.is_empty()),
        ("--prefetch", !args.grid.prefetch.is_empty()),
        ("--coalesce-rgs", !args.grid.coalesce_rgs.is_empty()),
        ("--computation-time", !args.grid.computation_time.is_empty()),
        (
            "--loader",
            args.grid.loader != [crate::plan::Loader::Ringload],
        ),
        ("--latency-point", args.latency_point.is_some()),
    ];
    if let Some((flag, _)) = training_only.iter().find(|(_, given)| *given) {
        return Err(UsageError(format!(
            "{flag} is a training sweep's axis; a checkpoint workload's sweep varies --np (and \
             --engine, --repeat): drop {flag}"
        ))
        .into());
    }
    let bad: Vec<String> = args
        .grid
        .np
        .iter()
        .filter(|&&np| settings.parallelism(u64::from(np)).is_err())
        .map(ToString::to_string)
        .collect();
    if !bad.is_empty() {
        let mp = settings.tensor * settings.pipeline;
        return Err(UsageError(format!(
            "--np {}: a checkpoint sweep's NP values must be multiples of \
             model.parallelism.tensor × pipeline ({} × {} = {mp}){}; use e.g. --np {mp},{},{}",
            bad.join(","),
            settings.tensor,
            settings.pipeline,
            match settings.mode {
                crate::checkpoint::settings::CheckpointMode::Default => String::new(),
                _ => " and fit checkpoint.mode subset's parallelism.data".into(),
            },
            2 * mp,
            4 * mp
        ))
        .into());
    }
    Ok(())
}

/// Each point's checkpoint plan: skipped where it is not plannable or over the memory budget,
/// with an estimate of its time.
fn plan_checkpoint_points(
    args: &SweepRequest,
    settings: &CheckpointSettings,
    points: Vec<Point>,
) -> Vec<Planned> {
    let limits = budget::probe();
    points
        .into_iter()
        .map(|point| {
            let plan = CheckpointPlan::resolve(
                settings,
                &CheckpointOptions {
                    np: point.np,
                    hosts: 1,
                    io: args.checkpoint_io,
                    memory_cap_bytes: args.memory_budget_bytes,
                    server_bytes: 0,
                },
                &limits,
                &crate::setup::store::env,
            );
            let skip = match &plan {
                Ok(plan) => plan.check_budget().err().map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            // Each checkpoint's sleep, and a second per GiB moved.
            let moves = f64::from(settings.num_checkpoints_write + settings.num_checkpoints_read);
            let estimate_s = plan.as_ref().map_or(0.0, |p| {
                moves * (settings.time_between_checkpoints_s.max(0.0) + p.checkpoint_size_gb)
            });
            Planned {
                point,
                skip,
                estimate_s,
            }
        })
        .collect()
}

/// Writes the checkpoint study (markdown, CSV, JSON) into the output folder, and the markdown
/// (or, with `--json`, the JSON) to stdout.
fn write_checkpoint_study(args: &SweepRequest, sweep: &SweepFile) -> anyhow::Result<()> {
    let rows = super::checkpoint::rows(sweep);
    let markdown = super::checkpoint::markdown(sweep, &rows);
    let study_json = serde_json::to_string_pretty(&rows)?;
    for (name, text) in [
        ("study.md", markdown.as_str()),
        ("study.csv", &super::checkpoint::csv(&rows)),
        ("study.json", &study_json),
    ] {
        let path = args.output.join(name);
        std::fs::write(&path, text)
            .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{study_json}")?;
    } else {
        write!(stdout, "{markdown}")?;
    }
    Ok(())
}

/// Creates `--output`, checks it writable and claims it (`--resume`, `--force`).
fn claim_output(args: &SweepRequest) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.output).map_err(|e| {
        UsageError(format!(
            "cannot create --output {}: {e}",
            args.output.display()
        ))
    })?;
    prepare_output(&args.output)?;
    super::claim_output(&args.output, args.resume, args.force)?;
    Ok(())
}

/// The grid's axes: the flags' lists, each empty one the workload's value.
fn axes(args: &SweepRequest, settings: &Settings, files: bool) -> Axes {
    let read_threads = match args.grid.read_threads.as_slice() {
        [] => vec![u64::from(settings.read_threads)],
        list => list.to_vec(),
    };
    axes_of_lists(args, read_threads, files)
}

/// The grid's axes from the flags' lists, with `read_threads`; on a file system (`files`) the
/// engine axis defaults to the file engine.
fn axes_of_lists(args: &SweepRequest, read_threads: Vec<u64>, files: bool) -> Axes {
    let lists = &args.grid;
    let engines: Vec<String> = if lists.engine.is_empty() && files {
        vec![crate::engine::EngineKind::File.to_string()]
    } else if lists.engine.is_empty() {
        vec![crate::setup::engine::default_kind().to_string()]
    } else {
        lists.engine.iter().map(ToString::to_string).collect()
    };
    let some = |v: &[u64]| -> Vec<Option<u64>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().copied().map(Some).collect()
        }
    };
    let cts: Vec<Option<f64>> = if lists.computation_time.is_empty() {
        vec![None]
    } else {
        lists.computation_time.iter().copied().map(Some).collect()
    };
    Axes {
        loaders: lists.loader.clone(),
        engines,
        np: lists.np.clone(),
        read_threads,
        prefetch: some(&lists.prefetch),
        coalesce_rgs: some(&lists.coalesce_rgs),
        computation_time: cts,
        repeat: args.repeat,
    }
}

/// Every point planned before the first runs, against the files the store holds: a point
/// over the memory budget (or not plannable) is skipped with the plan's reason.
fn plan_points(
    args: &SweepRequest,
    storage: &SweepStore,
    config: &crate::config::RawConfig,
    settings: &Settings,
    points: Vec<Point>,
) -> anyhow::Result<Vec<Planned>> {
    let planner = Planner::new(args, storage, config, settings)?;
    points.into_iter().map(|p| planner.plan(p)).collect()
}

/// The study: study.md, .csv, .json, the plots, report.html, and the table on stdout.
fn write_study(args: &SweepRequest, sweep: &SweepFile) -> anyhow::Result<()> {
    let rows = table::rows(sweep);
    let markdown = table::markdown(sweep, &rows);
    let study_json = serde_json::to_string_pretty(&rows)?;
    let write = |name: &str, text: &str| {
        let path = args.output.join(name);
        std::fs::write(&path, text)
            .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))
    };
    write("study.md", &markdown)?;
    write("study.csv", &table::csv(&rows))?;
    write("study.json", &study_json)?;
    let au_target = sweep
        .points
        .iter()
        .find_map(|p| p.summary.as_ref()?["au_target_percent"].as_f64());
    let mut plots = plots::plots(&rows, au_target).map_err(anyhow::Error::msg)?;
    if let Some((title, lines)) = latency_lines(sweep, &args.output, args.latency_point) {
        plots.push(plots::Plot {
            file: "latency-cdf.svg".into(),
            svg: plots::latency_cdf(&title, &lines).map_err(anyhow::Error::msg)?,
            title,
        });
    }
    // The time series of the latency point's first run of each engine: how its throughput,
    // requests in flight and latency moved over the run.
    if let Some((np, rt)) = args.latency_point.or_else(|| {
        sweep
            .points
            .iter()
            .filter(|p| p.summary.is_some())
            .max_by_key(|p| (u64::from(p.point.np) * p.point.read_threads, p.point.np))
            .map(|p| (p.point.np, p.point.read_threads))
    }) {
        let mut engines: Vec<&str> = Vec::new();
        for p in sweep
            .points
            .iter()
            .filter(|p| p.summary.is_some() && (p.point.np, p.point.read_threads) == (np, rt))
        {
            if !engines.contains(&p.point.engine.as_str()) {
                engines.push(&p.point.engine);
                plots.extend(
                    plots::timeseries(&args.output, &p.name, &p.name)
                        .map_err(anyhow::Error::msg)?,
                );
            }
        }
    }
    plots::write_all(&args.output, &plots)?;
    write("report.html", &html::report(sweep, &markdown, &plots))?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{study_json}")?;
    } else {
        write!(stdout, "{markdown}")?;
    }
    Ok(())
}

/// A sweep stopped by Ctrl-C or SIGTERM (exit 3); what ran is kept.
#[derive(Debug, thiserror::Error)]
#[error(
    "the sweep was interrupted (Ctrl-C or SIGTERM); the points that finished are in \
     {0}/sweep.json, and --resume runs the rest"
)]
pub struct SweepInterrupted(pub String);

impl ExitClass for SweepInterrupted {
    fn exit_code(&self) -> u8 {
        exit::FAILED
    }
}
