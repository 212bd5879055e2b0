//! The command line: clap definitions, and the step that turns a workload name, `key=value`
//! overrides and flags into one [`RawConfig`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod checkpoint;
mod data;
mod files;
mod maxnp;
mod mlperf;
mod s3;
mod sweep;
mod values;
mod workload;
pub use checkpoint::{CheckpointArgs, CheckpointPlanArgs};
pub use data::{ContentArgs, GenerateArgs, ServeArgs};
pub use maxnp::FindMaxNpArgs;
pub use mlperf::{DatasizeArgs, ResultsArgs};
pub use s3::S3Args;
pub use values::{
    REDACTED, parse_connections, parse_pair, parse_rate, parse_seconds, parse_size, parse_threads,
    redacted_command_line,
};
pub use workload::WorkloadArgs;

use crate::plan::{Loader, Sharding};

/// ringload: a load generator for AI-training storage.
///
/// It does what a training job's data loader does to an S3-compatible object store (NP ranks ×
/// RT read threads keeping ranged GETs of Parquet row groups in flight, a simulated compute step
/// per batch), or what its checkpoints do (DLIO's), and measures what the storage delivers.
/// Workloads are DLIO workload YAML files; flux_* and llama3_* are built in.
///
/// Exit codes: 0 done (and the AU target met), 1 run done but AU target missed, 2 usage,
/// configuration or environment error, 3 the run failed.
#[derive(Debug, Parser)]
#[command(name = "ringload", version, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Resolve a workload into a run plan without moving data: files, row-group ranges, shares,
    /// per-reader GETs, steps and the memory budget.
    ///
    /// Without --dir the file layout is computed from the schema, so the plan of a dataset that
    /// does not exist yet can be shown.
    Plan(PlanArgs),
    /// Write the workload's training dataset, in parallel on all cores, with DLIO's names
    /// and sizes: Parquet for flux_* (the Flux schema and writer settings, one row group per
    /// batch) and dlrm_* (200 scalar columns of float16/32/64 and int8, row groups of 6,144
    /// rows; PLAIN, uncompressed), npz for unet3d_*, JPEG for retinanet_*, TFRecord for resnet50_h100 and
    /// cosmoflow_h100.
    ///
    /// Checkpoint workloads (llama3_*) have no dataset: `run` writes their checkpoints.
    Generate(GenerateArgs),
    /// Serve S3 (path-style HTTP/1.1, SigV4 when keys are set) from a directory of buckets or
    /// from a virtual full-size dataset that needs no disk.
    ///
    /// Prints the endpoint URL on stdout, then serves until Ctrl-C or SIGTERM and prints its
    /// totals (requests, bytes, errors, server CPU).
    Serve(ServeArgs),
    /// Run the workload: list the dataset, read its footers once, then NP ranks × RT readers
    /// keep ranged GETs of row groups in flight, each rank computing (sleeping) per batch in
    /// lockstep; report AU, samples/s, MiB/s, I/O wait, latency, CPU and memory.
    ///
    /// With no endpoint (flag, AWS_ENDPOINT_URL[_S3] or storage.storage_options.endpoint_url)
    /// the run starts the embedded server in-process with the workload's virtual dataset.
    /// Exit 0 when the AU target (metric.au) is met, 1 when missed.
    Run(RunArgs),
    /// Run the study's grid: every combination of --np, --read-threads and --engine (and
    /// --prefetch, --coalesce-rgs, --computation-time lists), each point a `ringload run` of
    /// its own, into --output; then the study's tables.
    ///
    /// Every point is planned first; points over the memory budget are skipped, never
    /// started. With no endpoint one embedded server serves every point. Results land after
    /// each point (DIR/points/NAME/, DIR/sweep.json); Ctrl-C leaves a valid partial sweep that
    /// --resume completes. Tables: DIR/study.md, .csv, .json, and on stdout. Exit 0 when every
    /// point ran and met the AU target, 1 when one missed it or did not run, 3 when one failed,
    /// 2 for a configuration error before any point ran.
    Sweep(SweepArgs),
    /// Put results side by side, matched by (NP, RT), with ratios to the first: ringload
    /// summary.json files or --output folders, sweep folders, DLIO output folders or their
    /// summary.json. Checkpoint results (DLIO's and ringload's) are matched by (workload, NP).
    ///
    /// Exit 2 when an input cannot be read, naming what was expected.
    Compare(CompareArgs),
    /// The training dataset MLPerf Storage's rules ask for, and the commands that make it
    /// (README: MLPerf); exit 2 when --dir cannot hold it.
    Datasize(DatasizeArgs),
    /// Write an object's bytes as ringload's content generator makes them (README: the
    /// content generator), from any offset: what a check of stored data compares against,
    /// and (with --time) the generator's own CPU per GiB.
    Content(ContentArgs),
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Two or more results; the first is the one the ratios divide by
    #[arg(value_name = "RESULT", num_args = 2.., required = true)]
    pub inputs: Vec<PathBuf>,

    /// Print JSON
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    pub json: bool,

    /// Print CSV, one line per (NP, RT) and input
    #[arg(long, conflicts_with = "markdown")]
    pub csv: bool,

    /// Print a markdown table (the default)
    #[arg(long)]
    pub markdown: bool,
}

