//! Workload configuration: a DLIO workload YAML plus `key=value` overrides, parsed into one flat
//! map of dotted keys (`reader.batch_size`) to values, each with the place it came from.
//!
//! Nothing here interprets a value. `plan.rs` reads settings through the typed getters at the end
//! of this file, so every type error names its key and its origin (file and line, override or
//! flag). What this module does decide is which keys exist:
//!
//! - every key DLIO's `LoadConfig` reads is accepted (`DLIO_KEYS`); the ones ringload does not
//!   use are reported once as ignored, so a DLIO workload YAML loads unchanged;
//! - `storage.storage_options` is a free-form dictionary in DLIO, so any key under it is accepted;
//!   the ones ringload reads are in `config::keys::STORAGE_OPTIONS_READ`;
//! - any other key is an error that names the nearest valid key.
//!
//! Overrides use DLIO's dotted names, with or without Hydra's `++workload.` prefix
//! (`++workload.train.computation_time=0.05`); their values are YAML scalars (or flow
//! collections), parsed the way Hydra would.

pub mod keys;
pub mod shape;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use saphyr::{LoadableYamlNode, MarkedYamlOwned, ScalarOwned, YamlDataOwned};

use crate::exit::{self, ExitClass};
use keys::{READ, STORAGE_OPTIONS_READ};

/// The built-in workloads, embedded at build time so that `ringload plan flux_b200` works from
/// any directory. A path to a YAML file works too.
pub const BUILTIN_WORKLOADS: &[(&str, &str)] = &[
    ("flux_b200", include_str!("../../configs/flux_b200.yaml")),
    ("flux_mi355", include_str!("../../configs/flux_mi355.yaml")),
    ("flux_small", include_str!("../../configs/flux_small.yaml")),
    ("llama3_8b", include_str!("../../configs/llama3_8b.yaml")),
    ("llama3_70b", include_str!("../../configs/llama3_70b.yaml")),
    (
        "llama3_405b",
        include_str!("../../configs/llama3_405b.yaml"),
    ),
    ("llama3_1t", include_str!("../../configs/llama3_1t.yaml")),
    (
        "llama3_tiny",
        include_str!("../../configs/llama3_tiny.yaml"),
    ),
    (
        "llama3_demo",
        include_str!("../../configs/llama3_demo.yaml"),
    ),
    ("dlrm_b200", include_str!("../../configs/dlrm_b200.yaml")),
    ("dlrm_mi355", include_str!("../../configs/dlrm_mi355.yaml")),
    (
        "unet3d_b200",
        include_str!("../../configs/unet3d_b200.yaml"),
    ),
    (
        "unet3d_h100",
        include_str!("../../configs/unet3d_h100.yaml"),
    ),
    (
        "retinanet_b200",
        include_str!("../../configs/retinanet_b200.yaml"),
    ),
    (
        "retinanet_mi355",
        include_str!("../../configs/retinanet_mi355.yaml"),
    ),
    (
        "resnet50_h100",
        include_str!("../../configs/resnet50_h100.yaml"),
    ),
    (
        "cosmoflow_h100",
        include_str!("../../configs/cosmoflow_h100.yaml"),
    ),
];

/// The workload every command uses when none is named: small enough to generate in a second.
pub const DEFAULT_WORKLOAD: &str = "flux_small";

const STORAGE_OPTIONS: &str = "storage.storage_options";

