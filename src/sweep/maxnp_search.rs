//! `sweep --find-max-np`'s search ([`super::maxnp`] says how it goes): each NP's runs as child
//! processes through the sweep's [`Runner`], doubling then bisecting, per family of the grid.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

use super::maxnp::{Family, FindMaxNp, NpOutcome, NpVerdict, RunEvidence, np_range};
use super::points::{Planner, point_command};
use super::request::{PointCommandLine, SweepRequest};
use super::{Machine, Planned, Point, PointResult, Runner, SweepError, SweepFile};
use crate::mlperf::training_rules;
use crate::settings::Settings;
use crate::setup::store::SweepStore;

/// The search over all families.
struct Search<'a> {
    runner: &'a Runner<'a>,
    planner: &'a Planner<'a>,
    sweep: SweepFile,
    /// Runs kept from the sweep being resumed, by name, until the search reaches them.
    kept: BTreeMap<String, PointResult>,
    runs: u32,
    target: f64,
    workload_ct_s: f64,
}

/// Interrupted (Ctrl-C, SIGTERM): what finished is in sweep.json.
struct Interrupted;

impl Search<'_> {
    /// Runs NP `np` of `template`'s family.
    fn evaluate(
        &mut self,
        template: &Point,
        np: u32,
    ) -> anyhow::Result<Result<NpOutcome, Interrupted>> {
        let key = Point {
            np,
            ..template.clone()
        }
        .key();
        let planned = self.planner.plan(Point {
            np,
            round: 1,
            ..template.clone()
        })?;
        if let Some(reason) = planned.skip {
            eprintln!("find-max-np: {key}: not run: {reason}");
            return Ok(Ok(NpOutcome {
                np,
                verdict: NpVerdict::Refused,
                reason: Some(reason),
                runs: Vec::new(),
            }));
        }
        let mut runs = Vec::new();
        let mut reason = None;
        for k in 1..=self.runs {
            let point = Point {
                np,
                round: k,
                ..template.clone()
            };
            let name = point.name();
            let kind = if k == 1 { "warm-up" } else { "timed" };
            let result = match self.kept.remove(&name) {
                Some(kept) => kept,
                None => {
                    let p = Planned {
                        point,
                        skip: None,
                        estimate_s: planned.estimate_s,
                    };
                    eprintln!("find-max-np: {key}: run {k} of {} ({kind}) …", self.runs);
                    match self.runner.run_point(&p)? {
                        Some(result) => result,
                        None => {
                            self.sweep.write(&self.runner.dir)?;
                            return Ok(Err(Interrupted));
                        }
                    }
                }
            };
            self.sweep.planned.push(name);
            self.sweep.points.push(result.clone());
            self.sweep.write(&self.runner.dir)?;
            let run = RunEvidence::of(&result, k, self.workload_ct_s);
            let verdict = if run.meets(self.target) {
                "meets"
            } else {
                "misses"
            };
            eprintln!(
                "find-max-np: {key}: run {k} of {} ({kind}): AU {}, {verdict} the target \
                 {} %{}",
                self.runs,
                run.au_percent
                    .map_or("none".into(), |au| format!("{au:.2} %")),
                self.target,
                super::maxnp_report::cpu_note(&run)
            );
            let missed = !run.warmup && !run.meets(self.target);
            if missed {
                reason = Some(run.miss(self.target));
            }
            runs.push(run);
            // The NP has missed: its later runs cannot change that.
            if missed {
                break;
            }
        }
        let verdict = if reason.is_none() {
            NpVerdict::Pass
        } else {
            NpVerdict::Miss
        };
        Ok(Ok(NpOutcome {
            np,
            verdict,
            reason,
            runs,
        }))
    }

    /// Doubles NP from `from` while it passes, then bisects between the last pass and the
    /// first miss (or refusal).
    fn family(
        &mut self,
        template: &Point,
        from: u32,
        to: u32,
    ) -> anyhow::Result<Result<Family, Interrupted>> {
        let mut tried: Vec<NpOutcome> = Vec::new();
        let mut last_pass: Option<u32> = None;
        let mut bound: Option<u32> = None;
        let mut np = from;
        macro_rules! try_np {
            ($np:expr) => {
                match self.evaluate(template, $np)? {
                    Ok(outcome) => {
                        let pass = outcome.verdict == NpVerdict::Pass;
                        tried.push(outcome);
                        pass
                    }
                    Err(i) => return Ok(Err(i)),
                }
            };
        }
        loop {
            if try_np!(np) {
                last_pass = Some(np);
                if np >= to {
                    break;
                }
                np = np.saturating_mul(2).min(to);
            } else {
                bound = Some(np);
                break;
            }
        }
        while let (Some(pass), Some(miss)) = (last_pass, bound) {
            if miss - pass <= 1 {
                break;
            }
            let mid = pass + (miss - pass) / 2;
            if try_np!(mid) {
                last_pass = Some(mid);
            } else {
                bound = Some(mid);
            }
        }
        let key = template
            .key()
            .replacen(&format!("-np{}", template.np), "", 1);
        let bound_outcome = bound.and_then(|b| tried.iter().find(|o| o.np == b));
        let limit = match bound_outcome {
            None => format!(
                "every NP tried up to the upper bound {to} passed: search higher with --np \
                 {to},{}",
                to.saturating_mul(4)
            ),
            Some(o) if o.verdict == NpVerdict::Refused => format!(
                "NP={} was not run: {}",
                o.np,
                o.reason.as_deref().unwrap_or("its plan was refused")
            ),
            Some(o) => format!(
                "NP={} missed: {}",
                o.np,
                o.reason.as_deref().unwrap_or("a timed run missed")
            ),
        };
        let answer_outcome = last_pass.and_then(|a| tried.iter().find(|o| o.np == a));
        Ok(Ok(Family {
            key,
            engine: template.engine.clone(),
            answer: last_pass,
            margin_points: answer_outcome
                .and_then(NpOutcome::min_timed_au)
                .map(|au| au - self.target),
            projected_au_percent: answer_outcome
                .and_then(|o| o.timed_mean(|r| r.projected_au_percent)),
            limit,
            tried,
            rules: Vec::new(),
        }))
    }
}

