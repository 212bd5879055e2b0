//! A checkpoint workload's values, validated: DLIO's `model.*`, `checkpoint.*` and `workflow.*`
//! keys (reference A1) with DLIO's defaults, read from the same [`RawConfig`] the training
//! settings use. Every key read is listed in `config::keys::CHECKPOINT_READ`.

use serde::Serialize;

use super::model::{self, ModelSpec, Parallelism, Transformer};
use crate::config::{RawConfig, WorkloadSource};
use crate::s3::target::{StorageSettings, check_bucket_name};
use crate::settings::{IgnoredKey, SettingsError, invalid, storage_settings};

/// DLIO's defaults (`utils/config.py`).
const DLIO_DEFAULT_CHECKPOINT_FOLDER: &str = "./checkpoints/";
const DLIO_DEFAULT_MODEL_SIZE_BYTES: u64 = 10240;
const DLIO_DEFAULT_MODEL_DATATYPE: &str = "fp16";
const DLIO_DEFAULT_OPTIMIZER_DATATYPE: &str = "fp32";

/// `checkpoint.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointMode {
    /// Data parallelism is the process count ÷ (tp·pp), which must divide it.
    Default,
    /// `model.parallelism.data` is given: the processes are the first ranks of a larger job
    /// (data·tp·pp ≥ processes), each writing what that job's rank would.
    Subset { data: u64 },
}

/// A checkpoint workload's values, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointSettings {
    pub workload: WorkloadSource,
    /// `model.name`.
    pub model_name: String,
    pub model: ModelSpec,
    pub model_datatype: String,
    pub optimizer_datatype: String,
    pub tensor: u64,
    pub pipeline: u64,
    pub zero_stage: u8,
    pub mode: CheckpointMode,
    /// `checkpoint.checkpoint_folder`, relative to the bucket: no leading `./` or `/`, no
    /// trailing `/` (DLIO strips it too); of `s3://bucket/prefix`, the prefix.
    pub folder: String,
    /// The bucket `checkpoint.checkpoint_folder` names as `s3://bucket/prefix` (DLIO's S3
    /// form), when it does: it must be the run's bucket ([`Self::check_bucket`]).
    pub folder_bucket: Option<String>,
    /// `checkpoint.num_checkpoints_write` (DLIO's -1 default writes none).
    pub num_checkpoints_write: u32,
    pub num_checkpoints_read: u32,
    /// `checkpoint.time_between_checkpoints`, slept before every save and every load (DLIO's
    /// negative default: none).
    pub time_between_checkpoints_s: f64,
    /// `checkpoint.fsync`: accepted, and a no-op for objects, as in DLIO.
    pub fsync: bool,
    /// `checkpoint.rank_sync`: a barrier after each save and load.
    pub rank_sync: bool,
    /// `checkpoint.randomize_tensor`: false writes zeros.
    pub randomize_tensor: bool,
    pub storage: StorageSettings,
    /// Keys the workload sets that a checkpoint run does not use.
    pub ignored_keys: Vec<IgnoredKey>,
}

impl CheckpointSettings {
    /// Reads and validates every value a checkpoint run uses from `cfg`.
    pub fn resolve(cfg: &RawConfig) -> Result<CheckpointSettings, SettingsError> {
        Self::resolve_for(cfg, false)
    }

    /// The objects' settings of a training workload that checkpoints between its steps
    /// (`workflow.checkpoint` and `workflow.train` both true; `super::training`): the same
    /// model, folder and content keys, and none of the checkpoint-only loop's
    /// (`num_checkpoints_write`/`_read`, `time_between_checkpoints`: DLIO's training path does
    /// not read them), which stay accepted and ignored.
    pub fn resolve_training(cfg: &RawConfig) -> Result<CheckpointSettings, SettingsError> {
        Self::resolve_for(cfg, true)
    }

