//! The processes of one run: one, or several started by `mpirun` (the `mpi` feature, rsmpi
//! over Open MPI), each running some of the run's ranks as pinned threads.
//!
//! - [`Cluster::start`] joins the MPI world when a launcher started this process with a world
//!   size above 1 (`OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`); a binary built without the feature
//!   refuses that in one line (exit 2) rather than run W copies of the same job.
//! - Process 0 lists the bucket and reads the footers; [`Cluster::broadcast`] hands the catalog
//!   to the others, so the store sees one LIST and one footer read per file, not W.
//! - [`Cluster::all_agree`] makes a set-up refusal on any host (its memory budget) every
//!   host's exit 2; [`Cluster::gather`] brings each process's measurements to process 0.
//! - **Lockstep across hosts**: the step barrier's last local arrival does not turn it; a
//!   coordinator thread ([`host_barrier`]) meets the other processes at an MPI barrier and then
//!   turns it. The rank threads never call MPI: they keep waiting as in one process (the io_uring
//!   engine reaping its ring, woken by the barrier's eventfd), so their I/O is served while the
//!   hosts meet.
//! - **Failure**: a process whose run fails calls `MPI_Abort(3)`: the launcher ends every process,
//!   and none waits at a barrier for it.
//! - **The job's budget and results**: [`Cluster::agree_budget`] checks each host's share of the
//!   plan ([`host_share`]) against that host's memory; at the end each process sends its
//!   [`HostReport`] ([`Cluster::gather_reports`]) and process 0 merges them ([`Merged::of`])
//!   into the job's measurements.

use serde::{Deserialize, Serialize};

use crate::budget::{self, BudgetShape, MemoryLimits};
use crate::exit::UsageError;
use crate::metrics::{RequestStats, WireStats};
use crate::plan::Plan;
use crate::rank::RankRecord;

/// The world size an MPI launcher gave this process, if any.
pub fn launcher_world_size(env: &dyn Fn(&str) -> Option<String>) -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|name| env(name)?.trim().parse().ok())
}

/// This process's place among the run's processes.
pub struct Cluster {
    process: usize,
    processes: usize,
    #[cfg(feature = "mpi")]
    /// Held so MPI is finalized when the run ends.
    _universe: Option<mpi::environment::Universe>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("process", &self.process)
            .field("processes", &self.processes)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// One process, or this one's place in the MPI world. The error is the line to print.
    pub fn start(env: &dyn Fn(&str) -> Option<String>) -> Result<Cluster, String> {
        let size = launcher_world_size(env).unwrap_or(1);
        if size <= 1 {
            return Ok(Cluster::single());
        }
        Cluster::join(size)
    }

    /// The one process of a run without MPI.
    pub fn single() -> Cluster {
        Cluster {
            process: 0,
            processes: 1,
            #[cfg(feature = "mpi")]
            _universe: None,
        }
    }

    #[cfg(not(feature = "mpi"))]
    fn join(size: usize) -> Result<Cluster, String> {
        Err(format!(
            "started by an MPI launcher as one of {size} processes, but this ringload was built \
             without MPI; rebuild it with `cargo build --release --features mpi` (needs Open MPI: \
             libopenmpi-dev), or run it without mpirun"
        ))
    }

    #[cfg(feature = "mpi")]
    fn join(_size: usize) -> Result<Cluster, String> {
        use mpi::traits::Communicator;
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .ok_or("cannot initialize MPI (was it initialized already?)")?;
        if threading < mpi::Threading::Serialized {
            return Err(format!(
                "this MPI library gives threading level {threading:?}; ringload needs \
                 MPI_THREAD_SERIALIZED or more (Open MPI 4 has it)"
            ));
        }
        let world = universe.world();
        Ok(Cluster {
            process: world.rank() as usize,
            processes: world.size() as usize,
            _universe: Some(universe),
        })
    }

    pub fn process(&self) -> usize {
        self.process
    }

    pub fn processes(&self) -> usize {
        self.processes
    }

    pub fn is_single(&self) -> bool {
        self.processes == 1
    }

    /// The ranks process `process` runs of `np`: an even split, the first `np mod processes`
    /// processes one more, in order (global rank numbers).
    pub fn ranks_of(process: usize, processes: usize, np: usize) -> std::ops::Range<usize> {
        let base = np / processes;
        let extra = np % processes;
        let start = process * base + process.min(extra);
        let len = base + usize::from(process < extra);
        start..start + len
    }

