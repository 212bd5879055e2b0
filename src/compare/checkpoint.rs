//! `compare` of checkpoint results: DLIO's checkpoint summary.json and ringload's (`kind:
//! "checkpoint"`, the same `metric` names), one line per (workload, NP).
//!
//! DLIO's `metric` of a checkpoint run (reference A4): `checkpoint_size_GB` and, per phase that
//! ran, `{save,load}_checkpoint_io_{mean,stdev}_GB_per_second` and
//! `{save,load}_checkpoint_duration_{mean,stdev}_seconds` — rank 0's figures, GiB despite the
//! name. Its NP is `num_accelerators`; its workload `model.name` of `dlio_config/config.yaml`
//! beside it, else the folder's name; its checkpoint counts from `0_per_epoch_stats.json`
//! (`save_ckptN` and `load_ckptN` entries) when present. A `metric` field outside those names,
//! or a phase with some of its four figures and not the others, is refused naming the file.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::error::CompareError;

/// DLIO's names of one phase's four figures, after the `save_` or `load_` prefix.
const FIGURES: [&str; 4] = [
    "checkpoint_io_mean_GB_per_second",
    "checkpoint_io_stdev_GB_per_second",
    "checkpoint_duration_mean_seconds",
    "checkpoint_duration_stdev_seconds",
];

/// One phase's figures, DLIO's way: rank 0's, mean and population stdev over checkpoints.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct PhaseFigures {
    pub gib_per_s_mean: f64,
    pub gib_per_s_stdev: f64,
    pub duration_mean_s: f64,
    pub duration_stdev_s: f64,
}

/// One checkpoint result: a DLIO run or a ringload run.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointEntry {
    /// The input's letter and what ran: `A: dlio`, `B: uring`.
    pub group: String,
    pub source: String,
    /// The model's name, as lines match them (`llama3-1t`, `llama_1t` and `llama3_1t` are one).
    pub workload: String,
    pub np: u32,
    pub checkpoint_size_gib: f64,
    /// Checkpoints saved and loaded, where the input says.
    pub saves: Option<u64>,
    pub loads: Option<u64>,
    pub save: Option<PhaseFigures>,
    pub load: Option<PhaseFigures>,
}

/// A workload's name as lines match it: lower case, `-` as `_`, and MLPerf's `llama_*` (its
/// YAMLs' `model.name` of the Llama3 workloads) as `llama3_*`.
pub fn workload_key(name: &str) -> String {
    let name = name.trim().to_lowercase().replace('-', "_");
    match name.strip_prefix("llama_") {
        Some(rest) => format!("llama3_{rest}"),
        None => name,
    }
}

/// Whether a summary.json is a checkpoint run's: ringload's `kind`, or DLIO's checkpoint
/// `metric` with no training in it. A DLIO *training* summary carries checkpoint fields too
/// when it checkpointed between its steps (`workflow.checkpoint: True`): its `train_*` keys
/// and its `epochs` > 0 (a checkpoint run has `epochs` 0) make it a training summary.
pub fn is_checkpoint(json: &Value) -> bool {
    let metric = json["metric"].as_object();
    let trains = metric.is_some_and(|m| m.keys().any(|k| k.starts_with("train_")))
        || json["epochs"].as_u64().is_some_and(|e| e > 0);
    json["kind"] == "checkpoint"
        || (!trains && metric.is_some_and(|m| m.keys().any(|k| k.contains("checkpoint"))))
}

/// The checkpoint figures a training summary carries beside its training ones (DLIO's
/// `save_checkpoint_*` and `checkpoint_size_GB` in `metric`, ringload's `checkpoints`); `None`
/// when it has none.
pub fn training_saves(json: &Value) -> Option<TrainingSaves> {
    let metric = &json["metric"];
    let own = &json["checkpoints"];
    if own.is_object() {
        return Some(TrainingSaves {
            checkpoint_size_gib: own["checkpoint_size_GB"].as_f64().unwrap_or(0.0),
            saves: own["saves"].as_array().map(|s| s.len() as u64),
            duration_mean_s: own["metric"]["save_checkpoint_duration_mean_seconds"].as_f64(),
            gib_per_s_mean: own["metric"]["save_checkpoint_io_mean_GB_per_second"].as_f64(),
        });
    }
    Some(TrainingSaves {
        checkpoint_size_gib: metric["checkpoint_size_GB"].as_f64()?,
        saves: None,
        duration_mean_s: metric["save_checkpoint_duration_mean_seconds"].as_f64(),
        gib_per_s_mean: metric["save_checkpoint_io_mean_GB_per_second"].as_f64(),
    })
}

