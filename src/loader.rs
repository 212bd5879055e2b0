//! Which loader's behaviour a run reproduces, and how the DLIO fork's object loader (s3dlio,
//! the one MLPerf Storage v3.0 runs) fetches one whole object: the rules, apart from the plan
//! that applies them and the engines that send them.
//!
//! s3dlio (`s3_utils.rs`, `get_object_uri_optimized_async`), as the DLIO fork's
//! `_s3_stream_s3dlio` drives it for npz and jpeg objects:
//! - DLIO turns s3dlio's HEAD on when the workload's `record_length` is 16 MiB or more (unet3d),
//!   off below (retinanet): one HEAD per object, just before its GETs (the size cache misses the
//!   first time a worker process sees an object; ringload sends one per object fetched).
//! - With the HEAD, an object of 32 MiB or more (`S3DLIO_RANGE_THRESHOLD_MB`) is fetched as
//!   concurrent ranged GETs: chunks of 4 MiB below 256 MiB, 8 MiB from there
//!   (`S3DLIO_CHUNK_SIZE`, in bytes), at most max(2, cores ÷ 2) below 32 MiB, max(4, cores) below
//!   512 MiB and max(8, 2 · cores) from there in flight per object (`S3DLIO_RANGE_CONCURRENCY`),
//!   `cores` the CPUs the process may use. Without the HEAD (s3dlio's `skip_head` latch) it
//!   never splits: one plain GET.
//! - The environment variables change the rules as they change s3dlio's, read once here.

use std::fmt;

use serde::Serialize;

/// How ranks share the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Sharding {
    /// Disjoint contiguous shares of the row-group sequence, one per rank.
    Rank,
    /// Every rank reads the same share, as DLIO's PyTorch data loader does (Parquet). For a
    /// whole-object dataset, as the DLIO fork of MLPerf Storage v3.0 shards files
    /// (`plan::v3_shares`): file i to rank i mod NP, ⌊N ÷ NP⌋ files per rank.
    Dlio,
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sharding::Rank => "rank",
            Sharding::Dlio => "dlio",
        })
    }
}

/// Which loader's behaviour a run reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Loader {
    /// ringload's own: disjoint shares, `prefetch` GETs per reader, nothing read past the last
    /// step, footers read once.
    Ringload,
    /// What DLIO's loader does to the storage. Parquet: DLIO's PyTorch loader — every rank walks
    /// the whole file list (so the plan's sharding is `dlio`, whatever `--sharding` says), each
    /// reader keeps `prefetch` GETs in flight plus the DataLoader's prefetch factor of finished
    /// ones queued ([`dlio_prefetch_factor`], or `--prefetch-factor`), reads on past its last
    /// step until that window is full (GETs no step uses, which land after the clock stopped),
    /// and every rank reads every file's footer itself. Whole objects: the fork's s3dlio
    /// loader — the fork's sharding, a window of `storage_options.prefetch_window` objects per
    /// reader (64), each fetched as [`ObjectFetch`] says.
    Dlio,
}

impl fmt::Display for Loader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loader::Ringload => "ringload",
            Loader::Dlio => "dlio",
        })
    }
}

/// The prefetch factor DLIO's PyTorch data loader gives its DataLoader (finished batches
/// queued per worker): `⌈prefetch_size ÷ read_threads⌉` (`reader.prefetch_size`, DLIO's default
/// 2), so 2 at RT=1 and 1 at RT=2, not PyTorch's own default of 2. `read_threads` below 1 is
/// taken as 1 (ringload needs a reader).
pub fn dlio_prefetch_factor(prefetch_size: u32, read_threads: u32) -> u32 {
    prefetch_size.div_ceil(read_threads.max(1))
}

/// s3dlio's default window of objects in flight per DataLoader worker
/// (`storage_options.prefetch_window`).
pub const S3DLIO_PREFETCH_WINDOW: u32 = 64;

const MIB: u64 = 1 << 20;

/// How the DLIO fork's s3dlio loader fetches a whole object: see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObjectFetch {
    /// A HEAD before the GETs (the workload's record length is 16 MiB or more).
    pub head: bool,
    /// With the HEAD, objects of this size or more are fetched as ranged chunks.
    pub range_threshold_bytes: u64,
    /// `S3DLIO_CHUNK_SIZE`, when set: every chunk this size.
    pub chunk_bytes: Option<u64>,
    /// `S3DLIO_RANGE_CONCURRENCY`, when set: this many chunks in flight per object.
    pub concurrency: Option<u32>,
    /// The CPUs the process may use, as s3dlio counts them (recorded in the plan).
    pub cores: u32,
}

