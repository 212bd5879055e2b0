//! MLPerf Storage's training rules (Rules.md 2.x, 3.1.2; the training README), each checked as
//! a [`Rule`] line from the figures of one NP's runs: every timed run holds the AU target, 1
//! warm-up and 5 timed runs back to back, the published AU and read bandwidth (the means over
//! the timed runs), and the dataset size.
//!
//! Pure: the caller gives the numbers (each run's figures, the workload's settings, the client's
//! memory).

use super::datasize::{Clients, training_files};
use super::{Rule, Verdict};

/// Runs of one configuration, back to back: 1 warm-up (excluded from the figures), then 5 timed.
pub const RUNS: u32 = 6;

/// One timed run (not the warm-up), in the figures the rules are stated in.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedRun {
    /// 1-based; run 1 is the warm-up, so the first timed run is 2.
    pub run: u32,
    /// It ran to the end (it met or missed its target); a run that failed or crashed holds no
    /// AU, whatever it reported.
    pub finished: bool,
    /// DLIO's `train_au_mean_percentage`.
    pub au_percent: Option<f64>,
    /// DLIO's `train_io_mean_MB_per_second` (MiB/s).
    pub io_mib_per_s: Option<f64>,
}

impl TimedRun {
    /// Whether the run holds `target_percent`: it finished, with an AU at least the target.
    pub fn meets(&self, target_percent: f64) -> bool {
        self.finished && self.au_percent.is_some_and(|au| au >= target_percent)
    }
}

/// A published figure: the mean of the timed runs' `values`, or `None` when there is no timed
/// run or one lacks the figure.
pub fn timed_mean(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let values: Vec<f64> = values.into_iter().collect::<Option<_>>()?;
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The dataset against the rule's size (Rules.md 3.1.2).
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetFacts {
    /// Files the store holds.
    pub files: u64,
    /// Client hosts.
    pub hosts: u32,
    /// One client host's memory: given by the user, else measured (0: neither).
    pub memory_per_host_bytes: u64,
    /// Whether `memory_per_host_bytes` was given (`--client-memory`) rather than measured.
    pub memory_given: bool,
    /// The workload's batch, samples per file and record length.
    pub batch_size: u64,
    pub samples_per_file: u64,
    pub record_bytes: u64,
}

/// What one NP's runs did, in the figures the rules are stated in.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingFacts {
    /// Processes (accelerators) of the runs.
    pub np: u32,
    pub au_target_percent: f64,
    /// Why the NP was not run at all (the memory budget or the plan refused it), if it was not.
    pub not_run: Option<String>,
    /// Runs of this NP, the warm-up included, and the runs asked for: fewer ran when the NP
    /// stopped at its first timed miss.
    pub runs: u32,
    pub runs_asked: u32,
    /// The timed runs, in order.
    pub timed: Vec<TimedRun>,
    pub dataset: DatasetFacts,
    /// The workload parameters the runs overrode (key, value as recorded), for the CLOSED
    /// parameters line ([`super::parameters`]).
    pub overrides: Vec<(String, String)>,
}

/// One line per rule, in the rules' order; only the AU line, failed, for an NP that was not run.
pub fn rules(f: &TrainingFacts) -> Vec<Rule> {
    if let Some(reason) = &f.not_run {
        return vec![Rule::new(
            "AU per timed run",
            Verdict::Fail,
            format!("NP={} was not run: {reason}", f.np),
        )];
    }
    vec![
        au_per_timed_run(f),
        runs(f),
        published_au(f),
        published_read_bandwidth(f),
        dataset_size(f.np, &f.dataset),
        super::parameters::rule(&f.overrides),
    ]
}

fn au_per_timed_run(f: &TrainingFacts) -> Rule {
    let (np, target) = (f.np, f.au_target_percent);
    let listed: Vec<String> = f
        .timed
        .iter()
        .map(|r| match r.au_percent {
            Some(au) => format!("run {} {au:.2} %", r.run),
            None => format!("run {} none", r.run),
        })
        .collect();
    let all_meet = !f.timed.is_empty() && f.timed.iter().all(|r| r.meets(target));
    Rule::new(
        "AU per timed run",
        Verdict::of(all_meet),
        format!(
            "NP={np}: {} {} the threshold {target} % (run 1, the warm-up, excluded)",
            if listed.is_empty() {
                "no timed run".into()
            } else {
                listed.join(", ")
            },
            if all_meet { "≥" } else { "not all ≥" }
        ),
    )
}

