//! How much of a DLIO run's AU loss its storage explains, and how much is DLIO's own client.
//!
//! Given a DLIO run and a ringload run of the same workload, NP, RT and computation time,
//! `compare` splits DLIO's loss (100 − AU, in AU points) into:
//! - **storage**: ringload's own loss on the same workload (100 − its AU): what the storage costs
//!   a client that adds nothing of its own;
//! - **DLIO's client**, the rest, in the parts DLIO's output lets one measure. DLIO's AU of a
//!   rank's block is `Σ compute ÷ D`, `D` the block's time less its excluded steps' `proc`
//!   (`statscounter.compute_metrics_train`), so its loss is `(D − Σ compute) ÷ D`, and `D −
//!   Σ compute` is made of, over the counted steps:
//!   - the waits for a batch (`load`): the storage's share (above) and the rest, the hand-off of
//!     each batch from the DataLoader worker to the rank;
//!   - DLIO's bookkeeping in a step (`proc − load − compute`);
//!   - the waits at the barrier after each step (`comm.barrier()`, the simulated all-reduce),
//!     which DLIO does not record: the ranks leave a barrier together, so a rank waits there
//!     `max over ranks of proc[i] − its proc[i]` — a stall of one rank charged to every other;
//!   - the start-up skew: the first (excluded) step's barrier is the first in the block, where a
//!     rank whose first batch came early waits for the latest, from the block's start
//!     (`N_per_epoch_stats.json`) plus its first step's `proc`; that wait is in `D`;
//!   - what none of these is (the barrier's own latency, the loop, the block's end): not
//!     attributed.
//!
//! Each part is `100 × X ÷ D` per rank and block, weighted as DLIO weighs its AU (blocks by
//! their steps, then the mean over ranks, then over epochs), so the parts add up to DLIO's
//! loss; the "not attributed" part is what is left of the summary's loss, so they add up to it
//! exactly. A part the output cannot give (no per-rank files, no per-step lists, one rank) is a
//! line saying so, and its time stays in "not attributed".

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

/// What the attribution reads of one entry of the table.
#[derive(Debug, Clone)]
pub struct Run {
    /// The input's letter and what ran: `A: dlio`, `B: uring (dlio loader)`.
    pub group: String,
    pub np: u32,
    pub read_threads: Option<u64>,
    pub computation_time_s: Option<f64>,
    pub au_percent: Option<f64>,
    pub origin: Origin,
}

/// Where an entry came from, as the attribution needs it (not part of the table).
#[derive(Debug, Clone, Default)]
pub enum Origin {
    #[default]
    Unknown,
    /// A DLIO output folder.
    Dlio {
        folder: PathBuf,
        /// Its workload's names: `workload=` of its overrides, `model.name` of its config.
        workloads: Vec<String>,
        /// `output.metric.exclude_start_steps` and `exclude_end_steps` (DLIO's defaults 1, 0).
        exclude_start_steps: usize,
        exclude_end_steps: usize,
    },
    /// A ringload run or a sweep's point.
    Ringload {
        workload: String,
        /// `ringload` or `dlio`.
        loader: String,
        /// Measured I/O wait per step, mean (ms), where the input has it.
        io_wait_per_step_ms: Option<f64>,
        /// It read ringload's embedded server (not a store DLIO could have read).
        embedded: bool,
    },
}

/// One part of DLIO's AU loss.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// `storage`, `startup_skew`, `barrier_waits`, `batch_handoff`, `step_bookkeeping`,
    /// `not_attributed`.
    pub key: &'static str,
    pub label: &'static str,
    pub au_points: f64,
    /// What it was measured from.
    pub detail: String,
}

/// The attribution at one (NP, RT), or why there is none.
#[derive(Debug, Clone, Serialize)]
pub struct Gap {
    pub np: u32,
    pub read_threads: Option<u64>,
    /// The groups compared: DLIO's and ringload's.
    pub dlio: String,
    pub ringload: String,
    pub dlio_au_percent: Option<f64>,
    pub ringload_au_percent: Option<f64>,
    /// 100 − DLIO's AU.
    pub dlio_loss_au_points: Option<f64>,
    /// 100 − ringload's AU.
    pub storage_au_points: Option<f64>,
    /// DLIO's loss less the storage's.
    pub client_au_points: Option<f64>,
    /// Storage first, then DLIO's client's parts, the last "not attributed": they add up to
    /// `dlio_loss_au_points`.
    pub parts: Vec<Part>,
    /// What could not be attributed, and caveats.
    pub lines: Vec<String>,
    /// Why no attribution is given (mismatched inputs); the figures are then absent.
    pub no_attribution: Option<String>,
}

