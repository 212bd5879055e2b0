//! What a sweep is asked to do, as values of its own: the command line (`cli`) converts its
//! flags into a [`SweepRequest`], and writes each point's `ringload run` command line through
//! [`PointCommandLine`]. The sweep reads nothing of the command line's types: it plans the
//! points, spawns each child with the arguments it is handed, and reads the results back.

use std::path::{Path, PathBuf};

use crate::checkpoint::IoOptions;
use crate::engine::EngineKind;
use crate::plan::{Loader, Sharding};
use crate::s3::{RetryPolicy, TargetFlags};

/// A sweep's request.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    /// `--output`: points/NAME/ per point, sweep.json, the study's files.
    pub output: PathBuf,
    /// `--json`: the study as JSON on stdout instead of markdown.
    pub json: bool,
    /// `--resume`: keep the points whose summary.json is complete, run the rest.
    pub resume: bool,
    /// `--force`: remove another sweep's files from `output` first.
    pub force: bool,
    /// `--gate`: skip a point when a smaller one of its family failed or missed.
    pub gate: bool,
    /// `--repeat`: rounds over the whole grid.
    pub repeat: u32,
    /// The grid's lists, as given (an empty one: the workload's value).
    pub grid: GridRequest,
    /// `--latency-point NP,RT`: the point whose GET latency CDF is plotted.
    pub latency_point: Option<(u32, u64)>,
    /// `--find-max-np` and its rules.
    pub find: FindMaxNpRequest,
    /// The shared embedded server's worker threads, when no endpoint is given.
    pub server_threads: Option<usize>,
    /// The shape every point shares: `--sharding`, `--memory-budget`, `--prefetch-factor`.
    pub sharding: Sharding,
    pub memory_budget_bytes: Option<u64>,
    pub prefetch_factor: Option<u32>,
    /// The target as the flags give it, the bucket flag, and the retry policy.
    pub target: TargetFlags,
    pub bucket: Option<String>,
    pub retry: RetryPolicy,
    /// `--manifest`: a whole-object dataset's keys and sizes instead of a LIST.
    pub manifest: Option<PathBuf>,
    /// `--data-dir`: the points read a mounted file system.
    pub data_dir: Option<PathBuf>,
    /// A checkpoint workload's I/O flags (`--verify` included), for each point's plan.
    pub checkpoint_io: IoOptions,
    /// `--results-dir`: with `--find-max-np`, where the answer's MLPerf leaves are gathered.
    pub results_dir: Option<PathBuf>,
    /// The secret key, for the points' environment (never their command line).
    pub secret_env: Option<(&'static str, String)>,
    /// The sweep's own command line, secrets redacted, for sweep.json.
    pub command: String,
}

/// The grid's lists.
#[derive(Debug, Clone, PartialEq)]
pub struct GridRequest {
    pub np: Vec<u32>,
    pub read_threads: Vec<u64>,
    /// Empty: the one engine choice's default.
    pub engine: Vec<EngineKind>,
    pub prefetch: Vec<u64>,
    pub coalesce_rgs: Vec<u64>,
    pub computation_time: Vec<f64>,
    pub loader: Vec<Loader>,
}

/// `sweep --find-max-np` and its rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FindMaxNpRequest {
    pub find_max_np: bool,
    /// The AU target in percent [default: the workload's].
    pub au_target: Option<f64>,
    /// Runs per NP [default: MLPerf's].
    pub runs: Option<u32>,
    /// Exit 1 when a rule line fails.
    pub strict: bool,
    /// Memory per client host, for the dataset-size rule [default: this machine's].
    pub client_memory_bytes: Option<u64>,
    /// Client hosts, for the dataset-size rule.
    pub hosts: u32,
    /// The shared embedded server's bandwidth limit, all connections together.
    pub server_bandwidth_mib_per_s: Option<f64>,
}

/// What one point's child `ringload run` is asked: its shape, its folder, and what the sweep
/// put in place of the flags every point shares.
#[derive(Debug, Clone, Copy)]
pub struct PointRun<'a> {
    pub np: u32,
    /// `None`: the workload's own (a checkpoint workload's points).
    pub read_threads: Option<u64>,
    pub prefetch: Option<u64>,
    pub coalesce_rgs: Option<u64>,
    pub computation_time: Option<f64>,
    pub loader: Loader,
    /// `uring` or `baseline`.
    pub engine: &'a str,
    /// The point's folder: its `--output`.
    pub output: &'a Path,
    /// The shared embedded server, in place of the target flags.
    pub store: Option<&'a PointStore>,
    /// In place of `--results-dir` (the search's staged leaves).
    pub results_dir: Option<&'a Path>,
}

/// The store every point reads when the sweep started the embedded server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointStore {
    /// Its endpoints, as `--endpoint` takes them.
    pub endpoint: String,
    pub bucket: String,
}

/// Writes a point's `ringload run` command line (the arguments after `run`); the secret key
/// stays out of it ([`SweepRequest::secret_env`]).
pub trait PointCommandLine {
    fn args(&self, run: &PointRun<'_>) -> Vec<String>;
}
