//! `ringload plan` of a checkpoint workload for people: the model and its sharding, DLIO's
//! totals, every distinct object with the ranks that write it, per-rank and per-host bytes,
//! the I/O shape and the memory budget.

use std::fmt::Write;

use crate::checkpoint::{CheckpointMode, CheckpointPlan, PlannedObject};
use crate::units::{bytes, count, counted, seconds};

/// How many rank groups (and hosts) are listed without `--full`.
const GROUPS_SHOWN: usize = 12;

/// Ranks that write the same objects but for their names' rank numbers, as one row.
struct RankGroup<'a> {
    ranks: Vec<usize>,
    objects: &'a [PlannedObject],
}

/// A name with each run of digits as one `#`: the files of one kind (`layer_#-model_#_…`).
fn kind(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('#') {
            out.push('#');
        }
    }
    out
}

/// A rank's objects by kind and size: ranks with the same shape differ only in the numbers
/// in their names (data-parallel, model-parallel and layer indices).
fn shape_of(objects: &[PlannedObject]) -> Vec<(String, u64)> {
    objects.iter().map(|o| (kind(&o.name), o.bytes)).collect()
}

fn groups(plan: &CheckpointPlan) -> Vec<RankGroup<'_>> {
    let mut out: Vec<(Vec<(String, u64)>, RankGroup<'_>)> = Vec::new();
    for (rank, objects) in plan.ranks.iter().enumerate() {
        let shape = shape_of(objects);
        match out.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, group)) => group.ranks.push(rank),
            None => out.push((
                shape,
                RankGroup {
                    ranks: vec![rank],
                    objects,
                },
            )),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

/// `0–7`, `0–3, 8–11`, or the first spans and a count.
fn rank_spans(ranks: &[usize]) -> String {
    let mut spans: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        spans.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}–{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    if spans.len() > 4 {
        format!("{}, … ({} spans)", spans[..3].join(", "), spans.len())
    } else {
        spans.join(", ")
    }
}

/// Renders the plan. `full` lists every rank's objects and every host.
pub fn render(plan: &CheckpointPlan, full: bool) -> String {
    let s = &plan.settings;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "ringload plan: {} ({}), model {}, checkpoint workload",
        s.workload.name, s.workload.path, s.model_name
    );
    render_model(w, plan);
    render_checkpoint(w, plan);
    render_objects(w, plan, full);
    render_hosts(w, plan, full);
    render_io(w, plan);
    render_memory(w, plan);
    render_notes(w, plan);
    out
}

/// The Model section: the transformer's shape or the model's size, and its sharding.
fn render_model(w: &mut String, plan: &CheckpointPlan) {
    let s = &plan.settings;
    let par = &plan.parallelism;
    let _ = writeln!(w, "\nModel");
    let t = &s.model.transformer;
    if s.model.is_transformer || s.model.num_layers > 0 {
        let _ = writeln!(
            w,
            "  transformer {} layers, hidden {}, ffn {}, heads {} (kv {}), vocab {}; {} parameters",
            s.model.num_layers,
            count(t.hidden_size),
            count(t.ffn_hidden_size),
            t.num_attention_heads,
            t.num_kv_heads,
            count(t.vocab_size),
            count(plan.total_parameters)
        );
    }
    if !s.model.is_transformer && s.model.model_size_bytes > 0 {
        let _ = writeln!(
            w,
            "  model       {} B (model.model_size_bytes, type not transformer)",
            count(s.model.model_size_bytes)
        );
    }
    let mode = match s.mode {
        CheckpointMode::Default => "default".to_string(),
        CheckpointMode::Subset { data } => format!("subset of a {}-rank job", data * par.model()),
    };
    let _ = writeln!(
        w,
        "  sharding    NP {} = data {} × tensor {} × pipeline {}, ZeRO-{}, mode {mode}; {} model, {} optimizer",
        plan.np,
        par.data,
        par.tensor,
        par.pipeline,
        par.zero_stage,
        s.model_datatype,
        s.optimizer_datatype
    );
}