/// A training run's checkpoint saves, as its summary gives them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrainingSaves {
    /// DLIO's `checkpoint_size_GB` (GiB).
    pub checkpoint_size_gib: f64,
    /// How many (ringload's summaries say; DLIO's summary does not).
    pub saves: Option<u64>,
    /// Rank 0's, mean over the saves (DLIO's `save_checkpoint_duration_mean_seconds`);
    /// `None` when nothing was saved.
    pub duration_mean_s: Option<f64>,
    /// DLIO's `save_checkpoint_io_mean_GB_per_second` (GiB/s).
    pub gib_per_s_mean: Option<f64>,
}

fn error(file: &Path, reason: String) -> CompareError {
    CompareError {
        path: file.to_path_buf(),
        reason,
    }
}

/// `metric`'s size and phases, every field checked.
fn figures(
    json: &Value,
    file: &Path,
    what: &str,
) -> Result<(f64, Option<PhaseFigures>, Option<PhaseFigures>), CompareError> {
    let metric = json["metric"].as_object().ok_or_else(|| {
        error(
            file,
            format!("a {what} summary without its metric object; pass the run's summary.json"),
        )
    })?;
    let known = |k: &str| {
        k == "checkpoint_size_GB"
            || ["save_", "load_"]
                .iter()
                .any(|p| k.strip_prefix(p).is_some_and(|f| FIGURES.contains(&f)))
    };
    if let Some(unknown) = metric.keys().find(|k| !known(k)) {
        return Err(error(
            file,
            format!(
                "unknown field metric.{unknown} in a {what} checkpoint summary (known: \
                 checkpoint_size_GB, save_/load_{}); pass a summary of a checkpoint run only",
                FIGURES.join(", save_/load_")
            ),
        ));
    }
    let size = metric
        .get("checkpoint_size_GB")
        .and_then(Value::as_f64)
        .ok_or_else(|| {
            error(
                file,
                format!("a {what} checkpoint summary without metric.checkpoint_size_GB"),
            )
        })?;
    let phase = |prefix: &str| -> Result<Option<PhaseFigures>, CompareError> {
        let values: Vec<Option<f64>> = FIGURES
            .iter()
            .map(|f| metric.get(&format!("{prefix}_{f}")).and_then(Value::as_f64))
            .collect();
        match values.as_slice() {
            [Some(a), Some(b), Some(c), Some(d)] => Ok(Some(PhaseFigures {
                gib_per_s_mean: *a,
                gib_per_s_stdev: *b,
                duration_mean_s: *c,
                duration_stdev_s: *d,
            })),
            v if v.iter().all(Option::is_none) => Ok(None),
            v => {
                let missing = FIGURES
                    .iter()
                    .zip(v)
                    .find(|(_, v)| v.is_none())
                    .map_or("", |(f, _)| *f);
                Err(error(
                    file,
                    format!(
                        "metric.{prefix}_{missing} is missing (or not a number) beside the other \
                         {prefix}_ figures of this {what} checkpoint summary"
                    ),
                ))
            }
        }
    };
    let (save, load) = (phase("save")?, phase("load")?);
    if save.is_none() && load.is_none() {
        return Err(error(
            file,
            format!("a {what} checkpoint summary with neither save_ nor load_ figures in metric"),
        ));
    }
    Ok((size, save, load))
}