/// A workload's name as both sides match it: a path's file stem, then `workload_key`.
fn workload_key(name: &str) -> String {
    let path = Path::new(name.trim());
    let stem = match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => path.file_stem().and_then(|s| s.to_str()).unwrap_or(name),
        _ => path.file_name().and_then(|s| s.to_str()).unwrap_or(name),
    };
    super::checkpoint::workload_key(stem)
}

/// The attributions of the DLIO entries that have a ringload entry at their (NP, RT), and a
/// line for each DLIO entry that has none while ringload entries were given.
pub fn gaps(entries: &[Run]) -> Vec<Gap> {
    let is_dlio = |e: &&Run| matches!(e.origin, Origin::Dlio { .. });
    let is_ours = |e: &&Run| matches!(e.origin, Origin::Ringload { .. });
    let ours: Vec<&Run> = entries.iter().filter(is_ours).collect();
    if ours.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for dlio in entries.iter().filter(is_dlio) {
        let here: Vec<&&Run> = ours
            .iter()
            .filter(|e| e.np == dlio.np && e.read_threads == dlio.read_threads)
            .collect();
        // The DLIO-parity profile where there is one: it reads ahead as DLIO's loader does.
        let pick = here
            .iter()
            .find(|e| matches!(&e.origin, Origin::Ringload { loader, .. } if loader == "dlio"))
            .or(here.first());
        let Some(ours) = pick else {
            let points: Vec<String> = ours
                .iter()
                .map(|e| format!("{} at NP {}, RT {}", e.group, e.np, rt(e.read_threads)))
                .collect();
            out.push(refused(
                dlio,
                None,
                format!(
                    "no ringload run at DLIO's NP {}, RT {} (given: {}); run ringload there \
                     (`--np {} --read-threads {} --loader dlio`)",
                    dlio.np,
                    rt(dlio.read_threads),
                    points.join(", "),
                    dlio.np,
                    rt(dlio.read_threads)
                ),
            ));
            continue;
        };
        out.push(attribute(dlio, ours));
    }
    out
}

fn rt(r: Option<u64>) -> String {
    r.map_or_else(|| "unknown".into(), |r| r.to_string())
}

fn refused(dlio: &Run, ours: Option<&Run>, why: String) -> Gap {
    Gap {
        np: dlio.np,
        read_threads: dlio.read_threads,
        dlio: dlio.group.clone(),
        ringload: ours.map(|e| e.group.clone()).unwrap_or_default(),
        dlio_au_percent: dlio.au_percent,
        ringload_au_percent: ours.and_then(|e| e.au_percent),
        dlio_loss_au_points: None,
        storage_au_points: None,
        client_au_points: None,
        parts: Vec::new(),
        lines: Vec::new(),
        no_attribution: Some(why),
    }
}

/// DLIO's entry `dlio` against ringload's `ours` at the same (NP, RT).
fn attribute(dlio: &Run, ours: &Run) -> Gap {
    let (
        Origin::Dlio {
            folder,
            workloads,
            exclude_start_steps,
            exclude_end_steps,
        },
        Origin::Ringload {
            workload,
            loader,
            io_wait_per_step_ms,
            embedded,
        },
    ) = (&dlio.origin, &ours.origin)
    else {
        return refused(dlio, Some(ours), "not a DLIO and a ringload input".into());
    };
    if let Some(why) = mismatch(dlio, ours, folder, workloads, workload) {
        return refused(dlio, Some(ours), why);
    }
    let (Some(dlio_au), Some(our_au)) = (dlio.au_percent, ours.au_percent) else {
        return refused(dlio, Some(ours), "an input has no AU".into());
    };
    let loss = 100.0 - dlio_au;
    let storage = 100.0 - our_au;
    let mut lines = caveats(dlio, ours, loader, *embedded, loss, storage);
    let mut parts = vec![Part {
        key: "storage",
        label: "storage: ringload's loss on the same workload, NP and RT",
        au_points: storage,
        detail: format!("100 − {}'s AU {our_au:.2}%", ours.group),
    }];
    let ranks = DlioRanks::read(
        folder,
        dlio.np as usize,
        *exclude_start_steps,
        *exclude_end_steps,
    );
    match ranks {
        Err(why) => lines.push(format!(
            "DLIO's client's share is not split: {why}; all {:.2} points of it are left \
             unattributed",
            loss - storage
        )),
        Ok(ranks) => client_parts(
            ranks.split(),
            loss,
            storage,
            *io_wait_per_step_ms,
            &mut parts,
            &mut lines,
        ),
    }
    let attributed: f64 = parts.iter().map(|p| p.au_points).sum();
    parts.push(Part {
        key: "not_attributed",
        label: "not attributed",
        au_points: loss - attributed,
        detail: "the barrier's own latency, DLIO's loop, the block's end: DLIO records none".into(),
    });
    Gap {
        np: dlio.np,
        read_threads: dlio.read_threads,
        dlio: dlio.group.clone(),
        ringload: ours.group.clone(),
        dlio_au_percent: Some(dlio_au),
        ringload_au_percent: Some(our_au),
        dlio_loss_au_points: Some(loss),
        storage_au_points: Some(storage),
        client_au_points: Some(loss - storage),
        parts,
        lines,
        no_attribution: None,
    }
}

