//! What `sweep --find-max-np` reports: the answer first (the largest NP, its margin, AU
//! projected at the workload's own computation time), its evidence (every run's AU at the last
//! passing and the first failing NP, the client's CPU per NP and whether the client was the
//! limit), then MLPerf's rules as lines that pass or fail, then every run's table.

use std::fmt::Write as _;
use std::io::Write as _;

use super::maxnp::{Family, FindMaxNp, NpOutcome, NpVerdict, RunEvidence};
use super::request::{FindMaxNpRequest, SweepRequest};
use super::{SweepFile, html, table};
use crate::exit::UsageError;
use crate::mlperf::Rule;
use crate::mlperf::training_rules::{self, DatasetFacts, TrainingFacts};
use crate::settings::Settings;

/// A client busier than this share of its cores is taken as saturated.
pub const SATURATED_SHARE: f64 = crate::summary::limit::SATURATED_SHARE;

/// `, client 1.23 CPU-s/s` for a progress line (empty without the figures).
pub fn cpu_note(run: &RunEvidence) -> String {
    match cpu_per_wall(run) {
        Some(c) => format!(", client {c:.2} CPU-s/s"),
        None => String::new(),
    }
}

/// The client's CPU seconds per wall second of a run.
fn cpu_per_wall(run: &RunEvidence) -> Option<f64> {
    let (cpu, wall) = (run.client_cpu_s?, run.wall_s?);
    (wall > 0.0).then(|| cpu / wall)
}

/// The busiest timed run of an NP (the warm-up when there is none): client and, with the
/// embedded server, server CPU seconds per wall second.
fn busiest(o: &NpOutcome) -> Option<(f64, Option<f64>)> {
    let timed: Vec<&RunEvidence> = o.timed().collect();
    let runs = if timed.is_empty() {
        o.runs.iter().collect()
    } else {
        timed
    };
    runs.into_iter()
        .filter_map(|r| {
            let client = cpu_per_wall(r)?;
            let server = r.server_cpu_s.zip(r.wall_s).map(|(s, w)| s / w);
            Some((client, server))
        })
        .max_by(|a, b| (a.0 + a.1.unwrap_or(0.0)).total_cmp(&(b.0 + b.1.unwrap_or(0.0))))
}

/// Which is the limit at the first failing NP: the client machine when it was near
/// saturation (its CPU, with the embedded server's, near the cores), else the storage.
pub fn which_limit(family: &Family, cores: usize) -> String {
    let Some(miss) = family.first_miss() else {
        return "no NP missed: the limit was not reached".into();
    };
    if miss.verdict == NpVerdict::Refused {
        return format!("the memory budget (or the plan) at NP={}, not AU", miss.np);
    }
    let Some((client, server)) = busiest(miss) else {
        return format!(
            "unknown: NP={} has no CPU figures ({})",
            miss.np,
            miss.reason.as_deref().unwrap_or("no summary")
        );
    };
    let busy = client + server.unwrap_or(0.0);
    let cores_f = cores.max(1) as f64;
    let with_server = server
        .map(|s| format!(" + the embedded server's {s:.2}"))
        .unwrap_or_default();
    if busy >= SATURATED_SHARE * cores_f {
        format!(
            "the client: at NP={} it used {client:.2} CPU-s/s{with_server} of its {cores} cores \
             (≥ {:.0} %), so this machine, not the storage, is the limit — run the clients on \
             more cores or hosts to measure the storage",
            miss.np,
            SATURATED_SHARE * 100.0
        )
    } else {
        format!(
            "the storage: at NP={} the client used {client:.2} CPU-s/s{with_server} of its \
             {cores} cores, short of saturation",
            miss.np
        )
    }
}

/// MLPerf's rules ([`training_rules`]) at the family's answer (or at the first NP tried, with
/// no answer).
pub fn rules(
    family: &Family,
    find: &FindMaxNp,
    settings: &Settings,
    args: &FindMaxNpRequest,
    files: usize,
    measured_memory_bytes: u64,
) -> Vec<Rule> {
    let Some(at) = family.last_pass().or_else(|| family.tried.first()) else {
        return Vec::new();
    };
    training_rules::rules(&TrainingFacts {
        np: at.np,
        au_target_percent: find.au_target_percent,
        not_run: (at.verdict == NpVerdict::Refused)
            .then(|| at.reason.clone().unwrap_or_else(|| "refused".into())),
        runs: at.runs.len() as u32,
        runs_asked: find.runs,
        timed: at.timed().map(RunEvidence::timed_run).collect(),
        dataset: DatasetFacts {
            files: files as u64,
            hosts: args.hosts,
            memory_per_host_bytes: args.client_memory_bytes.unwrap_or(measured_memory_bytes),
            memory_given: args.client_memory_bytes.is_some(),
            batch_size: settings.batch_size,
            samples_per_file: settings.samples_per_file,
            record_bytes: settings.record_bytes,
        },
        overrides: at
            .runs
            .first()
            .map(|r| r.overrides.clone())
            .unwrap_or_default(),
    })
}

