//! Checkpoints during training: a training workload with `workflow.checkpoint: True` (and
//! `workflow.train: True`, DLIO's default) writes DLIO's checkpoint objects between its steps,
//! when and where DLIO's `_train` writes them (`dlio_benchmark/main.py` at the MLPerf v3.0 fork
//! 21c0723, lines 354-411; the research notes in `docs/checkpoints.md`).
//!
//! - **When** ([`Schedule`]): `checkpoint.steps_between_checkpoints` S ≥ 1 is *step mode*: a
//!   save after epoch-local steps S, 2S, … of every epoch (counting restarts each epoch); S = 0
//!   writes none; S < 0 (DLIO's default -1) is *epoch mode*: a save after the last step of
//!   epochs E₀, E₀ + k, … ≤ `train.epochs`, E₀ = `checkpoint.checkpoint_after_epoch` (default 1),
//!   k = `checkpoint.epochs_between_checkpoints` (default 1).
//! - **What**: the checkpoint workload's objects for the workload's model ([`super::model`]),
//!   each rank its own; a non-transformer model (unet3d) one `model_states-{rank}.pt` of
//!   `model.model_size_bytes` (default 10,240; DLIO never reads `model.model_size`), written by
//!   rank 0 only.
//! - **Where**: `<checkpoint_folder>/global_epoch{E}_step{K}/<object>`, K as DLIO computes it:
//!   in step mode the epoch-local step of the save; in epoch mode `overall_step` after the loop,
//!   one past the epoch's last step (steps + 1), DLIO's off-by-one (its log line says steps).
//!
//! Pure: the schedule and the plan are arithmetic; the rank loop (`rank::run_rank`) asks
//! [`Schedule::after_step`] and [`Schedule::after_epoch`].

use serde::Serialize;

use super::{
    CheckpointError, CheckpointOptions, CheckpointPlan, CheckpointSettings, PlannedObject,
};
use crate::budget::MemoryLimits;
use crate::config::RawConfig;
use crate::settings::{SettingsError, invalid};

/// DLIO's defaults (`utils/config.py`).
const DLIO_DEFAULT_CHECKPOINT_AFTER_EPOCH: i64 = 1;
const DLIO_DEFAULT_EPOCHS_BETWEEN_CHECKPOINTS: i64 = 1;
const DLIO_DEFAULT_STEPS_BETWEEN_CHECKPOINTS: i64 = -1;

/// When a training run writes its checkpoints, DLIO's two modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Schedule {
    /// `steps_between_checkpoints` = 0: DLIO's step mode that never fires.
    Off,
    /// After the last step of epochs `after_epoch`, `after_epoch + every_epochs`, ….
    Epochs { after_epoch: u32, every_epochs: u32 },
    /// After epoch-local steps `every_steps`, 2 × `every_steps`, … of every epoch.
    Steps { every_steps: u64 },
}

impl Schedule {
    /// Whether a save follows epoch-local step `step` (from 1) of an epoch of `steps` steps.
    pub fn after_step(&self, step: u64, steps: u64) -> bool {
        match *self {
            Schedule::Steps { every_steps } => {
                every_steps > 0 && step <= steps && step.is_multiple_of(every_steps)
            }
            _ => false,
        }
    }

    /// Whether a save follows the last step of epoch `epoch` (from 1).
    pub fn after_epoch(&self, epoch: u32) -> bool {
        match *self {
            Schedule::Epochs {
                after_epoch,
                every_epochs,
            } => epoch >= after_epoch && (epoch - after_epoch).is_multiple_of(every_epochs),
            _ => false,
        }
    }

    /// Every save of a run of `epochs` epochs of `steps` steps, in order.
    pub fn saves(&self, epochs: u32, steps: u64) -> Vec<PlannedSave> {
        let mut saves = Vec::new();
        for epoch in 1..=epochs {
            match *self {
                Schedule::Steps { every_steps } if every_steps > 0 => {
                    let fired = (every_steps..=steps).step_by(every_steps as usize);
                    for (i, step) in fired.enumerate() {
                        saves.push(PlannedSave {
                            epoch,
                            after_step: step,
                            key_step: step,
                            number: i as u32 + 1,
                        });
                    }
                }
                _ if self.after_epoch(epoch) => saves.push(PlannedSave {
                    epoch,
                    after_step: steps,
                    key_step: steps + 1,
                    number: 1,
                }),
                _ => {}
            }
        }
        saves
    }

