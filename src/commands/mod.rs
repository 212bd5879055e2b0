//! What each subcommand does, top to bottom: configuration → settings → catalog → plan →
//! output. [`exit_code`] maps an error to its documented code. A run's session returns its
//! outcome; [`output`] writes and renders it.

mod compare;
mod content;
mod output;

use std::io::{IsTerminal, Write};

use anyhow::Context;

use crate::catalog::{self, Catalog, CatalogError, DirSource};
use crate::checkpoint::training::TrainCheckpointPlan;
use crate::checkpoint::{CheckpointError, CheckpointOptions, CheckpointPlan, CheckpointSettings};
use crate::cli::{Command, DatasizeArgs, GenerateArgs, PlanArgs, RunArgs, load_config};
use crate::cluster::Cluster;
use crate::config::ConfigError;
use crate::datagen::{self, DirSink, GenerateError};
use crate::exit::{ExitClass, UsageError};
use crate::plan::{Plan, PlanError};
use crate::run::checkpoint::CheckpointSession;
use crate::run::prepare::Prepared;
use crate::run::session::{Finished, RunFailed, RunInterrupted, Session};
use crate::s3::{self, Bucket, RequestError};
use crate::server::ServerError;
use crate::server::virtual_dataset::VirtualError;
use crate::settings::{Settings, SettingsError};
use crate::setup::store::{env, parquet_manifest, refuse_checkpoint_manifest};
use crate::sizing::{self, DatasizeRequest};
use crate::sweep::session::SweepInterrupted;
use crate::workload::{Kind, Settled, Workload};
use crate::{affinity, budget, exit, report};

/// The virtual dataset of `serve WORKLOAD`, for tests' servers.
pub use crate::serve::{serve_store, virtual_store};

/// Runs a command; `Ok` carries the exit code.
pub fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Plan(args) => plan(&args),
        Command::Generate(args) => generate(&args),
        Command::Serve(args) => crate::serve::serve(&args),
        Command::Run(args) => run(&args),
        Command::Sweep(args) => {
            let workload = Workload::resolve(load_config(&args.workload, None)?)?;
            // Every point would refuse it: refused once, before any runs.
            if workload.checkpoint().is_none()
                && let Some(flag) = args.options.checkpoint.given().first()
            {
                return Err(checkpoint_flag_on_training(flag, workload.name()).into());
            }
            crate::sweep::session::run(&args.request(), &args, workload)
        }
        Command::Compare(args) => compare::compare(&args),
        Command::Datasize(args) => datasize(&args),
        Command::Content(args) => content::write(&args),
    }
}

/// The catalog of the workload's files: from footers under `dir`, or computed from the schema.
/// A whole-object dataset's: from `manifest`, listed under `dir`, or computed from DLIO's
/// names and sizes.
fn catalog_for(
    settings: &Settings,
    dir: Option<&std::path::Path>,
    manifest: Option<&std::path::Path>,
) -> anyhow::Result<Catalog> {
    if let Some(objects) = &settings.objects {
        return Ok(match (manifest, dir) {
            (Some(file), _) => {
                catalog::manifest::manifest_objects(file, objects, settings.num_files)?
            }
            (None, Some(dir)) => {
                catalog::discover_objects(&DirSource::new(dir), objects, settings.num_files)?
            }
            (None, None) => catalog::computed_objects(objects, settings.num_files),
        });
    }
    if let Some(file) = manifest {
        return Err(parquet_manifest(file).into());
    }
    let columns = settings.columns_read.as_deref();
    match dir {
        Some(dir) => Ok(catalog::discover(
            &DirSource::new(dir),
            &settings.dataset.train_prefix,
            settings.num_files,
            columns,
            false,
        )?),
        None => {
            let probe = datagen::probe_file(&settings.dataset)
                .context("laying out a file of the workload's schema")?;
            Ok(catalog::computed(
                &settings.dataset,
                &probe,
                settings.num_files,
                columns,
                false,
            )?)
        }
    }
}

