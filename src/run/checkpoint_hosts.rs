//! A checkpoint run under mpirun (the `mpi` feature): what each process sends process 0 when
//! its phases end, and process 0's merge of them into the job's phases and hosts.
//!
//! Every process runs its share of the ranks ([`Cluster::ranks_of`]: a contiguous block, in
//! process order) through the same phases, meeting the others at each barrier. A failure
//! anywhere ends the job (`commands::run` aborts it), so when the results are gathered every
//! process ran the same phases in the same order. Process 0 merges phase by phase: the ranks'
//! records and stats in process order (so in global rank order, rank 0 first for DLIO's
//! metric), the phase's wall time the slowest host's, client CPU summed over the hosts. Each
//! phase's spans are measured from the process's own clock, started as the hosts leave the
//! phase's first barrier together: across hosts they agree to that barrier's skew.
//!
//! [`LatencyHistogram`] is not serializable: its recorded buckets travel
//! ([`LatencyHistogram::to_wire`]), and the ranged GETs' [`RequestStats`] as its
//! [`WireStats`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, HostSpan};
use crate::metrics::{LatencyHistogram, RequestStats, WireStats, static_cause};
use crate::rank::checkpoint::{ObjectStats, Phase, PhaseRecord, WriteStats};
use crate::summary::checkpoint::HostVolume;

/// How long a process other than 0 waits, on a refusal every process reached together, for
/// process 0 to print it and end the job.
const AGREED_WAIT: Duration = Duration::from_secs(30);

/// A refusal every process reached together (agreed, or shared from process 0): process 0
/// prints it and ends the job (`commands::run` aborts it); the others first wait for that
/// (bounded), so the job prints one line, not one per process.
pub fn agreed(cluster: &Cluster, e: impl Into<anyhow::Error>) -> anyhow::Error {
    if cluster.process() != 0 {
        std::thread::sleep(AGREED_WAIT);
    }
    e.into()
}

/// One phase's results: one process's (its ranks'), or the job's after [`merge`].
#[derive(Debug, Clone)]
pub struct PhaseResult {
    pub phase: Phase,
    /// The checkpoints' step numbers, in order.
    pub steps: Vec<u32>,
    /// Per rank, in global rank order.
    pub records: Vec<PhaseRecord>,
    pub stats: Vec<ObjectStats>,
    /// From the clock's start to the last rank's last checkpoint end (the slowest host's).
    pub wall_s: f64,
    /// The client processes' CPU over the phase, the embedded server's left out.
    pub client_cpu_s: f64,
    /// The embedded server's CPU over the phase (one process only: under mpirun the server
    /// is a process of its own).
    pub server_cpu_s: Option<f64>,
    /// The phase's time series, its samples from the phase's clock start.
    pub timeseries: crate::timeseries::Series,
    /// When the phase's clock started, in seconds after the run's start (its series' place
    /// in the run's).
    pub started_s: f64,
}

/// What one process sends process 0.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostCheckpoint {
    volume: HostVolume,
    phases: Vec<WirePhase>,
}

#[derive(Debug, Serialize, Deserialize)]
struct WirePhase {
    phase: Phase,
    steps: Vec<u32>,
    records: Vec<PhaseRecord>,
    stats: Vec<WireObjectStats>,
    wall_s: f64,
    client_cpu_s: f64,
    #[serde(default)]
    timeseries: crate::timeseries::Series,
    #[serde(default)]
    started_s: f64,
}

/// [`ObjectStats`] as they travel.
#[derive(Debug, Serialize, Deserialize)]
struct WireObjectStats {
    objects: u64,
    parts: u64,
    bytes_written: u64,
    retries: u64,
    retries_by_cause: BTreeMap<String, u64>,
    aborted: u64,
    #[serde(default)]
    sent: crate::metrics::RequestKinds,
    part_latency_us: Vec<(u64, u64)>,
    generate_cpu_ns: u64,
    #[serde(default)]
    checksum_cpu_ns: u64,
    zc_sends: u64,
    zc_copied: u64,
    settled_by_head: u64,
    #[serde(default)]
    checksum_unconfirmed: u64,
    #[serde(default)]
    restore_checked: u64,
    #[serde(default)]
    restore_unchecked: u64,
    #[serde(default)]
    restore_checksum_cpu_ns: u64,
    read: WireStats,
    read_first_byte_us: Vec<(u64, u64)>,
    read_latency_us: Vec<(u64, u64)>,
}

