//! Checkpoint workloads: what DLIO's checkpointing does to an object store, planned.
//!
//! DLIO's (and MLPerf Storage's) LLM checkpoints, as `../shared/reference/checkpoint-and-whole-object.md`
//! part A gives them: a transformer model's parameters and optimizer state sharded over tensor,
//! pipeline and data parallel ranks by ZeRO stage, written as one object per shard per
//! checkpoint (`global_epoch1_step<k>/…`), restored by the same ranks.
//!
//! - [`model`]: the arithmetic — total parameters, the layers a pipeline stage owns, each
//!   rank's tensors, its objects' names and sizes, `checkpoint_size_GB`.
//! - [`settings`]: the settings read from a workload (`model.*`, `checkpoint.*`,
//!   `workflow.checkpoint`), and whether a workload is a checkpoint workload at all.
//! - [`io`]: the I/O shape (parts, parts in flight, read ranges and blocks) from DLIO's
//!   defaults, the fork's environment variables and the flags, checked against S3's limits.
//! - this file: the plan ([`CheckpointPlan`]): every rank's objects and their keys, the totals
//!   DLIO reports, per-host bytes and the memory the busiest host needs.
//!
//! Pure: no threads, no sockets (the environment and the machine's limits are handed in);
//! tested against the reference's worked totals.

pub mod io;
pub mod model;
pub mod settings;

use serde::Serialize;

use crate::budget::{self, MemoryBudget, MemoryLimits, ObjectBudgetShape, OverBudget};
use crate::exit::{self, ExitClass};
pub use io::{IoOptions, SendZc};
use model::Parallelism;
pub use settings::{CheckpointMode, CheckpointSettings, is_checkpoint_workload};

/// How a rank moves a checkpoint's bytes: the write side's multipart parts and the read side's
/// ranged GETs. Every size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ObjectIoShape {
    /// Multipart part size (the DLIO fork's s3dlio writer: 32 MiB; `--part-size`,
    /// `S3DLIO_MULTIPART_PART_SIZE_MB`).
    pub part_bytes: u64,
    /// Parts in flight per rank (max(2, ⌈16 / ranks⌉); `--parts-in-flight`,
    /// `S3DLIO_MULTIPART_MAX_IN_FLIGHT`).
    pub parts_in_flight: usize,
    /// Objects smaller than this go as one PUT (0: every object is a multipart upload, as the
    /// fork's writer does; `--single-put-below`).
    pub single_put_below: u64,
    /// A restore's ranged GET size (128 MiB, as the fork's s3dlio reader).
    pub read_range_bytes: u64,
    /// Contiguous blocks of an object a restore reads in parallel (max(2, ⌈16 / ranks⌉)).
    pub read_blocks: usize,
    /// Send bodies with `IORING_OP_SEND_ZC` (io_uring engine only).
    pub send_zc: bool,
    /// Check every written (server side) and restored byte against the generator.
    pub verify: bool,
}

impl ObjectIoShape {
    /// Bytes of buffers one rank holds at most: the larger of the write side's parts in flight
    /// and the read side's blocks (the phases never overlap).
    pub fn rank_buffer_bytes(&self) -> u64 {
        (self.part_bytes * self.parts_in_flight as u64)
            .max(self.read_range_bytes * self.read_blocks as u64)
    }
}

/// One object a rank writes per checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedObject {
    /// The file name DLIO gives it, e.g. `zero_pp_rank_0_mp_rank_0_model_states.pt`.
    pub name: String,
    pub bytes: u64,
}

/// A checkpoint plan that cannot be made. Configuration errors (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{0}")]
    Unsatisfiable(String),
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
}

impl ExitClass for CheckpointError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// What the command line adds to a checkpoint workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// Ranks (DLIO's processes).
    pub np: u32,
    /// Hosts the ranks are spread over, in contiguous blocks as mpirun fills hosts (for
    /// per-host bytes and the busiest host's memory); 1 without MPI.
    pub hosts: u32,
    pub io: IoOptions,
    /// `--memory-budget`.
    pub memory_cap_bytes: Option<u64>,
    /// An in-process server's resident data.
    pub server_bytes: u64,
}

