//! `ringload run` for people: the study's table row, then what the study computed by hand
//! (implied I/O wait, projected AU) and what DLIO cannot show (bytes on the wire, latency, CPU
//! per GiB, peak memory). Also the per-step CSV of `--output`.

use std::fmt::Write;

use crate::metrics::{Distribution, RequestStats};
use crate::plan::Plan;
use crate::rank::RankRecord;
use crate::summary::RunSummary;
use crate::summary::dlio::{DlioTrainMetric, Expectation};
use crate::units::{bytes, count, counted, seconds};

/// The header of the study's results table (reference/flux-study.md).
/// `nominal MiB/s` is DLIO's "I/O MB/s" (samples/s × record size), not the bytes on the wire:
/// [`MIB_PER_S_LEGEND`] says so wherever both appear.
pub const TABLE_HEADER: &str = "| NP | RT | AU% | samples/s | samp/s/GPU | nominal MiB/s | Wall (s) | Steps | Notes |\n|---|---|---|---|---|---|---|---|---|";

/// What the two MiB/s figures are, under every table or line that shows both.
pub const MIB_PER_S_LEGEND: &str = "nominal MiB/s is DLIO's I/O figure, samples/s × record size \
    (first step excluded); MiB/s on the wire is the bytes received (GETs as coalesced, footers \
    apart) by the end of the last step over the whole wall time, so the two differ";

fn or_dash(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "—".to_string(), format)
}

/// A number with thousands separators and no decimals: `1,911`.
fn whole(x: f64) -> String {
    count(x.round().max(0.0) as u64)
}

/// One row of the study's table.
pub fn table_row(s: &RunSummary) -> String {
    let per_gpu = s.samples_per_s.map(|v| v / f64::from(s.np.max(1)));
    let mut notes = Vec::new();
    if !s.au_target_met {
        notes.push(format!("AU < {}%", s.au_target_percent));
    }
    if s.errors > 0 {
        notes.push(counted(s.errors, "error"));
    }
    if s.files_for_stable_au.is_some() {
        notes.push(format!("{} steps: AU not stable", s.steps_per_rank));
    }
    notes.push(s.engine.to_string());
    format!(
        "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
        s.np,
        s.read_threads,
        or_dash(s.au_percent, |v| format!("{v:.1}")),
        or_dash(s.samples_per_s, whole),
        or_dash(per_gpu, whole),
        or_dash(s.io_mib_per_s, whole),
        s.wall_s,
        s.steps_per_rank,
        notes.join("; ")
    )
}

/// DLIO's figures as its summary.json `metric` has them: mean (population stdev) over epochs.
pub fn dlio_metric_line(m: &DlioTrainMetric) -> String {
    format!(
        "DLIO metric over {} epoch{}: train_au_mean_percentage {:.2} ({:.2}, {}), \
         train_throughput_mean_samples_per_second {:.2} ({:.2}), train_io_mean_MB_per_second \
         {:.1} ({:.1}; MiB/s of the configured record size)",
        m.train_au_percentage.len(),
        if m.train_au_percentage.len() == 1 {
            ""
        } else {
            "s"
        },
        m.train_au_mean_percentage,
        m.train_au_stdev_percentage,
        match m.train_au_meet_expectation {
            Expectation::Success => "success",
            Expectation::Fail => "fail",
        },
        m.train_throughput_mean_samples_per_second,
        m.train_throughput_stdev_samples_per_second,
        m.train_io_mean_MB_per_second,
        m.train_io_stdev_MB_per_second
    )
}

fn ms(d: &Distribution) -> String {
    format!(
        "mean {:.2}, p50 {:.2}, p99 {:.2}, max {:.2} ms",
        d.mean, d.p50, d.p99, d.max
    )
}

/// A loud banner when computation_time is not the workload's own, as the study warns.
pub fn computation_time_banner(s: &RunSummary) -> Option<String> {
    if (s.computation_time_s - s.workload_computation_time_s).abs() < 1e-12 {
        return None;
    }
    let line = "=".repeat(78);
    Some(format!(
        "{line}\n  NOTE: computation_time is {} but {} says {}.\n  AU below is an I/O stress \
         figure, not {} training performance;\n  see the projected AU at {}.\n{line}",
        seconds(s.computation_time_s),
        s.workload,
        seconds(s.workload_computation_time_s),
        s.workload,
        seconds(s.workload_computation_time_s),
    ))
}

