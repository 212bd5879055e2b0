//! Every measurement of a run, defined once.
//!
//! **Accelerator utilization and throughput** are DLIO's (`StatsCounter.compute_metrics_train`),
//! per rank and epoch, with the first step excluded:
//!
//! ```text
//! measured = window − (load₁ + compute₁)
//! AU       = 100 × Σ compute(steps 2..N) / measured
//! samples/s = (N − 1) × batch_size / measured
//! ```
//!
//! where `window` runs from the epoch's start (all ranks released together) to the end of the
//! rank's last step, `load` is the wait for a step's batch and `compute` the measured simulated
//! compute. A rank's value is its mean over epochs; the run's AU is the mean over ranks and its
//! samples/s the sum. DLIO's "I/O MB/s" is nominal: `samples/s × record_length / 2²⁰`.
//!
//! **The study's hand analysis**: implied I/O wait per step `t_io = ct × (100/AU − 1)`, and the
//! AU that wait would give at another computation time, `AU' = 100 × ct' / (ct' + t_io)`.
//!
//! **Cost**: `cpu_s_per_gib` = CPU seconds of the whole process (less an in-process server's own
//! threads) per GiB received (row groups and footers). Latencies go into fixed-size log-linear
//! histograms (hdrhistogram, microseconds, 3 significant digits).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::units::{GIB, MIB};
use crate::verify::Verified;

/// What one step of one rank took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StepTimes {
    /// Waiting for the step's batch (DLIO's `load`).
    pub wait_ns: u64,
    /// The simulated compute, as measured.
    pub compute_ns: u64,
    /// Waiting for the other ranks at the step barrier.
    pub barrier_ns: u64,
}

/// AU and throughput of one rank over one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EpochMetrics {
    pub au_percent: f64,
    pub samples_per_s: f64,
    /// The window less the first step's load and compute.
    pub measured_s: f64,
}

/// DLIO's AU and samples/s of one rank's epoch: `steps` in order, `window_ns` from the epoch's
/// start to the end of its last step. `None` with fewer than two steps (nothing is measured).
pub fn epoch_metrics(steps: &[StepTimes], window_ns: u64, batch_size: u64) -> Option<EpochMetrics> {
    let (first, rest) = steps.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let measured_ns = window_ns.checked_sub(first.wait_ns + first.compute_ns)?;
    if measured_ns == 0 {
        return None;
    }
    let measured_s = measured_ns as f64 / 1e9;
    let compute_ns = rest.iter().map(|s| s.compute_ns).sum::<u64>();
    Some(EpochMetrics {
        au_percent: au_percent(compute_ns, measured_ns)?,
        samples_per_s: rest.len() as f64 * batch_size as f64 / measured_s,
        measured_s,
    })
}

/// One of DLIO's blocks of an epoch: the steps between two checkpoints (step mode), from
/// `first_step`, its window from its start to the end of its last step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Block {
    pub first_step: u32,
    pub window_ns: u64,
}

/// DLIO's AU and samples/s of an epoch cut into blocks by checkpoints (`statscounter.py`
/// `end_block` and `end_train` at the v3.0 fork 21c0723): each block's as
/// [`epoch_metrics`] (its first step excluded, as an epoch's), 0 for a block with nothing
/// measured (one step), then the mean over blocks weighted by their steps (an empty block
/// weighs 0): AU 0 when no block has figures (every block one step), as DLIO averages them.
/// `None` for an epoch of no steps.
pub fn blocks_metrics(
    steps: &[StepTimes],
    blocks: &[Block],
    batch_size: u64,
) -> Option<EpochMetrics> {
    let (mut weight, mut au, mut sps, mut measured_s) = (0usize, 0.0, 0.0, 0.0);
    for (i, block) in blocks.iter().enumerate() {
        let first = (block.first_step as usize).min(steps.len());
        let end = blocks
            .get(i + 1)
            .map_or(steps.len(), |b| (b.first_step as usize).min(steps.len()))
            .max(first);
        let own = &steps[first..end];
        if let Some(m) = epoch_metrics(own, block.window_ns, batch_size) {
            au += m.au_percent * own.len() as f64;
            sps += m.samples_per_s * own.len() as f64;
            measured_s += m.measured_s;
        }
        weight += own.len();
    }
    (weight > 0).then(|| EpochMetrics {
        au_percent: au / weight as f64,
        samples_per_s: sps / weight as f64,
        measured_s,
    })
}

