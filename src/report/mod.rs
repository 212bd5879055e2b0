//! Everything that formats numbers for people: byte sizes, counts, and the plan and generate
//! summaries. Machines get JSON from the `Serialize` structs directly.

pub mod checkpoint;
pub mod checkpoint_run;
pub mod files;
pub mod plan;
pub mod run;
pub mod timeseries;

use crate::units::{bytes, count};

/// "TOTAL; checked against LIMIT (fits|over WHAT), …": a memory budget's total and each limit
/// it was checked against.
pub fn budget_total_line(m: &crate::budget::MemoryBudget) -> String {
    let checks: Vec<String> = m
        .checks
        .iter()
        .map(|c| {
            format!(
                "{} {} ({} {})",
                c.name,
                bytes(c.limit_bytes),
                if c.fits { "fits" } else { "over" },
                c.applies_to
            )
        })
        .collect();
    format!(
        "{}; checked against {}",
        bytes(m.total_bytes),
        if checks.is_empty() {
            "nothing (no limit known)".to_string()
        } else {
            checks.join(", ")
        }
    )
}

/// "Ignored (WHAT): key (hint), …" for the keys a workload sets and the run does not use;
/// `None` when there are none.
pub fn ignored_keys_line(keys: &[crate::settings::IgnoredKey], what: &str) -> Option<String> {
    if keys.is_empty() {
        return None;
    }
    let keys: Vec<String> = keys
        .iter()
        .map(|k| {
            if k.hint.is_empty() {
                k.key.clone()
            } else {
                format!("{} ({})", k.key, k.hint)
            }
        })
        .collect();
    Some(format!("Ignored ({what}): {}", keys.join(", ")))
}

/// The one-line summary of `ringload generate`.
pub fn generate_summary(summary: &crate::datagen::GenerateSummary) -> String {
    format!(
        "wrote {} files, {} ({} bytes) to {} in {:.2} s: {:.0} MiB/s with {} jobs; content \
         version {}: {}",
        summary.files,
        bytes(summary.bytes_written),
        count(summary.bytes_written),
        summary.destination,
        summary.elapsed_s,
        summary.mib_per_s(),
        summary.jobs,
        crate::content::VERSION,
        summary.content.describe()
    )
}

/// The totals `ringload serve` prints when it stops.
pub fn server_stats(stats: &crate::server::ServerStats) -> String {
    let per_gib: Vec<String> = [
        (stats.cpu_s_per_gib, "sent"),
        (stats.cpu_s_per_gib_received, "received"),
    ]
    .iter()
    .filter_map(|(c, what)| c.map(|c| format!("{c:.3} CPU-s per GiB {what}")))
    .collect();
    let per_gib = match per_gib.is_empty() {
        true => String::new(),
        false => format!(" ({})", per_gib.join(", ")),
    };
    let sink = match &stats.sink {
        Some(s) if s.verified_bytes > 0 || s.mismatches > 0 => format!(
            "; sink: {} objects written, {} verified, {} mismatches",
            count(s.objects_written),
            bytes(s.verified_bytes),
            count(s.mismatches)
        ),
        Some(s) => format!("; sink: {} objects written", count(s.objects_written)),
        None => String::new(),
    };
    let faults = if stats.faults.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = stats
            .faults
            .iter()
            .map(|(spec, n)| format!("{spec}: {n}"))
            .collect();
        format!(
            "; {} faults injected ({})",
            count(stats.faults_injected),
            each.join(", ")
        )
    };
    format!(
        "served {} requests ({} errors) over {} connections ({} failed) in {:.1} s: {} sent, {} \
         received; server CPU {:.2} s{per_gib}{sink}{faults}",
        count(stats.requests),
        count(stats.errors),
        count(stats.connections),
        count(stats.connection_errors),
        stats.wall_s,
        bytes(stats.bytes_sent),
        bytes(stats.bytes_received),
        stats.cpu_s,
    )
}