    fn resolve_for(cfg: &RawConfig, training: bool) -> Result<CheckpointSettings, SettingsError> {
        let (model, model_datatype, optimizer_datatype) = model_spec(cfg)?;
        let (tensor, pipeline, zero_stage) = model_parallelism(cfg, &model)?;
        let mode = checkpoint_mode(cfg)?;
        let (folder, folder_bucket) = checkpoint_folder(cfg)?;
        let storage = run_bucket(cfg, storage_settings(cfg)?, folder_bucket.as_deref())?;
        let (num_checkpoints_write, num_checkpoints_read) = if training {
            (0, 0)
        } else {
            checkpoint_counts(cfg)?
        };
        let time_between_checkpoints_s = if training {
            0.0
        } else {
            cfg.number("checkpoint.time_between_checkpoints", f64::MIN, f64::MAX)?
                .unwrap_or(-1.0)
                .max(0.0)
        };
        let flag = |key: &str, default: bool| -> Result<bool, SettingsError> {
            Ok(cfg.boolean(key)?.unwrap_or(default))
        };
        let settings = CheckpointSettings {
            workload: cfg.source.clone(),
            model_name: cfg
                .text("model.name")?
                .unwrap_or_else(|| cfg.source.name.clone()),
            model,
            model_datatype,
            optimizer_datatype,
            tensor,
            pipeline,
            zero_stage,
            mode,
            folder,
            folder_bucket,
            num_checkpoints_write,
            num_checkpoints_read,
            time_between_checkpoints_s,
            fsync: flag("checkpoint.fsync", false)?,
            rank_sync: !training && flag("checkpoint.rank_sync", false)?,
            randomize_tensor: flag("checkpoint.randomize_tensor", true)?,
            storage,
            ignored_keys: Vec::new(),
        };
        // The workflow keys are what routed here (`workload::is_checkpoint`); read them so they
        // are not called ignored.
        cfg.boolean("workflow.checkpoint")?;
        cfg.boolean("workflow.train")?;
        Ok(CheckpointSettings {
            ignored_keys: ignored_keys(cfg),
            ..settings
        })
    }

    /// Refuses `--bucket` naming another bucket than `checkpoint.checkpoint_folder`'s
    /// `s3://bucket/…`, in one line naming both.
    pub fn check_bucket(&self, flag: Option<&str>) -> Result<(), String> {
        match (flag, self.folder_bucket.as_deref()) {
            (Some(flag), Some(folder)) if flag != folder => Err(format!(
                "--bucket {flag} is not the bucket checkpoint.checkpoint_folder names \
                 (s3://{folder}/{}): a run writes to one bucket; drop --bucket or make them \
                 the same",
                self.folder
            )),
            _ => Ok(()),
        }
    }

    /// The parallelism of a run of `np` processes, or the line that refuses it (DLIO's
    /// checks: default mode needs np a multiple of tp·pp; subset mode needs data·tp·pp ≥ np).
    pub fn parallelism(&self, np: u64) -> Result<Parallelism, String> {
        let mp = self.tensor * self.pipeline;
        let tp_pp = format!(
            "model.parallelism.tensor × pipeline ({} × {} = {mp})",
            self.tensor, self.pipeline
        );
        if np == 0 {
            return Err("--np 0: a checkpoint needs at least one rank; pass --np 1 or more".into());
        }
        let data = match self.mode {
            CheckpointMode::Default => {
                if !np.is_multiple_of(mp) {
                    let below = np / mp * mp;
                    let fix = if below > 0 {
                        format!("--np {below} or {}", below + mp)
                    } else {
                        format!("--np {mp}")
                    };
                    return Err(format!(
                        "--np {np} is not a multiple of {tp_pp}, as DLIO's default checkpoint \
                         mode needs: use {fix}"
                    ));
                }
                np / mp
            }
            CheckpointMode::Subset { data } => {
                if data * mp < np {
                    return Err(format!(
                        "--np {np} is more than model.parallelism.data {data} × {tp_pp} = {} \
                         ranks in checkpoint.mode=subset: lower --np to {} or raise \
                         model.parallelism.data",
                        data * mp,
                        data * mp
                    ));
                }
                data
            }
        };
        Ok(Parallelism {
            tensor: self.tensor,
            pipeline: self.pipeline,
            data,
            zero_stage: self.zero_stage,
        })
    }
}

