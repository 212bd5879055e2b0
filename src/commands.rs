//! What each subcommand does, top to bottom: configuration → settings → catalog → plan →
//! output. [`exit_code`] maps an error to its documented code.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

use crate::catalog::{self, Catalog, CatalogError, DirSource};
use crate::cli::{
    Command, CompareArgs, GenerateArgs, PlanArgs, RunArgs, ServeArgs, ShapeArgs, SweepArgs,
    WorkloadArgs, load_config,
};
use crate::cluster::Cluster;
use crate::config::ConfigError;
use crate::datagen::{self, DirSink, GenerateError};
use crate::engine::EngineKind;
use crate::exit::{ExitClass, UsageError};
use crate::metrics::{CpuCosts, CpuReading};
use crate::plan::{Plan, PlanError};
use crate::run::RunFailure;
use crate::s3::target::valid_bucket_name;
use crate::s3::{self, Bucket, Client, RequestError, Target};
use crate::server::dir::DirStore;
use crate::server::faults::Faults;
use crate::server::virtual_dataset::{VirtualDataset, VirtualError};
use crate::server::{self, Credentials, Server, ServerConfig, ServerError, Store};
use crate::settings::{Settings, SettingsError};
use crate::summary::{RunContext, RunSummary, TargetSummary};
use crate::{affinity, budget, exit, metrics, report, units};

/// Runs a command; `Ok` carries the exit code.
pub fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Plan(args) => plan(&args),
        Command::Generate(args) => generate(&args),
        Command::Serve(args) => serve(&args),
        Command::Run(args) => run(&args),
        Command::Sweep(args) => sweep(&args),
        Command::Compare(args) => compare(&args),
    }
}

