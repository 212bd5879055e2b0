//! `Settings::resolve`: the workload's values, validated — the only place configuration types
//! are read. Every key it reads is listed in [`keys`], from which `config` derives the keys
//! it accepts, so the two cannot drift: reading an unlisted key is a bug caught by a debug
//! assertion in the config getters, and a test checks that every listed key is read.
//!
//! Where a workload leaves a key out, DLIO's own default applies (the `DLIO_DEFAULT_*`
//! constants), so a DLIO workload means the same here as under DLIO.

use serde::Serialize;

use crate::config::{ConfigError, Origin, RawConfig, Value, WorkloadSource};
use crate::dataset::{self, Format, ObjectDataset};
use crate::exit::{self, ExitClass};
use crate::extents::ColumnGets;
use crate::s3::target::StorageSettings;
use crate::schema::{ColumnSpec, DatasetSpec, Dtype};

/// DLIO's defaults for keys a workload may leave out.
const DLIO_DEFAULT_DATA_FOLDER: &str = "./data/";
const DLIO_DEFAULT_NUM_FILES: u64 = 8;
const DLIO_DEFAULT_SAMPLES_PER_FILE: u64 = 1;
const DLIO_DEFAULT_RECORD_LENGTH: u64 = 64 * 1024;
const DLIO_DEFAULT_BATCH_SIZE: u64 = 1;
const DLIO_DEFAULT_READ_THREADS: u64 = 1;
const DLIO_DEFAULT_PREFETCH_SIZE: u64 = 2;
const DLIO_DEFAULT_EPOCHS: u64 = 1;
const DLIO_DEFAULT_SEED: i64 = 123;
const DLIO_DEFAULT_AU: f64 = 0.90;

/// ringload's default for `storage.storage_options.coalesce_rgs`.
pub const DEFAULT_COALESCE_RGS: u64 = 8;

/// A workload value ringload cannot use. All are configuration errors (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{key} = {value} ({origin}): {reason}")]
    Invalid {
        key: String,
        value: String,
        origin: Origin,
        reason: String,
    },
    #[error("{key} is not set: {reason}")]
    Missing { key: String, reason: String },
    #[error("{0}")]
    Unsatisfiable(String),
}

impl ExitClass for SettingsError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// A key the workload sets that ringload accepts and does not use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredKey {
    pub key: String,
    /// A hint such as "did you mean …", or empty.
    pub hint: String,
}

/// The workload's values, validated. The only product of configuration types.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub workload: WorkloadSource,
    pub model: String,
    pub dataset: DatasetSpec,
    pub compression: String,
    pub num_files: usize,
    pub samples_per_file: u64,
    /// Bytes of one sample, DLIO's `record_length`; drives the nominal MiB/s.
    pub record_bytes: u64,
    /// Top-level columns a reader fetches; `None` means all.
    pub columns_read: Option<Vec<String>>,
    /// How a GET of a column subset is sent (`storage.storage_options.column_gets`): one
    /// ranged GET per column chunk by default ([`crate::extents`]).
    pub column_gets: ColumnGets,
    pub batch_size: u64,
    pub read_threads: u32,
    pub prefetch: u32,
    /// DLIO's `reader.prefetch_size` (its default 2): what DLIO's PyTorch loader derives its
    /// DataLoader's prefetch factor from ([`crate::plan::dlio_prefetch_factor`]); only the
    /// dlio loader reads it.
    pub prefetch_size: u32,
    /// `storage.storage_options.prefetch_window` (s3dlio's default 64): objects in flight per
    /// reader with the dlio loader on a whole-object dataset, as the DLIO fork's s3dlio loader
    /// keeps them ([`crate::loader::ObjectFetch`]).
    pub prefetch_window: u32,
    pub coalesce_rgs: u32,
    pub epochs: u32,
    pub computation_time_s: f64,
    /// `train.computation_time` as the workload file gave it, before overrides.
    pub workload_computation_time_s: f64,
    pub total_training_steps: Option<u64>,
    pub au_target_percent: f64,
    pub storage: StorageSettings,
    pub ignored_keys: Vec<IgnoredKey>,
    /// A whole-object dataset (`dataset.format` npz, jpeg or tfrecord): DLIO's names and size
    /// distribution. `None` for Parquet. With it, `dataset.columns` is empty, `record_bytes` is
    /// the configured `record_length_bytes` rounded (it drives only the nominal MiB/s, as in
    /// DLIO's `train_io_mean_MB_per_second`), and `prefetch` defaults to one batch ahead
    /// ([`whole_object_prefetch`]).
    pub objects: Option<ObjectDataset>,
}

