//! Engines: how a rank's ranged GETs are sent and where their bodies land. Every engine is
//! driven through [`crate::rank::RankIo`] by the same step loop, from the same plan, through
//! the same reader window ([`window`]), and keeps the same [`crate::metrics::RequestStats`], so
//! a comparison between engines differs only in the transport. Engines never import each other.
//!
//! - [`uring`]: one io_uring per pinned rank thread, keep-alive connections driven by a
//!   completion loop, bodies read by the kernel straight into registered buffers.
//! - [`baseline`]: the conventional loader — a tokio multi-thread runtime, hyper's pooled
//!   client, each body collected into a freshly allocated heap buffer.
//! - [`file`]: a mounted file system (`--data-dir`): one io_uring per pinned rank thread,
//!   `O_DIRECT` reads straight into the registered buffers ([`pool`], shared with [`uring`]).

pub mod baseline;
pub mod common;
pub mod file;
pub mod pool;
pub mod uring;
pub mod window;

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use self::baseline::Baseline;
use self::file::FileEngine;
use self::uring::UringEngine;
use crate::checkpoint::ObjectIoShape;
use crate::files::DataDir;
use crate::plan::{Plan, RangedGet};
use crate::rank::checkpoint::ObjectIo;
use crate::rank::{IoError, IoErrorKind, Progress, RankError, RankIo, StepBarrier};
use crate::s3::{Client, RequestError, RetryPolicy};

/// Which engine moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// io_uring per pinned rank thread, bodies read into registered buffers.
    Uring,
    /// tokio + hyper, a fresh heap buffer per GET: the conventional design.
    Baseline,
    /// A mounted file system (`--data-dir`): io_uring per pinned rank thread, `O_DIRECT`
    /// reads into registered buffers.
    File,
}

/// Where a run's bytes are: an S3 target (its client), or a data directory.
#[derive(Debug, Clone, Copy)]
pub enum Reach<'a> {
    S3(&'a Client),
    Dir {
        dir: &'a DataDir,
        policy: RetryPolicy,
    },
}