/// A DLIO checkpoint summary.json at `file`, with `dlio_config/config.yaml` and
/// `0_per_epoch_stats.json` beside it where present.
pub fn dlio(json: &Value, file: &Path, letter: char) -> Result<CheckpointEntry, CompareError> {
    let (size, save, load) = figures(json, file, "DLIO")?;
    let np = json["num_accelerators"].as_u64().ok_or_else(|| {
        error(
            file,
            "a DLIO checkpoint summary without num_accelerators".into(),
        )
    })?;
    let folder = file.parent().unwrap_or(Path::new("."));
    let workload = config_model_name(&folder.join("dlio_config/config.yaml"))
        .or_else(|| folder_name(folder))
        .unwrap_or_else(|| "dlio".into());
    let (saves, loads) = match epoch_counts(&folder.join("0_per_epoch_stats.json"))? {
        Some((s, l)) => (Some(s), Some(l)),
        None => (None, None),
    };
    Ok(CheckpointEntry {
        group: format!("{letter}: dlio"),
        source: file.display().to_string(),
        workload: workload_key(&workload),
        np: np as u32,
        checkpoint_size_gib: size,
        saves,
        loads,
        save,
        load,
    })
}

/// `model.name` (under `workload:` as DLIO's hydra writes it, or at the top) of a DLIO config.
pub(super) fn config_model_name(path: &Path) -> Option<String> {
    use saphyr::{LoadableYamlNode, SafelyIndex};
    let text = std::fs::read_to_string(path).ok()?;
    let docs = saphyr::YamlOwned::load_from_str(&text).ok()?;
    let doc = docs.first()?;
    let under = |node: &saphyr::YamlOwned| -> Option<String> {
        Some(node.get("model")?.get("name")?.as_str()?.to_string())
    };
    doc.get("workload").and_then(under).or_else(|| under(doc))
}

/// The folder's name, or its parent's when it is a run's timestamp (`20260718_030234`).
fn folder_name(folder: &Path) -> Option<String> {
    let folder = std::path::absolute(folder).ok()?;
    let name = folder.file_name()?.to_str()?;
    if name
        .chars()
        .all(|c| c.is_ascii_digit() || c == '_' || c == '-')
    {
        return Some(folder.parent()?.file_name()?.to_str()?.to_string());
    }
    Some(name.to_string())
}

/// Saves and loads in a `<rank>_per_epoch_stats.json` (`{"1": {"save_ckpt1": {…}, …}}`);
/// `None` when there is no such file.
fn epoch_counts(path: &Path) -> Result<Option<(u64, u64)>, CompareError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let shape = "expected DLIO's per-epoch stats: {\"1\": {\"start\", \"save_ckpt1\": {start, \
                 end, duration, throughput}, …, \"end\"}}";
    let json: Value =
        serde_json::from_str(&text).map_err(|e| error(path, format!("not JSON ({e}); {shape}")))?;
    let epochs = json
        .as_object()
        .ok_or_else(|| error(path, format!("not an object; {shape}")))?;
    let (mut saves, mut loads) = (0, 0);
    for (epoch, entries) in epochs {
        let entries = entries
            .as_object()
            .ok_or_else(|| error(path, format!("epoch \"{epoch}\" is not an object; {shape}")))?;
        for (name, entry) in entries {
            let count = if name.starts_with("save_ckpt") {
                &mut saves
            } else if name.starts_with("load_ckpt") {
                &mut loads
            } else {
                continue;
            };
            if !entry["duration"].is_number() || !entry["throughput"].is_number() {
                return Err(error(
                    path,
                    format!("\"{epoch}\".{name} has no duration or throughput; {shape}"),
                ));
            }
            *count += 1;
        }
    }
    Ok(Some((saves, loads)))
}

