//! summary.json of a checkpoint run: DLIO's `metric` fields, computed as DLIO computes them,
//! and beside them what DLIO's summary hides.
//!
//! DLIO (`statscounter.py`, reference A4): per checkpoint, rank 0's duration t1 − t0 (after
//! the barrier, its own saves in sequence); its throughput is the whole checkpoint's size in
//! GiB (`checkpoint_size_GB`, GiB despite the name) ÷ that duration; the summary's mean and
//! stdev are over checkpoints, of rank 0's figures only (numpy's `std`: the population
//! standard deviation). Here also: each checkpoint's slowest and fastest rank, the bytes per
//! host, part and ranged-GET latencies, client CPU per GiB (the generator's CPU kept apart),
//! and the peak RSS against the budget.

use serde::Serialize;

use super::{Outcome, TargetSummary};
use crate::metrics::{Distribution, cpu_s_per_gib, mean_stdev};
use crate::rank::checkpoint::{ObjectStats, Phase, PhaseRecord};

const GIB: f64 = (1u64 << 30) as f64;

/// DLIO's `metric` object of a checkpoint summary, under DLIO's names.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[allow(non_snake_case)]
pub struct DlioCheckpointMetric {
    pub checkpoint_size_GB: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_checkpoint_io_mean_GB_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_checkpoint_io_stdev_GB_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_checkpoint_duration_mean_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_checkpoint_duration_stdev_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_checkpoint_io_mean_GB_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_checkpoint_io_stdev_GB_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_checkpoint_duration_mean_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_checkpoint_duration_stdev_seconds: Option<f64>,
}

/// One checkpoint saved or loaded, across ranks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckpointRow {
    pub phase: Phase,
    /// The checkpoint's step number (`global_epoch1_step<step>`).
    pub step: u32,
    /// Rank 0's duration: DLIO's figure.
    pub rank0_duration_s: f64,
    /// `checkpoint_size_GB` ÷ rank 0's duration: DLIO's figure.
    pub rank0_gib_per_second: f64,
    pub slowest_rank: usize,
    pub slowest_rank_duration_s: f64,
    pub fastest_rank: usize,
    pub fastest_rank_duration_s: f64,
    /// From the first rank's start to the last rank's end: the checkpoint as the storage saw it.
    pub all_ranks_s: f64,
    /// `checkpoint_size_GB` ÷ `all_ranks_s`.
    pub all_ranks_gib_per_second: f64,
}

/// Rows of one phase from every rank's record (`records[r]` is rank r's, global order); `steps`
/// the checkpoints' step numbers in order.
pub fn rows(
    phase: Phase,
    records: &[PhaseRecord],
    steps: &[u32],
    size_gib: f64,
) -> Vec<CheckpointRow> {
    let mut rows = Vec::new();
    for (i, &step) in steps.iter().enumerate() {
        let spans: Vec<(usize, f64, f64)> = records
            .iter()
            .enumerate()
            .filter_map(|(r, rec)| rec.spans_s.get(i).map(|&(a, b)| (r, a, b)))
            .collect();
        let Some(&(_, r0_start, r0_end)) = spans.iter().find(|(r, _, _)| *r == 0) else {
            break;
        };
        let duration = |s: &(usize, f64, f64)| s.2 - s.1;
        let slowest = spans
            .iter()
            .max_by(|a, b| duration(a).total_cmp(&duration(b)));
        let fastest = spans
            .iter()
            .min_by(|a, b| duration(a).total_cmp(&duration(b)));
        let (Some(slowest), Some(fastest)) = (slowest, fastest) else {
            break;
        };
        let first = spans.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
        let last = spans.iter().map(|s| s.2).fold(0.0f64, f64::max);
        let rank0 = (r0_end - r0_start).max(1e-9);
        let all = (last - first).max(1e-9);
        rows.push(CheckpointRow {
            phase,
            step,
            rank0_duration_s: rank0,
            rank0_gib_per_second: size_gib / rank0,
            slowest_rank: slowest.0,
            slowest_rank_duration_s: duration(slowest),
            fastest_rank: fastest.0,
            fastest_rank_duration_s: duration(fastest),
            all_ranks_s: all,
            all_ranks_gib_per_second: size_gib / all,
        });
    }
    rows
}