    /// Process 0's `bytes` on every process.
    pub fn broadcast(&self, bytes: Vec<u8>) -> Vec<u8> {
        if self.is_single() {
            return bytes;
        }
        self.broadcast_mpi(bytes)
    }

    #[cfg(not(feature = "mpi"))]
    fn broadcast_mpi(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }

    #[cfg(feature = "mpi")]
    fn broadcast_mpi(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        use mpi::traits::{Communicator, Root};
        let world = mpi::topology::SimpleCommunicator::world();
        let root = world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
        bytes
    }

    /// Whether every process said `ok`.
    pub fn all_agree(&self, ok: bool) -> bool {
        if self.is_single() {
            return ok;
        }
        self.all_agree_mpi(ok)
    }

    #[cfg(not(feature = "mpi"))]
    fn all_agree_mpi(&self, ok: bool) -> bool {
        ok
    }

    #[cfg(feature = "mpi")]
    fn all_agree_mpi(&self, ok: bool) -> bool {
        use mpi::collective::SystemOperation;
        use mpi::traits::CommunicatorCollectives;
        let world = mpi::topology::SimpleCommunicator::world();
        let mine = i32::from(ok);
        let mut all = 0i32;
        world.all_reduce_into(&mine, &mut all, SystemOperation::min());
        all == 1
    }

    /// Every process's `bytes`, in process order, on process 0 (`None` on the others).
    pub fn gather(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        if self.is_single() {
            return Some(vec![bytes.to_vec()]);
        }
        self.gather_mpi(bytes)
    }

    #[cfg(not(feature = "mpi"))]
    fn gather_mpi(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        Some(vec![bytes.to_vec()])
    }

    #[cfg(feature = "mpi")]
    fn gather_mpi(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        use mpi::datatype::PartitionMut;
        use mpi::traits::{Communicator, Root};
        let world = mpi::topology::SimpleCommunicator::world();
        let root = world.process_at_rank(0);
        let len = bytes.len() as i32;
        if self.process != 0 {
            root.gather_into(&len);
            root.gather_varcount_into(bytes);
            return None;
        }
        let mut lens = vec![0i32; self.processes];
        root.gather_into_root(&len, &mut lens[..]);
        let displs: Vec<i32> = lens
            .iter()
            .scan(0i32, |at, &n| {
                let d = *at;
                *at += n;
                Some(d)
            })
            .collect();
        let mut all = vec![0u8; lens.iter().map(|&n| n as usize).sum()];
        {
            let mut partition = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
            root.gather_varcount_into_root(bytes, &mut partition);
        }
        Some(
            lens.iter()
                .zip(&displs)
                .map(|(&n, &d)| all[d as usize..(d + n) as usize].to_vec())
                .collect(),
        )
    }

    /// Ends every process of the run with `code` (the launcher's abort); returns only without
    /// MPI.
    pub fn abort(&self, code: u8) {
        if self.is_single() {
            return;
        }
        #[cfg(feature = "mpi")]
        {
            use mpi::traits::Communicator;
            mpi::topology::SimpleCommunicator::world().abort(i32::from(code));
        }
        #[cfg(not(feature = "mpi"))]
        let _ = code;
    }

    /// This host's name.
    pub fn host() -> String {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    }
}

impl Cluster {
    /// Checks this host's share of the job's `plan` (its `ranks` of them) against its own
    /// memory, and agrees the answer with every process: a refusal on any host is every
    /// process's error, naming each host that refused and why.
    pub fn agree_budget(
        &self,
        plan: &Plan,
        ranks: usize,
        tls: bool,
        limits: &MemoryLimits,
        cap_bytes: Option<u64>,
    ) -> Result<(), UsageError> {
        let mine = budget::check(&host_share(plan, ranks, tls), limits, cap_bytes)
            .map(|_| ())
            .map_err(|e| e.to_string());
        self.agree(mine)
    }

    /// Agrees a set-up check with every process: a refusal on any host (its one line) is every
    /// process's error, naming each host that refused and why.
    pub fn agree(&self, mine: Result<(), String>) -> Result<(), UsageError> {
        let mine =
            mine.map_err(|e| format!("host {} (process {}): {e}", Cluster::host(), self.process));
        if self.all_agree(mine.is_ok()) {
            return Ok(());
        }
        let said = self.gather(mine.as_ref().err().map_or(&[][..], |e| e.as_bytes()));
        let lines: Vec<String> = said
            .unwrap_or_default()
            .into_iter()
            .filter(|l| !l.is_empty())
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .collect();
        let message = self.broadcast(lines.join("; ").into_bytes());
        Err(UsageError(String::from_utf8_lossy(&message).into_owned()))
    }