/// ringload's default `prefetch` (GETs in flight per reader) for a whole-object workload: one
/// batch ahead. The plan deals each batch's samples round-robin over the rank's readers, so a
/// step takes ⌈B ÷ RT⌉ samples of each reader, in g = ⌈⌈B ÷ RT⌉ ÷ spf⌉ GETs (whole objects of
/// spf samples); a reader holds a step's GETs until the step's compute and barrier are over, so
/// to have the next batch in flight meanwhile it needs 2g, and never fewer than DLIO's
/// `prefetch_size`. unet3d (B 7, RT 4): 4; retinanet_b200 (B 24, RT 8): 6; resnet50 (B 400, RT 8,
/// spf 1251): 2.
pub fn whole_object_prefetch(
    batch_size: u64,
    read_threads: u64,
    samples_per_file: u64,
    prefetch_size: u64,
) -> u64 {
    let per_reader = batch_size.div_ceil(read_threads.max(1));
    let gets = per_reader.div_ceil(samples_per_file.max(1));
    (2 * gets).max(prefetch_size)
}

/// The error for `key`'s value (or its absence), with `reason` naming the fix.
pub fn invalid(cfg: &RawConfig, key: &str, reason: impl Into<String>) -> SettingsError {
    match cfg.get(key) {
        Some(s) => SettingsError::Invalid {
            key: key.to_string(),
            value: s.value.to_string(),
            origin: s.origin.clone(),
            reason: reason.into(),
        },
        None => SettingsError::Missing {
            key: key.to_string(),
            reason: reason.into(),
        },
    }
}

impl Settings {
    /// Reads and validates every value ringload uses from `cfg`.
    pub fn resolve(cfg: &RawConfig) -> Result<Settings, SettingsError> {
        let object_format = dataset_format(cfg)?;
        let train_prefix = train_prefix(cfg)?;
        let scalars = Scalars::read(cfg, object_format)?;
        if let Some(format) = object_format {
            let objects = object_dataset(
                cfg,
                format,
                &train_prefix,
                scalars.num_files,
                scalars.samples_per_file,
            )?;
            let record_bytes = objects.record_length.round() as u64;
            let dataset = DatasetSpec {
                train_prefix,
                columns: Vec::new(),
                rows_per_file: scalars.samples_per_file,
                row_group_rows: scalars.samples_per_file,
                seed: scalars.seed as u64,
            };
            return finish(cfg, &scalars, dataset, record_bytes, None, Some(objects));
        }
        let (dataset, record_bytes, columns_read) = parquet_dataset(cfg, train_prefix, &scalars)?;
        let column_gets = column_gets(cfg)?;
        let mut scalars = scalars;
        // pyarrow reads a row group at a time: a GET of chunks covers one unless set.
        if columns_read.is_some()
            && column_gets != ColumnGets::Span
            && cfg.get("storage.storage_options.coalesce_rgs").is_none()
        {
            scalars.coalesce_rgs = 1;
        }
        let mut settings = finish(cfg, &scalars, dataset, record_bytes, columns_read, None)?;
        settings.column_gets = column_gets;
        Ok(settings)
    }

    /// Checks that `generate` can write this dataset: ringload writes uncompressed Parquet.
    pub fn check_generatable(&self) -> Result<(), SettingsError> {
        match self.compression.to_ascii_lowercase().as_str() {
            "none" | "null" | "" => Ok(()),
            other => Err(SettingsError::Unsatisfiable(format!(
                "dataset.compression = '{other}': ringload writes uncompressed Parquet and whole objects, as the Flux dataset and DLIO's defaults are; set dataset.compression=none"
            ))),
        }
    }
}

/// `dataset.format`: `None` for Parquet, else the whole objects' format.
fn dataset_format(cfg: &RawConfig) -> Result<Option<Format>, SettingsError> {
    let format = cfg.text("dataset.format")?;
    Ok(match format.as_deref() {
        Some("parquet") => None,
        None => {
            return Err(invalid(
                cfg,
                "dataset.format",
                "ringload reads Parquet row groups; set dataset.format=parquet",
            ));
        }
        Some(name) => Some(Format::parse(name).ok_or_else(|| {
            invalid(
                cfg,
                "dataset.format",
                "ringload reads Parquet row groups (parquet) or whole objects (npz, jpeg, \
                 tfrecord); set dataset.format to one of them",
            )
        })?),
    })
}

/// The training files' prefix, `<data_folder>/train/`, relative and without subfolders.
fn train_prefix(cfg: &RawConfig) -> Result<String, SettingsError> {
    if cfg.count("dataset.num_subfolders_train", 0)?.unwrap_or(0) > 0 {
        return Err(invalid(
            cfg,
            "dataset.num_subfolders_train",
            "ringload reads files directly under <data_folder>/train/; set it to 0",
        ));
    }
    let folder = cfg
        .text("dataset.data_folder")?
        .unwrap_or_else(|| DLIO_DEFAULT_DATA_FOLDER.to_string());
    // Always relative: to --dir, to generate's --out, to the bucket.
    let folder = folder.trim_start_matches("./").trim_matches('/');
    if folder.split('/').any(|part| part == "..") {
        return Err(invalid(
            cfg,
            "dataset.data_folder",
            "must stay inside the dataset root; remove the '..'",
        ));
    }
    Ok(if folder.is_empty() {
        "train/".to_string()
    } else {
        format!("{folder}/train/")
    })
}

