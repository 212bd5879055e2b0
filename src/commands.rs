//! What each subcommand does, top to bottom: configuration → settings → catalog → plan →
//! output. [`exit_code`] maps an error to its documented code.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use anyhow::Context;

use crate::catalog::{self, Catalog, CatalogError, DirSource};
use crate::checkpoint::{
    self, CheckpointError, CheckpointOptions, CheckpointPlan, CheckpointSettings,
};
use crate::cli::{
    Command, CompareArgs, GenerateArgs, PlanArgs, RunArgs, ServeArgs, ShapeArgs, WorkloadArgs,
    load_config,
};
use crate::cluster::Cluster;
use crate::config::ConfigError;
use crate::datagen::{self, DirSink, GenerateError};
use crate::exit::{ExitClass, UsageError};
use crate::plan::{Plan, PlanError};
use crate::run::session::{RunFailed, RunInterrupted, Session};
use crate::run::store::{
    checked_bucket, checkpoint_sink_objects, env, parquet_manifest, refuse_checkpoint_manifest,
};
use crate::s3::{self, Bucket, RequestError};
use crate::server::dir::DirStore;
use crate::server::faults::Faults;
use crate::server::virtual_dataset::VirtualError;
use crate::server::{self, Credentials, Server, ServerConfig, ServerError, Store};
use crate::settings::{Settings, SettingsError};
use crate::signals::StopSignals;
use crate::sweep::session::SweepInterrupted;
use crate::{affinity, budget, exit, report, units};

/// The virtual dataset of `serve --virtual` (or the default workload), for tests' servers.
pub use crate::run::store::{serve_store, virtual_store};

/// Runs a command; `Ok` carries the exit code.
pub fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Plan(args) => plan(&args),
        Command::Generate(args) => generate(&args),
        Command::Serve(args) => serve(&args),
        Command::Run(args) => run(&args),
        Command::Sweep(args) => crate::sweep::session::run(&args),
        Command::Compare(args) => compare(&args),
        Command::Datasize(args) => crate::sizing::run(&args),
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
    let cfg = load_config(&args.workload, Some(&args.shape))?;
    if checkpoint::is_checkpoint_workload(&cfg)? {
        refuse_checkpoint_manifest(args.manifest.as_deref())?;
        return checkpoint_plan(args, &cfg);
    }
    let settings = Settings::resolve(&cfg)?;
    let catalog = catalog_for(&settings, args.dir.as_deref(), args.manifest.as_deref())?;
    let options = args.shape.plan_options(&args.shape_options, 0);
    let plan = Plan::resolve(&settings, &catalog, &options, &budget::probe())?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &plan)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", report::plan::render(&plan, args.full))?;
    }
    Ok(exit::OK)
}

/// `plan` of a checkpoint workload (`workflow.checkpoint` true, `workflow.train` false).
fn checkpoint_plan(args: &PlanArgs, cfg: &crate::config::RawConfig) -> anyhow::Result<u8> {
    let settings = CheckpointSettings::resolve(cfg)?;
    let options = CheckpointOptions {
        np: args.shape.np,
        hosts: args.checkpoint.hosts,
        io: args.checkpoint.io.io_options(false),
        memory_cap_bytes: args.shape_options.memory_budget,
        server_bytes: 0,
    };
    let plan = CheckpointPlan::resolve(&settings, &options, &budget::probe(), &env)?;
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
    Parquet(Box<Settings>),
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
            Generation::Parquet(s) => {
                datagen::generate(&s.dataset, s.num_files, sink, jobs, show_progress)
            }
            Generation::Objects(d) => {
                datagen::objects::generate_objects(d, sink, jobs, show_progress)
            }
        }
    }
}

fn generate(args: &GenerateArgs) -> anyhow::Result<u8> {
    let cfg = load_config(&args.workload, None)?;
    let settings = Settings::resolve(&cfg)?;
    settings.check_generatable()?;
    let storage = settings.storage.clone();
    let generation = match settings.objects.clone() {
        Some(dataset) => Generation::Objects(dataset),
        None => Generation::Parquet(Box::new(settings)),
    };
    let jobs = args.jobs.unwrap_or_else(|| match &generation {
        Generation::Parquet(settings) => default_jobs(settings),
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
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &summary)?;
        writeln!(stdout)?;
    } else {
        writeln!(stdout, "{}", report::generate_summary(&summary))?;
    }
    Ok(exit::OK)
}

fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    let store = match &args.dir {
        None if args.sink => sink_store(args)?,
        Some(dir) => {
            if args.workload.is_some() || !args.overrides.is_empty() || args.files.is_some() {
                return Err(UsageError(
                    "a workload, its overrides and --files apply to the virtual dataset; --dir \
                     serves the directory as it is"
                        .into(),
                )
                .into());
            }
            let store = DirStore::new(dir).map_err(|e| {
                UsageError(format!(
                    "cannot serve --dir {}: {e}; create it or point --dir at an existing \
                     directory",
                    dir.display()
                ))
            })?;
            if let Some(bucket) = &args.bucket {
                let bucket = checked_bucket(bucket)?;
                if store.bucket_path(bucket).is_err() {
                    store.create_bucket(bucket).map_err(|e| {
                        UsageError(format!("cannot create bucket '{bucket}' in --dir: {e}"))
                    })?;
                }
            }
            for folder in store.unserved_folders() {
                eprintln!(
                    "ringload serve: warning: folder '{folder}' in --dir is not served: a bucket \
                     name has 3-63 characters of a-z, 0-9, '.' and '-'; rename it to serve it"
                );
            }
            Store::Dir(store)
        }
        None => {
            // `--virtual W` (the older spelling) takes every positional as an override.
            let mut positional: Vec<String> = args.workload.iter().cloned().collect();
            positional.extend(args.overrides.iter().cloned());
            let workload = match &args.virtual_workload {
                Some(w) => WorkloadArgs {
                    workload: Some(w.clone()),
                    overrides: positional,
                    files: args.files,
                },
                None => WorkloadArgs {
                    workload: positional.first().cloned(),
                    overrides: positional.into_iter().skip(1).collect(),
                    files: args.files,
                },
            };
            serve_store(&workload, args.bucket.as_deref(), true)?
        }
    };
    let credentials = match (&args.access_key, &args.secret_key) {
        (Some(access_key_id), Some(secret_access_key)) => Some(Credentials {
            access_key_id: access_key_id.clone(),
            secret_access_key: secret_access_key.clone(),
        }),
        _ => None,
    };
    let signed = credentials.is_some();
    let faults = match &args.faults {
        Some(spec) => Faults::parse(spec, args.faults_seed)
            .map_err(|e| UsageError(format!("--faults: {e}")))?,
        None => Faults::default(),
    };
    let injecting = args.faults.clone();
    let (tls, self_signed, remove_tls_dir) = serve_tls(args)?;
    let signals = StopSignals::install()?;
    let server = Server::start(ServerConfig {
        tls,
        listen: args.listen,
        store,
        credentials,
        region: args.region.clone(),
        worker_threads: args.threads.unwrap_or_else(affinity::cores),
        throttle_bytes_per_s: args.throttle_mib_per_s.map(|r| (r * units::MIB) as u64),
        faults,
        max_connections: args.max_connections,
    })?;
    server.limit_bandwidth(args.bandwidth_mib_per_s.map(|r| (r * units::MIB) as u64));
    if let Some(file) = &args.request_log {
        server.log_requests(file).map_err(UsageError)?;
    }
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", server.endpoint_url())?;
        stdout.flush()?;
    }
    if !signed && !args.listen.ip().is_loopback() {
        eprintln!(
            "ringload serve: warning: listening on {} without --access-key: anyone who can \
             reach it can read{} its objects",
            server.addr(),
            if args.dir.is_some() || args.sink {
                ", write and delete"
            } else {
                ""
            }
        );
    }
    let throttle = args
        .throttle_mib_per_s
        .map(|r| format!("; each body sent at most {r} MiB/s"))
        .unwrap_or_default()
        + &args
            .bandwidth_mib_per_s
            .map(|r| format!("; all bodies together at most {r} MiB/s"))
            .unwrap_or_default()
        + &injecting
            .map(|spec| format!("; INJECTING FAULTS: {spec}"))
            .unwrap_or_default();
    eprintln!(
        "ringload serve: {} at {} ({}{throttle}); Ctrl-C stops",
        server.describe(),
        server.endpoint_url(),
        if signed {
            "SigV4 signatures required"
        } else {
            "no credentials set: any request is accepted"
        }
    );
    if let Some(files) = &self_signed {
        eprintln!(
            "ringload serve: TLS with a self-signed CA for {}: clients pass --ca-bundle {} (boto3: \
             verify='{}')",
            args.listen.ip(),
            files.ca_pem.display(),
            files.ca_pem.display()
        );
    }
    signals.wait();
    let stats = server.shutdown();
    if let (Some(files), true) = (&self_signed, remove_tls_dir)
        && let Some(dir) = files.ca_pem.parent()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, &stats)?;
        writeln!(stdout)?;
    } else {
        eprintln!("ringload serve: {}", report::server_stats(&stats));
    }
    Ok(exit::OK)
}

