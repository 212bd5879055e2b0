//! `ringload sweep`: the study's grid of runs in one command.
//!
//! Every point (engine × NP × RT × prefetch × coalesce_rgs × computation_time, `repeat` rounds)
//! is planned before the first one runs; a point over the memory budget is recorded as skipped
//! with the plan's reason and never started. The others run one at a time, each as its own
//! child process (`ringload run … --output DIR/points/NAME`), so its CPU, peak memory and any
//! crash are its own. After each point its result is added to `DIR/sweep.json`, rewritten
//! atomically, so a sweep stopped at any moment (Ctrl-C, SIGTERM, a crash) leaves a valid
//! partial sweep that `--resume` completes.
//!
//! - **Rounds**: round 1 visits every point, then round 2, … (`--repeat`): slow drifts of the
//!   machine spread over all points instead of biasing the last ones.
//! - **Gating** (`--gate`): a point is skipped when a point of the same engine and other
//!   parameters with NP' ≤ NP and RT' ≤ RT failed or missed the AU target — the study's "NP=8,
//!   RT=8 only if NP=4, RT=4 passed", generalised. Points run smallest first.
//! - **Outcome of a point**: from the child's exit code (0 met, 1 missed, 3 failed, 2 a
//!   configuration error, a signal: crashed) and its summary.json when it wrote one.
//!
//! [`session`] is the command itself ([`request`] → grid → plans → points → study files);
//! [`table`] turns the results into the study's tables.

pub mod checkpoint;
pub mod html;
pub mod maxnp;
pub mod maxnp_report;
pub mod maxnp_results;
pub mod maxnp_search;
pub mod plots;
pub mod points;
pub mod request;
pub mod session;
pub mod table;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::exit::{self, ExitClass};
use crate::plan::Loader;

/// How often a running point is checked for an interrupt.
const POLL: Duration = Duration::from_millis(100);

/// One run of the grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// `uring` or `baseline`.
    pub engine: String,
    /// The loader profile.
    #[serde(default = "ringload_loader")]
    pub loader: Loader,
    pub np: u32,
    pub read_threads: u64,
    /// `None`: the workload's own value.
    pub prefetch: Option<u64>,
    pub coalesce_rgs: Option<u64>,
    pub computation_time: Option<f64>,
    /// 1-based round of `--repeat`.
    pub round: u32,
}

fn ringload_loader() -> Loader {
    Loader::Ringload
}

impl Point {
    /// The point without its round: what repeats share.
    pub fn key(&self) -> String {
        // A checkpoint workload's points have no read threads (0): `uring-np8`.
        let mut name = match self.read_threads {
            0 => format!("{}-np{}", self.engine, self.np),
            rt => format!("{}-np{}-rt{rt}", self.engine, self.np),
        };
        if self.loader != Loader::Ringload {
            name.push_str(&format!("-{}", self.loader));
        }
        if let Some(p) = self.prefetch {
            name.push_str(&format!("-pf{p}"));
        }
        if let Some(c) = self.coalesce_rgs {
            name.push_str(&format!("-cr{c}"));
        }
        if let Some(t) = self.computation_time {
            name.push_str(&format!("-ct{t}"));
        }
        name
    }

    /// The folder name of this point's results: its key and round.
    pub fn name(&self) -> String {
        format!("{}-r{}", self.key(), self.round)
    }

    /// The same engine and parameters but NP and RT (and round).
    fn same_family(&self, other: &Point) -> bool {
        self.engine == other.engine
            && self.loader == other.loader
            && self.prefetch == other.prefetch
            && self.coalesce_rgs == other.coalesce_rgs
            && self.computation_time == other.computation_time
    }
}

/// How a point ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran, AU target met.
    Met,
    /// Ran, AU target missed.
    Missed,
    /// Ran and failed (exit 3), or was refused by `run` (exit 2).
    Failed,
    /// The child died of a signal or wrote no summary.
    Crashed,
    /// Not started: over the memory budget, or its plan is invalid.
    Skipped,
    /// Not started: a smaller point of its family failed or missed (`--gate`).
    Gated,
}

