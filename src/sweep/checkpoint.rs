//! The table of a checkpoint workload's sweep: per engine and NP, DLIO's figures from each
//! point's summary.json (rank 0's save and load GiB/s and seconds, the means over checkpoints;
//! medians with min–max over `--repeat` rounds), beside the slowest rank's mean duration DLIO
//! does not publish. Plots and report.html are the training study's: a checkpoint sweep writes
//! this table only.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::SweepFile;
use super::table::Stat;

/// One (engine, NP) of a checkpoint sweep, over its rounds.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointRow {
    pub engine: String,
    pub np: u32,
    /// Rounds that wrote a summary, and the statuses of all rounds (`met`, `failed`, …).
    pub runs: usize,
    pub statuses: Vec<String>,
    pub checkpoint_size_gib: Option<f64>,
    /// DLIO's `save_checkpoint_io_mean_GB_per_second` (GiB/s), over rounds.
    pub save_gib_per_s: Option<Stat>,
    pub save_duration_s: Option<Stat>,
    /// The slowest rank's duration, mean over checkpoints (what DLIO's rank-0 figure hides).
    pub save_slowest_rank_s: Option<Stat>,
    pub load_gib_per_s: Option<Stat>,
    pub load_duration_s: Option<Stat>,
    pub load_slowest_rank_s: Option<Stat>,
    /// Why a round did not run or failed, the first one.
    pub reason: Option<String>,
}

/// Whether a sweep's points ran a checkpoint workload.
pub fn is_checkpoint_sweep(sweep: &SweepFile) -> bool {
    sweep.points.iter().any(|p| {
        p.summary
            .as_ref()
            .is_some_and(|s| s["kind"] == "checkpoint")
    })
}

/// The rows, by engine then NP.
pub fn rows(sweep: &SweepFile) -> Vec<CheckpointRow> {
    let mut by: BTreeMap<(String, u32), Vec<&super::PointResult>> = BTreeMap::new();
    for p in &sweep.points {
        by.entry((p.point.engine.clone(), p.point.np))
            .or_default()
            .push(p);
    }
    by.into_iter()
        .map(|((engine, np), points)| {
            let summaries: Vec<&serde_json::Value> =
                points.iter().filter_map(|p| p.summary.as_ref()).collect();
            let metric = |name: &str| {
                Stat::of(
                    summaries
                        .iter()
                        .filter_map(|s| s["metric"][name].as_f64())
                        .collect(),
                )
            };
            let slowest = |phase: &str| {
                Stat::of(
                    summaries
                        .iter()
                        .filter_map(|s| {
                            let d: Vec<f64> = s["checkpoints"]
                                .as_array()?
                                .iter()
                                .filter(|r| r["phase"] == phase)
                                .filter_map(|r| r["slowest_rank_duration_s"].as_f64())
                                .collect();
                            (!d.is_empty()).then(|| d.iter().sum::<f64>() / d.len() as f64)
                        })
                        .collect(),
                )
            };
            CheckpointRow {
                engine,
                np,
                runs: summaries.len(),
                statuses: points.iter().map(|p| p.status.word().to_string()).collect(),
                checkpoint_size_gib: summaries
                    .iter()
                    .find_map(|s| s["metric"]["checkpoint_size_GB"].as_f64()),
                save_gib_per_s: metric("save_checkpoint_io_mean_GB_per_second"),
                save_duration_s: metric("save_checkpoint_duration_mean_seconds"),
                save_slowest_rank_s: slowest("save"),
                load_gib_per_s: metric("load_checkpoint_io_mean_GB_per_second"),
                load_duration_s: metric("load_checkpoint_duration_mean_seconds"),
                load_slowest_rank_s: slowest("load"),
                reason: points.iter().find_map(|p| p.reason.clone()),
            }
        })
        .collect()
}

fn show(stat: &Option<Stat>, decimals: usize) -> String {
    stat.as_ref()
        .map_or_else(|| "—".into(), |s| s.show(decimals))
}

/// Decimals that show a figure's first three digits (durations of small checkpoints are
/// hundredths of a second).
fn decimals(stat: &Option<Stat>) -> usize {
    match stat.map(|s| s.median.abs()) {
        Some(v) if v > 0.0 && v < 1.0 => 3,
        _ => 2,
    }
}

/// The table as markdown, with the workload's name and a note on what is not drawn.
pub fn markdown(sweep: &SweepFile, rows: &[CheckpointRow]) -> String {
    let mut out = format!(
        "# Checkpoint sweep: {}\n\n| engine | NP | runs | status | GiB | save GiB/s | save s | \
         save slowest rank s | load GiB/s | load s | load slowest rank s | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        sweep.workload
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.engine,
            r.np,
            r.runs,
            r.statuses.join(", "),
            r.checkpoint_size_gib
                .map_or_else(|| "—".into(), |v| format!("{v:.2}")),
            show(&r.save_gib_per_s, 2),
            show(&r.save_duration_s, decimals(&r.save_duration_s)),
            show(&r.save_slowest_rank_s, decimals(&r.save_slowest_rank_s)),
            show(&r.load_gib_per_s, 2),
            show(&r.load_duration_s, decimals(&r.load_duration_s)),
            show(&r.load_slowest_rank_s, decimals(&r.load_slowest_rank_s)),
            r.reason.as_deref().unwrap_or("").replace('|', "/")
        );
    }
    out.push_str(
        "\nGiB/s and s are DLIO's figures (summary.json `metric`): rank 0's, means over \
         checkpoints (GiB despite DLIO's GB); with --repeat, medians (min–max) over rounds. \
         The slowest rank's duration is the mean over checkpoints of the slowest rank's.\n\
         \nnote: a checkpoint sweep writes this table only (study.md, .csv, .json): the plots \
         and report.html are the training study's.\n",
    );
    out
}

/// The table as CSV: one line per (engine, NP), medians.
pub fn csv(rows: &[CheckpointRow]) -> String {
    let mut out = String::from(
        "engine,np,runs,status,checkpoint_size_gib,save_gib_per_s,save_duration_s,\
         save_slowest_rank_s,load_gib_per_s,load_duration_s,load_slowest_rank_s\n",
    );
    let o = |s: &Option<Stat>| s.map(|s| s.median.to_string()).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{}",
            r.engine,
            r.np,
            r.runs,
            r.statuses.join(" "),
            r.checkpoint_size_gib
                .map(|v| v.to_string())
                .unwrap_or_default(),
            o(&r.save_gib_per_s),
            o(&r.save_duration_s),
            o(&r.save_slowest_rank_s),
            o(&r.load_gib_per_s),
            o(&r.load_duration_s),
            o(&r.load_slowest_rank_s)
        );
    }
    out
}
