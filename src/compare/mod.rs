//! `ringload compare A B [C …]`: results from ringload and from DLIO in one table, matched by
//! (NP, RT), with ratios to the first argument.
//!
//! Each argument is one of:
//! - a ringload summary.json (`run --output` or `--json`), or a folder holding one (told apart
//!   from DLIO's by its `engine`, `np` and `read_threads`; its DLIO `metric` figures where it
//!   has them, else its own `au_percent`, `samples_per_s`, `io_mib_per_s`);
//! - a sweep folder (its sweep.json; medians over rounds, as its study tables give them);
//! - a DLIO output folder or its summary.json: `num_accelerators` and `metric`'s
//!   `train_au_mean_percentage`, `train_throughput_mean_samples_per_second` and
//!   `train_io_mean_MB_per_second`; RT and computation_time from `dlio_config/config.yaml`
//!   beside it (or its `overrides.yaml`), where present.
//!
//! Checkpoint results — a DLIO checkpoint summary.json (or its folder), a ringload one (`kind:
//! "checkpoint"`), a sweep of a checkpoint workload — go into their own table, by (workload,
//! NP): [`checkpoint`]. Training and checkpoint results are not mixed.

pub mod checkpoint;
pub mod dlio_gap;
mod error;
mod fork;

pub use error::CompareError;

use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sweep::SweepFile;
use crate::sweep::table;

/// One result: a point of one input.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The input's letter and what ran: `A: dlio`, `B: uring`.
    pub group: String,
    pub source: String,
    pub np: u32,
    /// `None` when the input does not say (a DLIO folder without its config).
    pub read_threads: Option<u64>,
    pub computation_time_s: Option<f64>,
    pub au_percent: Option<f64>,
    pub samples_per_s: Option<f64>,
    /// DLIO's nominal figure: samples/s × record size (DLIO's `train_io_mean_MB_per_second`).
    pub io_mib_per_s: Option<f64>,
    /// Bytes received over the run's time (ringload's `measured_mib_per_s`); DLIO has none.
    pub wire_mib_per_s: Option<f64>,
    /// Client CPU seconds per GiB received; DLIO has none.
    pub cpu_s_per_gib: Option<f64>,
    /// GET latency, first byte sent to last byte received: median and 99th percentile.
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Where it came from, for the attribution of DLIO's AU loss ([`dlio_gap`]).
    #[serde(skip)]
    pub origin: dlio_gap::Origin,
    /// The checkpoints it wrote between its steps (`workflow.checkpoint: True`), shown beside
    /// its training figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<checkpoint::TrainingSaves>,
    /// A DLIO run: how the DLIO fork's ways changed its traffic or steps ([`fork`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fork_ways: Vec<String>,
}

const EXPECTED: &str = "expected a ringload summary.json or --output folder, a sweep folder \
    (sweep.json), or a DLIO output folder or summary.json (metric.train_au_mean_percentage, or a \
    checkpoint run's metric.checkpoint_size_GB)";

fn read_json(path: &Path) -> Result<serde_json::Value, CompareError> {
    let text = std::fs::read_to_string(path).map_err(|e| CompareError {
        path: path.to_path_buf(),
        reason: format!("cannot read it ({e}); {EXPECTED}"),
    })?;
    serde_json::from_str(&text).map_err(|e| CompareError {
        path: path.to_path_buf(),
        reason: format!("not JSON ({e}); {EXPECTED}"),
    })
}

/// What one argument holds: training results or checkpoint results.
#[derive(Debug, Clone)]
pub enum Input {
    Training(Vec<Entry>),
    Checkpoint(Vec<checkpoint::CheckpointEntry>),
}