/// The catalog of the workload's files: from footers under `dir`, or computed from the schema.
fn catalog_for(settings: &Settings, dir: Option<&std::path::Path>) -> anyhow::Result<Catalog> {
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
    let settings = Settings::resolve(&cfg)?;
    let catalog = catalog_for(&settings, args.dir.as_deref())?;
    let options = args.shape.plan_options(0);
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

/// The process environment, as [`s3::target::resolve`] reads it.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The cores this process may use.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Generator threads: the cores this process may use, fewer if each one's row group in memory
/// would crowd MemAvailable.
fn default_jobs(settings: &Settings) -> usize {
    let cores = cores();
    let per_job = settings.record_bytes * settings.dataset.row_group_rows * 2
        + datagen::GENERATION_BATCH_BYTES;
    match budget::probe().mem_available_bytes {
        Some(avail) => cores.min((avail / 2 / per_job.max(1)).max(1) as usize),
        None => cores,
    }
}

fn generate(args: &GenerateArgs) -> anyhow::Result<u8> {
    let cfg = load_config(&args.workload, None)?;
    let settings = Settings::resolve(&cfg)?;
    settings.check_generatable()?;
    let jobs = args.jobs.unwrap_or_else(|| default_jobs(&settings));
    let show_progress = std::io::stderr().is_terminal();
    let summary = match (
        &args.out,
        args.s3.endpoint.is_some() || args.s3.bucket.is_some(),
    ) {
        (Some(out), _) => datagen::generate(
            &settings.dataset,
            settings.num_files,
            &DirSink::new(out),
            jobs,
            show_progress,
        )?,
        (None, true) => {
            let target = s3::target::resolve(&args.s3.target_flags(), &settings.storage, env)?
                .ok_or_else(|| {
                    UsageError(
                        "--bucket without an endpoint: pass --endpoint URL (or set AWS_ENDPOINT_URL)"
                            .into(),
                    )
                })?;
            let bucket = Bucket::new(target, args.s3.retry_policy())
                .context("starting the S3 client")?
                .with_signed_payloads(args.signed_payload);
            datagen::generate(
                &settings.dataset,
                settings.num_files,
                &bucket,
                jobs,
                show_progress,
            )?
        }
        (None, false) => {
            return Err(UsageError(
                "where to? pass --out DIR, or --endpoint URL --bucket NAME to write to S3".into(),
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

fn checked_bucket(name: &str) -> anyhow::Result<&str> {
    if valid_bucket_name(name) {
        Ok(name)
    } else {
        Err(UsageError(format!(
            "'{name}' is not a valid bucket name: use 3-63 characters of a-z, 0-9, '.' and '-', \
             starting and ending with a letter or digit"
        ))
        .into())
    }
}

/// The virtual dataset of `serve --virtual` (or the default workload).
pub fn virtual_store(
    workload: &WorkloadArgs,
    bucket: Option<&str>,
    show_progress: bool,
) -> anyhow::Result<VirtualDataset> {
    let cfg = load_config(workload, None)?;
    let settings = Settings::resolve(&cfg)?;
    settings.check_generatable()?;
    let bucket = bucket
        .or(settings.storage.bucket.as_deref())
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = checked_bucket(bucket)?;
    if show_progress {
        eprintln!(
            "ringload: laying out the virtual {} ({} file{}; encoding one file and a row-group \
             template)…",
            settings.workload.name,
            settings.num_files,
            if settings.num_files == 1 { "" } else { "s" }
        );
    }
    Ok(VirtualDataset::build(
        bucket,
        &settings.workload.name,
        &settings.dataset,
        settings.num_files,
    )?)
}

/// SIGINT (Ctrl-C) and SIGTERM, caught from the moment this is made.
struct StopSignals {
    runtime: tokio::runtime::Runtime,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let _guard = runtime.enter();
        let interrupt = signal(SignalKind::interrupt())?;
        let terminate = signal(SignalKind::terminate())?;
        drop(_guard);
        Ok(StopSignals {
            runtime,
            interrupt,
            terminate,
        })
    }

    /// Blocks until one of the signals arrives.
    fn wait(mut self) {
        self.runtime.block_on(async {
            tokio::select! {
                _ = self.interrupt.recv() => {}
                _ = self.terminate.recv() => {}
            }
        });
    }
}

/// Sets `flag` when SIGINT or SIGTERM arrives, from now on.
fn raise_on_stop_signals(flag: Arc<AtomicBool>) -> anyhow::Result<()> {
    let signals = StopSignals::install()?;
    std::thread::Builder::new()
        .name("ringload-signals".into())
        .spawn(move || {
            signals.wait();
            flag.store(true, Ordering::SeqCst);
        })?;
    Ok(())
}

fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    let store = match &args.dir {
        Some(dir) => {
            if !args.overrides.is_empty() || args.files.is_some() {
                return Err(UsageError(
                    "workload overrides and --files apply to --virtual; --dir serves the \
                     directory as it is"
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
            let workload = WorkloadArgs {
                workload: args.virtual_workload.clone(),
                overrides: args.overrides.clone(),
                files: args.files,
            };
            Store::Virtual(virtual_store(&workload, args.bucket.as_deref(), true)?)
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
        worker_threads: args.threads.unwrap_or_else(cores),
        throttle_bytes_per_s: args.throttle_mib_per_s.map(|r| (r * units::MIB) as u64),
        faults,
        max_connections: args.max_connections,
    })?;
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
            if args.dir.is_some() {
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

/// The embedded server of a run with no endpoint: the workload's virtual dataset, on a free
/// loopback port.
/// The catalog of the workload's files in `target`'s bucket (with chunk hashes for
/// `--verify` when `with_chunks`), and the bucket handle that read it. Set-up: a failure here
/// is exit 2, as the catalog's are.
fn catalog_from(
    target: &Target,
    policy: s3::RetryPolicy,
    settings: &Settings,
    with_chunks: bool,
) -> anyhow::Result<(Bucket, Catalog)> {
    let bucket = Bucket::new(target.clone(), policy).context("starting the S3 client")?;
    bucket.check().map_err(CatalogError::Request)?;
    let catalog = catalog::discover(
        &bucket,
        &settings.dataset.train_prefix,
        settings.num_files,
        settings.columns_read.as_deref(),
        with_chunks,
    )?;
    Ok((bucket, catalog))
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

/// The store a run or sweep reads: the one the flags, environment or workload name, else the
/// embedded server with the workload's virtual dataset (and the memory it holds).
fn store_for(
    workload: &WorkloadArgs,
    s3_args: &crate::cli::S3Args,
    settings: &Settings,
    server_threads: Option<usize>,
) -> anyhow::Result<(Option<Server>, Target, u64)> {
    match s3::target::resolve(&s3_args.target_flags(), &settings.storage, env)? {
        Some(target) => Ok((None, target, 0)),
        None => {
            let (server, target, resident_bytes) =
                start_embedded(workload, s3_args.bucket.as_deref(), server_threads)?;
            Ok((Some(server), target, resident_bytes))
        }
    }
}

fn start_embedded(
    workload: &WorkloadArgs,
    bucket: Option<&str>,
    server_threads: Option<usize>,
) -> anyhow::Result<(Server, Target, u64)> {
    let show = std::io::stderr().is_terminal();
    let store = virtual_store(workload, bucket, show)?;
    let bucket = store.bucket.clone();
    let template_bytes = store.resident_bytes;
    let server = Server::start(ServerConfig {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        store: Store::Virtual(store),
        credentials: None,
        region: server::DEFAULT_REGION.to_string(),
        worker_threads: server_threads.unwrap_or_else(cores),
        throttle_bytes_per_s: None,
        faults: Faults::default(),
        max_connections: server::DEFAULT_MAX_CONNECTIONS,
        tls: None,
    })?;
    let endpoint = s3::Endpoint::parse(&server.endpoint_url()).map_err(UsageError)?;
    let target = Target {
        credentials_from: "nowhere (the embedded server takes unsigned requests)".into(),
        ..Target::simple(endpoint, &bucket, None)
    };
    // What the process holds now — templates, and what laying them out left behind — is the
    // server's share of the memory budget.
    let resident_bytes = metrics::rss_bytes().unwrap_or(0).max(template_bytes);
    Ok((server, target, resident_bytes))
}

/// The tail DLIO's Parquet reader fetches to read a footer.
const DLIO_FOOTER_TAIL_BYTES: u64 = 4 << 20;

fn run(args: &RunArgs) -> anyhow::Result<u8> {
    // Under mpirun, this process runs a share of the ranks (src/cluster.rs).
    let cluster = Cluster::start(&env).map_err(UsageError)?;
    let result = run_on(args, &cluster);
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

fn run_on(args: &RunArgs, cluster: &Cluster) -> anyhow::Result<u8> {
    let started = std::time::Instant::now();
    let hosts = !cluster.is_single();
    let mut shape = args.shape.clone();
    if hosts && !np_given() {
        // As DLIO under mpirun: one rank per process.
        shape.np = cluster.processes() as u32;
    }
    let local = Cluster::ranks_of(cluster.process(), cluster.processes(), shape.np as usize);
    if hosts && local.is_empty() {
        return Err(UsageError(format!(
            "--np {} is fewer than the {} processes mpirun started; pass --np {} or more",
            shape.np,
            cluster.processes(),
            cluster.processes()
        ))
        .into());
    }
    let cfg = load_config(&args.workload, Some(&shape))?;
    let settings = Settings::resolve(&cfg)?;
    let mut notes = Vec::new();
    let (cpus, shared_cores) = affinity::choose_cpus(args.cpus.as_deref(), local.len() as u32)?;
    // Results are written where --output says: checked now, so a run never ends unable to.
    if let Some(dir) = &args.output {
        prepare_output(dir)?;
    }
    if hosts && s3::target::resolve(&args.s3.target_flags(), &settings.storage, env)?.is_none() {
        return Err(UsageError(
            "under mpirun, pass --endpoint (or AWS_ENDPOINT_URL): the embedded server would be \
             one per process; start one `ringload serve` for all of them"
                .into(),
        )
        .into());
    }
    let (server, target, server_bytes) =
        store_for(&args.workload, &args.s3, &settings, args.server_threads)?;
    // Costs are counted from here: the virtual dataset's layout above is not the loader's.
    let server_cpu_now = || server.as_ref().map_or(0.0, |s| s.stats().cpu_s);
    let setup_cpu = CpuReading::now(server_cpu_now());
    let peak_rss_since_setup = metrics::reset_peak_rss();

    let policy = args.s3.retry_policy();
    // Process 0 lists and reads the footers; the others get its catalog.
    let (bucket, catalog) = if cluster.process() == 0 {
        catalog_from(&target, policy, &settings, args.verify)?
    } else {
        let bucket = Bucket::new(target.clone(), policy).context("starting the S3 client")?;
        (bucket, Catalog::empty())
    };
    let catalog = if hosts {
        Catalog::from_wire(&cluster.broadcast(catalog.to_wire())).map_err(UsageError)?
    } else {
        catalog
    };
    // The dlio loader: every rank reads every file's footer itself (a HEAD and a 4 MiB tail),
    // before the clock as DLIO's ranks do while their datasets open.
    let loader_footers = match args.shape.loader {
        crate::plan::Loader::Ringload => None,
        crate::plan::Loader::Dlio => {
            let objects: Vec<s3::ObjectMeta> = catalog
                .files
                .iter()
                .map(|f| s3::ObjectMeta {
                    key: f.key.clone(),
                    size_bytes: f.size_bytes,
                })
                .collect();
            Some(
                bucket
                    .read_footers_each(&objects, local.len(), DLIO_FOOTER_TAIL_BYTES)
                    .map_err(CatalogError::Request)?,
            )
        }
    };
    drop(bucket);
    let options = crate::plan::PlanOptions {
        tls: target.endpoints.iter().any(|e| e.is_tls()),
        ..shape.plan_options(server_bytes)
    };
    let limits = budget::probe();
    // RLIMIT_MEMLOCK binds only the io_uring engine's locked pool: checked with the engine.
    let unlocked = budget::MemoryLimits {
        memlock_bytes: None,
        ..limits.clone()
    };
    let plan = if hosts {
        // The whole job's plan, the same on every process; each host's share is checked
        // against its own memory, and any refusal stops every process.
        let whole = crate::plan::PlanOptions {
            memory_cap_bytes: None,
            ..options.clone()
        };
        let plan = Plan::resolve(
            &settings,
            &catalog,
            &whole,
            &budget::MemoryLimits::unlimited(),
        )?;
        let mine = budget::check(
            &host_share(&plan, local.len(), options.tls),
            &unlocked,
            options.memory_cap_bytes,
        )
        .map_err(|e| {
            format!(
                "host {} (process {}): {e}",
                Cluster::host(),
                cluster.process()
            )
        });
        if !cluster.all_agree(mine.is_ok()) {
            let said = cluster.gather(mine.as_ref().err().map_or(&[][..], |e| e.as_bytes()));
            let lines: Vec<String> = said
                .unwrap_or_default()
                .into_iter()
                .filter(|l| !l.is_empty())
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .collect();
            let message = cluster.broadcast(lines.join("; ").into_bytes());
            return Err(UsageError(String::from_utf8_lossy(&message).into_owned()).into());
        }
        plan
    } else {
        Plan::resolve(&settings, &catalog, &options, &unlocked)?
    };
    // Warned only for a plan that will run.
    if let Some(note) = shared_cores {
        eprintln!("ringload run: WARNING: {note}");
        notes.push(note);
    }
    let tls = target.endpoints.iter().any(|e| e.is_tls());
    let engine = choose_engine(args.engine, &plan, &limits, &mut notes)?;
    let client = Client::new(target.clone(), policy)?;
    let config = crate::run::RunConfig {
        engine,
        engine_threads: args.engine_threads.unwrap_or_else(cores),
        show_progress: std::io::stderr().is_terminal(),
        cpus,
        interrupt: Arc::new(AtomicBool::new(false)),
        ranks: local.clone(),
        hosts,
    };
    // From here Ctrl-C and SIGTERM stop the run and keep what it measured.
    raise_on_stop_signals(Arc::clone(&config.interrupt))?;
    let outcome = crate::run::run_ranks(&plan, &client, &config, &server_cpu_now);
    if hosts && let Err(failure) = &outcome {
        // A failed run ends every process of the job (see `run`).
        return Err(RunFailed(exit_line(&failure.error)).into());
    }
    let server_stats = server.map(|s| s.shutdown());
    // A run that failed once the clock had started still reports what it measured.
    let mut interrupted = false;
    let (measured, failure) = match outcome.map_err(|failure| *failure) {
        Ok(measured) => (measured, None),
        Err(RunFailure {
            error,
            partial: Some(measured),
        }) => {
            interrupted = matches!(error, crate::rank::RankError::Interrupted);
            (measured, Some(exit_line(&error)))
        }
        Err(RunFailure {
            error,
            partial: None,
        }) => return Err(RunFailed(exit_line(&error)).into()),
    };
    let end_cpu = CpuReading::now(server_stats.as_ref().map_or(0.0, |s| s.cpu_s));
    let setup_s = (measured.ready_at - started).as_secs_f64();
    let mut costs = CpuCosts::between(setup_cpu, measured.ready_cpu, end_cpu);
    let mut peak_rss_bytes = metrics::peak_rss_bytes();
    let mut measured = measured;
    let mut host_summaries = Vec::new();
    if hosts {
        let mine = crate::summary::HostReport {
            host: Cluster::host(),
            process: cluster.process(),
            ranks: local.clone(),
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
            memory_budget_bytes: budget::check(
                &host_share(&plan, local.len(), options.tls),
                &budget::MemoryLimits::unlimited(),
                None,
            )
            .map_or(0, |b| b.total_bytes),
        };
        let gathered = cluster.gather(&serde_json::to_vec(&mine)?);
        let Some(reports) = gathered else {
            // Process 0 reports for the job; its exit code is everyone's.
            let code = cluster.broadcast(Vec::new());
            return Ok(code.first().copied().unwrap_or(exit::FAILED));
        };
        let reports = reports
            .iter()
            .map(|r| serde_json::from_slice::<crate::summary::HostReport>(r))
            .collect::<Result<Vec<_>, _>>()?;
        measured.records = reports.iter().flat_map(|r| r.records.clone()).collect();
        measured.stats = reports
            .iter()
            .flat_map(|r| {
                r.stats
                    .iter()
                    .cloned()
                    .map(metrics::RequestStats::from_wire)
            })
            .collect();
        measured.wall_s = reports.iter().map(|r| r.wall_s).fold(0.0, f64::max);
        costs.client_cpu_s = reports.iter().map(|r| r.client_cpu_s).sum();
        costs.setup_cpu_s = reports.iter().map(|r| r.setup_cpu_s).sum();
        peak_rss_bytes = reports.iter().filter_map(|r| r.peak_rss_bytes).max();
        host_summaries = reports
            .iter()
            .map(crate::summary::HostSummary::of)
            .collect();
    }
    if let Some(over) = metrics::rss_over_budget(peak_rss_bytes, plan.memory.total_bytes) {
        let warning = report::run::rss_over_budget(plan.memory.total_bytes, over);
        eprintln!("ringload run: WARNING: {warning}");
        notes.push(warning);
    }
    let summary = RunSummary::build(
        &plan,
        &measured,
        RunContext {
            engine,
            endpoint_urls: target.endpoints.iter().map(|e| e.url.clone()).collect(),
            target: TargetSummary {
                endpoint: target.endpoints_text(),
                bucket: target.bucket.clone(),
                addressing: target.addressing,
                profile: target.profile.clone(),
                tls: tls.then(|| crate::summary::TlsSummary {
                    verified: !target.tls.insecure,
                    ca_bundle: target
                        .tls
                        .ca_bundle
                        .as_ref()
                        .filter(|_| !target.tls.insecure)
                        .map(|p| {
                            format!(
                                "{} ({})",
                                p.display(),
                                target
                                    .tls
                                    .ca_bundle_from
                                    .as_deref()
                                    .unwrap_or("--ca-bundle")
                            )
                        }),
                    negotiated: client.tls_negotiated().map(str::to_string),
                    ktls_available: s3::tls::ktls_available(),
                }),
                embedded: server_stats.is_some(),
                // Its CPU over the run (from the catalog on), as the client's is counted.
                server: server_stats.map(|mut s| {
                    s.cpu_s = costs.server_cpu_s;
                    s.cpu_s_per_gib = metrics::cpu_s_per_gib(costs.server_cpu_s, s.bytes_sent);
                    s
                }),
            },
            setup_s,
            setup_cpu_s: costs.setup_cpu_s,
            client_cpu_s: costs.client_cpu_s,
            peak_rss_bytes,
            peak_rss_since_setup,
            notes,
            failure: failure.clone(),
            interrupted,
            loader_footers,
            hosts: host_summaries,
        },
    );
    if let Some(dir) = &args.output {
        write_output(dir, &plan, &summary, &measured)?;
    }
    if let Some(line) = failure {
        // The figures up to the failure are in --output and on stdout with --json; stderr
        // keeps its one line.
        if args.json {
            let mut stdout = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut stdout, &summary)?;
            writeln!(stdout)?;
        }
        if interrupted {
            return Err(RunInterrupted.into());
        }
        return Err(RunFailed(line).into());
    }
    let human = report::run::render(&summary);
    let banner = report::run::computation_time_banner(&summary);
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, &summary)?;
        writeln!(stdout)?;
        eprint!("{human}");
    } else {
        print!("{human}");
    }
    if let Some(banner) = banner {
        eprintln!("{banner}");
    }
    let code = if summary.au_target_met {
        exit::OK
    } else {
        exit::AU_MISSED
    };
    if hosts {
        cluster.broadcast(vec![code]);
    }
    Ok(code)
}

/// The memory shape of one host's share of a run under mpirun: its `ranks` of the job's plan.
fn host_share(plan: &Plan, ranks: usize, tls: bool) -> budget::BudgetShape {
    budget::BudgetShape {
        np: ranks as u32,
        read_threads: plan.settings.read_threads,
        prefetch: plan.window_per_reader,
        largest_get_bytes: plan.largest_get_bytes,
        server_bytes: 0,
        tls,
    }
}

/// Whether `--np` was on the command line (under mpirun its default is the world size).
fn np_given() -> bool {
    std::env::args().any(|a| a == "--np" || a.starts_with("--np="))
}

/// The engine of a run. An explicit `--engine uring` that cannot work here is a usage error
/// naming the cause; by default the baseline runs instead, with a note.
fn sweep(args: &SweepArgs) -> anyhow::Result<u8> {
    let base = load_config(&args.workload, None)?;
    let settings = Settings::resolve(&base)?;
    std::fs::create_dir_all(&args.output).map_err(|e| {
        UsageError(format!(
            "cannot create --output {}: {e}",
            args.output.display()
        ))
    })?;
    prepare_output(&args.output)?;
    let engines: Vec<String> = if args.engine.is_empty() {
        let default = match crate::engine::uring::unavailable_cause() {
            None => EngineKind::Uring,
            Some(_) => EngineKind::Baseline,
        };
        vec![default.to_string()]
    } else {
        args.engine.iter().map(ToString::to_string).collect()
    };
    let read_threads = match args.read_threads.as_slice() {
        [] => vec![u64::from(settings.read_threads)],
        list => list.to_vec(),
    };
    let some = |v: &[u64]| -> Vec<Option<u64>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().copied().map(Some).collect()
        }
    };
    let cts: Vec<Option<f64>> = if args.computation_time.is_empty() {
        vec![None]
    } else {
        args.computation_time.iter().copied().map(Some).collect()
    };
    let points = crate::sweep::grid(&crate::sweep::Axes {
        loaders: args.loader.clone(),
        engines,
        np: args.np.clone(),
        read_threads,
        prefetch: some(&args.prefetch),
        coalesce_rgs: some(&args.coalesce_rgs),
        computation_time: cts,
        repeat: args.repeat,
    });
    // The store: the one given, or one embedded server for every point.
    let (server, target, _) = store_for(&args.workload, &args.s3, &settings, args.server_threads)?;
    // Every point is planned before the first runs, against the files the store holds.
    let (_, catalog) = catalog_from(&target, args.s3.retry_policy(), &settings, false)?;
    let limits = budget::MemoryLimits {
        memlock_bytes: None,
        ..budget::probe()
    };
    let mut planned = Vec::with_capacity(points.len());
    for point in points {
        let shape = ShapeArgs {
            np: point.np,
            read_threads: Some(point.read_threads),
            prefetch: point.prefetch,
            coalesce_rgs: point.coalesce_rgs,
            computation_time: point.computation_time,
            sharding: args.sharding,
            memory_budget: args.memory_budget,
            loader: point.loader,
            prefetch_factor: args.prefetch_factor,
        };
        let settings = Settings::resolve(&load_config(&args.workload, Some(&shape))?)?;
        let options = crate::plan::PlanOptions {
            tls: target.endpoints.iter().any(|e| e.is_tls()),
            ..shape.plan_options(0)
        };
        let (skip, estimate_s) = match Plan::resolve(&settings, &catalog, &options, &limits) {
            Ok(plan) => (
                None,
                plan.steps_per_rank as f64
                    * f64::from(settings.epochs)
                    * settings.computation_time_s,
            ),
            Err(e) => (Some(e.to_string()), 0.0),
        };
        planned.push(crate::sweep::Planned {
            point,
            skip,
            estimate_s,
        });
    }
    let skipped = planned.iter().filter(|p| p.skip.is_some()).count();
    eprintln!(
        "sweep: {} points ({} over the memory budget or not plannable, skipped) into {}",
        planned.len(),
        skipped,
        args.output.display()
    );
    let exe = std::env::current_exe().context("finding the ringload binary for the points")?;
    let mut storage = args.s3.to_args();
    if server.is_some() {
        storage.extend([
            "--endpoint".to_string(),
            target.endpoints_text(),
            "--bucket".to_string(),
            target.bucket.clone(),
        ]);
    }
    let child = |point: &crate::sweep::Point, folder: &std::path::Path| {
        let mut c = std::process::Command::new(&exe);
        c.arg("run").args(args.workload.to_args());
        c.args(["--np", &point.np.to_string()]);
        c.args(["--read-threads", &point.read_threads.to_string()]);
        if let Some(v) = point.prefetch {
            c.args(["--prefetch", &v.to_string()]);
        }
        if let Some(v) = point.coalesce_rgs {
            c.args(["--coalesce-rgs", &v.to_string()]);
        }
        if let Some(v) = point.computation_time {
            c.args(["--computation-time", &v.to_string()]);
        }
        c.args(["--engine", &point.engine]);
        c.args(["--sharding", &args.sharding.to_string()]);
        c.args(["--loader", &point.loader.to_string()]);
        c.args(["--prefetch-factor", &args.prefetch_factor.to_string()]);
        if let Some(b) = args.memory_budget {
            c.args(["--memory-budget", &b.to_string()]);
        }
        if let Some(cpus) = &args.cpus {
            c.args(["--cpus", cpus]);
        }
        if let Some(n) = args.engine_threads {
            c.args(["--engine-threads", &n.to_string()]);
        }
        if args.verify {
            c.arg("--verify");
        }
        c.args(&storage);
        c.arg("--output").arg(folder);
        c
    };
    let server_cpu = || server.as_ref().map(|s| s.stats().cpu_s);
    let interrupt = Arc::new(AtomicBool::new(false));
    raise_on_stop_signals(Arc::clone(&interrupt))?;
    let runner = crate::sweep::Runner {
        dir: args.output.clone(),
        workload: settings.workload.name.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        gate: args.gate,
        resume: args.resume,
        child: &child,
        server_cpu_s: &server_cpu,
        interrupt,
    };
    let (sweep, interrupted) = runner.run(&planned)?;
    if let Some(server) = server {
        server.shutdown();
    }
    let rows = crate::sweep::table::rows(&sweep);
    let markdown = crate::sweep::table::markdown(&sweep, &rows);
    let study_json = serde_json::to_string_pretty(&rows)?;
    let write = |name: &str, text: &str| {
        let path = args.output.join(name);
        std::fs::write(&path, text)
            .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))
    };
    write("study.md", &markdown)?;
    write("study.csv", &crate::sweep::table::csv(&rows))?;
    write("study.json", &study_json)?;
    let au_target = sweep
        .points
        .iter()
        .find_map(|p| p.summary.as_ref()?["au_target_percent"].as_f64());
    let mut plots = crate::sweep::plots::plots(&rows, au_target).map_err(anyhow::Error::msg)?;
    if let Some((title, lines)) =
        crate::sweep::latency_lines(&sweep, &args.output, args.latency_point)
    {
        plots.push(crate::sweep::plots::Plot {
            file: "latency-cdf.svg".into(),
            svg: crate::sweep::plots::latency_cdf(&title, &lines).map_err(anyhow::Error::msg)?,
            title,
        });
    }
    let plot_dir = args.output.join("plots");
    std::fs::create_dir_all(&plot_dir)
        .map_err(|e| UsageError(format!("cannot create {}: {e}", plot_dir.display())))?;
    for plot in &plots {
        write(&format!("plots/{}", plot.file), &plot.svg)?;
    }
    write(
        "report.html",
        &crate::sweep::html::report(&sweep, &markdown, &plots),
    )?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{study_json}")?;
    } else {
        write!(stdout, "{markdown}")?;
    }
    if interrupted {
        return Err(SweepInterrupted(args.output.display().to_string()).into());
    }
    Ok(sweep.exit_code())
}

/// A sweep stopped by Ctrl-C or SIGTERM (exit 3); what ran is kept.
#[derive(Debug, thiserror::Error)]
#[error(
    "the sweep was interrupted (Ctrl-C or SIGTERM); the points that finished are in {0}/sweep.json,      and --resume runs the rest"
)]
pub struct SweepInterrupted(pub String);

impl ExitClass for SweepInterrupted {
    fn exit_code(&self) -> u8 {
        exit::FAILED
    }
}

fn compare(args: &CompareArgs) -> anyhow::Result<u8> {
    let mut entries = Vec::new();
    for (i, path) in args.inputs.iter().enumerate() {
        let letter = (b'A' + (i % 26) as u8) as char;
        entries.extend(crate::compare::read(path, letter)?);
    }
    let comparison = crate::compare::compare(entries);
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &comparison)?;
        writeln!(stdout)?;
    } else if args.csv {
        write!(stdout, "{}", crate::compare::csv(&comparison))?;
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
        write!(stdout, "{}", crate::compare::markdown(&comparison))?;
    }
    Ok(exit::OK)
}