/// A checkpoint workload resolved for a number of ranks: every object each rank writes per
/// checkpoint, DLIO's totals, the I/O shape and the memory.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointPlan {
    pub settings: CheckpointSettings,
    pub np: u32,
    pub hosts: u32,
    pub parallelism: Parallelism,
    /// N, the model's parameters.
    pub total_parameters: u64,
    /// Per rank, the objects it writes per checkpoint, in order (model files first). Ranks
    /// that write nothing (ZeRO-0 beyond the first data-parallel instance) have none.
    pub ranks: Vec<Vec<PlannedObject>>,
    /// DLIO's model and optimizer sizes (bytes), whose sum is its checkpoint size.
    pub model_bytes: u64,
    pub optimizer_bytes: u64,
    /// DLIO's `checkpoint_size` in bytes.
    pub checkpoint_bytes: u64,
    /// DLIO's `checkpoint_size_GB`: `checkpoint_bytes` ÷ 2³⁰ (GiB, despite the name).
    #[serde(rename = "checkpoint_size_GB")]
    pub checkpoint_size_gb: f64,
    /// Bytes of the objects written per checkpoint: `checkpoint_bytes`, except where DLIO
    /// counts state it does not write (ZeRO-2 with dp > 1, a non-transformer model).
    pub written_bytes: u64,
    pub objects_per_checkpoint: usize,
    /// Bytes each host writes per checkpoint.
    pub host_bytes: Vec<u64>,
    pub io: ObjectIoShape,
    /// `--send-zc` as given; `io.send_zc` is true only for `on` until the run resolves `auto`
    /// ([`SendZc::enabled`]).
    pub send_zc: SendZc,
    /// The memory of the host with the most ranks.
    pub memory: MemoryBudget,
    /// Why that memory does not fit this machine, if it does not: the plan still prints; the
    /// run refuses ([`CheckpointPlan::check_budget`]).
    pub over_budget: Option<String>,
    pub limits: MemoryLimits,
    pub notes: Vec<String>,
}