/// Why DLIO's entry and ringload's cannot be compared (DLIO's workload unknown or another,
/// another computation time); `None` when they can.
fn mismatch(
    dlio: &Run,
    ours: &Run,
    folder: &std::path::Path,
    workloads: &[String],
    workload: &str,
) -> Option<String> {
    if workloads.is_empty() {
        return Some(format!(
            "DLIO's workload is unknown (no dlio_config/config.yaml or overrides.yaml in {}): \
             it cannot be matched with ringload's {workload}",
            folder.display()
        ));
    }
    let key = workload_key(workload);
    if !workloads.iter().any(|w| workload_key(w) == key) {
        return Some(format!(
            "the inputs ran different workloads (DLIO: {}; ringload: {workload}): run \
             ringload on DLIO's workload",
            workloads.join(" / ")
        ));
    }
    if let (Some(a), Some(b)) = (dlio.computation_time_s, ours.computation_time_s)
        && (a - b).abs() > 1e-9
    {
        return Some(format!(
            "the inputs ran different computation times (DLIO {a} s, ringload {b} s): their \
             AU losses are not comparable; run ringload with --computation-time {a}"
        ));
    }
    None
}

/// The lines that qualify an attribution: a computation time taken as the same, ringload's own
/// loader, its embedded server, ringload losing more than DLIO.
fn caveats(
    dlio: &Run,
    ours: &Run,
    loader: &str,
    embedded: bool,
    loss: f64,
    storage: f64,
) -> Vec<String> {
    let mut lines = Vec::new();
    if dlio.computation_time_s.is_none() || ours.computation_time_s.is_none() {
        lines.push(
            "an input does not say its computation time: taken to be the same in both".into(),
        );
    }
    if loader != "dlio" {
        lines.push(format!(
            "{} ran ringload's own loader, not `--loader dlio`: it reads ahead differently from \
             DLIO's loader, so the storage's share is what that profile loses",
            ours.group
        ));
    }
    if embedded {
        lines.push(format!(
            "{} read ringload's embedded server, not the store DLIO read: the storage's share \
             is that server's; for DLIO's store, run ringload against DLIO's endpoint",
            ours.group
        ));
    }
    if storage > loss {
        lines.push(format!(
            "ringload lost more AU ({storage:.2} points) than DLIO ({loss:.2}): the runs did not \
             see the same storage (another store, or a slower moment), so the split below does \
             not hold"
        ));
    }
    lines
}

/// DLIO's client's parts from its ranks' `split`: start-up skew, barrier waits, the batch
/// hand-off beyond the storage's share, bookkeeping; and its lines.
fn client_parts(
    split: Split,
    loss: f64,
    storage: f64,
    io_wait_per_step_ms: Option<f64>,
    parts: &mut Vec<Part>,
    lines: &mut Vec<String>,
) {
    lines.extend(split.lines);
    if (split.loss - loss).abs() > 0.01 {
        lines.push(format!(
            "DLIO's ranks' figures give a loss of {:.2} points, its summary.json {loss:.2}: \
             the difference is in \"not attributed\"",
            split.loss
        ));
    }
    if let Some(skew) = split.skew {
        parts.push(Part {
            key: "startup_skew",
            label: "DLIO's client: start-up skew, charged at the first barrier",
            au_points: skew.au_points,
            detail: skew.detail,
        });
    }
    if let Some(b) = split.barrier {
        parts.push(Part {
            key: "barrier_waits",
            label: "DLIO's client: per-step barrier waits for a slower rank's step",
            au_points: b.au_points,
            detail: b.detail,
        });
    }
    let mut handoff_detail = split.wait.detail;
    if let Some(ms) = io_wait_per_step_ms {
        let _ = write!(
            handoff_detail,
            "; ringload's measured I/O wait {ms:.2} ms per step"
        );
    }
    parts.push(Part {
        key: "batch_handoff",
        label: "DLIO's client: batch waits beyond the storage's share (the hand-off)",
        au_points: split.wait.au_points - storage,
        detail: handoff_detail,
    });
    parts.push(Part {
        key: "step_bookkeeping",
        label: "DLIO's client: bookkeeping between batch loaded and compute",
        au_points: split.bookkeeping.au_points,
        detail: split.bookkeeping.detail,
    });
}

