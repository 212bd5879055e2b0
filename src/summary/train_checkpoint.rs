//! The checkpoints of a training run (`workflow.checkpoint` with `workflow.train`): summary.json's
//! `checkpoints` section, and DLIO's checkpoint figures as its training summary carries them
//! beside the `train_*` ones (`statscounter.py` at the v3.0 fork 21c0723, lines 164-187 and
//! 368-383): per save, rank 0's duration and `checkpoint_size_GB` ÷ that duration; over every
//! save of the run, their mean and numpy's population standard deviation. The four `save_*`
//! figures only when a save happened; `checkpoint_size_GB` always.

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use crate::checkpoint::training::{Schedule, TrainCheckpointPlan};
use crate::metrics::mean_stdev;
use crate::rank::RankRecord;

/// The most keys a save's row lists (an LLM's save has thousands); `objects` counts them all.
const KEYS_LISTED: usize = 16;

/// One save, across ranks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TrainSaveRow {
    /// The epoch, from 1.
    pub epoch: u32,
    /// The epoch's steps done before it.
    pub after_step: u64,
    /// The save's folder, `<checkpoint_folder>/global_epoch{E}_step{K}/`.
    pub prefix: String,
    /// Its objects' keys, every rank's (the first 16).
    pub keys: Vec<String>,
    pub objects: u64,
    pub bytes: u64,
    /// Rank 0's duration: DLIO's figure.
    pub rank0_duration_s: f64,
    /// `checkpoint_size_GB` ÷ rank 0's duration: DLIO's figure (GiB/s).
    pub rank0_gib_per_second: f64,
    /// The slowest rank's duration.
    pub slowest_rank_duration_s: f64,
}

/// DLIO's four save figures (rank 0's, over every save).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[allow(non_snake_case)]
pub struct DlioSaveMetric {
    pub save_checkpoint_io_mean_GB_per_second: f64,
    pub save_checkpoint_io_stdev_GB_per_second: f64,
    pub save_checkpoint_duration_mean_seconds: f64,
    pub save_checkpoint_duration_stdev_seconds: f64,
}

/// summary.json's `checkpoints` of a training run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TrainCheckpointSummary {
    pub schedule: Schedule,
    /// DLIO's `checkpoint_size_GB` (GiB, despite the name).
    #[serde(rename = "checkpoint_size_GB")]
    pub checkpoint_size_gb: f64,
    pub objects_per_save: usize,
    pub bytes_per_save: u64,
    /// Saves planned for the run (its epochs and steps).
    pub saves_planned: usize,
    pub saves: Vec<TrainSaveRow>,
    /// DLIO's figures; `None` when nothing was saved (DLIO then leaves them out).
    pub metric: Option<DlioSaveMetric>,
}

impl TrainCheckpointSummary {
    /// The saves every rank recorded (`records[r]` rank r's, global order).
    pub fn of(plan: &TrainCheckpointPlan, records: &[RankRecord]) -> TrainCheckpointSummary {
        let size_gib = plan.objects.checkpoint_size_gb;
        let mut saves = Vec::new();
        let rank0 = records.first().map_or(&[][..], |r| r.saves.as_slice());
        for (i, save) in rank0.iter().enumerate() {
            let key_step = plan.schedule.key_step(save.after_step);
            let all: Vec<String> = (0..records.len())
                .flat_map(|r| plan.save_objects(r, save.epoch, save.after_step))
                .map(|(key, _)| key)
                .collect();
            let (objects, bytes) = records
                .iter()
                .filter_map(|r| r.saves.get(i))
                .fold((0u64, 0u64), |(o, b), s| {
                    (o + u64::from(s.objects), b + s.bytes)
                });
            let duration = (save.duration_ns as f64 / 1e9).max(1e-9);
            let slowest = records
                .iter()
                .filter_map(|r| r.saves.get(i))
                .map(|s| s.duration_ns)
                .max()
                .unwrap_or(0);
            saves.push(TrainSaveRow {
                epoch: save.epoch,
                after_step: save.after_step,
                prefix: plan.save_prefix(save.epoch, key_step),
                keys: all.into_iter().take(KEYS_LISTED).collect(),
                objects,
                bytes,
                rank0_duration_s: duration,
                rank0_gib_per_second: size_gib / duration,
                slowest_rank_duration_s: slowest as f64 / 1e9,
            });
        }
        let rates: Vec<f64> = saves.iter().map(|s| s.rank0_gib_per_second).collect();
        let durations: Vec<f64> = saves.iter().map(|s| s.rank0_duration_s).collect();
        let metric = match (mean_stdev(&rates), mean_stdev(&durations)) {
            (Some((io, io_sd)), Some((d, d_sd))) => Some(DlioSaveMetric {
                save_checkpoint_io_mean_GB_per_second: io,
                save_checkpoint_io_stdev_GB_per_second: io_sd,
                save_checkpoint_duration_mean_seconds: d,
                save_checkpoint_duration_stdev_seconds: d_sd,
            }),
            _ => None,
        };
        TrainCheckpointSummary {
            schedule: plan.schedule,
            checkpoint_size_gb: size_gib,
            objects_per_save: plan.objects.objects_per_checkpoint,
            bytes_per_save: plan.bytes_per_save(),
            saves_planned: plan.saves.len(),
            saves,
            metric,
        }
    }