/// The Checkpoint section: its size, objects, the write and restore sequence, bytes per rank.
fn render_checkpoint(w: &mut String, plan: &CheckpointPlan) {
    let s = &plan.settings;
    let _ = writeln!(w, "\nCheckpoint");
    let _ = writeln!(
        w,
        "  size        checkpoint_size_GB {:.2} (GiB, as DLIO reports it: model {:.2} + optimizer {:.2}); {} B",
        plan.checkpoint_size_gb,
        plan.model_bytes as f64 / (1u64 << 30) as f64,
        plan.optimizer_bytes as f64 / (1u64 << 30) as f64,
        count(plan.checkpoint_bytes)
    );
    if plan.written_bytes != plan.checkpoint_bytes {
        let _ = writeln!(
            w,
            "  written     {} B per checkpoint",
            count(plan.written_bytes)
        );
    }
    let _ = writeln!(
        w,
        "  objects     {} per checkpoint under {}global_epoch1_step<k>/",
        count(plan.objects_per_checkpoint as u64),
        plan.prefix()
    );
    let _ = writeln!(
        w,
        "  sequence    {} written, then {} restored by the same ranks; {} before each; rank_sync {}; randomize_tensor {}",
        s.num_checkpoints_write,
        s.num_checkpoints_read,
        seconds(s.time_between_checkpoints_s),
        s.rank_sync,
        s.randomize_tensor
    );
    let _ = writeln!(
        w,
        "  content     {}",
        if s.randomize_tensor {
            format!(
                "version {}: {}",
                crate::content::VERSION,
                plan.io.content.describe()
            )
        } else {
            "zeros (randomize_tensor False)".to_string()
        }
    );
    let per_rank: Vec<u64> = (0..plan.ranks.len()).map(|r| plan.rank_bytes(r)).collect();
    let (lo, hi) = (
        per_rank.iter().min().copied().unwrap_or(0),
        per_rank.iter().max().copied().unwrap_or(0),
    );
    let _ = writeln!(
        w,
        "  per rank    {}{}",
        bytes(lo),
        if lo == hi {
            " (every rank)".to_string()
        } else {
            format!(" to {}", bytes(hi))
        }
    );
}

/// The Objects per rank section: each group of ranks alike and its objects (every rank's with
/// `full`).
fn render_objects(w: &mut String, plan: &CheckpointPlan, full: bool) {
    let all = groups(plan);
    let _ = writeln!(
        w,
        "\nObjects per rank ({}; names as the first rank of each writes them)",
        match all.len() {
            1 => "every rank alike".to_string(),
            n => format!("{n} groups of ranks alike"),
        }
    );
    let shown = if full { usize::MAX } else { GROUPS_SHOWN };
    if full {
        for (rank, objects) in plan.ranks.iter().enumerate() {
            let _ = writeln!(w, "  rank {rank}: {}", bytes(plan.rank_bytes(rank)));
            for o in objects {
                let _ = writeln!(w, "    {:>17} B  {}", count(o.bytes), o.name);
            }
        }
    } else {
        for group in all.iter().take(shown) {
            let total: u64 = group.objects.iter().map(|o| o.bytes).sum();
            let _ = writeln!(
                w,
                "  ranks {} ({}), each: {}",
                rank_spans(&group.ranks),
                group.ranks.len(),
                if group.objects.is_empty() {
                    "nothing".to_string()
                } else {
                    format!(
                        "{}, {}",
                        counted(group.objects.len() as u64, "object"),
                        bytes(total)
                    )
                }
            );
            let runs = collapse(group.objects);
            for (first, last, n) in runs {
                let name = if n == 1 {
                    first.name.clone()
                } else {
                    format!("{} … {} ({n})", first.name, last.name)
                };
                let _ = writeln!(w, "    {:>17} B  {name}", count(first.bytes));
            }
        }
        if all.len() > shown {
            let _ = writeln!(
                w,
                "  … {} more groups (--full lists every rank)",
                all.len() - shown
            );
        }
    }
}

/// The Hosts section: each host's ranks and bytes, consecutive hosts alike as one line (each
/// host with `full`).
fn render_hosts(w: &mut String, plan: &CheckpointPlan, full: bool) {
    let _ = writeln!(w, "\nHosts ({}, ranks in contiguous blocks)", plan.hosts);
    // Consecutive hosts that write the same bytes, as one line.
    let mut runs: Vec<(usize, usize, u64)> = Vec::new();
    for (host, &b) in plan.host_bytes.iter().enumerate() {
        match runs.last_mut() {
            Some((_, last, bytes)) if *bytes == b && !full => *last = host,
            _ => runs.push((host, host, b)),
        }
    }
    for (first, last, b) in runs {
        let (from, to) = (plan.host_ranks(first as u32), plan.host_ranks(last as u32));
        let hosts = if first == last {
            format!("host {first}")
        } else {
            format!("hosts {first}–{last}")
        };
        let _ = writeln!(
            w,
            "  {hosts}: ranks {}–{}, {} per checkpoint{}",
            from.start,
            to.end.saturating_sub(1),
            bytes(b),
            if first == last { "" } else { " each" }
        );
    }
}

