//! The study's tables from a sweep: per engine, the study's own layout (NP, RT, AU%,
//! samples/s, samp/s/GPU, nominal MiB/s, Wall, Steps, Notes), its hand analysis (implied I/O
//! wait, projected AU), what DLIO cannot show (MiB/s on the wire, CPU-s/GiB, peak RSS against the
//! budget, latency), and with two engines a side-by-side with ratios. Repeats give medians with
//! min–max. Every number comes from the points' own summary.json, as sweep.json keeps them.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::{PointResult, Status, SweepFile};

/// A median over a point's rounds, with its range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(mut values: Vec<f64>) -> Option<Stat> {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: values[0],
            max: values[n - 1],
            n,
        })
    }

    pub fn show(&self, decimals: usize) -> String {
        if self.n > 1 && self.max > self.min {
            format!(
                "{:.d$} ({:.d$}–{:.d$})",
                self.median,
                self.min,
                self.max,
                d = decimals
            )
        } else {
            format!("{:.d$}", self.median, d = decimals)
        }
    }
}

fn show(stat: &Option<Stat>, decimals: usize) -> String {
    stat.as_ref()
        .map_or_else(|| "—".into(), |s| s.show(decimals))
}

/// One point of the grid over its rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub engine: String,
    /// `ringload` or `dlio`.
    pub loader: String,
    pub np: u32,
    pub read_threads: u64,
    pub prefetch: Option<u64>,
    pub coalesce_rgs: Option<u64>,
    pub computation_time: Option<f64>,
    /// Rounds that ran.
    pub runs: usize,
    /// `met`, or the worst status of its rounds.
    pub status: String,
    pub notes: Vec<String>,
    pub au_percent: Option<Stat>,
    pub samples_per_s: Option<Stat>,
    pub samples_per_s_per_gpu: Option<Stat>,
    pub io_mib_per_s: Option<Stat>,
    pub wall_s: Option<Stat>,
    pub steps_per_rank: Option<u64>,
    pub implied_io_wait_per_step_ms: Option<Stat>,
    /// Keyed by computation time in seconds.
    pub projected_au_percent: BTreeMap<String, Stat>,
    pub measured_mib_per_s: Option<Stat>,
    pub cpu_s_per_gib: Option<Stat>,
    pub peak_rss_bytes: Option<Stat>,
    pub memory_budget_bytes: Option<u64>,
    pub latency_p50_ms: Option<Stat>,
    pub latency_p99_ms: Option<Stat>,
    pub server_cpu_s: Option<Stat>,
}

impl Row {
    /// The engine, and the loader when it is not ringload's: what a table or a line is of.
    pub fn profile(&self) -> String {
        if self.loader == "ringload" {
            self.engine.clone()
        } else {
            format!("{} ({} loader)", self.engine, self.loader)
        }
    }

    /// The grid cell this row fills, engines apart.
    fn cell(&self) -> (u32, u64, Option<u64>, Option<u64>, String) {
        (
            self.np,
            self.read_threads,
            self.prefetch,
            self.coalesce_rgs,
            self.computation_time
                .map(|t| t.to_string())
                .unwrap_or_default(),
        )
    }
}

fn severity(status: Status) -> u8 {
    match status {
        Status::Met => 0,
        Status::Missed => 1,
        Status::Gated => 2,
        Status::Skipped => 3,
        Status::Failed => 4,
        Status::Crashed => 5,
    }
}

/// The rows of a sweep, one per point (rounds together), in the grid's order.
pub fn rows(sweep: &SweepFile) -> Vec<Row> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, Vec<&PointResult>> = BTreeMap::new();
    for p in &sweep.points {
        let key = p.point.key();
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(p);
    }
    let mut rows: Vec<Row> = order.iter().map(|key| row(&groups[key])).collect();
    // The study's layout: per engine and loader (in the grid's order), by NP, then RT, then
    // the rest.
    let mut profiles: Vec<String> = Vec::new();
    for r in &rows {
        if !profiles.contains(&r.profile()) {
            profiles.push(r.profile());
        }
    }
    rows.sort_by(|a, b| {
        let rank = |r: &Row| profiles.iter().position(|p| *p == r.profile());
        (rank(a), a.np, a.read_threads, a.prefetch, a.coalesce_rgs)
            .cmp(&(rank(b), b.np, b.read_threads, b.prefetch, b.coalesce_rgs))
            .then(
                a.computation_time
                    .unwrap_or(0.0)
                    .total_cmp(&b.computation_time.unwrap_or(0.0)),
            )
    });
    rows
}