/// The counts and times [`Settings::resolve`] reads before the dataset, not yet checked for size.
struct Scalars {
    num_files: u64,
    samples_per_file: u64,
    batch_size: u64,
    read_threads: u64,
    prefetch_size: u64,
    prefetch: u64,
    coalesce_rgs: u64,
    epochs: u64,
    computation_time_s: f64,
    workload_computation_time_s: f64,
    total_training_steps: Option<u64>,
    au: f64,
    seed: i64,
}

impl Scalars {
    /// Reads the dataset's, the reader's and the training's counts and times from `cfg`.
    fn read(cfg: &RawConfig, object_format: Option<Format>) -> Result<Scalars, SettingsError> {
        let num_files = cfg
            .count("dataset.num_files_train", 1)?
            .unwrap_or(DLIO_DEFAULT_NUM_FILES);
        let samples_per_file = cfg
            .count("dataset.num_samples_per_file", 1)?
            .unwrap_or(DLIO_DEFAULT_SAMPLES_PER_FILE);
        let batch_size = cfg
            .count("reader.batch_size", 1)?
            .unwrap_or(DLIO_DEFAULT_BATCH_SIZE);
        if cfg
            .get("reader.read_threads")
            .is_some_and(|s| s.value == Value::Int(0))
        {
            return Err(invalid(
                cfg,
                "reader.read_threads",
                "DLIO's 0 loads in the main process; ringload needs at least one reader, set it to 1 or more",
            ));
        }
        let read_threads = cfg
            .count("reader.read_threads", 1)?
            .unwrap_or(DLIO_DEFAULT_READ_THREADS);
        let prefetch_size = cfg
            .count("reader.prefetch_size", 1)?
            .unwrap_or(DLIO_DEFAULT_PREFETCH_SIZE);
        let prefetch = cfg
            .count("storage.storage_options.prefetch_workers", 1)?
            .unwrap_or(match object_format {
                None => prefetch_size,
                Some(_) => {
                    whole_object_prefetch(batch_size, read_threads, samples_per_file, prefetch_size)
                }
            });
        let coalesce_rgs = cfg
            .count("storage.storage_options.coalesce_rgs", 1)?
            .unwrap_or(DEFAULT_COALESCE_RGS);
        let epochs = cfg.count("train.epochs", 1)?.unwrap_or(DLIO_DEFAULT_EPOCHS);
        // DLIO takes `computation_time: 1.35` or `computation_time: {mean: 1.35, stdev: …}`.
        let computation_time_s = cfg
            .number("train.computation_time", 0.0, f64::INFINITY)?
            .or(cfg.number("train.computation_time.mean", 0.0, f64::INFINITY)?)
            .unwrap_or(0.0);
        let workload_computation_time_s = match cfg
            .base("train.computation_time")
            .or_else(|| cfg.base("train.computation_time.mean"))
        {
            Some(setting) => match setting.value {
                Value::Int(i) => i as f64,
                Value::Float(x) => x,
                _ => computation_time_s,
            },
            None => 0.0,
        };
        let total_training_steps = cfg
            .integer("train.total_training_steps", i64::MIN)?
            .filter(|&s| s > 0)
            .map(|s| s as u64);
        let au = cfg
            .number("metric.au", 0.0, 1.0)?
            .unwrap_or(DLIO_DEFAULT_AU);
        if au <= 0.0 {
            return Err(invalid(
                cfg,
                "metric.au",
                "must be a fraction above 0, e.g. 0.90",
            ));
        }
        let seed = cfg
            .integer("train.seed", i64::MIN)?
            .unwrap_or(DLIO_DEFAULT_SEED);
        Ok(Scalars {
            num_files,
            samples_per_file,
            batch_size,
            read_threads,
            prefetch_size,
            prefetch,
            coalesce_rgs,
            epochs,
            computation_time_s,
            workload_computation_time_s,
            total_training_steps,
            au,
            seed,
        })
    }
}

/// `v` as a `u32`, refused above `max` with `key` named.
fn small(cfg: &RawConfig, key: &str, v: u64, max: u64) -> Result<u32, SettingsError> {
    if v > max {
        Err(invalid(cfg, key, format!("must be at most {max}")))
    } else {
        Ok(v as u32)
    }
}