fn plan(args: &PlanArgs) -> anyhow::Result<u8> {
    let workload = Workload::resolve(load_config(&args.workload, Some(&args.shape))?)?;
    let settings = match &workload.settled {
        Settled::Checkpoint(settings) => {
            refuse_checkpoint_manifest(args.manifest.as_deref())?;
            return checkpoint_plan(args, settings);
        }
        Settled::Training(settings) => settings,
    };
    let catalog = catalog_for(settings, args.dir.as_deref(), args.manifest.as_deref())?;
    let mut options = args.shape.plan_options(&args.shape_options, 0);
    // Checkpoints during training (`workflow.checkpoint`): their buffers in the budget, then
    // their saves for the plan's steps.
    let checkpoint_options = CheckpointOptions {
        np: args.shape.np,
        hosts: 1,
        io: args.checkpoint.io.io_options(false),
        memory_cap_bytes: None,
        server_bytes: 0,
    };
    let unlimited = budget::MemoryLimits::unlimited();
    let train_checkpoint = |steps| {
        workload
            .train_checkpoint
            .as_deref()
            .map(|c| {
                TrainCheckpointPlan::resolve(
                    c,
                    &checkpoint_options,
                    &unlimited,
                    &env,
                    settings.epochs,
                    steps,
                )
            })
            .transpose()
    };
    if let Some(draft) = train_checkpoint(1)? {
        options.checkpoint_bytes = draft.buffer_bytes(0..args.shape.np as usize);
    }
    let plan = Plan::resolve(settings, &catalog, &options, &budget::probe())?;
    let checkpoints = train_checkpoint(plan.steps_per_rank)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let mut json = serde_json::to_value(&plan)?;
        if let (Some(c), Some(fields)) = (&checkpoints, json.as_object_mut()) {
            fields.insert("train_checkpoints".into(), serde_json::to_value(c)?);
        }
        serde_json::to_writer_pretty(&mut stdout, &json)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", report::plan::render(&plan, args.full))?;
        if let Some(c) = &checkpoints {
            write!(stdout, "{}", report::plan::render_train_checkpoints(c))?;
        }
    }
    Ok(exit::OK)
}

/// `plan` of a checkpoint workload (`workflow.checkpoint` true, `workflow.train` false).
fn checkpoint_plan(args: &PlanArgs, settings: &CheckpointSettings) -> anyhow::Result<u8> {
    let options = CheckpointOptions {
        np: args.shape.np,
        hosts: args.checkpoint.hosts,
        io: args.checkpoint.io.io_options(false),
        memory_cap_bytes: args.shape_options.memory_budget,
        server_bytes: 0,
    };
    // As `run` plans it: RLIMIT_MEMLOCK binds only the io_uring engine's pool, and the engine
    // choice falls back to the baseline over it.
    let limits = budget::MemoryLimits {
        memlock_bytes: None,
        ..budget::probe()
    };
    let plan = CheckpointPlan::resolve(settings, &options, &limits, &env)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &plan)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", report::checkpoint::render(&plan, args.full))?;
    }
    Ok(exit::OK)
}

/// Generator threads: the cores this process may use, fewer if each one's row group in memory
/// would crowd MemAvailable.
fn default_jobs(settings: &Settings) -> usize {
    let cores = affinity::cores();
    let per_job = settings.record_bytes * settings.dataset.row_group_rows * 2
        + datagen::GENERATION_BATCH_BYTES;
    match budget::probe().mem_available_bytes {
        Some(avail) => cores.min((avail / 2 / per_job.max(1)).max(1) as usize),
        None => cores,
    }
}

/// What `generate` writes: Flux-schema Parquet, or a whole-object dataset (npz, jpeg, tfrecord).
enum Generation {
    Parquet(Box<Settings>, crate::content::Shape),
    Objects(crate::dataset::ObjectDataset),
}

impl Generation {
    fn write<S: datagen::ObjectSink>(
        &self,
        sink: &S,
        jobs: usize,
        show_progress: bool,
    ) -> Result<datagen::GenerateSummary, GenerateError> {
        match self {
            Generation::Parquet(s, shape) => {
                datagen::generate(&s.dataset, s.num_files, sink, jobs, show_progress, *shape)
            }
            Generation::Objects(d) => {
                datagen::objects::generate_objects(d, sink, jobs, show_progress)
            }
        }
    }
}

