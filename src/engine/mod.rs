//! Engines: how a rank's ranged GETs are sent and where their bodies land. Every engine is
//! driven through [`crate::rank::RankIo`] by the same step loop, from the same plan, and keeps
//! the same [`RequestStats`], so a comparison between engines differs only in the transport.
//!
//! - [`uring`]: one io_uring per pinned rank thread, keep-alive connections driven by a
//!   completion loop, bodies read by the kernel straight into registered buffers.
//! - [`baseline`]: the conventional loader — a tokio multi-thread runtime, hyper's pooled
//!   client, each body collected into a freshly allocated heap buffer.

pub mod baseline;
pub mod uring;

use std::fmt;

use serde::Serialize;

use crate::metrics::LatencyHistogram;
use crate::plan::Plan;
use crate::rank::RunError;

/// Which engine moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// io_uring per pinned rank thread, bodies read into registered buffers.
    Uring,
    /// tokio + hyper, a fresh heap buffer per GET: the conventional design.
    Baseline,
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Uring => "uring",
            EngineKind::Baseline => "baseline",
        })
    }
}

/// One ranged GET as an engine sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRequest {
    pub key: String,
    pub offset: u64,
    pub len_bytes: u64,
}

impl GetRequest {
    /// The inclusive last byte.
    pub fn last_byte(&self) -> u64 {
        self.offset + self.len_bytes - 1
    }

    /// The `Range` header value: `bytes=first-last`.
    pub fn range_header(&self) -> String {
        format!("bytes={}-{}", self.offset, self.last_byte())
    }
}

/// The GETs of each reader of rank `rank`, in the order the reader issues them.
pub fn rank_gets(plan: &Plan, rank: usize) -> Vec<Vec<GetRequest>> {
    plan.ranks[rank]
        .readers
        .iter()
        .map(|reader| {
            reader
                .gets
                .iter()
                .map(|g| GetRequest {
                    key: plan.catalog.files[g.file].key.clone(),
                    offset: g.offset,
                    len_bytes: g.len_bytes,
                })
                .collect()
        })
        .collect()
}

/// One completed GET, for the request trace (`requests.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRecord {
    /// 0-based, as in steps.csv.
    pub epoch: u32,
    pub reader: usize,
    /// The GET's index in its reader's list (see [`rank_gets`]).
    pub get: usize,
    pub attempts: u32,
    pub first_byte_us: u64,
    pub total_us: u64,
}

/// What one rank's GETs did.
#[derive(Debug, Clone, Default)]
pub struct RequestStats {
    /// GETs completed (each counted once, however many attempts it took).
    pub requests: u64,
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
}

impl RequestStats {
    pub fn merge(&mut self, other: &RequestStats) {
        self.requests += other.requests;
        self.retries += other.retries;
        self.errors += other.errors;
        self.bytes_read += other.bytes_read;
        self.first_byte.merge(&other.first_byte);
        self.total.merge(&other.total);
        self.trace.extend_from_slice(&other.trace);
    }
}

/// The step loop asked for a GET in the wrong state: `what` is "waits for" or "release of".
/// The plan's schedule and the prefetch window make this impossible; it is reported, not
/// panicked on.
pub fn schedule_bug(what: &str, reader: usize, get: usize, state: &dyn fmt::Debug) -> RunError {
    RunError::Engine(format!(
        "rank {what} GET {get} of reader {reader}, which is {state:?}; the plan's schedule and \
         the prefetch window disagree (a bug)"
    ))
}

/// At the end of an epoch every reader has issued all of its GETs.
pub fn check_all_issued(reader: usize, issued: usize, gets: usize) -> Result<(), RunError> {
    if issued == gets {
        return Ok(());
    }
    Err(RunError::Engine(format!(
        "reader {reader} issued {issued} of its {gets} GETs this epoch (a bug)"
    )))
}

/// Checks a `206 Partial Content` answer's `Content-Range` and `Content-Length` against the
/// range asked for; the error says what was wrong.
pub fn check_partial_content(
    content_range: Option<&str>,
    content_length: Option<&str>,
    get: &GetRequest,
) -> Result<(), String> {
    let expected = format!("bytes {}-{}/", get.offset, get.last_byte());
    match content_range {
        None => return Err("the 206 answer has no Content-Range".into()),
        Some(range) => {
            let total_ok = range
                .strip_prefix(&expected)
                .is_some_and(|total| total == "*" || total.parse::<u64>().is_ok());
            if !total_ok {
                return Err(format!(
                    "asked for {} and the answer's Content-Range is '{range}'",
                    get.range_header()
                ));
            }
        }
    }
    match content_length.map(|l| l.trim().parse::<u64>()) {
        Some(Ok(n)) if n == get.len_bytes => Ok(()),
        Some(Ok(n)) => Err(format!(
            "asked for {} bytes and the answer's Content-Length is {n}",
            get.len_bytes
        )),
        Some(Err(_)) => Err("the answer's Content-Length is not a number".into()),
        None => Err("the 206 answer has no Content-Length".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_content_checks() {
        let get = GetRequest {
            key: "k".into(),
            offset: 4,
            len_bytes: 10,
        };
        assert_eq!(get.range_header(), "bytes=4-13");
        let ok = |cr, cl| check_partial_content(cr, cl, &get);
        assert_eq!(ok(Some("bytes 4-13/100"), Some("10")), Ok(()));
        assert_eq!(ok(Some("bytes 4-13/*"), Some("10")), Ok(()));
        assert!(ok(Some("bytes 4-12/100"), Some("9")).is_err());
        assert!(ok(Some("bytes 0-13/100"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/x"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("11")).is_err());
        assert!(ok(Some("bytes 4-13/100"), None).is_err());
        assert!(ok(None, Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("ten")).is_err());
    }
}
