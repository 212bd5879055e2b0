//! One workload, resolved once per process: the configuration (the YAML, its `key=value`
//! overrides and the flags, read by the Face) becomes a [`Workload`] that knows its kind —
//! row-group training, whole-object training or a checkpoint — and carries that kind's
//! settings and its storage type. Whether a workload is a checkpoint is asked here and nowhere
//! else ([`is_checkpoint`]); the sessions, `plan`, `serve --sink`, the sweep and `datasize` read the kind from it.

use crate::checkpoint::CheckpointSettings;
use crate::checkpoint::training::TrainCheckpointSettings;
use crate::config::RawConfig;
use crate::settings::{Settings, SettingsError, invalid};

/// What a workload does to storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Training over Parquet row groups (`dataset.format: parquet`).
    RowGroups,
    /// Training over whole objects (npz, jpeg, tfrecord).
    WholeObjects,
    /// Checkpoint writes and restores (`workflow.checkpoint: True`, `workflow.train: False`).
    Checkpoint,
}

/// Where the workload's data lives (`storage.storage_type`, DLIO's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageType {
    /// An S3-compatible object store (`s3`, and the default).
    S3,
    /// A mounted file system (`local_fs`).
    LocalFs,
    /// A parallel file system (`parallel_fs`).
    ParallelFs,
}

/// Whether a configuration is a checkpoint workload's: `workflow.checkpoint` true and
/// `workflow.train` false (DLIO's defaults: false and true). Asked here only.
pub fn is_checkpoint(config: &RawConfig) -> Result<bool, SettingsError> {
    let checkpoint = config.boolean("workflow.checkpoint")?.unwrap_or(false);
    let train = config.boolean("workflow.train")?.unwrap_or(true);
    Ok(checkpoint && !train)
}

/// The settings of a workload's kind.
#[derive(Debug, Clone)]
pub enum Settled {
    Training(Box<Settings>),
    Checkpoint(Box<CheckpointSettings>),
}

/// A workload resolved once: its configuration, its storage type and its kind's settings.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The configuration it was resolved from (written back into MLPerf's results tree).
    pub config: RawConfig,
    pub storage_type: StorageType,
    pub settled: Settled,
    /// A training workload's checkpoints between its steps (`workflow.checkpoint: True` with
    /// `workflow.train: True`), else `None`.
    pub train_checkpoint: Option<Box<TrainCheckpointSettings>>,
}

impl Workload {
    /// Resolves `config`: the kind from `workflow.checkpoint` and `workflow.train` (DLIO's
    /// keys), then that kind's settings, every key checked.
    pub fn resolve(config: RawConfig) -> Result<Workload, SettingsError> {
        let storage_type = match config.text("storage.storage_type")?.as_deref() {
            None | Some("s3") => StorageType::S3,
            Some("local_fs") => StorageType::LocalFs,
            Some("parallel_fs") => StorageType::ParallelFs,
            Some(_) => {
                return Err(invalid(
                    &config,
                    "storage.storage_type",
                    "use s3 (an S3-compatible object store), or local_fs or parallel_fs (a file \
                     system)",
                ));
            }
        };
        let mut train_checkpoint = None;
        let settled = if is_checkpoint(&config)? {
            Settled::Checkpoint(Box::new(CheckpointSettings::resolve(&config)?))
        } else {
            let mut settings = Settings::resolve(&config)?;
            train_checkpoint = TrainCheckpointSettings::resolve(&config)?.map(Box::new);
            if let Some(c) = &train_checkpoint {
                // The checkpoint's keys are read: not ignored any more.
                let read = config.keys_read();
                settings.ignored_keys.retain(|k| !read.contains(&k.key));
                if c.objects.storage.bucket != settings.storage.bucket {
                    // `checkpoint_folder` named the bucket (s3://bucket/…): the run's bucket.
                    settings.storage.bucket = c.objects.storage.bucket.clone();
                }
            }
            Settled::Training(Box::new(settings))
        };
        Ok(Workload {
            config,
            storage_type,
            settled,
            train_checkpoint,
        })
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match &self.settled {
            Settled::Checkpoint(_) => Kind::Checkpoint,
            Settled::Training(s) if s.objects.is_some() => Kind::WholeObjects,
            Settled::Training(_) => Kind::RowGroups,
        }
    }

    /// The workload's name (the YAML's, or the file it came from).
    pub fn name(&self) -> &str {
        match &self.settled {
            Settled::Training(s) => &s.workload.name,
            Settled::Checkpoint(s) => &s.workload.name,
        }
    }

    /// The workload's storage keys (`storage.*`), whatever its kind.
    pub fn storage(&self) -> &crate::s3::target::StorageSettings {
        match &self.settled {
            Settled::Training(s) => &s.storage,
            Settled::Checkpoint(s) => &s.storage,
        }
    }

    /// A training workload's settings; `None` for a checkpoint.
    pub fn training(&self) -> Option<&Settings> {
        match &self.settled {
            Settled::Training(s) => Some(s),
            Settled::Checkpoint(_) => None,
        }
    }

    /// A checkpoint workload's settings; `None` for training.
    pub fn checkpoint(&self) -> Option<&CheckpointSettings> {
        match &self.settled {
            Settled::Checkpoint(s) => Some(s),
            Settled::Training(_) => None,
        }
    }

    /// Whether the workload names a mounted file system (`storage.storage_type: local_fs`
    /// or `parallel_fs`): its keys are paths under `storage.storage_root` (DLIO's
    /// `storage_root`, `./` by default) unless `--data-dir` says where.
    pub fn on_files(&self) -> bool {
        matches!(
            self.storage_type,
            StorageType::LocalFs | StorageType::ParallelFs
        )
    }

    /// The directory a run reads and writes: `data_dir` (`--data-dir`), else, on a file
    /// system, `storage.storage_root` (`./` when unset, as DLIO); `None` for an S3 run.
    pub fn data_root(&self, data_dir: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
        match (data_dir, self.on_files()) {
            (Some(dir), _) => Some(dir.to_path_buf()),
            (None, true) => Some(
                self.storage()
                    .bucket
                    .clone()
                    .unwrap_or_else(|| "./".into())
                    .into(),
            ),
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, overrides: &[&str]) -> Result<Workload, SettingsError> {
        let mut cfg = RawConfig::load(name).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Workload::resolve(cfg)
    }

    #[test]
    fn the_kind_is_asked_once_from_dlios_keys() {
        assert_eq!(workload("flux_b200", &[]).unwrap().kind(), Kind::RowGroups);
        assert_eq!(
            workload("unet3d_b200", &[]).unwrap().kind(),
            Kind::WholeObjects
        );
        let c = workload("llama3_8b", &[]).unwrap();
        assert_eq!(c.kind(), Kind::Checkpoint);
        assert!(c.checkpoint().is_some() && c.training().is_none());
        assert_eq!(c.storage_type, StorageType::S3);
    }

    #[test]
    fn storage_types_are_named_and_a_file_system_is_on_files() {
        let fs = workload("flux_b200", &["storage.storage_type=local_fs"]).unwrap();
        assert_eq!(fs.storage_type, StorageType::LocalFs);
        assert!(fs.on_files());
        assert!(!workload("flux_b200", &[]).unwrap().on_files());
        let err = workload("flux_b200", &["storage.storage_type=nfs"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("local_fs"), "{err}");
    }
}
