//! What each subcommand does, top to bottom: configuration → settings → catalog → plan →
//! output. `main` maps the result to an exit code.

use std::io::{IsTerminal, Write};

use anyhow::Context;

use crate::catalog::{self, Catalog, DirSource};
use crate::cli::{Command, GenerateArgs, PlanArgs, ServeArgs, WorkloadArgs, load_config};
use crate::datagen::{self, DirSink};
use crate::exit::UsageError;
use crate::plan::{Plan, RunOptions, Settings};
use crate::server::dir::{DirStore, valid_bucket_name};
use crate::server::virtual_dataset::VirtualDataset;
use crate::server::{self, Credentials, Server, ServerConfig, Store};
use crate::{budget, exit, report};

/// Runs a command; `Ok` carries the exit code.
pub fn execute(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Plan(args) => plan(&args),
        Command::Generate(args) => generate(&args),
        Command::Serve(args) => serve(&args),
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
        )?),
        None => {
            let probe = datagen::probe_file(&settings.dataset)
                .context("laying out a file of the workload's schema")?;
            Ok(catalog::computed(
                &settings.dataset,
                &probe,
                settings.num_files,
                columns,
            )?)
        }
    }
}

fn plan(args: &PlanArgs) -> anyhow::Result<u8> {
    let cfg = load_config(&args.workload, Some(&args.shape))?;
    let settings = Settings::resolve(&cfg)?;
    let catalog = catalog_for(&settings, args.dir.as_deref())?;
    let options = RunOptions {
        np: args.shape.np,
        sharding: args.shape.sharding,
        memory_cap_bytes: args.shape.memory_budget,
    };
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
    let sink = DirSink::new(&args.out);
    let show_progress = std::io::stderr().is_terminal();
    let summary = datagen::generate(
        &settings.dataset,
        settings.num_files,
        &sink,
        jobs,
        show_progress,
    )?;
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
            "ringload serve: laying out {} ({} file{}; encoding one file and a row-group \
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
    let signals = StopSignals::install()?;
    let server = Server::start(ServerConfig {
        listen: args.listen,
        store,
        credentials,
        region: args.region.clone(),
        worker_threads: args.threads.unwrap_or_else(cores),
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
    eprintln!(
        "ringload serve: {} at {} ({}); Ctrl-C stops",
        server.describe(),
        server.endpoint_url(),
        if signed {
            "SigV4 signatures required"
        } else {
            "no credentials set: any request is accepted"
        }
    );
    signals.wait();
    let stats = server.shutdown();
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, &stats)?;
        writeln!(stdout)?;
    } else {
        eprintln!("ringload serve: {}", report::server_stats(&stats));
    }
    Ok(exit::OK)
}