/// AU from its two sums: `100 × compute(steps 2..N) / measured`, `measured` being the window
/// less the first step's load and compute. [`epoch_metrics`] gives it one rank's epoch; the
/// live progress line (`rank::Progress::au_percent`) the sums over every rank so far, so the
/// line and the result share this one definition. `None` before anything is measured.
pub fn au_percent(compute_after_first_ns: u64, measured_ns: u64) -> Option<f64> {
    (measured_ns > 0).then(|| 100.0 * compute_after_first_ns as f64 / measured_ns as f64)
}

/// Steps per rank below which one run's AU is not stable: with a dozen steps, two identical
/// sweeps measured 95.3% and 79.3% at the same point.
pub const STABLE_STEPS_PER_RANK: u64 = 50;

/// The files that give each of `np` ranks [`STABLE_STEPS_PER_RANK`] steps, when
/// `steps_per_rank` is below it: DLIO's `steps = floor(samples_per_file × files / batch / NP)`
/// solved for files, `ceil(50 × batch × NP / samples_per_file)`. `None` when the run already
/// has enough steps (or the shape is degenerate).
pub fn files_for_stable_au(
    steps_per_rank: u64,
    samples_per_file: u64,
    batch_size: u64,
    np: u64,
) -> Option<u64> {
    if steps_per_rank >= STABLE_STEPS_PER_RANK || samples_per_file == 0 {
        return None;
    }
    Some((STABLE_STEPS_PER_RANK * batch_size * np).div_ceil(samples_per_file))
}

/// DLIO's nominal I/O rate: samples/s × record bytes, in MiB/s.
pub fn nominal_mib_per_s(samples_per_s: f64, record_bytes: u64) -> f64 {
    samples_per_s * record_bytes as f64 / MIB
}

/// The I/O wait per step that AU implies at computation time `ct_s`: `ct × (100/AU − 1)`.
pub fn implied_io_wait_s(ct_s: f64, au_percent: f64) -> Option<f64> {
    (au_percent > 0.0 && ct_s > 0.0).then(|| ct_s * (100.0 / au_percent - 1.0).max(0.0))
}

/// The AU a step with I/O wait `io_wait_s` would have at computation time `ct_s`.
pub fn projected_au_percent(ct_s: f64, io_wait_s: f64) -> f64 {
    100.0 * ct_s / (ct_s + io_wait_s)
}

/// The mean and population standard deviation of `values` (numpy's `mean`, `std`).
pub fn mean_stdev(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    Some((mean, var.sqrt()))
}

/// CPU seconds per GiB of `bytes`; `None` for no bytes.
pub fn cpu_s_per_gib(cpu_s: f64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| cpu_s / (bytes as f64 / GIB))
}

/// Mean, median, 99th percentile and maximum of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// The distribution of `values_ns` (any order), exact (nearest-rank percentiles).
    pub fn of_ns(values_ns: &mut [u64]) -> Distribution {
        if values_ns.is_empty() {
            return Distribution::default();
        }
        values_ns.sort_unstable();
        let n = values_ns.len();
        let rank = |q: f64| values_ns[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let ms = |ns: u64| ns as f64 / 1e6;
        Distribution {
            count: n as u64,
            mean: ms(values_ns.iter().sum::<u64>() / n as u64),
            p50: ms(rank(0.50)),
            p99: ms(rank(0.99)),
            max: ms(values_ns[n - 1]),
        }
    }
}

