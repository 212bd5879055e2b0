//! What a finished run leaves behind, from the outcome its session returned (the sessions
//! return data; this is where it is rendered and written): its files in `--output`, the
//! summary on stdout with `--json`, the report for people, its leaf in MLPerf's results tree
//! with `--results-dir`, and the exit code.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use crate::cli::RunArgs;
use crate::exit::{self, UsageError};
use crate::plan::Plan;
use crate::rank::RunMeasurements;
use crate::report;
use crate::results::{self, dlio::PhaseTimes};
use crate::run::checkpoint::CheckpointOutcome;
use crate::run::session::{RunFailed, RunInterrupted, SetupInterrupted, TrainingOutcome};
use crate::summary::RunSummary;
use crate::summary::checkpoint::CheckpointSummary;

/// A training run's files, then its report (or its failure); the exit code (0, or 1 for a
/// missed AU target).
pub fn training(args: &RunArgs, outcome: &TrainingOutcome) -> anyhow::Result<u8> {
    let summary = &outcome.summary;
    if let Some(dir) = &args.output {
        write_training_files(dir, &outcome.plan, summary, &outcome.measured)?;
    }
    if let Some(line) = &outcome.failure {
        // The figures up to the failure are in --output and on stdout with --json; stderr
        // keeps its one line.
        if args.json {
            let mut stdout = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut stdout, summary)?;
            writeln!(stdout)?;
        }
        if outcome.interrupted {
            return Err(RunInterrupted.into());
        }
        return Err(RunFailed(line.clone()).into());
    }
    let human = report::run::render(summary);
    // Before the table it qualifies (both streams end on one terminal).
    let banner = report::run::computation_time_banner(summary);
    if let Some(banner) = &banner {
        eprintln!("{banner}");
    }
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, summary)?;
        writeln!(stdout)?;
        eprint!("{human}");
    } else {
        print!("{human}");
    }
    if let Some(root) = &args.options.results.results_dir {
        let leaf = training_leaf(args, root, outcome, human, banner)?;
        eprintln!("ringload run: MLPerf results in {}", leaf.display());
    }
    Ok(if summary.au_target_met {
        exit::OK
    } else {
        exit::AU_MISSED
    })
}

/// `--results-dir`: a training run's leaf of MLPerf's results tree ([`results::write`]).
fn training_leaf(
    args: &RunArgs,
    root: &Path,
    outcome: &TrainingOutcome,
    stdout: String,
    banner: Option<String>,
) -> anyhow::Result<std::path::PathBuf> {
    let (summary, measured) = (&outcome.summary, &outcome.measured);
    let now = SystemTime::now();
    let start = now - outcome.started.elapsed();
    let clock = now - measured.ready_at.elapsed();
    let hosts = summary.hosts.len().max(1) as u32;
    let (fields, ranks) = results::dlio::training(&outcome.plan, summary, measured, hosts, clock);
    let stderr: String = banner
        .into_iter()
        .chain(summary.notes.iter().map(|n| format!("ringload run: {n}")))
        .map(|line| line + "\n")
        .collect();
    results::write(&results::Leaf {
        benchmark: results::Benchmark::Training,
        command: results::LeafCommand::Run,
        root,
        system: args.options.results.system.clone(),
        config: &outcome.config,
        model: &outcome.plan.settings.model,
        np: summary.np,
        hosts,
        accelerator: results::accelerator_of(&summary.workload),
        start,
        end: now,
        summary: fields,
        ranks,
        ringload_summary: serde_json::to_value(summary)?,
        stdout,
        stderr,
    })
}

/// Writes summary.json, the time series (CSV and HTML), steps.csv and requests.csv into
/// `dir`, each through a temporary file renamed into place.
fn write_training_files(
    dir: &Path,
    plan: &Plan,
    summary: &RunSummary,
    measured: &RunMeasurements,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(summary)? + "\n";
    let heading = format!(
        "ringload run: {}, NP {}, RT {}, {} engine",
        summary.workload, summary.np, summary.read_threads, summary.engine
    );
    let series = &summary.timeseries;
    let html = report::timeseries::html(&heading, series).map_err(|e| anyhow::anyhow!(e))?;
    Ok(write_files(
        dir,
        [
            ("summary.json", json),
            ("timeseries.csv", series.csv()),
            ("timeseries.html", html),
            ("steps.csv", report::run::steps_csv(&measured.records)),
            (
                "requests.csv",
                report::run::requests_csv(plan, &measured.stats),
            ),
        ],
    )?)
}

