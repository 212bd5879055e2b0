//! The step that turns a workload name, `key=value` overrides and flags into one
//! [`RawConfig`].

use clap::Args;

use crate::config::shape::ShapeKeys;
use crate::config::{ConfigError, DEFAULT_WORKLOAD, RawConfig, Value};

/// Loads workload `workload` (a built-in name or a YAML path; the default when `None`) and
/// applies, in order, the `key=value` overrides and then the flags, so a flag wins over an
/// override of the same key.
pub fn load(
    workload: Option<&str>,
    workload_overrides: &[String],
    files: Option<u64>,
    shape: Option<ShapeKeys>,
) -> Result<RawConfig, ConfigError> {
    // `ringload plan reader.read_threads=4` names no workload: the first word is an override.
    let mut overrides: Vec<&str> = workload_overrides.iter().map(String::as_str).collect();
    let name = match workload {
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
    if let Some(files) = files {
        cfg.apply_flag("--files", "dataset.num_files_train", int(files))?;
    }
    if let Some(shape) = shape {
        cfg.apply_shape(&shape)?;
    }
    Ok(cfg)
}

/// The workload and its overrides, common to every command.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct WorkloadArgs {
    /// A built-in workload — training: flux_b200, flux_mi355, flux_small, dlrm_b200,
    /// dlrm_mi355 (Parquet), unet3d_b200, unet3d_h100 (npz), retinanet_b200, retinanet_mi355 (JPEG), resnet50_h100,
    /// cosmoflow_h100 (TFRecord); checkpoints: llama3_8b, llama3_70b, llama3_405b, llama3_1t,
    /// llama3_demo (8 ranks, seconds; not MLPerf's), llama3_tiny — or the path of a DLIO
    /// workload YAML file [default: flux_small]
    #[arg(value_name = "WORKLOAD")]
    pub workload: Option<String>,

    /// Overrides in DLIO's dotted names, e.g. train.computation_time=0.05 or
    /// ++workload.reader.read_threads=4
    #[arg(value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,

    /// Number of training files (dataset.num_files_train)
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub files: Option<u64>,
}

impl WorkloadArgs {
    /// These arguments as a command line, for a child `ringload run`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args: Vec<String> = self.workload.iter().cloned().collect();
        args.extend(self.overrides.iter().cloned());
        if let Some(files) = self.files {
            args.push("--files".into());
            args.push(files.to_string());
        }
        args
    }
}
