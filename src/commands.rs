//! What each subcommand does, top to bottom: configuration → settings → catalog → plan →
//! output. `main` maps the result to an exit code.

use std::io::{IsTerminal, Write};

use anyhow::Context;

use crate::catalog::{self, Catalog, DirSource};
use crate::cli::{Command, GenerateArgs, PlanArgs, load_config};
use crate::datagen::{self, DirSink};
use crate::plan::{Plan, RunOptions, Settings};
use crate::{budget, exit, report};

/// Runs a command; `Ok` carries the exit code.
pub fn execute(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Plan(args) => plan(&args),
        Command::Generate(args) => generate(&args),
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

/// Generator threads: the cores this process may use, fewer if each one's row group in memory
/// would crowd MemAvailable.
fn default_jobs(settings: &Settings) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
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