/// Latencies in microseconds, from 1 µs to one hour, 3 significant digits; fixed memory.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    histogram: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram::new()
    }
}

/// The longest latency a histogram holds; longer ones are recorded as this.
const LATENCY_MAX_US: u64 = 3_600_000_000;

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        // The bounds are constants that hdrhistogram accepts; a failure is a programming error.
        #[allow(clippy::expect_used)]
        let histogram =
            Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds");
        LatencyHistogram { histogram }
    }

    pub fn record(&mut self, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, LATENCY_MAX_US);
        self.histogram.saturating_record(us);
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The recorded buckets as (µs, count) pairs, to send to another process; [`Self::from_wire`]
    /// rebuilds a histogram with the same summary (each value lands in its own bucket).
    pub fn to_wire(&self) -> Vec<(u64, u64)> {
        self.histogram
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    pub fn from_wire(buckets: &[(u64, u64)]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &(us, n) in buckets {
            h.histogram
                .saturating_record_n(us.clamp(1, LATENCY_MAX_US), n);
        }
        h
    }

    /// The distribution in milliseconds.
    pub fn summary(&self) -> Distribution {
        if self.histogram.is_empty() {
            return Distribution::default();
        }
        let ms = |us: u64| us as f64 / 1e3;
        Distribution {
            count: self.histogram.len(),
            mean: self.histogram.mean() / 1e3,
            p50: ms(self.histogram.value_at_quantile(0.50)),
            p99: ms(self.histogram.value_at_quantile(0.99)),
            max: ms(self.histogram.max()),
        }
    }
}

/// One completed GET, for the request trace (`requests.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GetRecord {
    /// 0-based, as in steps.csv.
    pub epoch: u32,
    pub reader: usize,
    /// The GET's index in its reader's list (see `Plan::ranged_gets`).
    pub get: usize,
    pub attempts: u32,
    pub first_byte_us: u64,
    pub total_us: u64,
    /// The endpoint (of the target's list) it came through.
    pub endpoint: usize,
}

/// Requests as the store sees them, by kind: each counted once, however many attempts it
/// took (the attempts beyond the first are the retries). A whole-object GET fetched as the
/// DLIO fork's s3dlio fetches it is a HEAD and a GET, or a HEAD and its ranged GETs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RequestKinds {
    pub head: u64,
    /// GETs of a whole object (no `Range` header).
    pub get: u64,
    pub ranged_get: u64,
    /// Listings (ListObjectsV2, ListMultipartUploads): pages.
    pub list: u64,
    /// PutObject.
    pub put: u64,
    /// UploadPart.
    pub part: u64,
    /// CreateMultipartUpload, CompleteMultipartUpload, AbortMultipartUpload.
    pub create: u64,
    pub complete: u64,
    pub abort: u64,
}

impl RequestKinds {
    pub fn merge(&mut self, other: &RequestKinds) {
        self.head += other.head;
        self.get += other.get;
        self.ranged_get += other.ranged_get;
        self.list += other.list;
        self.put += other.put;
        self.part += other.part;
        self.create += other.create;
        self.complete += other.complete;
        self.abort += other.abort;
    }

    fn named(&self) -> [(u64, &'static str, &'static str); 9] {
        [
            (self.head, "HEAD", "HEADs"),
            (self.get, "GET", "GETs"),
            (self.ranged_get, "ranged GET", "ranged GETs"),
            (self.list, "LIST", "LISTs"),
            (self.put, "PUT", "PUTs"),
            (self.part, "part", "parts"),
            (self.create, "create", "creates"),
            (self.complete, "complete", "completes"),
            (self.abort, "abort", "aborts"),
        ]
    }

    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.named().iter().map(|(n, ..)| n).sum()
    }

    /// In words, the kinds sent only: `16 HEADs, 13 GETs, 31 ranged GETs`.
    pub fn describe(&self) -> String {
        let named = self.named();
        let sent: Vec<String> = named
            .iter()
            .filter(|(n, ..)| *n > 0)
            .map(|(n, one, many)| {
                format!(
                    "{} {}",
                    crate::units::count(*n),
                    if *n == 1 { one } else { many }
                )
            })
            .collect();
        if sent.is_empty() {
            "no requests".to_string()
        } else {
            sent.join(", ")
        }
    }
}