    /// The save's folder step K: the epoch-local step (step mode), else one past the last step.
    pub fn key_step(&self, after_step: u64) -> u64 {
        match self {
            Schedule::Steps { .. } => after_step,
            _ => after_step + 1,
        }
    }
}

/// One save of a training run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlannedSave {
    /// The epoch, from 1.
    pub epoch: u32,
    /// The epoch's steps done when it starts.
    pub after_step: u64,
    /// K of `global_epoch{E}_step{K}`.
    pub key_step: u64,
    /// Its number within the epoch, from 1: DLIO's block (`save_ckpt{n}`).
    pub number: u32,
}

/// A training workload's checkpoints, validated: the objects' settings and the schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainCheckpointSettings {
    pub objects: CheckpointSettings,
    pub schedule: Schedule,
    /// The workload sets `model.model_size`, which DLIO does not read (`model_size_bytes` is).
    pub model_size_unread: bool,
}

impl TrainCheckpointSettings {
    /// The checkpoints of a training workload: `None` unless `workflow.checkpoint` is true
    /// (the caller has routed a workload with `workflow.train` false to the checkpoint kind).
    pub fn resolve(cfg: &RawConfig) -> Result<Option<TrainCheckpointSettings>, SettingsError> {
        if !cfg.boolean("workflow.checkpoint")?.unwrap_or(false) {
            return Ok(None);
        }
        cfg.boolean("workflow.train")?;
        let objects = CheckpointSettings::resolve_training(cfg)?;
        let steps = cfg
            .integer("checkpoint.steps_between_checkpoints", i64::MIN)?
            .unwrap_or(DLIO_DEFAULT_STEPS_BETWEEN_CHECKPOINTS);
        let after = cfg
            .integer("checkpoint.checkpoint_after_epoch", i64::MIN)?
            .unwrap_or(DLIO_DEFAULT_CHECKPOINT_AFTER_EPOCH);
        let every = cfg
            .integer("checkpoint.epochs_between_checkpoints", i64::MIN)?
            .unwrap_or(DLIO_DEFAULT_EPOCHS_BETWEEN_CHECKPOINTS);
        let schedule = if steps >= 0 {
            if steps == 0 {
                Schedule::Off
            } else {
                Schedule::Steps {
                    every_steps: steps as u64,
                }
            }
        } else if steps < -1 {
            return Err(invalid(
                cfg,
                "checkpoint.steps_between_checkpoints",
                "must be -1 (a checkpoint every epochs_between_checkpoints epochs, DLIO's \
                 default), 0 (none) or a step count ≥ 1; set one of those",
            ));
        } else {
            let epoch_count = |key: &str, v: i64| {
                u32::try_from(v).ok().filter(|&v| v >= 1).ok_or_else(|| {
                    invalid(
                        cfg,
                        key,
                        "must be an epoch count ≥ 1 (DLIO never writes a checkpoint at an \
                         epoch below 1); set it to 1 or more",
                    )
                })
            };
            Schedule::Epochs {
                after_epoch: epoch_count("checkpoint.checkpoint_after_epoch", after)?,
                every_epochs: epoch_count("checkpoint.epochs_between_checkpoints", every)?,
            }
        };
        let model_size_unread = cfg
            .ignored_keys()
            .iter()
            .any(|(k, _)| k == "model.model_size");
        Ok(Some(TrainCheckpointSettings {
            objects,
            schedule,
            model_size_unread,
        }))
    }
}

/// A training run's checkpoints, planned for its ranks, epochs and steps.
#[derive(Debug, Clone, Serialize)]
pub struct TrainCheckpointPlan {
    pub schedule: Schedule,
    /// Every save, in order.
    pub saves: Vec<PlannedSave>,
    /// The objects of one save (each rank's), their sizes, DLIO's `checkpoint_size_GB`, the
    /// requests' shape and the buffers' memory.
    pub objects: CheckpointPlan,
    pub notes: Vec<String>,
}