/// Keys DLIO defines (its `LoadConfig`, including the Parquet generator's `dataset.parquet.*`)
/// that ringload accepts and does not use.
pub const DLIO_KEYS: &[&str] = &[
    "framework",
    "storage.storage_library",
    "storage.post_generation_settle_seconds",
    "model.type",
    "model.model_size_bytes",
    // The unet3d templates' `model.model_size` (DLIO does not read it either).
    "model.model_size",
    "model.optimization_groups",
    "model.num_layers",
    "model.layer_parameters",
    "model.model_datatype",
    "model.optimizer_datatype",
    "model.parallelism.tensor",
    "model.parallelism.pipeline",
    "model.parallelism.data",
    "model.parallelism.zero_stage",
    "model.transformer.vocab_size",
    "model.transformer.hidden_size",
    "model.transformer.ffn_hidden_size",
    "model.transformer.num_attention_heads",
    "model.transformer.num_kv_heads",
    "dataset.record_length_bytes_resize",
    "dataset.record_length_resize",
    "dataset.num_files_eval",
    "dataset.generation_buffer_size",
    "dataset.num_subfolders_eval",
    "dataset.enable_chunking",
    "dataset.chunk_size",
    "dataset.compression_level",
    "dataset.file_prefix",
    "dataset.data_gen_method",
    "dataset.keep_files",
    "dataset.record_element_bytes",
    "dataset.record_element_type",
    "dataset.record_dims",
    "dataset.parquet.partition_by",
    "dataset.parquet.generation_batch_size",
    "dataset.parquet.read_mode",
    "dataset.hdf5.chunk_dims",
    "dataset.hdf5.num_dset_per_record",
    "dataset.hdf5.max_shape",
    "reader.dont_use_mmap",
    "reader.reader_classname",
    "reader.multiprocessing_context",
    "reader.data_loader",
    "reader.data_loader_classname",
    "reader.data_loader_sampler",
    "reader.write_threads",
    "reader.computation_threads",
    "reader.batch_size_eval",
    "reader.file_shuffle",
    "reader.file_access",
    "reader.shuffle_size",
    "reader.sample_shuffle",
    "reader.read_type",
    "reader.transfer_size",
    "reader.odirect",
    "reader.preprocess_time",
    "reader.preprocess_time.mean",
    "reader.preprocess_time.stdev",
    "reader.preprocess_time_stdev",
    "reader.pin_memory",
    "reader.transformed_record_dims",
    "reader.transformed_record_element_type",
    "train.seed_change_epoch",
    "train.computation_time.stdev",
    "train.computation_time_stdev",
    "evaluation.eval_time",
    "evaluation.eval_time.mean",
    "evaluation.eval_time.stdev",
    "evaluation.eval_time_stdev",
    "evaluation.eval_after_epoch",
    "evaluation.epochs_between_evals",
    "checkpoint.checkpoint_folder",
    "checkpoint.checkpoint_after_epoch",
    "checkpoint.epochs_between_checkpoints",
    "checkpoint.steps_between_checkpoints",
    "checkpoint.type",
    "checkpoint.checkpoint_mechanism_classname",
    "checkpoint.fsync",
    "checkpoint.time_between_checkpoints",
    "checkpoint.num_checkpoints_write",
    "checkpoint.num_checkpoints_read",
    "checkpoint.recovery_rank_shift",
    "checkpoint.rank_sync",
    "checkpoint.mode",
    "checkpoint.randomize_tensor",
    "checkpoint.ksm.madv_mergeable_id",
    "checkpoint.ksm.high_ram_trigger",
    "checkpoint.ksm.low_ram_exit",
    "checkpoint.ksm.await_time",
    "output.folder",
    "output.log_file",
    "output.metric.exclude_start_steps",
    "output.metric.exclude_end_steps",
    "workflow.train",
    "workflow.generate_data",
    "workflow.evaluation",
    "workflow.checkpoint",
    "workflow.profiling",
    "profiling.profiler",
    "profiling.iostat_devices",
];

/// A configuration value, as YAML gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "'{s}'"),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Value::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A workload file (or built-in workload) and the 1-based line of the value.
    File { path: String, line: usize },
    /// A `key=value` override, as typed.
    Override(String),
    /// A command-line flag such as `--read-threads`.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{path} line {line}"),
            Origin::Override(text) => write!(f, "override '{text}'"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// One setting: its value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub value: Value,
    pub origin: Origin,
}

/// Errors in workload files and overrides. All are usage errors (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown workload '{name}': not a built-in ({builtins}) and no such file; {hint}")]
    WorkloadNotFound {
        name: String,
        builtins: String,
        hint: String,
    },
    #[error("cannot read workload file '{path}': {source}; check the path")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("workload '{path}' is not valid YAML: {message}")]
    Yaml { path: String, message: String },
    #[error(
        "workload '{path}' must be a YAML mapping of DLIO sections (model, dataset, reader, train, …)"
    )]
    NotAMapping { path: String },
    #[error("{origin}: a key must be a string, found {found}")]
    BadKey { origin: Origin, found: String },
    #[error("unknown key '{key}' ({origin}); did you mean '{suggestion}'?")]
    UnknownKey {
        key: String,
        origin: Origin,
        suggestion: String,
    },
    #[error("override '{text}' {reason}")]
    BadOverride { text: String, reason: String },
    #[error("{key} = {found} ({origin}) must be {expected}")]
    BadValue {
        key: String,
        origin: Origin,
        expected: String,
        found: String,
    },
}

