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
    "dataset.parquet.columns",
    "dataset.parquet.row_group_size",
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
    "prefetch_workers",
];