/// The shape of a run: ranks, readers, in-flight GETs. A sweep's grid varies these (its own
/// flags take lists); [`ShapeOptions`] holds the rest of the shape.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ShapeArgs {
    /// Ranks: simulated accelerators, one thread each
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Run shape"
    )]
    pub np: u32,

    /// Read threads per rank (reader.read_threads)
    #[arg(long, value_name = "N", help_heading = "Run shape")]
    pub read_threads: Option<u64>,

    /// GETs in flight per reader (storage.storage_options.prefetch_workers)
    #[arg(long, value_name = "N", help_heading = "Run shape")]
    pub prefetch: Option<u64>,

    /// Consecutive row groups per GET (storage.storage_options.coalesce_rgs)
    #[arg(long, value_name = "N", help_heading = "Run shape")]
    pub coalesce_rgs: Option<u64>,

    /// Simulated compute per step in seconds (train.computation_time)
    #[arg(long, value_name = "SECONDS", help_heading = "Run shape")]
    pub computation_time: Option<f64>,

    /// Whose loader to reproduce: ringload's, or what DLIO's PyTorch loader does to the
    /// storage (every rank walks the whole file list, prefetch-factor read-ahead, GETs past
    /// the last step, every rank reading every footer); README has each difference
    #[arg(long, value_enum, default_value_t = Loader::Ringload, help_heading = "Run shape")]
    pub loader: Loader,
}

impl ShapeArgs {
    /// The plan options these flags and `options` give, with `server_bytes` of an in-process
    /// server.
    pub fn plan_options(
        &self,
        options: &ShapeOptions,
        server_bytes: u64,
    ) -> crate::plan::PlanOptions {
        crate::plan::PlanOptions {
            np: self.np,
            sharding: options.sharding,
            memory_cap_bytes: options.memory_budget,
            server_bytes,
            checkpoint_bytes: 0,
            loader: self.loader,
            prefetch_factor: options.prefetch_factor,
            tls: false,
        }
    }

    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["--np".to_string(), self.np.to_string()];
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                args.extend([flag.to_string(), value]);
            }
        };
        push("--read-threads", self.read_threads.map(|v| v.to_string()));
        push("--prefetch", self.prefetch.map(|v| v.to_string()));
        push("--coalesce-rgs", self.coalesce_rgs.map(|v| v.to_string()));
        push(
            "--computation-time",
            self.computation_time.map(|v| v.to_string()),
        );
        push("--loader", Some(self.loader.to_string()));
        args
    }
}