/// The results of one argument, training or checkpoint; `letter` names its group.
pub fn read_input(path: &Path, letter: char) -> Result<Input, CompareError> {
    if path.is_dir() && path.join("sweep.json").is_file() {
        let sweep = SweepFile::read(path).map_err(|e| CompareError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let points: Vec<_> = sweep
            .points
            .iter()
            .filter_map(|p| Some((p, p.summary.as_ref()?)))
            .filter(|(_, s)| checkpoint::is_checkpoint(s))
            .collect();
        if points.is_empty() {
            return read(path, letter).map(Input::Training);
        }
        let mut entries = Vec::new();
        for (p, summary) in points {
            let file = path.join("points").join(&p.name).join("summary.json");
            entries.push(checkpoint::ringload(summary, &file, letter)?);
        }
        return Ok(Input::Checkpoint(entries));
    }
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let (json, file) = own_summary(read_json(&file)?, file)?;
    if checkpoint::is_checkpoint(&json) {
        let entry = if json["kind"] == "checkpoint" {
            checkpoint::ringload(&json, &file, letter)?
        } else {
            checkpoint::dlio(&json, &file, letter)?
        };
        return Ok(Input::Checkpoint(vec![entry]));
    }
    read(path, letter).map(Input::Training)
}

/// A `--results-dir` leaf's summary.json has DLIO's shape but ringload made it: its run is
/// read from ringload's own summary beside it (`ringload_summary.json`), so it is never taken
/// for a DLIO run. Any other summary is returned as it is.
fn own_summary(
    json: serde_json::Value,
    file: PathBuf,
) -> Result<(serde_json::Value, PathBuf), CompareError> {
    if json["generated_by"]["tool"] != "ringload" {
        return Ok((json, file));
    }
    let own = file.with_file_name("ringload_summary.json");
    if !own.is_file() {
        return Err(CompareError {
            path: file,
            reason: "a leaf ringload wrote (generated_by: ringload) without its \
                     ringload_summary.json beside it; compare its run's --output folder instead"
                .into(),
        });
    }
    Ok((read_json(&own)?, own))
}

/// The training entries of one argument; `letter` names its group.
pub fn read(path: &Path, letter: char) -> Result<Vec<Entry>, CompareError> {
    let source = path.display().to_string();
    if path.is_dir() && path.join("sweep.json").is_file() {
        let sweep = SweepFile::read(path).map_err(|e| CompareError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        return Ok(table::rows(&sweep)
            .into_iter()
            .filter(|r| r.runs > 0)
            .map(|r| Entry {
                group: format!("{letter}: {}", r.profile()),
                source: source.clone(),
                np: r.np,
                read_threads: Some(r.read_threads),
                computation_time_s: r.computation_time.or_else(|| {
                    sweep
                        .points
                        .iter()
                        .find_map(|p| p.summary.as_ref()?["computation_time_s"].as_f64())
                }),
                au_percent: r.au_percent.map(|s| s.median),
                samples_per_s: r.samples_per_s.map(|s| s.median),
                io_mib_per_s: r.io_mib_per_s.map(|s| s.median),
                wire_mib_per_s: r.measured_mib_per_s.map(|s| s.median),
                cpu_s_per_gib: r.cpu_s_per_gib.map(|s| s.median),
                latency_p50_ms: r.latency_p50_ms.map(|s| s.median),
                latency_p99_ms: r.latency_p99_ms.map(|s| s.median),
                origin: dlio_gap::Origin::Ringload {
                    workload: sweep.workload.clone(),
                    loader: r.loader.clone(),
                    io_wait_per_step_ms: None,
                    embedded: sweep.points.iter().any(|p| {
                        p.summary
                            .as_ref()
                            .is_some_and(|s| s["target"]["embedded"] == true)
                    }),
                },
                fork_ways: Vec::new(),
                checkpoint: None,
            })
            .collect());
    }
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let (json, file) = own_summary(read_json(&file)?, file)?;
    // Ringload's summaries carry DLIO's `metric` too: they are told apart by their own fields.
    if json["engine"].is_string() && json["np"].is_number() && json["read_threads"].is_number() {
        let engine = json["engine"].as_str().unwrap_or("ringload");
        // DLIO's names where the summary has them (the same figures, averaged per epoch first),
        // else ringload's own (older summaries, and runs whose ranks' epochs differ).
        let figure = |dlio_name: &str, ours: &str| {
            json["metric"][dlio_name]
                .as_f64()
                .or_else(|| json[ours].as_f64())
        };
        return Ok(vec![Entry {
            group: match json["loader"].as_str() {
                Some("dlio") => format!("{letter}: {engine} (dlio loader)"),
                _ => format!("{letter}: {engine}"),
            },
            source,
            np: json["np"].as_u64().unwrap_or(0) as u32,
            read_threads: json["read_threads"].as_u64(),
            computation_time_s: json["computation_time_s"].as_f64(),
            au_percent: figure("train_au_mean_percentage", "au_percent"),
            samples_per_s: figure("train_throughput_mean_samples_per_second", "samples_per_s"),
            io_mib_per_s: figure("train_io_mean_MB_per_second", "io_mib_per_s"),
            wire_mib_per_s: json["measured_mib_per_s"].as_f64(),
            cpu_s_per_gib: json["cpu_s_per_gib"].as_f64(),
            latency_p50_ms: json["request_latency_ms"]["total"]["p50"].as_f64(),
            latency_p99_ms: json["request_latency_ms"]["total"]["p99"].as_f64(),
            origin: dlio_gap::Origin::Ringload {
                workload: json["workload"].as_str().unwrap_or_default().to_string(),
                loader: json["loader"].as_str().unwrap_or("ringload").to_string(),
                io_wait_per_step_ms: json["io_wait_per_step_ms"]["mean"].as_f64(),
                embedded: json["target"]["embedded"] == true,
            },
            fork_ways: Vec::new(),
            checkpoint: checkpoint::training_saves(&json),
        }]);
    }
    if json["metric"]["train_au_mean_percentage"].is_number() {
        return Ok(vec![dlio(&json, &file, letter)?]);
    }
    Err(CompareError {
        path: file,
        reason: format!("neither a ringload nor a DLIO summary; {EXPECTED}"),
    })
}

/// A DLIO summary.json at `file`, with its configuration beside it.
fn dlio(json: &serde_json::Value, file: &Path, letter: char) -> Result<Entry, CompareError> {
    let metric = &json["metric"];
    let np = json["num_accelerators"]
        .as_u64()
        .ok_or_else(|| CompareError {
            path: file.to_path_buf(),
            reason: "a DLIO summary without num_accelerators".into(),
        })?;
    let folder = file.parent().unwrap_or(Path::new("."));
    let config = std::fs::read_to_string(folder.join("dlio_config/config.yaml")).ok();
    let overrides = std::fs::read_to_string(folder.join("dlio_config/overrides.yaml")).ok();
    let number = |key: &[&str]| -> Option<f64> {
        use saphyr::{LoadableYamlNode, SafelyIndex};
        let docs = saphyr::YamlOwned::load_from_str(config.as_deref()?).ok()?;
        let mut node = docs.first()?;
        for k in key {
            node = node.get(*k)?;
        }
        node.as_integer()
            .map(|i| i as f64)
            .or_else(|| node.as_floating_point())
    };
    let from_overrides = |name: &str| -> Option<f64> {
        overrides.as_deref()?.lines().find_map(|l| {
            let (key, value) = l.trim().trim_start_matches("- ").split_once('=')?;
            key.trim_start_matches('+')
                .ends_with(name)
                .then(|| value.trim().parse().ok())?
        })
    };
    let read_threads = number(&["workload", "reader", "read_threads"])
        .or_else(|| from_overrides("reader.read_threads"))
        .map(|v| v as u64);
    let computation_time_s = number(&["workload", "train", "computation_time"])
        .or_else(|| from_overrides("train.computation_time"));
    let exclude = |name: &str, default: usize| {
        number(&["workload", "output", "metric", name])
            .or_else(|| from_overrides(&format!("output.metric.{name}")))
            .map_or(default, |v| v as usize)
    };
    // The workload's names: the one DLIO was run with (`workload=` of its overrides) and its
    // model's.
    let workloads: Vec<String> = overrides
        .as_deref()
        .and_then(|o| {
            o.lines().find_map(|l| {
                let value = l
                    .trim()
                    .trim_start_matches("- ")
                    .strip_prefix("workload=")?;
                Some(value.trim().to_string())
            })
        })
        .into_iter()
        .chain(checkpoint::config_model_name(
            &folder.join("dlio_config/config.yaml"),
        ))
        .collect();
    let fork_ways = {
        let whole = |v: Option<f64>| v.map(|v| v as u64);
        let samples_per_file = json["num_samples_per_file"].as_u64();
        let files = json["num_files_train"].as_u64();
        let batch = whole(
            number(&["workload", "reader", "batch_size"])
                .or_else(|| from_overrides("reader.batch_size")),
        );
        match (files, samples_per_file, batch) {
            (Some(files), Some(samples_per_file), Some(batch)) if batch > 0 => {
                let hosts = json["num_hosts"].as_u64().unwrap_or(1).max(1);
                let shape = fork::RunShape {
                    ranks: np,
                    files,
                    samples_per_file,
                    batch,
                    read_threads: read_threads.unwrap_or(1),
                    host_cpus: json["host_cpu_count"][0].as_u64(),
                    ranks_per_host: np.div_ceil(hosts),
                    record_bytes: whole(
                        number(&["workload", "dataset", "record_length_bytes"])
                            .or_else(|| from_overrides("dataset.record_length_bytes")),
                    ),
                };
                fork::ways(folder, &shape, &fork::steps_of(folder, np))
            }
            _ => Vec::new(),
        }
    };
    Ok(Entry {
        group: format!("{letter}: dlio"),
        fork_ways,
        checkpoint: checkpoint::training_saves(json),
        source: file.display().to_string(),
        np: np as u32,
        read_threads,
        computation_time_s,
        au_percent: metric["train_au_mean_percentage"].as_f64(),
        samples_per_s: metric["train_throughput_mean_samples_per_second"].as_f64(),
        io_mib_per_s: metric["train_io_mean_MB_per_second"].as_f64(),
        wire_mib_per_s: None,
        cpu_s_per_gib: None,
        latency_p50_ms: None,
        latency_p99_ms: None,
        origin: dlio_gap::Origin::Dlio {
            folder: folder.to_path_buf(),
            workloads,
            exclude_start_steps: exclude("exclude_start_steps", 1),
            exclude_end_steps: exclude("exclude_end_steps", 0),
        },
    })
}

/// One line of the comparison: a (NP, RT) and each group's entry there.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub np: u32,
    pub read_threads: Option<u64>,
    pub entries: Vec<Option<Entry>>,
    /// AU of each group ÷ the first group's.
    pub au_ratio: Vec<Option<f64>>,
    pub samples_per_s_ratio: Vec<Option<f64>>,
}

/// The comparison: groups in argument order, lines by (NP, RT).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub groups: Vec<String>,
    pub lines: Vec<Line>,
    pub notes: Vec<String>,
    /// Where a DLIO run and a ringload run of the same workload meet at an (NP, RT): how much
    /// of DLIO's AU loss the storage explains and how much is DLIO's client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dlio_gaps: Vec<dlio_gap::Gap>,
}