/// What one rank's GETs did.
#[derive(Debug, Clone, Default)]
pub struct RequestStats {
    /// GETs completed (each counted once, however many attempts it took).
    pub requests: u64,
    /// The requests those GETs sent, by kind, as the store sees them.
    pub by_kind: RequestKinds,
    /// Attempts beyond the first.
    pub retries: u64,
    /// GETs that failed after their retries.
    pub errors: u64,
    /// Body bytes of completed GETs.
    pub bytes_read: u64,
    /// From sending the (last) attempt to the response head.
    pub first_byte: LatencyHistogram,
    /// From the first attempt to the last body byte, retries included.
    pub total: LatencyHistogram,
    /// Every completed GET, in completion order.
    pub trace: Vec<GetRecord>,
    /// Retries by the cause of the failed attempt (`503`, `timeout`, `connection`, …).
    pub retries_by_cause: BTreeMap<&'static str, u64>,
    /// GETs that failed past their retries, by the cause of the last attempt.
    pub errors_by_cause: BTreeMap<&'static str, u64>,
    /// What `--verify` checked, and the rank thread's CPU time it took.
    pub verify: VerifyStats,
    /// Kept-alive connections dropped because bytes followed a body (the server sent more
    /// than its Content-Length).
    pub stray_connections: u64,
    /// The GET whose body the first such bytes followed.
    pub stray_after: Option<String>,
    /// The same counts by endpoint (gateway), indexed as the target lists them.
    pub by_endpoint: Vec<EndpointStats>,
}

/// What the GETs through one endpoint did.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    /// GETs completed.
    pub requests: u64,
    pub bytes_read: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// GETs that failed past their retries.
    pub errors: u64,
    /// From the first attempt to the last body byte.
    pub total: LatencyHistogram,
}

impl EndpointStats {
    pub fn merge(&mut self, other: &EndpointStats) {
        self.requests += other.requests;
        self.bytes_read += other.bytes_read;
        self.retries += other.retries;
        self.errors += other.errors;
        self.total.merge(&other.total);
    }
}

impl RequestStats {
    /// The stats of endpoint `endpoint`, grown to it.
    pub fn endpoint(&mut self, endpoint: usize) -> &mut EndpointStats {
        if self.by_endpoint.len() <= endpoint {
            self.by_endpoint
                .resize_with(endpoint + 1, EndpointStats::default);
        }
        &mut self.by_endpoint[endpoint]
    }
}

/// [`RequestStats`] as another process sends it (`crate::cluster`): the counts and the trace;
/// the latency histograms are rebuilt from the trace, which holds every GET's latencies.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WireStats {
    requests: u64,
    #[serde(default)]
    by_kind: RequestKinds,
    retries: u64,
    errors: u64,
    bytes_read: u64,
    trace: Vec<GetRecord>,
    retries_by_cause: BTreeMap<String, u64>,
    errors_by_cause: BTreeMap<String, u64>,
    verify_gets: u64,
    verified: crate::verify::Verified,
    verify_cpu_ns: u64,
    stray_connections: u64,
    stray_after: Option<String>,
    /// Per endpoint: requests, bytes, retries, errors.
    by_endpoint: Vec<(u64, u64, u64, u64)>,
}

/// A cause word as a `&'static str`, as [`RequestStats`] keys them: the words are few and
/// fixed, so each is leaked at most once per process.
pub fn static_cause(cause: &str) -> &'static str {
    static KNOWN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = known.iter().find(|k| **k == cause) {
        return k;
    }
    let leaked: &'static str = Box::leak(cause.to_string().into_boxed_str());
    known.push(leaked);
    leaked
}

