//! The flags of the data side: `generate` (a dataset written to a folder or a bucket) and
//! `serve` (the embedded S3 server).

use std::path::PathBuf;

use clap::Args;

use super::s3::S3Args;
use super::values::{parse_connections, parse_rate, parse_size, parse_threads};
use super::workload::WorkloadArgs;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Root directory; files go to DIR/<data_folder>/train/train_NNNN.parquet (to serve them
    /// with `serve --dir`, write into a bucket's folder: --output DIR/ringload)
    #[arg(long = "output", alias = "out", value_name = "DIR", conflicts_with_all = ["endpoint", "bucket"])]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub s3: S3Args,

    /// With --endpoint: hash each upload part into its signature instead of sending
    /// UNSIGNED-PAYLOAD
    #[arg(long)]
    pub signed_payload: bool,

    /// Files written at once, one thread each [default: the cores this process may use]
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,

    #[command(flatten)]
    pub content: ReductionArgs,

    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,

    /// Also record the generation where MLPerf Storage's tools look for it:
    /// DIR/<system>/training/<model>/datagen/<YYYYMMDD_HHmmss>/ (summary.json with the
    /// dataset's size, a *_metadata.json, dlio_config/, logs), beside the runs `run
    /// --results-dir DIR` writes
    #[arg(long, value_name = "DIR", help_heading = "MLPerf results")]
    pub results_dir: Option<PathBuf>,

    /// The system's name in --results-dir's tree [default: this host's name]
    #[arg(
        long,
        value_name = "NAME",
        requires = "results_dir",
        help_heading = "MLPerf results"
    )]
    pub system: Option<String>,
}

#[derive(Debug, Args)]
pub struct ContentArgs {
    /// The object's key (bucket-relative, as sent: its FNV-1a hash seeds the content)
    #[arg(value_name = "KEY")]
    pub key: String,

    /// Bytes to write
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: u64,

    /// The object offset of the first byte, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub offset: u64,

    /// Where the bytes go: a file, or - for stdout
    #[arg(long = "output", value_name = "FILE", default_value = "-")]
    pub out: PathBuf,

    /// Bytes generated (into one buffer) per write [default: 32MiB, a checkpoint part]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = 32 << 20)]
    pub chunk: u64,

    /// Print the generator's CPU time on stderr as one JSON line (bytes, cpu_s,
    /// cpu_s_per_gib, the kernel this CPU runs), the writes timed apart
    #[arg(long)]
    pub time: bool,

    #[command(flatten)]
    pub content: ReductionArgs,
}

/// The data reduction of generated content (checkpoints, datasets, what the embedded server
/// makes): unique, incompressible data by default, as DLIO writes.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ReductionArgs {
    /// Dedupe ratio R, 1 to 100: R:1 over blocks of --dedupe-block bytes (a block's duplicates
    /// lie about 1 MiB or more from it) [default: 1, every block unique]
    #[arg(
        long,
        value_name = "R",
        default_value_t = 1.0,
        help_heading = "Content"
    )]
    pub dedupe_ratio: f64,

    /// The block dedupe counts in, a multiple of 512 bytes up to 1MiB
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = crate::content::DEFAULT_BLOCK_BYTES, help_heading = "Content")]
    pub dedupe_block: u64,

    /// Compression ratio C: C:1 as a fast general compressor (zstd -1, lz4) finds it, each
    /// block's last 1 − 1/C zeros [default: 1, incompressible]
    #[arg(
        long,
        value_name = "C",
        default_value_t = 1.0,
        help_heading = "Content"
    )]
    pub compress_ratio: f64,
}

impl Default for ReductionArgs {
    fn default() -> Self {
        let r = crate::content::Reduction::default();
        ReductionArgs {
            dedupe_ratio: r.dedupe_ratio,
            dedupe_block: r.dedupe_block,
            compress_ratio: r.compress_ratio,
        }
    }
}

impl ReductionArgs {
    pub fn reduction(&self) -> crate::content::Reduction {
        crate::content::Reduction {
            dedupe_ratio: self.dedupe_ratio,
            dedupe_block: self.dedupe_block,
            compress_ratio: self.compress_ratio,
        }
    }

    /// The flags given (not left at their default), by name.
    pub fn given(&self) -> impl Iterator<Item = &'static str> + use<> {
        let d = ReductionArgs::default();
        [
            ("--dedupe-ratio", self.dedupe_ratio != d.dedupe_ratio),
            ("--dedupe-block", self.dedupe_block != d.dedupe_block),
            ("--compress-ratio", self.compress_ratio != d.compress_ratio),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
    }

