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
//! - [`training`]: checkpoints between a training run's steps (`workflow.checkpoint` with
//!   `workflow.train`): DLIO's schedule, the saves' keys, the same objects.
//! - this file: the plan ([`CheckpointPlan`]): every rank's objects and their keys, the totals
//!   DLIO reports, per-host bytes and the memory the busiest host needs.
//!
//! Pure: no threads, no sockets (the environment and the machine's limits are handed in);
//! tested against the reference's worked totals.

pub mod io;
pub mod model;
mod object;
pub mod restore;
pub mod settings;
pub mod training;

use serde::Serialize;

use crate::budget::{self, MemoryBudget, MemoryLimits, ObjectBudgetShape, OverBudget};
use crate::exit::{self, ExitClass};
pub use io::{IoOptions, RestoreChecksum, SendZc};
use model::Parallelism;
pub use object::{ChecksumForm, PayloadSigning};
pub use object::{ObjectIoShape, PlannedObject};
pub use settings::{CheckpointMode, CheckpointSettings};

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
#[derive(Debug, Clone, PartialEq)]
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
        let mut io = io::resolve_io(&options.io, np, largest, env)
            .map_err(CheckpointError::Unsatisfiable)?;
        // A block's ranged GETs never exceed the block: no buffer larger than the largest
        // object's block (in whole pages), so small checkpoints need small buffers.
        let block_bytes = largest
            .1
            .div_ceil(io.read_blocks as u64)
            .div_ceil(budget::BUFFER_ALIGN_BYTES)
            * budget::BUFFER_ALIGN_BYTES;
        if block_bytes > 0 {
            io.read_range_bytes = io.read_range_bytes.min(block_bytes);
        }
        // A single PUT's body is held whole, in a connection's buffer.
        io.single_put_bytes = layout
            .ranks
            .iter()
            .flatten()
            .map(|o| o.bytes)
            .filter(|&b| io.single_put(b))
            .max()
            .unwrap_or(0);
        // A rank writes its objects one after another: no more parts in flight than the
        // largest object has.
        if largest.1 > 0 {
            io.parts_in_flight = io
                .parts_in_flight
                .min(largest.1.div_ceil(io.part_bytes) as usize);
        }
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
        /// MinIO's largest aws-chunked chunk (its streaming readers' `maxChunkSize`).
        const MINIO_MAX_CHUNK_BYTES: u64 = 16 << 20;
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
        let largest = self.largest_object_bytes();
        let body = self
            .io
            .part_bytes
            .min(largest)
            .max(self.io.single_put_bytes);
        if self.io.chunked() && body > MINIO_MAX_CHUNK_BYTES {
            notes.push(format!(
                "aws-chunked bodies go as one chunk each, here up to {}: MinIO refuses chunks \
                 over 16 MiB (use --part-size 16MiB there); garage, AWS and ringload serve take \
                 them",
                crate::units::bytes(body)
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
        single_put_bytes: shape.single_put_bytes,
        server_bytes,
        tls: shape.tls,
        chunked: shape.chunked(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn settings(workload: &str, overrides: &[&str]) -> CheckpointSettings {
        let mut cfg = RawConfig::load(workload).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        assert!(crate::workload::is_checkpoint(&cfg).unwrap(), "{workload}");
        CheckpointSettings::resolve(&cfg).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn options(np: u32) -> CheckpointOptions {
        CheckpointOptions {
            np,
            hosts: 1,
            io: IoOptions::default(),
            memory_cap_bytes: None,
            server_bytes: 0,
        }
    }

    fn plan(workload: &str, np: u32, overrides: &[&str]) -> CheckpointPlan {
        CheckpointPlan::resolve(
            &settings(workload, overrides),
            &options(np),
            &MemoryLimits::unlimited(),
            &no_env,
        )
        .unwrap()
    }

    /// Object sizes with how many objects have each, largest first.
    fn sizes(plan: &CheckpointPlan) -> Vec<(u64, usize)> {
        let mut by_size = std::collections::BTreeMap::new();
        for o in plan.ranks.iter().flatten() {
            *by_size.entry(o.bytes).or_insert(0) += 1;
        }
        by_size.into_iter().rev().collect()
    }

    #[test]
    fn the_four_llama3_checkpoints_match_the_reference_totals() {
        // Reference A2's worked table: N, checkpoint_size_GB (GiB, 2 decimals), objects per
        // checkpoint.
        let table = [
            ("llama3_8b", 8, 8_030_261_248, "104.70", 16),
            ("llama3_70b", 64, 69_882_617_856, "911.21", 128),
            ("llama3_405b", 512, 405_853_388_800, "5292.25", 1544),
            ("llama3_1t", 1024, 1_183_035_102_480, "15426.59", 2072),
        ];
        for (workload, np, n, gib, objects) in table {
            let p = plan(workload, np, &[]);
            assert_eq!(p.total_parameters, n, "{workload}");
            assert_eq!(format!("{:.2}", p.checkpoint_size_gb), gib, "{workload}");
            assert_eq!(p.objects_per_checkpoint, objects, "{workload}");
            assert_eq!(p.written_bytes, p.checkpoint_bytes, "{workload}");
        }
        // The real 1T run's summary: checkpoint_size_GB 15426.589264154434.
        let p = plan("llama3_1t", 1024, &[]);
        assert!((p.checkpoint_size_gb - 15426.589264154434).abs() < 1e-9);
    }

    #[test]
    fn object_sizes_match_the_reference_table() {
        let p = plan("llama3_8b", 8, &[]);
        assert_eq!(sizes(&p), vec![(12_045_637_632, 8), (2_007_565_312, 8)]);
        assert_eq!(
            p.ranks[3],
            vec![
                PlannedObject {
                    name: "zero_pp_rank_3_mp_rank_0_model_states.pt".into(),
                    bytes: 2_007_565_312
                },
                PlannedObject {
                    name: "zero_pp_rank_3_mp_rank_0_optim_states.pt".into(),
                    bytes: 12_045_637_632
                },
            ]
        );
        let p = plan("llama3_70b", 64, &[]);
        assert_eq!(sizes(&p), vec![(13_103_482_368, 64), (2_184_120_320, 64)]);
        assert_eq!(
            p.ranks[13][0].name,
            "zero_pp_rank_1_mp_rank_5_model_states.pt"
        );

        // 405B: ZeRO-1, tp 8, pp 32: the dp 0 ranks (0..256) write one file per layer.
        let p = plan("llama3_405b", 512, &[]);
        let optim: Vec<_> = p
            .ranks
            .iter()
            .flatten()
            .filter(|o| o.name.ends_with("_optim_states.pt"))
            .collect();
        assert_eq!(optim.len(), 512);
        assert!(optim.iter().all(|o| o.bytes == 9_513_171_840));
        let model: Vec<_> = p
            .ranks
            .iter()
            .flatten()
            .filter(|o| o.name.ends_with("_model_states.pt"))
            .collect();
        assert_eq!(model.len(), 1032);
        let count = |bytes: u64| model.iter().filter(|o| o.bytes == bytes).count();
        // Embedding and lm_head on each of 8 tp ranks, 126 layers × 8, the norm × 8.
        assert_eq!(count(525_336_576), 16);
        assert_eq!(count(796_983_296), 126 * 8);
        assert_eq!(count(32_768), 8);
        assert!(p.ranks[256..].iter().all(|r| r.len() == 1));
        // Rank 0: stage 0 owns the embedding and layers 1–4 (126 = 3 × 32 + 30: the first 30
        // stages have 4), then its optimizer shard.
        let names: Vec<&str> = p.ranks[0].iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "layer_0-model_0_model_states.pt",
                "layer_1-model_0_model_states.pt",
                "layer_2-model_0_model_states.pt",
                "layer_3-model_0_model_states.pt",
                "layer_4-model_0_model_states.pt",
                "zero_pp_rank_0_mp_rank_0_optim_states.pt",
            ]
        );
        // The last stage (ranks 248..256) owns layers 124–126, the lm_head (127), the norm (128).
        let last: Vec<&str> = p.ranks[255].iter().map(|o| o.name.as_str()).collect();
        assert_eq!(last[0], "layer_124-model_255_model_states.pt");
        assert_eq!(last[3], "layer_127-model_255_model_states.pt");
        assert_eq!(last[4], "layer_128-model_255_model_states.pt");
        assert_eq!(p.ranks[255][4].bytes, 32_768);
        // Per-rank GiB: 8.86 (a dp 1 rank, optimizer only) to 12.32 (stage 0's dp 0 ranks).
        let gib = |r: usize| p.rank_bytes(r) as f64 / (1u64 << 30) as f64;
        let (lo, hi) = (0..512).fold((f64::MAX, 0.0f64), |(lo, hi), r| {
            (lo.min(gib(r)), hi.max(gib(r)))
        });
        assert_eq!(format!("{lo:.2}–{hi:.2}"), "8.86–12.32");

        let p = plan("llama3_1t", 1024, &[]);
        let model = p
            .ranks
            .iter()
            .flatten()
            .filter(|o| o.name.ends_with("_model_states.pt"))
            .count();
        assert_eq!(model, 1048);
        let all = sizes(&p);
        assert!(all.contains(&(13_865_244_924, 1024)), "{all:?}");
        assert!(all.contains(&(829_559_808, 16)), "{all:?}");
        assert!(all.contains(&(2_297_744_064, 128 * 8)), "{all:?}");
        assert!(all.contains(&(51_744, 8)), "{all:?}");
    }

    #[test]
    fn subset_mode_writes_what_the_first_ranks_of_the_full_job_would() {
        // Reference A2: DLIO writes 113.90 / 98.54 / 143.72 GiB for 8 processes of 70B, 405B
        // and 1T (the data parallelism mlpstorage sets: ClosedGPUs ÷ GPUs per DP instance).
        let table = [
            ("llama3_70b", 8, "113.90"),
            ("llama3_405b", 2, "98.54"),
            ("llama3_1t", 2, "143.72"),
        ];
        for (workload, data, gib) in table {
            let data = format!("model.parallelism.data={data}");
            let p = plan(workload, 8, &["checkpoint.mode=subset", &data]);
            assert_eq!(format!("{:.2}", p.checkpoint_size_gb), gib, "{workload}");
        }
        let p = plan(
            "llama3_405b",
            8,
            &["checkpoint.mode=subset", "model.parallelism.data=2"],
        );
        // Ranks 0–7 are pipeline stage 0's tensor ranks: each writes the embedding shard.
        assert!(
            p.ranks
                .iter()
                .all(|r| r[0].name.starts_with("layer_0-") && r[0].bytes == 525_336_576)
        );
    }

    #[test]
    fn zero_stages_decide_who_writes_the_model() {
        let base = ["model.parallelism.tensor=2", "model.parallelism.pipeline=1"];
        let with = |zero: &str| {
            let mut o: Vec<&str> = base.to_vec();
            o.push(zero);
            plan("llama3_tiny", 4, &o)
        };
        // ZeRO-0: only ranks below mp (2) write; one model file with all layers each.
        let p = with("model.parallelism.zero_stage=0");
        assert_eq!(
            p.ranks[0][0].name,
            "zero_pp_rank_0_mp_rank_0_model_states.pt"
        );
        assert_eq!(
            p.ranks[1][1].name,
            "zero_pp_rank_0_mp_rank_1_optim_states.pt"
        );
        assert!(p.ranks[2].is_empty() && p.ranks[3].is_empty());
        // Optimizer: N / mp elements per tensor.
        let n = p.total_parameters;
        assert_eq!(p.ranks[0][1].bytes, 4 * (3 * (n / 2) + 15 * 128));
        // ZeRO-1, pp 1: dp 0 ranks write model_{mp_r}; every rank its optimizer shard.
        let p = with("model.parallelism.zero_stage=1");
        let names: Vec<Vec<&str>> = p
            .ranks
            .iter()
            .map(|r| r.iter().map(|o| o.name.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec![
                    "model_0_model_states.pt",
                    "zero_pp_rank_0_mp_rank_0_optim_states.pt"
                ],
                vec![
                    "model_1_model_states.pt",
                    "zero_pp_rank_0_mp_rank_1_optim_states.pt"
                ],
                vec!["zero_pp_rank_1_mp_rank_0_optim_states.pt"],
                vec!["zero_pp_rank_1_mp_rank_1_optim_states.pt"],
            ]
        );
        assert_eq!(p.written_bytes, p.checkpoint_bytes);
        // ZeRO-2: the same objects, but DLIO counts the model every dp rank holds.
        let p2 = with("model.parallelism.zero_stage=2");
        assert_eq!(p2.ranks, p.ranks);
        assert_eq!(
            p2.checkpoint_bytes - p2.written_bytes,
            p.rank_bytes(0) - p.rank_bytes(2) + p.rank_bytes(1) - p.rank_bytes(3)
        );
        assert!(p2.notes.iter().any(|n| n.contains("ZeRO-2")));
        // The norm is not divided by tp: each tp rank's model file holds it whole.
        let m = &p.settings.model;
        let par = p.parallelism;
        assert_eq!(model::layer_tensors(m, &par, 4), vec![128]);
    }

    #[test]
    fn pipeline_stages_split_layers_as_dlio_does() {
        // 10 layers over 4 stages: 3, 3, 2, 2; stage 0 adds the embedding, the last the
        // lm_head and the norm.
        let stages: Vec<_> = (0..4).map(|p| model::stage_layers(10, 4, p)).collect();
        assert_eq!(stages, vec![0..=3, 4..=6, 7..=8, 9..=12]);
        assert_eq!(model::stage_layers(32, 1, 0), 0..=34);
    }

    #[test]
    fn a_non_transformer_model_writes_model_size_bytes_from_rank_0() {
        let cfg = RawConfig::parse(
            "unet",
            "unet.yaml",
            "model:\n  name: unet3d\n  model_size: 499153191\nworkflow:\n  train: False\n  checkpoint: True\ncheckpoint:\n  num_checkpoints_write: 1\n",
        );
        // `model.model_size` is not a key DLIO reads (the unet3d templates carry it): accepted,
        // named as ignored, and not taken for model_size_bytes.
        let cfg = cfg.unwrap();
        let ignored: Vec<String> = cfg.ignored_keys().into_iter().map(|(k, _)| k).collect();
        assert!(
            ignored.contains(&"model.model_size".to_string()),
            "{ignored:?}"
        );
        let s = CheckpointSettings::resolve(&cfg).unwrap();
        let p =
            CheckpointPlan::resolve(&s, &options(4), &MemoryLimits::unlimited(), &no_env).unwrap();
        assert_eq!(p.ranks[0][0].bytes, 10240);
        let cfg = RawConfig::parse(
            "unet",
            "unet.yaml",
            "model:\n  name: unet3d\nworkflow:\n  train: False\n  checkpoint: True\ncheckpoint:\n  num_checkpoints_write: 1\n",
        )
        .unwrap();
        let s = CheckpointSettings::resolve(&cfg).unwrap();
        let p =
            CheckpointPlan::resolve(&s, &options(4), &MemoryLimits::unlimited(), &no_env).unwrap();
        assert_eq!(
            p.ranks[0],
            vec![PlannedObject {
                name: "model_states-0.pt".into(),
                bytes: 10240
            }]
        );
        assert!(p.ranks[1..].iter().all(Vec::is_empty));
        assert_eq!(p.checkpoint_bytes, 10240);
    }

    #[test]
    fn keys_are_dlios_under_the_checkpoint_folder() {
        let p = plan("llama3_8b", 8, &[]);
        assert_eq!(p.prefix(), "checkpoints/llama3_8b/");
        assert_eq!(
            p.key(1, &p.ranks[0][0]),
            "checkpoints/llama3_8b/global_epoch1_step1/zero_pp_rank_0_mp_rank_0_model_states.pt"
        );
        let p = plan(
            "llama3_tiny",
            2,
            &["checkpoint.checkpoint_folder=./ck/run1/"],
        );
        assert_eq!(p.step_prefix(10), "ck/run1/global_epoch1_step10/");
        let p = plan("llama3_tiny", 2, &["checkpoint.checkpoint_folder=/"]);
        assert_eq!(p.prefix(), "");
    }

    #[test]
    fn hosts_take_contiguous_ranks_so_model_writers_crowd_the_first() {
        let s = settings("llama3_405b", &[]);
        let mut o = options(512);
        o.hosts = 64;
        let p = CheckpointPlan::resolve(&s, &o, &MemoryLimits::unlimited(), &no_env).unwrap();
        assert_eq!(p.host_ranks(0), 0..8);
        assert_eq!(p.host_bytes.len(), 64);
        assert_eq!(p.host_bytes.iter().sum::<u64>(), p.written_bytes);
        // The dp 0 ranks (0..256, the model writers) are on hosts 0..32.
        assert!(p.host_bytes[0] > p.host_bytes[63]);
        assert_eq!(p.host_bytes[32], p.host_bytes[63]);
        assert_eq!(host_ranks(2, 3, 10), 7..10);
        assert_eq!(host_ranks(0, 3, 10), 0..4);
        // The busiest host's memory: 8 ranks, 2 read blocks of 128 MiB each.
        assert_eq!(p.memory.pool_bytes, 8 * 2 * (128 << 20));
    }

    /// The budget counts the buffers the engines hold: a connection's buffer per part in
    /// flight or read block, each holding a part, a range or the largest single PUT.
    #[test]
    fn the_budget_counts_the_buffers_the_shape_gives_the_engines() {
        let limits = MemoryLimits::unlimited();
        let mut o = options(8);
        for single_put_below in [None, Some(1 << 20), Some(600 << 20)] {
            o.io.single_put_below = single_put_below;
            let p =
                CheckpointPlan::resolve(&settings("llama3_8b", &[]), &o, &limits, &no_env).unwrap();
            let engines = p.io.connections() as u64 * p.io.buffer_bytes();
            assert_eq!(p.budget_shape(1, 0).rank_buffer_bytes(), engines, "{p:?}");
            let largest_single = p.ranks.iter().flatten().map(|o| o.bytes);
            let largest_single = largest_single.filter(|&b| p.io.single_put(b)).max();
            assert_eq!(p.io.single_put_bytes, largest_single.unwrap_or(0));
        }
    }

    #[test]
    fn the_io_shape_follows_the_fork_its_environment_and_the_flags() {
        let s = settings("llama3_8b", &[]);
        let limits = MemoryLimits::unlimited();
        let p = CheckpointPlan::resolve(&s, &options(8), &limits, &no_env).unwrap();
        assert_eq!(
            p.io,
            ObjectIoShape {
                part_bytes: 32 << 20,
                parts_in_flight: 2,
                single_put_below: 0,
                single_put_bytes: 0,
                read_range_bytes: 128 << 20,
                read_blocks: 2,
                send_zc: false,
                verify: false,
                checksum: crate::checksum::Checksum::Crc32c,
                payload: Default::default(),
                checksum_form: Default::default(),
                restore_check: true,
                tls: false,
                content: Default::default(),
            }
        );
        assert_eq!(io::default_in_flight(1), 16);
        assert_eq!(io::default_in_flight(3), 6);
        assert_eq!(io::default_in_flight(64), 2);
        let env = |name: &str| match name {
            "S3DLIO_MULTIPART_PART_SIZE_MB" => Some("64".to_string()),
            "S3DLIO_MULTIPART_MAX_IN_FLIGHT" => Some("4".to_string()),
            _ => None,
        };
        let p = CheckpointPlan::resolve(&s, &options(8), &limits, &env).unwrap();
        assert_eq!((p.io.part_bytes, p.io.parts_in_flight), (64 << 20, 4));
        // Flags win over the environment.
        let mut o = options(8);
        o.io.part_bytes = Some(16 << 20);
        o.io.send_zc = SendZc::On;
        let p = CheckpointPlan::resolve(&s, &o, &limits, &env).unwrap();
        assert_eq!((p.io.part_bytes, p.io.parts_in_flight), (16 << 20, 4));
        assert!(p.io.send_zc);
        assert!(!SendZc::Auto.enabled(true) && SendZc::Auto.enabled(false));
        use clap::ValueEnum;
        assert_eq!(SendZc::from_str("true", false), Ok(SendZc::On));
        assert_eq!(SendZc::from_str("off", false), Ok(SendZc::Off));
    }

    #[test]
    fn part_sizes_are_checked_against_s3_limits() {
        let s = settings("llama3_8b", &[]);
        let limits = MemoryLimits::unlimited();
        let refuse = |o: &CheckpointOptions, env: &dyn Fn(&str) -> Option<String>| {
            CheckpointPlan::resolve(&s, o, &limits, env)
                .unwrap_err()
                .to_string()
        };
        let mut o = options(8);
        o.io.part_bytes = Some(4 << 20);
        let err = refuse(&o, &no_env);
        assert!(
            err.contains("4.00 MiB (--part-size) is outside S3's limits"),
            "{err}"
        );
        // 8B on one rank: a 96 GB optimizer object needs parts of 9.2 MiB or more.
        let mut o = options(1);
        o.io.part_bytes = Some(5 << 20);
        let err = refuse(&o, &no_env);
        assert!(
            err.contains("into 18,380 parts; S3 allows 10,000: use --part-size 10MiB or more"),
            "{err}"
        );
        let env = |name: &str| (name == "S3DLIO_MULTIPART_PART_SIZE_MB").then(|| "x".to_string());
        let err = refuse(&options(8), &env);
        assert_eq!(
            err,
            "S3DLIO_MULTIPART_PART_SIZE_MB=x must be a positive integer; fix or unset it"
        );
        let mut o = options(8);
        o.io.single_put_below = Some(6 << 30);
        assert!(refuse(&o, &no_env).contains("single PUT of at most 5 GiB"));
    }

    /// A checksum trailer needs a checksum, and a body whose x-amz-content-sha256 names its
    /// streaming form; with both, the shape carries the form to the engines.
    #[test]
    fn a_checksum_trailer_needs_a_checksum_and_a_streaming_payload() {
        let s = settings("llama3_8b", &[]);
        let limits = MemoryLimits::unlimited();
        let mut o = options(8);
        o.io.checksum_form = ChecksumForm::Trailer;
        o.io.checksum = crate::checksum::Checksum::None;
        let err = CheckpointPlan::resolve(&s, &o, &limits, &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--checksum none sends none"), "{err}");
        o.io.checksum = crate::checksum::Checksum::Crc32c;
        o.io.payload = PayloadSigning::Sha256;
        let err = CheckpointPlan::resolve(&s, &o, &limits, &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("use --payload-signing streaming"), "{err}");
        for payload in [PayloadSigning::Unsigned, PayloadSigning::Streaming] {
            o.io.payload = payload;
            let plan = CheckpointPlan::resolve(&s, &o, &limits, &no_env).unwrap();
            assert_eq!(
                (plan.io.checksum_form, plan.io.payload),
                (ChecksumForm::Trailer, payload)
            );
        }
    }

    #[test]
    fn bad_process_counts_and_parallelism_are_refused_in_one_line() {
        let s = settings("llama3_70b", &[]);
        let limits = MemoryLimits::unlimited();
        let err = CheckpointPlan::resolve(&s, &options(60), &limits, &no_env)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--np 60 is not a multiple of model.parallelism.tensor × pipeline (8 × 1 = 8), as \
             DLIO's default checkpoint mode needs: use --np 56 or 64"
        );
        let s = settings(
            "llama3_70b",
            &["checkpoint.mode=subset", "model.parallelism.data=1"],
        );
        let err = CheckpointPlan::resolve(&s, &options(16), &limits, &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--np 16 is more than model.parallelism.data 1 × "),
            "{err}"
        );
        let refused = |overrides: &[&str]| {
            let mut cfg = RawConfig::load("llama3_tiny").unwrap();
            for o in overrides {
                cfg.apply_override(o).unwrap();
            }
            CheckpointSettings::resolve(&cfg).unwrap_err().to_string()
        };
        let err = refused(&["model.parallelism.pipeline=2"]);
        assert!(
            err.starts_with("model.parallelism.pipeline = 2 (override")
                && err.contains("ZeRO stage 3 is not compatible with pipeline parallelism"),
            "{err}"
        );
        let err = refused(&["model.parallelism.data=4"]);
        assert!(err.contains("set checkpoint.mode=subset"), "{err}");
        let err = refused(&["checkpoint.mode=subset"]);
        assert!(err.contains("set model.parallelism.data"), "{err}");
        let err = refused(&["model.model_datatype=fp8"]);
        assert!(err.contains("must be one of int8"), "{err}");
        let err = refused(&["model.parallelism.zero_stage=4"]);
        assert!(err.contains("0, 1, 2 or 3"), "{err}");
        let err = refused(&["checkpoint.num_checkpoints_read=3"]);
        assert!(
            err.contains("more than checkpoint.num_checkpoints_write 2"),
            "{err}"
        );
        let err = refused(&[
            "model.parallelism.zero_stage=1",
            "model.parallelism.pipeline=3",
        ]);
        assert!(err.contains("more than model.num_layers 2"), "{err}");
    }

    #[test]
    fn over_budget_plans_print_and_the_run_check_refuses_naming_what_fits() {
        let s = settings("llama3_8b", &[]);
        let mut o = options(8);
        o.memory_cap_bytes = Some(1 << 30);
        let p = CheckpointPlan::resolve(&s, &o, &MemoryLimits::unlimited(), &no_env).unwrap();
        let err = p.check_budget().unwrap_err().to_string();
        // 8 ranks × 2 blocks × 128 MiB = 2 GiB of read buffers: the read side binds.
        assert!(err.contains("exceeds --memory-budget 1.00 GiB"), "{err}");
        // 1 GiB less 68 MiB for connections and the process, over 16 ranges: 59 MiB each.
        // One block of 128 MiB per rank would need 1 GiB + 68 MiB: not offered.
        assert!(
            err.ends_with("largest that fit: --read-range 59MiB (at --read-blocks 2)"),
            "{err}"
        );
        assert!(!err.contains("--part-size"), "{err}");
        o.memory_cap_bytes = Some(4 << 30);
        let p = CheckpointPlan::resolve(&s, &o, &MemoryLimits::unlimited(), &no_env).unwrap();
        assert_eq!(p.check_budget().unwrap().pool_bytes, 2 << 30);
    }

    #[test]
    fn the_keys_read_are_exactly_the_listed_ones() {
        // A workload with every key set, and one with none (every default taken).
        let full = RawConfig::load("llama3_70b").unwrap();
        CheckpointSettings::resolve(&full).unwrap();
        let minimal = RawConfig::parse(
            "t",
            "t.yaml",
            "workflow:\n  train: False\n  checkpoint: True\ncheckpoint:\n  num_checkpoints_write: 1\n",
        )
        .unwrap();
        CheckpointSettings::resolve(&minimal).unwrap();
        let shared: std::collections::BTreeSet<String> = crate::config::keys::READ
            .iter()
            .map(|k| k.to_string())
            .chain(
                crate::config::keys::STORAGE_OPTIONS_READ
                    .iter()
                    .map(|o| format!("storage.storage_options.{o}")),
            )
            .collect();
        let read: std::collections::BTreeSet<String> = full
            .keys_read()
            .into_iter()
            .chain(minimal.keys_read())
            .filter(|k| !shared.contains(k))
            .collect();
        let listed: std::collections::BTreeSet<String> = crate::config::keys::CHECKPOINT_READ
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(read, listed);
        // Each is a DLIO key, so a training workload accepts it as it did.
        for key in crate::config::keys::CHECKPOINT_READ {
            assert!(crate::config::DLIO_KEYS.contains(key), "{key}");
        }
    }

    #[test]
    fn training_workloads_are_not_checkpoint_workloads() {
        let is_checkpoint = crate::workload::is_checkpoint;
        assert!(!is_checkpoint(&RawConfig::load("flux_b200").unwrap()).unwrap());
        let mut cfg = RawConfig::load("llama3_8b").unwrap();
        cfg.apply_override("workflow.train=True").unwrap();
        assert!(!is_checkpoint(&cfg).unwrap());
        let s = settings("llama3_8b", &[]);
        let ignored: Vec<&str> = s.ignored_keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(ignored, ["framework", "workflow.generate_data"]);
        assert!(s.fsync && !s.rank_sync && s.randomize_tensor);
        assert_eq!(s.time_between_checkpoints_s, 5.0);
    }
}
