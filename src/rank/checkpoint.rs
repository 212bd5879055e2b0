//! A rank's checkpoint I/O, as the checkpoint loop sees it: write one object whole, read one
//! object whole. Engines implement [`ObjectIo`]; the loop that calls it (sleep, barrier, the
//! rank's saves in sequence, timing) is the run's, the same for every engine.

use std::collections::BTreeMap;
use std::time::Duration;

use super::RankError;
use crate::content::Content;
use crate::metrics::{LatencyHistogram, RequestStats};

/// One object to write or read: its key on the wire, its size, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSpec {
    pub key: String,
    pub bytes: u64,
    pub content: Content,
}

/// A rank's checkpoint I/O. One per rank, used only by that rank's thread; built (buffers
/// allocated and registered, connections opened where the engine does) before the clock.
pub trait ObjectIo {
    /// Writes `object` whole: a multipart upload of `part_bytes` parts with up to
    /// `parts_in_flight` in flight (one PUT below `single_put_below`), each part's bytes
    /// generated straight into its send buffer. A part that fails is retried; one that exhausts
    /// its retries aborts the upload and fails with a line that names the object and the part.
    /// Returns when the upload is complete (CompleteMultipartUpload answered).
    fn put(&mut self, object: &ObjectSpec) -> Result<(), RankError>;
    /// Reads `object` whole: `read_blocks` contiguous blocks in parallel, each with sequential
    /// ranged GETs of at most `read_range_bytes`, into the rank's buffers; with `verify`, every
    /// byte checked against `object.content`.
    fn get(&mut self, object: &ObjectSpec) -> Result<(), RankError>;
    /// The flag that stops the phase (another rank failed, or an interrupt): once raised, no
    /// new part or ranged GET starts and `put` or `get` ends with [`RankError::Aborted`] (an
    /// upload in hand aborted), so a rank never finishes a many-GiB object nobody waits for.
    fn set_stop(&mut self, stop: std::sync::Arc<std::sync::atomic::AtomicBool>);
    /// Counts each request sent, ended (bytes, latency) and retried into `counter`, the time
    /// series' live counters of the rank.
    fn count_into(&mut self, counter: crate::timeseries::Counter);
    /// Journals every upload the rank starts (before its first part) and ends, in the
    /// process's journal (`super::journal`).
    fn set_journal(&mut self, journal: super::journal::UploadJournal);
    /// Aborts the uploads this rank has open (after a failure elsewhere, or an interrupt), so
    /// none is left behind. Best effort; returns how many it aborted.
    fn abort_open(&mut self) -> usize;
    /// What the rank's writes and reads did so far.
    fn stats(&self) -> &ObjectStats;
}

/// What one rank's checkpoint I/O did.
#[derive(Debug, Clone, Default)]
pub struct ObjectStats {
    pub write: WriteStats,
    /// The restores' ranged GETs, counted as training GETs are.
    pub read: RequestStats,
    /// The restores' checks of each object's checksum (`--restore-checksum`).
    pub restore: RestoreCheckStats,
}

/// What a rank's restores found checking each object's checksum, returned by a HEAD
/// (`x-amz-checksum-mode: ENABLED`), against the CRCs of the blocks they read.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreCheckStats {
    /// Objects whose FULL_OBJECT CRC matched the bytes read.
    pub checked: u64,
    /// Objects the HEAD returned no FULL_OBJECT CRC for (none, or a COMPOSITE one).
    pub unchecked: u64,
    /// The blocks' CRCs' CPU, timed apart.
    pub cpu: std::time::Duration,
}

/// What one rank's uploads did.
#[derive(Debug, Clone, Default)]
pub struct WriteStats {
    /// Objects written whole.
    pub objects: u64,
    /// Parts (and single PUTs) completed, each once however many attempts it took.
    pub parts: u64,
    /// Body bytes of completed parts.
    pub bytes_written: u64,
    /// Part attempts beyond the first.
    pub retries: u64,
    pub retries_by_cause: BTreeMap<&'static str, u64>,
    /// Uploads aborted (a part past its retries, or a failed completion).
    pub aborted: u64,
    /// The requests the writes sent, by kind, as the store sees them (each answered one
    /// once; an upload's creation, parts, completion, a single PUT, an abort, a HEAD settling
    /// a lost completion).
    pub sent: crate::metrics::RequestKinds,
    /// From a part's first attempt to its answer, retries included.
    pub part_latency: LatencyHistogram,
    /// CPU time of the rank's thread spent generating content (kept apart from the I/O's).
    pub generate_cpu: Duration,
    /// CPU time of the rank's thread spent computing the parts' checksums (`--checksum`),
    /// kept apart from the generator's and the I/O's.
    pub checksum_cpu: Duration,
    /// Sends made with `SEND_ZC`, and how many of their notifications said the kernel copied
    /// the data anyway (`IORING_NOTIF_USAGE_ZC_COPIED`, as on loopback).
    pub zc_sends: u64,
    pub zc_copied: u64,
    /// Uploads whose CompleteMultipartUpload answer was lost or unclear, and that a HEAD
    /// found completed (`s3::complete`).
    pub settled_by_head: u64,
    /// Uploads sent with a checksum whose completion came back without the object's: the
    /// store may ignore checksums (`s3::complete::Completed::Answered`).
    pub checksum_unconfirmed: u64,
}