impl RequestStats {
    pub fn to_wire(&self) -> WireStats {
        WireStats {
            requests: self.requests,
            by_kind: self.by_kind,
            retries: self.retries,
            errors: self.errors,
            bytes_read: self.bytes_read,
            trace: self.trace.clone(),
            retries_by_cause: self
                .retries_by_cause
                .iter()
                .map(|(c, n)| (c.to_string(), *n))
                .collect(),
            errors_by_cause: self
                .errors_by_cause
                .iter()
                .map(|(c, n)| (c.to_string(), *n))
                .collect(),
            verify_gets: self.verify.gets,
            verified: self.verify.verified,
            verify_cpu_ns: self.verify.cpu.as_nanos() as u64,
            stray_connections: self.stray_connections,
            stray_after: self.stray_after.clone(),
            by_endpoint: self
                .by_endpoint
                .iter()
                .map(|e| (e.requests, e.bytes_read, e.retries, e.errors))
                .collect(),
        }
    }

    pub fn from_wire(wire: WireStats) -> RequestStats {
        let mut stats = RequestStats {
            requests: wire.requests,
            by_kind: wire.by_kind,
            retries: wire.retries,
            errors: wire.errors,
            bytes_read: wire.bytes_read,
            retries_by_cause: wire
                .retries_by_cause
                .iter()
                .map(|(c, n)| (static_cause(c), *n))
                .collect(),
            errors_by_cause: wire
                .errors_by_cause
                .iter()
                .map(|(c, n)| (static_cause(c), *n))
                .collect(),
            verify: VerifyStats {
                gets: wire.verify_gets,
                verified: wire.verified,
                cpu: Duration::from_nanos(wire.verify_cpu_ns),
            },
            stray_connections: wire.stray_connections,
            stray_after: wire.stray_after,
            ..RequestStats::default()
        };
        for (i, (requests, bytes_read, retries, errors)) in wire.by_endpoint.into_iter().enumerate()
        {
            let e = stats.endpoint(i);
            (e.requests, e.bytes_read, e.retries, e.errors) =
                (requests, bytes_read, retries, errors);
        }
        for record in &wire.trace {
            stats
                .first_byte
                .record(Duration::from_micros(record.first_byte_us));
            stats.total.record(Duration::from_micros(record.total_us));
            stats
                .endpoint(record.endpoint)
                .total
                .record(Duration::from_micros(record.total_us));
        }
        stats.trace = wire.trace;
        stats
    }
}

/// What `--verify` checked in the GETs that arrived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// GETs checked.
    pub gets: u64,
    pub verified: Verified,
    /// The checking threads' CPU time spent checking (`CLOCK_THREAD_CPUTIME_ID` around each).
    pub cpu: Duration,
}

impl VerifyStats {
    pub fn merge(&mut self, other: &VerifyStats) {
        self.gets += other.gets;
        self.verified.add(other.verified);
        self.cpu += other.cpu;
    }
}

/// The calling thread's CPU time so far.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

impl RequestStats {
    /// `other`'s counts, histograms and trace added to these.
    pub fn merge(&mut self, other: &RequestStats) {
        self.merge_counts(other);
        self.trace.extend_from_slice(&other.trace);
    }