impl Reach<'_> {
    /// The limits of one request: the S3 client's, or the file run's `--timeout`.
    pub fn policy(&self) -> RetryPolicy {
        match self {
            Reach::S3(client) => *client.policy(),
            Reach::Dir { policy, .. } => *policy,
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Uring => "uring",
            EngineKind::Baseline => "baseline",
            EngineKind::File => "file",
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
    File(FileEngine),
}

impl Engine {
    /// Builds the engine of kind `kind` for the plan's ranks `ranks` (all of them in one
    /// process, a share under MPI): the io_uring engine resolves every endpoint once; the
    /// baseline starts its runtime of `threads` workers and, with `https://` endpoints, opens
    /// the connections its readers' slots will use, so TLS handshakes happen before the clock
    /// as the io_uring engine's do.
    pub fn prepare(
        kind: EngineKind,
        reach: Reach<'_>,
        plan: &Plan,
        ranks: Range<usize>,
        threads: usize,
    ) -> Result<Engine, RankError> {
        Ok(match (kind, reach) {
            (EngineKind::File, Reach::Dir { dir, policy }) => {
                Engine::File(FileEngine::new(dir.clone(), policy))
            }
            (EngineKind::Uring, Reach::S3(client)) => {
                Engine::Uring(UringEngine::new(client.clone())?)
            }
            (EngineKind::Baseline, Reach::S3(client)) => {
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
            (kind, _) => return Err(mismatch(kind)),
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
        let small = plan.memory.small_buffers;
        // Readers are numbered over every rank, for spreading connections over endpoints.
        let first_reader = rank * gets.len();
        let counter = progress.counter(rank);
        Ok(match self {
            Engine::Uring(uring) => Box::new({
                let mut io = uring.rank(
                    gets,
                    prefetch,
                    small,
                    // An object fetched as s3dlio does keeps this many ranges in flight.
                    if plan.object_fetch.is_some_and(|f| f.head) {
                        plan.slot_connections as usize
                    } else {
                        1
                    },
                    epochs,
                    first_reader,
                    plan.memory.buffer_bytes as usize,
                    barrier,
                    progress,
                )?;
                io.window.count_into(counter);
                io
            }),
            Engine::Baseline(baseline) => Box::new({
                let mut io = baseline.rank(
                    gets,
                    prefetch,
                    small,
                    epochs,
                    first_reader,
                    barrier,
                    progress,
                );
                io.window.count_into(counter);
                io
            }),
            Engine::File(file) => Box::new({
                let buffer_bytes = plan.memory.buffer_bytes as usize;
                let mut io = file.rank(gets, prefetch, small, epochs, buffer_bytes, barrier)?;
                io.window.count_into(counter);
                io
            }),
        })
    }

    /// The engine of a checkpoint run: the io_uring engine resolves every endpoint once; the
    /// baseline starts its runtime of `threads` workers.
    pub fn for_checkpoint(
        kind: EngineKind,
        reach: Reach<'_>,
        threads: usize,
    ) -> Result<Engine, RankError> {
        Ok(match (kind, reach) {
            (EngineKind::File, Reach::Dir { dir, policy }) => {
                Engine::File(FileEngine::new(dir.clone(), policy))
            }
            (EngineKind::Uring, Reach::S3(client)) => {
                Engine::Uring(UringEngine::new(client.clone())?)
            }
            (EngineKind::Baseline, Reach::S3(client)) => {
                Engine::Baseline(Baseline::new(client.clone(), threads).map_err(|e| {
                    RankError::Engine(format!("cannot start the baseline runtime: {e}"))
                })?)
            }
            (kind, _) => return Err(mismatch(kind)),
        })
    }

    /// The checkpoint I/O of rank `rank` (a global number): buffers for `shape`'s parts and
    /// read blocks, set up in full. Call it in the rank's own thread, before the clock.
    pub fn checkpoint(
        &self,
        rank: usize,
        shape: ObjectIoShape,
    ) -> Result<Box<dyn ObjectIo + '_>, RankError> {
        Ok(match self {
            Engine::Uring(uring) => Box::new(uring.checkpoint(rank, shape)?),
            Engine::Baseline(baseline) => Box::new(baseline.checkpoint(rank, shape)),
            Engine::File(file) => Box::new(file.checkpoint(rank, shape)?),
        })
    }

    /// Ends the engine once every rank has finished: the baseline stops its runtime (GETs still
    /// running after a failure are dropped).
    pub fn shutdown(self) {
        match self {
            Engine::Uring(_) | Engine::File(_) => {}
            Engine::Baseline(baseline) => baseline.shutdown(),
        }
    }
}

/// The engine choice and the store disagree (the choice is made knowing the store).
fn mismatch(kind: EngineKind) -> RankError {
    RankError::Engine(format!(
        "the {kind} engine was chosen for a store it does not read (a bug)"
    ))
}

/// The engines' boundary: a request's error as the step loop sees it, its words unchanged.
impl From<RequestError> for IoError {
    fn from(error: RequestError) -> IoError {
        let kind = match &error {
            RequestError::Status { .. } => IoErrorKind::Status,
            RequestError::Unreachable { .. } => IoErrorKind::Unreachable,
            RequestError::Tls { .. } => IoErrorKind::Tls,
            RequestError::Timeout { .. } => IoErrorKind::Timeout,
            RequestError::Transport { .. }
            | RequestError::TlsRecord { .. }
            | RequestError::StrayBytes { .. } => IoErrorKind::Connection,
            RequestError::BadResponse { .. } | RequestError::NotS3 { .. } => {
                IoErrorKind::BadResponse
            }
            RequestError::Corrupt { .. } => IoErrorKind::Corrupt,
            RequestError::File { .. } => IoErrorKind::File,
        };
        IoError {
            kind,
            message: error.to_string(),
        }
    }
}