impl Status {
    fn ran(self) -> bool {
        matches!(
            self,
            Status::Met | Status::Missed | Status::Failed | Status::Crashed
        )
    }

    /// The status as sweep.json and the tables write it.
    pub fn word(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::Missed => "missed",
            Status::Failed => "failed",
            Status::Crashed => "crashed",
            Status::Skipped => "skipped",
            Status::Gated => "gated",
        }
    }

    /// Whether points above it are gated.
    fn gates(self) -> bool {
        matches!(self, Status::Missed | Status::Failed | Status::Crashed)
    }
}

/// The result of one point, as sweep.json keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointResult {
    pub name: String,
    #[serde(flatten)]
    pub point: Point,
    pub status: Status,
    /// Why it was skipped or gated, or the failure's one line.
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// The child's wall time, start to exit.
    pub elapsed_s: f64,
    /// The shared embedded server's CPU during this point.
    pub server_cpu_s: Option<f64>,
    /// The point's summary.json, when it wrote one.
    pub summary: Option<serde_json::Value>,
}

/// The machine a sweep ran on, for the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    /// The CPU model, as /proc/cpuinfo names it.
    pub cpu: String,
    /// The cores this process may use.
    pub cores: usize,
    pub memory_bytes: u64,
    /// The kernel release.
    pub kernel: String,
}

impl Machine {
    pub fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim())
            })
            .unwrap_or("unknown")
            .to_string();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        let uname = rustix::system::uname();
        Machine {
            hostname: uname.nodename().to_string_lossy().into_owned(),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_bytes,
            kernel: uname.release().to_string_lossy().into_owned(),
        }
    }
}

/// `DIR/sweep.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepFile {
    pub workload: String,
    /// The sweep's command line, as given.
    pub command: String,
    #[serde(default)]
    pub machine: Machine,
    /// When the sweep started (HTTP date, UTC).
    #[serde(default)]
    pub started: String,
    /// The ringload that ran it: its version and the git commit it was built from.
    #[serde(default)]
    pub ringload_version: String,
    #[serde(default)]
    pub ringload_commit: String,
    /// Every point of the grid, in run order.
    pub planned: Vec<String>,
    pub points: Vec<PointResult>,
    /// `--find-max-np`: the search's answer per engine (and parameters), its evidence and the
    /// rule lines (`maxnp::FindMaxNp`); absent for a grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max_np: Option<serde_json::Value>,
}

impl SweepFile {
    /// Reads `DIR/sweep.json`.
    pub fn read(dir: &Path) -> Result<SweepFile, SweepError> {
        let path = dir.join("sweep.json");
        let text = std::fs::read_to_string(&path).map_err(|e| SweepError::Read {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| SweepError::Read {
            path,
            reason: format!("not a ringload sweep.json: {e}"),
        })
    }

    /// Writes `DIR/sweep.json` atomically: a reader sees the old file or the new one.
    fn write(&self, dir: &Path) -> Result<(), SweepError> {
        let path = dir.join("sweep.json");
        let tmp = dir.join(".sweep.json.tmp");
        let io = |e: io::Error| SweepError::Write {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        serde_json::to_writer_pretty(&mut file, self).map_err(|e| io(e.into()))?;
        file.write_all(b"\n").map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// The exit code of the whole sweep: 3 when a point failed or crashed, else 1 when one
    /// missed its AU target or did not run, else 0.
    pub fn exit_code(&self) -> u8 {
        let statuses: Vec<Status> = self.points.iter().map(|p| p.status).collect();
        if statuses
            .iter()
            .any(|s| matches!(s, Status::Failed | Status::Crashed))
        {
            exit::FAILED
        } else if statuses.iter().any(|s| *s != Status::Met)
            || self.points.len() < self.planned.len()
        {
            exit::AU_MISSED
        } else {
            exit::OK
        }
    }
}

/// What can stop a sweep itself (a point's failure never does).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("cannot read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("cannot write {}: {reason}; choose another --output", path.display())]
    Write { path: PathBuf, reason: String },
    #[error("cannot start '{}' for point {point}: {reason}", exe.display())]
    Spawn {
        exe: PathBuf,
        point: String,
        reason: String,
    },
    #[error(
        "--resume: {} holds a sweep of other points ({reason}); resume with the same grid, \
         --force to start over, or choose another --output",
        dir.display()
    )]
    OtherGrid { dir: PathBuf, reason: String },
    #[error(
        "--output {} holds {what}; pass --resume to continue it (the same grid), --force to \
         remove its sweep files first, or choose another --output",
        dir.display()
    )]
    Used { dir: PathBuf, what: String },
}