impl ObjectFetch {
    /// The rules for a workload of `record_length` bytes on this machine, with s3dlio's
    /// environment variables when set. A variable that is set but not a positive number is
    /// an error naming it.
    pub fn for_record_length(record_length: u64) -> Result<ObjectFetch, String> {
        let var = |name: &str| -> Result<Option<u64>, String> {
            match std::env::var(name) {
                Ok(text) => match text.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(format!(
                        "{name}={text:?} is not a positive whole number; unset it or set one"
                    )),
                },
                Err(_) => Ok(None),
            }
        };
        let skip_head = std::env::var("S3DLIO_SKIP_HEAD")
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
        Ok(ObjectFetch {
            head: record_length >= 16 * MIB && !skip_head,
            range_threshold_bytes: var("S3DLIO_RANGE_THRESHOLD_MB")?.unwrap_or(32) * MIB,
            chunk_bytes: var("S3DLIO_CHUNK_SIZE")?,
            concurrency: var("S3DLIO_RANGE_CONCURRENCY")?.map(|n| n.min(1024) as u32),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        })
    }

    /// Whether an object of `size` bytes is fetched as ranged chunks.
    pub fn splits(&self, size: u64) -> bool {
        self.head && size >= self.range_threshold_bytes
    }

    /// The chunk size for an object of `size` bytes (s3dlio's `get_optimal_chunk_size`).
    pub fn chunk_bytes_for(&self, size: u64) -> u64 {
        self.chunk_bytes.unwrap_or(if size < 16 * MIB {
            MIB
        } else if size < 256 * MIB {
            4 * MIB
        } else {
            8 * MIB
        })
    }

    /// Ranged GETs in flight per object of `size` bytes (`get_optimal_concurrency`).
    pub fn concurrency_for(&self, size: u64) -> u32 {
        self.concurrency.unwrap_or(if size < 32 * MIB {
            (self.cores / 2).max(2)
        } else if size < 512 * MIB {
            self.cores.max(4)
        } else {
            (2 * self.cores).max(8)
        })
    }

    /// How many requests after the HEAD fetch an object of `size` bytes: its ranged chunks,
    /// or one GET of the whole object when it is not split.
    pub fn ranges(&self, size: u64) -> u64 {
        if self.splits(size) {
            size.div_ceil(self.chunk_bytes_for(size).max(1))
        } else {
            1
        }
    }

    /// The ranges of an object of `size` bytes, in order: `(offset, length)`; one (the whole
    /// object) when it is not split.
    pub fn chunks(&self, size: u64) -> Vec<(u64, u64)> {
        if !self.splits(size) {
            return vec![(0, size)];
        }
        let chunk = self.chunk_bytes_for(size).max(1);
        (0..size.div_ceil(chunk))
            .map(|i| (i * chunk, chunk.min(size - i * chunk)))
            .collect()
    }

    /// The most requests any object of `sizes` keeps in flight: a mid-size object can need
    /// more than the largest (255 MiB in 4 MiB chunks with 48 cores: 48; 260 MiB in 8 MiB
    /// chunks: 33).
    pub fn most_in_flight_of(&self, sizes: impl IntoIterator<Item = u64>) -> u32 {
        sizes
            .into_iter()
            .map(|s| self.most_in_flight(s))
            .max()
            .unwrap_or(1)
    }

    /// The most requests one object keeps in flight (1 when it is not split).
    pub fn most_in_flight(&self, size: u64) -> u32 {
        if self.splits(size) {
            let chunks = size.div_ceil(self.chunk_bytes_for(size).max(1));
            self.concurrency_for(size)
                .min(u32::try_from(chunks).unwrap_or(u32::MAX))
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(head: bool, cores: u32) -> ObjectFetch {
        ObjectFetch {
            head,
            range_threshold_bytes: 32 * MIB,
            chunk_bytes: None,
            concurrency: None,
            cores,
        }
    }

    #[test]
    fn s3dlios_chunks_and_concurrency_follow_the_object_size() {
        let f = fetch(true, 16);
        // Below the threshold: one whole GET.
        assert_eq!(f.chunks(31 * MIB), [(0, 31 * MIB)]);
        assert_eq!(f.most_in_flight(31 * MIB), 1);
        // A 147 MB unet3d object: 35 chunks of 4 MiB and a short one, 16 in flight.
        let size = 146_600_628;
        let chunks = f.chunks(size);
        assert_eq!(chunks.len(), 35);
        assert!(chunks[..34].iter().all(|&(_, len)| len == 4 * MIB));
        assert_eq!(chunks.iter().map(|c| c.1).sum::<u64>(), size);
        assert_eq!(chunks[34], (34 * 4 * MIB, size - 34 * 4 * MIB));
        assert_eq!(f.most_in_flight(size), 16);
        // 382 MB: 8 MiB chunks; 600 MiB: max(8, 2 · cores).
        assert_eq!(f.chunks(382_000_000).len(), 46);
        assert_eq!(f.concurrency_for(600 * MIB), 32);
        // Two cores: max(4, 2) = 4.
        assert_eq!(fetch(true, 2).concurrency_for(size), 4);
        // Without the HEAD s3dlio never splits.
        assert_eq!(fetch(false, 16).chunks(size), [(0, size)]);
    }

    #[test]
    fn the_connections_an_object_slot_needs_are_the_most_any_object_needs() {
        // 48 cores: a 250 MiB object keeps 48 of its 63 chunks of 4 MiB in flight, a larger
        // 260 MiB one only its 33 chunks of 8 MiB.
        let f = fetch(true, 48);
        assert_eq!(f.most_in_flight(250 * MIB), 48);
        assert_eq!(f.most_in_flight(260 * MIB), 33);
        assert_eq!(f.most_in_flight_of([260 * MIB, 250 * MIB, MIB]), 48);
        assert_eq!(f.most_in_flight_of([]), 1);
        // The count without building the chunks agrees with them.
        for size in [32 * MIB, 146_600_628, 382_000_000, 600 * MIB + 1] {
            let chunks = f.chunks(size).len() as u32;
            assert_eq!(f.most_in_flight(size), f.concurrency_for(size).min(chunks));
        }
    }

    #[test]
    fn dlio_turns_the_head_on_from_16_mib_records() {
        assert!(ObjectFetch::for_record_length(146_600_628).unwrap().head);
        assert!(!ObjectFetch::for_record_length(322_957).unwrap().head);
    }
}