impl ExitClass for ConfigError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// How ringload treats a key that is present in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyKind {
    Used,
    /// Accepted (DLIO defines it) and not used; the string is a hint, possibly empty.
    Ignored(String),
}

/// Classifies `key`, or returns the nearest valid key when neither DLIO nor ringload defines it.
fn classify(key: &str) -> Result<KeyKind, String> {
    if READ.contains(&key) {
        return Ok(KeyKind::Used);
    }
    if DLIO_KEYS.contains(&key) {
        return Ok(KeyKind::Ignored(String::new()));
    }
    if let Some(option) = key
        .strip_prefix(STORAGE_OPTIONS)
        .and_then(|rest| rest.strip_prefix('.'))
    {
        if STORAGE_OPTIONS_READ.contains(&option) {
            return Ok(KeyKind::Used);
        }
        // DLIO passes storage_options through as a dictionary, so any key is valid there;
        // point out a likely typo of one ringload reads.
        let hint = STORAGE_OPTIONS_READ
            .iter()
            .map(|known| (strsim::damerau_levenshtein(option, known), *known))
            .filter(|(distance, _)| *distance <= 2)
            .min()
            .map(|(_, known)| format!("did you mean {STORAGE_OPTIONS}.{known}?"))
            .unwrap_or_default();
        return Ok(KeyKind::Ignored(hint));
    }
    Err(nearest_key(key))
}

/// Every key a configuration may hold, for suggestions.
fn all_keys() -> impl Iterator<Item = String> {
    READ.iter()
        .chain(DLIO_KEYS)
        .map(|k| (*k).to_string())
        .chain(
            STORAGE_OPTIONS_READ
                .iter()
                .map(|o| format!("{STORAGE_OPTIONS}.{o}")),
        )
}

/// The valid key nearest to `key`: one with the same last component if there is one (the
/// section is wrong), else the smallest edit distance over the whole dotted name.
pub fn nearest_key(key: &str) -> String {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let mut best: Option<(usize, String)> = None;
    for candidate in all_keys() {
        let candidate_leaf = candidate.rsplit('.').next().unwrap_or(&candidate);
        let distance = if candidate_leaf == leaf {
            // Same setting in another section: a better guess than any spelling fix of the
            // whole name, but still ranked by how far the sections are apart.
            strsim::damerau_levenshtein(key, &candidate).min(1)
        } else {
            strsim::damerau_levenshtein(key, &candidate) + 1
        };
        if best.as_ref().is_none_or(|(d, _)| distance < *d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, k)| k).unwrap_or_default()
}

/// Where a workload came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkloadSource {
    /// The name given on the command line (or the default).
    pub name: String,
    /// `built-in` or the path of the YAML file.
    pub path: String,
}

/// A workload with overrides applied: a flat map of dotted keys to settings.
#[derive(Debug, Clone)]
pub struct RawConfig {
    pub source: WorkloadSource,
    settings: BTreeMap<String, Setting>,
    /// The settings as the workload file gave them, before any override.
    base: BTreeMap<String, Setting>,
    /// Keys read through the getters (see [`RawConfig::keys_read`]).
    read: RefCell<BTreeSet<String>>,
}