/// The whole human report: header, table row, derived figures, notes.
pub fn render(s: &RunSummary) -> String {
    let mut out = String::new();
    let w = &mut out;
    render_header(w, s);
    let _ = writeln!(w, "\n{TABLE_HEADER}\n{}\n", table_row(s));
    render_au(w, s);
    render_bytes(w, s);
    render_verify(w, s);
    render_latency(w, s);
    render_cost(w, s);
    for line in s.target.files.iter().flat_map(super::files::lines) {
        let _ = writeln!(w, "{line}");
    }
    if let Some(c) = &s.checkpoints {
        let _ = writeln!(w, "{}", checkpoints_line(c));
    }
    // Last: what limited the run.
    let _ = writeln!(w, "limit: {}", s.limit.line);
    out
}

/// The checkpoints written between the steps, in one line: how many, where, how big, and
/// DLIO's save figures (rank 0's, mean and population stdev over the saves).
pub fn checkpoints_line(c: &crate::summary::train_checkpoint::TrainCheckpointSummary) -> String {
    let size = format!(
        "{} per save, checkpoint_size_GB {:.6e}",
        bytes(c.bytes_per_save),
        c.checkpoint_size_gb
    );
    let Some(first) = c.saves.first() else {
        return format!(
            "checkpoints: none written ({} planned; {size}); DLIO's summary carries \
             checkpoint_size_GB only",
            c.saves_planned
        );
    };
    let place = if c.saves.len() == 1 {
        format!(
            "after epoch {}'s step {}: {}",
            first.epoch,
            first.after_step,
            first.keys.join(", ")
        )
    } else {
        format!(
            "the first after epoch {}'s step {}: {}…",
            first.epoch, first.after_step, first.prefix
        )
    };
    let figures = c.metric.map_or(String::new(), |m| {
        format!(
            "; rank 0 {:.4} s ({:.4}), {:.4} GiB/s ({:.4}) (DLIO's save_checkpoint_*)",
            m.save_checkpoint_duration_mean_seconds,
            m.save_checkpoint_duration_stdev_seconds,
            m.save_checkpoint_io_mean_GB_per_second,
            m.save_checkpoint_io_stdev_GB_per_second
        )
    });
    format!(
        "checkpoints: {} of {} ({size}) {place}{figures}; outside AU",
        counted(c.saves.len() as u64, "save"),
        counted(c.objects_per_save as u64, "object"),
    )
}

/// The header line: the workload, where it ran, the engine and the run's shape.
fn render_header(w: &mut String, s: &RunSummary) {
    let where_ = if let Some(files) = &s.target.files {
        super::files::place(files)
    } else if s.target.embedded {
        format!(
            "embedded virtual server, s3://{} at {}",
            s.target.bucket, s.target.endpoint
        )
    } else {
        format!("s3://{} at {}", s.target.bucket, s.target.endpoint)
    };
    // Whole objects are one GET each: nothing to coalesce, no footer.
    let parquet = s.format == "parquet";
    let gets = if parquet {
        format!("coalesce_rgs {}", s.coalesce_rgs)
    } else {
        format!("whole {} objects", s.format)
    };
    let _ = writeln!(
        w,
        "ringload run: {} on {where_}; engine {}, prefetch {}, {gets}, computation_time {}, {} \
         epoch{}, sharding {}",
        s.workload,
        s.engine,
        s.prefetch,
        seconds(s.computation_time_s),
        s.epochs,
        if s.epochs == 1 { "" } else { "s" },
        s.sharding
    );
}

/// The AU lines: AU against its target, DLIO's metric, the implied and measured waits.
fn render_au(w: &mut String, s: &RunSummary) {
    let _ = writeln!(
        w,
        "AU {} (target {}%: {})",
        or_dash(s.au_percent, |v| format!("{v:.2}%")),
        s.au_target_percent,
        if s.au_target_met { "met" } else { "missed" }
    );
    if let Some(m) = &s.metric {
        let _ = writeln!(w, "{}", dlio_metric_line(m));
    }
    if let Some(wait) = s.implied_io_wait_per_step_ms {
        let projected: Vec<String> = s
            .projected_au_percent
            .iter()
            .map(|(t, au)| format!("{au:.1}% at {t} s"))
            .collect();
        let _ = writeln!(
            w,
            "implied I/O wait per step {wait:.2} ms; projected AU {}",
            projected.join(", ")
        );
    }
    let _ = writeln!(
        w,
        "measured I/O wait per step: {}",
        ms(&s.io_wait_per_step_ms)
    );
    let _ = writeln!(
        w,
        "barrier wait per step: {}",
        ms(&s.barrier_wait_per_step_ms)
    );
}