/// The rest of a run's shape: what every point of a sweep shares, and what `plan` needs
/// besides [`ShapeArgs`].
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ShapeOptions {
    /// How ranks share the dataset: disjoint shares (rank), or every rank reading the same
    /// files as DLIO's PyTorch loader does (dlio); --loader dlio always shards as dlio
    #[arg(long, value_enum, default_value_t = Sharding::Rank, help_heading = "Run shape")]
    pub sharding: Sharding,

    /// A cap on the memory the run may plan for, below the machine's limits (e.g. 16GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Run shape")]
    pub memory_budget: Option<u64>,

    /// With --loader dlio: finished GETs queued per reader beyond --prefetch (the DataLoader's
    /// prefetch_factor) [default: DLIO's ⌈reader.prefetch_size ÷ read_threads⌉, 1 at RT=2]
    #[arg(long, value_name = "N", help_heading = "Run shape")]
    pub prefetch_factor: Option<u32>,
}

impl ShapeOptions {
    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["--sharding".to_string(), self.sharding.to_string()];
        if let Some(factor) = self.prefetch_factor {
            args.extend(["--prefetch-factor".to_string(), factor.to_string()]);
        }
        if let Some(bytes) = self.memory_budget {
            args.extend(["--memory-budget".to_string(), bytes.to_string()]);
        }
        args
    }
}

/// The options of a run that are not its grid: defined once, flattened into `run` and
/// `sweep`, and handed by a sweep to every point's `ringload run` through
/// [`RunArgs::to_args`].
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RunOptions {
    #[command(flatten)]
    pub shape: ShapeOptions,

    #[command(flatten)]
    pub s3: S3Args,

    #[command(flatten)]
    pub files: files::FileArgs,

    #[command(flatten)]
    pub checkpoint: CheckpointArgs,

    /// The CPUs rank threads are pinned to, round-robin, e.g. 0-3,6 [default: every CPU in
    /// this process's affinity mask]
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// Check every GET's bytes after they land, before the step loop consumes them: against
    /// the XXH3-64 of each column chunk that `generate` and the embedded server put in the
    /// footer, or, for files without them (written by pyarrow, say), by walking the chunk's
    /// page headers. A mismatch ends the run (exit 3) naming the object, range, row group and
    /// column. The summary reports the bytes verified and the CPU it cost
    #[arg(long)]
    pub verify: bool,

    /// Worker threads of the baseline engine's runtime [default: the cores this process may
    /// use]
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub engine_threads: Option<usize>,

    /// Whole-object workloads (npz, jpeg, tfrecord): read the objects' keys and sizes from
    /// FILE, one `KEY SIZE` per line (`#` comments), instead of listing the bucket; the
    /// objects are still fetched from the target
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,

    /// Seconds between the samples of timeseries.csv [default: 1]
    #[arg(long, value_name = "SECONDS", value_parser = values::parse_sample_interval)]
    pub sample_interval: Option<f64>,

    #[command(flatten)]
    pub results: ResultsArgs,
}

impl RunOptions {
    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = self.shape.to_args();
        args.extend(self.s3.to_args());
        args.extend(self.files.to_args());
        args.extend(self.checkpoint.to_args());
        if let Some(cpus) = &self.cpus {
            args.extend(["--cpus".to_string(), cpus.clone()]);
        }
        if self.verify {
            args.push("--verify".into());
        }
        if let Some(n) = self.engine_threads {
            args.extend(["--engine-threads".to_string(), n.to_string()]);
        }
        if let Some(file) = &self.manifest {
            args.extend(["--manifest".to_string(), file.display().to_string()]);
        }
        if let Some(s) = self.sample_interval {
            args.extend(["--sample-interval".to_string(), s.to_string()]);
        }
        args.extend(self.results.to_args());
        args
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    pub shape: ShapeArgs,

    #[command(flatten)]
    pub shape_options: ShapeOptions,

    #[command(flatten)]
    pub checkpoint: CheckpointPlanArgs,