impl TrainCheckpointPlan {
    /// Plans the checkpoints of a run of `epochs` epochs of `steps` steps per rank.
    pub fn resolve(
        settings: &TrainCheckpointSettings,
        options: &CheckpointOptions,
        limits: &MemoryLimits,
        env: &dyn Fn(&str) -> Option<String>,
        epochs: u32,
        steps: u64,
    ) -> Result<TrainCheckpointPlan, CheckpointError> {
        let objects = CheckpointPlan::resolve(&settings.objects, options, limits, env)?;
        let saves = settings.schedule.saves(epochs, steps);
        let mut notes = Vec::new();
        if saves.is_empty() {
            notes.push(match settings.schedule {
                Schedule::Off => "checkpoint.steps_between_checkpoints=0: no checkpoint is \
                                  written (DLIO's step mode never fires at 0); summary.json \
                                  still reports checkpoint_size_GB, as DLIO's does"
                    .to_string(),
                Schedule::Steps { every_steps } => format!(
                    "checkpoint.steps_between_checkpoints {every_steps} is more than the {steps} \
                     steps of an epoch: no checkpoint is written; summary.json still reports \
                     checkpoint_size_GB, as DLIO's does"
                ),
                Schedule::Epochs { after_epoch, .. } => format!(
                    "train.epochs {epochs} is below checkpoint.checkpoint_after_epoch \
                     {after_epoch}: no checkpoint is written; summary.json still reports \
                     checkpoint_size_GB, as DLIO's does"
                ),
            });
        }
        if settings.model_size_unread && !settings.objects.model.is_transformer {
            notes.push(format!(
                "model.model_size is not read by DLIO (model.model_size_bytes is): each \
                 checkpoint is {} B, as DLIO writes it",
                objects.written_bytes
            ));
        }
        if let Schedule::Steps { every_steps } = settings.schedule
            && steps > 0
            && steps.is_multiple_of(every_steps)
        {
            notes.push(
                "a checkpoint after an epoch's last step leaves an empty block after it, as in \
                 DLIO (no figures, weight 0 in the epoch's AU)"
                    .to_string(),
            );
        }
        Ok(TrainCheckpointPlan {
            schedule: settings.schedule,
            saves,
            objects,
            notes,
        })
    }

    /// The prefix of a save: `<checkpoint_folder>/global_epoch{E}_step{K}/`.
    pub fn save_prefix(&self, epoch: u32, key_step: u64) -> String {
        format!(
            "{}global_epoch{epoch}_step{key_step}/",
            self.objects.prefix()
        )
    }

    /// The bucket-relative key of `object` in the save of epoch `epoch` and step `key_step`.
    pub fn key(&self, epoch: u32, key_step: u64, object: &PlannedObject) -> String {
        format!("{}{}", self.save_prefix(epoch, key_step), object.name)
    }

    /// The memory of the checkpoints' buffers and connections on ranks `ranks` (a host's):
    /// what the ranks that write anything set up, counted in the training run's budget.
    pub fn buffer_bytes(&self, ranks: std::ops::Range<usize>) -> u64 {
        let writers = ranks
            .filter(|&r| self.objects.ranks.get(r).is_some_and(|o| !o.is_empty()))
            .count() as u32;
        if writers == 0 {
            return 0;
        }
        let shape = self.objects.budget_shape(writers, 0);
        let b = crate::budget::object_budget(&shape, &MemoryLimits::unlimited(), None);
        b.pool_bytes + b.connection_bytes
    }

    /// Rank `rank`'s objects of the save of epoch `epoch` after `after_step` of its steps, in
    /// write order: (bucket-relative key, bytes).
    pub fn save_objects(&self, rank: usize, epoch: u32, after_step: u64) -> Vec<(String, u64)> {
        let key_step = self.schedule.key_step(after_step);
        self.objects.ranks.get(rank).map_or(Vec::new(), |objects| {
            objects
                .iter()
                .map(|o| (self.key(epoch, key_step, o), o.bytes))
                .collect()
        })
    }