fn generate(args: &GenerateArgs) -> anyhow::Result<u8> {
    if let Some(root) = &args.results_dir {
        crate::results::check_root(root)?;
    }
    let started = std::time::SystemTime::now();
    let workload = Workload::resolve(load_config(&args.workload, None)?)?;
    let config = workload.config.clone();
    let Settled::Training(settings) = workload.settled else {
        return Err(UsageError(format!(
            "{}: a checkpoint workload writes its objects when it runs; generate makes \
             training datasets: `ringload run {}` writes the checkpoints",
            workload.name(),
            workload.name()
        ))
        .into());
    };
    let settings = *settings;
    settings.check_generatable()?;
    let datagen = args
        .results_dir
        .as_ref()
        .map(|_| output::DatagenFacts::of(&settings));
    let shape = args.content.reduction().shape().map_err(UsageError)?;
    let storage = settings.storage.clone();
    let generation = match settings.objects.clone() {
        Some(dataset) => Generation::Objects(crate::dataset::ObjectDataset {
            content: shape,
            ..dataset
        }),
        None => Generation::Parquet(Box::new(settings), shape),
    };
    let jobs = args.jobs.unwrap_or_else(|| match &generation {
        Generation::Parquet(settings, _) => default_jobs(settings),
        Generation::Objects(_) => affinity::cores(),
    });
    let show_progress = std::io::stderr().is_terminal();
    let summary = match (
        &args.out,
        args.s3.endpoint.is_some() || args.s3.bucket.is_some(),
    ) {
        (Some(out), _) => generation.write(&DirSink::new(out), jobs, show_progress)?,
        (None, true) => {
            let target = s3::target::resolve(&args.s3.target_flags(), &storage, env)?
                .ok_or_else(|| {
                    UsageError(
                        "--bucket without an endpoint: pass --endpoint URL (or set AWS_ENDPOINT_URL)"
                            .into(),
                    )
                })?;
            let bucket = Bucket::new(target, args.s3.retry_policy())
                .context("starting the S3 client")?
                .with_signed_payloads(args.signed_payload);
            generation.write(&bucket, jobs, show_progress)?
        }
        (None, false) => {
            return Err(UsageError(
                "where to? pass --output DIR, or --endpoint URL --bucket NAME to write to S3"
                    .into(),
            )
            .into());
        }
    };
    let human = report::generate_summary(&summary);
    if let (Some(root), Some(facts)) = (&args.results_dir, datagen) {
        let leaf = output::datagen_leaf(
            root,
            args.system.clone(),
            &config,
            &facts,
            &summary,
            (started, std::time::SystemTime::now()),
            &human,
        )?;
        eprintln!("ringload generate: MLPerf results in {}", leaf.display());
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &summary)?;
        writeln!(stdout)?;
    } else {
        writeln!(stdout, "{human}")?;
    }
    Ok(exit::OK)
}

/// `ringload run` (src/run/session.rs). Under mpirun this process runs a share of the ranks
/// (src/cluster.rs), and a failure here ends every process with this one's exit code.
fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let cluster = Cluster::start(&env).map_err(UsageError)?;
    let request = args.request();
    let result = load_config(&args.workload, Some(&args.shape))
        .map_err(anyhow::Error::from)
        .and_then(|config| Ok(Workload::resolve(config)?))
        .and_then(|workload| {
            refuse_misplaced_flags(args, &workload)?;
            Prepared::start(&request, workload, &cluster)
        })
        .and_then(|prepared| {
            // The session of the workload's kind returns its outcome; it is written and rendered
            // here, and under mpirun process 0's exit code is sent to every process.
            let code = match prepared.workload.kind() {
                Kind::Checkpoint => match CheckpointSession::prepare(prepared)?.execute()? {
                    Finished::Outcome(outcome) => output::checkpoint(args, &outcome)?,
                    Finished::Follower(code) => return Ok(code),
                },
                Kind::RowGroups | Kind::WholeObjects => {
                    match Session::prepare(prepared)?.execute()? {
                        Finished::Outcome(outcome) => output::training(args, &outcome)?,
                        Finished::Follower(code) => return Ok(code),
                    }
                }
            };
            if !cluster.is_single() {
                cluster.broadcast(vec![code]);
            }
            Ok(code)
        });
    if let Err(e) = &result
        && !cluster.is_single()
    {
        // Abort semantics: no process is left waiting for this one at a collective. One
        // write, so processes' lines do not interleave.
        let line = format!("ringload: {}\n", exit::one_line(e));
        let _ = std::io::stderr().write_all(line.as_bytes());
        cluster.abort(exit_code(e));
    }
    result
}