fn choose_engine(
    asked: Option<EngineKind>,
    plan: &Plan,
    limits: &budget::MemoryLimits,
    notes: &mut Vec<String>,
) -> anyhow::Result<EngineKind> {
    if asked == Some(EngineKind::Baseline) {
        return Ok(EngineKind::Baseline);
    }
    let pool = plan.memory.pool_bytes;
    let cause = crate::engine::uring::unavailable_cause().or_else(|| {
        let memlock = limits
            .memlock_bytes
            .filter(|&m| !limits.cap_ipc_lock && m < pool)?;
        Some(format!(
            "RLIMIT_MEMLOCK {} is smaller than the buffer pool {} (its buffers are locked and \
             registered; raise it with `ulimit -l unlimited` or grant CAP_IPC_LOCK)",
            units::bytes(memlock),
            units::bytes(pool)
        ))
    });
    match (asked, cause) {
        (_, None) => Ok(EngineKind::Uring),
        (Some(_), Some(cause)) => Err(UsageError(format!(
            "--engine uring: {cause}; run with --engine baseline"
        ))
        .into()),
        (None, Some(cause)) => {
            let note = format!("io_uring cannot be used here ({cause}); ran the baseline engine");
            eprintln!("ringload run: NOTE: {note}");
            notes.push(note);
            Ok(EngineKind::Baseline)
        }
    }
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
            SettingsError,
            VirtualError,
            ServerError,
            GenerateError,
        );
        None
    }
    err.chain().find_map(class).unwrap_or(exit::FAILED)
}