/// One rank's block of one epoch, as `N_output.json` and `N_per_epoch_stats.json` hold it.
#[derive(Debug, Clone, Default)]
struct Block {
    /// Seconds (from the timestamp's own day count), where the stats file has it.
    start_s: Option<f64>,
    load_s: Vec<f64>,
    proc_s: Vec<f64>,
    compute_s: Vec<f64>,
    au_percent: Option<f64>,
}

/// Every rank's blocks, by (epoch, block) names as DLIO writes them (`"1"`, `"block1"`).
#[derive(Debug, Clone)]
pub(crate) struct DlioRanks {
    ranks: Vec<BTreeMap<(u64, u64), Block>>,
    exclude_start_steps: usize,
    exclude_end_steps: usize,
}

/// A part in AU points and what it was measured from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figure {
    pub au_points: f64,
    pub detail: String,
}

/// DLIO's loss split from its ranks' files.
#[derive(Debug, Clone, Default)]
pub(crate) struct Split {
    /// 100 − AU from the ranks' figures (the summary's, recomputed).
    pub loss: f64,
    /// Waits for a batch (`load`), counted steps.
    pub wait: Figure,
    pub bookkeeping: Figure,
    /// `None` with one rank, or without the ranks' block start times.
    pub skew: Option<Figure>,
    pub barrier: Option<Figure>,
    /// What could not be computed.
    pub lines: Vec<String>,
}