/// `serve --sink [WORKLOAD]`: without a workload an empty sink, listing what is written to
/// it; with a checkpoint workload, its plan's objects at `--np` ranks listed and served from the
/// start (as the embedded sink of `run`), so a read-only run finds them.
fn sink_store(args: &ServeArgs) -> anyhow::Result<Store> {
    if args.files.is_some() {
        return Err(UsageError(
            "--files sizes a training workload's virtual dataset; serve --sink takes a \
             checkpoint workload and --np: drop --files"
                .into(),
        )
        .into());
    }
    let Some(name) = &args.workload else {
        let bucket = checked_bucket(args.bucket.as_deref().unwrap_or(server::DEFAULT_BUCKET))?;
        return Ok(Store::sink(
            bucket,
            Vec::new(),
            !args.sink_zeros,
            args.sink_verify,
        ));
    };
    let workload = WorkloadArgs {
        workload: Some(name.clone()),
        overrides: args.overrides.clone(),
        files: None,
    };
    let shape = ShapeArgs {
        np: args.np,
        read_threads: None,
        prefetch: None,
        coalesce_rgs: None,
        computation_time: None,
        loader: crate::plan::Loader::Ringload,
    };
    let cfg = load_config(&workload, Some(&shape))?;
    if !checkpoint::is_checkpoint_workload(&cfg)? {
        return Err(UsageError(format!(
            "serve --sink {name}: not a checkpoint workload (workflow.checkpoint True and \
             workflow.train False); serve its training files with `ringload serve {name}`, or \
             give --sink a checkpoint workload such as llama3_8b"
        ))
        .into());
    }
    let settings = CheckpointSettings::resolve(&cfg)?;
    let options = CheckpointOptions {
        np: args.np,
        hosts: 1,
        io: checkpoint::IoOptions::default(),
        memory_cap_bytes: None,
        server_bytes: 0,
    };
    let plan = CheckpointPlan::resolve(&settings, &options, &budget::probe(), &env)?;
    let bucket = args
        .bucket
        .as_deref()
        .or(settings.storage.bucket.as_deref())
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = checked_bucket(bucket)?;
    Ok(Store::sink(
        bucket,
        checkpoint_sink_objects(&plan),
        settings.randomize_tensor && !args.sink_zeros,
        args.sink_verify,
    ))
}

/// `serve`'s TLS: from --tls-cert/--tls-key, or made by --tls-self-signed (the files, and
/// whether their folder is a temporary one to remove at exit).
type ServeTls = (
    Option<Arc<rustls::ServerConfig>>,
    Option<server::tls::SelfSigned>,
    bool,
);

fn serve_tls(args: &ServeArgs) -> anyhow::Result<ServeTls> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let config = server::tls::from_files(cert, key).map_err(UsageError)?;
        return Ok((Some(config), None, false));
    }
    let Some(dir) = &args.tls_self_signed else {
        return Ok((None, None, false));
    };
    let (dir, temporary) = if dir.as_os_str().is_empty() {
        let dir = server::tls::private_temp_dir()
            .map_err(|e| UsageError(format!("--tls-self-signed: {e}")))?;
        (dir, true)
    } else {
        (dir.clone(), false)
    };
    let (config, files) = server::tls::self_signed(args.listen, &dir)
        .map_err(|e| UsageError(format!("--tls-self-signed: {e}")))?;
    Ok((Some(config), Some(files), temporary))
}

/// `ringload run` (src/run/session.rs). Under mpirun this process runs a share of the ranks
/// (src/cluster.rs), and a failure here ends every process with this one's exit code.
fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let cluster = Cluster::start(&env).map_err(UsageError)?;
    let result =
        if checkpoint::is_checkpoint_workload(&load_config(&args.workload, Some(&args.shape))?)? {
            refuse_checkpoint_manifest(args.options.manifest.as_deref())
                .map_err(anyhow::Error::from)
                .and_then(|()| crate::run::checkpoint::run(args, &cluster))
        } else {
            Session::prepare(args, &cluster).and_then(Session::execute)
        };
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

fn compare(args: &CompareArgs) -> anyhow::Result<u8> {
    use crate::compare::{CompareError, Input, checkpoint};
    let mut entries = Vec::new();
    let mut checkpoints = Vec::new();
    let mut first_of_kind: [Option<&std::path::PathBuf>; 2] = [None, None];
    for (i, path) in args.inputs.iter().enumerate() {
        let letter = (b'A' + (i % 26) as u8) as char;
        match crate::compare::read_input(path, letter)? {
            Input::Training(e) => {
                first_of_kind[0].get_or_insert(path);
                entries.extend(e);
            }
            Input::Checkpoint(e) => {
                first_of_kind[1].get_or_insert(path);
                checkpoints.extend(e);
            }
        }
    }
    if let [Some(training), Some(checkpoint)] = first_of_kind {
        return Err(CompareError {
            path: checkpoint.clone(),
            reason: format!(
                "a checkpoint result beside training results ({}); compare checkpoint results \
                 with checkpoint results only",
                training.display()
            ),
        }
        .into());
    }
    let (json, csv, markdown) = if first_of_kind[1].is_some() {
        let c = checkpoint::compare(checkpoints);
        (
            serde_json::to_string_pretty(&c)?,
            checkpoint::csv(&c),
            checkpoint::markdown(&c),
        )
    } else {
        let c = crate::compare::compare(entries);
        (
            serde_json::to_string_pretty(&c)?,
            crate::compare::csv(&c),
            crate::compare::markdown(&c),
        )
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{json}")?;
    } else if args.csv {
        write!(stdout, "{csv}")?;
    } else {
        for (i, path) in args.inputs.iter().enumerate() {
            writeln!(
                stdout,
                "{}: {}",
                (b'A' + (i % 26) as u8) as char,
                path.display()
            )?;
        }
        writeln!(stdout)?;
        write!(stdout, "{markdown}")?;
    }
    Ok(exit::OK)
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