fn au(v: Option<f64>) -> String {
    v.map_or("–".into(), |a| format!("{a:.2} %"))
}

/// One NP's runs as a line: `NP=2 pass: run 1 (warm-up) 88.10 %, run 2 93.20 %`.
fn np_line(o: &NpOutcome) -> String {
    let word = match o.verdict {
        NpVerdict::Pass => "pass",
        NpVerdict::Miss => "miss",
        NpVerdict::Refused => "not run",
    };
    if o.runs.is_empty() {
        return format!(
            "NP={} {word}: {}",
            o.np,
            o.reason.as_deref().unwrap_or("refused")
        );
    }
    let runs: Vec<String> = o
        .runs
        .iter()
        .map(|r| {
            let status = match r.status {
                super::Status::Met | super::Status::Missed => String::new(),
                s => format!(" ({})", s.word()),
            };
            format!(
                "run {}{} {}{status}",
                r.run,
                if r.warmup { " (warm-up)" } else { "" },
                au(r.au_percent)
            )
        })
        .collect();
    format!(
        "NP={} {word}: {}{}",
        o.np,
        runs.join(", "),
        o.reason
            .as_deref()
            .map(|r| format!(" — {r}"))
            .unwrap_or_default()
    )
}

/// The answer and its evidence, as markdown: what study.md, stdout and report.html lead with.
pub fn answer_markdown(find: &FindMaxNp, workload: &str) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# ringload sweep --find-max-np: {workload}\n");
    let bandwidth = find
        .server_bandwidth_mib_per_s
        .map(|b| format!("; the embedded server limited to {b} MiB/s in all"))
        .unwrap_or_default();
    let _ = writeln!(
        w,
        "AU target {} %; NP {}…{}; {} runs per NP (1 warm-up + {} timed{}){bandwidth}.\n",
        find.au_target_percent,
        find.np_from,
        find.np_to,
        find.runs,
        find.runs - 1,
        if find.runs == training_rules::RUNS {
            ", as MLPerf counts them"
        } else {
            "; fewer than MLPerf's 6: not MLPerf's count"
        }
    );
    for f in &find.families {
        let _ = writeln!(w, "## {}\n", f.key);
        match f.answer {
            Some(np) => {
                let _ = writeln!(
                    w,
                    "**Largest NP that holds AU: {np}** (margin {}; AU projected at the \
                     workload's computation time {} s: {})\n",
                    f.margin_points
                        .map_or("–".into(), |m| format!("{m:+.2} points")),
                    find.workload_computation_time_s,
                    au(f.projected_au_percent)
                );
            }
            None => {
                let _ = writeln!(
                    w,
                    "**No NP from {} holds AU** (target {} %)\n",
                    find.np_from, find.au_target_percent
                );
            }
        }
        let _ = writeln!(w, "Stopped: {}.\n", f.limit);
        if let Some(pass) = f.last_pass() {
            let _ = writeln!(w, "Last passing: {}\n", np_line(pass));
        }
        if let Some(miss) = f.first_miss() {
            let _ = writeln!(w, "First failing: {}\n", np_line(miss));
        }
        let _ = writeln!(w, "Limit: {}.\n", which_limit(f, find.cores));
        let _ = writeln!(w, "Rules (MLPerf Storage):\n");
        for rule in &f.rules {
            let _ = writeln!(w, "{rule}");
        }
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "| NP | verdict | timed AU min % | timed AU mean % | client CPU-s/s (max) | \
             server CPU-s/s | cores | runs |"
        );
        let _ = writeln!(w, "|---:|---|---:|---:|---:|---:|---:|---|");
        let mut tried: Vec<&NpOutcome> = f.tried.iter().collect();
        tried.sort_by_key(|o| o.np);
        for o in tried {
            let cpu = busiest(o);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                o.np,
                match o.verdict {
                    NpVerdict::Pass => "pass",
                    NpVerdict::Miss => "miss",
                    NpVerdict::Refused => "not run",
                },
                o.min_timed_au().map_or("–".into(), |a| format!("{a:.2}")),
                o.timed_mean(|r| r.au_percent)
                    .map_or("–".into(), |a| format!("{a:.2}")),
                cpu.map_or("–".into(), |c| format!("{:.2}", c.0)),
                cpu.and_then(|c| c.1)
                    .map_or("–".into(), |s| format!("{s:.2}")),
                find.cores,
                o.runs.len()
            );
        }
        let _ = writeln!(w);
    }
    out
}