/// `key`, a count of at least 1, or `default`.
fn positive(cfg: &RawConfig, key: &str, default: u64) -> Result<u64, SettingsError> {
    Ok(cfg.count(key, 1)?.unwrap_or(default))
}

/// `key`, a datatype's name (or `default`), and its size in bytes.
fn dtype(cfg: &RawConfig, key: &str, default: &str) -> Result<(String, u64), SettingsError> {
    let name = cfg.text(key)?.unwrap_or_else(|| default.to_string());
    let size = model::datatype_bytes(&name).ok_or_else(|| {
        invalid(
            cfg,
            key,
            "must be one of int8, uint8, fp16, bf16, fp32, fp64",
        )
    })?;
    Ok((name, size))
}

/// The `model.*` keys but the parallelism: the model, its datatype and the optimizer's.
fn model_spec(cfg: &RawConfig) -> Result<(ModelSpec, String, String), SettingsError> {
    let d = Transformer::DLIO_DEFAULT;
    let transformer = Transformer {
        vocab_size: positive(cfg, "model.transformer.vocab_size", d.vocab_size)?,
        hidden_size: positive(cfg, "model.transformer.hidden_size", d.hidden_size)?,
        ffn_hidden_size: positive(cfg, "model.transformer.ffn_hidden_size", d.ffn_hidden_size)?,
        num_attention_heads: positive(
            cfg,
            "model.transformer.num_attention_heads",
            d.num_attention_heads,
        )?,
        num_kv_heads: positive(cfg, "model.transformer.num_kv_heads", d.num_kv_heads)?,
    };
    if transformer.num_attention_heads > transformer.hidden_size {
        return Err(invalid(
            cfg,
            "model.transformer.num_attention_heads",
            format!(
                "is more than hidden_size {}: a head needs at least one column; lower it",
                transformer.hidden_size
            ),
        ));
    }
    let num_layers = cfg.integer("model.num_layers", i64::MIN)?.unwrap_or(-1);
    let (model_datatype, model_dtype_bytes) =
        dtype(cfg, "model.model_datatype", DLIO_DEFAULT_MODEL_DATATYPE)?;
    let (optimizer_datatype, optimizer_dtype_bytes) = dtype(
        cfg,
        "model.optimizer_datatype",
        DLIO_DEFAULT_OPTIMIZER_DATATYPE,
    )?;
    let model = ModelSpec {
        num_layers: num_layers.max(0) as u64,
        transformer,
        is_transformer: cfg.text("model.type")?.as_deref() == Some("transformer"),
        model_size_bytes: cfg
            .count("model.model_size_bytes", 0)?
            .unwrap_or(DLIO_DEFAULT_MODEL_SIZE_BYTES),
        model_dtype_bytes,
        optimizer_dtype_bytes,
    };
    Ok((model, model_datatype, optimizer_datatype))
}

/// `model.parallelism`'s tensor, pipeline and ZeRO stage, checked against each other and the
/// model's layers.
fn model_parallelism(cfg: &RawConfig, model: &ModelSpec) -> Result<(u64, u64, u8), SettingsError> {
    let tensor = positive(cfg, "model.parallelism.tensor", 1)?;
    let pipeline = positive(cfg, "model.parallelism.pipeline", 1)?;
    let zero_stage = match cfg.integer("model.parallelism.zero_stage", i64::MIN)? {
        None => 0,
        Some(z @ 0..=3) => z as u8,
        Some(_) => {
            return Err(invalid(
                cfg,
                "model.parallelism.zero_stage",
                "must be a ZeRO stage: 0, 1, 2 or 3",
            ));
        }
    };
    if pipeline > 1 && zero_stage == 3 {
        return Err(invalid(
            cfg,
            "model.parallelism.pipeline",
            "ZeRO stage 3 is not compatible with pipeline parallelism (as in DLIO): set \
             model.parallelism.pipeline=1 or model.parallelism.zero_stage=1",
        ));
    }
    if model.num_layers > 0 && model.num_layers < pipeline {
        return Err(invalid(
            cfg,
            "model.parallelism.pipeline",
            format!(
                "is more than model.num_layers {}: every pipeline stage needs a layer; lower it",
                model.num_layers
            ),
        ));
    }
    Ok((tensor, pipeline, zero_stage))
}