/// `2026-12-03T06:36:23.690155` (DLIO's `utcnow()`) as seconds since 1970-01-01.
fn timestamp_s(text: &str) -> Option<f64> {
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (h, min) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    let s = t.next()?.trim_end_matches('Z').parse::<f64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn block_number(name: &str) -> Option<u64> {
    name.strip_prefix("block")?.parse().ok()
}

impl DlioRanks {
    /// Ranks `0..np`'s `N_output.json` (and `N_per_epoch_stats.json`, where present) in
    /// `folder`; `Err` says what is missing.
    pub(crate) fn read(
        folder: &Path,
        np: usize,
        exclude_start_steps: usize,
        exclude_end_steps: usize,
    ) -> Result<DlioRanks, String> {
        let read = |name: String| -> Result<Option<Value>, String> {
            let path = folder.join(&name);
            match std::fs::read_to_string(&path) {
                Err(_) => Ok(None),
                Ok(text) => serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| format!("{} is not JSON ({e})", path.display())),
            }
        };
        // np comes from the input (num_accelerators): no allocation sized by it up front; a
        // huge value ends at the first rank file missing.
        let mut ranks = Vec::new();
        for rank in 0..np {
            let Some(output) = read(format!("{rank}_output.json"))? else {
                return Err(format!(
                    "DLIO's per-rank output ({rank}_output.json) is not in {}",
                    folder.display()
                ));
            };
            let stats = read(format!("{rank}_per_epoch_stats.json"))?;
            let mut blocks = BTreeMap::new();
            for (epoch, figures) in output.as_object().into_iter().flatten() {
                let Ok(epoch) = epoch.parse::<u64>() else {
                    continue;
                };
                let Some(proc) = figures["proc"].as_object() else {
                    continue;
                };
                for name in proc.keys() {
                    let Some(b) = block_number(name) else {
                        continue;
                    };
                    let start = stats
                        .as_ref()
                        .and_then(|s| s[epoch.to_string()][name]["start"].as_str())
                        .and_then(timestamp_s);
                    blocks.insert(
                        (epoch, b),
                        Block {
                            start_s: start,
                            load_s: numbers(&figures["load"][name]),
                            proc_s: numbers(&figures["proc"][name]),
                            compute_s: numbers(&figures["compute"][name]),
                            au_percent: figures["au"][name].as_f64(),
                        },
                    );
                }
            }
            let usable = blocks.values().any(|b| {
                !b.proc_s.is_empty()
                    && b.proc_s.len() == b.load_s.len()
                    && b.proc_s.len() == b.compute_s.len()
                    && b.au_percent.is_some_and(|a| a > 0.0)
            });
            if !usable {
                return Err(format!(
                    "{rank}_output.json has no per-step load, proc and compute lists with the \
                     block's AU"
                ));
            }
            ranks.push(blocks);
        }
        Ok(DlioRanks {
            ranks,
            exclude_start_steps,
            exclude_end_steps,
        })
    }

    /// The loss and its measurable parts, in AU points weighted as DLIO weighs its AU.
    pub(crate) fn split(&self) -> Split {
        let np = self.ranks.len();
        let x = self.exclude_start_steps;
        let mut t = self.tally();
        let mut lines = Vec::new();
        let median_ms = {
            t.medians_ms.sort_by(f64::total_cmp);
            t.medians_ms
                .get(t.medians_ms.len() / 2)
                .copied()
                .unwrap_or(0.0)
        };
        let wait_detail = format!(
            "DLIO's load times: {:.2} s over {} counted steps, median {median_ms:.2} ms per step",
            t.wait_s_total, t.counted_steps
        );
        let skew = if np < 2 {
            lines.push(
                "start-up skew and barrier waits: none at NP 1 (one rank waits for no other)"
                    .into(),
            );
            None
        } else if !t.skew_known {
            lines.push(if x == 0 {
                "start-up skew: not separable, DLIO counted its first step (exclude_start_steps \
                 0): it is in the barrier waits"
                    .into()
            } else {
                "start-up skew: not computed, a rank's N_per_epoch_stats.json (its block start) \
                 is missing: it stays in \"not attributed\""
                    .into()
            });
            None
        } else {
            Some(Figure {
                au_points: t.skew,
                detail: format!(
                    "ranks' block start + first step's proc: rank {} waited {:.3} s at the first \
                     barrier",
                    t.skew_s_max.1, t.skew_s_max.0
                ),
            })
        };
        let barrier = (np >= 2).then(|| Figure {
            au_points: t.barrier,
            detail: format!(
                "per step, the slowest rank's proc less each rank's: {} waits over 10 ms, the \
                 longest {:.1} ms (rank {}, step {})",
                t.stalls_over_10_ms,
                t.stall_max.0 * 1000.0,
                t.stall_max.1,
                t.stall_max.2
            ),
        });
        Split {
            loss: t.loss,
            wait: Figure {
                au_points: t.wait,
                detail: wait_detail,
            },
            bookkeeping: Figure {
                au_points: t.keep,
                detail: "proc − load − compute per counted step".into(),
            },
            skew,
            barrier,
            lines,
        }
    }

    /// Sums every rank's counted blocks of every epoch: sums of 100 × X ÷ D, each rank-epoch's
    /// blocks weighted by their steps, then the mean over ranks and over epochs.
    fn tally(&self) -> Tally {
        let np = self.ranks.len();
        let x = self.exclude_start_steps;
        let mut epochs: BTreeMap<u64, Vec<(usize, u64)>> = BTreeMap::new();
        for (r, blocks) in self.ranks.iter().enumerate() {
            for &(e, b) in blocks.keys() {
                epochs.entry(e).or_default().push((r, b));
            }
        }
        let mut t = Tally {
            skew_known: np > 1 && x >= 1,
            ..Tally::default()
        };
        let epoch_count = epochs.len().max(1) as f64;
        for &epoch in epochs.keys() {
            for (r, blocks) in self.ranks.iter().enumerate() {
                let mine: Vec<(&(u64, u64), &Block)> =
                    blocks.iter().filter(|((e, _), _)| *e == epoch).collect();
                let steps_all: usize = mine.iter().map(|(_, b)| b.proc_s.len()).sum();
                for (&(_, bn), b) in mine {
                    let n = b.proc_s.len();
                    let Some(au) = b.au_percent.filter(|a| *a > 0.0) else {
                        continue;
                    };
                    if n == 0 || b.load_s.len() != n || b.compute_s.len() != n {
                        continue;
                    }
                    let range = x.min(n)..n.saturating_sub(self.exclude_end_steps).max(x.min(n));
                    let compute: f64 = b.compute_s[range.clone()].iter().sum();
                    let d = 100.0 * compute / au;
                    if d <= 0.0 {
                        continue;
                    }
                    let w = n as f64 / steps_all as f64 / np as f64 / epoch_count;
                    let pts = |seconds: f64| 100.0 * seconds / d * w;
                    t.loss += (100.0 - au) * w;
                    let waited: f64 = b.load_s[range.clone()].iter().sum();
                    t.wait += pts(waited);
                    t.wait_s_total += waited;
                    t.counted_steps += range.len();
                    let mut loads: Vec<f64> = b.load_s[range.clone()].to_vec();
                    loads.sort_by(f64::total_cmp);
                    if let Some(m) = loads.get(loads.len() / 2) {
                        t.medians_ms.push(m * 1000.0);
                    }
                    t.keep += pts(range
                        .clone()
                        .map(|i| b.proc_s[i] - b.load_s[i] - b.compute_s[i])
                        .sum());
                    if np < 2 {
                        continue;
                    }
                    let others: Vec<&Block> = self
                        .ranks
                        .iter()
                        .filter_map(|o| o.get(&(epoch, bn)))
                        .collect();
                    if others.len() < np {
                        continue;
                    }
                    t.waits(&others, b, r, range, x, &pts);
                }
            }
        }
        t
    }
}

