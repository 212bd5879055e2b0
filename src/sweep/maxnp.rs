//! `ringload sweep WORKLOAD --find-max-np`: the largest NP that holds AU, as MLPerf Storage
//! counts runs.
//!
//! For each engine and set of parameters of the grid (its other axes: RT, engine, loader, …),
//! NP starts at the smallest `--np` and doubles while it passes, then bisects between the last
//! pass and the first miss, up to the largest `--np` (or [`DEFAULT_MAX_NP`] when one is given).
//! Each NP is `--runs N` child runs back to back (the sweep's [`Runner`]; `points/NAME-rK/`,
//! run K), the first a warm-up that does not count: the NP passes only if every timed run's AU
//! meets the target (a failed run is a miss with its reason), so the runs after a timed miss are
//! not started. An NP whose plan is refused (over the memory budget, more ranks than files, …)
//! is never run: it bounds the search with the plan's reason.
//!
//! Every run is added to `sweep.json` as it ends; `--resume` keeps the runs whose summary is
//! complete and runs the rest, the search deciding again from the kept AU figures.
//!
//! This module holds the search's results as sweep.json keeps them; [`super::maxnp_search`]
//! runs the search, [`super::maxnp_report`] writes the answer, its evidence and the rule lines.

use serde::{Deserialize, Serialize};

use super::{PointResult, Status};
use crate::mlperf::Rule;
use crate::mlperf::training_rules::{self, TimedRun};

/// The largest NP tried when `--np` is one value.
pub const DEFAULT_MAX_NP: u32 = 1024;

/// The search's result, as sweep.json and study.json keep it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindMaxNp {
    pub au_target_percent: f64,
    /// Runs per NP: 1 warm-up, the others timed.
    pub runs: u32,
    pub np_from: u32,
    pub np_to: u32,
    /// The workload's own computation time, where AU is projected.
    pub workload_computation_time_s: f64,
    /// The cores of the client machine (the ranks and, without an endpoint, the server).
    pub cores: usize,
    /// The shared embedded server's limit, when set.
    pub server_bandwidth_mib_per_s: Option<f64>,
    pub families: Vec<Family>,
}

/// One engine and set of parameters, searched on its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Family {
    /// Its points' name without NP and run (`uring-rt8`).
    pub key: String,
    pub engine: String,
    /// The largest NP that passed.
    pub answer: Option<u32>,
    /// The smallest timed AU at the answer, less the target (percentage points).
    pub margin_points: Option<f64>,
    /// The answer's timed runs' mean AU projected at the workload's own computation time.
    pub projected_au_percent: Option<f64>,
    /// What ended the search, in one line.
    pub limit: String,
    /// Every NP tried, in the order tried.
    pub tried: Vec<NpOutcome>,
    /// MLPerf's rules at the answer (or, with none, at the first NP).
    pub rules: Vec<Rule>,
}

impl Family {
    /// The NP tried that passed last in NP order (the answer), and the first above it.
    pub fn last_pass(&self) -> Option<&NpOutcome> {
        let np = self.answer?;
        self.tried.iter().find(|o| o.np == np)
    }

    pub fn first_miss(&self) -> Option<&NpOutcome> {
        self.tried
            .iter()
            .filter(|o| o.verdict != NpVerdict::Pass && self.answer.is_none_or(|a| o.np > a))
            .min_by_key(|o| o.np)
    }
}

/// How one NP ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NpVerdict {
    /// Every timed run met the target.
    Pass,
    /// A timed run missed it or failed.
    Miss,
    /// Not run: its plan was refused.
    Refused,
}

/// One NP: its runs and verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NpOutcome {
    pub np: u32,
    pub verdict: NpVerdict,
    /// Why it missed or was refused.
    pub reason: Option<String>,
    pub runs: Vec<RunEvidence>,
}

impl NpOutcome {
    /// The timed runs.
    pub fn timed(&self) -> impl Iterator<Item = &RunEvidence> {
        self.runs.iter().filter(|r| !r.warmup)
    }

    /// The smallest timed AU.
    pub fn min_timed_au(&self) -> Option<f64> {
        self.timed()
            .map(|r| r.au_percent)
            .try_fold(f64::INFINITY, |m, au| au.map(|a| m.min(a)))
            .filter(|m| m.is_finite())
    }

    /// The mean of the timed runs' `f`, when every timed run has it (MLPerf's published
    /// figures: [`training_rules::timed_mean`]).
    pub fn timed_mean(&self, f: impl Fn(&RunEvidence) -> Option<f64>) -> Option<f64> {
        training_rules::timed_mean(self.timed().map(f))
    }
}

/// One run's figures, from its summary.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunEvidence {
    pub name: String,
    /// 1-based; run 1 is the warm-up.
    pub run: u32,
    pub warmup: bool,
    pub status: Status,
    /// DLIO's `metric.train_au_mean_percentage` (what MLPerf gates), else ringload's AU.
    pub au_percent: Option<f64>,
    pub reason: Option<String>,
    /// DLIO's `metric.train_io_mean_MB_per_second` (MiB/s).
    pub io_mib_per_s: Option<f64>,
    /// AU projected at the workload's own computation time.
    pub projected_au_percent: Option<f64>,
    pub client_cpu_s: Option<f64>,
    pub server_cpu_s: Option<f64>,
    pub wall_s: Option<f64>,
    /// The workload parameters the run overrode, as its summary records them (`overrides`).
    pub overrides: Vec<(String, String)>,
}

