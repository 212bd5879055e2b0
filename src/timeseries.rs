//! A run's time series: one sample per interval (`--sample-interval`) of the bytes read and
//! written, the requests completed and in flight, the retries, the p50/p99 latency of the
//! requests completed in the interval, and the steps' I/O wait.
//!
//! - [`Live`]: counters the engines update as requests issue and complete, one cache-line
//!   aligned shard per rank (each rank's thread is its shard's only writer), relaxed atomics
//!   and a log-bucket latency histogram ([`bucket`], ≤ 1.6 % wide) — no lock, no allocation
//!   per request. The counters only grow (in flight goes up and down).
//! - [`Sampler`]: reads every shard at `start + k · interval` (a monotonic clock, no drift) and
//!   keeps the difference from its last reading as one [`Sample`] (and the interval's
//!   histogram, sparse, so that hosts can be merged: [`Series::merge`]).
//! - [`Series::csv`]: `timeseries.csv`; the series itself is summary.json's `timeseries`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Values below this many µs have a bucket each.
const LINEAR: u64 = 64;
/// Sub-buckets per power of two above [`LINEAR`] (bucket width ≤ 1/64 of its value).
const SUB_BITS: u32 = 6;
/// The largest latency told apart: 2^36 µs (19 hours); longer ones land in the last bucket.
const TOP_BIT: u32 = 36;
/// Buckets of one histogram.
pub const BUCKETS: usize = ((TOP_BIT - SUB_BITS + 1) as usize) << SUB_BITS;

/// The bucket of a latency of `us` microseconds: exact below 64 µs, then 64 per power of two.
pub fn bucket(us: u64) -> usize {
    let us = us.min((1u64 << TOP_BIT) - 1);
    if us < LINEAR {
        return us as usize;
    }
    let top = 63 - us.leading_zeros();
    let sub = (us >> (top - SUB_BITS)) & (LINEAR - 1);
    (((top - SUB_BITS + 1) as usize) << SUB_BITS) + sub as usize
}

/// The value a bucket stands for, in µs: its middle.
pub fn bucket_value_us(index: usize) -> f64 {
    if (index as u64) < LINEAR {
        return index as f64;
    }
    let group = (index >> SUB_BITS) as u32; // ≥ 1
    let top = group + SUB_BITS - 1;
    let width = 1u64 << (top - SUB_BITS);
    let low = (1u64 << top) + (index as u64 & (LINEAR - 1)) * width;
    low as f64 + width as f64 / 2.0
}

/// The `q`-quantile (0–1) of a sparse histogram (bucket, count), in ms; `None` when empty.
pub fn quantile_ms(counts: &[(u32, u64)], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().map(|c| c.1).sum();
    if total == 0 {
        return None;
    }
    // The rank of the value wanted, 1-based: the smallest value with ≥ q of the counts at or
    // below it.
    let want = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for &(index, count) in counts {
        seen += count;
        if seen >= want {
            return Some(bucket_value_us(index as usize) / 1000.0);
        }
    }
    None
}

/// One rank's live counters (a cache line of its own, so ranks never share one).
#[repr(align(128))]
#[derive(Debug)]
struct Shard {
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    requests: AtomicU64,
    /// Issued less completed (wrapping: a request may complete on another shard's count).
    in_flight: AtomicU64,
    retries: AtomicU64,
    io_wait_ns: AtomicU64,
    latency: Box<[AtomicU64]>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            io_wait_ns: AtomicU64::new(0),
            latency: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The live counters of a process's ranks: one shard per rank.
#[derive(Debug)]
pub struct Live {
    shards: Box<[Shard]>,
}

impl Default for Live {
    fn default() -> Live {
        Live::new(1)
    }
}

impl Live {
    pub fn new(shards: usize) -> Live {
        Live {
            shards: (0..shards.max(1)).map(|_| Shard::new()).collect(),
        }
    }

