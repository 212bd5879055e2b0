//! A server-wide bandwidth limit (`serve --bandwidth-mib-per-s`, the sweep's
//! `--server-bandwidth-mib-per-s`): one bucket shared by every connection and worker thread, so
//! the server's total rate stays at the limit however many clients read at once — a store of
//! fixed bandwidth, on loopback. (`--throttle-mib-per-s` paces each body on its own instead, so
//! its total grows with the clients.)
//!
//! Each frame of a GET body reserves its bytes before it is handed over: the bucket keeps the
//! moment its bandwidth is next free, and a frame of `n` bytes is due at that moment (or now,
//! if the bandwidth is idle) and moves the moment on by `n ÷ rate`. Idle bandwidth is kept as
//! credit for at most [`BURST_NS`] (so a lone stream is not slowed by the timer's millisecond
//! grain), so the bytes over any stretch of time T are at most the limit × (T + 20 ms) plus one
//! frame.

use std::sync::Mutex;
use std::time::Duration;

/// How long idle bandwidth is kept as credit: 20 ms.
pub const BURST_NS: u64 = 20_000_000;

/// The bucket's arithmetic, on nanoseconds since the server's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub rate_bytes_per_s: u64,
    /// When the bandwidth is next free.
    next_free_ns: u64,
}

impl Bucket {
    pub fn new(rate_bytes_per_s: u64) -> Bucket {
        Bucket {
            rate_bytes_per_s: rate_bytes_per_s.max(1),
            next_free_ns: 0,
        }
    }

    /// Reserves `bytes` at `now_ns`: returns when they may be sent (never before `now_ns`).
    pub fn reserve(&mut self, now_ns: u64, bytes: u64) -> u64 {
        // The bytes' slot starts when the bandwidth is free, or up to BURST_NS back.
        let start = self.next_free_ns.max(now_ns.saturating_sub(BURST_NS));
        let takes_ns = u128::from(bytes) * 1_000_000_000 / u128::from(self.rate_bytes_per_s);
        self.next_free_ns = start.saturating_add(u64::try_from(takes_ns).unwrap_or(u64::MAX));
        start.max(now_ns)
    }
}

/// The server's limit: none until [`Bandwidth::set`] gives one.
#[derive(Debug)]
pub struct Bandwidth {
    origin: tokio::time::Instant,
    bucket: Mutex<Option<Bucket>>,
}

impl Default for Bandwidth {
    fn default() -> Bandwidth {
        Bandwidth {
            origin: tokio::time::Instant::now(),
            bucket: Mutex::new(None),
        }
    }
}

impl Bandwidth {
    /// Limits the server to `rate_bytes_per_s` from now on (`None`: no limit).
    pub fn set(&self, rate_bytes_per_s: Option<u64>) {
        if let Ok(mut bucket) = self.bucket.lock() {
            // A rate under 1 B/s (a tiny limit given in MiB/s) is 1 B/s, never "no limit".
            *bucket = rate_bytes_per_s.map(|r| Bucket::new(r.max(1)));
        }
    }

    /// The limit in bytes/s, if any.
    pub fn limit(&self) -> Option<u64> {
        self.bucket
            .lock()
            .ok()
            .and_then(|b| b.map(|b| b.rate_bytes_per_s))
    }

    /// When `bytes` may be sent: `None` at once (no limit).
    pub fn reserve(&self, bytes: u64) -> Option<tokio::time::Instant> {
        let mut guard = self.bucket.lock().ok()?;
        let bucket = guard.as_mut()?;
        let now_ns = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let due_ns = bucket.reserve(now_ns, bytes);
        Some(self.origin + Duration::from_nanos(due_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_from_any_connection_queue_behind_each_other_at_the_rate() {
        // 1 MiB/s: a 64 KiB frame takes 1/16 s = 62.5 ms.
        let mut b = Bucket::new(1 << 20);
        assert_eq!(b.reserve(0, 64 << 10), 0);
        // A second connection's frame at the same moment waits for the first.
        assert_eq!(b.reserve(0, 64 << 10), 62_500_000);
        // A third, 10 ms later, behind both.
        assert_eq!(b.reserve(10_000_000, 64 << 10), 125_000_000);
        // So 3 frames (192 KiB) take 187.5 ms however many connections send them: 1 MiB/s.
        assert_eq!(b.reserve(187_500_000, 1), 187_500_000);
    }

    #[test]
    fn idle_time_builds_at_most_20_ms_of_credit() {
        let mut b = Bucket::new(1000);
        assert_eq!(b.reserve(0, 500), 0);
        // Free at 0.5 s; idle until 10 s: 20 ms of credit (20 bytes) go at once, then the
        // bucket is busy 1 s per 1000 bytes from 9.98 s on.
        assert_eq!(b.reserve(10_000_000_000, 20), 10_000_000_000);
        assert_eq!(b.reserve(10_000_000_000, 1000), 10_000_000_000);
        assert_eq!(b.reserve(10_000_000_000, 1000), 11_000_000_000);
        // A stream that comes back 1 ms late (the timer's grain) loses nothing.
        let mut b = Bucket::new(1 << 20);
        assert_eq!(b.reserve(0, 64 << 10), 0);
        assert_eq!(b.reserve(63_500_000, 64 << 10), 63_500_000);
        assert_eq!(b.reserve(63_500_000, 64 << 10), 125_000_000);
    }

    #[test]
    fn huge_frames_and_tiny_rates_saturate_instead_of_overflowing() {
        let mut b = Bucket::new(0);
        assert_eq!(b.rate_bytes_per_s, 1);
        assert_eq!(b.reserve(5, u64::MAX), 5);
        assert_eq!(b.reserve(6, 1), u64::MAX);
        assert_eq!(Bucket::new(1).reserve(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn no_limit_until_one_is_set() {
        let bw = Bandwidth::default();
        assert_eq!(bw.reserve(1 << 20), None);
        bw.set(Some(1 << 20));
        assert_eq!(bw.limit(), Some(1 << 20));
        bw.set(None);
        assert_eq!(bw.reserve(1 << 20), None);
    }
}
