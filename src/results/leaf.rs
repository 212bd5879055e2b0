//! What a leaf of MLPerf's results tree is made of ([`Leaf`]), the names it goes under (MLPerf's
//! model names, the accelerator) and its times (UTC, in mlpstorage's folder form and DLIO's stamp
//! form).

use std::path::Path;
use std::time::SystemTime;

use serde_json::{Map, Value as Json, json};

use crate::config::RawConfig;

/// The tool named in every file of a leaf.
pub const TOOL: &str = "ringload";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `{"tool": "ringload", "version": …}`: the mark every JSON file of a leaf carries.
pub fn made_by() -> Json {
    json!({ "tool": TOOL, "version": VERSION })
}

/// Which of MLPerf's benchmarks a leaf holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Benchmark {
    Training,
    Checkpointing,
}

impl Benchmark {
    pub fn word(self) -> &'static str {
        match self {
            Benchmark::Training => "training",
            Benchmark::Checkpointing => "checkpointing",
        }
    }
}

/// The benchmark command a leaf records, as mlpstorage names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafCommand {
    /// A training or checkpoint run: `<model>/run/<ts>` (checkpoints: `<model>/<ts>`).
    Run,
    /// `ringload generate`: `training/<model>/datagen/<ts>`.
    Datagen,
}

impl LeafCommand {
    pub fn word(self) -> &'static str {
        match self {
            LeafCommand::Run => "run",
            LeafCommand::Datagen => "datagen",
        }
    }
}

/// Everything a leaf is made of.
#[derive(Debug)]
pub struct Leaf<'a> {
    pub benchmark: Benchmark,
    pub command: LeafCommand,
    /// `--results-dir`: the tree's root.
    pub root: &'a Path,
    /// `--system`: the system's name in the tree [default: this host's name].
    pub system: Option<String>,
    /// The workload's configuration, overrides and flags applied.
    pub config: &'a RawConfig,
    /// The model's name in the workload (`model.name`): `retinanet`, `llama3_8b`, …
    pub model: &'a str,
    pub np: u32,
    pub hosts: u32,
    /// The accelerator the workload stands for, when known (`b200`, …).
    pub accelerator: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    /// DLIO's summary.json fields of this run (`metric`, `num_files_train`, …); the leaf adds
    /// the times, the hosts and the tool's mark.
    pub summary: Map<String, Json>,
    /// Per rank: its `<rank>_output.json` and `<rank>_per_epoch_stats.json`.
    pub ranks: Vec<(Json, Json)>,
    /// ringload's own summary.json of the run (kept beside DLIO's, as `ringload_summary.json`).
    pub ringload_summary: Json,
    /// What the run printed on stdout (the report) and on stderr (warnings, notes).
    pub stdout: String,
    pub stderr: String,
}

/// MLPerf's model name for a workload's `model.name`, as mlpstorage's report generator makes it
/// (`rules/models.py:737-738`): `llama_` as `llama3-`, then `_` as `-`, lower case —
/// `llama3_8b` and MLPerf's own `llama_8b` → `llama3-8b`, `unet3d` → `unet3d`.
pub fn mlperf_model(model: &str) -> String {
    model
        .to_ascii_lowercase()
        .replace("llama_", "llama3-")
        .replace('_', "-")
}

/// The accelerator a workload's name ends in (`unet3d_b200` → `b200`), if any.
pub fn accelerator_of(workload: &str) -> Option<String> {
    let suffix = workload.rsplit('_').next()?;
    ["b200", "mi355", "h100", "a100"]
        .contains(&suffix)
        .then(|| suffix.to_string())
}

/// This host's memory (MemTotal) in DLIO's `host_memory_GB` (GiB) and its CPUs.
pub fn host_figures() -> (f64, usize) {
    let memory = crate::budget::probe().mem_total_bytes.unwrap_or(0);
    (
        memory as f64 / f64::from(1u32 << 30),
        crate::affinity::cores(),
    )
}

/// UTC (year, month, day, hour, minute, second, microsecond) of `t`.
fn utc(t: SystemTime) -> (i64, u32, u32, i64, i64, i64, u32) {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::units::civil_from_days(days);
    (
        year,
        month,
        day,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros(),
    )
}

/// `YYYYMMDD_HHmmss`, mlpstorage's timestamp folder.
pub fn folder_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, _) = utc(t);
    format!("{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}")
}

/// DLIO's time stamps: `2026-12-03T06:36:23.672674` (Python's `isoformat()`).
pub fn dlio_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, us) = utc(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}")
}