/// What [`DlioRanks::split`] sums over the counted blocks: AU points and the figures their
/// details quote.
#[derive(Debug, Default)]
struct Tally {
    loss: f64,
    wait: f64,
    keep: f64,
    skew: f64,
    barrier: f64,
    /// Whether every block had the ranks' start times for the start-up skew.
    skew_known: bool,
    /// The longest wait at the first barrier: (seconds, rank).
    skew_s_max: (f64, usize),
    /// The longest per-step barrier wait: (seconds, rank, step).
    stall_max: (f64, usize, usize),
    stalls_over_10_ms: usize,
    medians_ms: Vec<f64>,
    counted_steps: usize,
    wait_s_total: f64,
}

impl Tally {
    /// Adds block `b` of rank `r`'s waits for the other ranks (`others`, every rank's block of
    /// the same epoch and number): the barrier after each counted step, and the first barrier.
    fn waits(
        &mut self,
        others: &[&Block],
        b: &Block,
        r: usize,
        range: std::ops::Range<usize>,
        x: usize,
        pts: &dyn Fn(f64) -> f64,
    ) {
        // The barrier after each counted step: the slowest rank's proc less ours.
        let common = others.iter().map(|o| o.proc_s.len()).min().unwrap_or(0);
        let mut waits = 0.0;
        for i in range.filter(|i| *i < common) {
            let slowest = others.iter().map(|o| o.proc_s[i]).fold(0.0, f64::max);
            let waited = slowest - b.proc_s[i];
            if waited > self.stall_max.0 {
                self.stall_max = (waited, r, i + 1);
            }
            if waited > 0.010 {
                self.stalls_over_10_ms += 1;
            }
            waits += waited;
        }
        self.barrier += pts(waits);
        // The first barrier: the latest rank's end of its excluded steps, from
        // each rank's block start.
        let ends: Option<Vec<f64>> = others
            .iter()
            .map(|o| Some(o.start_s? + o.proc_s.iter().take(x).sum::<f64>()))
            .collect();
        match (ends, b.start_s) {
            (Some(ends), Some(start)) if x >= 1 => {
                let mine = start + b.proc_s.iter().take(x).sum::<f64>();
                let latest = ends.iter().copied().fold(f64::MIN, f64::max);
                let waited = (latest - mine).max(0.0);
                if waited > self.skew_s_max.0 {
                    self.skew_s_max = (waited, r);
                }
                self.skew += pts(waited);
            }
            _ => self.skew_known = false,
        }
    }
}