    /// `other`'s counts and histograms added to these, its trace left out: a run's totals
    /// without a second copy of every GET's record (a million-GET run's largest allocation).
    pub fn merge_counts(&mut self, other: &RequestStats) {
        for (i, e) in other.by_endpoint.iter().enumerate() {
            self.endpoint(i).merge(e);
        }
        self.requests += other.requests;
        self.by_kind.merge(&other.by_kind);
        self.retries += other.retries;
        self.errors += other.errors;
        self.bytes_read += other.bytes_read;
        self.first_byte.merge(&other.first_byte);
        self.total.merge(&other.total);
        for (cause, n) in &other.retries_by_cause {
            *self.retries_by_cause.entry(cause).or_default() += n;
        }
        for (cause, n) in &other.errors_by_cause {
            *self.errors_by_cause.entry(cause).or_default() += n;
        }
        self.verify.merge(&other.verify);
        self.stray_connections += other.stray_connections;
        if self.stray_after.is_none() {
            self.stray_after.clone_from(&other.stray_after);
        }
    }
}

/// The CPU clocks at one moment: the whole process's, and an in-process server's share of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuReading {
    pub process_s: f64,
    pub server_s: f64,
}

impl CpuReading {
    /// The process's clock now, with the server's `server_s` read by the caller.
    pub fn now(server_s: f64) -> CpuReading {
        CpuReading {
            process_s: process_cpu_s(),
            server_s,
        }
    }
}

/// What a run cost in CPU, from readings at the start of set-up, when every rank was ready
/// (the clock's start), and at the end; an in-process server's CPU is kept apart:
///
/// ```text
/// setup_cpu  = (process@ready − process@setup) − (server@ready − server@setup)
/// client_cpu = (process@end   − process@ready) − (server@end   − server@ready)
/// server_cpu =  server@end    − server@ready
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuCosts {
    pub setup_cpu_s: f64,
    pub client_cpu_s: f64,
    pub server_cpu_s: f64,
}

impl CpuCosts {
    pub fn between(setup: CpuReading, ready: CpuReading, end: CpuReading) -> CpuCosts {
        let server_cpu_s = (end.server_s - ready.server_s).max(0.0);
        CpuCosts {
            setup_cpu_s: ((ready.process_s - setup.process_s) - (ready.server_s - setup.server_s))
                .max(0.0),
            client_cpu_s: ((end.process_s - ready.process_s) - server_cpu_s).max(0.0),
            server_cpu_s,
        }
    }
}

/// How far a peak resident set went over the memory budget, if it did.
pub fn rss_over_budget(peak_rss_bytes: Option<u64>, budget_bytes: u64) -> Option<u64> {
    peak_rss_bytes
        .filter(|&p| p > budget_bytes)
        .map(|p| p - budget_bytes)
}

/// The warning a run keeps in its notes when its peak resident set went past the budget, in
/// words: what the budget under-counted.
pub fn rss_over_budget_note(peak_rss_bytes: Option<u64>, budget_bytes: u64) -> Option<String> {
    let over = rss_over_budget(peak_rss_bytes, budget_bytes)?;
    let b = crate::units::bytes;
    Some(format!(
        "peak RSS {} went past the memory budget {} by {}: the budget counts the buffers, each \
         connection's socket and TLS state, the catalog, the plan's GETs and their records, \
         and a fixed allowance for the process itself (its threads, libraries and allocator); \
         this run held more than those allowances, so leave that much more room than the plan \
         shows",
        b(budget_bytes + over),
        b(budget_bytes),
        b(over)
    ))
}

