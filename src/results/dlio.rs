//! The DLIO-shaped JSON of a leaf ([`super::Leaf`]): a training run's and a checkpoint run's
//! summary fields, `<rank>_output.json` and `<rank>_per_epoch_stats.json`, in the shapes of the
//! real DLIO output in the reference's fixtures (training) and the reference's A4 (checkpoint).

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value as Json, json};

use super::leaf::{dlio_time, host_figures, made_by};
use crate::plan::Plan;
use crate::rank::RunMeasurements;
use crate::rank::checkpoint::{Phase, PhaseRecord};
use crate::summary::RunSummary;
use crate::summary::checkpoint::CheckpointSummary;

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The host fields DLIO puts at the top of every `<rank>_output.json`; `potential_caching` 1
/// when a host's share of the data fits its memory.
fn host_fields(out: &mut Map<String, Json>, per_host_bytes: f64) {
    let (memory_gib, cpus) = host_figures();
    out.insert("host_memory_GB".into(), json!(memory_gib));
    out.insert("host_cpu_count".into(), json!(cpus));
    out.insert("host_processor_name".into(), json!(""));
    out.insert(
        "potential_caching".into(),
        json!(u8::from(
            per_host_bytes / f64::from(1u32 << 30) < memory_gib
        )),
    );
}

/// A training run's summary fields, and each rank's output and per-epoch stats, the epochs'
/// wall-clock times laid from `start` along each rank's measured windows.
pub fn training(
    plan: &Plan,
    summary: &RunSummary,
    measured: &RunMeasurements,
    hosts: u32,
    start: SystemTime,
) -> (Map<String, Json>, Vec<(Json, Json)>) {
    let s = &plan.settings;
    let dataset_bytes = s.num_files as f64 * s.samples_per_file as f64 * s.record_bytes as f64;
    let per_host = dataset_bytes / f64::from(hosts.max(1));
    let mut fields = Map::new();
    let metric = json!(summary.metric);
    let metric = match &summary.checkpoints {
        Some(c) => c.dlio_metric(metric),
        None => metric,
    };
    fields.insert("metric".into(), metric);
    fields.insert("num_files_train".into(), json!(s.num_files));
    fields.insert("num_files_eval".into(), json!(0));
    fields.insert("num_samples_per_file".into(), json!(s.samples_per_file));
    let (memory_gib, _) = host_figures();
    let caching = u8::from(per_host / f64::from(1u32 << 30) < memory_gib);
    fields.insert(
        "potential_caching".into(),
        json!(vec![caching; hosts.max(1) as usize]),
    );
    fields.insert(
        "data_size_per_host_GB".into(),
        json!(per_host / f64::from(1u32 << 30)),
    );
    fields.insert("epochs".into(), json!(s.epochs));
    let ranks = measured
        .records
        .iter()
        .map(|record| {
            let mut output = Map::new();
            host_fields(&mut output, per_host);
            let mut stats = Map::new();
            let mut at = start;
            for e in 0..record.steps.len() {
                let size_gib = summary
                    .checkpoints
                    .as_ref()
                    .map_or(0.0, |c| c.checkpoint_size_gb);
                let (epoch_output, epoch_stats, epoch_end) =
                    epoch_json(record, e, at, s.batch_size, size_gib);
                at = epoch_end;
                output.insert((e + 1).to_string(), epoch_output);
                stats.insert((e + 1).to_string(), epoch_stats);
            }
            output.insert("hostname".into(), json!(crate::cluster::Cluster::host()));
            output.insert("generated_by".into(), made_by());
            (Json::Object(output), Json::Object(stats))
        })
        .collect();
    (fields, ranks)
}

/// One of DLIO's blocks of an epoch: its name, its steps, when it started and its window.
struct BlockTimes<'a> {
    name: String,
    steps: &'a [crate::metrics::StepTimes],
    start: SystemTime,
    window_ns: u64,
}