/// The settings from `scalars` and the dataset, with the storage, the model and the ignored keys.
fn finish(
    cfg: &RawConfig,
    scalars: &Scalars,
    dataset: DatasetSpec,
    record_bytes: u64,
    columns_read: Option<Vec<String>>,
    objects: Option<ObjectDataset>,
) -> Result<Settings, SettingsError> {
    let storage = storage_settings(cfg)?;
    Ok(Settings {
        workload: cfg.source.clone(),
        model: cfg
            .text("model.name")?
            .unwrap_or_else(|| cfg.source.name.clone()),
        dataset,
        compression: cfg
            .text("dataset.compression")?
            .unwrap_or_else(|| "none".to_string()),
        num_files: small(
            cfg,
            "dataset.num_files_train",
            scalars.num_files,
            10_000_000,
        )? as usize,
        samples_per_file: scalars.samples_per_file,
        record_bytes,
        columns_read,
        column_gets: ColumnGets::default(),
        batch_size: scalars.batch_size,
        read_threads: small(cfg, "reader.read_threads", scalars.read_threads, 1024)?,
        prefetch: small(
            cfg,
            "storage.storage_options.prefetch_workers",
            scalars.prefetch,
            1024,
        )?,
        prefetch_size: small(cfg, "reader.prefetch_size", scalars.prefetch_size, 1024)?,
        prefetch_window: small(
            cfg,
            "storage.storage_options.prefetch_window",
            cfg.count("storage.storage_options.prefetch_window", 1)?
                .unwrap_or(u64::from(crate::loader::S3DLIO_PREFETCH_WINDOW)),
            1024,
        )?,
        coalesce_rgs: small(
            cfg,
            "storage.storage_options.coalesce_rgs",
            scalars.coalesce_rgs,
            1 << 20,
        )?,
        epochs: small(cfg, "train.epochs", scalars.epochs, 1 << 20)?,
        computation_time_s: scalars.computation_time_s,
        workload_computation_time_s: scalars.workload_computation_time_s,
        total_training_steps: scalars.total_training_steps,
        au_target_percent: scalars.au * 100.0,
        storage,
        ignored_keys: cfg
            .ignored_keys()
            .into_iter()
            .map(|(key, hint)| IgnoredKey { key, hint })
            .collect(),
        objects,
    })
}

/// `storage.storage_options.column_gets` (chunk, coalesced or span), and
/// `dataset.parquet.read_mode`, which must be DLIO's `row_group` when given.
fn column_gets(cfg: &RawConfig) -> Result<ColumnGets, SettingsError> {
    if let Some(mode) = cfg.text("dataset.parquet.read_mode")?
        && mode != "row_group"
    {
        return Err(invalid(
            cfg,
            "dataset.parquet.read_mode",
            format!("is '{mode}'; ringload reads Parquet by row group: set it to row_group"),
        ));
    }
    let key = "storage.storage_options.column_gets";
    match cfg.text(key)? {
        None => Ok(ColumnGets::default()),
        Some(name) => ColumnGets::parse(&name).ok_or_else(|| {
            invalid(
                cfg,
                key,
                format!("is '{name}'; use chunk (one GET per column chunk), coalesced (merged as pyarrow pre-buffers) or span (one GET per row group)"),
            )
        }),
    }
}

/// The Parquet dataset: its columns, the bytes of a sample, the columns read (`None`: all).
fn parquet_dataset(
    cfg: &RawConfig,
    train_prefix: String,
    scalars: &Scalars,
) -> Result<(DatasetSpec, u64, Option<Vec<String>>), SettingsError> {
    let record_length = match (
        cfg.count("dataset.record_length_bytes", 1)?,
        cfg.count("dataset.record_length", 1)?,
    ) {
        (Some(a), Some(b)) if a != b => {
            return Err(invalid(
                cfg,
                "dataset.record_length",
                format!("disagrees with dataset.record_length_bytes = {a}; keep one"),
            ));
        }
        (a, b) => a.or(b),
    };
    let columns = match parse_columns(cfg)? {
        Some(columns) => columns,
        // DLIO's Parquet generator without a column list: one `data` column of
        // record_length bytes.
        None => vec![ColumnSpec {
            name: "data".to_string(),
            dtype: Dtype::Uint8,
            size: record_length.unwrap_or(DLIO_DEFAULT_RECORD_LENGTH),
            read: true,
        }],
    };
    let schema_bytes: u64 = columns.iter().map(ColumnSpec::row_bytes).sum();
    let record_bytes = match record_length {
        Some(r) if r != schema_bytes => {
            let key = if cfg.get("dataset.record_length_bytes").is_some() {
                "dataset.record_length_bytes"
            } else {
                "dataset.record_length"
            };
            return Err(invalid(
                cfg,
                key,
                format!(
                    "disagrees with dataset.parquet.columns, which make {schema_bytes} bytes per sample; fix one"
                ),
            ));
        }
        _ => schema_bytes,
    };
    let columns_read = if columns.iter().all(|c| c.read) {
        None
    } else {
        Some(
            columns
                .iter()
                .filter(|c| c.read)
                .map(|c| c.name.clone())
                .collect(),
        )
    };
    if columns_read.as_ref().is_some_and(Vec::is_empty) {
        return Err(invalid(
            cfg,
            "dataset.parquet.columns",
            "every column has read: false; a reader must fetch at least one",
        ));
    }
    let row_group_rows = cfg
        .count("dataset.parquet.row_group_size", 1)?
        .unwrap_or(scalars.batch_size);
    let dataset = DatasetSpec {
        train_prefix,
        columns,
        rows_per_file: scalars.samples_per_file,
        row_group_rows,
        seed: scalars.seed as u64,
    };
    Ok((dataset, record_bytes, columns_read))
}