fn exit_line(e: &crate::rank::RankError) -> String {
    e.to_string().replace('\n', " ")
}

/// Creates `--output DIR` and checks that files can be written in it, before anything runs.
fn prepare_output(dir: &std::path::Path) -> Result<(), UsageError> {
    let fail = |e: std::io::Error| {
        UsageError(format!(
            "cannot write results into --output {}: {e}; choose a directory you can write",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".ringload-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Writes summary.json, steps.csv and requests.csv into `dir`, each through a temporary file renamed into
/// place.
fn write_output(
    dir: &std::path::Path,
    plan: &Plan,
    summary: &RunSummary,
    measured: &crate::run::RunMeasurements,
) -> anyhow::Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        UsageError(format!(
            "cannot write {what} into --output {}: {e}; choose another directory",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(|e| fail("results", e))?;
    let json = serde_json::to_string_pretty(summary)? + "\n";
    let files = [
        ("summary.json", json),
        ("steps.csv", report::run::steps_csv(&measured.records)),
        (
            "requests.csv",
            report::run::requests_csv(plan, &measured.stats),
        ),
    ];
    for (name, text) in files {
        let temp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&temp, text).map_err(|e| fail(name, e))?;
        std::fs::rename(&temp, dir.join(name)).map_err(|e| fail(name, e))?;
    }
    Ok(())
}