fn row(results: &[&PointResult]) -> Row {
    let first = &results[0].point;
    let ran: Vec<&serde_json::Value> = results.iter().filter_map(|r| r.summary.as_ref()).collect();
    let stat = |f: &dyn Fn(&serde_json::Value) -> Option<f64>| {
        Stat::of(ran.iter().filter_map(|s| f(s)).collect())
    };
    let worst = results
        .iter()
        .map(|r| r.status)
        .max_by_key(|s| severity(*s))
        .unwrap_or(Status::Met);
    let mut notes = Vec::new();
    for r in results {
        if r.status != Status::Met {
            let why = r
                .reason
                .as_deref()
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            let round = if results.len() > 1 {
                format!(" (round {})", r.point.round)
            } else {
                String::new()
            };
            notes.push(format!("{}{round}{why}", r.status.word()));
        }
    }
    notes.dedup();
    // Too few steps for a stable AU (metrics::files_for_stable_au, in the summary).
    if let (Some(files), Some(steps)) = (
        ran.iter().find_map(|s| s["files_for_stable_au"].as_u64()),
        ran.iter().find_map(|s| s["steps_per_rank"].as_u64()),
    ) {
        notes.push(format!(
            "{steps} steps per rank: AU not stable (--files {files} gives 50)"
        ));
    }
    let mut projected: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in &ran {
        if let Some(map) = s["projected_au_percent"].as_object() {
            for (t, v) in map {
                if let Some(v) = v.as_f64() {
                    projected.entry(t.clone()).or_default().push(v);
                }
            }
        }
    }
    Row {
        engine: first.engine.clone(),
        loader: first.loader.to_string(),
        np: first.np,
        read_threads: first.read_threads,
        prefetch: first.prefetch,
        coalesce_rgs: first.coalesce_rgs,
        computation_time: first.computation_time,
        runs: ran.len(),
        status: worst.word().into(),
        notes,
        au_percent: stat(&|s| s["au_percent"].as_f64()),
        samples_per_s: stat(&|s| s["samples_per_s"].as_f64()),
        samples_per_s_per_gpu: stat(&|s| {
            Some(s["samples_per_s"].as_f64()? / s["np"].as_f64()?.max(1.0))
        }),
        io_mib_per_s: stat(&|s| s["io_mib_per_s"].as_f64()),
        wall_s: stat(&|s| s["wall_s"].as_f64()),
        steps_per_rank: ran.iter().find_map(|s| s["steps_per_rank"].as_u64()),
        implied_io_wait_per_step_ms: stat(&|s| s["implied_io_wait_per_step_ms"].as_f64()),
        projected_au_percent: projected
            .into_iter()
            .filter_map(|(t, v)| Some((t, Stat::of(v)?)))
            .collect(),
        measured_mib_per_s: stat(&|s| s["measured_mib_per_s"].as_f64()),
        cpu_s_per_gib: stat(&|s| s["cpu_s_per_gib"].as_f64()),
        peak_rss_bytes: stat(&|s| s["peak_rss_bytes"].as_f64()),
        memory_budget_bytes: ran.iter().find_map(|s| s["memory_budget_bytes"].as_u64()),
        latency_p50_ms: stat(&|s| s["request_latency_ms"]["total"]["p50"].as_f64()),
        latency_p99_ms: stat(&|s| s["request_latency_ms"]["total"]["p99"].as_f64()),
        server_cpu_s: Stat::of(results.iter().filter_map(|r| r.server_cpu_s).collect()),
    }
}

