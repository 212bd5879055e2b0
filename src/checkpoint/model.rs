//! The checkpoint arithmetic of DLIO's `base_checkpointing.py` (reference part A2): what each
//! rank holds and writes, in DLIO's order and with DLIO's integer arithmetic.
//!
//! - Total parameters `N = 2·V·h + L·(2h + h(h + 2·kvd) + h² + 3h·ffn) + h`, with
//!   `kvd = (h / heads) · kv_heads` ([`total_parameters`]).
//! - Layer indices: 0 the embedding, 1..=L the transformer layers, L+1 the lm_head, L+2 the
//!   final norm. Pipeline stage p owns `L / pp` consecutive layers, one more if
//!   `p < L % pp`; stage 0 also owns 0, the last stage L+1 and L+2 ([`stage_layers`]).
//! - Each layer's tensors are divided by tensor parallelism and, under ZeRO-3, by data
//!   parallelism, floor division in DLIO's order ([`layer_tensors`]); the norm is never divided
//!   by tp, so every tensor-parallel rank writes it whole.
//! - Who writes what ([`rank_objects`]): ZeRO-0, only ranks below `mp` (one
//!   `zero_pp_rank_…_model_states` file with all their layers); ZeRO-1 and 2, the `dp_r = 0`
//!   ranks write the model (`layer_{i}-model_{mp_r}_model_states` per layer with pp > 1,
//!   `model_{mp_r}_model_states` with pp = 1); ZeRO-3, every rank its shard. Every writing rank
//!   writes `zero_pp_rank_{dp_r}_mp_rank_{mp_r}_optim_states`: six tensors `[n, 5h] × 3` of the
//!   optimizer datatype, `n = N / (dp·mp)` (ZeRO-0: `N / mp`). Model files come first.
//! - `checkpoint_size_GB` is DLIO's allreduce of what each rank *allocates* ([`Layout`]): the
//!   same as the bytes written, except under ZeRO-2 with dp > 1, where every rank allocates the
//!   model and only `dp_r = 0` writes it (DLIO counts them all, so ringload does too), and for a
//!   non-transformer model, whose size is `model.model_size_bytes` once.
//!
//! Pure integers; no I/O. The tests reproduce the reference's worked totals.

use super::object::PlannedObject;

/// The transformer's dimensions (`model.transformer.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Transformer {
    pub vocab_size: u64,
    pub hidden_size: u64,
    pub ffn_hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_kv_heads: u64,
}

impl Transformer {
    /// DLIO's defaults.
    pub const DLIO_DEFAULT: Transformer = Transformer {
        vocab_size: 32000,
        hidden_size: 2048,
        ffn_hidden_size: 8192,
        num_attention_heads: 32,
        num_kv_heads: 8,
    };

    /// Columns of the K and V matrices: head size × kv heads.
    fn kv_dim(&self) -> u64 {
        self.hidden_size / self.num_attention_heads * self.num_kv_heads
    }
}

/// The model a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelSpec {
    /// `model.num_layers`; 0 means no layer or optimizer state (DLIO's ≤ 0).
    pub num_layers: u64,
    pub transformer: Transformer,
    /// `model.type` is `transformer`; otherwise a model of `model_size_bytes` is written too.
    pub is_transformer: bool,
    /// `model.model_size_bytes`: one `model_states-{rank}` object, for non-transformer models.
    pub model_size_bytes: u64,
    /// Bytes per element of `model.model_datatype` and `model.optimizer_datatype`.
    pub model_dtype_bytes: u64,
    pub optimizer_dtype_bytes: u64,
}

/// How the model is sharded (`model.parallelism.*`), with the process count resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Parallelism {
    pub tensor: u64,
    pub pipeline: u64,
    /// Data parallelism: `np / (tp·pp)`, or `model.parallelism.data` in subset mode.
    pub data: u64,
    pub zero_stage: u8,
}

impl Parallelism {
    /// Model parallelism: tp × pp.
    pub fn model(&self) -> u64 {
        self.tensor * self.pipeline
    }
}