fn runs(f: &TrainingFacts) -> Rule {
    let ran = f.runs;
    Rule::new(
        "runs",
        Verdict::of(ran == RUNS),
        if ran == RUNS {
            format!("{ran} = 1 warm-up + {} timed, back to back", ran - 1)
        } else {
            format!(
                "{ran} run{} = 1 warm-up + {} timed; MLPerf counts {RUNS} (1 warm-up + {} timed){}",
                if ran == 1 { "" } else { "s" },
                ran.saturating_sub(1),
                RUNS - 1,
                if ran < f.runs_asked {
                    " — this NP stopped at its first timed miss"
                } else {
                    ""
                }
            )
        },
    )
}

fn published_au(f: &TrainingFacts) -> Rule {
    let (n, target) = (f.timed.len(), f.au_target_percent);
    match timed_mean(f.timed.iter().map(|r| r.au_percent)) {
        Some(mean) => Rule::new(
            "published AU",
            Verdict::of(mean >= target),
            format!("mean of the {n} timed runs: {mean:.2} % (threshold {target} %)"),
        ),
        None => Rule::new("published AU", Verdict::Unknown, "a timed run has no AU"),
    }
}

fn published_read_bandwidth(f: &TrainingFacts) -> Rule {
    let n = f.timed.len();
    match timed_mean(f.timed.iter().map(|r| r.io_mib_per_s)) {
        Some(mean) => Rule::new(
            "published Read B/W",
            Verdict::Pass,
            format!(
                "mean of the {n} timed runs' train_io_mean_MB_per_second ÷ 1024: {:.3} GiB/s",
                mean / 1024.0
            ),
        ),
        None => Rule::new(
            "published Read B/W",
            Verdict::Unknown,
            "a timed run has no train_io_mean_MB_per_second",
        ),
    }
}