/// Which of prefetch, coalesce_rgs and computation_time vary (and so get columns).
fn varying(rows: &[Row]) -> (bool, bool, bool) {
    let differs = |f: &dyn Fn(&Row) -> String| {
        rows.iter()
            .map(f)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
    };
    (
        differs(&|r| format!("{:?}", r.prefetch)),
        differs(&|r| format!("{:?}", r.coalesce_rgs)),
        differs(&|r| format!("{:?}", r.computation_time)),
    )
}

fn mib(bytes: &Option<Stat>) -> String {
    bytes.map_or_else(
        || "—".into(),
        |s| {
            Stat {
                median: s.median / 1048576.0,
                min: s.min / 1048576.0,
                max: s.max / 1048576.0,
                n: s.n,
            }
            .show(0)
        },
    )
}

/// The study as markdown: per engine the study's table, the hand analysis and the figures
/// DLIO cannot show; with two engines, the side-by-side.
pub fn markdown(sweep: &SweepFile, rows: &[Row]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# ringload sweep: {}\n", sweep.workload);
    let _ = writeln!(w, "`{}`\n", sweep.command);
    let rounds = sweep
        .points
        .iter()
        .map(|p| p.point.round)
        .max()
        .unwrap_or(1);
    if rounds > 1 {
        let _ = writeln!(
            w,
            "{rounds} rounds: medians, with min–max where the rounds differ.\n"
        );
    }
    // Before the tables it qualifies.
    if let Some(banner) = computation_time_banner(sweep) {
        let _ = writeln!(w, "{banner}\n");
    }
    let (prefetch, coalesce, computation_time) = varying(rows);
    let extra = ExtraColumns {
        prefetch,
        coalesce,
        computation_time,
    };
    let mut engines: Vec<String> = Vec::new();
    for r in rows {
        if !engines.contains(&r.profile()) {
            engines.push(r.profile());
        }
    }
    for engine in &engines {
        let mine: Vec<&Row> = rows.iter().filter(|r| &r.profile() == engine).collect();
        study_table(w, engine, &mine, &extra);
        analysis_table(w, &mine, &extra);
        dlio_cannot_show_table(w, &mine, &extra);
    }
    if engines.len() == 2 {
        engines_table(w, rows, (&engines[0], &engines[1]), &extra);
    }
    out
}

/// The columns of the sweep's varying parameters: prefetch, coalesce_rgs, computation_time.
struct ExtraColumns {
    prefetch: bool,
    coalesce: bool,
    computation_time: bool,
}

impl ExtraColumns {
    /// Writes their headers; returns how many.
    fn head(&self, w: &mut String) -> usize {
        let mut h = String::new();
        if self.prefetch {
            h.push_str(" prefetch |");
        }
        if self.coalesce {
            h.push_str(" coalesce |");
        }
        if self.computation_time {
            h.push_str(" ct (s) |");
        }
        w.push_str(&h);
        h.matches('|').count()
    }

    /// Their cells of row `r` (`workload` where the workload's value ran).
    fn cells(&self, r: &Row) -> String {
        let mut c = String::new();
        let opt = |v: Option<String>| v.unwrap_or_else(|| "workload".into());
        if self.prefetch {
            c.push_str(&format!(" {} |", opt(r.prefetch.map(|v| v.to_string()))));
        }
        if self.coalesce {
            c.push_str(&format!(
                " {} |",
                opt(r.coalesce_rgs.map(|v| v.to_string()))
            ));
        }
        if self.computation_time {
            c.push_str(&format!(
                " {} |",
                opt(r.computation_time.map(|v| v.to_string()))
            ));
        }
        c
    }
}