/// `checkpoint.mode`, with `model.parallelism.data` for a subset.
fn checkpoint_mode(cfg: &RawConfig) -> Result<CheckpointMode, SettingsError> {
    let data = cfg.integer("model.parallelism.data", i64::MIN)?;
    Ok(match cfg.text("checkpoint.mode")?.as_deref() {
        None | Some("default") => {
            if data.is_some_and(|d| d > 0) {
                return Err(invalid(
                    cfg,
                    "model.parallelism.data",
                    "is for checkpoint.mode=subset only (default mode derives it from the \
                     process count, as DLIO does): remove it or set checkpoint.mode=subset",
                ));
            }
            CheckpointMode::Default
        }
        Some("subset") => match data {
            Some(d) if d > 0 => CheckpointMode::Subset { data: d as u64 },
            _ => {
                return Err(invalid(
                    cfg,
                    "model.parallelism.data",
                    "checkpoint.mode=subset needs the full job's data parallelism: set \
                     model.parallelism.data (e.g. 8)",
                ));
            }
        },
        Some(_) => {
            return Err(invalid(cfg, "checkpoint.mode", "must be default or subset"));
        }
    })
}

/// `checkpoint.checkpoint_folder`, relative to the bucket and inside it, and the bucket it
/// names when it is DLIO's S3 form, `s3://bucket/prefix`: the fork's object store takes such
/// a URI's host as the bucket and its path, less the leading `/`, as the key prefix
/// (`obj_store_lib.py` `_normalize_object_key`); another scheme is refused.
fn checkpoint_folder(cfg: &RawConfig) -> Result<(String, Option<String>), SettingsError> {
    let key = "checkpoint.checkpoint_folder";
    let text = cfg
        .text(key)?
        .unwrap_or_else(|| DLIO_DEFAULT_CHECKPOINT_FOLDER.to_string());
    let (bucket, path) = match text.split_once("://") {
        None => (None, text.as_str()),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("s3") => {
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            check_bucket_name(bucket).map_err(|e| {
                invalid(
                    cfg,
                    key,
                    format!(
                        "names no bucket ringload can use: {e} (the form is s3://bucket/prefix)"
                    ),
                )
            })?;
            (Some(bucket.to_string()), path)
        }
        Some((scheme, _)) => {
            return Err(invalid(
                cfg,
                key,
                format!(
                    "is a {scheme}:// URI: ringload writes checkpoints to S3; give \
                     s3://bucket/prefix, or a prefix inside the run's bucket"
                ),
            ));
        }
    };
    let folder = path.trim_start_matches("./").trim_matches('/').to_string();
    if folder.split('/').any(|part| part == "..") {
        return Err(invalid(
            cfg,
            key,
            "must stay inside the bucket; remove the '..'",
        ));
    }
    Ok((folder, bucket))
}

/// The workload's storage keys with the run's bucket: `storage.storage_root`, else the bucket
/// `checkpoint.checkpoint_folder` names; the two naming different buckets is refused.
fn run_bucket(
    cfg: &RawConfig,
    mut storage: StorageSettings,
    folder_bucket: Option<&str>,
) -> Result<StorageSettings, SettingsError> {
    match (storage.bucket.as_deref(), folder_bucket) {
        (Some(root), Some(folder)) if root != folder => Err(invalid(
            cfg,
            "checkpoint.checkpoint_folder",
            format!(
                "names bucket '{folder}' but storage.storage_root is '{root}': a run writes to \
                 one bucket; make them the same, or give the folder as a prefix only"
            ),
        )),
        (None, Some(folder)) => {
            storage.bucket = Some(folder.to_string());
            Ok(storage)
        }
        _ => Ok(storage),
    }
}