impl WireObjectStats {
    fn of(s: &ObjectStats) -> WireObjectStats {
        let w = &s.write;
        WireObjectStats {
            objects: w.objects,
            parts: w.parts,
            bytes_written: w.bytes_written,
            retries: w.retries,
            retries_by_cause: w
                .retries_by_cause
                .iter()
                .map(|(c, n)| (c.to_string(), *n))
                .collect(),
            aborted: w.aborted,
            sent: w.sent,
            part_latency_us: w.part_latency.to_wire(),
            generate_cpu_ns: w.generate_cpu.as_nanos() as u64,
            checksum_cpu_ns: w.checksum_cpu.as_nanos() as u64,
            zc_sends: w.zc_sends,
            zc_copied: w.zc_copied,
            settled_by_head: w.settled_by_head,
            checksum_unconfirmed: w.checksum_unconfirmed,
            restore_checked: s.restore.checked,
            restore_unchecked: s.restore.unchecked,
            restore_checksum_cpu_ns: s.restore.cpu.as_nanos() as u64,
            read: s.read.to_wire(),
            read_first_byte_us: s.read.first_byte.to_wire(),
            read_latency_us: s.read.total.to_wire(),
        }
    }

    fn into_stats(self) -> ObjectStats {
        let mut read = RequestStats::from_wire(self.read);
        // The histograms as measured (a trace, where an engine keeps one, rebuilds the same).
        read.first_byte = LatencyHistogram::from_wire(&self.read_first_byte_us);
        read.total = LatencyHistogram::from_wire(&self.read_latency_us);
        ObjectStats {
            write: WriteStats {
                objects: self.objects,
                parts: self.parts,
                bytes_written: self.bytes_written,
                retries: self.retries,
                retries_by_cause: self
                    .retries_by_cause
                    .iter()
                    .map(|(c, n)| (static_cause(c), *n))
                    .collect(),
                aborted: self.aborted,
                sent: self.sent,
                part_latency: LatencyHistogram::from_wire(&self.part_latency_us),
                generate_cpu: Duration::from_nanos(self.generate_cpu_ns),
                checksum_cpu: Duration::from_nanos(self.checksum_cpu_ns),
                zc_sends: self.zc_sends,
                zc_copied: self.zc_copied,
                settled_by_head: self.settled_by_head,
                checksum_unconfirmed: self.checksum_unconfirmed,
            },
            read,
            restore: crate::rank::checkpoint::RestoreCheckStats {
                checked: self.restore_checked,
                unchecked: self.restore_unchecked,
                cpu: Duration::from_nanos(self.restore_checksum_cpu_ns),
            },
        }
    }
}

impl HostCheckpoint {
    /// This process's report: its volume and its phases.
    pub fn new(volume: HostVolume, phases: &[PhaseResult]) -> HostCheckpoint {
        HostCheckpoint {
            volume,
            phases: phases
                .iter()
                .map(|p| WirePhase {
                    phase: p.phase,
                    steps: p.steps.clone(),
                    records: p.records.clone(),
                    stats: p.stats.iter().map(WireObjectStats::of).collect(),
                    wall_s: p.wall_s,
                    client_cpu_s: p.client_cpu_s,
                    timeseries: p.timeseries.clone(),
                    started_s: p.started_s,
                })
                .collect(),
        }
    }
}

/// Every process's report merged on process 0 (`None` on the others): the job's phases and
/// one volume per process, in process order.
pub fn gather(
    cluster: &Cluster,
    mine: &HostCheckpoint,
) -> anyhow::Result<Option<(Vec<PhaseResult>, Vec<HostVolume>)>> {
    let Some(all) = cluster.gather(&serde_json::to_vec(mine)?) else {
        return Ok(None);
    };
    let reports = all
        .iter()
        .map(|r| serde_json::from_slice(r))
        .collect::<Result<Vec<HostCheckpoint>, _>>()?;
    Ok(Some(merge(reports)?))
}