    /// Bytes written per save, every rank's objects.
    pub fn bytes_per_save(&self) -> u64 {
        self.objects.written_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(name: &str, overrides: &[&str]) -> Result<TrainCheckpointSettings, SettingsError> {
        let mut cfg = RawConfig::load(name).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Ok(TrainCheckpointSettings::resolve(&cfg)?.expect("checkpointing"))
    }

    fn plan(
        name: &str,
        np: u32,
        epochs: u32,
        steps: u64,
        overrides: &[&str],
    ) -> TrainCheckpointPlan {
        let s = settings(name, overrides).unwrap();
        let options = CheckpointOptions {
            np,
            hosts: 1,
            io: super::super::IoOptions::default(),
            memory_cap_bytes: None,
            server_bytes: 0,
        };
        TrainCheckpointPlan::resolve(
            &s,
            &options,
            &MemoryLimits::unlimited(),
            &|_| None,
            epochs,
            steps,
        )
        .unwrap()
    }

    fn fired(saves: &[PlannedSave]) -> Vec<(u32, u64, u64, u32)> {
        saves
            .iter()
            .map(|s| (s.epoch, s.after_step, s.key_step, s.number))
            .collect()
    }

    #[test]
    fn epoch_mode_fires_from_the_first_epoch_every_k_epochs() {
        let s = Schedule::Epochs {
            after_epoch: 5,
            every_epochs: 2,
        };
        // unet3d_h100 at NP 8: 3 steps per epoch, one save after epoch 5, folder step 4.
        assert_eq!(fired(&s.saves(5, 3)), [(5, 3, 4, 1)]);
        assert_eq!(fired(&s.saves(9, 3)).len(), 3);
        assert_eq!(
            s.saves(9, 3).iter().map(|s| s.epoch).collect::<Vec<_>>(),
            [5, 7, 9]
        );
        assert!(s.saves(4, 3).is_empty());
        let every = Schedule::Epochs {
            after_epoch: 2,
            every_epochs: 1,
        };
        assert_eq!(fired(&every.saves(3, 6)), [(2, 6, 7, 1), (3, 6, 7, 1)]);
        assert!(!every.after_epoch(1) && every.after_epoch(2) && every.after_epoch(3));
        assert!(!every.after_step(6, 6));
    }

    #[test]
    fn step_mode_fires_every_s_steps_of_every_epoch_and_off_never() {
        let s = Schedule::Steps { every_steps: 2 };
        assert_eq!(
            fired(&s.saves(2, 5)),
            [(1, 2, 2, 1), (1, 4, 4, 2), (2, 2, 2, 1), (2, 4, 4, 2)]
        );
        assert!(s.after_step(4, 5) && !s.after_step(5, 5) && !s.after_step(6, 5));
        assert!(!s.after_epoch(1));
        assert_eq!(s.key_step(4), 4);
        assert!(Schedule::Steps { every_steps: 9 }.saves(3, 5).is_empty());
        assert!(Schedule::Off.saves(3, 5).is_empty());
        assert!(!Schedule::Off.after_step(1, 5) && !Schedule::Off.after_epoch(1));
    }

    #[test]
    fn unet3d_h100_writes_one_10240_byte_object_by_rank_0() {
        let p = plan("unet3d_h100", 8, 5, 3, &["workflow.checkpoint=True"]);
        assert_eq!(fired(&p.saves), [(5, 3, 4, 1)]);
        assert_eq!(p.objects.ranks[0].len(), 1);
        assert!(p.objects.ranks[1..].iter().all(Vec::is_empty));
        let o = &p.objects.ranks[0][0];
        assert_eq!((o.name.as_str(), o.bytes), ("model_states-0.pt", 10240));
        assert_eq!(
            p.key(5, 4, o),
            "checkpoints/unet3d/global_epoch5_step4/model_states-0.pt"
        );
        assert_eq!(p.objects.checkpoint_size_gb, 9.5367431640625e-06);
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("model.model_size is not read"))
        );
        let none = plan("unet3d_h100", 1, 3, 24, &["workflow.checkpoint=True"]);
        assert!(none.saves.is_empty());
        assert!(none.notes[0].contains("below checkpoint.checkpoint_after_epoch 5"));
    }

    #[test]
    fn bad_schedule_values_are_refused_naming_the_key() {
        let err = |o: &str| {
            settings("unet3d_h100", &["workflow.checkpoint=True", o])
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("checkpoint.checkpoint_after_epoch=0")
                .contains("checkpoint.checkpoint_after_epoch")
        );
        assert!(err("checkpoint.epochs_between_checkpoints=-2").contains("≥ 1"));
        assert!(err("checkpoint.steps_between_checkpoints=-3").contains("-1"));
        assert!(err("checkpoint.steps_between_checkpoints=two").contains("steps_between"));
        // Step mode ignores the epoch keys, as DLIO does.
        let s = settings(
            "unet3d_h100",
            &[
                "workflow.checkpoint=True",
                "checkpoint.steps_between_checkpoints=0",
                "checkpoint.checkpoint_after_epoch=0",
            ],
        )
        .unwrap();
        assert_eq!(s.schedule, Schedule::Off);
        let mut cfg = RawConfig::load("unet3d_h100").unwrap();
        assert!(TrainCheckpointSettings::resolve(&cfg).unwrap().is_none());
        cfg.apply_override("workflow.checkpoint=True").unwrap();
        TrainCheckpointSettings::resolve(&cfg).unwrap();
        for key in crate::config::keys::TRAIN_CHECKPOINT_READ {
            assert!(cfg.keys_read().contains(*key), "{key}");
            assert!(crate::config::DLIO_KEYS.contains(key), "{key}");
        }
    }
}