/// Writes each `(name, text)` into `dir`, each through a temporary file renamed into place;
/// a failure names the file and the fix.
fn write_files<const N: usize>(dir: &Path, files: [(&str, String); N]) -> Result<(), UsageError> {
    let fail = |what: &str, e: std::io::Error| {
        UsageError(format!(
            "cannot write {what} into --output {}: {e}; choose another directory",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(|e| fail("results", e))?;
    for (name, text) in files {
        let temp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&temp, text).map_err(|e| fail(name, e))?;
        std::fs::rename(&temp, dir.join(name)).map_err(|e| fail(name, e))?;
    }
    Ok(())
}

/// A checkpoint run's files, summary and report, its leaf with `--results-dir` (a complete
/// run's only: a run that failed or was interrupted leaves no DLIO-shaped result), then the
/// exit code, or its failure.
pub fn checkpoint(args: &RunArgs, outcome: &CheckpointOutcome) -> anyhow::Result<u8> {
    let human = write_checkpoint_report(args, &outcome.summary)?;
    if let Some(root) = args.options.results.results_dir.as_deref()
        && outcome.failure.is_none()
    {
        checkpoint_leaf(args, root, outcome, human)?;
    }
    match &outcome.failure {
        Some(f) if f.interrupted && outcome.results.is_empty() => Err(SetupInterrupted.into()),
        Some(f) if f.interrupted => Err(RunInterrupted.into()),
        Some(f) => Err(RunFailed(f.line.clone()).into()),
        None => Ok(exit::OK),
    }
}

/// summary.json and the time series into --output, the summary on stdout with --json, and
/// the report (returned).
fn write_checkpoint_report(args: &RunArgs, summary: &CheckpointSummary) -> anyhow::Result<String> {
    if let Some(dir) = &args.output {
        let heading = format!(
            "ringload run: {} checkpoints, NP {}, {} engine",
            summary.workload, summary.np, summary.engine
        );
        let series = &summary.timeseries;
        let html = report::timeseries::html(&heading, series).map_err(|e| anyhow::anyhow!(e))?;
        let json = serde_json::to_string_pretty(summary)? + "\n";
        write_files(
            dir,
            [
                ("timeseries.csv", series.csv()),
                ("timeseries.html", html),
                ("summary.json", json),
            ],
        )?;
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

/// `--results-dir`: a checkpoint run's leaf of MLPerf's results tree ([`results::write`]).
fn checkpoint_leaf(
    args: &RunArgs,
    root: &Path,
    outcome: &CheckpointOutcome,
    human: String,
) -> anyhow::Result<()> {
    let summary = &outcome.summary;
    let phases: Vec<PhaseTimes> = outcome
        .results
        .iter()
        .zip(&outcome.clocks)
        .map(|(r, &clock_start)| PhaseTimes {
            phase: r.phase,
            steps: &r.steps,
            records: &r.records,
            clock_start,
        })
        .collect();
    let hosts = summary.num_hosts as u32;
    let (fields, ranks) = results::dlio::checkpoint(
        summary,
        &phases,
        hosts,
        outcome.started_wall,
        outcome.ended_wall,
    );
    let written = results::write(&results::Leaf {
        benchmark: results::Benchmark::Checkpointing,
        command: results::LeafCommand::Run,
        root,
        system: args.options.results.system.clone(),
        config: &outcome.config,
        model: &summary.model,
        np: summary.np as u32,
        hosts,
        accelerator: (args.options.checkpoint.accelerator_memory)
            .map_or(Some("b200".into()), |_| None),
        start: outcome.started_wall,
        end: outcome.ended_wall,
        summary: fields,
        ranks,
        ringload_summary: serde_json::to_value(summary)?,
        stdout: human,
        stderr: summary
            .notes
            .iter()
            .map(|n| format!("ringload run: {n}\n"))
            .collect(),
    })?;
    eprintln!("ringload run: MLPerf results in {}", written.display());
    Ok(())
}

/// What a datagen leaf records of the dataset `generate` wrote.
#[derive(Debug, Clone)]
pub struct DatagenFacts {
    model: String,
    files: u64,
    samples_per_file: u64,
    record_bytes: u64,
    epochs: u32,
}

impl DatagenFacts {
    pub fn of(settings: &crate::settings::Settings) -> DatagenFacts {
        DatagenFacts {
            model: settings.model.clone(),
            files: settings.num_files as u64,
            samples_per_file: settings.samples_per_file,
            record_bytes: settings.record_bytes,
            epochs: settings.epochs,
        }
    }
}

/// `generate --results-dir`: the datagen leaf of MLPerf's results tree, `training/<model>/
/// datagen/<ts>/` ([`results::write`]). DLIO writes no summary.json for a generate-only run;
/// this one carries the dataset's size and the host's figures so that mlpstorage's report
/// generator can judge the dataset against the rule (its DLIO path needs a summary.json), and
/// no per-rank files (a generation has no steps).
pub fn datagen_leaf(
    root: &Path,
    system: Option<String>,
    config: &crate::config::RawConfig,
    facts: &DatagenFacts,
    summary: &crate::datagen::GenerateSummary,
    (start, end): (SystemTime, SystemTime),
    human: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let (memory_gib, _) = results::host_figures();
    let dataset_gib =
        facts.files as f64 * facts.samples_per_file as f64 * facts.record_bytes as f64
            / f64::from(1u32 << 30);
    let mut fields = serde_json::Map::new();
    fields.insert("metric".into(), serde_json::json!({}));
    fields.insert("num_files_train".into(), facts.files.into());
    fields.insert("num_files_eval".into(), 0.into());
    fields.insert("num_samples_per_file".into(), facts.samples_per_file.into());
    fields.insert(
        "potential_caching".into(),
        serde_json::json!([u8::from(dataset_gib < memory_gib)]),
    );
    fields.insert("data_size_per_host_GB".into(), dataset_gib.into());
    fields.insert("epochs".into(), facts.epochs.into());
    results::write(&results::Leaf {
        benchmark: results::Benchmark::Training,
        command: results::LeafCommand::Datagen,
        root,
        system,
        config,
        model: &facts.model,
        np: 1,
        hosts: 1,
        accelerator: None,
        start,
        end,
        summary: fields,
        ranks: Vec::new(),
        ringload_summary: serde_json::to_value(summary)?,
        stdout: format!("{human}\n"),
        stderr: String::new(),
    })
}