/// study.md (the answer, then every run's table), study.csv, study.json (the search and the
/// rows), the plots and report.html (leading with the answer), and the answer on stdout.
pub fn write_study(args: &SweepRequest, sweep: &SweepFile, find: &FindMaxNp) -> anyhow::Result<()> {
    let rows = table::rows(sweep);
    let answer = answer_markdown(find, &sweep.workload);
    let runs_md = table::markdown(sweep, &rows);
    // Every run's table below the answer, under a heading of its own.
    let runs_md = match runs_md.split_once('\n') {
        Some((_, rest)) => format!("## Every run (warm-ups included; rK = run K)\n{rest}"),
        None => runs_md,
    };
    let markdown = format!("{answer}\n{runs_md}");
    let study_json = serde_json::to_string_pretty(&serde_json::json!({
        "find_max_np": find,
        "rows": rows,
    }))?;
    let write = |name: &str, text: &str| {
        let path = args.output.join(name);
        std::fs::write(&path, text)
            .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))
    };
    write("study.md", &markdown)?;
    write("study.csv", &table::csv(&rows))?;
    write("study.json", &study_json)?;
    let mut plots =
        super::plots::plots(&rows, Some(find.au_target_percent)).map_err(anyhow::Error::msg)?;
    // The time series of the last timed run at the answer and at the first NP that missed:
    // where the storage kept up and where it did not (a stall, a slow start, a retry storm).
    for f in &find.families {
        for (outcome, which) in [
            (f.last_pass(), "largest NP that holds AU"),
            (f.first_miss(), "first NP that misses"),
        ] {
            let Some(run) = outcome.and_then(|o| o.runs.iter().rev().find(|r| !r.warmup)) else {
                continue;
            };
            let label = format!("{} ({which}, run {})", run.name, run.run);
            plots.extend(
                super::plots::timeseries(&args.output, &run.name, &label)
                    .map_err(anyhow::Error::msg)?,
            );
        }
    }
    super::plots::write_all(&args.output, &plots)?;
    write(
        "report.html",
        &html::report_leading(sweep, &answer, &runs_md, &plots),
    )?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{study_json}")?;
    } else {
        write!(stdout, "{markdown}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::maxnp::{NpOutcome, NpVerdict, RunEvidence};
    use super::*;

    fn run(k: u32, au: f64, cpu: f64) -> RunEvidence {
        RunEvidence {
            name: format!("r{k}"),
            run: k,
            warmup: k == 1,
            status: Status::Met,
            au_percent: Some(au),
            reason: None,
            io_mib_per_s: Some(2048.0),
            projected_au_percent: Some(au - 1.0),
            client_cpu_s: Some(cpu),
            server_cpu_s: Some(0.1),
            wall_s: Some(1.0),
            overrides: Vec::new(),
        }
    }

    fn family(miss_cpu: f64) -> Family {
        Family {
            key: "uring-rt1".into(),
            engine: "uring".into(),
            answer: Some(2),
            margin_points: Some(3.0),
            projected_au_percent: Some(92.0),
            limit: "NP=3 missed".into(),
            tried: vec![
                NpOutcome {
                    np: 2,
                    verdict: NpVerdict::Pass,
                    reason: None,
                    runs: vec![run(1, 80.0, 0.2), run(2, 93.0, 0.3), run(3, 95.0, 0.3)],
                },
                NpOutcome {
                    np: 3,
                    verdict: NpVerdict::Miss,
                    reason: Some("run 2: AU 50.00 % < 90 %".into()),
                    runs: vec![run(1, 60.0, 0.2), run(2, 50.0, miss_cpu)],
                },
            ],
            rules: Vec::new(),
        }
    }

    #[test]
    fn the_client_is_the_limit_only_near_saturation() {
        assert!(which_limit(&family(0.3), 2).starts_with("the storage: at NP=3"));
        assert!(which_limit(&family(1.8), 2).starts_with("the client: at NP=3"));
    }

    #[test]
    fn the_published_figures_are_the_timed_runs_means() {
        let f = family(0.3);
        let find = FindMaxNp {
            au_target_percent: 90.0,
            runs: 3,
            np_from: 1,
            np_to: 8,
            workload_computation_time_s: 1.35,
            cores: 2,
            server_bandwidth_mib_per_s: None,
            families: vec![f.clone()],
        };
        let settings =
            Settings::resolve(&crate::config::RawConfig::load("flux_small").unwrap()).unwrap();
        let args = FindMaxNpRequest {
            find_max_np: true,
            au_target: None,
            runs: Some(3),
            strict: false,
            client_memory_bytes: Some(1 << 20),
            hosts: 1,
            server_bandwidth_mib_per_s: None,
        };
        let rules = rules(&f, &find, &settings, &args, 8, 0);
        let lines: Vec<String> = rules.iter().map(ToString::to_string).collect();
        assert!(lines[0].starts_with("PASS  AU per timed run: NP=2: run 2 93.00 %, run 3 95.00 %"));
        assert!(lines[1].starts_with("FAIL  runs: 3 runs = 1 warm-up + 2 timed; MLPerf counts 6"));
        assert!(
            lines[2].contains("mean of the 2 timed runs: 94.00 %"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("÷ 1024: 2.000 GiB/s"), "{}", lines[3]);
        // 1 MiB of memory: 500 × 2 × 48 ÷ 288 = 166 files for the steps, more than 8.
        assert!(
            lines[4].starts_with("FAIL  dataset size: 8 files < the 166"),
            "{}",
            lines[4]
        );
        let md = answer_markdown(&find, "flux_small");
        assert!(md.contains("**Largest NP that holds AU: 2** (margin +3.00 points"));
        assert!(md.contains("First failing: NP=3 miss: run 1 (warm-up) 60.00 %, run 2 50.00 %"));
    }
}