/// The whole-object dataset of a workload whose `dataset.format` is `format`: DLIO's
/// `record_length_bytes` (or `record_length`; fractional, as resnet50's 114,660.07) and its
/// `_stdev`, with DLIO's generation seed. `record_length_bytes_resize` (the tensor the
/// framework resizes to after reading) and the reader's shuffle keys do not change what is
/// read from the store: they are accepted and named among the ignored keys.
fn object_dataset(
    cfg: &RawConfig,
    format: Format,
    train_prefix: &str,
    num_files: u64,
    samples_per_file: u64,
) -> Result<ObjectDataset, SettingsError> {
    let positive = |key: &str| cfg.number(key, 0.0, f64::INFINITY);
    let either = |bytes_key: &str, key: &str| -> Result<Option<f64>, SettingsError> {
        match (positive(bytes_key)?, positive(key)?) {
            (Some(a), Some(b)) if a != b => Err(invalid(
                cfg,
                key,
                format!("disagrees with {bytes_key} = {a}; keep one"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    };
    let record_length = either("dataset.record_length_bytes", "dataset.record_length")?
        .unwrap_or(DLIO_DEFAULT_RECORD_LENGTH as f64);
    if record_length < 1.0 {
        let key = if cfg.get("dataset.record_length").is_some() {
            "dataset.record_length"
        } else {
            "dataset.record_length_bytes"
        };
        return Err(invalid(
            cfg,
            key,
            "a sample needs at least 1 byte; set the sample's size in bytes",
        ));
    }
    let record_length_stdev = either(
        "dataset.record_length_bytes_stdev",
        "dataset.record_length_stdev",
    )?
    .unwrap_or(0.0);
    if cfg.list("dataset.parquet.columns")?.is_some() {
        return Err(invalid(
            cfg,
            "dataset.parquet.columns",
            format!(
                "describes Parquet columns, and dataset.format is {format}; remove the column list"
            ),
        ));
    }
    Ok(ObjectDataset {
        format,
        train_prefix: train_prefix.to_string(),
        num_files,
        samples_per_file,
        record_length,
        record_length_stdev,
        seed: dataset::DLIO_GENERATION_SEED,
        randomize: true,
        content: crate::content::Shape::default(),
    })
}

/// The workload's storage keys (`storage.storage_type`, `storage_root` and the options the
/// target reads): shared by training and checkpoint settings.
pub fn storage_settings(cfg: &RawConfig) -> Result<StorageSettings, SettingsError> {
    let static_keys = match (
        cfg.text("storage.storage_options.access_key_id")?,
        cfg.text("storage.storage_options.secret_access_key")?,
    ) {
        (Some(a), Some(s)) => Some((a, s)),
        (None, None) => None,
        _ => {
            return Err(invalid(
                cfg,
                "storage.storage_options.secret_access_key",
                "access_key_id and secret_access_key go together: set both or neither",
            ));
        }
    };
    Ok(StorageSettings {
        storage_type: cfg.text("storage.storage_type")?,
        bucket: cfg.text("storage.storage_root")?,
        endpoint_url: cfg.text("storage.storage_options.endpoint_url")?,
        region: cfg.text("storage.storage_options.region")?,
        has_credentials: static_keys.is_some(),
        static_keys,
    })
}

/// Reads `dataset.parquet.columns`: DLIO's list of `{name, dtype, size, read}` (or bare names).
fn parse_columns(cfg: &RawConfig) -> Result<Option<Vec<ColumnSpec>>, SettingsError> {
    let key = "dataset.parquet.columns";
    let Some((items, _)) = cfg.list(key)? else {
        return Ok(None);
    };
    if items.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let bad = |reason: String| invalid(cfg, key, format!("column {i}: {reason}"));
        let column = match item {
            Value::Str(name) => ColumnSpec {
                name: name.clone(),
                dtype: Dtype::Float32,
                size: 1,
                read: true,
            },
            Value::Map(fields) => {
                let mut column = ColumnSpec {
                    name: String::new(),
                    dtype: Dtype::Float32,
                    size: 1,
                    read: true,
                };
                for (field, value) in fields {
                    match (field.as_str(), value) {
                        ("name", Value::Str(s)) => column.name = s.clone(),
                        ("dtype", Value::Str(s)) => {
                            column.dtype = Dtype::parse(s).ok_or_else(|| {
                                let names: Vec<&str> = Dtype::ALL.iter().map(|(_, n)| *n).collect();
                                bad(format!(
                                    "dtype '{s}' is not one ringload writes ({})",
                                    names.join(", ")
                                ))
                            })?;
                        }
                        ("size", Value::Int(n)) if *n >= 1 && *n <= i64::from(i32::MAX) => {
                            column.size = *n as u64;
                        }
                        ("read", Value::Bool(b)) => column.read = *b,
                        ("name" | "dtype" | "size" | "read", v) => {
                            return Err(bad(format!("{field} = {v} has the wrong type")));
                        }
                        (other, _) => {
                            return Err(bad(format!(
                                "unknown field '{other}'; a column has name, dtype, size, read"
                            )));
                        }
                    }
                }
                column
            }
            other => return Err(bad(format!("{other} is neither a name nor a mapping"))),
        };
        if column.name.is_empty() {
            return Err(bad("has no name".to_string()));
        }
        if columns.iter().any(|c: &ColumnSpec| c.name == column.name) {
            return Err(bad(format!("'{}' appears twice", column.name)));
        }
        columns.push(column);
    }
    Ok(Some(columns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flux_settings(overrides: &[&str]) -> Settings {
        let mut cfg = RawConfig::load("flux_b200").unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Settings::resolve(&cfg).unwrap()
    }

    #[test]
    fn the_keys_read_are_exactly_the_listed_ones() {
        // A minimal workload: every key falls back to its default, so every getter runs; and
        // the full Flux workload, so the branches taken when keys are set run too.
        let minimal = RawConfig::parse("t", "t.yaml", "dataset:\n  format: parquet\n").unwrap();
        Settings::resolve(&minimal).unwrap();
        let flux = RawConfig::load("flux_b200").unwrap();
        Settings::resolve(&flux).unwrap();
        // And the whole-object branch: a minimal npz workload and unet3d (stdev set).
        let npz = RawConfig::parse("n", "n.yaml", "dataset:\n  format: npz\n").unwrap();
        Settings::resolve(&npz).unwrap();
        let unet3d = RawConfig::load("unet3d_b200").unwrap();
        Settings::resolve(&unet3d).unwrap();
        let read: std::collections::BTreeSet<String> = minimal
            .keys_read()
            .into_iter()
            .chain(flux.keys_read())
            .chain(npz.keys_read())
            .chain(unet3d.keys_read())
            .collect();
        let listed: std::collections::BTreeSet<String> = crate::config::keys::READ
            .iter()
            .map(|k| k.to_string())
            .chain(
                crate::config::keys::STORAGE_OPTIONS_READ
                    .iter()
                    .map(|o| format!("storage.storage_options.{o}")),
            )
            .collect();
        let unlisted: Vec<_> = read.difference(&listed).collect();
        assert!(
            unlisted.is_empty(),
            "read and not in config::keys: {unlisted:?}"
        );
        let unread: Vec<_> = listed.difference(&read).collect();
        assert!(
            unread.is_empty(),
            "listed in config::keys and never read: {unread:?}"
        );
    }

    #[test]
    fn dlrm_reads_its_listed_columns_chunk_by_chunk_a_row_group_per_get() {
        let s = workload("dlrm_b200", &[]).unwrap();
        assert_eq!(s.dataset.columns.len(), 200);
        assert_eq!(s.record_bytes, 761);
        assert_eq!(s.columns_read.as_ref().map(Vec::len), Some(40));
        assert_eq!(s.dataset.row_group_rows, 6144);
        assert_eq!((s.batch_size, s.read_threads), (12288, 4));
        assert_eq!(s.column_gets, ColumnGets::Chunk);
        assert_eq!(s.coalesce_rgs, 1, "pyarrow reads a row group at a time");
        let span = workload("dlrm_mi355", &["storage.storage_options.column_gets=span"]).unwrap();
        assert_eq!(
            (span.batch_size, span.coalesce_rgs),
            (18432, DEFAULT_COALESCE_RGS as u32)
        );
        for (o, expected) in [
            ("storage.storage_options.column_gets=pages", "use chunk"),
            ("dataset.parquet.read_mode=sample", "set it to row_group"),
        ] {
            let err = workload("dlrm_b200", &[o]).unwrap_err().to_string();
            assert!(err.contains(expected), "{o}: {err}");
        }
    }

    #[test]
    fn settings_validate_what_ringload_uses() {
        let table: &[(&str, &str)] = &[
            (
                "dataset.format=hdf5",
                "dataset.format = 'hdf5' (override 'dataset.format=hdf5'): ringload reads Parquet \
                 row groups (parquet) or whole objects (npz, jpeg, tfrecord)",
            ),
            (
                "reader.read_threads=0",
                "DLIO's 0 loads in the main process",
            ),
            ("reader.batch_size=0", "must be a positive integer"),
            (
                "storage.storage_options.prefetch_workers=0",
                "must be a positive integer",
            ),
            ("metric.au=90", "must be a number from 0 to 1"),
            ("train.computation_time=-1", "must be a number ≥ 0"),
            (
                "dataset.record_length=100",
                "disagrees with dataset.parquet.columns, which make 2164832 bytes per sample",
            ),
            (
                "dataset.num_subfolders_train=2",
                "reads files directly under <data_folder>/train/",
            ),
            (
                "dataset.parquet.columns=[{name: a, dtype: bfloat16}]",
                "dtype 'bfloat16' is not one ringload writes",
            ),
            (
                "dataset.parquet.columns=[{name: a, sise: 3}]",
                "unknown field 'sise'",
            ),
            (
                "dataset.data_folder=data/../../etc",
                "must stay inside the dataset root",
            ),
            ("dataset.parquet.columns=[a, a]", "'a' appears twice"),
        ];
        for (o, expected) in table {
            let mut cfg = RawConfig::load("flux_b200").unwrap();
            cfg.apply_override(o).unwrap();
            let err = Settings::resolve(&cfg).unwrap_err().to_string();
            assert!(err.contains(expected), "{o}: {err}");
        }
    }

    #[test]
    fn a_missing_format_is_named() {
        let cfg = RawConfig::parse("t", "t.yaml", "reader:\n  batch_size: 4\n").unwrap();
        let err = Settings::resolve(&cfg).unwrap_err().to_string();
        assert_eq!(
            err,
            "dataset.format is not set: ringload reads Parquet row groups; set dataset.format=parquet"
        );
    }

    #[test]
    fn settings_follow_dlio_defaults_and_spellings() {
        let s = flux_settings(&[]);
        assert_eq!(s.prefetch, 2); // reader.prefetch_size's DLIO default
        assert_eq!(s.coalesce_rgs, 8);
        assert_eq!(s.dataset.train_prefix, "data/flux/train/");
        assert_eq!(s.record_bytes, 2_164_832);
        assert_eq!(s.dataset.row_group_rows, 48);
        assert_eq!(s.au_target_percent, 90.0);
        assert_eq!(s.workload_computation_time_s, 1.35);
        let s = flux_settings(&["train.computation_time=0.05", "reader.prefetch_size=4"]);
        assert_eq!(
            (s.computation_time_s, s.workload_computation_time_s),
            (0.05, 1.35)
        );
        assert_eq!(s.prefetch, 4);
        assert_eq!(s.prefetch_size, 4);
        // prefetch_workers sets ringload's GETs in flight, not DLIO's DataLoader queue.
        let s = flux_settings(&["storage.storage_options.prefetch_workers=6"]);
        assert_eq!((s.prefetch, s.prefetch_size), (6, 2));
        // A DLIO workload without a column list gets DLIO's single `data` column.
        let cfg = RawConfig::parse(
            "legacy",
            "legacy.yaml",
            "dataset:\n  format: parquet\n  record_length_bytes: 4096\n  num_samples_per_file: 16\n",
        )
        .unwrap();
        let s = Settings::resolve(&cfg).unwrap();
        assert_eq!(s.dataset.columns.len(), 1);
        assert_eq!(
            (s.dataset.columns[0].name.as_str(), s.record_bytes),
            ("data", 4096)
        );
        assert_eq!(s.dataset.train_prefix, "data/train/");
        // read: false narrows what readers fetch.
        let s = flux_settings(&[
            "dataset.parquet.columns=[{name: a, size: 4}, {name: b, size: 2, read: false}]",
            "dataset.record_length=24",
        ]);
        assert_eq!(s.columns_read, Some(vec!["a".to_string()]));
    }

    fn workload(name: &str, overrides: &[&str]) -> Result<Settings, SettingsError> {
        let mut cfg = RawConfig::load(name).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Settings::resolve(&cfg)
    }

    #[test]
    fn whole_object_workloads_resolve_with_the_references_values() {
        let s = workload("unet3d_b200", &[]).unwrap();
        let o = s.objects.as_ref().unwrap();
        assert_eq!(o.format, Format::Npz);
        assert_eq!(o.train_prefix, "data/unet3d/train/");
        assert_eq!((o.num_files, o.samples_per_file), (7200, 1));
        assert_eq!(
            (o.record_length, o.record_length_stdev),
            (146_600_628.0, 68_341_808.0)
        );
        assert_eq!(o.seed, dataset::DLIO_GENERATION_SEED);
        assert_eq!(s.record_bytes, 146_600_628);
        assert!(s.dataset.columns.is_empty());
        assert_eq!((s.batch_size, s.read_threads, s.epochs), (7, 4, 5));
        assert_eq!((s.computation_time_s, s.au_target_percent), (0.162, 90.0));
        // One batch ahead: 2 × ⌈7 ÷ 4⌉.
        assert_eq!((s.prefetch, s.prefetch_size), (4, 2));
        let ignored: Vec<&str> = s.ignored_keys.iter().map(|k| k.key.as_str()).collect();
        for key in [
            "dataset.record_length_bytes_resize",
            "reader.file_shuffle",
            "reader.sample_shuffle",
            "model.model_size",
        ] {
            assert!(ignored.contains(&key), "{key} not named: {ignored:?}");
        }

        let s = workload("unet3d_h100", &[]).unwrap();
        assert_eq!(s.num_files, 168);
        assert_eq!(s.computation_time_s, 0.323);

        let s = workload("retinanet_b200", &[]).unwrap();
        let o = s.objects.as_ref().unwrap();
        assert_eq!((o.format, o.num_files), (Format::Jpeg, 1_170_301));
        assert_eq!((o.record_length, o.record_length_stdev), (322_957.0, 0.0));
        assert_eq!((s.batch_size, s.read_threads, s.prefetch), (24, 8, 6));
        assert_eq!((s.computation_time_s, s.au_target_percent), (0.04755, 85.0));
        assert_eq!(s.epochs, 8);

        // The Decisions: batch 32 / 0.0634 s.
        let s = workload("retinanet_mi355", &[]).unwrap();
        assert_eq!(
            (s.batch_size, s.computation_time_s, s.prefetch),
            (32, 0.0634, 8)
        );

        let s = workload("resnet50_h100", &[]).unwrap();
        let o = s.objects.as_ref().unwrap();
        assert_eq!(
            (o.format, o.num_files, o.samples_per_file),
            (Format::Tfrecord, 1024, 1251)
        );
        assert_eq!(o.record_length, 114_660.07);
        assert_eq!(s.record_bytes, 114_660);
        assert_eq!((s.batch_size, s.read_threads, s.prefetch), (400, 8, 2));
        let ignored: Vec<&str> = s.ignored_keys.iter().map(|k| k.key.as_str()).collect();
        assert!(
            ignored.contains(&"reader.computation_threads"),
            "{ignored:?}"
        );

        let s = workload("cosmoflow_h100", &[]).unwrap();
        let o = s.objects.as_ref().unwrap();
        assert_eq!((o.num_files, o.record_length_stdev), (524_288, 71_311.0));
        assert_eq!((s.batch_size, s.read_threads, s.prefetch), (1, 4, 2));
        assert_eq!(s.au_target_percent, 70.0);
        let ignored: Vec<&str> = s.ignored_keys.iter().map(|k| k.key.as_str()).collect();
        assert!(ignored.contains(&"reader.shuffle_size"), "{ignored:?}");

        // An explicit prefetch_workers wins over the default.
        let s = workload(
            "retinanet_b200",
            &["storage.storage_options.prefetch_workers=3"],
        );
        assert_eq!(s.unwrap().prefetch, 3);
        // The Parquet workloads have none.
        assert_eq!(flux_settings(&[]).objects, None);
    }

    #[test]
    fn whole_object_settings_name_bad_values() {
        let table: &[(&str, &str)] = &[
            (
                "dataset.record_length=5",
                "dataset.record_length = 5 (override 'dataset.record_length=5'): disagrees \
                 with dataset.record_length_bytes = 146600628; keep one",
            ),
            ("dataset.record_length_bytes=-1", "must be a number ≥ 0"),
            (
                "dataset.record_length_bytes=0.5",
                "a sample needs at least 1 byte",
            ),
            (
                "dataset.parquet.columns=[a]",
                "describes Parquet columns, and dataset.format is npz",
            ),
            (
                "dataset.num_subfolders_train=2",
                "reads files directly under <data_folder>/train/",
            ),
        ];
        for (o, expected) in table {
            let err = workload("unet3d_b200", &[o]).unwrap_err().to_string();
            assert!(err.contains(expected), "{o}: {err}");
        }
    }

    #[test]
    fn the_default_prefetch_is_one_batch_ahead() {
        // (B, RT, spf, prefetch_size) → GETs per reader.
        assert_eq!(whole_object_prefetch(7, 4, 1, 2), 4);
        assert_eq!(whole_object_prefetch(24, 8, 1, 2), 6);
        assert_eq!(whole_object_prefetch(32, 8, 1, 2), 8);
        assert_eq!(whole_object_prefetch(400, 8, 1251, 2), 2);
        assert_eq!(whole_object_prefetch(1, 4, 1, 2), 2);
        assert_eq!(whole_object_prefetch(1, 4, 1, 9), 9);
    }
}