/// The GETs, and the requests they sent by kind where those differ: `480 ranged GETs`, or `16
/// objects (16 HEADs, 13 GETs, 31 ranged GETs)` (fetched as s3dlio fetches them).
fn requests_in_words(s: &RunSummary) -> String {
    let kinds = &s.requests_by_kind;
    let one_each =
        kinds.total() == s.requests && (kinds.get == s.requests || kinds.ranged_get == s.requests);
    if one_each {
        return kinds.describe();
    }
    let what = if s.format == "parquet" {
        "GET"
    } else {
        "object"
    };
    format!("{} ({})", counted(s.requests, what), kinds.describe())
}

/// The bytes read, GETs, retries and errors, and what the loader read past the last steps.
fn render_bytes(w: &mut String, s: &RunSummary) {
    // Whole objects are one GET each: no footer.
    let parquet = s.format == "parquet";
    let _ = writeln!(
        w,
        "read {} ({} bytes) in {} at {:.0} MiB/s on the wire ({} nominal); {}{}, {}",
        bytes(s.bytes_read),
        count(s.bytes_read),
        requests_in_words(s),
        s.measured_mib_per_s,
        or_dash(s.io_mib_per_s, |v| format!("{} MiB/s", whole(v))),
        if parquet {
            format!("footers {} once; ", bytes(s.footer_bytes))
        } else {
            String::new()
        },
        counted(s.retries, "retry"),
        counted(s.errors, "error")
    );
    if s.overshoot_gets > 0 {
        let epochs = u64::from(s.epochs);
        let _ = writeln!(
            w,
            "past the last steps: {} ({}) the loader read ahead and no step used, the slowest \
             rank waiting {:.3} s for them after its last steps (every epoch's wait, summed): \
             in the bytes read; not in the wall time, AU or samples/s, nor in MiB/s on the wire \
             but for what each rank had received by its own last step",
            counted(s.overshoot_gets as u64 * epochs, "GET"),
            bytes(s.overshoot_bytes * epochs),
            s.drain_s
        );
    }
}

/// The verification line, of whole objects or of Parquet column chunks; none unverified.
fn render_verify(w: &mut String, s: &RunSummary) {
    if let Some(v) = s.verify.as_ref().filter(|v| v.objects > 0) {
        let _ = writeln!(
            w,
            "verified {} in {} whole objects ({} GETs), byte for byte against what `ringload \
             generate` writes: {:.3} CPU-s ({})",
            bytes(v.object_bytes),
            count(v.objects),
            count(v.gets),
            v.cpu_s,
            or_dash(v.cpu_s_per_gib, |x| format!("{x:.3} CPU-s per GiB"))
        );
    } else if let Some(v) = &s.verify {
        let checked = v.hashed_bytes + v.page_checked_bytes;
        let unchecked = match v.unchecked_bytes {
            0 => String::new(),
            n => format!("; {} in no column chunk, not checked", bytes(n)),
        };
        let pages = match v.page_checked_bytes {
            0 => String::new(),
            _ => format!(" ({} pages)", count(v.pages)),
        };
        let _ = writeln!(
            w,
            "verified {} in {} GETs by {}{pages}{unchecked}: {:.3} CPU-s ({})",
            bytes(checked),
            count(v.gets),
            v.check,
            v.cpu_s,
            or_dash(v.cpu_s_per_gib, |x| format!("{x:.3} CPU-s per GiB"))
        );
    }
}

/// Request latency, each endpoint's figures (with several) and the TLS line.
fn render_latency(w: &mut String, s: &RunSummary) {
    let _ = writeln!(
        w,
        "request latency, first byte: {}",
        ms(&s.request_latency_ms.first_byte)
    );
    let _ = writeln!(
        w,
        "request latency, total: {}",
        ms(&s.request_latency_ms.total)
    );
    if s.endpoints.len() > 1 {
        for e in &s.endpoints {
            let _ = writeln!(
                w,
                "endpoint {}: {} in {}, {}, {}; total latency {}",
                e.url,
                bytes(e.bytes_read),
                counted(e.requests, "GET"),
                counted(e.retries, "retry"),
                counted(e.errors, "error"),
                ms(&e.latency_ms)
            );
        }
    }
    if let Some(tls) = &s.target.tls {
        let _ = writeln!(
            w,
            "TLS {}{}{}; kTLS {}",
            tls.negotiated.as_deref().unwrap_or("(no connection made)"),
            if tls.verified {
                ", certificates verified"
            } else {
                ", CERTIFICATES NOT VERIFIED (--insecure)"
            },
            tls.ca_bundle
                .as_ref()
                .map(|c| format!(" (also trusting {c})"))
                .unwrap_or_default(),
            if tls.ktls_available {
                "offered by the kernel (not used)"
            } else {
                "not offered by this kernel"
            }
        );
    }
}