    /// Process 0's `value` (the others pass `None`) on every process, sent as JSON.
    pub fn share<T: Serialize + serde::de::DeserializeOwned>(
        &self,
        value: Option<T>,
    ) -> Result<T, UsageError> {
        let unreadable = |e: &dyn std::fmt::Display| {
            UsageError(format!(
                "process {} cannot read what process 0 sent ({e}); run the same ringload build \
                 on every host",
                self.process
            ))
        };
        if self.is_single() {
            return value.ok_or_else(|| unreadable(&"nothing"));
        }
        let bytes = match &value {
            Some(v) => serde_json::to_vec(v).map_err(|e| unreadable(&e))?,
            None => Vec::new(),
        };
        serde_json::from_slice(&self.broadcast(bytes)).map_err(|e| unreadable(&e))
    }

    /// Every process's report, in process order, on process 0 (`None` on the others).
    pub fn gather_reports(&self, mine: &HostReport) -> serde_json::Result<Option<Vec<HostReport>>> {
        let Some(all) = self.gather(&serde_json::to_vec(mine)?) else {
            return Ok(None);
        };
        all.iter()
            .map(|r| serde_json::from_slice(r))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// The memory shape of one host's share of a run under mpirun: its `ranks` of the job's plan.
pub fn host_share(plan: &Plan, ranks: usize, tls: bool) -> BudgetShape {
    BudgetShape {
        np: ranks as u32,
        read_threads: plan.settings.read_threads,
        prefetch: plan.window_per_reader,
        largest_get_bytes: plan.largest_get_bytes,
        server_bytes: 0,
        checkpoint_bytes: plan.memory.checkpoint_bytes,
        catalog_bytes: plan.memory.catalog_bytes,
        plan_bytes: plan.memory.plan_bytes,
        tls,
        batch_hold: plan
            .catalog
            .objects
            .is_some()
            .then_some((plan.settings.batch_size, plan.settings.samples_per_file)),
        small_class: plan
            .memory
            .small_buffers
            .map(|s| (s.per_reader, s.get_bytes)),
        slot_connections: plan.slot_connections,
    }
}

/// The memory budget of one host's share, whatever the host has (for its report).
pub fn host_budget_bytes(plan: &Plan, ranks: usize, tls: bool) -> u64 {
    budget::check(
        &host_share(plan, ranks, tls),
        &MemoryLimits::unlimited(),
        None,
    )
    .map_or(0, |b| b.total_bytes)
}

/// What one process of a run under mpirun measured, sent to process 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostReport {
    pub host: String,
    pub process: usize,
    /// Its ranks (global numbers).
    pub ranks: std::ops::Range<usize>,
    pub records: Vec<RankRecord>,
    pub stats: Vec<WireStats>,
    pub wall_s: f64,
    pub client_cpu_s: f64,
    pub setup_cpu_s: f64,
    pub peak_rss_bytes: Option<u64>,
    /// Its share of the job's memory budget.
    pub memory_budget_bytes: u64,
    /// Its time series, on its own clock (from its ranks' ready instant, after the global
    /// barrier), each sample's latency histogram included.
    #[serde(default)]
    pub timeseries: crate::timeseries::Series,
}

/// The job's measurements, from every host's report.
#[derive(Debug, Clone)]
pub struct Merged {
    /// Every host's ranks' records, in process order.
    pub records: Vec<RankRecord>,
    pub stats: Vec<RequestStats>,
    /// The slowest host's.
    pub wall_s: f64,
    /// Summed over the hosts.
    pub client_cpu_s: f64,
    pub setup_cpu_s: f64,
    /// The largest host's.
    pub peak_rss_bytes: Option<u64>,
    /// Every host's samples summed by index, on process 0's clock.
    pub timeseries: crate::timeseries::Series,
}

impl Merged {
    pub fn of(reports: &[HostReport]) -> Merged {
        let span = HostSpan::merge(reports.iter().map(|r| {
            HostSpan {
                records: r.records.clone(),
                stats: r
                    .stats
                    .iter()
                    .cloned()
                    .map(RequestStats::from_wire)
                    .collect(),
                wall_s: r.wall_s,
                client_cpu_s: r.client_cpu_s,
                timeseries: r.timeseries.clone(),
            }
        }));
        Merged {
            records: span.records,
            stats: span.stats,
            wall_s: span.wall_s,
            client_cpu_s: span.client_cpu_s,
            setup_cpu_s: reports.iter().map(|r| r.setup_cpu_s).sum(),
            peak_rss_bytes: reports.iter().filter_map(|r| r.peak_rss_bytes).max(),
            timeseries: span.timeseries,
        }
    }
}

/// One host's share of a measured span — a training run, or one phase of a checkpoint run —
/// as the job's merge takes it.
#[derive(Debug, Clone)]
pub struct HostSpan<R, S> {
    /// Its ranks' records, in rank order.
    pub records: Vec<R>,
    pub stats: Vec<S>,
    pub wall_s: f64,
    pub client_cpu_s: f64,
    pub timeseries: crate::timeseries::Series,
}

impl<R, S> HostSpan<R, S> {
    /// The job's span from every host's, in process order: the records and stats in process
    /// order (so in global rank order), the slowest host's wall time, the client CPU summed,
    /// the series summed by sample index on process 0's clock. The one per-host merge, for
    /// training runs ([`Merged::of`]) and checkpoint phases alike.
    pub fn merge(hosts: impl IntoIterator<Item = HostSpan<R, S>>) -> HostSpan<R, S> {
        let mut job = HostSpan {
            records: Vec::new(),
            stats: Vec::new(),
            wall_s: 0.0,
            client_cpu_s: 0.0,
            timeseries: crate::timeseries::Series::default(),
        };
        let mut series = Vec::new();
        for host in hosts {
            job.records.extend(host.records);
            job.stats.extend(host.stats);
            job.wall_s = job.wall_s.max(host.wall_s);
            job.client_cpu_s += host.client_cpu_s;
            series.push(host.timeseries);
        }
        job.timeseries = crate::timeseries::Series::merge(&series);
        job
    }
}

/// Meets every other process at an MPI barrier (the coordinator thread's call; see the module
/// docs). It polls a non-blocking barrier, so it can give up when `stop` says the run is over
/// here (a rank failed, or an interrupt): returns whether the barrier completed. Without MPI it
/// returns `true` at once.
pub fn host_barrier(stop: &dyn Fn() -> bool) -> bool {
    #[cfg(feature = "mpi")]
    {
        use mpi::traits::CommunicatorCollectives;
        let world = mpi::topology::SimpleCommunicator::world();
        let mut request = world.immediate_barrier();
        loop {
            match request.test() {
                Ok(_) => return true,
                Err(pending) => request = pending,
            }
            if stop() {
                // The process is about to abort the job: the barrier will never complete.
                std::mem::forget(request);
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = stop;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_split_evenly_the_first_processes_one_more() {
        let split = |processes, np| {
            (0..processes)
                .map(|p| Cluster::ranks_of(p, processes, np))
                .collect::<Vec<_>>()
        };
        assert_eq!(split(2, 5), vec![0..3, 3..5]);
        assert_eq!(split(3, 8), vec![0..3, 3..6, 6..8]);
        assert_eq!(split(2, 2), vec![0..1, 1..2]);
        assert_eq!(split(4, 2), vec![0..1, 1..2, 2..2, 2..2]);
        let env = |name: &str| (name == "PMI_SIZE").then(|| "4".to_string());
        assert_eq!(launcher_world_size(&env), Some(4));
        assert_eq!(launcher_world_size(&|_| None), None);
    }

    #[test]
    fn hosts_merge_slowest_wall_summed_cpu_largest_rss() {
        let report = |process: usize, wall_s, cpu_s, rss| HostReport {
            host: format!("h{process}"),
            process,
            ranks: process..process + 1,
            records: Vec::new(),
            stats: Vec::new(),
            wall_s,
            client_cpu_s: cpu_s,
            setup_cpu_s: cpu_s / 10.0,
            peak_rss_bytes: rss,
            memory_budget_bytes: 1,
            timeseries: Default::default(),
        };
        let merged = Merged::of(&[
            report(0, 2.0, 1.0, Some(5)),
            report(1, 3.5, 2.0, None),
            report(2, 1.0, 4.0, Some(9)),
        ]);
        assert_eq!(merged.wall_s, 3.5);
        assert_eq!(merged.client_cpu_s, 7.0);
        assert!((merged.setup_cpu_s - 0.7).abs() < 1e-12);
        assert_eq!(merged.peak_rss_bytes, Some(9));
        assert!(merged.records.is_empty() && merged.stats.is_empty());
    }
}