/// One engine's study table: AU, samples/s, MiB/s, wall time and steps per point.
fn study_table(w: &mut String, engine: &str, mine: &[&Row], extra: &ExtraColumns) {
    let _ = writeln!(w, "## {engine}\n");
    w.push_str("| NP | RT |");
    let n = extra.head(w);
    w.push_str(
        " AU% | samples/s | samp/s/GPU | nominal MiB/s | Wall (s) | Steps | Notes |\n|---|---|",
    );
    w.push_str(&"---|".repeat(n));
    w.push_str("---|---|---|---|---|---|---|\n");
    for r in mine {
        let _ = writeln!(
            w,
            "| {} | {} |{} {} | {} | {} | {} | {} | {} | {} |",
            r.np,
            r.read_threads,
            extra.cells(r),
            show(&r.au_percent, 1),
            show(&r.samples_per_s, 0),
            show(&r.samples_per_s_per_gpu, 0),
            show(&r.io_mib_per_s, 0),
            show(&r.wall_s, 1),
            r.steps_per_rank.map_or("—".into(), |s| s.to_string()),
            r.notes.join("; ")
        );
    }
}

/// One engine's hand analysis: the implied I/O wait per step and the projected AU.
fn analysis_table(w: &mut String, mine: &[&Row], extra: &ExtraColumns) {
    let times: Vec<String> = {
        let mut t: Vec<String> = mine
            .iter()
            .flat_map(|r| r.projected_au_percent.keys().cloned())
            .collect();
        t.sort_by(|a, b| {
            a.parse::<f64>()
                .unwrap_or(0.0)
                .total_cmp(&b.parse::<f64>().unwrap_or(0.0))
        });
        t.dedup();
        t
    };
    let _ = writeln!(
        w,
        "\nThe study's analysis: implied I/O wait per step `ct × (100/AU − 1)` and projected AU.\n"
    );
    w.push_str("| NP | RT |");
    let n = extra.head(w);
    w.push_str(" implied I/O wait (ms) |");
    for t in &times {
        let _ = write!(w, " AU at {t} s |");
    }
    w.push_str("\n|---|---|");
    w.push_str(&"---|".repeat(n + 1 + times.len()));
    w.push('\n');
    for r in mine {
        let _ = write!(
            w,
            "| {} | {} |{} {} |",
            r.np,
            r.read_threads,
            extra.cells(r),
            show(&r.implied_io_wait_per_step_ms, 2)
        );
        for t in &times {
            let _ = write!(w, " {} |", show(&r.projected_au_percent.get(t).copied(), 1));
        }
        w.push('\n');
    }
}

/// One engine's figures DLIO cannot show: wire MiB/s, CPU, memory, latency, the server's CPU.
fn dlio_cannot_show_table(w: &mut String, mine: &[&Row], extra: &ExtraColumns) {
    let _ = writeln!(w, "\nWhat DLIO cannot show.\n");
    w.push_str("| NP | RT |");
    let n = extra.head(w);
    w.push_str(" MiB/s on the wire | client CPU-s/GiB | peak RSS (MiB) | planned (MiB) | GET p50 (ms) | GET p99 (ms) | server CPU-s |\n|---|---|");
    w.push_str(&"---|".repeat(n + 7));
    w.push('\n');
    for r in mine {
        let _ = writeln!(
            w,
            "| {} | {} |{} {} | {} | {} | {} | {} | {} | {} |",
            r.np,
            r.read_threads,
            extra.cells(r),
            show(&r.measured_mib_per_s, 0),
            show(&r.cpu_s_per_gib, 3),
            mib(&r.peak_rss_bytes),
            r.memory_budget_bytes
                .map_or("—".into(), |b| format!("{:.0}", b as f64 / 1048576.0)),
            show(&r.latency_p50_ms, 2),
            show(&r.latency_p99_ms, 2),
            show(&r.server_cpu_s, 2)
        );
    }
    let _ = writeln!(w, "{}.\n", crate::report::run::MIB_PER_S_LEGEND);
}