impl DlioCheckpointMetric {
    /// DLIO's metric from the rows: rank 0's durations and throughputs, mean and stdev over
    /// checkpoints, per phase that ran.
    pub fn of(size_gib: f64, rows: &[CheckpointRow]) -> DlioCheckpointMetric {
        let stats = |phase: Phase| {
            let durations: Vec<f64> = rows
                .iter()
                .filter(|r| r.phase == phase)
                .map(|r| r.rank0_duration_s)
                .collect();
            let rates: Vec<f64> = rows
                .iter()
                .filter(|r| r.phase == phase)
                .map(|r| r.rank0_gib_per_second)
                .collect();
            (mean_stdev(&rates), mean_stdev(&durations))
        };
        let (save_io, save_d) = stats(Phase::Save);
        let (load_io, load_d) = stats(Phase::Load);
        DlioCheckpointMetric {
            checkpoint_size_GB: size_gib,
            save_checkpoint_io_mean_GB_per_second: save_io.map(|m| m.0),
            save_checkpoint_io_stdev_GB_per_second: save_io.map(|m| m.1),
            save_checkpoint_duration_mean_seconds: save_d.map(|m| m.0),
            save_checkpoint_duration_stdev_seconds: save_d.map(|m| m.1),
            load_checkpoint_io_mean_GB_per_second: load_io.map(|m| m.0),
            load_checkpoint_io_stdev_GB_per_second: load_io.map(|m| m.1),
            load_checkpoint_duration_mean_seconds: load_d.map(|m| m.0),
            load_checkpoint_duration_stdev_seconds: load_d.map(|m| m.1),
        }
    }
}

/// What one phase's I/O did, over every rank.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PhaseIo {
    /// Whether every rank finished every checkpoint of the phase (else the figures are up to
    /// its failure, and `metric` has none of it).
    pub completed: bool,
    pub bytes: u64,
    /// Parts (and single PUTs) for saves, ranged GETs for loads.
    pub requests: u64,
    /// Every request the phase sent, by kind, as the store sees them: saves' creations,
    /// parts, completions, single PUTs, aborts and settling HEADs; loads' ranged GETs and
    /// checksum HEADs.
    pub requests_by_kind: crate::metrics::RequestKinds,
    pub retries: u64,
    pub retries_by_cause: std::collections::BTreeMap<String, u64>,
    /// Uploads aborted (saves).
    pub aborted: u64,
    /// Part latency (saves: first attempt to answer) or ranged-GET latency (loads), ms.
    pub latency_ms: Distribution,
    /// The phase's wall time, from its clock's start to the last rank's last checkpoint end.
    pub wall_s: f64,
    pub client_cpu_s: f64,
    /// The generator's CPU (saves): kept apart from the I/O's.
    pub generate_cpu_s: f64,
    /// The checksums' CPU: the parts' (saves, `--checksum`), the blocks' CRCs (loads,
    /// `--restore-checksum`); kept apart from the I/O's and the generator's.
    pub checksum_cpu_s: f64,
    /// `--verify`'s CPU (loads).
    pub verify_cpu_s: f64,
    /// Client CPU-s per GiB moved, the generator's and the check's CPU left out.
    pub client_cpu_s_per_gib: Option<f64>,
    pub generate_cpu_s_per_gib: Option<f64>,
    pub checksum_cpu_s_per_gib: Option<f64>,
    /// What the phase cost the client in all per GiB moved: the I/O's CPU with the
    /// generator's, the checksums' and the check's (`client_cpu_s` over the bytes).
    pub total_cpu_s_per_gib: Option<f64>,
    /// `SEND_ZC` sends and notifications that said the kernel copied anyway (io_uring).
    pub zc_sends: u64,
    pub zc_copied: u64,
    /// Uploads whose CompleteMultipartUpload answer was lost or unclear, found completed by
    /// a HEAD of the object (saves).
    pub settled_by_head: u64,
    /// Uploads sent with a checksum whose completion carried none back (saves): the store may
    /// ignore checksums.
    pub checksum_unconfirmed: u64,
    /// Objects whose FULL_OBJECT CRC, from a HEAD, matched the CRCs of the blocks read
    /// (loads, `--restore-checksum`), and objects the HEAD returned none for.
    pub checksum_checked: u64,
    pub checksum_unchecked: u64,
    /// The embedded server's CPU over the phase, per GiB (when it runs in-process).
    pub server_cpu_s_per_gib: Option<f64>,
}