    /// Read file layouts from the footers of a dataset under DIR (as `generate --output DIR`
    /// wrote it) instead of computing them
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Whole-object workloads: the objects' keys and sizes from FILE, one `KEY SIZE` per line,
    /// instead of computing them (see `run --manifest`)
    #[arg(long, value_name = "FILE", conflicts_with = "dir")]
    pub manifest: Option<PathBuf>,

    /// Print the plan as JSON
    #[arg(long)]
    pub json: bool,

    /// List every rank, reader and GET
    #[arg(long)]
    pub full: bool,
}

/// Where the object store is. Flags win over the AWS_* environment, which wins over the
/// workload's storage options.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    pub shape: ShapeArgs,

    /// The loader: uring (io_uring per pinned rank, bodies read into registered buffers),
    /// baseline (the conventional tokio + hyper design, a heap buffer per GET), or file (a
    /// mounted file system, --data-dir: O_DIRECT reads into registered buffers) [default: file
    /// with --data-dir; else uring where io_uring works here, else baseline with a note]
    #[arg(long, value_enum)]
    pub engine: Option<crate::engine::EngineKind>,

    #[command(flatten)]
    pub options: RunOptions,

    /// Write summary.json, steps.csv (rank, epoch, step, wait_ms, compute_ms, barrier_ms) and
    /// requests.csv (one row per GET: rank, epoch, reader, get, key, offset, len_bytes,
    /// attempts, first_byte_us, total_us) into DIR
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Print the summary as JSON on stdout (the report goes to stderr)
    #[arg(long)]
    pub json: bool,

    /// Worker threads of the embedded server, when no endpoint is given [default: the cores
    /// this process may use]
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub server_threads: Option<usize>,
}