/// CPU time of the whole process so far (all threads, live and exited): user + system.
pub fn process_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Resets the process's peak resident set (VmHWM) to its current size, so a later
/// [`peak_rss_bytes`] measures from here. Returns whether the kernel accepted it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The process's peak resident set (VmHWM) in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// The process's resident set now (VmRSS) in bytes.
pub fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// A `kB` field of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    /// The study's derived tables (reference/flux-study.md), reproduced from its AU figures.
    #[test]
    fn the_studys_implied_waits_and_projections() {
        let ct = 0.05;
        let table = [
            // AU at 0.05 s, implied wait (ms), AU at 0.5 s, AU at 1.35 s
            (96.8, 1.7, 99.7, 99.9),
            (93.2, 3.7, 99.3, 99.7),
            (61.0, 32.0, 94.0, 97.7),
            (57.2, 37.4, 93.0, 97.3),
        ];
        for (au, wait_ms, at_half, at_default) in table {
            let t_io = implied_io_wait_s(ct, au).unwrap();
            assert!(close(t_io * 1e3, wait_ms, 0.1), "{au}: {t_io}");
            assert!(
                close(projected_au_percent(0.5, t_io), at_half, 0.05),
                "{au}"
            );
            assert!(
                close(projected_au_percent(1.35, t_io), at_default, 0.05),
                "{au}"
            );
            // Projecting back to the measured computation time gives the measured AU.
            assert!(close(projected_au_percent(ct, t_io), au, 1e-9));
        }
        assert_eq!(implied_io_wait_s(ct, 0.0), None);
    }

    /// DLIO's definitions on a hand-made epoch: the first step is left out of both AU and
    /// throughput, and barrier time counts against AU (it is in the window).
    #[test]
    fn au_and_throughput_follow_dlio() {
        let ms = |x: u64| x * 1_000_000;
        let steps = [
            StepTimes {
                wait_ns: ms(200),
                compute_ns: ms(50),
                barrier_ns: 0,
            },
            StepTimes {
                wait_ns: ms(2),
                compute_ns: ms(50),
                barrier_ns: ms(1),
            },
            StepTimes {
                wait_ns: ms(5),
                compute_ns: ms(50),
                barrier_ns: 0,
            },
        ];
        let window: u64 = steps
            .iter()
            .map(|s| s.wait_ns + s.compute_ns + s.barrier_ns)
            .sum();
        let m = epoch_metrics(&steps, window, 48).unwrap();
        // measured = 108 ms; compute = 100 ms.
        assert!(close(m.measured_s, 0.108, 1e-12));
        assert!(close(m.au_percent, 100.0 * 100.0 / 108.0, 1e-9));
        assert!(close(m.samples_per_s, 2.0 * 48.0 / 0.108, 1e-9));
        assert_eq!(epoch_metrics(&steps[..1], window, 48), None);
        assert_eq!(epoch_metrics(&[], 0, 48), None);
        // 50 steps of 48 samples for each of 2 ranks, 288 samples a file: 17 files (16 give
        // floor(16 × 288 / 48 / 2) = 48 steps); 12 steps is the unstable sweep's.
        assert_eq!(files_for_stable_au(12, 288, 48, 2), Some(17));
        assert_eq!(17 * 288 / 48 / 2, 51);
        assert_eq!(files_for_stable_au(50, 288, 48, 2), None);
        assert_eq!(files_for_stable_au(3, 288, 48, 1), Some(9));
        // The study's row NP=1: 926 samples/s of 2,164,832-byte records is 1,911 "MB/s".
        assert!(close(nominal_mib_per_s(926.0, 2_164_832), 1911.8, 0.1));
    }

    #[test]
    fn blocks_weigh_by_their_steps_and_exclude_each_first_step() {
        let ms = |w: u64, c: u64| StepTimes {
            wait_ns: w * 1_000_000,
            compute_ns: c * 1_000_000,
            barrier_ns: 0,
        };
        // Block 1: steps 0-2 (window 40 ms: first 10+10, then 10 and 10 of compute);
        // block 2: steps 3-4 (window 30 ms: first 5+10, then 5+10); block 3 empty.
        let steps = [ms(10, 10), ms(0, 10), ms(0, 10), ms(5, 10), ms(5, 10)];
        let blocks = [
            Block {
                first_step: 0,
                window_ns: 40_000_000,
            },
            Block {
                first_step: 3,
                window_ns: 30_000_000,
            },
            Block {
                first_step: 5,
                window_ns: 0,
            },
        ];
        let m = blocks_metrics(&steps, &blocks, 4).unwrap();
        // au1 = 100 × 20/20, au2 = 100 × 10/15; weights 3 and 2 (the empty block 0).
        assert!(close(
            m.au_percent,
            (100.0 * 3.0 + 100.0 * 10.0 / 15.0 * 2.0) / 5.0,
            1e-9
        ));
        // sps1 = 2 × 4 / 0.02, sps2 = 1 × 4 / 0.015.
        assert!(close(
            m.samples_per_s,
            (400.0 * 3.0 + 4.0 / 0.015 * 2.0) / 5.0,
            1e-6
        ));
        // A one-step block has no figures: it counts 0 with its weight, as in DLIO.
        let one = [
            Block {
                first_step: 0,
                window_ns: 30_000_000,
            },
            Block {
                first_step: 2,
                window_ns: 10_000_000,
            },
        ];
        let m = blocks_metrics(&steps[..3], &one, 4).unwrap();
        assert!(close(m.au_percent, 100.0 * 10.0 / 10.0 * 2.0 / 3.0, 1e-9));
        // Every block one step: nothing measured, AU 0 for the epoch (DLIO's 0), not dropped.
        let none = blocks_metrics(&steps[..1], &blocks[..1], 4).unwrap();
        assert_eq!((none.au_percent, none.samples_per_s), (0.0, 0.0));
        assert_eq!(blocks_metrics(&[], &blocks[..1], 4), None);
    }

    #[test]
    fn distributions_and_histograms() {
        let mut values: Vec<u64> = (1..=100).rev().map(|i| i * 1_000_000).collect();
        let d = Distribution::of_ns(&mut values);
        assert_eq!((d.count, d.p50, d.p99, d.max), (100, 50.0, 99.0, 100.0));
        assert!(close(d.mean, 50.5, 1e-9));
        assert_eq!(Distribution::of_ns(&mut []), Distribution::default());

        let mut h = LatencyHistogram::new();
        for i in 1..=1000u64 {
            h.record(Duration::from_micros(i * 100));
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!(close(s.p50, 50.0, 0.1), "{s:?}");
        assert!(close(s.p99, 99.0, 0.1), "{s:?}");
        assert!(close(s.max, 100.0, 0.1), "{s:?}");
        let mut other = LatencyHistogram::new();
        other.record(Duration::from_secs(2));
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert!(close(h.summary().max, 2000.0, 2.0));
        // Sent to another process and rebuilt: the same summary.
        let rebuilt = LatencyHistogram::from_wire(&h.to_wire());
        assert_eq!(rebuilt.summary(), h.summary());
        assert_eq!(LatencyHistogram::from_wire(&[]).count(), 0);
    }

    #[test]
    fn process_counters() {
        let before = process_cpu_s();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(process_cpu_s() > before);
        // Other tests allocate meanwhile: the resident size read first is at most the peak
        // read after it.
        let rss = rss_bytes().unwrap();
        let peak = peak_rss_bytes().unwrap();
        assert!(rss > 1 << 20);
        assert!(rss <= peak, "{rss} > {peak}");
        assert_eq!(cpu_s_per_gib(1.0, 1 << 30), Some(1.0));
        assert_eq!(cpu_s_per_gib(1.0, 0), None);
    }

    #[test]
    fn cpu_costs_keep_the_server_apart() {
        let reading = |process_s, server_s| CpuReading {
            process_s,
            server_s,
        };
        let costs = CpuCosts::between(reading(1.0, 0.5), reading(3.0, 1.0), reading(10.0, 4.0));
        // Set-up: 2 s of process CPU, 0.5 s of it the server's.
        assert_eq!(costs.setup_cpu_s, 1.5);
        // Run: 7 s of process CPU, 3 s of it the server's.
        assert_eq!((costs.client_cpu_s, costs.server_cpu_s), (4.0, 3.0));
        assert_eq!(rss_over_budget(Some(10), 8), Some(2));
        assert_eq!(rss_over_budget(Some(8), 8), None);
        assert_eq!(rss_over_budget(None, 8), None);
    }
}