impl ExitClass for SweepError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// One point to run, with what its plan said.
#[derive(Debug, Clone)]
pub struct Planned {
    pub point: Point,
    /// Why it cannot run (over the memory budget, …), from its plan.
    pub skip: Option<String>,
    /// The plan's estimate of its duration: steps × epochs × computation time.
    pub estimate_s: f64,
}

/// How a sweep runs its points.
pub struct Runner<'a> {
    pub dir: PathBuf,
    pub workload: String,
    pub command: String,
    pub gate: bool,
    pub resume: bool,
    /// The child process of a point, writing into the given folder.
    pub child: &'a dyn Fn(&Point, &Path) -> Command,
    /// The shared embedded server's CPU so far, when there is one.
    pub server_cpu_s: &'a dyn Fn() -> Option<f64>,
    /// Set on Ctrl-C or SIGTERM.
    pub interrupt: Arc<AtomicBool>,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("dir", &self.dir).finish()
    }
}

impl Runner<'_> {
    /// Runs `planned` in order, writing each result as it comes. Returns the sweep and whether
    /// it was interrupted.
    pub fn run(&self, planned: &[Planned]) -> Result<(SweepFile, bool), SweepError> {
        let names: Vec<String> = planned.iter().map(|p| p.point.name()).collect();
        let mut sweep = if self.resume && self.dir.join("sweep.json").exists() {
            let mut old = SweepFile::read(&self.dir)?;
            if old.planned != names {
                return Err(SweepError::OtherGrid {
                    dir: self.dir.clone(),
                    reason: grid_difference(&old.planned, &names),
                });
            }
            // Kept: the points that finished with a complete summary.json; the others (no
            // summary, a truncated one, skipped or gated) are run or judged again.
            old.points
                .retain(|p| p.summary.is_some() && complete_summary(&self.dir, &p.name));
            old
        } else {
            SweepFile {
                workload: self.workload.clone(),
                command: self.command.clone(),
                machine: Machine::this(),
                started: httpdate::fmt_http_date(std::time::SystemTime::now()),
                ringload_version: env!("CARGO_PKG_VERSION").into(),
                ringload_commit: env!("RINGLOAD_COMMIT").into(),
                planned: names.clone(),
                points: Vec::new(),
                find_max_np: None,
            }
        };
        let done: BTreeMap<String, usize> = sweep
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        let todo: Vec<&Planned> = planned
            .iter()
            .filter(|p| !done.contains_key(&p.point.name()))
            .collect();
        if !done.is_empty() {
            eprintln!(
                "sweep: resuming: results kept for {} of {}; {} to run",
                done.len(),
                crate::units::counted(planned.len() as u64, "point"),
                todo.len()
            );
        }
        sweep.write(&self.dir)?;
        // Measured time over the plan's estimate, for the ETA.
        let (mut measured_s, mut estimated_s) = (0.0f64, 0.0f64);
        let total = todo.len();
        for (k, p) in todo.iter().enumerate() {
            if self.interrupt.load(Ordering::SeqCst) {
                return Ok((sweep, true));
            }
            let name = p.point.name();
            let result = if let Some(reason) = &p.skip {
                self.not_run(p, Status::Skipped, reason.clone())
            } else if let Some(by) = self.gated_by(&sweep, &p.point) {
                self.not_run(p, Status::Gated, format!("gated by {by}"))
            } else {
                let remaining: f64 = todo[k..]
                    .iter()
                    .filter(|q| q.skip.is_none())
                    .map(|q| q.estimate_s)
                    .sum();
                let scale = if estimated_s > 0.0 {
                    measured_s / estimated_s
                } else {
                    1.0
                };
                eprintln!(
                    "sweep: point {}/{total}: {name} (ETA {})",
                    k + 1,
                    crate::units::seconds((remaining * scale).round())
                );
                match self.run_point(p)? {
                    Some(result) => {
                        measured_s += result.elapsed_s;
                        estimated_s += p.estimate_s;
                        result
                    }
                    // Interrupted: no result, so --resume runs it again.
                    None => {
                        sweep.write(&self.dir)?;
                        return Ok((sweep, true));
                    }
                }
            };
            eprintln!("sweep: {name}: {}", describe(&result));
            sweep.points.push(result);
            sweep.write(&self.dir)?;
        }
        Ok((sweep, false))
    }

    fn not_run(&self, p: &Planned, status: Status, reason: String) -> PointResult {
        PointResult {
            name: p.point.name(),
            point: p.point.clone(),
            status,
            reason: Some(reason),
            exit_code: None,
            elapsed_s: 0.0,
            server_cpu_s: None,
            summary: None,
        }
    }

    /// The smaller point of the same family that missed or failed, if any.
    fn gated_by(&self, sweep: &SweepFile, point: &Point) -> Option<String> {
        if !self.gate {
            return None;
        }
        sweep
            .points
            .iter()
            .filter(|r| r.status.gates() && r.point.same_family(point))
            .filter(|r| r.point.np <= point.np && r.point.read_threads <= point.read_threads)
            .find(|r| (r.point.np, r.point.read_threads) != (point.np, point.read_threads))
            .map(|r| {
                format!(
                    "NP={},RT={} ({})",
                    r.point.np,
                    r.point.read_threads,
                    r.status.word()
                )
            })
    }

    /// Runs one point as a child process; `None` when the sweep was interrupted meanwhile.
    fn run_point(&self, p: &Planned) -> Result<Option<PointResult>, SweepError> {
        let name = p.point.name();
        let folder = self.dir.join("points").join(&name);
        let write_error = |e: io::Error| SweepError::Write {
            path: folder.clone(),
            reason: e.to_string(),
        };
        // A result left by an interrupted attempt is not this attempt's.
        if folder.exists() {
            std::fs::remove_dir_all(&folder).map_err(write_error)?;
        }
        std::fs::create_dir_all(&folder).map_err(write_error)?;
        let log = std::fs::File::create(folder.join("run.log")).map_err(write_error)?;
        let log_err = log.try_clone().map_err(write_error)?;
        let mut command = (self.child)(&p.point, &folder);
        command.stdin(Stdio::null()).stdout(log).stderr(log_err);
        let server_before = (self.server_cpu_s)();
        let started = Instant::now();
        let mut child = command.spawn().map_err(|e| SweepError::Spawn {
            exe: PathBuf::from(command.get_program()),
            point: name.clone(),
            reason: e.to_string(),
        })?;
        let mut signalled = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(_) => break None,
            }
            if self.interrupt.load(Ordering::SeqCst) && !signalled {
                // The child stops at its next wait and writes what it measured.
                if let Some(pid) = i32::try_from(child.id())
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                signalled = true;
            }
            std::thread::sleep(POLL);
        };
        let elapsed_s = started.elapsed().as_secs_f64();
        if self.interrupt.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let server_cpu_s = match (server_before, (self.server_cpu_s)()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let summary: Option<serde_json::Value> =
            std::fs::read_to_string(folder.join("summary.json"))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok());
        let code = status.and_then(|s| s.code());
        let failure = summary
            .as_ref()
            .and_then(|s| s["failure"].as_str().map(str::to_string))
            .or_else(|| last_line(&folder.join("run.log")));
        let (status, reason) = match (code, &summary) {
            (Some(0), Some(_)) => (Status::Met, None),
            (Some(1), Some(_)) => (Status::Missed, None),
            (Some(2 | 3), _) => (Status::Failed, failure),
            (Some(code), _) => (
                Status::Crashed,
                Some(format!(
                    "exit {code} without a summary: {}",
                    failure.unwrap_or_default()
                )),
            ),
            (None, _) => (
                Status::Crashed,
                Some(format!(
                    "killed by a signal{}",
                    failure.map(|f| format!(": {f}")).unwrap_or_default()
                )),
            ),
        };
        Ok(Some(PointResult {
            name,
            point: p.point.clone(),
            status,
            reason,
            exit_code: code,
            elapsed_s,
            server_cpu_s,
            summary,
        }))
    }
}