impl CheckpointPlan {
    /// Resolves the plan. Pure: `limits` were probed and `env` reads the environment.
    pub fn resolve(
        settings: &CheckpointSettings,
        options: &CheckpointOptions,
        limits: &MemoryLimits,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CheckpointPlan, CheckpointError> {
        let np = u64::from(options.np);
        let parallelism = settings
            .parallelism(np)
            .map_err(CheckpointError::Unsatisfiable)?;
        let hosts = options.hosts.clamp(1, options.np.max(1));
        let layout = model::layout(&settings.model, &parallelism, np);
        let largest = layout
            .ranks
            .iter()
            .flatten()
            .max_by_key(|o| o.bytes)
            .map_or(("no object", 0), |o| (o.name.as_str(), o.bytes));
        let io = io::resolve_io(&options.io, np, largest, env)
            .map_err(CheckpointError::Unsatisfiable)?;
        let host_bytes = (0..hosts)
            .map(|h| {
                host_ranks(h, hosts, options.np)
                    .map(|r| layout.ranks[r].iter().map(|o| o.bytes).sum::<u64>())
                    .sum()
            })
            .collect();
        // The memory of the host with the most ranks (host 0).
        let busiest = host_ranks(0, hosts, options.np).len() as u32;
        let shape = budget_shape(&io, busiest, largest.1, options.server_bytes);
        let memory = budget::object_budget(&shape, limits, options.memory_cap_bytes);
        let over_budget = budget::check_objects(&shape, limits, options.memory_cap_bytes)
            .err()
            .map(|over| over.0);
        let mut plan = CheckpointPlan {
            settings: settings.clone(),
            np: options.np,
            hosts,
            parallelism,
            total_parameters: model::total_parameters(&settings.model),
            objects_per_checkpoint: layout.ranks.iter().map(Vec::len).sum(),
            model_bytes: layout.model_bytes,
            optimizer_bytes: layout.optimizer_bytes,
            checkpoint_bytes: layout.checkpoint_bytes(),
            checkpoint_size_gb: layout.checkpoint_bytes() as f64 / (1u64 << 30) as f64,
            written_bytes: layout.written_bytes,
            ranks: layout.ranks,
            host_bytes,
            io,
            send_zc: options.io.send_zc,
            memory,
            over_budget,
            limits: limits.clone(),
            notes: Vec::new(),
        };
        plan.notes = plan.make_notes();
        Ok(plan)
    }

    fn make_notes(&self) -> Vec<String> {
        let s = &self.settings;
        let mut notes = vec!["checkpoint.fsync is a no-op for objects (as in DLIO)".to_string()];
        if self.written_bytes != self.checkpoint_bytes {
            notes.push(format!(
                "DLIO's checkpoint_size_GB counts {} B that no object carries (ZeRO-2 ranks \
                 other than dp 0 hold the model and do not write it; a non-transformer \
                 model's size counts once); ringload reports DLIO's figure",
                crate::units::count(self.checkpoint_bytes.abs_diff(self.written_bytes))
            ));
        }
        if let CheckpointMode::Subset { data } = s.mode {
            notes.push(format!(
                "subset mode: {} ranks of a {}-rank job (data {data} × tp {} × pp {}) write \
                 what those ranks would",
                self.np,
                data * s.tensor * s.pipeline,
                s.tensor,
                s.pipeline
            ));
        }
        if self.settings.model_name.starts_with("llama3_1t") || s.workload.name == "llama3_1t" {
            notes.push(
                "the MLPerf Storage rules' table gives 18 TB for Llama3 1T; DLIO writes and \
                 reports 15,426.59 GiB (its checkpoint_size_GB), as ringload does"
                    .to_string(),
            );
        }
        notes
    }

    /// The memory numbers of `ranks` ranks of this plan on one host.
    /// For a run under mpirun: `budget::check_objects(&plan.budget_shape(local_ranks, 0), …)`.
    pub fn budget_shape(&self, ranks: u32, server_bytes: u64) -> ObjectBudgetShape {
        budget_shape(&self.io, ranks, self.largest_object_bytes(), server_bytes)
    }

    /// The run's check, before anything moves: the plan's memory on this machine.
    pub fn check_budget(&self) -> Result<&MemoryBudget, OverBudget> {
        match &self.over_budget {
            Some(line) => Err(OverBudget(line.clone())),
            None => Ok(&self.memory),
        }
    }

    /// The key prefix of every checkpoint: `<checkpoint_folder>/` (empty for the bucket's
    /// root). A LIST of it finds every checkpoint written.
    pub fn prefix(&self) -> String {
        if self.settings.folder.is_empty() {
            String::new()
        } else {
            format!("{}/", self.settings.folder)
        }
    }

    /// The prefix of checkpoint `step` (from 1): `<folder>/global_epoch1_step<step>/`.
    pub fn step_prefix(&self, step: u32) -> String {
        format!("{}global_epoch1_step{step}/", self.prefix())
    }

    /// The bucket-relative key of `object` in checkpoint `step` (from 1), DLIO's
    /// `<checkpoint_folder>/global_epoch1_step<k>/<file>`.
    pub fn key(&self, step: u32, object: &PlannedObject) -> String {
        format!("{}{}", self.step_prefix(step), object.name)
    }

    /// Bytes rank `rank` writes per checkpoint.
    pub fn rank_bytes(&self, rank: usize) -> u64 {
        self.ranks[rank].iter().map(|o| o.bytes).sum()
    }

    /// The largest object of a checkpoint.
    pub fn largest_object_bytes(&self) -> u64 {
        self.ranks
            .iter()
            .flatten()
            .map(|o| o.bytes)
            .max()
            .unwrap_or(0)
    }

    /// The ranks host `host` runs.
    pub fn host_ranks(&self, host: u32) -> std::ops::Range<usize> {
        host_ranks(host, self.hosts, self.np)
    }
}

/// The ranks host `host` of `hosts` runs out of `np`: contiguous blocks, the first
/// `np mod hosts` hosts one more (as `cluster::Cluster::ranks_of` splits them, and as mpirun
/// fills hosts).
pub fn host_ranks(host: u32, hosts: u32, np: u32) -> std::ops::Range<usize> {
    let (host, hosts, np) = (host as usize, hosts.max(1) as usize, np as usize);
    let base = np / hosts;
    let extra = np % hosts;
    let start = host * base + host.min(extra);
    start..start + base + usize::from(host < extra)
}

fn budget_shape(
    shape: &ObjectIoShape,
    ranks: u32,
    largest_object_bytes: u64,
    server_bytes: u64,
) -> ObjectBudgetShape {
    ObjectBudgetShape {
        ranks,
        part_bytes: shape.part_bytes,
        parts_in_flight: shape.parts_in_flight as u64,
        min_part_bytes: largest_object_bytes.div_ceil(io::MAX_PARTS),
        read_range_bytes: shape.read_range_bytes,
        read_blocks: shape.read_blocks as u64,
        server_bytes,
    }
}
