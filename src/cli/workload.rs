//! The step that turns a workload name, `key=value` overrides and flags into one
//! [`RawConfig`].

use super::{ShapeArgs, WorkloadArgs};
use crate::config::{ConfigError, DEFAULT_WORKLOAD, RawConfig, Value};

/// Loads the workload and applies, in order, the `key=value` overrides and then the flags, so a
/// flag wins over an override of the same key.
pub fn load_config(
    workload: &WorkloadArgs,
    shape: Option<&ShapeArgs>,
) -> Result<RawConfig, ConfigError> {
    // `ringload plan reader.read_threads=4` names no workload: the first word is an override.
    let mut overrides: Vec<&str> = workload.overrides.iter().map(String::as_str).collect();
    let name = match workload.workload.as_deref() {
        // So is a dotted key with no value (`train.computation_time`), not a file: its
        // error names the override's form instead of an unknown workload.
        Some(w)
            if w.contains('=')
                || (w.contains('.')
                    && !w.contains('/')
                    && !w.ends_with(".yaml")
                    && !w.ends_with(".yml")
                    && !std::path::Path::new(w).exists()) =>
        {
            overrides.insert(0, w);
            DEFAULT_WORKLOAD
        }
        Some(w) => w,
        None => DEFAULT_WORKLOAD,
    };
    let mut cfg = RawConfig::load(name)?;
    for text in overrides {
        cfg.apply_override(text)?;
    }
    let int = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
    if let Some(files) = workload.files {
        cfg.apply_flag("--files", "dataset.num_files_train", int(files))?;
    }
    if let Some(shape) = shape {
        if let Some(v) = shape.read_threads {
            cfg.apply_flag("--read-threads", "reader.read_threads", int(v))?;
        }
        if let Some(v) = shape.prefetch {
            cfg.apply_flag(
                "--prefetch",
                "storage.storage_options.prefetch_workers",
                int(v),
            )?;
        }
        if let Some(v) = shape.coalesce_rgs {
            cfg.apply_flag(
                "--coalesce-rgs",
                "storage.storage_options.coalesce_rgs",
                int(v),
            )?;
        }
        if let Some(v) = shape.computation_time {
            cfg.apply_flag(
                "--computation-time",
                "train.computation_time",
                Value::Float(v),
            )?;
        }
    }
    Ok(cfg)
}