/// A rank's place in the 3-D grid: `tp_r = r % tp`, `pp_r = (r / tp) % pp`, `dp_r = r / mp`,
/// `mp_r = r % mp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankPosition {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub mp: u64,
}

pub fn position(rank: u64, par: &Parallelism) -> RankPosition {
    RankPosition {
        tp: rank % par.tensor,
        pp: (rank / par.tensor) % par.pipeline,
        dp: rank / par.model(),
        mp: rank % par.model(),
    }
}

/// N, DLIO's `get_num_parameters` (0 without layers).
pub fn total_parameters(spec: &ModelSpec) -> u64 {
    if spec.num_layers == 0 {
        return 0;
    }
    let t = &spec.transformer;
    let h = t.hidden_size;
    let embedding = t.vocab_size * h;
    let per_layer = h
        + h * (h + 2 * t.kv_dim())
        + h * h
        + h
        + 2 * t.ffn_hidden_size * h
        + t.ffn_hidden_size * h;
    embedding + per_layer * spec.num_layers + h + embedding
}

/// The layer indices pipeline stage `stage` owns (inclusive), DLIO's `get_layer_index`.
pub fn stage_layers(num_layers: u64, pipeline: u64, stage: u64) -> std::ops::RangeInclusive<u64> {
    let n = num_layers / pipeline;
    let m = num_layers % pipeline;
    let (mut start, mut end) = if stage < m {
        let start = stage * (n + 1) + 1;
        (start, start + n)
    } else {
        let start = m * (n + 1) + (stage - m) * n + 1;
        // `start + n - 1`; a stage with no layer (n = 0) is refused before (L ≥ pp).
        (start, (start + n).saturating_sub(1))
    };
    if stage == pipeline - 1 {
        end = num_layers + 2;
    }
    if stage == 0 {
        start = 0;
    }
    start..=end
}

/// The elements of each tensor of layer `layer` on one rank, DLIO's `get_layer_parameters`:
/// floor division by tp, then by the sharding factor (dp under ZeRO-3, else 1).
pub fn layer_tensors(spec: &ModelSpec, par: &Parallelism, layer: u64) -> Vec<u64> {
    let t = &spec.transformer;
    let (h, tp) = (t.hidden_size, par.tensor);
    let sf = if par.zero_stage < 3 { 1 } else { par.data };
    let l = spec.num_layers;
    if layer == 0 || layer == l + 1 {
        vec![h * t.vocab_size / tp / sf]
    } else if layer == l + 2 {
        vec![h / sf]
    } else {
        vec![
            h / sf,
            h * (h + 2 * t.kv_dim()) / tp / sf,
            h * h / tp / sf,
            h / sf,
            h * 2 * t.ffn_hidden_size / tp / sf,
            h * t.ffn_hidden_size / tp / sf,
        ]
    }
}

/// Bytes of layer `layer` on one rank.
pub fn layer_bytes(spec: &ModelSpec, par: &Parallelism, layer: u64) -> u64 {
    layer_tensors(spec, par, layer).iter().sum::<u64>() * spec.model_dtype_bytes
}

/// Bytes of one writing rank's optimizer state: six tensors `[n, 5h, n, 5h, n, 5h]`, none
/// when n is 0.
pub fn optimizer_bytes(spec: &ModelSpec, par: &Parallelism) -> u64 {
    let n_total = total_parameters(spec);
    let n = if par.zero_stage > 0 {
        n_total / (par.data * par.model())
    } else {
        n_total / par.model()
    };
    if spec.num_layers == 0 || n == 0 {
        return 0;
    }
    (3 * n + 15 * spec.transformer.hidden_size) * spec.optimizer_dtype_bytes
}

/// What one rank writes per checkpoint, in order, and what DLIO counts for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankState {
    pub objects: Vec<PlannedObject>,
    /// Layer bytes the rank allocates (DLIO's `model_checkpoint_size` before the allreduce).
    pub model_counted_bytes: u64,
    /// Optimizer bytes it allocates and writes.
    pub optimizer_bytes: u64,
}