/// `checkpoint.num_checkpoints_write` and `_read`: something to do, no more reads than writes.
fn checkpoint_counts(cfg: &RawConfig) -> Result<(u32, u32), SettingsError> {
    let times = |key: &str| -> Result<u32, SettingsError> {
        let n = cfg.integer(key, i64::MIN)?.unwrap_or(-1).max(0);
        u32::try_from(n).map_err(|_| invalid(cfg, key, "must be at most 4,294,967,295"))
    };
    let num_checkpoints_write = times("checkpoint.num_checkpoints_write")?;
    let num_checkpoints_read = times("checkpoint.num_checkpoints_read")?;
    if num_checkpoints_write > 0 && num_checkpoints_read > num_checkpoints_write {
        return Err(invalid(
            cfg,
            "checkpoint.num_checkpoints_read",
            format!(
                "is more than checkpoint.num_checkpoints_write {num_checkpoints_write}: a \
                 restore reads a checkpoint written before; lower it"
            ),
        ));
    }
    if num_checkpoints_write == 0 && num_checkpoints_read == 0 {
        return Err(invalid(
            cfg,
            "checkpoint.num_checkpoints_write",
            "a checkpoint workload with nothing to write or read: set \
             checkpoint.num_checkpoints_write (and _read), e.g. 10",
        ));
    }
    Ok((num_checkpoints_write, num_checkpoints_read))
}

/// The keys the workload sets that the checkpoint run did not read, with their hints.
fn ignored_keys(cfg: &RawConfig) -> Vec<IgnoredKey> {
    let read = cfg.keys_read();
    let hints = cfg.ignored_keys();
    cfg.settings()
        .map(|(key, _)| key)
        .filter(|key| !read.contains(*key))
        .map(|key| IgnoredKey {
            key: key.clone(),
            hint: hints
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, h)| h.clone())
                .unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(overrides: &[&str]) -> Result<CheckpointSettings, SettingsError> {
        let mut cfg = RawConfig::load("llama3_tiny").unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        CheckpointSettings::resolve(&cfg)
    }

    #[test]
    fn an_s3_folder_is_a_bucket_and_a_prefix_as_dlio_reads_it() {
        let s = resolve(&["checkpoint.checkpoint_folder=s3://ckpt-b/runs/a/"]).unwrap();
        assert_eq!(s.folder, "runs/a");
        assert_eq!(s.folder_bucket.as_deref(), Some("ckpt-b"));
        // No storage.storage_root: the folder's bucket is the run's.
        assert_eq!(s.storage.bucket.as_deref(), Some("ckpt-b"));
        assert_eq!(s.check_bucket(None), Ok(()));
        assert_eq!(s.check_bucket(Some("ckpt-b")), Ok(()));
        let err = s.check_bucket(Some("other")).unwrap_err();
        assert!(
            err.contains("--bucket other") && err.contains("s3://ckpt-b/runs/a"),
            "{err}"
        );
        // The bucket's root.
        let s = resolve(&["checkpoint.checkpoint_folder=s3://ckpt-b"]).unwrap();
        assert_eq!(
            (s.folder.as_str(), s.folder_bucket.as_deref()),
            ("", Some("ckpt-b"))
        );
        // A plain folder names no bucket.
        let s = resolve(&["checkpoint.checkpoint_folder=./ck/"]).unwrap();
        assert_eq!(
            (s.folder.as_str(), s.folder_bucket.as_deref()),
            ("ck", None)
        );
        assert_eq!(s.check_bucket(Some("any")), Ok(()));
    }

    #[test]
    fn a_folder_in_another_bucket_or_scheme_is_refused_naming_both() {
        let s = resolve(&[
            "checkpoint.checkpoint_folder=s3://ckpt-b/x",
            "storage.storage_root=ckpt-b",
        ])
        .unwrap();
        assert_eq!(s.storage.bucket.as_deref(), Some("ckpt-b"));
        let err = resolve(&[
            "checkpoint.checkpoint_folder=s3://ckpt-b/x",
            "storage.storage_root=data-b",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("'ckpt-b'") && err.contains("'data-b'"),
            "{err}"
        );
        for (folder, says) in [
            ("gs://b/x", "gs://"),
            ("s3:///x", "empty"),
            ("s3://b/../x", "'..'"),
        ] {
            let err = resolve(&[&format!("checkpoint.checkpoint_folder={folder}")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{folder}: {err}");
        }
    }
}