impl RawConfig {
    /// Loads a workload by built-in name or path. A name that is neither gets an error listing
    /// the built-ins and the nearest one.
    pub fn load(spec: &str) -> Result<RawConfig, ConfigError> {
        if let Some((name, text)) = BUILTIN_WORKLOADS.iter().find(|(name, _)| *name == spec) {
            let path = format!("built-in {name}");
            return Self::parse(spec, &path, text);
        }
        let path = Path::new(spec);
        let looks_like_path =
            spec.contains('/') || spec.ends_with(".yaml") || spec.ends_with(".yml");
        if !path.exists() && !looks_like_path {
            let builtins: Vec<&str> = BUILTIN_WORKLOADS.iter().map(|(n, _)| *n).collect();
            let nearest = builtins
                .iter()
                .min_by_key(|n| strsim::damerau_levenshtein(spec, n))
                .copied()
                .unwrap_or(DEFAULT_WORKLOAD);
            return Err(ConfigError::WorkloadNotFound {
                name: spec.to_string(),
                builtins: builtins.join(", "),
                hint: format!("did you mean '{nearest}', or a path to a workload YAML file?"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: spec.to_string(),
            source,
        })?;
        Self::parse(spec, spec, &text)
    }

    /// Parses workload YAML text. `path` is used in messages.
    pub fn parse(name: &str, path: &str, text: &str) -> Result<RawConfig, ConfigError> {
        let docs = MarkedYamlOwned::load_from_str(text).map_err(|e| ConfigError::Yaml {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let mut settings = BTreeMap::new();
        match docs.first() {
            None => {}
            Some(doc) => {
                let mut root = doc;
                // A Hydra package file may wrap everything in `workload:`.
                if let YamlDataOwned::Mapping(map) = &doc.data
                    && map.len() == 1
                    && let Some((k, v)) = map.iter().next()
                    && matches!(&k.data, YamlDataOwned::Value(ScalarOwned::String(s)) if s == "workload")
                {
                    root = v;
                }
                match &root.data {
                    YamlDataOwned::Mapping(_) => {}
                    YamlDataOwned::Value(ScalarOwned::Null) => {}
                    _ => {
                        return Err(ConfigError::NotAMapping {
                            path: path.to_string(),
                        });
                    }
                }
                flatten_marked(root, "", path, &mut settings)?;
            }
        }
        for (key, setting) in &settings {
            if let Err(suggestion) = classify(key) {
                return Err(ConfigError::UnknownKey {
                    key: key.clone(),
                    origin: setting.origin.clone(),
                    suggestion,
                });
            }
        }
        Ok(RawConfig {
            source: WorkloadSource {
                name: name.to_string(),
                path: path.to_string(),
            },
            base: settings.clone(),
            settings,
            read: RefCell::default(),
        })
    }

    /// Applies one `key=value` override as typed on the command line.
    pub fn apply_override(&mut self, text: &str) -> Result<(), ConfigError> {
        let bad = |reason: &str| ConfigError::BadOverride {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (raw_key, raw_value) = text
            .split_once('=')
            .ok_or_else(|| bad("is not key=value (for example reader.read_threads=4)"))?;
        if raw_key.starts_with('~') {
            return Err(bad(
                "deletes a key (Hydra's ~); ringload cannot delete keys, set a value instead",
            ));
        }
        let key = raw_key.trim().trim_start_matches('+');
        let key = key.strip_prefix("workload.").unwrap_or(key);
        if key.is_empty() {
            return Err(bad("has an empty key"));
        }
        if let Some(flag) = keys::flag_named(key) {
            return Err(bad(&format!(
                "is not a key of DLIO's configuration: '{key}' is ringload's flag {flag}; pass \
                 {flag} {}",
                raw_value.trim()
            )));
        }
        let value = parse_scalar_yaml(raw_value).map_err(|e| {
            bad(&format!(
                "has a value that is not valid YAML ({e}); quote it if it is text"
            ))
        })?;
        self.set(key, value, Origin::Override(text.to_string()))
    }

    /// Sets `key` from a command-line flag; the flag's value is already typed.
    pub fn apply_flag(
        &mut self,
        flag: &'static str,
        key: &str,
        value: Value,
    ) -> Result<(), ConfigError> {
        self.set(key, value, Origin::Flag(flag))
    }

    fn set(&mut self, key: &str, value: Value, origin: Origin) -> Result<(), ConfigError> {
        let key = normalize_section(key);
        let mut flat = BTreeMap::new();
        flatten_value(&key, value, &origin, &mut flat);
        for flat_key in flat.keys() {
            if let Err(suggestion) = classify(flat_key) {
                return Err(ConfigError::UnknownKey {
                    key: flat_key.clone(),
                    origin,
                    suggestion,
                });
            }
        }
        // A new value replaces the old one and anything nested under it or above it
        // (`train.computation_time=1` replaces `train.computation_time.mean`).
        self.settings.retain(|existing, _| {
            !(existing == &key
                || existing.starts_with(&format!("{key}."))
                || key.starts_with(&format!("{existing}.")))
        });
        self.settings.extend(flat);
        Ok(())
    }

    /// The setting at `key`, if any. `key` must be one settings resolution lists as read.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.note_read(key);
        self.settings.get(key)
    }

    /// The setting at `key` as the workload file gave it, before overrides.
    pub fn base(&self, key: &str) -> Option<&Setting> {
        self.note_read(key);
        self.base.get(key)
    }

    /// Records that `key` was read. Reading a key that `config::keys` does not list would let
    /// the accepted keys drift from the used ones: a bug, caught in debug builds.
    fn note_read(&self, key: &str) {
        debug_assert!(
            classify(key) == Ok(KeyKind::Used)
                || keys::CHECKPOINT_READ.contains(&key)
                || keys::TRAIN_CHECKPOINT_READ.contains(&key),
            "settings read '{key}', which config::keys does not list"
        );
        self.read.borrow_mut().insert(key.to_string());
    }

    /// Every key read so far (present or not), for the test that every listed key is read.
    pub fn keys_read(&self) -> BTreeSet<String> {
        self.read.borrow().clone()
    }

    /// Every setting, in key order.
    pub fn settings(&self) -> impl Iterator<Item = (&String, &Setting)> {
        self.settings.iter()
    }

    /// Keys present that ringload accepts but does not use, each with a hint (possibly empty).
    pub fn ignored_keys(&self) -> Vec<(String, String)> {
        self.settings
            .keys()
            .filter_map(|key| match classify(key) {
                Ok(KeyKind::Ignored(hint)) => Some((key.clone(), hint)),
                _ => None,
            })
            .collect()
    }

    // ---- typed getters: the only way values leave this module ----

    fn bad_value(&self, key: &str, setting: &Setting, expected: &str) -> ConfigError {
        ConfigError::BadValue {
            key: key.to_string(),
            origin: setting.origin.clone(),
            expected: expected.to_string(),
            found: setting.value.to_string(),
        }
    }

    /// An integer ≥ `min`.
    pub fn integer(&self, key: &str, min: i64) -> Result<Option<i64>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match setting.value {
            Value::Int(i) if i >= min => Ok(Some(i)),
            _ => Err(self.bad_value(key, setting, &format!("an integer ≥ {min}"))),
        }
    }

    /// A count ≥ `min` (min ≥ 0).
    pub fn count(&self, key: &str, min: u64) -> Result<Option<u64>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match setting.value {
            Value::Int(i) if i >= 0 && i as u64 >= min => Ok(Some(i as u64)),
            _ => {
                let expected = if min == 1 {
                    "a positive integer".to_string()
                } else {
                    format!("an integer ≥ {min}")
                };
                Err(self.bad_value(key, setting, &expected))
            }
        }
    }

    /// A finite number (integer or float) in `[min, max]`.
    pub fn number(&self, key: &str, min: f64, max: f64) -> Result<Option<f64>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        let x = match setting.value {
            Value::Int(i) => i as f64,
            Value::Float(x) => x,
            _ => f64::NAN,
        };
        if x.is_finite() && x >= min && x <= max {
            Ok(Some(x))
        } else {
            let expected = if max.is_infinite() {
                format!("a number ≥ {min}")
            } else {
                format!("a number from {min} to {max}")
            };
            Err(self.bad_value(key, setting, &expected))
        }
    }

    /// A boolean (YAML's true/false, True/False; DLIO's Python spellings).
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match &setting.value {
            Value::Bool(b) => Ok(Some(*b)),
            Value::Null => Ok(None),
            _ => Err(self.bad_value(key, setting, "true or false")),
        }
    }