impl RunEvidence {
    pub fn of(result: &PointResult, run: u32, workload_ct_s: f64) -> RunEvidence {
        let s = result.summary.as_ref();
        let f = |v: &serde_json::Value| v.as_f64();
        let au_percent = s.and_then(|s| {
            f(&s["metric"]["train_au_mean_percentage"]).or_else(|| f(&s["au_percent"]))
        });
        let reason = result
            .reason
            .clone()
            .or_else(|| match (result.status, au_percent) {
                (Status::Met | Status::Missed, None) => {
                    Some("no AU (a rank had fewer than two steps): add --files or lower NP".into())
                }
                _ => None,
            });
        RunEvidence {
            name: result.name.clone(),
            run,
            warmup: run == 1,
            status: result.status,
            au_percent,
            reason,
            io_mib_per_s: s.and_then(|s| f(&s["metric"]["train_io_mean_MB_per_second"])),
            projected_au_percent: s.and_then(|s| {
                f(&s["projected_au_percent"][crate::summary::seconds_key(workload_ct_s)])
            }),
            client_cpu_s: s.and_then(|s| f(&s["client_cpu_s"])),
            server_cpu_s: result.server_cpu_s,
            wall_s: s.and_then(|s| f(&s["wall_s"])),
            overrides: s
                .and_then(|s| s["overrides"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|pair| {
                    Some((pair[0].as_str()?.to_string(), pair[1].as_str()?.to_string()))
                })
                .collect(),
        }
    }

    /// Whether the run ran and its AU meets `target`.
    pub fn meets(&self, target: f64) -> bool {
        self.timed_run().meets(target)
    }

    /// The run in the figures MLPerf's rules are stated in (they judge the timed ones).
    pub fn timed_run(&self) -> TimedRun {
        TimedRun {
            run: self.run,
            finished: matches!(self.status, Status::Met | Status::Missed),
            au_percent: self.au_percent,
            io_mib_per_s: self.io_mib_per_s,
        }
    }

    /// Why it does not meet `target`, in a few words.
    pub fn miss(&self, target: f64) -> String {
        match (self.au_percent, &self.reason) {
            (_, Some(reason)) if !matches!(self.status, Status::Met | Status::Missed) => {
                format!("run {} {}: {reason}", self.run, self.status.word())
            }
            (Some(au), _) => format!("run {}: AU {au:.2} % < {target} %", self.run),
            (None, reason) => format!("run {}: {}", self.run, reason.as_deref().unwrap_or("no AU")),
        }
    }
}

/// The NP range searched: from the smallest `--np` to the largest, or to [`DEFAULT_MAX_NP`]
/// when one value is given.
pub fn np_range(np: &[u32]) -> (u32, u32) {
    let from = np.iter().copied().min().unwrap_or(1).max(1);
    let to = match np.iter().copied().max() {
        Some(max) if max > from => max,
        _ => DEFAULT_MAX_NP.max(from),
    };
    (from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_runs_from_the_smallest_np_to_the_largest_or_the_default_bound() {
        assert_eq!(np_range(&[1]), (1, DEFAULT_MAX_NP));
        assert_eq!(np_range(&[2, 16]), (2, 16));
        assert_eq!(np_range(&[4096]), (4096, DEFAULT_MAX_NP.max(4096)));
        assert_eq!(np_range(&[]), (1, DEFAULT_MAX_NP));
    }

    fn run(k: u32, au: Option<f64>, status: Status) -> RunEvidence {
        RunEvidence {
            name: format!("uring-np2-rt1-r{k}"),
            run: k,
            warmup: k == 1,
            status,
            au_percent: au,
            reason: None,
            io_mib_per_s: Some(1024.0),
            projected_au_percent: None,
            client_cpu_s: None,
            server_cpu_s: None,
            wall_s: None,
            overrides: Vec::new(),
        }
    }

    #[test]
    fn the_warm_up_does_not_count_toward_the_smallest_timed_au() {
        let o = NpOutcome {
            np: 2,
            verdict: NpVerdict::Pass,
            reason: None,
            runs: vec![
                run(1, Some(10.0), Status::Missed),
                run(2, Some(95.0), Status::Met),
                run(3, Some(93.0), Status::Met),
            ],
        };
        assert_eq!(o.min_timed_au(), Some(93.0));
        assert_eq!(o.timed_mean(|r| r.au_percent), Some(94.0));
        assert!(!o.runs[0].meets(90.0));
        assert!(o.runs[2].meets(93.0));
        let failed = RunEvidence {
            reason: Some("connection refused".into()),
            ..run(2, None, Status::Failed)
        };
        assert!(!failed.meets(0.1));
        assert_eq!(failed.miss(90.0), "run 2 failed: connection refused");
        assert_eq!(
            run(3, Some(88.5), Status::Missed).miss(90.0),
            "run 3: AU 88.50 % < 90 %"
        );
    }
}