pub fn compare(entries: Vec<Entry>) -> Comparison {
    let runs: Vec<dlio_gap::Run> = entries
        .iter()
        .map(|e| dlio_gap::Run {
            group: e.group.clone(),
            np: e.np,
            read_threads: e.read_threads,
            computation_time_s: e.computation_time_s,
            au_percent: e.au_percent,
            origin: e.origin.clone(),
        })
        .collect();
    let dlio_gaps = dlio_gap::gaps(&runs);
    let mut groups: Vec<String> = Vec::new();
    for e in &entries {
        if !groups.contains(&e.group) {
            groups.push(e.group.clone());
        }
    }
    let mut keys: Vec<(u32, Option<u64>)> =
        entries.iter().map(|e| (e.np, e.read_threads)).collect();
    keys.sort();
    keys.dedup();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let lines = keys
        .into_iter()
        .map(|(np, rt)| {
            let at: Vec<Option<Entry>> = groups
                .iter()
                .map(|g| {
                    entries
                        .iter()
                        .find(|e| &e.group == g && e.np == np && e.read_threads == rt)
                        .cloned()
                })
                .collect();
            let first = at.first().cloned().flatten();
            Line {
                np,
                read_threads: rt,
                au_ratio: at
                    .iter()
                    .map(|e| ratio(e.as_ref()?.au_percent, first.as_ref()?.au_percent))
                    .collect(),
                samples_per_s_ratio: at
                    .iter()
                    .map(|e| ratio(e.as_ref()?.samples_per_s, first.as_ref()?.samples_per_s))
                    .collect(),
                entries: at,
            }
        })
        .collect();
    let mut notes = Vec::new();
    let cts: Vec<f64> = {
        let mut c: Vec<f64> = entries
            .iter()
            .filter_map(|e| e.computation_time_s)
            .collect();
        c.sort_by(f64::total_cmp);
        c.dedup();
        c
    };
    if cts.len() > 1 {
        notes.push(format!(
            "the inputs ran at different computation times ({}): their AU is not comparable",
            cts.iter()
                .map(|c| format!("{c} s"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if entries.iter().any(|e| e.read_threads.is_none()) {
        notes.push("an input does not say its read threads (RT —): it matches no other's".into());
    }
    // The checkpoints written between steps, beside the training figures.
    for e in &entries {
        if let Some(c) = e.checkpoint {
            notes.push(format!(
                "{} at NP {} checkpointed during training: checkpoint_size_GB {:.6e}, {}; \
                 its save figures (rank 0's mean) are beside its training ones, outside AU",
                e.group,
                e.np,
                c.checkpoint_size_gib,
                match (c.saves, c.duration_mean_s) {
                    (_, None) => "no save (DLIO reports the size only)".to_string(),
                    (Some(n), Some(_)) => format!("{n} save(s)"),
                    (None, Some(_)) => "saved".to_string(),
                }
            ));
        }
    }
    // The DLIO fork's ways, in the notes and in each attribution of that run.
    let mut dlio_gaps = dlio_gaps;
    for e in entries.iter().filter(|e| !e.fork_ways.is_empty()) {
        for way in &e.fork_ways {
            notes.push(format!("{} at NP {}: {way}", e.group, e.np));
        }
        for gap in dlio_gaps
            .iter_mut()
            .filter(|g| g.dlio == e.group && g.np == e.np && g.read_threads == e.read_threads)
        {
            gap.lines.extend(e.fork_ways.iter().cloned());
        }
    }
    Comparison {
        groups,
        lines,
        notes,
        dlio_gaps,
    }
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.decimals$}"))
}

fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.2}×"))
}

/// A column beyond AU%, samples/s and nominal MiB/s: its name, decimals and value.
type Column = (&'static str, usize, fn(&Entry) -> Option<f64>);

/// The columns of a group beyond AU%, samples/s and nominal MiB/s: those some entry of the
/// group has (a DLIO input has none of them).
fn extra_columns(c: &Comparison, group: usize) -> Vec<Column> {
    let columns: [Column; 6] = [
        ("MiB/s on the wire", 0, |e| e.wire_mib_per_s),
        ("CPU-s/GiB", 3, |e| e.cpu_s_per_gib),
        ("GET p50 (ms)", 2, |e| e.latency_p50_ms),
        ("GET p99 (ms)", 2, |e| e.latency_p99_ms),
        ("checkpoint save s", 4, |e| e.checkpoint?.duration_mean_s),
        ("checkpoint save GiB/s", 4, |e| e.checkpoint?.gib_per_s_mean),
    ];
    columns
        .into_iter()
        .filter(|(_, _, get)| {
            c.lines
                .iter()
                .any(|l| l.entries[group].as_ref().and_then(get).is_some())
        })
        .collect()
}

/// The comparison as markdown: per group AU%, samples/s, nominal MiB/s and what the input
/// also has (MiB/s on the wire, CPU-s/GiB, GET latency), then the ratios.
pub fn markdown(c: &Comparison) -> String {
    let mut out = String::from("| NP | RT |");
    let extras: Vec<_> = (0..c.groups.len()).map(|k| extra_columns(c, k)).collect();
    for (g, extra) in c.groups.iter().zip(&extras) {
        let _ = write!(out, " AU% {g} | samples/s {g} | nominal MiB/s {g} |");
        for (name, _, _) in extra {
            let _ = write!(out, " {name} {g} |");
        }
    }
    for g in c.groups.iter().skip(1) {
        let _ = write!(
            out,
            " AU {g} ÷ {} | samples/s {g} ÷ {} |",
            c.groups[0], c.groups[0]
        );
    }
    out.push_str("\n|---|---|");
    let columns = c.groups.len() * 3
        + extras.iter().map(Vec::len).sum::<usize>()
        + c.groups.len().saturating_sub(1) * 2;
    out.push_str(&"---|".repeat(columns));
    out.push('\n');
    for line in &c.lines {
        let _ = write!(
            out,
            "| {} | {} |",
            line.np,
            line.read_threads.map_or("—".into(), |r| r.to_string())
        );
        for (e, extra) in line.entries.iter().zip(&extras) {
            let e = e.as_ref();
            let _ = write!(
                out,
                " {} | {} | {} |",
                num(e.and_then(|e| e.au_percent), 1),
                num(e.and_then(|e| e.samples_per_s), 1),
                num(e.and_then(|e| e.io_mib_per_s), 1)
            );
            for (_, decimals, get) in extra {
                let _ = write!(out, " {} |", num(e.and_then(get), *decimals));
            }
        }
        for k in 1..c.groups.len() {
            let _ = write!(
                out,
                " {} | {} |",
                times(line.au_ratio[k]),
                times(line.samples_per_s_ratio[k])
            );
        }
        out.push('\n');
    }
    if extras
        .iter()
        .flatten()
        .any(|(name, _, _)| name.ends_with("wire"))
    {
        let _ = writeln!(out, "\n{}.", crate::report::run::MIB_PER_S_LEGEND);
    }
    for note in &c.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out.push_str(&dlio_gap::markdown(&c.dlio_gaps));
    out
}

/// The comparison as CSV: one line per (NP, RT, group).
pub fn csv(c: &Comparison) -> String {
    let mut out = String::from(
        "np,read_threads,group,source,computation_time_s,au_percent,samples_per_s,io_mib_per_s,\
         wire_mib_per_s,cpu_s_per_gib,latency_p50_ms,latency_p99_ms,au_ratio,samples_per_s_ratio\n",
    );
    let o = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for line in &c.lines {
        for (k, e) in line.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            let _ = writeln!(
                out,
                "{},{},{},\"{}\",{},{},{},{},{},{},{},{},{},{}",
                line.np,
                line.read_threads.map(|r| r.to_string()).unwrap_or_default(),
                e.group,
                e.source.replace('"', "'"),
                o(e.computation_time_s),
                o(e.au_percent),
                o(e.samples_per_s),
                o(e.io_mib_per_s),
                o(e.wire_mib_per_s),
                o(e.cpu_s_per_gib),
                o(e.latency_p50_ms),
                o(e.latency_p99_ms),
                o(line.au_ratio[k]),
                o(line.samples_per_s_ratio[k])
            );
        }
    }
    out
}