/// The job's phases from every host's report (in process order), each merged as every
/// span of hosts is ([`HostSpan::merge`]), and their volumes.
fn merge(reports: Vec<HostCheckpoint>) -> anyhow::Result<(Vec<PhaseResult>, Vec<HostVolume>)> {
    // Process 0's phases: what each one is, its steps and its place in the run.
    let heads: Vec<(Phase, Vec<u32>, f64)> = reports.first().map_or(Vec::new(), |r| {
        r.phases
            .iter()
            .map(|p| (p.phase, p.steps.clone(), p.started_s))
            .collect()
    });
    let mut spans: Vec<Vec<HostSpan<PhaseRecord, ObjectStats>>> =
        heads.iter().map(|_| Vec::new()).collect();
    let mut volumes = Vec::new();
    for (process, report) in reports.into_iter().enumerate() {
        if report.phases.len() != heads.len() {
            anyhow::bail!(
                "process {process} ran {} phases where process 0 ran {} (a bug)",
                report.phases.len(),
                heads.len()
            );
        }
        for (i, wire) in report.phases.into_iter().enumerate() {
            if wire.phase != heads[i].0 {
                anyhow::bail!(
                    "process {process} ran {:?} where process 0 ran {:?} (a bug)",
                    wire.phase,
                    heads[i].0
                );
            }
            spans[i].push(HostSpan {
                records: wire.records,
                stats: (wire.stats.into_iter())
                    .map(WireObjectStats::into_stats)
                    .collect(),
                wall_s: wire.wall_s,
                client_cpu_s: wire.client_cpu_s,
                timeseries: wire.timeseries,
            });
        }
        volumes.push(report.volume);
    }
    let phases = heads
        .into_iter()
        .zip(spans)
        .map(|((phase, steps, started_s), hosts)| {
            let job = HostSpan::merge(hosts);
            PhaseResult {
                phase,
                steps,
                records: job.records,
                stats: job.stats,
                wall_s: job.wall_s,
                client_cpu_s: job.client_cpu_s,
                server_cpu_s: None,
                timeseries: job.timeseries,
                started_s,
            }
        })
        .collect();
    Ok((phases, volumes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(process: usize, ranks: std::ops::Range<usize>, bytes: u64) -> HostCheckpoint {
        let mut stats = ObjectStats::default();
        stats.write.bytes_written = bytes;
        stats.write.parts = 2;
        *stats.write.retries_by_cause.entry("503").or_default() += 1;
        stats
            .write
            .part_latency
            .record(Duration::from_millis(3 + process as u64));
        stats.read.bytes_read = bytes / 2;
        stats.read.total.record(Duration::from_millis(7));
        let records: Vec<PhaseRecord> = ranks
            .clone()
            .map(|r| PhaseRecord {
                spans_s: vec![(0.0, 1.0 + r as f64)],
            })
            .collect();
        let phase = PhaseResult {
            phase: Phase::Save,
            steps: vec![1],
            records,
            stats: ranks.clone().map(|_| stats.clone()).collect(),
            wall_s: 1.0 + process as f64,
            client_cpu_s: 0.5,
            server_cpu_s: None,
            timeseries: Default::default(),
            started_s: 0.0,
        };
        let volume = HostVolume {
            host: format!("h{process}"),
            ranks: ranks.collect(),
            bytes_per_checkpoint: bytes,
            bytes_written: bytes,
            bytes_read: 0,
            peak_rss_bytes: Some(1 << 20),
            memory_budget_bytes: 1 << 21,
        };
        let report = HostCheckpoint::new(volume, &[phase]);
        // As it travels.
        serde_json::from_slice(&serde_json::to_vec(&report).unwrap()).unwrap()
    }

    #[test]
    fn hosts_merge_in_rank_order_slowest_wall_summed_cpu() {
        let (phases, volumes) = merge(vec![host(0, 0..2, 100), host(1, 2..3, 40)]).unwrap();
        assert_eq!(phases.len(), 1);
        let save = &phases[0];
        assert_eq!(save.records.len(), 3);
        assert_eq!(save.records[2].spans_s, vec![(0.0, 3.0)]);
        assert_eq!(save.wall_s, 2.0);
        assert_eq!(save.client_cpu_s, 1.0);
        let mut all = ObjectStats::default();
        for s in &save.stats {
            all.merge(s);
        }
        assert_eq!(all.write.bytes_written, 240);
        assert_eq!(all.write.parts, 6);
        assert_eq!(all.write.retries_by_cause.get("503"), Some(&3));
        assert_eq!(all.write.part_latency.count(), 3);
        assert_eq!(all.read.bytes_read, 120);
        assert_eq!(all.read.total.count(), 3);
        let hosts: Vec<&str> = volumes.iter().map(|v| v.host.as_str()).collect();
        assert_eq!(hosts, ["h0", "h1"]);
        assert_eq!(volumes[1].ranks, vec![2]);
    }

    #[test]
    fn hosts_that_ran_different_phases_are_a_bug_named() {
        let mut other = host(1, 1..2, 1);
        other.phases.clear();
        let e = merge(vec![host(0, 0..1, 1), other]).unwrap_err();
        assert!(e.to_string().contains("process 1 ran 0 phases"), "{e}");
    }
}
