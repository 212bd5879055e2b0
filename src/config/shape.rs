//! The run-shape flags that set workload keys, applied to a configuration: the command line's
//! (`cli/workload.rs`) and each sweep point's (`sweep/points.rs`), the same way.

use super::{ConfigError, RawConfig, Value};

/// The run-shape flags that set workload keys (`--read-threads`, …): the command line's, or a
/// sweep point's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShapeKeys {
    pub read_threads: Option<u64>,
    pub prefetch: Option<u64>,
    pub coalesce_rgs: Option<u64>,
    pub computation_time: Option<f64>,
}

impl RawConfig {
    /// Applies the run-shape flags that set workload keys (`--read-threads`,
    /// `--prefetch`, `--coalesce-rgs`, `--computation-time`), each as its flag: a flag wins
    /// over an override of the same key.
    pub fn apply_shape(&mut self, shape: &ShapeKeys) -> Result<(), ConfigError> {
        let int = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
        if let Some(v) = shape.read_threads {
            self.apply_flag("--read-threads", "reader.read_threads", int(v))?;
        }
        if let Some(v) = shape.prefetch {
            self.apply_flag(
                "--prefetch",
                "storage.storage_options.prefetch_workers",
                int(v),
            )?;
        }
        if let Some(v) = shape.coalesce_rgs {
            self.apply_flag(
                "--coalesce-rgs",
                "storage.storage_options.coalesce_rgs",
                int(v),
            )?;
        }
        if let Some(v) = shape.computation_time {
            self.apply_flag(
                "--computation-time",
                "train.computation_time",
                Value::Float(v),
            )?;
        }
        Ok(())
    }
}