    /// These flags as a command line (those given).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for flag in self.given() {
            let value = match flag {
                "--dedupe-ratio" => self.dedupe_ratio.to_string(),
                "--dedupe-block" => self.dedupe_block.to_string(),
                _ => self.compress_ratio.to_string(),
            };
            args.extend([flag.to_string(), value]);
        }
        args
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve the top-level folders of DIR as buckets (read and write)
    #[arg(long, value_name = "DIR", conflicts_with = "virtual_workload")]
    pub dir: Option<PathBuf>,

    /// Serve a sink: uploads (PUT, multipart) are taken at speed and their bytes dropped, only
    /// each object's key and size kept; GETs make an object's bytes again from the content
    /// generator. In bucket --bucket [default: the workload's storage.storage_root,
    /// else ringload]
    #[arg(long, conflicts_with_all = ["dir", "virtual_workload"])]
    pub sink: bool,

    /// With --sink: check every uploaded byte against the generator; a wrong one fails its
    /// upload (400 BadDigest naming the object and offset) and is counted
    #[arg(long = "verify", requires = "sink")]
    pub sink_verify: bool,

    /// With --sink: objects are zeros (checkpoint.randomize_tensor: False) [default: the
    /// content generator's random blocks]
    #[arg(long = "zeros", requires = "sink")]
    pub sink_zeros: bool,

    /// The sink's content: its dedupe and compression ratios (those the writer used, for
    /// --verify and for what GETs answer)
    #[command(flatten)]
    pub content: ReductionArgs,

    /// With --sink WORKLOAD (a checkpoint workload): the ranks of the plan whose objects the
    /// sink serves from the start
    #[arg(long, value_name = "N", default_value_t = 1, requires = "sink")]
    pub np: u32,

    /// Serve the training files of WORKLOAD at full size, read-only, without a disk (Parquet
    /// from one footer and one row-group template; whole objects made on request): a built-in
    /// — flux_b200, flux_mi355, flux_small, dlrm_b200, dlrm_mi355, unet3d_b200, unet3d_h100,
    /// retinanet_b200, retinanet_mi355, resnet50_h100, cosmoflow_h100 — or a YAML path
    /// [default: flux_small].
    /// With --sink, a checkpoint workload (llama3_8b, llama3_70b, llama3_405b, llama3_1t,
    /// llama3_demo, llama3_tiny): its plan's objects (checkpoints 1 to the most written or
    /// read, at --np ranks) are listed and served, generated, from the start
    #[arg(value_name = "WORKLOAD")]
    pub workload: Option<String>,

    /// Overrides of the virtual workload, e.g. dataset.num_files_train=500
    #[arg(value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,

    /// The workload as a flag, as older versions took it (now positional, as elsewhere)
    #[arg(long = "virtual", value_name = "WORKLOAD", hide = true)]
    pub virtual_workload: Option<String>,

    /// Number of virtual files (dataset.num_files_train)
    #[arg(long, value_name = "N")]
    pub files: Option<u64>,

    /// Address to listen on; port 0 takes a free port
    #[arg(long, value_name = "ADDR", default_value = crate::server::DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,

    /// The bucket: where the virtual dataset appears [default: the workload's
    /// storage.storage_root, else "ringload"]; with --dir, created if missing
    #[arg(long, value_name = "NAME")]
    pub bucket: Option<String>,

    /// Require SigV4 signatures by this access key (with --secret-key)
    #[arg(long, value_name = "KEY", requires = "secret_key")]
    pub access_key: Option<String>,

    /// The secret of --access-key (typed here it shows in `ps` to every user of the machine)
    #[arg(long, value_name = "SECRET", requires = "access_key")]
    pub secret_key: Option<String>,

    /// Region reported to clients
    #[arg(long, value_name = "REGION", default_value = crate::server::DEFAULT_REGION)]
    pub region: String,

    /// Server worker threads [default: the cores this process may use]
    #[arg(long = "server-threads", alias = "threads", value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,

    /// Misbehave on purpose: faults to inject, e.g. '503@rg/nth=2,cut=1000000@rg/rate=0.05'
    /// (KIND[=ARG][@rg|footer|list|any][/nth=N|every=N|rate=P]; see the README)
    #[arg(long, value_name = "SPEC")]
    pub faults: Option<String>,

    /// Connections served at once; one more is closed as soon as it is accepted
    #[arg(long, value_name = "N", default_value_t = crate::server::DEFAULT_MAX_CONNECTIONS, value_parser = parse_connections)]
    pub max_connections: usize,

    /// Seed of the draws for rate=P faults
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub faults_seed: u64,

    /// Send each object body no faster than this many MiB/s, to stand in for a slow store
    #[arg(long, value_name = "MIB_PER_S", value_parser = parse_rate, allow_negative_numbers = true)]
    pub throttle_mib_per_s: Option<f64>,

    /// Send all GET bodies together, every connection's, no faster than this many MiB/s: a
    /// store of fixed bandwidth, however many clients read
    #[arg(long, value_name = "MIB_PER_S", value_parser = parse_rate, allow_negative_numbers = true)]
    pub bandwidth_mib_per_s: Option<f64>,

    /// Write every request answered to FILE, one JSON line each (method, path, query, Range,
    /// status; presigned URLs' X-Amz-* parameters left out): what a client sent, request by
    /// request
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<std::path::PathBuf>,

    /// Print the totals at exit as JSON on stdout
    #[arg(long)]
    pub json: bool,

    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(
        long,
        value_name = "CERT",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Serve HTTPS with a fresh CA and a certificate it signs for the listen address; writes
    /// ca.pem (what clients pass to --ca-bundle), cert.pem and key.pem into DIR [default: a
    /// temporary folder, removed at exit]
    // The flag alone stands for an empty DIR; clap's PathBuf parser refuses an empty value,
    // so this parser takes any OS string.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "",
          value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    pub tls_self_signed: Option<PathBuf>,
}