/// A ringload checkpoint summary (`kind: "checkpoint"`).
pub fn ringload(json: &Value, file: &Path, letter: char) -> Result<CheckpointEntry, CompareError> {
    // A run that failed or was interrupted has no DLIO figure for the phase that stopped:
    // not a result to put beside others.
    if let Some(outcome) = json["outcome"].as_str().filter(|o| *o != "completed") {
        return Err(error(
            file,
            format!(
                "a ringload checkpoint run that did not complete (outcome {outcome}: {}); \
                 compare takes completed runs",
                json["failure"].as_str().unwrap_or("no reason recorded")
            ),
        ));
    }
    let (size, save, load) = figures(json, file, "ringload")?;
    let missing = |field: &str| {
        error(
            file,
            format!("a ringload checkpoint summary without {field}"),
        )
    };
    let np = json["np"].as_u64().ok_or_else(|| missing("np"))?;
    let model = json["model"].as_str().ok_or_else(|| missing("model"))?;
    let rows = json["checkpoints"]
        .as_array()
        .ok_or_else(|| missing("checkpoints"))?;
    let count = |phase: &str| rows.iter().filter(|r| r["phase"] == phase).count() as u64;
    Ok(CheckpointEntry {
        group: format!(
            "{letter}: {}",
            json["engine"].as_str().unwrap_or("ringload")
        ),
        source: file.display().to_string(),
        workload: workload_key(model),
        np: np as u32,
        checkpoint_size_gib: size,
        saves: Some(count("save")),
        loads: Some(count("load")),
        save,
        load,
    })
}

/// One line: a (workload, NP) and each group's entry there.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointLine {
    pub workload: String,
    pub np: u32,
    pub entries: Vec<Option<CheckpointEntry>>,
    /// Save and load GiB/s (means) of each group ÷ the first group's.
    pub save_ratio: Vec<Option<f64>>,
    pub load_ratio: Vec<Option<f64>>,
}

/// The comparison of checkpoint results: groups in argument order, lines by (workload, NP).
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointComparison {
    /// `checkpoint`: tells a reader this is not a training comparison.
    pub kind: &'static str,
    pub groups: Vec<String>,
    pub lines: Vec<CheckpointLine>,
    pub notes: Vec<String>,
}