/// The blocks of epoch `e` of `record` started at `epoch_start`: one (`block1`, the epoch's
/// window) unless checkpoints cut it (step mode), then each block from the epoch's start or
/// the end of the save before it (DLIO's `start_block` after `end_save_ckpt`).
fn epoch_blocks(
    record: &crate::rank::RankRecord,
    e: usize,
    epoch_start: SystemTime,
) -> Vec<BlockTimes<'_>> {
    let steps = &record.steps[e];
    let window = record.windows_ns.get(e).copied().unwrap_or(0);
    let blocks = match record.blocks.get(e).filter(|b| !b.is_empty()) {
        Some(blocks) => blocks,
        None => {
            return vec![BlockTimes {
                name: "block1".into(),
                steps,
                start: epoch_start,
                window_ns: window,
            }];
        }
    };
    let saves: Vec<&crate::rank::SaveRecord> = record
        .saves
        .iter()
        .filter(|v| v.epoch as usize == e + 1)
        .collect();
    blocks
        .iter()
        .enumerate()
        .map(|(i, block)| {
            let first = (block.first_step as usize).min(steps.len());
            let end = blocks
                .get(i + 1)
                .map_or(steps.len(), |b| (b.first_step as usize).min(steps.len()))
                .max(first);
            let after_save = i
                .checked_sub(1)
                .and_then(|k| saves.get(k))
                .map_or(0, |v| v.start_ns + v.duration_ns);
            BlockTimes {
                name: format!("block{}", i + 1),
                steps: &steps[first..end],
                start: epoch_start + Duration::from_nanos(after_save),
                window_ns: block.window_ns,
            }
        })
        .collect()
}

/// Epoch `e` of `record` as DLIO writes it, started at `epoch_start`: its entry of the rank's
/// `*_output.json` (load, proc, compute per block; each block's throughput and AU), its
/// `per_epoch_stats` (each block, each `save_ckpt{n}`: its duration a number, its throughput
/// `checkpoint_size_GB` ÷ the duration, `statscounter.py` 368-383), and when it ended (after
/// its saves too: DLIO's `duration` includes them).
fn epoch_json(
    record: &crate::rank::RankRecord,
    e: usize,
    epoch_start: SystemTime,
    batch_size: u64,
    size_gib: f64,
) -> (Json, Json, SystemTime) {
    let window = record.windows_ns.get(e).copied().unwrap_or(0);
    let drain = record.drain_ns.get(e).copied().unwrap_or(0);
    let saves = || {
        record
            .saves
            .iter()
            .filter(move |v| v.epoch as usize == e + 1)
    };
    let saved_to = saves()
        .map(|v| v.start_ns + v.duration_ns)
        .max()
        .unwrap_or(0);
    let lasted = (window + drain).max(saved_to);
    let epoch_end = epoch_start + Duration::from_nanos(lasted);
    let blocks = epoch_blocks(record, e, epoch_start);
    let per_block = |f: &dyn Fn(&BlockTimes) -> Json| -> Json {
        Json::Object(blocks.iter().map(|b| (b.name.clone(), f(b))).collect())
    };
    let list = |f: &dyn Fn(&crate::metrics::StepTimes) -> u64| {
        per_block(&|b| json!(b.steps.iter().map(|t| secs(f(t))).collect::<Vec<f64>>()))
    };
    // One block: the epoch's figures (as before); several: each block's own.
    let metrics = |b: &BlockTimes| match blocks.len() {
        1 => record.epoch_metrics(e, batch_size),
        _ => crate::metrics::epoch_metrics(b.steps, b.window_ns, batch_size),
    };
    let output = json!({
        "load": list(&|t| t.wait_ns),
        "proc": list(&|t| t.wait_ns + t.compute_ns),
        "throughput": per_block(&|b| json!(metrics(b).map(|m| m.samples_per_s))),
        "au": per_block(&|b| json!(metrics(b).map(|m| m.au_percent))),
        "compute": list(&|t| t.compute_ns),
        "end": dlio_time(epoch_end),
    });
    let mut stats = json!({
        "start": dlio_time(epoch_start),
        "end": dlio_time(epoch_end),
        "duration": format!("{:.2}", secs(lasted)),
    });
    for b in &blocks {
        stats[b.name.as_str()] = json!({
            "start": dlio_time(b.start),
            "end": dlio_time(b.start + Duration::from_nanos(b.window_ns)),
            "duration": format!("{:.2}", secs(b.window_ns)),
        });
    }
    for save in saves() {
        let begin = epoch_start + Duration::from_nanos(save.start_ns);
        let duration = secs(save.duration_ns).max(1e-9);
        stats[format!("save_ckpt{}", save.number)] = json!({
            "start": dlio_time(begin),
            "end": dlio_time(begin + Duration::from_nanos(save.duration_ns)),
            "duration": duration,
            "throughput": size_gib / duration,
        });
    }
    (output, stats, epoch_end)
}