/// Runs the search `args` asks for (`sweep --find-max-np`); `Ok` carries the exit code (0 an
/// answer for every family and, with `--strict`, every rule passed; 1 otherwise) and whether
/// Ctrl-C or SIGTERM stopped it (the study written from what finished).
#[allow(clippy::too_many_arguments)]
pub fn run(
    args: &SweepRequest,
    line: &dyn PointCommandLine,
    settings: &Settings,
    storage: &SweepStore,
    planner: &Planner<'_>,
    points: Vec<Point>,
    interrupt: Arc<AtomicBool>,
    setup_done: Arc<AtomicBool>,
) -> anyhow::Result<(u8, bool)> {
    if args.repeat > 1 || args.gate {
        return Err(crate::exit::UsageError(
            "--find-max-np runs each NP --runs times back to back and decides what to run \
             next itself: drop --repeat and --gate"
                .into(),
        )
        .into());
    }
    let runs = args.find.runs.unwrap_or(training_rules::RUNS);
    let target = args.find.au_target.unwrap_or(settings.au_target_percent);
    let (from, to) = np_range(&args.grid.np);
    // One point per family: the grid at the first NP, one round.
    let mut templates: Vec<Point> = Vec::new();
    for p in points {
        let template = Point {
            np: from,
            round: 1,
            ..p
        };
        if !templates.contains(&template) {
            templates.push(template);
        }
    }
    let child = point_command(args, line, storage)?;
    let server_cpu = || storage.server().map(|s| s.stats().cpu_s);
    setup_done.store(true, Ordering::SeqCst);
    let runner = Runner {
        dir: args.output.clone(),
        workload: settings.workload.name.clone(),
        command: args.command.clone(),
        gate: false,
        resume: args.resume,
        child: &child,
        server_cpu_s: &server_cpu,
        interrupt,
    };
    let kept = kept_runs(&runner)?;
    if !kept.is_empty() {
        eprintln!(
            "find-max-np: resuming: {} kept; the search decides again from their AU",
            crate::units::counted(kept.len() as u64, "run")
        );
    }
    let machine = Machine::this();
    let mut search = Search {
        runner: &runner,
        planner,
        sweep: SweepFile {
            workload: runner.workload.clone(),
            command: runner.command.clone(),
            machine: machine.clone(),
            started: httpdate::fmt_http_date(std::time::SystemTime::now()),
            ringload_version: env!("CARGO_PKG_VERSION").into(),
            ringload_commit: env!("RINGLOAD_COMMIT").into(),
            planned: Vec::new(),
            points: Vec::new(),
            find_max_np: None,
        },
        kept,
        runs,
        target,
        workload_ct_s: settings.workload_computation_time_s,
    };
    eprintln!(
        "find-max-np: {} × NP {from}…{to} ({} per NP: 1 warm-up + {} timed{}), AU target {target} % \
         into {}",
        crate::units::counted(templates.len() as u64, "family"),
        crate::units::counted(u64::from(runs), "run"),
        runs - 1,
        if runs == training_rules::RUNS {
            ""
        } else {
            "; MLPerf counts 6"
        },
        args.output.display()
    );
    let mut find = FindMaxNp {
        au_target_percent: target,
        runs,
        np_from: from,
        np_to: to,
        workload_computation_time_s: settings.workload_computation_time_s,
        cores: machine.cores,
        server_bandwidth_mib_per_s: args.find.server_bandwidth_mib_per_s,
        families: Vec::new(),
    };
    let mut interrupted = false;
    // A search that fails part-way still writes its study with what it has, then fails.
    let mut failed: Option<anyhow::Error> = None;
    for template in &templates {
        let family = match search.family(template, from, to) {
            Ok(family) => family,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        match family {
            Ok(mut family) => {
                family.rules = super::maxnp_report::rules(
                    &family,
                    &find,
                    settings,
                    &args.find,
                    planner.files(),
                    machine.memory_bytes,
                );
                find.families.push(family);
            }
            Err(Interrupted) => {
                interrupted = true;
                break;
            }
        }
    }
    let outcome = Outcome {
        find,
        failed,
        interrupted,
    };
    finish(args, search.sweep, outcome)
}

/// How a search ended: its families, and the error that stopped it, if one did.
struct Outcome {
    find: FindMaxNp,
    failed: Option<anyhow::Error>,
    interrupted: bool,
}

/// The search's files — sweep.json, study.md, report.html, written whatever ended it — then
/// the answer's runs into `--results-dir`, and the exit code.
fn finish(args: &SweepRequest, mut sweep: SweepFile, end: Outcome) -> anyhow::Result<(u8, bool)> {
    let Outcome {
        find,
        failed,
        interrupted,
    } = end;
    sweep.find_max_np = Some(serde_json::to_value(&find)?);
    sweep.write(&args.output)?;
    super::maxnp_report::write_study(args, &sweep, &find)?;
    if let Some(e) = failed {
        return Err(e.context(format!(
            "the search stopped; what it had is in {}/study.md and report.html",
            args.output.display()
        )));
    }
    // After the study, so a results tree that cannot be written loses nothing of it.
    if let (Some(dir), false) = (&args.results_dir, interrupted) {
        let gathered = super::maxnp_results::gather(&args.output, dir, &find).with_context(|| {
            format!(
                "--results-dir {}: the answer's runs could not be copied there; the study is in \
                 {}/study.md and each run's leaf in {}/points/NAME/mlperf/",
                dir.display(),
                args.output.display(),
                args.output.display()
            )
        })?;
        for line in gathered {
            eprintln!("ringload sweep: MLPerf results: {line}");
        }
    }
    let answered = find.families.iter().all(|f| f.answer.is_some());
    let rules_hold = find
        .families
        .iter()
        .all(|f| crate::mlperf::none_failed(&f.rules));
    let code = if answered && (rules_hold || !args.find.strict) {
        crate::exit::OK
    } else {
        crate::exit::AU_MISSED
    };
    Ok((code, interrupted))
}

/// With `--resume`: the runs of the sweep in `--output` whose summary is complete, by name.
fn kept_runs(runner: &Runner<'_>) -> Result<BTreeMap<String, PointResult>, SweepError> {
    if !runner.resume || !runner.dir.join("sweep.json").exists() {
        return Ok(BTreeMap::new());
    }
    let old = SweepFile::read(&runner.dir)?;
    if old.find_max_np.is_none() && !old.points.is_empty() {
        return Err(SweepError::OtherGrid {
            dir: runner.dir.clone(),
            reason: "a grid sweep, not a --find-max-np search".into(),
        });
    }
    Ok(old
        .points
        .into_iter()
        .filter(|p| p.summary.is_some() && super::complete_summary(&runner.dir, &p.name))
        .map(|p| (p.name.clone(), p))
        .collect())
}