impl RunArgs {
    /// The training flags given, by name (those at their default are not): what a checkpoint
    /// run refuses. `--loader` and `--sharding` count only when not the default, as a sweep
    /// writes them into every point's command line.
    pub fn training_flags_given(&self) -> Vec<&'static str> {
        let (shape, options) = (&self.shape, &self.options);
        [
            ("--files", self.workload.files.is_some()),
            ("--read-threads", shape.read_threads.is_some()),
            ("--prefetch", shape.prefetch.is_some()),
            ("--coalesce-rgs", shape.coalesce_rgs.is_some()),
            ("--computation-time", shape.computation_time.is_some()),
            ("--loader", shape.loader != Loader::Ringload),
            ("--sharding", options.shape.sharding != Sharding::Rank),
            ("--prefetch-factor", options.shape.prefetch_factor.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// The run these flags ask for, as the sessions take it (values of their own).
    pub fn request(&self) -> crate::run::request::RunRequest {
        let options = &self.options;
        crate::run::request::RunRequest {
            plan: self.shape.plan_options(&options.shape, 0),
            np_given: std::env::args().any(|a| a == "--np" || a.starts_with("--np=")),
            engine: self.engine,
            engine_threads: options.engine_threads,
            server_threads: self.server_threads,
            cpus: options.cpus.clone(),
            sample_interval: std::time::Duration::from_secs_f64(
                options.sample_interval.unwrap_or(1.0),
            ),
            verify: options.verify,
            manifest: options.manifest.clone(),
            target: options.s3.target_flags(),
            bucket: options.s3.bucket.clone(),
            retry: options.s3.retry_policy(),
            files: options.files.request(),
            checkpoint: crate::run::request::CheckpointRequest {
                io: options.checkpoint.io_options(options.verify),
                after: options.checkpoint.after.clone(),
                accelerator_memory_bytes: options.checkpoint.accelerator_memory,
                abort_foreign_uploads: options.checkpoint.abort_foreign_uploads,
            },
            output: self.output.clone(),
            results_dir: options.results.results_dir.clone(),
        }
    }

    /// These arguments as the command line of `ringload run` (without the subcommand): what
    /// a sweep starts for each point.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = self.workload.to_args();
        args.extend(self.shape.to_args());
        if let Some(engine) = self.engine {
            args.extend(["--engine".to_string(), engine.to_string()]);
        }
        args.extend(self.options.to_args());
        if let Some(dir) = &self.output {
            args.extend(["--output".to_string(), dir.display().to_string()]);
        }
        if self.json {
            args.push("--json".into());
        }
        if let Some(n) = self.server_threads {
            args.extend(["--server-threads".to_string(), n.to_string()]);
        }
        args
    }
}

/// `sweep`: its grid, and the [`RunOptions`] every point shares (their help worded for a
/// sweep).
#[derive(Debug, Args)]
#[command(
    mut_arg("sharding", |a| a.help("How ranks share the dataset, for every point")),
    mut_arg("memory_budget", |a| a.help("A cap on the memory each point may plan for (e.g. 16GiB)")),
    mut_arg("prefetch_factor", |a| {
        a.help(
            "With the dlio loader: finished GETs queued per reader beyond --prefetch \
             [default: DLIO's ⌈reader.prefetch_size ÷ read_threads⌉ at each point's RT]",
        )
    }),
    mut_arg("cpus", |a| a.help("CPUs the ranks of each point are pinned to, e.g. 0-7")),
    mut_arg("verify", |a| a.help("Check every GET's bytes in every point (see `run --verify`)")),
    mut_arg("engine_threads", |a| {
        a.help("Worker threads of the baseline engine's runtime, for every point")
    })
)]
pub struct SweepArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Ranks of the points, a comma-separated list
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1",
        help_heading = "Grid"
    )]
    pub np: Vec<u32>,

    /// Read threads per rank of the points [default: the workload's]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Grid"
    )]
    pub read_threads: Vec<u64>,

    /// Engines of the points [default: uring where io_uring works, else baseline]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        value_enum,
        help_heading = "Grid"
    )]
    pub engine: Vec<crate::engine::EngineKind>,

    /// GETs in flight per reader, a list [default: the workload's]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Grid"
    )]
    pub prefetch: Vec<u64>,

    /// Row groups per GET, a list [default: the workload's]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Grid"
    )]
    pub coalesce_rgs: Vec<u64>,

    /// Simulated compute per step in seconds, a list [default: the workload's]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_seconds, help_heading = "Grid")]
    pub computation_time: Vec<f64>,

    /// Rounds over the whole grid; tables give medians with min–max
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Grid")]
    pub repeat: u32,

    /// Skip a point when a point of the same engine and parameters with NP' ≤ NP and RT' ≤ RT
    /// failed or missed the AU target
    #[arg(long, help_heading = "Grid")]
    pub gate: bool,

    /// Continue the sweep in --output (the same grid): keep the points whose summary.json is
    /// complete, run the rest
    #[arg(long, help_heading = "Grid", conflicts_with = "force")]
    pub resume: bool,

    /// Start over in an --output that holds another sweep: its sweep.json, study files,
    /// report.html, plots/ and points/ are removed first (other files are left alone)
    #[arg(long, help_heading = "Grid")]
    pub force: bool,

    /// The sweep's folder: points/NAME/ per point, sweep.json, study.md, .csv, .json
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,

    /// Print the study as JSON on stdout instead of markdown
    #[arg(long)]
    pub json: bool,

    /// The point whose GET latency CDF is plotted, as NP,RT [default: the largest that ran]
    #[arg(long, value_name = "NP,RT", value_parser = parse_pair)]
    pub latency_point: Option<(u32, u64)>,

    /// Loader profiles of the points, a list: ringload, dlio (see `run --loader`)
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        value_enum,
        default_value = "ringload",
        help_heading = "Grid"
    )]
    pub loader: Vec<Loader>,

    #[command(flatten)]
    pub find: FindMaxNpArgs,

    #[command(flatten)]
    pub options: RunOptions,

    /// Worker threads of the shared embedded server, when no endpoint is given
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub server_threads: Option<usize>,
}