impl PhaseIo {
    /// The phase's figures from every rank's stats and the phase's CPU (process less server).
    pub fn of(
        phase: Phase,
        stats: &[ObjectStats],
        wall_s: f64,
        client_cpu_s: f64,
        server_cpu_s: Option<f64>,
    ) -> PhaseIo {
        let mut all = ObjectStats::default();
        for s in stats {
            all.merge(s);
        }
        let mut io = PhaseIo {
            wall_s,
            client_cpu_s,
            ..PhaseIo::default()
        };
        match phase {
            Phase::Save => {
                let w = &all.write;
                io.bytes = w.bytes_written;
                io.requests = w.parts;
                io.requests_by_kind = w.sent;
                io.retries = w.retries;
                io.retries_by_cause = w
                    .retries_by_cause
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect();
                io.aborted = w.aborted;
                io.latency_ms = w.part_latency.summary();
                io.generate_cpu_s = w.generate_cpu.as_secs_f64();
                io.checksum_cpu_s = w.checksum_cpu.as_secs_f64();
                io.zc_sends = w.zc_sends;
                io.zc_copied = w.zc_copied;
                io.settled_by_head = w.settled_by_head;
                io.checksum_unconfirmed = w.checksum_unconfirmed;
            }
            Phase::Load => {
                let r = &all.read;
                io.bytes = r.bytes_read;
                io.requests = r.requests;
                io.requests_by_kind = r.by_kind;
                io.retries = r.retries;
                io.retries_by_cause = r
                    .retries_by_cause
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect();
                io.latency_ms = r.total.summary();
                io.verify_cpu_s = r.verify.cpu.as_secs_f64();
                io.checksum_cpu_s = all.restore.cpu.as_secs_f64();
                io.checksum_checked = all.restore.checked;
                io.checksum_unchecked = all.restore.unchecked;
            }
        }
        let io_cpu =
            (client_cpu_s - io.generate_cpu_s - io.checksum_cpu_s - io.verify_cpu_s).max(0.0);
        io.client_cpu_s_per_gib = cpu_s_per_gib(io_cpu, io.bytes);
        io.total_cpu_s_per_gib = cpu_s_per_gib(client_cpu_s, io.bytes);
        io.generate_cpu_s_per_gib = (phase == Phase::Save)
            .then(|| cpu_s_per_gib(io.generate_cpu_s, io.bytes))
            .flatten();
        io.checksum_cpu_s_per_gib = cpu_s_per_gib(io.checksum_cpu_s, io.bytes)
            .filter(|_| phase == Phase::Save || io.checksum_checked > 0);
        io.server_cpu_s_per_gib = server_cpu_s.and_then(|s| cpu_s_per_gib(s, io.bytes));
        io
    }
}

/// One host's share of a checkpoint run (uneven by design: model writers sit on the first
/// hosts).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct HostVolume {
    pub host: String,
    pub ranks: Vec<usize>,
    /// Bytes one checkpoint puts through this host.
    pub bytes_per_checkpoint: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub peak_rss_bytes: Option<u64>,
    pub memory_budget_bytes: u64,
}