/// The client's CPU (and an in-process server's), peak RSS, set-up and wall time, the legend,
/// the notes.
fn render_cost(w: &mut String, s: &RunSummary) {
    let per_gib = or_dash(s.cpu_s_per_gib, |v| format!("{v:.3} CPU-s per GiB"));
    // Only an in-process server has its CPU here; with an external one, nothing.
    let server = s
        .server_cpu_s
        .map(|v| format!("; in-process server {v:.2} CPU-s, not included"))
        .unwrap_or_default();
    let _ = writeln!(w, "client CPU {:.2} s ({per_gib}){server}", s.client_cpu_s);
    let _ = writeln!(
        w,
        "peak RSS {} (memory budget {}); set-up {:.2} s, wall {:.2} s",
        s.peak_rss_bytes.map_or_else(|| "unknown".into(), bytes),
        bytes(s.memory_budget_bytes),
        s.setup_s,
        s.wall_s
    );
    let _ = writeln!(w, "({MIB_PER_S_LEGEND})");
    for note in &s.notes {
        let _ = writeln!(w, "note: {note}");
    }
}

/// The per-step CSV: one line per rank, epoch and step.
pub fn steps_csv(records: &[RankRecord]) -> String {
    let mut out = String::from("rank,epoch,step,wait_ms,compute_ms,barrier_ms\n");
    for (rank, record) in records.iter().enumerate() {
        for (epoch, steps) in record.steps.iter().enumerate() {
            for (step, t) in steps.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{rank},{epoch},{step},{:.3},{:.3},{:.3}",
                    t.wait_ns as f64 / 1e6,
                    t.compute_ns as f64 / 1e6,
                    t.barrier_ns as f64 / 1e6
                );
            }
        }
    }
    out
}

/// The request trace: one row per completed GET, ordered by rank, epoch, reader and GET (the
/// order each reader issues them), whatever order they completed in.
pub fn requests_csv(plan: &Plan, stats: &[RequestStats]) -> String {
    let mut out = String::from(
        "rank,epoch,reader,get,key,offset,len_bytes,attempts,first_byte_us,total_us\n",
    );
    for (rank, stats) in stats.iter().enumerate() {
        let first = plan.ranged_gets(&plan.ranks[rank]);
        // A reshuffled epoch's own GETs (Plan::reshuffled), made once per epoch listed.
        let mut own: Option<(u32, Vec<Vec<crate::plan::RangedGet>>)> = None;
        let mut trace = stats.trace.clone();
        trace.sort_by_key(|r| (r.epoch, r.reader, r.get));
        for r in trace {
            if own.as_ref().is_none_or(|(epoch, _)| *epoch != r.epoch) {
                own = plan
                    .reshuffled(r.epoch, rank)
                    .ok()
                    .flatten()
                    .map(|p| (r.epoch, plan.ranged_gets(&p)));
            }
            let gets = own.as_ref().map_or(&first, |(_, gets)| gets);
            let get = &gets[r.reader][r.get];
            let _ = writeln!(
                out,
                "{rank},{},{},{},{},{},{},{},{},{}",
                r.epoch,
                r.reader,
                r.get,
                get.key,
                get.offset,
                get.len_bytes,
                r.attempts,
                r.first_byte_us,
                r.total_us
            );
        }
    }
    out
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dlio_metric_line_gives_dlio_names_means_stdevs_and_the_verdict() {
        let m = DlioTrainMetric::of_epochs(vec![80.0, 90.0], vec![100.0, 140.0], 2_164_832, 90.0)
            .unwrap();
        assert_eq!(
            dlio_metric_line(&m),
            "DLIO metric over 2 epochs: train_au_mean_percentage 85.00 (5.00, fail), \
             train_throughput_mean_samples_per_second 120.00 (20.00), \
             train_io_mean_MB_per_second 247.7 (41.3; MiB/s of the configured record size)"
        );
    }
}