/// The files and folders a sweep writes into its `--output`: what marks a folder as holding a
/// sweep, and all that `--force` removes (anything else in the folder is left alone).
pub const SWEEP_FILES: [&str; 6] = [
    "sweep.json",
    ".sweep.json.tmp",
    "study.md",
    "study.csv",
    "study.json",
    "report.html",
];
/// The folders a sweep writes into its `--output` (see [`SWEEP_FILES`]).
pub const SWEEP_DIRS: [&str; 2] = ["points", "plots"];

/// Makes `dir` ready for a sweep: an empty or unrelated folder is used as it is; one that
/// holds a sweep (its sweep.json or points/) is refused unless `resume` (the runner then
/// checks the grid) or `force` (the sweep's own files are removed first).
pub fn claim_output(dir: &Path, resume: bool, force: bool) -> Result<(), SweepError> {
    let has_sweep = dir.join("sweep.json").exists();
    let has_points = dir.join("points").exists();
    if force {
        for name in SWEEP_FILES {
            let path = dir.join(name);
            if path.exists() {
                std::fs::remove_file(&path).map_err(|e| SweepError::Write {
                    reason: format!("--force cannot remove it: {e}"),
                    path,
                })?;
            }
        }
        for name in SWEEP_DIRS {
            let path = dir.join(name);
            if path.exists() {
                std::fs::remove_dir_all(&path).map_err(|e| SweepError::Write {
                    reason: format!("--force cannot remove it: {e}"),
                    path,
                })?;
            }
        }
        return Ok(());
    }
    if resume && (has_sweep || !has_points) {
        return Ok(());
    }
    if has_sweep || has_points {
        let what = match (has_sweep, resume) {
            (_, true) => "point folders (points/) but no sweep.json to resume".to_string(),
            (true, false) => match SweepFile::read(dir) {
                Ok(old) => format!(
                    "another sweep ({})",
                    crate::units::counted(old.planned.len() as u64, "point")
                ),
                Err(_) => "another sweep's sweep.json".to_string(),
            },
            (false, false) => "another sweep's point folders (points/)".to_string(),
        };
        return Err(SweepError::Used {
            dir: dir.to_path_buf(),
            what,
        });
    }
    Ok(())
}

