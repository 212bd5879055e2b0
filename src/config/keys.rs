//! The workload keys settings resolution reads: a leaf under `config`, which derives from it
//! which keys are used, so that the two lists cannot drift and `config` (below settings) never
//! reaches up into `settings` for them.

/// Keys `Settings::resolve` reads (besides the `storage.storage_options.*` ones below).
pub const READ: &[&str] = &[
    "model.name",
    "dataset.data_folder",
    "dataset.format",
    "dataset.compression",
    "dataset.num_files_train",
    "dataset.num_samples_per_file",
    "dataset.num_subfolders_train",
    "dataset.record_length",
    "dataset.record_length_bytes",
    "dataset.record_length_bytes_stdev",
    "dataset.record_length_stdev",
    "dataset.parquet.columns",
    "dataset.parquet.row_group_size",
    "dataset.parquet.read_mode",
    "reader.batch_size",
    "reader.read_threads",
    "reader.prefetch_size",
    "train.epochs",
    "train.computation_time",
    "train.computation_time.mean",
    "train.seed",
    "train.total_training_steps",
    "metric.au",
    "storage.storage_type",
    "storage.storage_root",
];

/// Options under `storage.storage_options` that `Settings::resolve` reads.
pub const STORAGE_OPTIONS_READ: &[&str] = &[
    "endpoint_url",
    "access_key_id",
    "secret_access_key",
    "region",
    "coalesce_rgs",
    "column_gets",
    "prefetch_workers",
    "prefetch_window",
];

/// Keys `CheckpointSettings::resolve` reads besides [`READ`]'s `model.name` and the storage
/// keys. DLIO defines them all, so for a training workload they stay "accepted and ignored";
/// a checkpoint workload (`workflow.checkpoint` true, `workflow.train` false) reads them.
pub const CHECKPOINT_READ: &[&str] = &[
    "model.type",
    "model.num_layers",
    "model.model_datatype",
    "model.optimizer_datatype",
    "model.model_size_bytes",
    "model.transformer.vocab_size",
    "model.transformer.hidden_size",
    "model.transformer.ffn_hidden_size",
    "model.transformer.num_attention_heads",
    "model.transformer.num_kv_heads",
    "model.parallelism.tensor",
    "model.parallelism.pipeline",
    "model.parallelism.data",
    "model.parallelism.zero_stage",
    "checkpoint.checkpoint_folder",
    "checkpoint.mode",
    "checkpoint.num_checkpoints_write",
    "checkpoint.num_checkpoints_read",
    "checkpoint.time_between_checkpoints",
    "checkpoint.fsync",
    "checkpoint.rank_sync",
    "checkpoint.randomize_tensor",
    "workflow.checkpoint",
    "workflow.train",
];

/// Keys a training workload that checkpoints between its steps (`workflow.checkpoint` and
/// `workflow.train` both true) reads besides [`CHECKPOINT_READ`]'s objects' keys: DLIO's
/// schedule (`checkpoint::training`). DLIO keys, so any other workload accepts and ignores them.
pub const TRAIN_CHECKPOINT_READ: &[&str] = &[
    "checkpoint.checkpoint_after_epoch",
    "checkpoint.epochs_between_checkpoints",
    "checkpoint.steps_between_checkpoints",
];

/// The flag that `key`, a bare word with no section, names: `np=4` meant `--np 4`.
pub fn flag_named(key: &str) -> Option<&'static str> {
    const FLAGS: [(&str, &str); 11] = [
        ("np", "--np"),
        ("files", "--files"),
        ("read_threads", "--read-threads"),
        ("prefetch", "--prefetch"),
        ("coalesce_rgs", "--coalesce-rgs"),
        ("computation_time", "--computation-time"),
        ("engine", "--engine"),
        ("loader", "--loader"),
        ("sharding", "--sharding"),
        ("endpoint", "--endpoint"),
        ("bucket", "--bucket"),
    ];
    let word = key.trim().replace('-', "_").to_ascii_lowercase();
    if word.contains('.') {
        return None;
    }
    FLAGS
        .iter()
        .find(|(name, _)| *name == word)
        .map(|(_, flag)| *flag)
}