    /// DLIO's training `metric` with these checkpoint figures: the four `save_*` (when a save
    /// happened), `checkpoint_size_GB`, and `train`'s keys — DLIO's set; written in
    /// serde_json's key order (sorted), not DLIO's insertion order, as every leaf map is.
    pub fn dlio_metric(&self, train: Json) -> Json {
        let mut metric = Map::new();
        if let Some(m) = &self.metric
            && let Json::Object(fields) = json!(m)
        {
            metric.extend(fields);
        }
        metric.insert("checkpoint_size_GB".into(), json!(self.checkpoint_size_gb));
        if let Json::Object(fields) = train {
            metric.extend(fields);
        }
        Json::Object(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::training::TrainCheckpointSettings;
    use crate::checkpoint::{CheckpointOptions, IoOptions};
    use crate::rank::SaveRecord;

    fn plan(epochs: u32) -> TrainCheckpointPlan {
        let mut cfg = crate::config::RawConfig::load("unet3d_h100").unwrap();
        cfg.apply_override("workflow.checkpoint=True").unwrap();
        let s = TrainCheckpointSettings::resolve(&cfg).unwrap().unwrap();
        let options = CheckpointOptions {
            np: 2,
            hosts: 1,
            io: IoOptions::default(),
            memory_cap_bytes: None,
            server_bytes: 0,
        };
        let limits = crate::budget::MemoryLimits::unlimited();
        TrainCheckpointPlan::resolve(&s, &options, &limits, &|_| None, epochs, 4).unwrap()
    }

    #[test]
    fn rank_0s_saves_make_dlios_figures_and_no_save_leaves_the_size_only() {
        let save = |ns: u64, objects, bytes| SaveRecord {
            epoch: 5,
            after_step: 4,
            number: 1,
            start_ns: 0,
            duration_ns: ns,
            objects,
            bytes,
        };
        let records = vec![
            RankRecord {
                saves: vec![save(4_000_000, 1, 10240)],
                ..RankRecord::default()
            },
            RankRecord {
                saves: vec![save(1_000, 0, 0)],
                ..RankRecord::default()
            },
        ];
        let s = TrainCheckpointSummary::of(&plan(5), &records);
        assert_eq!(s.saves.len(), 1);
        let row = &s.saves[0];
        assert_eq!(
            row.keys,
            ["checkpoints/unet3d/global_epoch5_step5/model_states-0.pt"]
        );
        assert_eq!((row.objects, row.bytes), (1, 10240));
        assert_eq!(row.rank0_duration_s, 0.004);
        let m = s.metric.unwrap();
        assert_eq!(
            m.save_checkpoint_io_mean_GB_per_second,
            10240.0 / 1073741824.0 / 0.004
        );
        assert_eq!(m.save_checkpoint_duration_stdev_seconds, 0.0);
        let train = json!({ "train_au_mean_percentage": 91.0 });
        let keys = |v: &Json| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        assert_eq!(keys(&s.dlio_metric(train.clone())).len(), 6);
        // Epochs below checkpoint_after_epoch: no save, the size alone beside train_*.
        let none = TrainCheckpointSummary::of(&plan(3), &[RankRecord::default()]);
        assert!(none.metric.is_none() && none.saves.is_empty());
        let mut k = keys(&none.dlio_metric(train));
        k.sort();
        assert_eq!(k, ["checkpoint_size_GB", "train_au_mean_percentage"]);
    }
}