impl WriteStats {
    pub fn merge(&mut self, other: &WriteStats) {
        self.objects += other.objects;
        self.parts += other.parts;
        self.bytes_written += other.bytes_written;
        self.retries += other.retries;
        for (cause, n) in &other.retries_by_cause {
            *self.retries_by_cause.entry(cause).or_default() += n;
        }
        self.aborted += other.aborted;
        self.sent.merge(&other.sent);
        self.part_latency.merge(&other.part_latency);
        self.generate_cpu += other.generate_cpu;
        self.checksum_cpu += other.checksum_cpu;
        self.zc_sends += other.zc_sends;
        self.zc_copied += other.zc_copied;
        self.settled_by_head += other.settled_by_head;
        self.checksum_unconfirmed += other.checksum_unconfirmed;
    }
}

impl ObjectStats {
    pub fn merge(&mut self, other: &ObjectStats) {
        self.write.merge(&other.write);
        self.read.merge(&other.read);
        self.restore.checked += other.restore.checked;
        self.restore.unchecked += other.restore.unchecked;
        self.restore.cpu += other.restore.cpu;
    }
}

/// Which half of a checkpoint run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Save,
    Load,
}

/// One phase of a rank: its objects per checkpoint, in order, and DLIO's pacing.
#[derive(Debug)]
pub struct PhaseSpec<'a> {
    pub phase: Phase,
    /// `checkpoints[i]`: the rank's objects of the phase's i-th checkpoint, in write order.
    pub checkpoints: &'a [Vec<ObjectSpec>],
    /// `checkpoint.time_between_checkpoints`, slept before every save and every load.
    pub sleep: Duration,
    /// `checkpoint.rank_sync`: a barrier after each save or load too.
    pub rank_sync: bool,
}

/// A rank's timing of one phase: per checkpoint, its start and end in seconds since the
/// phase's clock started (the same instant for every rank of the process).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseRecord {
    pub spans_s: Vec<(f64, f64)>,
}

/// How often a sleeping rank looks at the barrier (another rank's failure, an interrupt).
const SLEEP_POLL: Duration = Duration::from_millis(100);

/// Runs one phase of a rank as DLIO's `_checkpoint_write` / `_checkpoint_read` do: for each
/// checkpoint, sleep `time_between_checkpoints`, meet every rank (and host) at the barrier,
/// then the rank's own saves (or loads) in sequence; with `rank_sync`, a barrier after them.
/// `clock` is the phase's start; each checkpoint's span is recorded as it ends, so a failure
/// keeps the spans before it.
pub fn run_phase(
    io: &mut dyn ObjectIo,
    spec: &PhaseSpec<'_>,
    barrier: &super::StepBarrier,
    progress: &super::Progress,
    clock: std::time::Instant,
    record: &mut PhaseRecord,
) -> Result<(), RankError> {
    use std::sync::atomic::Ordering;
    for objects in spec.checkpoints {
        let wake = std::time::Instant::now() + spec.sleep;
        while let Some(left) = wake.checked_duration_since(std::time::Instant::now()) {
            if left.is_zero() {
                break;
            }
            if barrier.is_aborted() {
                return Err(RankError::Aborted);
            }
            std::thread::sleep(left.min(SLEEP_POLL));
        }
        barrier.wait()?;
        let t0 = clock.elapsed().as_secs_f64();
        for object in objects {
            if barrier.is_aborted() {
                return Err(RankError::Aborted);
            }
            match spec.phase {
                Phase::Save => io.put(object)?,
                Phase::Load => io.get(object)?,
            }
            progress
                .bytes_received
                .fetch_add(object.bytes, Ordering::Relaxed);
        }
        let t1 = clock.elapsed().as_secs_f64();
        record.spans_s.push((t0, t1));
        progress.steps_done.fetch_add(1, Ordering::Relaxed);
        if spec.rank_sync {
            barrier.wait()?;
        }
    }
    Ok(())
}
