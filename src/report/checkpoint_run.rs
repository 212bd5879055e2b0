//! The report of a checkpoint run: DLIO's figures first (rank 0's, as DLIO publishes them),
//! then a row per checkpoint with the spread DLIO hides, then what each phase cost.

use std::fmt::Write;

use crate::rank::checkpoint::Phase;
use crate::summary::Outcome;
use crate::summary::checkpoint::{CheckpointSummary, DlioCheckpointMetric, PhaseIo, gib};
use crate::units::{bytes, count};

/// The report of `summary`: DLIO's headline only for a phase that completed.
pub fn render(summary: &CheckpointSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} checkpoint on {} ranks, {} engine: {:.2} GiB per checkpoint (DLIO's \
         checkpoint_size_GB) in {} objects",
        summary.workload,
        summary.np,
        summary.engine,
        gib(summary.checkpoint_bytes),
        count(summary.objects_per_checkpoint as u64)
    );
    if summary.outcome != Outcome::Completed {
        let word = match summary.outcome {
            Outcome::Interrupted => "INTERRUPTED",
            _ => "FAILED",
        };
        let phases: Vec<&str> = [("save", &summary.save), ("load", &summary.load)]
            .into_iter()
            .filter(|(_, io)| io.as_ref().is_some_and(|io| !io.completed))
            .map(|(name, _)| name)
            .collect();
        let _ = writeln!(
            out,
            "  {word}: {}\n  no DLIO figure for a phase that did not complete{}; the rows and \
             bytes below are up to then",
            summary
                .failure
                .as_deref()
                .unwrap_or("the run did not complete"),
            match phases.as_slice() {
                [] => String::new(),
                names => format!(" ({})", names.join(", ")),
            }
        );
    }
    let empty = DlioCheckpointMetric::default();
    let m = summary.metric.as_ref().unwrap_or(&empty);
    let dlio =
        |what: &str, mean: Option<f64>, sd: Option<f64>, d: Option<f64>, dsd: Option<f64>| match (
            mean, sd, d, dsd,
        ) {
            (Some(mean), Some(sd), Some(d), Some(dsd)) => format!(
                "  {what}: {mean:.2} ± {sd:.2} GiB/s, {d:.2} ± {dsd:.2} s per checkpoint \
                 (DLIO's figures: rank 0's, mean ± stdev over checkpoints)\n"
            ),
            _ => String::new(),
        };
    out.push_str(&dlio(
        "save",
        m.save_checkpoint_io_mean_GB_per_second,
        m.save_checkpoint_io_stdev_GB_per_second,
        m.save_checkpoint_duration_mean_seconds,
        m.save_checkpoint_duration_stdev_seconds,
    ));
    out.push_str(&dlio(
        "load",
        m.load_checkpoint_io_mean_GB_per_second,
        m.load_checkpoint_io_stdev_GB_per_second,
        m.load_checkpoint_duration_mean_seconds,
        m.load_checkpoint_duration_stdev_seconds,
    ));
    let _ = writeln!(
        out,
        "\n  phase step  rank0 s  rank0 GiB/s  slowest rank (s)  fastest rank (s)  all ranks s  all GiB/s"
    );
    for r in &summary.checkpoints {
        let _ = writeln!(
            out,
            "  {:<5} {:>4}  {:>7.2}  {:>11.2}  {:>7} ({:>6.2})  {:>7} ({:>6.2})  {:>11.2}  {:>9.2}",
            match r.phase {
                Phase::Save => "save",
                Phase::Load => "load",
            },
            r.step,
            r.rank0_duration_s,
            r.rank0_gib_per_second,
            r.slowest_rank,
            r.slowest_rank_duration_s,
            r.fastest_rank,
            r.fastest_rank_duration_s,
            r.all_ranks_s,
            r.all_ranks_gib_per_second
        );
    }
    out.push('\n');
    if let Some(io) = &summary.save {
        out.push_str(&phase_line(
            if io.completed {
                "written"
            } else {
                "written before it stopped"
            },
            io,
        ));
    }
    if let Some(io) = &summary.load {
        out.push_str(&phase_line(
            if io.completed {
                "restored"
            } else {
                "restored before it stopped"
            },
            io,
        ));
    }
    if let Some(rss) = summary.peak_rss_bytes {
        let _ = writeln!(
            out,
            "  peak RSS {} of a {} budget",
            bytes(rss),
            bytes(summary.memory_budget_bytes)
        );
    }
    if summary.io_shape.verify {
        let _ = writeln!(out, "  {}", verified_line(summary));
    }
    if let Some(s) = summary.after_write_run_s {
        let _ = writeln!(
            out,
            "  started {s:.1} s after the write run ended (MLPerf's rules allow 30 s)"
        );
    }
    if let Some(files) = &summary.target.files {
        let _ = writeln!(out, "  on {}", super::files::place(files));
        for line in super::files::lines(files) {
            let _ = writeln!(out, "  {line}");
        }
    }
    if !summary.rules.is_empty() {
        let _ = writeln!(out, "\n  MLPerf's checkpointing rules:");
        for rule in &summary.rules {
            let _ = writeln!(out, "  {rule}");
        }
    }
    for note in &summary.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    // Last: what limited the run.
    let _ = writeln!(out, "  limit: {}", summary.limit.line);
    out
}