/// The attributions as a markdown section (empty without any).
pub fn markdown(gaps: &[Gap]) -> String {
    let mut out = String::new();
    for g in gaps {
        let _ = writeln!(
            out,
            "\n### DLIO's AU loss at NP {}, RT {}: {} against {}\n",
            g.np,
            rt(g.read_threads),
            g.dlio,
            if g.ringload.is_empty() {
                "ringload"
            } else {
                &g.ringload
            }
        );
        if let Some(why) = &g.no_attribution {
            let _ = writeln!(out, "No attribution: {why}.");
            continue;
        }
        let (Some(loss), Some(storage), Some(client)) = (
            g.dlio_loss_au_points,
            g.storage_au_points,
            g.client_au_points,
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "DLIO's AU {:.2}% is {loss:.2} points below 100; ringload's {:.2}% on the same \
             workload is {storage:.2} below: the storage explains {storage:.2} points, DLIO's \
             client {client:.2}.\n",
            g.dlio_au_percent.unwrap_or(0.0),
            g.ringload_au_percent.unwrap_or(0.0),
        );
        out.push_str("| part | AU points | of DLIO's loss | measured from |\n|---|---|---|---|\n");
        for p in &g.parts {
            let share = if loss > 0.0 {
                format!("{:.0}%", 100.0 * p.au_points / loss)
            } else {
                "—".into()
            };
            let _ = writeln!(
                out,
                "| {} | {:.2} | {share} | {} |",
                p.label, p.au_points, p.detail
            );
        }
        let _ = writeln!(
            out,
            "| DLIO's loss (100 − AU) | {loss:.2} | 100% | {}'s summary.json |",
            g.dlio
        );
        for line in &g.lines {
            let _ = writeln!(out, "\n- {line}");
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn fixture(run: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/dlio-output")
            .join(run)
    }

    fn close(a: f64, b: f64, what: &str) {
        assert!((a - b).abs() < 5e-4, "{what}: {a} against {b}");
    }

    /// A ringload run at (NP, RT) with AU `au` on the fixtures' workload.
    fn ours(np: u32, rt: u64, au: f64, workload: &str, ct: f64) -> Run {
        Run {
            group: "B: uring (dlio loader)".into(),
            np,
            read_threads: Some(rt),
            computation_time_s: Some(ct),
            au_percent: Some(au),
            origin: Origin::Ringload {
                workload: workload.into(),
                loader: "dlio".into(),
                io_wait_per_step_ms: Some(0.01),
                embedded: false,
            },
        }
    }

    /// DLIO's run in `folder`, as `compare` reads np2rt2's summary.json and dlio_config
    /// (NP 2, RT 2, computation_time 0.05, AU 87.940081445401, workload=flux_tiny).
    fn dlio_in(folder: &Path) -> Run {
        Run {
            group: "A: dlio".into(),
            np: 2,
            read_threads: Some(2),
            computation_time_s: Some(0.05),
            au_percent: Some(87.940081445401),
            origin: Origin::Dlio {
                folder: folder.to_path_buf(),
                workloads: vec!["flux_tiny".into(), "flux".into()],
                exclude_start_steps: 1,
                exclude_end_steps: 0,
            },
        }
    }

    fn dlio(run: &str) -> Run {
        dlio_in(&fixture(run))
    }

    #[test]
    fn np2rt2_splits_into_skew_barrier_waits_and_batch_waits() {
        // By hand from np2rt2's files (steps 2..48 counted: exclude_start_steps 1):
        // D_r = Σ compute[1..] ÷ (au_r/100): rank 0 2.3556857 ÷ 0.8105639 = 2.9062307 s,
        // rank 1 2.3555834 ÷ 0.9482377 = 2.4841697 s; the loss is the mean of 100 − au_r:
        // (18.943609 + 5.176228) ÷ 2 = 12.059919 (= 100 − summary's 87.940081).
        // Skew: block1 start + proc[0]: rank 0 23.690155 + 3.1263952 = 26.8165502, rank 1
        // 23.690150 + 3.5490065 = 27.2391565: rank 0 waited 0.4226063 s at the first barrier,
        // 100 × 0.4226063 ÷ 2.9062307 ÷ 2 = 7.2707 points.
        // Batch waits Σ load[1..]: 0.0876713 and 0.0909715 s: (3.01666 + 3.66205) ÷ 2 = 3.3394.
        // Barrier waits Σ_i max(proc_0[i], proc_1[i]) − proc_r[i]: 0.0316887 and 0.0287912 s:
        // (1.09037 + 1.15899) ÷ 2 = 1.1247. Bookkeeping Σ proc − load − compute: 0.0020723
        // and 0.0017719 s: (0.071306 + 0.071329) ÷ 2 = 0.0713.
        let split = DlioRanks::read(&fixture("np2rt2"), 2, 1, 0)
            .unwrap()
            .split();
        close(split.loss, 100.0 - 87.940081445401, "loss");
        close(split.skew.as_ref().unwrap().au_points, 7.2707, "skew");
        assert!(
            split.skew.unwrap().detail.contains("rank 0 waited 0.423 s"),
            "the faster rank is charged"
        );
        close(split.wait.au_points, 3.3394, "batch waits");
        close(split.barrier.as_ref().unwrap().au_points, 1.1247, "barrier");
        close(split.bookkeeping.au_points, 0.0713, "bookkeeping");
        // The longest barrier wait: rank 0 at step 2 (rank 1's proc[1] 71.85 ms against
        // rank 0's 53.81 ms: 18.0 ms).
        assert!(
            split
                .barrier
                .unwrap()
                .detail
                .contains("18.0 ms (rank 0, step 2)"),
            "the longest stall named"
        );
    }

    #[test]
    fn np1rt1_has_no_skew_nor_barrier_waits() {
        // By hand from np1rt1: D = Σ compute[1..] 4.7627766 ÷ 0.9649296 = 4.9358797 s; batch
        // waits Σ load[1..] 0.1588829 s: 3.2189 points; bookkeeping 0.0044489 s: 0.0901;
        // loss 100 − 96.4929637 = 3.5070.
        let split = DlioRanks::read(&fixture("np1rt1"), 1, 1, 0)
            .unwrap()
            .split();
        close(split.loss, 100.0 - 96.4929636789231, "loss");
        close(split.wait.au_points, 3.2189, "batch waits");
        close(split.bookkeeping.au_points, 0.0901, "bookkeeping");
        assert!(split.skew.is_none() && split.barrier.is_none());
        assert!(
            split.lines.iter().any(|l| l.contains("none at NP 1")),
            "{:?}",
            split.lines
        );
    }

    #[test]
    fn the_parts_add_up_to_dlio_loss_with_storage_from_ringload() {
        let a = dlio("np2rt2");
        let gaps = gaps(&[a, ours(2, 2, 99.0, "some/dir/flux_tiny.yaml", 0.05)]);
        assert_eq!(gaps.len(), 1);
        let g = &gaps[0];
        assert!(g.no_attribution.is_none(), "{g:?}");
        close(g.dlio_loss_au_points.unwrap(), 12.0599, "loss");
        close(g.storage_au_points.unwrap(), 1.0, "storage");
        close(g.client_au_points.unwrap(), 11.0599, "client");
        let part = |k: &str| g.parts.iter().find(|p| p.key == k).unwrap().au_points;
        close(part("startup_skew"), 7.2707, "skew");
        close(part("barrier_waits"), 1.1247, "barrier");
        // The batch waits less the storage's share: 3.3394 − 1.0.
        close(part("batch_handoff"), 2.3394, "hand-off");
        // 12.0599 − 1.0 − 7.2707 − 1.1247 − 2.3394 − 0.0713.
        close(part("not_attributed"), 0.2539, "rest");
        let total: f64 = g.parts.iter().map(|p| p.au_points).sum();
        close(total, g.dlio_loss_au_points.unwrap(), "sum");
        let md = markdown(&gaps);
        assert!(
            md.contains("the storage explains 1.00 points, DLIO's client 11.06"),
            "{md}"
        );
    }

    #[test]
    fn mismatched_inputs_say_why_there_is_no_attribution() {
        let why = |b: Run| {
            gaps(&[dlio("np2rt2"), b])[0]
                .no_attribution
                .clone()
                .unwrap()
        };
        assert!(why(ours(2, 2, 99.0, "flux_b200", 0.05)).contains("different workloads"));
        assert!(why(ours(2, 2, 99.0, "flux_tiny", 0.5)).contains("different computation times"));
        let other_rt = why(ours(2, 1, 99.0, "flux_tiny", 0.05));
        assert!(
            other_rt.contains("no ringload run at DLIO's NP 2, RT 2"),
            "{other_rt}"
        );
        // No ringload input: no section at all.
        assert!(gaps(&[dlio("np2rt2")]).is_empty());
    }

    #[test]
    fn without_per_rank_files_the_client_share_stays_unattributed() {
        // np2rt2's summary alone: no N_output.json beside it.
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            fixture("np2rt2").join("summary.json"),
            dir.path().join("summary.json"),
        )
        .unwrap();
        let a = dlio_in(dir.path());
        let g = gaps(&[a, ours(2, 2, 99.0, "flux_tiny", 0.05)]).remove(0);
        let keys: Vec<_> = g.parts.iter().map(|p| p.key).collect();
        assert_eq!(keys, ["storage", "not_attributed"]);
        close(g.parts[1].au_points, 11.0599, "the client's share");
        assert!(
            g.lines
                .iter()
                .any(|l| l.contains("0_output.json") && l.contains("not split")),
            "{:?}",
            g.lines
        );
    }

    #[test]
    fn dlio_timestamps_parse_to_seconds() {
        let a = timestamp_s("2026-12-03T06:36:23.690155").unwrap();
        let b = timestamp_s("2026-12-04T00:00:00").unwrap();
        close(
            b - a,
            86_400.0 - (6.0 * 3600.0 + 36.0 * 60.0 + 23.690155),
            "difference",
        );
        assert_eq!(timestamp_s("1970-01-01T00:00:00"), Some(0.0));
        assert_eq!(timestamp_s("not a time"), None);
    }
}