    /// Text. Numbers and booleans are taken as their text, as YAML would write them.
    pub fn text(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match &setting.value {
            Value::Str(s) => Ok(Some(s.clone())),
            Value::Int(i) => Ok(Some(i.to_string())),
            Value::Float(x) => Ok(Some(x.to_string())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            Value::Null => Ok(None),
            _ => Err(self.bad_value(key, setting, "text")),
        }
    }

    /// A list; `None` when absent or null.
    pub fn list(&self, key: &str) -> Result<Option<(&[Value], &Origin)>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match &setting.value {
            Value::List(items) => Ok(Some((items, &setting.origin))),
            Value::Null => Ok(None),
            _ => Err(self.bad_value(key, setting, "a list")),
        }
    }
}

/// `data_reader` is DLIO's older name for the `reader` section.
fn normalize_section(key: &str) -> String {
    match key.strip_prefix("data_reader") {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => format!("reader{rest}"),
        _ => key.to_string(),
    }
}

/// Whether the value at `key` is a leaf even when it is a mapping: options under
/// `storage.storage_options` are free-form values.
fn is_opaque(key: &str) -> bool {
    key.strip_prefix(STORAGE_OPTIONS)
        .is_some_and(|rest| rest.starts_with('.') && !rest[1..].contains('.'))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn flatten_marked(
    node: &MarkedYamlOwned,
    prefix: &str,
    path: &str,
    out: &mut BTreeMap<String, Setting>,
) -> Result<(), ConfigError> {
    let origin = Origin::File {
        path: path.to_string(),
        line: node.span.start.line(),
    };
    match &node.data {
        YamlDataOwned::Mapping(map) if !is_opaque(prefix) => {
            for (k, v) in map {
                let name = match &k.data {
                    YamlDataOwned::Value(ScalarOwned::String(s)) => s.clone(),
                    YamlDataOwned::Value(ScalarOwned::Integer(i)) => i.to_string(),
                    other => {
                        return Err(ConfigError::BadKey {
                            origin: Origin::File {
                                path: path.to_string(),
                                line: k.span.start.line(),
                            },
                            found: format!("{other:?}"),
                        });
                    }
                };
                let key = normalize_section(&join(prefix, &name));
                // `model: resnet50` is DLIO's older spelling of `model: {name: resnet50}`.
                if key == "model" && !matches!(v.data, YamlDataOwned::Mapping(_)) {
                    let setting = Setting {
                        value: marked_to_value(v),
                        origin: Origin::File {
                            path: path.to_string(),
                            line: v.span.start.line(),
                        },
                    };
                    out.insert("model.name".to_string(), setting);
                    continue;
                }
                flatten_marked(v, &key, path, out)?;
            }
            Ok(())
        }
        // An empty section (`parquet:` with nothing under it) sets nothing.
        YamlDataOwned::Value(ScalarOwned::Null) if is_section(prefix) => Ok(()),
        _ => {
            out.insert(
                prefix.to_string(),
                Setting {
                    value: marked_to_value(node),
                    origin,
                },
            );
            Ok(())
        }
    }
}

/// Whether `key` names a section (a prefix of known keys) rather than a setting.
fn is_section(key: &str) -> bool {
    let dotted = format!("{key}.");
    !key.is_empty() && all_keys().any(|k| k.starts_with(&dotted)) && classify(key).is_err()
}

fn flatten_value(key: &str, value: Value, origin: &Origin, out: &mut BTreeMap<String, Setting>) {
    match value {
        Value::Map(entries) if !is_opaque(key) => {
            for (k, v) in entries {
                flatten_value(&normalize_section(&join(key, &k)), v, origin, out);
            }
        }
        value => {
            let key = if key == "model" {
                "model.name".to_string()
            } else {
                key.to_string()
            };
            out.insert(
                key,
                Setting {
                    value,
                    origin: origin.clone(),
                },
            );
        }
    }
}

fn scalar_to_value(s: &ScalarOwned) -> Value {
    match s {
        ScalarOwned::Null => Value::Null,
        ScalarOwned::Boolean(b) => Value::Bool(*b),
        ScalarOwned::Integer(i) => Value::Int(*i),
        ScalarOwned::FloatingPoint(x) => Value::Float(x.into_inner()),
        ScalarOwned::String(s) => Value::Str(s.clone()),
    }
}

fn marked_to_value(node: &MarkedYamlOwned) -> Value {
    match &node.data {
        YamlDataOwned::Value(s) => scalar_to_value(s),
        YamlDataOwned::Representation(s, _, _) => Value::Str(s.clone()),
        YamlDataOwned::Sequence(items) => Value::List(items.iter().map(marked_to_value).collect()),
        YamlDataOwned::Mapping(map) => Value::Map(
            map.iter()
                .map(|(k, v)| {
                    let key = match &k.data {
                        YamlDataOwned::Value(s) => match scalar_to_value(s) {
                            Value::Str(s) => s,
                            other => other.to_string(),
                        },
                        _ => String::new(),
                    };
                    (key, marked_to_value(v))
                })
                .collect(),
        ),
        YamlDataOwned::Tagged(_, inner) => marked_to_value(inner),
        YamlDataOwned::Alias(_) | YamlDataOwned::BadValue => Value::Null,
    }
}

/// Parses an override's value as a YAML document (a scalar, or a flow list or map).
fn parse_scalar_yaml(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    let docs = MarkedYamlOwned::load_from_str(text).map_err(|e| e.to_string())?;
    Ok(docs.first().map(marked_to_value).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RawConfig, ConfigError> {
        RawConfig::parse("t", "t.yaml", text)
    }

    #[test]
    fn builtins_parse_and_use_dlio_values() {
        // Training workloads read Parquet; the checkpoint ones (llama3_*) only checkpoint.
        for (name, _) in BUILTIN_WORKLOADS {
            let cfg = RawConfig::load(name).unwrap();
            let whole_object = [
                ("unet3d_", "npz"),
                ("retinanet_", "jpeg"),
                ("resnet50_", "tfrecord"),
                ("cosmoflow_", "tfrecord"),
            ];
            if name.starts_with("flux_") || name.starts_with("dlrm_") {
                assert_eq!(
                    cfg.text("dataset.format").unwrap().as_deref(),
                    Some("parquet")
                );
            } else if let Some((_, fmt)) = whole_object.iter().find(|(p, _)| name.starts_with(p)) {
                assert_eq!(
                    cfg.text("dataset.format").unwrap().as_deref(),
                    Some(*fmt),
                    "{name}"
                );
            } else {
                assert!(name.starts_with("llama3_"), "{name}");
                let flag = |key: &str| {
                    cfg.settings()
                        .find(|(k, _)| *k == key)
                        .unwrap()
                        .1
                        .value
                        .clone()
                };
                assert_eq!(flag("workflow.checkpoint"), Value::Bool(true), "{name}");
                assert_eq!(flag("workflow.train"), Value::Bool(false), "{name}");
            }
        }
        let b200 = RawConfig::load("flux_b200").unwrap();
        assert_eq!(b200.count("reader.batch_size", 1).unwrap(), Some(48));
        assert_eq!(
            b200.count("dataset.num_files_train", 1).unwrap(),
            Some(4296)
        );
        assert_eq!(
            b200.count("dataset.record_length", 1).unwrap(),
            Some(2_164_832)
        );
        assert_eq!(
            b200.number("train.computation_time", 0.0, f64::INFINITY)
                .unwrap(),
            Some(1.35)
        );
        assert_eq!(b200.number("metric.au", 0.0, 1.0).unwrap(), Some(0.9));
        // `generate_data: False` is a YAML 1.2 boolean, and DLIO's key for it is ignored.
        assert_eq!(
            b200.get("workflow.generate_data").unwrap().value,
            Value::Bool(false)
        );
        let ignored: Vec<String> = b200.ignored_keys().into_iter().map(|(k, _)| k).collect();
        assert!(ignored.contains(&"framework".to_string()));
        assert!(ignored.contains(&"reader.file_shuffle".to_string()));
        let mi355 = RawConfig::load("flux_mi355").unwrap();
        assert_eq!(mi355.count("reader.batch_size", 1).unwrap(), Some(72));
        assert_eq!(
            mi355
                .number("train.computation_time", 0.0, f64::INFINITY)
                .unwrap(),
            Some(2.025)
        );
    }

    #[test]
    fn origin_carries_file_line() {
        let cfg = parse("reader:\n  batch_size: 48\n  read_threads: eight\n").unwrap();
        let err = cfg.count("reader.read_threads", 1).unwrap_err().to_string();
        assert_eq!(
            err,
            "reader.read_threads = 'eight' (t.yaml line 3) must be a positive integer"
        );
    }

    #[test]
    fn unknown_keys_name_the_nearest_valid_key() {
        let table = [
            (
                "reader:\n  batchsize: 4\n",
                "reader.batchsize",
                "reader.batch_size",
            ),
            (
                "train:\n  batch_size: 4\n",
                "train.batch_size",
                "reader.batch_size",
            ),
            (
                "dataset:\n  num_file_train: 4\n",
                "dataset.num_file_train",
                "dataset.num_files_train",
            ),
            ("trian:\n  epochs: 1\n", "trian.epochs", "train.epochs"),
            ("metrics:\n  au: 0.9\n", "metrics.au", "metric.au"),
        ];
        for (yaml, key, suggestion) in table {
            match parse(yaml) {
                Err(ConfigError::UnknownKey {
                    key: k,
                    suggestion: s,
                    ..
                }) => {
                    assert_eq!((k.as_str(), s.as_str()), (key, suggestion), "{yaml}");
                }
                other => panic!("{yaml}: expected UnknownKey, got {other:?}"),
            }
        }
    }

    #[test]
    fn storage_options_are_free_form_with_typo_hints() {
        let cfg = parse(
            "storage:\n  storage_type: s3\n  storage_options:\n    coalesce_rg: 2\n    storage_library: s3dlio\n    extra: {a: 1}\n",
        )
        .unwrap();
        let ignored = cfg.ignored_keys();
        let hint = ignored
            .iter()
            .find(|(k, _)| k == "storage.storage_options.coalesce_rg")
            .map(|(_, h)| h.as_str());
        assert_eq!(
            hint,
            Some("did you mean storage.storage_options.coalesce_rgs?")
        );
        assert!(
            ignored
                .iter()
                .any(|(k, _)| k == "storage.storage_options.extra")
        );
    }

    #[test]
    fn overrides_accept_hydra_prefixes_and_yaml_values() {
        let mut cfg = RawConfig::load("flux_b200").unwrap();
        for text in [
            "++workload.train.computation_time=0.05",
            "+workload.reader.read_threads=4",
            "storage.storage_options.coalesce_rgs=1",
            "workload.storage.storage_options.prefetch_workers=2",
            "dataset.num_files_train=500",
        ] {
            cfg.apply_override(text).unwrap();
        }
        assert_eq!(
            cfg.number("train.computation_time", 0.0, f64::INFINITY)
                .unwrap(),
            Some(0.05)
        );
        assert_eq!(
            cfg.base("train.computation_time").unwrap().value,
            Value::Float(1.35)
        );
        assert_eq!(cfg.count("reader.read_threads", 1).unwrap(), Some(4));
        assert_eq!(
            cfg.count("storage.storage_options.coalesce_rgs", 1)
                .unwrap(),
            Some(1)
        );
        assert_eq!(cfg.count("dataset.num_files_train", 1).unwrap(), Some(500));
        assert!(matches!(
            cfg.get("reader.read_threads").unwrap().origin,
            Origin::Override(_)
        ));
    }

    #[test]
    fn override_replaces_nested_forms() {
        let mut cfg =
            parse("train:\n  computation_time:\n    mean: 1.0\n    stdev: 0.1\n").unwrap();
        cfg.apply_override("train.computation_time=0.5").unwrap();
        assert!(cfg.get("train.computation_time.mean").is_none());
        assert!(cfg.get("train.computation_time.stdev").is_none());
        assert_eq!(
            cfg.get("train.computation_time").unwrap().value,
            Value::Float(0.5)
        );
    }

    #[test]
    fn bad_overrides_are_usage_errors() {
        let mut cfg = RawConfig::load("flux_small").unwrap();
        let table = [
            ("reader.read_threads", "is not key=value"),
            ("~reader.read_threads=1", "deletes a key"),
            ("=4", "has an empty key"),
            ("reader.read_thread=4", "did you mean 'reader.read_threads'"),
            ("np=4", "'np' is ringload's flag --np; pass --np 4"),
            (
                "read-threads=2",
                "ringload's flag --read-threads; pass --read-threads 2",
            ),
            ("reader.read_threads=[1", "not valid YAML"),
        ];
        for (text, expected) in table {
            let err = cfg.apply_override(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        cfg.apply_override("reader.read_threads=abc").unwrap();
        let err = cfg.count("reader.read_threads", 1).unwrap_err().to_string();
        assert_eq!(
            err,
            "reader.read_threads = 'abc' (override 'reader.read_threads=abc') must be a positive integer"
        );
    }

    #[test]
    fn dlio_spellings_are_accepted() {
        let cfg =
            parse("model: resnet50\ndata_reader:\n  batch_size: 4\nworkflow:\n  train: True\n")
                .unwrap();
        assert_eq!(cfg.text("model.name").unwrap().as_deref(), Some("resnet50"));
        assert_eq!(cfg.count("reader.batch_size", 1).unwrap(), Some(4));
        let wrapped = parse("workload:\n  reader:\n    batch_size: 8\n").unwrap();
        assert_eq!(wrapped.count("reader.batch_size", 1).unwrap(), Some(8));
    }

    #[test]
    fn every_dlio_key_is_accepted() {
        for key in DLIO_KEYS.iter().chain(READ) {
            let mut cfg = parse("").unwrap();
            cfg.apply_override(&format!("{key}=1")).unwrap();
        }
    }

    #[test]
    fn unknown_workloads_name_the_builtins() {
        let err = RawConfig::load("flux_b20").unwrap_err().to_string();
        assert!(err.contains("did you mean 'flux_b200'"), "{err}");
        assert!(err.contains("flux_b200, flux_mi355, flux_small"), "{err}");
        let err = RawConfig::load("/nonexistent/x.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read workload file '/nonexistent/x.yaml'"),
            "{err}"
        );
        let err = parse("reader: [1, 2\n").unwrap_err().to_string();
        assert!(
            err.starts_with("workload 't.yaml' is not valid YAML"),
            "{err}"
        );
        let err = parse("- 1\n- 2\n").unwrap_err().to_string();
        assert!(err.contains("must be a YAML mapping"), "{err}");
    }
}