/// Two engines side by side: AU, samples/s and CPU-s/GiB, and their ratios.
fn engines_table(w: &mut String, rows: &[Row], (a, b): (&String, &String), extra: &ExtraColumns) {
    let _ = writeln!(
        w,
        "## {a} against {b}\n\nRatios of the medians: CPU-s/GiB {b} ÷ {a} (how many times \
         cheaper {a} is per byte), AU and samples/s {a} ÷ {b}.\n"
    );
    w.push_str("| NP | RT |");
    let n = extra.head(w);
    let _ = writeln!(
        w,
        " AU% {a} | AU% {b} | AU ratio | samples/s ratio | CPU-s/GiB {a} | CPU-s/GiB {b} | CPU ratio |"
    );
    w.push_str("|---|---|");
    w.push_str(&"---|".repeat(n + 7));
    w.push('\n');
    let ratio = |x: &Option<Stat>, y: &Option<Stat>| match (x, y) {
        (Some(x), Some(y)) if y.median > 0.0 => format!("{:.2}×", x.median / y.median),
        _ => "—".into(),
    };
    for ra in rows.iter().filter(|r| &r.engine == a) {
        let Some(rb) = rows
            .iter()
            .find(|r| &r.engine == b && r.cell() == ra.cell())
        else {
            continue;
        };
        let _ = writeln!(
            w,
            "| {} | {} |{} {} | {} | {} | {} | {} | {} | {} |",
            ra.np,
            ra.read_threads,
            extra.cells(ra),
            show(&ra.au_percent, 1),
            show(&rb.au_percent, 1),
            ratio(&ra.au_percent, &rb.au_percent),
            ratio(&ra.samples_per_s, &rb.samples_per_s),
            show(&ra.cpu_s_per_gib, 3),
            show(&rb.cpu_s_per_gib, 3),
            ratio(&rb.cpu_s_per_gib, &ra.cpu_s_per_gib)
        );
    }
    w.push('\n');
}

/// The study's warning when the points ran at another computation time than the workload's.
fn computation_time_banner(sweep: &SweepFile) -> Option<String> {
    let s = sweep.points.iter().find_map(|p| p.summary.as_ref())?;
    let ct = s["computation_time_s"].as_f64()?;
    let own = s["workload_computation_time_s"].as_f64()?;
    ((ct - own).abs() > 1e-12).then(|| {
        format!(
            "**NOTE**: computation_time is {ct} s but {} says {own} s: AU below is an I/O stress \
             figure, not {} training performance; see the projected AU at {own} s.",
            sweep.workload, sweep.workload
        )
    })
}

/// The rows as CSV, one line per point, medians only.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "engine,loader,np,read_threads,prefetch,coalesce_rgs,computation_time,runs,status,au_percent,\
         samples_per_s,samples_per_s_per_gpu,io_mib_per_s,wall_s,steps_per_rank,\
         implied_io_wait_per_step_ms,measured_mib_per_s,cpu_s_per_gib,peak_rss_bytes,\
         memory_budget_bytes,latency_p50_ms,latency_p99_ms,server_cpu_s,notes\n",
    );
    let m = |s: &Option<Stat>| s.map(|s| s.median.to_string()).unwrap_or_default();
    let o = |v: Option<String>| v.unwrap_or_default();
    for r in rows {
        let notes = r.notes.join("; ").replace('"', "'");
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            r.engine,
            r.loader,
            r.np,
            r.read_threads,
            o(r.prefetch.map(|v| v.to_string())),
            o(r.coalesce_rgs.map(|v| v.to_string())),
            o(r.computation_time.map(|v| v.to_string())),
            r.runs,
            r.status,
            m(&r.au_percent),
            m(&r.samples_per_s),
            m(&r.samples_per_s_per_gpu),
            m(&r.io_mib_per_s),
            m(&r.wall_s),
            o(r.steps_per_rank.map(|v| v.to_string())),
            m(&r.implied_io_wait_per_step_ms),
            m(&r.measured_mib_per_s),
            m(&r.cpu_s_per_gib),
            m(&r.peak_rss_bytes),
            o(r.memory_budget_bytes.map(|v| v.to_string())),
            m(&r.latency_p50_ms),
            m(&r.latency_p99_ms),
            m(&r.server_cpu_s),
            notes
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        let s = Stat::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
        assert_eq!(Stat::of(vec![4.0, 2.0]).unwrap().median, 3.0);
        assert_eq!(Stat::of(vec![5.0]).unwrap().show(0), "5");
        assert!(Stat::of(vec![f64::NAN]).is_none());
    }
}