    /// What the sampler reads: every shard's counters summed, and the histogram.
    fn totals(&self) -> Totals {
        let mut t = Totals {
            latency: vec![0; BUCKETS],
            ..Totals::default()
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for s in self.shards.iter() {
            t.bytes_read += load(&s.bytes_read);
            t.bytes_written += load(&s.bytes_written);
            t.requests += load(&s.requests);
            t.in_flight = t.in_flight.wrapping_add(load(&s.in_flight));
            t.retries += load(&s.retries);
            t.io_wait_ns += load(&s.io_wait_ns);
            for (sum, bucket) in t.latency.iter_mut().zip(s.latency.iter()) {
                *sum += load(bucket);
            }
        }
        t
    }
}

/// One rank's handle on its shard of [`Live`]: what the engines call.
#[derive(Debug, Clone)]
pub struct Counter {
    live: Arc<Live>,
    shard: usize,
}

impl Default for Counter {
    /// Counters nobody samples (an engine's unit test).
    fn default() -> Counter {
        Counter::of(&Arc::new(Live::new(1)), 0)
    }
}

impl Counter {
    /// Rank `index`'s shard (the process's own rank number, from 0).
    pub fn of(live: &Arc<Live>, index: usize) -> Counter {
        Counter {
            live: Arc::clone(live),
            shard: index % live.shards.len(),
        }
    }

    fn shard(&self) -> &Shard {
        &self.live.shards[self.shard]
    }