/// The dataset-size rule at `np` processes: the files the store holds against the files the
/// rule asks for ([`training_files`]).
fn dataset_size(np: u32, d: &DatasetFacts) -> Rule {
    let memory = d.memory_per_host_bytes;
    if memory == 0 {
        return Rule::new(
            "dataset size",
            Verdict::Unknown,
            "the client's memory was neither given (--client-memory) nor measured",
        );
    }
    let source = if d.memory_given {
        "given"
    } else {
        "measured: this machine's MemTotal"
    };
    let size = training_files(
        Clients {
            hosts: d.hosts,
            memory_per_host_bytes: memory,
            processes: u64::from(np),
        },
        d.batch_size,
        d.samples_per_file,
        d.record_bytes,
    );
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    let enough = d.files >= size.files;
    Rule::new(
        "dataset size",
        Verdict::of(enough),
        format!(
            "{} files {} the {} the rule asks for: max(5 × {:.1} GiB ({} host{} × {:.1} GiB, \
             {source}) ÷ {:.1} MiB per file = {}, 500 × NP {np} × batch {} ÷ {} samples per file \
             = {}) ({:.1} GiB on the store)",
            d.files,
            if enough { "≥" } else { "<" },
            size.files,
            gib(size.client_memory_bytes),
            d.hosts,
            if d.hosts == 1 { "" } else { "s" },
            gib(u128::from(memory)),
            size.file_bytes as f64 / (1u64 << 20) as f64,
            size.files_for_memory,
            d.batch_size,
            d.samples_per_file,
            size.files_for_steps,
            gib(size.total_bytes)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn timed(run: u32, au: f64) -> TimedRun {
        TimedRun {
            run,
            finished: true,
            au_percent: Some(au),
            io_mib_per_s: Some(2048.0 + f64::from(run)),
        }
    }

    /// unet3d on one host of 512 GiB at NP 8 (the reference's B4): 28,000 files.
    fn dataset(files: u64) -> DatasetFacts {
        DatasetFacts {
            files,
            hosts: 1,
            memory_per_host_bytes: 512 * GIB,
            memory_given: true,
            batch_size: 7,
            samples_per_file: 1,
            record_bytes: 146_600_628,
        }
    }

    fn facts(timed_runs: Vec<TimedRun>) -> TrainingFacts {
        TrainingFacts {
            np: 8,
            au_target_percent: 90.0,
            not_run: None,
            runs: timed_runs.len() as u32 + 1,
            runs_asked: RUNS,
            timed: timed_runs,
            dataset: dataset(28_000),
            overrides: vec![("dataset.num_files_train".into(), "28000".into())],
        }
    }

    fn lines(f: &TrainingFacts) -> Vec<String> {
        rules(f).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn six_runs_that_all_hold_au_pass_every_line() {
        let f = facts((2..=6).map(|k| timed(k, 90.0 + f64::from(k))).collect());
        assert_eq!(
            lines(&f),
            [
                "PASS  AU per timed run: NP=8: run 2 92.00 %, run 3 93.00 %, run 4 94.00 %, \
                 run 5 95.00 %, run 6 96.00 % ≥ the threshold 90 % (run 1, the warm-up, excluded)",
                "PASS  runs: 6 = 1 warm-up + 5 timed, back to back",
                "PASS  published AU: mean of the 5 timed runs: 94.00 % (threshold 90 %)",
                "PASS  published Read B/W: mean of the 5 timed runs' train_io_mean_MB_per_second \
                 ÷ 1024: 2.004 GiB/s",
                "PASS  dataset size: 28000 files ≥ the 28000 the rule asks for: max(5 × 512.0 GiB \
                 (1 host × 512.0 GiB, given) ÷ 139.8 MiB per file = 18750, 500 × NP 8 × batch 7 \
                 ÷ 1 samples per file = 28000) (3822.9 GiB on the store)",
                "PASS  parameters (CLOSED): dataset.num_files_train=28000 overridden, each one \
                 CLOSED allows: mlpstorage judges the parameters CLOSED",
            ]
        );
        assert!(super::super::none_failed(&rules(&f)));
    }

    #[test]
    fn one_timed_miss_fails_the_au_line_and_a_short_np_the_runs_line() {
        // The search stopped this NP at run 3, its first timed miss.
        let mut f = facts(vec![timed(2, 93.0), timed(3, 85.0)]);
        let l = lines(&f);
        assert_eq!(
            l[0],
            "FAIL  AU per timed run: NP=8: run 2 93.00 %, run 3 85.00 % not all ≥ the threshold \
             90 % (run 1, the warm-up, excluded)"
        );
        assert_eq!(
            l[1],
            "FAIL  runs: 3 runs = 1 warm-up + 2 timed; MLPerf counts 6 (1 warm-up + 5 timed) — \
             this NP stopped at its first timed miss"
        );
        assert_eq!(
            l[2],
            "FAIL  published AU: mean of the 2 timed runs: 89.00 % (threshold 90 %)"
        );
        // Asked for 3 runs (`--runs 3`): not MLPerf's count, but not stopped early either.
        f.runs_asked = 3;
        assert_eq!(
            lines(&f)[1],
            "FAIL  runs: 3 runs = 1 warm-up + 2 timed; MLPerf counts 6 (1 warm-up + 5 timed)"
        );
        // A run that crashed holds no AU, whatever it reported.
        let mut crashed = timed(2, 99.0);
        crashed.finished = false;
        assert!(!crashed.meets(90.0));
        assert!(timed(2, 90.0).meets(90.0));
    }

    #[test]
    fn a_missing_figure_is_unknown_and_an_np_not_run_is_one_failed_line() {
        let mut f = facts(vec![timed(2, 95.0), timed(3, 95.0)]);
        f.timed[1].au_percent = None;
        f.timed[1].io_mib_per_s = None;
        f.dataset.memory_per_host_bytes = 0;
        f.dataset.memory_given = false;
        let l = lines(&f);
        assert!(l[0].starts_with("FAIL  AU per timed run: NP=8: run 2 95.00 %, run 3 none"));
        assert_eq!(l[2], "N/A   published AU: a timed run has no AU");
        assert_eq!(
            l[3],
            "N/A   published Read B/W: a timed run has no train_io_mean_MB_per_second"
        );
        assert_eq!(
            l[4],
            "N/A   dataset size: the client's memory was neither given (--client-memory) nor \
             measured"
        );
        let f = TrainingFacts {
            not_run: Some("memory budget 30 GiB exceeds MemAvailable 20 GiB".into()),
            ..facts(Vec::new())
        };
        assert_eq!(
            lines(&f),
            [
                "FAIL  AU per timed run: NP=8 was not run: memory budget 30 GiB exceeds \
              MemAvailable 20 GiB"
            ]
        );
        let f = facts(Vec::new());
        assert!(lines(&f)[0].starts_with("FAIL  AU per timed run: NP=8: no timed run not all ≥"));
        assert_eq!(timed_mean([]), None);
        assert_eq!(timed_mean([Some(1.0), Some(2.0)]), Some(1.5));
    }

    #[test]
    fn the_dataset_line_names_the_larger_bound_and_its_memory_source() {
        // Two hosts of 512 GiB, measured: 5 × 1 TiB ÷ 139.8 MiB = 37,500 files for the memory.
        let d = DatasetFacts {
            hosts: 2,
            memory_given: false,
            ..dataset(28_000)
        };
        assert_eq!(
            dataset_size(8, &d).to_string(),
            "FAIL  dataset size: 28000 files < the 37500 the rule asks for: max(5 × 1024.0 GiB \
             (2 hosts × 512.0 GiB, measured: this machine's MemTotal) ÷ 139.8 MiB per file = \
             37500, 500 × NP 8 × batch 7 ÷ 1 samples per file = 28000) (5120.0 GiB on the store)"
        );
    }
}
