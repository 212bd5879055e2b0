//! What a run is asked to do, as values of its own: the command line (`cli`) converts its
//! flags into a [`RunRequest`], and the sessions read nothing of the command line's types.

use std::path::PathBuf;
use std::time::Duration;

use crate::checkpoint::IoOptions;
use crate::engine::EngineKind;
use crate::plan::PlanOptions;
use crate::s3::{RetryPolicy, TargetFlags};

/// A run's request.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The plan's options as asked (`np` the ranks asked for; the session sets the embedded
    /// server's bytes and whether the target is TLS).
    pub plan: PlanOptions,
    /// Whether `--np` was given: under mpirun its default is the world size.
    pub np_given: bool,
    /// `--engine`; `None`: the one engine choice decides.
    pub engine: Option<EngineKind>,
    /// The baseline engine's runtime threads [default: the cores].
    pub engine_threads: Option<usize>,
    /// The embedded server's threads [default: the cores].
    pub server_threads: Option<usize>,
    /// `--cpus`: the CPUs the ranks are pinned to.
    pub cpus: Option<String>,
    /// The time series' interval.
    pub sample_interval: Duration,
    /// `--verify`: every byte read checked.
    pub verify: bool,
    /// `--manifest`: a whole-object dataset's keys and sizes instead of a LIST.
    pub manifest: Option<PathBuf>,
    /// The target as the flags give it, the bucket flag, and the retry policy.
    pub target: TargetFlags,
    pub bucket: Option<String>,
    pub retry: RetryPolicy,
    /// `--data-dir`, `--direct`, `--drop-caches`: a run on a mounted file system.
    pub files: FileRequest,
    /// A checkpoint workload's I/O flags (`verify` included), `--after` and
    /// `--accelerator-memory`.
    pub checkpoint: CheckpointRequest,
    /// `--output`: checked writable before anything runs (the caller writes it).
    pub output: Option<PathBuf>,
    /// `--results-dir`: checked writable before anything runs (the caller writes the leaf).
    pub results_dir: Option<PathBuf>,
}

/// What a checkpoint run is asked beyond the workload.
#[derive(Debug, Clone, Default)]
pub struct CheckpointRequest {
    pub io: IoOptions,
    /// `--after DIR`: the write run's `--output`, for the seconds since its end.
    pub after: Option<PathBuf>,
    /// `--accelerator-memory` (the checkpointing rules' figure), when given.
    pub accelerator_memory_bytes: Option<u64>,
    /// `--abort-foreign-uploads`: the clean-up before the clock also aborts open uploads
    /// under the checkpoint folder that ringload did not start.
    pub abort_foreign_uploads: bool,
}

/// What a run on a mounted file system is asked.
#[derive(Debug, Clone, Default)]
pub struct FileRequest {
    /// `--data-dir`: the directory the workload's keys are paths under.
    pub data_dir: Option<PathBuf>,
    /// `O_DIRECT` (`--direct on`, the default) or the page cache.
    pub direct: bool,
    /// `--drop-caches`: drop the page cache before the clock (root).
    pub drop_caches: bool,
}