/// Whether `DIR/points/NAME/summary.json` is a whole summary (it parses and has an outcome, or
/// is a checkpoint run's).
fn complete_summary(dir: &Path, name: &str) -> bool {
    std::fs::read_to_string(dir.join("points").join(name).join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|s| s["outcome"].is_string() || s["kind"] == "checkpoint")
}

/// What differs between the grid planned in a folder and the one asked for, in one line.
fn grid_difference(there: &[String], now: &[String]) -> String {
    let list = |names: Vec<&String>| {
        let shown: Vec<&str> = names.iter().take(3).map(|n| n.as_str()).collect();
        let more = if names.len() > 3 { ", …" } else { "" };
        format!("{}{more}", shown.join(", "))
    };
    let only_there: Vec<&String> = there.iter().filter(|n| !now.contains(n)).collect();
    let only_now: Vec<&String> = now.iter().filter(|n| !there.contains(n)).collect();
    let mut parts = vec![format!(
        "{} planned there, {} now",
        crate::units::counted(there.len() as u64, "point"),
        now.len()
    )];
    if !only_there.is_empty() {
        parts.push(format!("only there: {}", list(only_there)));
    }
    if !only_now.is_empty() {
        parts.push(format!("only now: {}", list(only_now)));
    }
    if parts.len() == 1 {
        parts.push("the same points in another order".into());
    }
    parts.join("; ")
}