/// Flags that the workload's kind would accept and ignore, refused before anything runs:
/// a training run's checkpoint flags, a checkpoint run's training flags, and `--after` (the
/// split form's read run) on a run that also writes.
fn refuse_misplaced_flags(args: &RunArgs, workload: &Workload) -> Result<(), UsageError> {
    let name = workload.name();
    match workload.checkpoint() {
        Some(settings) => {
            if let Some(flag) = args.training_flags_given().first() {
                return Err(UsageError(format!(
                    "{flag}: {name} is a checkpoint workload, which reads no training dataset, \
                     so {flag} would be ignored; drop it (a checkpoint's own flags: --part-size, \
                     --parts-in-flight, --read-range, --read-blocks, --checksum)"
                )));
            }
            if let Some(dir) = &args.options.checkpoint.after
                && settings.num_checkpoints_write > 0
            {
                return Err(UsageError(format!(
                    "--after {}: this run also writes {} (checkpoint.num_checkpoints_write), \
                     and --after times MLPerf's split form's read run from its write run's \
                     end; add checkpoint.num_checkpoints_write=0 to read only, or drop --after",
                    dir.display(),
                    crate::units::counted(u64::from(settings.num_checkpoints_write), "checkpoint")
                )));
            }
        }
        None => {
            if let Some(flag) = args.options.checkpoint.given().first() {
                return Err(checkpoint_flag_on_training(flag, name));
            }
            if let Some(flag) = args.options.checkpoint.content.given().next()
                && workload.kind() == Kind::RowGroups
            {
                return Err(UsageError(format!(
                    "{flag}: {name} reads Parquet row groups, which --verify checks by the \
                     hashes in each file's footer, not against the content generator, so {flag} \
                     would be ignored; drop it (it lays out checkpoints and whole-object \
                     datasets)"
                )));
            }
        }
    }
    Ok(())
}

/// A checkpoint flag given with training workload `name`.
fn checkpoint_flag_on_training(flag: &str, name: &str) -> UsageError {
    UsageError(format!(
        "{flag}: {name} is a training workload and {flag} shapes a checkpoint run's writes and \
         reads, so it would be ignored; drop it, or run a checkpoint workload (llama3_8b, \
         llama3_70b, llama3_405b, llama3_1t, llama3_demo, llama3_tiny)"
    ))
}

/// `ringload datasize` ([`crate::sizing`]): exit 0, or 2 (after the figures) when `--dir`
/// cannot hold the dataset.
fn datasize(args: &DatasizeArgs) -> anyhow::Result<u8> {
    if args.workload.files.is_some() {
        return Err(UsageError(
            "datasize --files: datasize computes the number of files; drop --files".into(),
        )
        .into());
    }
    let workload = Workload::resolve(load_config(&args.workload, None)?)?;
    let request = DatasizeRequest {
        hosts: args.hosts,
        client_memory_bytes: args.client_memory,
        np: args.np,
        dir: args.dir.clone(),
        overrides: args.workload.overrides.clone(),
    };
    let out = sizing::size(&request, &workload)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &out)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", sizing::render(&out))?;
    }
    drop(stdout);
    match args
        .dir
        .as_deref()
        .and_then(|dir| sizing::dir_too_small(dir, &out))
    {
        Some(error) => Err(error.into()),
        None => Ok(exit::OK),
    }
}

/// The exit code for an error: the first cause in its chain whose type knows its class
/// decides; an error no layer classified is a failure.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    fn class(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
        macro_rules! first_of {
            ($($t:ty),* $(,)?) => {
                $(if let Some(e) = cause.downcast_ref::<$t>() {
                    return Some(e.exit_code());
                })*
            };
        }
        first_of!(
            RunFailed,
            RunInterrupted,
            crate::run::session::SetupInterrupted,
            SweepInterrupted,
            crate::sweep::SweepError,
            crate::compare::CompareError,
            UsageError,
            CatalogError,
            RequestError,
            s3::client::ClientSetupError,
            ConfigError,
            PlanError,
            CheckpointError,
            SettingsError,
            VirtualError,
            ServerError,
            GenerateError,
        );
        None
    }
    err.chain().find_map(class).unwrap_or(exit::FAILED)
}