pub fn compare(entries: Vec<CheckpointEntry>) -> CheckpointComparison {
    let mut groups: Vec<String> = Vec::new();
    for e in &entries {
        if !groups.contains(&e.group) {
            groups.push(e.group.clone());
        }
    }
    let mut keys: Vec<(String, u32)> = entries.iter().map(|e| (e.workload.clone(), e.np)).collect();
    keys.sort();
    keys.dedup();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let lines = keys
        .into_iter()
        .map(|(workload, np)| {
            let at: Vec<Option<CheckpointEntry>> = groups
                .iter()
                .map(|g| {
                    entries
                        .iter()
                        .find(|e| &e.group == g && e.workload == workload && e.np == np)
                        .cloned()
                })
                .collect();
            let rate = |e: &Option<CheckpointEntry>, save: bool| {
                let e = e.as_ref()?;
                Some(if save { e.save } else { e.load }?.gib_per_s_mean)
            };
            let first = at.first().cloned().flatten();
            CheckpointLine {
                save_ratio: at
                    .iter()
                    .map(|e| ratio(rate(e, true), rate(&first.clone(), true)))
                    .collect(),
                load_ratio: at
                    .iter()
                    .map(|e| ratio(rate(e, false), rate(&first.clone(), false)))
                    .collect(),
                workload,
                np,
                entries: at,
            }
        })
        .collect();
    let mut notes = vec![
        "GiB/s and seconds are DLIO's figures, rank 0's mean ± stdev over checkpoints \
         (checkpoint_size_GB ÷ rank 0's duration, GiB despite DLIO's name)"
            .to_string(),
    ];
    let mut sizes: BTreeMap<(String, u32), Vec<f64>> = BTreeMap::new();
    for e in &entries {
        sizes
            .entry((e.workload.clone(), e.np))
            .or_default()
            .push(e.checkpoint_size_gib);
    }
    for ((workload, np), s) in sizes {
        if s.iter()
            .any(|v| (v - s[0]).abs() > 1e-6 * s[0].abs().max(1.0))
        {
            notes.push(format!(
                "{workload} at NP {np}: the inputs' checkpoint sizes differ ({}): their rates \
                 are not comparable",
                s.iter()
                    .map(|v| format!("{v:.2} GiB"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    CheckpointComparison {
        kind: "checkpoint",
        groups,
        lines,
        notes,
    }
}

/// Mean ± stdev, with three decimals below 1 (a small checkpoint's seconds).
fn cell(v: Option<(f64, f64)>) -> String {
    v.map_or_else(
        || "—".into(),
        |(m, s)| {
            let d = if m.abs() < 1.0 { 3 } else { 2 };
            format!("{m:.d$} ± {s:.d$}")
        },
    )
}

/// The comparison as markdown: per group the checkpoint's GiB, the checkpoints saved/loaded,
/// save and load GiB/s and seconds; then each group's rates ÷ the first's.
pub fn markdown(c: &CheckpointComparison) -> String {
    let mut out = String::from("| workload | NP |");
    for g in &c.groups {
        let _ = write!(
            out,
            " GiB {g} | saves/loads {g} | save GiB/s {g} | save s {g} | load GiB/s {g} | load s \
             {g} |"
        );
    }
    for g in c.groups.iter().skip(1) {
        let first = &c.groups[0];
        let _ = write!(out, " save {g} ÷ {first} | load {g} ÷ {first} |");
    }
    out.push_str("\n|---|---|");
    let columns = c.groups.len() * 6 + c.groups.len().saturating_sub(1) * 2;
    out.push_str(&"---|".repeat(columns));
    out.push('\n');
    let times = |v: Option<f64>| v.map_or_else(|| "—".into(), |v| format!("{v:.2}×"));
    for line in &c.lines {
        let _ = write!(out, "| {} | {} |", line.workload, line.np);
        for e in &line.entries {
            let Some(e) = e else {
                out.push_str(&" — |".repeat(6));
                continue;
            };
            let count = |v: Option<u64>| v.map_or("—".into(), |v| v.to_string());
            let save = e.save.map(|p| (p.gib_per_s_mean, p.gib_per_s_stdev));
            let save_s = e.save.map(|p| (p.duration_mean_s, p.duration_stdev_s));
            let load = e.load.map(|p| (p.gib_per_s_mean, p.gib_per_s_stdev));
            let load_s = e.load.map(|p| (p.duration_mean_s, p.duration_stdev_s));
            let _ = write!(
                out,
                " {:.2} | {}/{} | {} | {} | {} | {} |",
                e.checkpoint_size_gib,
                count(e.saves),
                count(e.loads),
                cell(save),
                cell(save_s),
                cell(load),
                cell(load_s)
            );
        }
        for k in 1..c.groups.len() {
            let _ = write!(
                out,
                " {} | {} |",
                times(line.save_ratio[k]),
                times(line.load_ratio[k])
            );
        }
        out.push('\n');
    }
    for note in &c.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

/// The comparison as CSV: one line per (workload, NP, group).
pub fn csv(c: &CheckpointComparison) -> String {
    let mut out = String::from(
        "workload,np,group,source,checkpoint_size_gib,saves,loads,save_gib_per_s_mean,\
         save_gib_per_s_stdev,save_duration_mean_s,save_duration_stdev_s,load_gib_per_s_mean,\
         load_gib_per_s_stdev,load_duration_mean_s,load_duration_stdev_s,save_ratio,load_ratio\n",
    );
    let o = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let phase = |p: Option<PhaseFigures>| {
        [
            o(p.map(|p| p.gib_per_s_mean)),
            o(p.map(|p| p.gib_per_s_stdev)),
            o(p.map(|p| p.duration_mean_s)),
            o(p.map(|p| p.duration_stdev_s)),
        ]
        .join(",")
    };
    for line in &c.lines {
        for (k, e) in line.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            let _ = writeln!(
                out,
                "{},{},{},\"{}\",{},{},{},{},{},{},{}",
                line.workload,
                line.np,
                e.group,
                e.source.replace('"', "'"),
                e.checkpoint_size_gib,
                e.saves.map(|v| v.to_string()).unwrap_or_default(),
                e.loads.map(|v| v.to_string()).unwrap_or_default(),
                phase(e.save),
                phase(e.load),
                o(line.save_ratio[k]),
                o(line.load_ratio[k])
            );
        }
    }
    out
}