    /// A request was sent (its first attempt).
    #[inline]
    pub fn issued(&self) {
        self.shard().in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request ended without a body counted (failed past its retries, or refused).
    #[inline]
    pub fn ended(&self) {
        self.shard().in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// A request completed after `latency` (its first attempt to its last byte), having read
    /// `read` and written `written` body bytes.
    #[inline]
    pub fn completed(&self, read: u64, written: u64, latency: Duration) {
        self.ended();
        self.counted(read, written, latency);
    }

    /// A request's body counted as [`completed`](Counter::completed) does, where its end (in
    /// flight less one) is counted apart, by [`ended`](Counter::ended).
    #[inline]
    pub fn counted(&self, read: u64, written: u64, latency: Duration) {
        let s = self.shard();
        s.requests.fetch_add(1, Ordering::Relaxed);
        if read > 0 {
            s.bytes_read.fetch_add(read, Ordering::Relaxed);
        }
        if written > 0 {
            s.bytes_written.fetch_add(written, Ordering::Relaxed);
        }
        let us = latency.as_micros().min(u128::from(u64::MAX)) as u64;
        s.latency[bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt failed and will be tried again.
    #[inline]
    pub fn retried(&self) {
        self.retried_n(1);
    }

    /// `n` attempts failed and were tried again.
    #[inline]
    pub fn retried_n(&self, n: u64) {
        if n > 0 {
            self.shard().retries.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A step waited `ns` for its data.
    #[inline]
    pub fn waited(&self, ns: u64) {
        self.shard().io_wait_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Live {
    /// A step of some rank waited `ns` for its data (once per step: the first shard's).
    pub fn waited(&self, ns: u64) {
        self.shards[0].io_wait_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Default)]
struct Totals {
    bytes_read: u64,
    bytes_written: u64,
    requests: u64,
    in_flight: u64,
    retries: u64,
    io_wait_ns: u64,
    latency: Vec<u64>,
}

/// One interval of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The end of the interval, in seconds since the clock started (every rank ready); the
    /// last sample's interval may be shorter.
    pub t_s: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub requests_completed: u64,
    /// Requests sent and not completed at `t_s`.
    pub in_flight: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// Of the requests completed in the interval (first attempt to last byte); `None` when
    /// none completed.
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// The steps' I/O wait that ended in the interval, summed over ranks.
    pub io_wait_s: f64,
}

/// A run's samples (summary.json's `timeseries`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub interval_s: f64,
    pub samples: Vec<Sample>,
    /// Each sample's latency histogram (bucket, count), for merging hosts: carried from each
    /// process to process 0, not written to summary.json.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<Vec<(u32, u64)>>,
}

impl Series {
    /// Every host's series merged by sample index onto the first one's clock (process 0's):
    /// counters summed, histograms added and their percentiles taken again, I/O wait summed; a
    /// host with fewer samples adds nothing to the later ones.
    pub fn merge(hosts: &[Series]) -> Series {
        let Some(first) = hosts.first() else {
            return Series::default();
        };
        let mut merged = first.clone();
        for other in &hosts[1..] {
            for (i, sample) in other.samples.iter().enumerate() {
                if i >= merged.samples.len() {
                    // A longer host: its samples at their own times.
                    merged.samples.push(sample.clone());
                    merged
                        .latency
                        .push(other.latency.get(i).cloned().unwrap_or_default());
                    continue;
                }
                let m = &mut merged.samples[i];
                m.bytes_read += sample.bytes_read;
                m.bytes_written += sample.bytes_written;
                m.requests_completed += sample.requests_completed;
                m.in_flight += sample.in_flight;
                m.retries += sample.retries;
                m.io_wait_s += sample.io_wait_s;
                if let (Some(into), Some(from)) = (merged.latency.get_mut(i), other.latency.get(i))
                {
                    *into = add_sparse(into, from);
                }
            }
        }
        for (sample, latency) in merged.samples.iter_mut().zip(&merged.latency) {
            sample.latency_p50_ms = quantile_ms(latency, 0.50);
            sample.latency_p99_ms = quantile_ms(latency, 0.99);
        }
        merged
    }

    /// Drops the histograms (once merged, before summary.json).
    pub fn without_histograms(mut self) -> Series {
        self.latency = Vec::new();
        self
    }

    /// Sum of every sample's bytes read.
    pub fn bytes_read(&self) -> u64 {
        self.samples.iter().map(|s| s.bytes_read).sum()
    }

    /// `timeseries.csv`: a header with units, then one line per sample (empty latency when no
    /// request completed).
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "t_s,bytes_read,bytes_written,requests_completed,in_flight,retries,\
             latency_p50_ms,latency_p99_ms,io_wait_s\n",
        );
        let ms = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        for s in &self.samples {
            out.push_str(&format!(
                "{:.3},{},{},{},{},{},{},{},{:.6}\n",
                s.t_s,
                s.bytes_read,
                s.bytes_written,
                s.requests_completed,
                s.in_flight,
                s.retries,
                ms(s.latency_p50_ms),
                ms(s.latency_p99_ms),
                s.io_wait_s
            ));
        }
        out
    }

    /// This series followed by `later`, whose clock started `offset_s` after this one's (a
    /// checkpoint run's load phase after its save phase).
    pub fn then(mut self, later: Series, offset_s: f64) -> Series {
        self.interval_s = self.interval_s.max(later.interval_s);
        for mut s in later.samples {
            s.t_s += offset_s;
            self.samples.push(s);
        }
        self.latency.extend(later.latency);
        self
    }
}

/// Two sparse histograms (sorted by bucket) added.
fn add_sparse(a: &[(u32, u64)], b: &[(u32, u64)]) -> Vec<(u32, u64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                out.push((x.0, x.1 + y.1));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                out.push(*x);
                i += 1;
            }
            (Some(x), None) => {
                out.push(*x);
                i += 1;
            }
            (_, Some(y)) => {
                out.push(*y);
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// Reads [`Live`] every interval from the clock's start.
#[derive(Debug)]
pub struct Sampler {
    live: Arc<Live>,
    interval: Duration,
    start: Instant,
    last: Totals,
    series: Series,
}

impl Sampler {
    /// Sampling `live` every `interval` from `start` (the clock's start: counters were at zero
    /// then, as nothing is sent before every rank is ready).
    pub fn new(live: Arc<Live>, interval: Duration, start: Instant) -> Sampler {
        Sampler {
            live,
            interval,
            start,
            last: Totals {
                latency: vec![0; BUCKETS],
                ..Totals::default()
            },
            series: Series {
                interval_s: interval.as_secs_f64(),
                ..Series::default()
            },
        }
    }

    /// When the next sample is due: `start + (k + 1) · interval` (never drifting).
    pub fn next_due(&self) -> Instant {
        self.start + self.interval * (self.series.samples.len() as u32 + 1)
    }

    /// Takes the sample due (`at` = None), or a last, shorter one ending now.
    pub fn sample(&mut self, last_at: Option<Instant>) {
        let t_s = match last_at {
            None => self.interval.as_secs_f64() * (self.series.samples.len() + 1) as f64,
            Some(at) => at.saturating_duration_since(self.start).as_secs_f64(),
        };
        let now = self.live.totals();
        let last = &self.last;
        let latency: Vec<(u32, u64)> = now
            .latency
            .iter()
            .zip(&last.latency)
            .enumerate()
            .filter(|(_, (n, l))| n > l)
            .map(|(i, (n, l))| (i as u32, n - l))
            .collect();
        self.series.samples.push(Sample {
            t_s,
            bytes_read: now.bytes_read - last.bytes_read,
            bytes_written: now.bytes_written - last.bytes_written,
            requests_completed: now.requests - last.requests,
            in_flight: (now.in_flight as i64).max(0) as u64,
            retries: now.retries - last.retries,
            latency_p50_ms: quantile_ms(&latency, 0.50),
            latency_p99_ms: quantile_ms(&latency, 0.99),
            io_wait_s: (now.io_wait_ns - last.io_wait_ns) as f64 / 1e9,
        });
        self.series.latency.push(latency);
        self.last = now;
    }

    /// Samples until `done` says the run ended, then takes a last sample (when the last one is
    /// more than a millisecond old): the series, histograms included.
    pub fn run(mut self, done: &dyn Fn() -> bool) -> Series {
        const POLL: Duration = Duration::from_millis(20);
        loop {
            let due = self.next_due();
            while !done() {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                std::thread::sleep((due - now).min(POLL));
            }
            if done() {
                let now = Instant::now();
                let last_t = self.series.samples.last().map_or(0.0, |s| s.t_s);
                if now.saturating_duration_since(self.start).as_secs_f64() > last_t + 1e-3 {
                    self.sample(Some(now));
                }
                return self.series;
            }
            self.sample(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_fine() {
        let mut previous = 0;
        for us in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            65_432,
            1 << 30,
            u64::MAX,
        ] {
            let b = bucket(us);
            assert!(b >= previous && b < BUCKETS, "{us} µs → {b}");
            previous = b;
            if (1..(1 << TOP_BIT)).contains(&us) {
                let value = bucket_value_us(b);
                assert!(
                    (value - us as f64).abs() / us as f64 <= 0.016,
                    "{us} → {value}"
                );
            }
        }
        assert_eq!(bucket(1 << 40), BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_known_latencies() {
        let live = Arc::new(Live::new(2));
        let (a, b) = (Counter::of(&live, 0), Counter::of(&live, 1));
        // 1 ms … 100 ms, one request each, spread over two ranks.
        for ms in 1..=100u64 {
            let c = if ms % 2 == 0 { &a } else { &b };
            c.issued();
            c.completed(10, 0, Duration::from_millis(ms));
        }
        a.issued();
        a.retried();
        let mut sampler = Sampler::new(Arc::clone(&live), Duration::from_secs(1), Instant::now());
        sampler.sample(None);
        sampler.sample(None);
        let series = sampler.series;
        let s = &series.samples[0];
        assert_eq!((s.requests_completed, s.bytes_read), (100, 1000));
        assert_eq!((s.in_flight, s.retries), (1, 1));
        let (p50, p99) = (s.latency_p50_ms.unwrap(), s.latency_p99_ms.unwrap());
        assert!((p50 - 50.0).abs() <= 50.0 * 0.016, "p50 {p50}");
        assert!((p99 - 99.0).abs() <= 99.0 * 0.016, "p99 {p99}");
        // The next interval: nothing completed, still one in flight.
        let s = &series.samples[1];
        assert_eq!((s.requests_completed, s.bytes_read, s.in_flight), (0, 0, 1));
        assert_eq!((s.latency_p50_ms, s.t_s), (None, 2.0));
    }

    #[test]
    fn hosts_merge_by_sample_index() {
        let series = |samples: &[(u64, u64)]| {
            let live = Arc::new(Live::new(1));
            let c = Counter::of(&live, 0);
            let mut sampler =
                Sampler::new(Arc::clone(&live), Duration::from_secs(1), Instant::now());
            for &(ms, n) in samples {
                for _ in 0..n {
                    c.issued();
                    c.completed(1, 2, Duration::from_millis(ms));
                }
                sampler.sample(None);
            }
            sampler.series
        };
        // Process 0: two samples of fast requests; process 1: three of slow ones.
        let merged = Series::merge(&[
            series(&[(1, 99), (1, 1)]),
            series(&[(1000, 1), (5, 1), (7, 3)]),
        ]);
        assert_eq!(merged.samples.len(), 3);
        let s = &merged.samples[0];
        assert_eq!(
            (s.bytes_read, s.bytes_written, s.requests_completed),
            (100, 200, 100)
        );
        // 99 at 1 ms and 1 at 1 s: p50 1 ms, p99 still 1 ms (the 99th of 100), on one clock.
        assert!((s.latency_p50_ms.unwrap() - 1.0).abs() < 0.02);
        assert!((s.latency_p99_ms.unwrap() - 1.0).abs() < 0.02);
        let s = &merged.samples[1];
        assert_eq!(s.requests_completed, 2);
        assert!((s.latency_p99_ms.unwrap() - 5.0).abs() < 0.1);
        assert_eq!(merged.samples[2].requests_completed, 3);
        assert_eq!(merged.bytes_read(), 105);
        let csv = merged.csv();
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.starts_with("t_s,bytes_read,"));
    }
}