fn phase_line(verb: &str, io: &PhaseIo) -> String {
    let per_gib = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
    let mut line = format!(
        "  {verb}: {} in {} ({} retries) over {:.2} s; latency p50 {:.1} ms, p99 {:.1} \
         ms; client CPU {} s/GiB",
        bytes(io.bytes),
        io.requests_by_kind.describe(),
        count(io.retries),
        io.wall_s,
        io.latency_ms.p50,
        io.latency_ms.p99,
        per_gib(io.client_cpu_s_per_gib),
    );
    if io.generate_cpu_s_per_gib.is_some() {
        let _ = write!(
            line,
            " (+ generator {} s/GiB)",
            per_gib(io.generate_cpu_s_per_gib)
        );
    }
    if io.checksum_cpu_s > 0.0 {
        let _ = write!(
            line,
            " (+ checksum {} s/GiB)",
            per_gib(io.checksum_cpu_s_per_gib)
        );
    }
    if io.total_cpu_s_per_gib != io.client_cpu_s_per_gib {
        let _ = write!(line, " = {} s/GiB in all", per_gib(io.total_cpu_s_per_gib));
    }
    if io.server_cpu_s_per_gib.is_some() {
        let _ = write!(
            line,
            "; server CPU {} s/GiB",
            per_gib(io.server_cpu_s_per_gib)
        );
    }
    if io.zc_sends > 0 {
        let _ = write!(
            line,
            "; SEND_ZC: {} of {} sends copied by the kernel",
            count(io.zc_copied),
            count(io.zc_sends)
        );
    }
    if io.settled_by_head > 0 {
        let _ = write!(
            line,
            "; {} completions confirmed by a HEAD (their answers were lost)",
            count(io.settled_by_head)
        );
    }
    if io.checksum_checked + io.checksum_unchecked > 0 {
        let _ = write!(
            line,
            "; {} objects' CRCs checked against the store's (a HEAD each)",
            count(io.checksum_checked)
        );
        if io.checksum_unchecked > 0 {
            let _ = write!(
                line,
                ", {} not (the store returned no FULL_OBJECT CRC)",
                count(io.checksum_unchecked)
            );
        }
    }
    if io.checksum_unconfirmed > 0 {
        let _ = write!(
            line,
            "; {} completions carried no checksum back (does the store check them? \
             --checksum none sends none)",
            count(io.checksum_unconfirmed)
        );
    }
    if io.aborted > 0 {
        let _ = write!(line, "; {} uploads aborted", count(io.aborted));
    }
    line.push('\n');
    line
}

/// What `--verify` checked: the restores byte for byte in the client, and the writes in the
/// embedded sink as they arrived (another store's writes are not checked).
fn verified_line(summary: &CheckpointSummary) -> String {
    let restored = summary.load.as_ref().map_or(0, |l| l.bytes);
    let writes = if summary.target.files.is_some() {
        "the files written are checked when they are read back"
    } else if summary.target.embedded {
        "every byte written was checked by the embedded sink as it arrived, against the same \
         generator (a mismatch fails its upload)"
    } else {
        "the writes were not checked (the store is not ringload's)"
    };
    format!(
        "verified: every byte restored ({}) checked against the content generator in the \
         client ({:.3} CPU-s); {writes}",
        bytes(restored),
        summary.load.as_ref().map_or(0.0, |l| l.verify_cpu_s)
    )
}
