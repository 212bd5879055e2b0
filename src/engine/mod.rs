//! Engines: how a rank's ranged GETs are sent and where their bodies land. Every engine is
//! driven through [`crate::rank::RankIo`] by the same step loop, from the same plan, through
//! the same reader window ([`window`]), and keeps the same [`crate::metrics::RequestStats`], so
//! a comparison between engines differs only in the transport. Engines never import each other.
//!
//! - [`uring`]: one io_uring per pinned rank thread, keep-alive connections driven by a
//!   completion loop, bodies read by the kernel straight into registered buffers.
//! - [`baseline`]: the conventional loader — a tokio multi-thread runtime, hyper's pooled
//!   client, each body collected into a freshly allocated heap buffer.

pub mod baseline;
pub mod uring;
pub mod window;

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use self::baseline::Baseline;
use self::uring::UringEngine;
use crate::plan::{Plan, RangedGet};
use crate::rank::{IoError, IoErrorKind, Progress, RankError, RankIo, StepBarrier};
use crate::s3::{Client, RequestError, Target};

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

/// The engine every rank of a run takes its I/O from, built once before any rank thread
/// starts. The driver knows no engine's details: it prepares one, asks it for each rank's I/O,
/// and shuts it down.
#[derive(Debug)]
pub enum Engine {
    Uring(UringEngine),
    Baseline(Baseline),
}

impl Engine {
    /// Builds the engine of kind `kind` for the plan's ranks `ranks` (all of them in one
    /// process, a share under MPI): the io_uring engine resolves every endpoint once; the
    /// baseline starts its runtime of `threads` workers and, with `https://` endpoints, opens
    /// the connections its readers' slots will use, so TLS handshakes happen before the clock
    /// as the io_uring engine's do.
    pub fn prepare(
        kind: EngineKind,
        client: &Client,
        plan: &Plan,
        ranks: Range<usize>,
        threads: usize,
    ) -> Result<Engine, RankError> {
        Ok(match kind {
            EngineKind::Uring => Engine::Uring(UringEngine::new(client.clone())?),
            EngineKind::Baseline => {
                let baseline = Baseline::new(client.clone(), threads).map_err(|e| {
                    RankError::Engine(format!("cannot start the baseline runtime: {e}"))
                })?;
                let rt = plan.settings.read_threads as usize;
                baseline
                    .preconnect(
                        ranks.start * rt..ranks.end * rt,
                        plan.window_per_reader as usize,
                    )
                    .map_err(|e| RankError::Io(e.into()))?;
                Engine::Baseline(baseline)
            }
        })
    }

    /// The I/O of rank `rank` (a global number), whose readers' GETs are `gets`, set up in
    /// full. Call it in the rank's own thread.
    pub fn rank<'a>(
        &self,
        rank: usize,
        gets: Vec<Vec<RangedGet>>,
        plan: &Plan,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> Result<Box<dyn RankIo + 'a>, RankError> {
        let prefetch = plan.window_per_reader as usize;
        let epochs = plan.settings.epochs;
        // Readers are numbered over every rank, for spreading connections over endpoints.
        let first_reader = rank * gets.len();
        Ok(match self {
            Engine::Uring(uring) => Box::new(uring.rank(
                gets,
                prefetch,
                epochs,
                first_reader,
                plan.memory.buffer_bytes as usize,
                barrier,
                progress,
            )?),
            Engine::Baseline(baseline) => {
                Box::new(baseline.rank(gets, prefetch, epochs, first_reader, barrier, progress))
            }
        })
    }

    /// Ends the engine once every rank has finished: the baseline stops its runtime (GETs still
    /// running after a failure are dropped).
    pub fn shutdown(self) {
        match self {
            Engine::Uring(_) => {}
            Engine::Baseline(baseline) => baseline.shutdown(),
        }
    }
}

/// The engines' boundary: a request's error as the step loop sees it, its words unchanged.
impl From<RequestError> for IoError {
    fn from(error: RequestError) -> IoError {
        let kind = match &error {
            RequestError::Status { .. } => IoErrorKind::Status,
            RequestError::Unreachable { .. } => IoErrorKind::Unreachable,
            RequestError::Tls { .. } => IoErrorKind::Tls,
            RequestError::Timeout { .. } => IoErrorKind::Timeout,
            RequestError::Transport { .. } | RequestError::StrayBytes { .. } => {
                IoErrorKind::Connection
            }
            RequestError::BadResponse { .. } => IoErrorKind::BadResponse,
            RequestError::Corrupt { .. } => IoErrorKind::Corrupt,
        };
        IoError {
            kind,
            message: error.to_string(),
        }
    }
}

/// The endpoint of each connection slot of `readers` (numbered over every rank: rank × RT +
/// reader), `prefetch` slots per reader: entry `r × prefetch + j` is slot `j` of the range's
/// `r`-th reader, sent to endpoint [`Target::endpoint_for`]. The one walk behind both engines'
/// connections and the baseline's pre-connect.
pub fn slot_endpoints(target: &Target, readers: Range<usize>, prefetch: usize) -> Vec<usize> {
    readers
        .flat_map(|g| (0..prefetch).map(move |j| target.endpoint_for(g, prefetch, j)))
        .collect()
}

/// Checks a `206 Partial Content` answer's `Content-Range` and `Content-Length` against the
/// range asked for; the error says what was wrong.
pub fn check_partial_content(
    content_range: Option<&str>,
    content_length: Option<&str>,
    get: &RangedGet,
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

    /// Each slot's endpoint, reader by reader: a rank's readers continue the numbering of the
    /// ranks before it, so two ranks of two readers spread over three endpoints as one rank of
    /// four would.
    #[test]
    fn slots_walk_readers_then_their_slots() {
        let endpoint = |url| crate::s3::Endpoint::parse(url).unwrap();
        let mut target = Target::simple(endpoint("http://a.test:9000"), "b", None);
        target.endpoints.push(endpoint("http://b.test:9000"));
        target.endpoints.push(endpoint("http://c.test:9000"));
        // Readers 2 and 3 (rank 1 of RT = 2), prefetch 2: (g × 2 + j) mod 3.
        assert_eq!(slot_endpoints(&target, 2..4, 2), [1, 2, 0, 1]);
        let whole = slot_endpoints(&target, 0..4, 2);
        let ranks = [
            slot_endpoints(&target, 0..2, 2),
            slot_endpoints(&target, 2..4, 2),
        ]
        .concat();
        assert_eq!(whole, ranks);
        assert_eq!(whole, [0, 1, 2, 0, 1, 2, 0, 1]);
        assert!(slot_endpoints(&target, 3..3, 2).is_empty());
        // One endpoint: every slot goes to it.
        target.endpoints.truncate(1);
        assert_eq!(slot_endpoints(&target, 0..3, 3), [0; 9]);
    }

    #[test]
    fn partial_content_checks() {
        let get = RangedGet {
            key: "k".into(),
            offset: 4,
            len_bytes: 10,
            check: None,
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