/// The I/O per rank section: multipart writes, ranged reads, SEND_ZC.
fn render_io(w: &mut String, plan: &CheckpointPlan) {
    let io = &plan.io;
    let _ = writeln!(w, "\nI/O per rank");
    let largest = plan.largest_object_bytes();
    let _ = writeln!(
        w,
        "  write       multipart uploads of {} parts, {} in flight{}; the largest object {} parts",
        bytes(io.part_bytes),
        io.parts_in_flight,
        if io.single_put_below > 0 {
            format!("; objects under {} as one PUT", bytes(io.single_put_below))
        } else {
            "; every object a multipart upload, as the DLIO fork".to_string()
        },
        count(largest.div_ceil(io.part_bytes.max(1)))
    );
    let _ = writeln!(
        w,
        "  read        {} parallel blocks of each object, ranged GETs of up to {}",
        io.read_blocks,
        bytes(io.read_range_bytes)
    );
    let restore = if io.restore_check {
        "on: one HEAD per object (x-amz-checksum-mode: ENABLED, a request DLIO does not send), \
         its FULL_OBJECT CRC checked against the CRCs of the blocks read; --restore-checksum \
         off sends DLIO's requests only"
    } else if io.verify {
        "off: --verify checks every restored byte against the generator"
    } else {
        "off (--restore-checksum off): DLIO's requests only"
    };
    let _ = writeln!(w, "  restore     checksum {restore}");
    let _ = writeln!(w, "  send_zc     {}", plan.send_zc);
    let _ = writeln!(
        w,
        "  checksum    {}; {}",
        checksum_line(io.checksum, io.checksum_form),
        payload_line(io.payload)
    );
}

/// What `--checksum` sends, in words: the algorithm, its form and how uploads complete.
fn checksum_line(
    checksum: crate::checksum::Checksum,
    form: crate::checkpoint::ChecksumForm,
) -> String {
    let carried = match form {
        crate::checkpoint::ChecksumForm::Header => {
            "header on each part and PUT (--checksum-form trailer: after the body)"
        }
        crate::checkpoint::ChecksumForm::Trailer => {
            "as an aws-chunked trailer after each part and PUT"
        }
    };
    match checksum.algorithm() {
        Some(a) => format!(
            "{checksum} (x-amz-checksum-{checksum} {carried}, {} at completion)",
            a.object_type()
        ),
        None => "none (no x-amz-checksum-* header)".into(),
    }
}

/// What `--payload-signing` does to an upload's body, in words.
fn payload_line(payload: crate::checkpoint::PayloadSigning) -> &'static str {
    match payload {
        crate::checkpoint::PayloadSigning::Unsigned => {
            "bodies unsigned (UNSIGNED-PAYLOAD; --payload-signing sha256 signs them)"
        }
        crate::checkpoint::PayloadSigning::Sha256 => {
            "bodies signed with keys (x-amz-content-sha256: the body's SHA-256, computed as each \
             part is generated)"
        }
        crate::checkpoint::PayloadSigning::Streaming => {
            "bodies signed with keys as aws-chunked, one chunk each (STREAMING-AWS4-HMAC-SHA256-\
             PAYLOAD: its SHA-256 computed as each part is generated)"
        }
    }
}

/// The Memory section of the busiest host: buffers, connections, the total, a refusal.
fn render_memory(w: &mut String, plan: &CheckpointPlan) {
    let io = &plan.io;
    let m = &plan.memory;
    let busiest = plan.host_ranks(0).len();
    let _ = writeln!(
        w,
        "\nMemory of the busiest host (checked before anything moves)"
    );
    let _ = writeln!(
        w,
        "  buffers     {busiest} ranks × max({} parts, {} blocks) × max({}, {}) = {} (a buffer \
         per connection, registered)",
        io.parts_in_flight,
        io.read_blocks,
        bytes(io.part_bytes),
        bytes(io.read_range_bytes),
        bytes(m.pool_bytes)
    );
    let _ = writeln!(
        w,
        "  other       {} connections × {} = {}; process {}",
        m.connections,
        bytes(crate::budget::CONNECTION_OVERHEAD_BYTES),
        bytes(m.connection_bytes),
        bytes(m.overhead_bytes)
    );
    let _ = writeln!(w, "  total       {}", super::budget_total_line(m));
    if let Some(over) = &plan.over_budget {
        let _ = writeln!(w, "  ! a run here would be refused: {over}");
    }
}

/// The Notes section and the keys a checkpoint run does not use.
fn render_notes(w: &mut String, plan: &CheckpointPlan) {
    let s = &plan.settings;
    let _ = writeln!(w, "\nNotes");
    for note in &plan.notes {
        let _ = writeln!(w, "  ! {note}");
    }
    if let Some(line) =
        super::ignored_keys_line(&s.ignored_keys, "keys a checkpoint run does not use")
    {
        let _ = writeln!(w, "\n{line}");
    }
}

/// Consecutive objects of the same size whose names differ only in one number (a pipeline
/// stage's layer files), as `(first, last, count)`.
fn collapse(objects: &[PlannedObject]) -> Vec<(&PlannedObject, &PlannedObject, usize)> {
    let mut runs: Vec<(&PlannedObject, &PlannedObject, usize)> = Vec::new();
    for o in objects {
        if let Some((first, last, n)) = runs.last_mut()
            && last.bytes == o.bytes
            && kind(&last.name) == kind(&o.name)
            && first.name != o.name
        {
            *last = o;
            *n += 1;
            continue;
        }
        runs.push((o, o, 1));
    }
    runs
}