/// summary.json of a checkpoint run.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointSummary {
    /// `checkpoint`: tells a reader this is not a training summary.
    pub kind: &'static str,
    /// How the run ended, as a training summary says it: `completed`, `failed` or
    /// `interrupted`.
    pub outcome: Outcome,
    /// Why the run did not complete (the one line exit 3 prints); absent when it completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub ringload_version: &'static str,
    pub workload: String,
    pub model: String,
    pub engine: crate::engine::EngineKind,
    pub np: usize,
    pub num_hosts: usize,
    /// Wall-clock start and end of the measured phases, RFC 3339 UTC.
    pub start: String,
    pub end: String,
    /// DLIO's fields, under DLIO's names, computed as DLIO does (rank 0's figures), of the
    /// phases that completed only: a phase that failed or was interrupted puts no figure
    /// here (its rows and bytes stay, under ringload's names), and a run in which none
    /// completed has no `metric` at all, as DLIO writes no summary for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<DlioCheckpointMetric>,
    pub checkpoint_bytes: u64,
    pub objects_per_checkpoint: usize,
    pub checkpoints: Vec<CheckpointRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save: Option<PhaseIo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<PhaseIo>,
    pub hosts: Vec<HostVolume>,
    pub io_shape: crate::checkpoint::ObjectIoShape,
    pub peak_rss_bytes: Option<u64>,
    pub memory_budget_bytes: u64,
    pub target: TargetSummary,
    /// The split form's read run: seconds between the write run's end (`--after DIR`) and this
    /// run's start (the rules allow 30).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_write_run_s: Option<f64>,
    /// Incomplete uploads under the checkpoint prefix aborted before the run started.
    pub stale_uploads_aborted: usize,
    /// Listing pages the run sent outside the phases (ListMultipartUploads of the clean-up,
    /// the ListObjectsV2 of the checkpoint folder before restores, the bucket check).
    pub lists: u64,
    /// MLPerf's checkpointing rules, one line each ([`crate::mlperf::checkpoint_rules`]).
    pub rules: Vec<crate::mlperf::Rule>,
    pub notes: Vec<String>,
    /// What limited the run ([`super::limit::checkpoint_limit`]): the report's last line.
    pub limit: super::limit::RunLimit,
    /// One sample per `interval_s` of the save phase then the load phase, each from its own
    /// clock's start, on the run's time (timeseries.csv).
    pub timeseries: crate::timeseries::Series,
}

/// GiB of `bytes` (the unit of `checkpoint_size_GB`).
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(spans: &[(f64, f64)]) -> PhaseRecord {
        PhaseRecord {
            spans_s: spans.to_vec(),
        }
    }

    #[test]
    fn dlio_takes_rank_zero_figures() {
        // Rank 1 is slower; DLIO's published figures are rank 0's all the same.
        let records = [
            rec(&[(0.0, 2.0), (5.0, 9.0)]),
            rec(&[(0.0, 3.0), (5.0, 10.0)]),
        ];
        let rows = rows(Phase::Save, &records, &[1, 2], 10.0);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].rank0_duration_s, 2.0);
        assert_eq!(rows[0].rank0_gib_per_second, 5.0);
        assert_eq!(rows[0].slowest_rank, 1);
        assert_eq!(rows[0].slowest_rank_duration_s, 3.0);
        assert_eq!(rows[1].all_ranks_s, 5.0);
        let m = DlioCheckpointMetric::of(10.0, &rows);
        // Rates 5.0 and 2.5: mean 3.75, population stdev 1.25.
        assert_eq!(m.save_checkpoint_io_mean_GB_per_second, Some(3.75));
        assert_eq!(m.save_checkpoint_io_stdev_GB_per_second, Some(1.25));
        assert_eq!(m.save_checkpoint_duration_mean_seconds, Some(3.0));
        assert_eq!(m.save_checkpoint_duration_stdev_seconds, Some(1.0));
        assert!(m.load_checkpoint_io_mean_GB_per_second.is_none());
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("load_checkpoint_io_mean_GB_per_second").is_none());
        assert_eq!(json["checkpoint_size_GB"], 10.0);
    }

    #[test]
    fn a_failed_phase_keeps_the_whole_checkpoints_only() {
        let records = [rec(&[(0.0, 1.0)]), rec(&[(0.0, 1.5), (2.0, 3.0)])];
        assert_eq!(rows(Phase::Load, &records, &[1, 2], 1.0).len(), 1);
    }
}