/// The objects rank `rank` writes per checkpoint (file names without the folder), DLIO's
/// `save_checkpoint`.
pub fn rank_objects(spec: &ModelSpec, par: &Parallelism, rank: u64) -> RankState {
    let pos = position(rank, par);
    let mut state = RankState {
        objects: Vec::new(),
        model_counted_bytes: 0,
        optimizer_bytes: 0,
    };
    // ZeRO-0: only the first data-parallel instance (ranks below mp) checkpoints.
    if par.zero_stage == 0 && rank >= par.model() {
        return state;
    }
    let object = |name: String, bytes: u64| PlannedObject {
        name: format!("{name}.pt"),
        bytes,
    };
    if !spec.is_transformer && spec.model_size_bytes > 0 {
        state.objects.push(object(
            format!("model_states-{rank}"),
            spec.model_size_bytes,
        ));
    }
    // ZeRO-1 ranks other than dp_r 0 do not even allocate the model; ZeRO-2 ones do.
    let holds_model = spec.num_layers > 0 && !(par.zero_stage == 1 && pos.dp != 0);
    if holds_model {
        let layers = stage_layers(spec.num_layers, par.pipeline, pos.pp);
        state.model_counted_bytes = layers.clone().map(|l| layer_bytes(spec, par, l)).sum();
        match par.zero_stage {
            1 | 2 if pos.dp != 0 => {}
            1 | 2 if par.pipeline > 1 => {
                for layer in layers {
                    state.objects.push(object(
                        format!("layer_{layer}-model_{}_model_states", pos.mp),
                        layer_bytes(spec, par, layer),
                    ));
                }
            }
            1 | 2 => state.objects.push(object(
                format!("model_{}_model_states", pos.mp),
                state.model_counted_bytes,
            )),
            _ => state.objects.push(object(
                format!("zero_pp_rank_{}_mp_rank_{}_model_states", pos.dp, pos.mp),
                state.model_counted_bytes,
            )),
        }
    }
    state.optimizer_bytes = optimizer_bytes(spec, par);
    if state.optimizer_bytes > 0 {
        state.objects.push(object(
            format!("zero_pp_rank_{}_mp_rank_{}_optim_states", pos.dp, pos.mp),
            state.optimizer_bytes,
        ));
    }
    state
}

/// Every rank's objects and DLIO's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Per rank, its objects in write order.
    pub ranks: Vec<Vec<PlannedObject>>,
    /// DLIO's model size (bytes): the allreduce of what ranks allocate, or
    /// `model.model_size_bytes` for a non-transformer model.
    pub model_bytes: u64,
    pub optimizer_bytes: u64,
    /// Σ of every object's bytes.
    pub written_bytes: u64,
}

impl Layout {
    /// DLIO's `checkpoint_size` in bytes: model + optimizer. `checkpoint_size_GB` is this
    /// ÷ 2³⁰ (GiB, despite the name).
    pub fn checkpoint_bytes(&self) -> u64 {
        self.model_bytes + self.optimizer_bytes
    }
}

/// The checkpoint of `np` ranks. The caller has checked the parallelism (see
/// `CheckpointSettings::parallelism`).
pub fn layout(spec: &ModelSpec, par: &Parallelism, np: u64) -> Layout {
    let mut out = Layout {
        ranks: Vec::with_capacity(np as usize),
        model_bytes: 0,
        optimizer_bytes: 0,
        written_bytes: 0,
    };
    for rank in 0..np {
        let state = rank_objects(spec, par, rank);
        out.model_bytes += state.model_counted_bytes;
        out.optimizer_bytes += state.optimizer_bytes;
        out.written_bytes += state.objects.iter().map(|o| o.bytes).sum::<u64>();
        out.ranks.push(state.objects);
    }
    if !spec.is_transformer && spec.model_size_bytes > 0 {
        out.model_bytes = spec.model_size_bytes;
    }
    out
}

/// Bytes per element of a DLIO datatype name (`base_checkpointing.py`'s `get_datatype_size`).
pub fn datatype_bytes(name: &str) -> Option<u64> {
    match name {
        "int8" | "uint8" => Some(1),
        "fp16" | "bf16" => Some(2),
        "fp32" => Some(4),
        "fp64" => Some(8),
        _ => None,
    }
}