/// A point's outcome in a few words, for the progress lines.
fn describe(result: &PointResult) -> String {
    let au = result
        .summary
        .as_ref()
        .and_then(|s| s["au_percent"].as_f64())
        .map(|au| format!(", AU {au:.1}%"))
        .unwrap_or_default();
    let reason = result
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let took = if result.status.ran() {
        format!(", {:.1} s", result.elapsed_s)
    } else {
        String::new()
    };
    format!("{}{au}{took}{reason}", result.status.word())
}

/// One line of a latency CDF: its legend and the latencies in ms, sorted.
pub type LatencyLine = (String, Vec<f64>);

/// The latency CDF's lines: at `at` (NP, RT), else the largest point that ran, the first round
/// of every engine and parameters there. Returns the plot's title and `(legend, latencies)`.
pub fn latency_lines(
    sweep: &SweepFile,
    dir: &Path,
    at: Option<(u32, u64)>,
) -> Option<(String, Vec<LatencyLine>)> {
    let ran = || sweep.points.iter().filter(|p| p.summary.is_some());
    let (np, rt) = at.or_else(|| {
        ran()
            .max_by_key(|p| (u64::from(p.point.np) * p.point.read_threads, p.point.np))
            .map(|p| (p.point.np, p.point.read_threads))
    })?;
    let mut lines: Vec<LatencyLine> = Vec::new();
    for p in ran().filter(|p| (p.point.np, p.point.read_threads) == (np, rt)) {
        let legend = format!("{} ({})", p.point.engine, p.point.key());
        if lines.iter().any(|(l, _)| *l == legend) {
            continue;
        }
        if let Some(values) = latencies_ms(dir, &p.name) {
            lines.push((legend, values));
        }
    }
    (!lines.is_empty()).then(|| (format!("GET latency CDF at NP={np}, RT={rt}"), lines))
}

/// The GET latencies (ms, sorted) of point `name`'s first epoch on, from its requests.csv.
pub fn latencies_ms(dir: &Path, name: &str) -> Option<Vec<f64>> {
    let text = std::fs::read_to_string(dir.join("points").join(name).join("requests.csv")).ok()?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.split(',').collect();
    let column = header.iter().position(|h| *h == "total_us")?;
    let mut values: Vec<f64> = lines
        .filter_map(|l| l.split(',').nth(column)?.parse::<f64>().ok())
        .map(|us| us / 1e3)
        .collect();
    values.sort_by(f64::total_cmp);
    (!values.is_empty()).then_some(values)
}

/// The last non-empty line of a log, for a point that died without a summary.
fn last_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.chars().take(300).collect())
}

/// The lists a grid is made of; `None` in a list stands for the workload's own value.
#[derive(Debug, Clone)]
pub struct Axes {
    pub loaders: Vec<Loader>,
    pub engines: Vec<String>,
    pub np: Vec<u32>,
    pub read_threads: Vec<u64>,
    pub prefetch: Vec<Option<u64>>,
    pub coalesce_rgs: Vec<Option<u64>>,
    pub computation_time: Vec<Option<f64>>,
    pub repeat: u32,
}