/// One phase of a checkpoint run: its records (rank by rank), the checkpoints' step numbers
/// and when its clock started.
#[derive(Debug, Clone)]
pub struct PhaseTimes<'a> {
    pub phase: Phase,
    pub steps: &'a [u32],
    pub records: &'a [PhaseRecord],
    pub clock_start: SystemTime,
}

/// A checkpoint run's summary fields (DLIO's `metric`, `epochs` 0, the rule lines), and each
/// rank's output (its durations and throughputs per phase) and per-epoch stats
/// (`{"1": {"start", "save_ckpt1": {start, end, duration, throughput}, …, "end"}}`).
pub fn checkpoint(
    summary: &CheckpointSummary,
    phases: &[PhaseTimes],
    hosts: u32,
    start: SystemTime,
    end: SystemTime,
) -> (Map<String, Json>, Vec<(Json, Json)>) {
    let size_gib = crate::summary::checkpoint::gib(summary.checkpoint_bytes);
    let mut fields = Map::new();
    fields.insert("metric".into(), json!(summary.metric));
    fields.insert(
        "potential_caching".into(),
        json!(vec![0; hosts.max(1) as usize]),
    );
    fields.insert("epochs".into(), json!(0));
    fields.insert("rules".into(), json!(summary.rules));
    let ranks = summary.np;
    let per_host = summary
        .hosts
        .iter()
        .map(|h| h.bytes_per_checkpoint)
        .max()
        .unwrap_or(0) as f64;
    let out = (0..ranks)
        .map(|rank| {
            let mut output = Map::new();
            host_fields(&mut output, per_host);
            let mut epoch = Map::new();
            epoch.insert("start".into(), json!(dlio_time(start)));
            let mut figures = Map::new();
            for p in phases {
                let word = match p.phase {
                    Phase::Save => "save",
                    Phase::Load => "load",
                };
                let Some(record) = p.records.get(rank) else {
                    continue;
                };
                let mut durations = Vec::new();
                let mut rates = Vec::new();
                for (&step, &(a, b)) in p.steps.iter().zip(&record.spans_s) {
                    let duration = (b - a).max(0.0);
                    let throughput = size_gib / duration.max(1e-9);
                    durations.push(duration);
                    rates.push(throughput);
                    let at =
                        |s: f64| dlio_time(p.clock_start + Duration::from_secs_f64(s.max(0.0)));
                    epoch.insert(
                        format!("{word}_ckpt{step}"),
                        json!({
                            "start": at(a),
                            "end": at(b),
                            "duration": duration,
                            "throughput": throughput,
                        }),
                    );
                }
                figures.insert(format!("{word}_ckpt_duration"), json!(durations));
                figures.insert(format!("{word}_ckpt_throughput"), json!(rates));
            }
            epoch.insert("end".into(), json!(dlio_time(end)));
            output.insert("1".into(), Json::Object(figures));
            output.insert("hostname".into(), json!(crate::cluster::Cluster::host()));
            output.insert("generated_by".into(), made_by());
            let mut stats = Map::new();
            stats.insert("1".into(), Json::Object(epoch));
            (Json::Object(output), Json::Object(stats))
        })
        .collect();
    (fields, out)
}