/// Loads the workload and applies, in order, the `key=value` overrides and then the flags, so a
/// flag wins over an override of the same key.
pub fn load_config(
    workload: &WorkloadArgs,
    shape: Option<&ShapeArgs>,
) -> Result<crate::config::RawConfig, crate::config::ConfigError> {
    workload::load(
        workload.workload.as_deref(),
        &workload.overrides,
        workload.files,
        shape.map(|s| crate::config::shape::ShapeKeys {
            read_threads: s.read_threads,
            prefetch: s.prefetch,
            coalesce_rgs: s.coalesce_rgs,
            computation_time: s.computation_time,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_WORKLOAD;

    /// `ringload run` parsed from `args`.
    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["ringload", "run"].iter().chain(args)).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        run
    }

    #[test]
    fn run_options_round_trip_through_their_command_line() {
        let full: &[&str] = &[
            "flux_b200",
            "train.epochs=2",
            "--files",
            "7",
            "--np",
            "3",
            "--read-threads",
            "2",
            "--prefetch",
            "5",
            "--coalesce-rgs",
            "4",
            "--computation-time",
            "0.125",
            "--loader",
            "dlio",
            "--sharding",
            "dlio",
            "--memory-budget",
            "16GiB",
            "--prefetch-factor",
            "3",
            "--engine",
            "baseline",
            "--endpoint",
            "http://a:9000,http://b:9000",
            "--profile",
            "lab",
            "--addressing",
            "virtual",
            "--resolve",
            "a:9000:10.0.0.1",
            "--resolve",
            "b:9000:10.0.0.2",
            "--ca-bundle",
            "/etc/ca.pem",
            "--insecure",
            "--bucket",
            "data",
            "--region",
            "eu-west-1",
            "--access-key",
            "AK",
            "--secret-key",
            "SK",
            "--retries",
            "9",
            "--request-timeout",
            "12.5",
            "--connect-timeout",
            "2",
            "--first-byte-timeout",
            "7",
            "--idle-timeout",
            "0.75",
            "--cpus",
            "0-3,6",
            "--verify",
            "--engine-threads",
            "5",
            "--output",
            "/tmp/out",
            "--json",
            "--server-threads",
            "6",
            "--part-size",
            "64MiB",
            "--parts-in-flight",
            "3",
            "--single-put-below",
            "1MiB",
            "--read-range",
            "16MiB",
            "--read-blocks",
            "5",
            "--checksum",
            "sha256",
            "--send-zc",
            "off",
            "--after",
            "/tmp/write-run",
            "--manifest",
            "/tmp/objects.txt",
            "--results-dir",
            "/tmp/results",
            "--system",
            "rig-1",
            "--accelerator-memory",
            "288GB",
        ];
        for given in [&[][..], &["--verify"][..], full] {
            let parsed = run_args(given);
            let args = parsed.to_args();
            let again = run_args(&args.iter().map(String::as_str).collect::<Vec<_>>());
            // The secret key never travels on a command line: in the environment instead.
            assert!(!args.iter().any(|a| a.contains("SK")), "{args:?}");
            let mut expected = parsed.clone();
            expected.options.s3.secret_key = None;
            assert_eq!(again, expected, "{given:?} → {args:?}");
        }
        let parsed = run_args(full);
        assert_eq!(
            parsed.options.s3.secret_env(),
            Some(("AWS_SECRET_ACCESS_KEY", "SK".to_string()))
        );
        let file = run_args(&["--access-key", "AK", "--secret-key-file", "/run/sk"]);
        let args = file.to_args();
        assert_eq!(
            run_args(&args.iter().map(String::as_str).collect::<Vec<_>>()),
            file
        );
        assert_eq!(file.options.s3.secret_env(), None);
        // Every flag of the full line made it through, not only the defaults.
        let parsed = run_args(full);
        assert_eq!(parsed.options.shape.memory_budget, Some(16 << 30));
        assert_eq!(parsed.options.shape.prefetch_factor, Some(3));
        // Unset, the dlio loader's factor is DLIO's formula (the plan's), not a number here.
        assert_eq!(run_args(&[]).options.shape.prefetch_factor, None);
        assert_eq!(parsed.options.s3.resolve.len(), 2);
        assert_eq!(parsed.options.checkpoint.read_blocks, Some(5));
        assert_eq!(
            parsed.options.checkpoint.send_zc,
            crate::checkpoint::SendZc::Off
        );
        assert_eq!(
            parsed.options.checkpoint.checksum,
            crate::checksum::Checksum::Sha256
        );
        assert!(parsed.options.checkpoint.after.is_some());
        assert!(parsed.options.manifest.is_some());
        assert_eq!(parsed.shape.loader, Loader::Dlio);
        assert_ne!(parsed, run_args(&[]));
    }

    /// Every flag whose value is optional (`num_args(0..=1)`) parses without its value, at the
    /// end of the line and before another flag, and with one; `--tls-self-signed` once
    /// refused to parse without DIR.
    #[test]
    fn every_optional_value_flag_parses_with_and_without_its_value() {
        use clap::CommandFactory;
        // What each subcommand needs besides the flag under test, and a flag it takes.
        let needs = |sub: &str| -> (Vec<&'static str>, &'static str) {
            match sub {
                "compare" => (vec!["a.json", "b.json"], "--json"),
                "sweep" => (vec!["--output", "out"], "--json"),
                "serve" => (vec![], "--json"),
                _ => (vec![], "--json"),
            }
        };
        let mut checked = Vec::new();
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name().to_string();
            for arg in sub.get_arguments() {
                let (Some(long), Some(range)) = (arg.get_long(), arg.get_num_args()) else {
                    continue;
                };
                if range.min_values() != 0 || !range.takes_values() {
                    continue;
                }
                let (required, other) = needs(&name);
                let flag = format!("--{long}");
                let lines = [
                    vec![flag.as_str()],
                    vec![flag.as_str(), other],
                    vec![flag.as_str(), "some-dir"],
                ];
                for line in lines {
                    let argv: Vec<&str> = ["ringload", name.as_str()]
                        .into_iter()
                        .chain(required.iter().copied())
                        .chain(line.iter().copied())
                        .collect();
                    if let Err(e) = Cli::try_parse_from(&argv) {
                        panic!("{argv:?}: {e}");
                    }
                }
                checked.push(format!("{name} {flag}"));
            }
        }
        assert!(
            checked.contains(&"serve --tls-self-signed".to_string()),
            "{checked:?}"
        );
        let serve = |args: &[&str]| {
            let cli = Cli::try_parse_from(["ringload", "serve"].iter().chain(args)).unwrap();
            let Command::Serve(serve) = cli.command else {
                panic!("not serve")
            };
            serve
        };
        // Without DIR the flag stands for an empty path (a temporary folder); with one, DIR.
        let alone = serve(&["--tls-self-signed", "--json"]);
        assert_eq!(alone.tls_self_signed, Some(PathBuf::new()));
        assert!(alone.json);
        let with_dir = serve(&["--tls-self-signed", "certs"]);
        assert_eq!(with_dir.tls_self_signed, Some(PathBuf::from("certs")));
        assert_eq!(serve(&[]).tls_self_signed, None);
    }

    #[test]
    fn flags_win_over_overrides_and_a_leading_override_is_not_a_workload() {
        let cli = Cli::try_parse_from([
            "ringload",
            "plan",
            "reader.read_threads=2",
            "train.computation_time=0.5",
            "--read-threads",
            "4",
        ])
        .unwrap();
        let Command::Plan(args) = cli.command else {
            panic!("not plan")
        };
        let cfg = load_config(&args.workload, Some(&args.shape)).unwrap();
        assert_eq!(cfg.source.name, DEFAULT_WORKLOAD);
        assert_eq!(cfg.count("reader.read_threads", 1).unwrap(), Some(4));
        assert_eq!(
            cfg.number("train.computation_time", 0.0, f64::INFINITY)
                .unwrap(),
            Some(0.5)
        );
    }
}