/// The grid, in run order: rounds, then engines and loaders, then the other parameters, then
/// NP and RT ascending (so gating sees the small points first).
pub fn grid(axes: &Axes) -> Vec<Point> {
    let mut sizes: Vec<(u32, u64)> = axes
        .np
        .iter()
        .flat_map(|&n| axes.read_threads.iter().map(move |&r| (n, r)))
        .collect();
    sizes.sort_by_key(|&(n, r)| (u64::from(n) * r, n, r));
    sizes.dedup();
    let mut points = Vec::new();
    for round in 1..=axes.repeat.max(1) {
        for engine in &axes.engines {
            for &loader in &axes.loaders {
                for &pf in &axes.prefetch {
                    for &cr in &axes.coalesce_rgs {
                        for &ct in &axes.computation_time {
                            for &(n, r) in &sizes {
                                points.push(Point {
                                    engine: engine.clone(),
                                    loader,
                                    np: n,
                                    read_threads: r,
                                    prefetch: pf,
                                    coalesce_rgs: cr,
                                    computation_time: ct,
                                    round,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(engine: &str, np: u32, rt: u64) -> Point {
        Point {
            engine: engine.into(),
            loader: Loader::Ringload,
            np,
            read_threads: rt,
            prefetch: None,
            coalesce_rgs: None,
            computation_time: None,
            round: 1,
        }
    }

    #[test]
    fn the_grid_runs_rounds_then_small_points_first() {
        let g = grid(&Axes {
            loaders: vec![Loader::Ringload],
            engines: vec!["uring".into(), "baseline".into()],
            np: vec![4, 1],
            read_threads: vec![2, 1],
            prefetch: vec![None],
            coalesce_rgs: vec![None],
            computation_time: vec![Some(0.05)],
            repeat: 2,
        });
        assert_eq!(g.len(), 16);
        let first: Vec<String> = g.iter().take(4).map(Point::name).collect();
        assert_eq!(
            first,
            [
                "uring-np1-rt1-ct0.05-r1",
                "uring-np1-rt2-ct0.05-r1",
                "uring-np4-rt1-ct0.05-r1",
                "uring-np4-rt2-ct0.05-r1"
            ]
        );
        assert_eq!(g[8].round, 2);
        let both = grid(&Axes {
            loaders: vec![Loader::Ringload, Loader::Dlio],
            engines: vec!["uring".into()],
            np: vec![2],
            read_threads: vec![2],
            prefetch: vec![None],
            coalesce_rgs: vec![None],
            computation_time: vec![None],
            repeat: 1,
        });
        let names: Vec<String> = both.iter().map(Point::name).collect();
        assert_eq!(names, ["uring-np2-rt2-r1", "uring-np2-rt2-dlio-r1"]);
    }

    #[test]
    fn exit_codes_follow_the_worst_point() {
        let result = |status| PointResult {
            name: String::new(),
            point: point("uring", 1, 1),
            status,
            reason: None,
            exit_code: None,
            elapsed_s: 0.0,
            server_cpu_s: None,
            summary: None,
        };
        let sweep = |statuses: &[Status], planned: usize| SweepFile {
            workload: String::new(),
            command: String::new(),
            machine: Machine::default(),
            started: String::new(),
            ringload_version: String::new(),
            ringload_commit: String::new(),
            planned: vec![String::new(); planned],
            points: statuses.iter().map(|&s| result(s)).collect(),
            find_max_np: None,
        };
        assert_eq!(sweep(&[Status::Met, Status::Met], 2).exit_code(), 0);
        assert_eq!(sweep(&[Status::Met], 2).exit_code(), 1);
        assert_eq!(sweep(&[Status::Met, Status::Skipped], 2).exit_code(), 1);
        assert_eq!(sweep(&[Status::Missed, Status::Crashed], 2).exit_code(), 3);
    }

    #[test]
    fn gating_looks_at_smaller_points_of_the_same_family() {
        let runner_dir = std::env::temp_dir();
        let child = |_: &Point, _: &Path| Command::new("true");
        let cpu = || None;
        let runner = Runner {
            dir: runner_dir,
            workload: String::new(),
            command: String::new(),
            gate: true,
            resume: false,
            child: &child,
            server_cpu_s: &cpu,
            interrupt: Arc::new(AtomicBool::new(false)),
        };
        let missed = PointResult {
            name: String::new(),
            point: point("uring", 2, 2),
            status: Status::Missed,
            reason: None,
            exit_code: Some(1),
            elapsed_s: 1.0,
            server_cpu_s: None,
            summary: None,
        };
        let sweep = SweepFile {
            workload: String::new(),
            command: String::new(),
            machine: Machine::default(),
            started: String::new(),
            ringload_version: String::new(),
            ringload_commit: String::new(),
            planned: vec![],
            points: vec![missed],
            find_max_np: None,
        };
        assert_eq!(
            runner.gated_by(&sweep, &point("uring", 4, 2)).as_deref(),
            Some("NP=2,RT=2 (missed)")
        );
        assert_eq!(runner.gated_by(&sweep, &point("uring", 4, 1)), None);
        assert_eq!(runner.gated_by(&sweep, &point("baseline", 4, 4)), None);
        assert_eq!(runner.gated_by(&sweep, &point("uring", 2, 2)), None);
    }
}
