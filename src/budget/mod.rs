//! A run's memory, computed and checked before anything is allocated, against the limits
//! [`limits`] probes once (MemAvailable, the cgroup's room, RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK).
//!
//! The budget: a run needs `NP × RT × prefetch` buffers of the largest GET (rounded up to a
//! page) — or, for whole objects of spread sizes that would not fit so, two size classes per
//! reader ([`SmallBuffers`]: as many large buffers as a step needs, the rest smaller) — plus
//! [`CONNECTION_OVERHEAD_BYTES`] per connection (one per buffer), [`PROCESS_OVERHEAD_BYTES`]
//! and an in-process server's resident data. [`check`] compares that with MemAvailable, the
//! cgroup's room, RLIMIT_MEMLOCK (the pool only, without CAP_IPC_LOCK) and `--memory-budget`,
//! and over any names the largest `read_threads` and `prefetch` that fit. It is pure (the
//! limits are probed before), so it is tested with made-up machines.

pub mod limits;

use serde::Serialize;

pub use self::limits::{CgroupMemory, MemoryLimits, probe};
use crate::units::bytes;

/// Buffers are sized in whole pages.
pub const BUFFER_ALIGN_BYTES: u64 = 4096;

/// With TLS, the io_uring engine receives a body's ciphertext into its buffer and decrypts it
/// there, so a buffer also holds one whole record beyond the plaintext: a TLS 1.3 record's
/// largest size on the wire (2^14 bytes, its content type, padding and tag up to 256, and the
/// 5-byte header).
pub const TLS_RECORD_SLACK_BYTES: u64 = 5 + (1 << 14) + 256;

/// Over TLS, a request body is generated into its buffer laid out record by record and sealed
/// there: each 2^14 bytes take this much more room (the widest record's header, explicit
/// nonce and tag, TLS 1.2 AES-GCM's 29 bytes).
pub const TLS_SEAL_BYTES_PER_RECORD: u64 = 5 + 8 + 16;

/// The room a buffer keeps after a body sent aws-chunked, for its tail: CRLF, a signed final
/// chunk, the longest checksum trailer (SHA-256's), its signature and the closing CRLF come to
/// 246 bytes (`s3::chunked`).
pub const CHUNKED_TAIL_BYTES: u64 = 256;

/// One checkpoint connection's buffer: the larger of a part (with `chunked`, room for its
/// tail, [`CHUNKED_TAIL_BYTES`]), a read range and the largest single PUT, in whole pages;
/// over TLS, a body's records sealed in place and a range's
/// record beyond it. `checkpoint::ObjectIoShape::buffer_bytes` and the budget both use it.
pub fn object_buffer_bytes(
    part: u64,
    range: u64,
    single_put: u64,
    tls: bool,
    chunked: bool,
) -> u64 {
    let body = part.max(single_put) + if chunked { CHUNKED_TAIL_BYTES } else { 0 };
    let (body, range) = if tls {
        let sealed = |n: u64| n + n.div_ceil(1 << 14) * TLS_SEAL_BYTES_PER_RECORD;
        (sealed(body), range + TLS_RECORD_SLACK_BYTES)
    } else {
        (body, range)
    };
    round_up(body.max(range).max(1), BUFFER_ALIGN_BYTES)
}

/// Kernel and user memory per connection besides its body buffer: the default TCP receive and
/// send buffers (128 KiB and 16 KiB on Linux), a head buffer, the io_uring engine's 64 KiB TLS
/// staging area for `https://`, and slack.
pub const CONNECTION_OVERHEAD_BYTES: u64 = 256 << 10;

/// The process's fixed cost: code, thread stacks, footers, histograms, the in-process server.
pub const PROCESS_OVERHEAD_BYTES: u64 = 64 << 20;

/// A limit the budget was checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitCheck {
    pub name: String,
    pub limit_bytes: u64,
    /// What is compared with the limit: `total` or `pool` (the locked buffers only).
    pub applies_to: &'static str,
    pub fits: bool,
}

/// The smaller of a reader's two buffer size classes. Whole objects of spread sizes (unet3d:
/// 21–382 MB) would otherwise pin `prefetch` buffers of the largest object per reader. With
/// classes a reader has `prefetch − per_reader` buffers of the largest GET (at least the GETs
/// one step needs of it, so a step can always be served) and `per_reader` of `get_bytes`; a GET
/// larger than `get_bytes` waits for a large buffer, so the reader prefetches large objects
/// less deep and the pool's size is a bound it keeps, whatever the order of sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SmallBuffers {
    /// Small buffers per reader.
    pub per_reader: u32,
    /// The largest GET a small buffer holds.
    pub get_bytes: u64,
    /// One small buffer as registered: `get_bytes` (and a TLS record) rounded up to a page.
    pub buffer_bytes: u64,
}

/// The memory a run needs, computed before anything is allocated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryBudget {
    /// One buffer: the largest GET, rounded up to a page.
    pub buffer_bytes: u64,
    /// RT × prefetch.
    pub buffers_per_rank: u64,
    /// With size classes, how many of each reader's buffers are small, and their size; the
    /// others are `buffer_bytes`.
    pub small_buffers: Option<SmallBuffers>,
    /// NP × RT × prefetch × buffer_bytes (less what small buffers save): the registered,
    /// locked buffer pool.
    pub pool_bytes: u64,
    /// NP × RT × prefetch keep-alive connections.
    pub connections: u64,
    pub connection_bytes: u64,
    pub overhead_bytes: u64,
    /// An in-process server's resident data.
    pub server_bytes: u64,
    /// A training run's checkpoint buffers and connections, for its writing ranks
    /// (`workflow.checkpoint`: `checkpoint::training`); 0 without.
    pub checkpoint_bytes: u64,
    /// The catalog: what listing it held at its peak (a whole-object store's million keys).
    pub catalog_bytes: u64,
    /// What the run keeps per GET: the plan's lists, one epoch's requests in each window, a
    /// record per GET of every epoch, and the plan's copy of the catalog
    /// (`plan::resolve::plan_held_bytes`); 0 where it is not counted (checkpoints).
    pub plan_bytes: u64,
    pub total_bytes: u64,
    pub checks: Vec<LimitCheck>,
    /// The limit with the least room, if any was checked.
    pub binding: Option<String>,
}

/// The numbers that size a run's memory: `np × read_threads × prefetch` buffers of
/// `largest_get_bytes`, and an in-process server's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetShape {
    pub np: u32,
    pub read_threads: u32,
    pub prefetch: u32,
    pub largest_get_bytes: u64,
    pub server_bytes: u64,
    /// A training run's checkpoint buffers ([`MemoryBudget::checkpoint_bytes`]).
    pub checkpoint_bytes: u64,
    /// The catalog's memory at its peak ([`MemoryBudget::catalog_bytes`]).
    pub catalog_bytes: u64,
    /// What the run keeps per GET ([`MemoryBudget::plan_bytes`]).
    pub plan_bytes: u64,
    /// Buffers hold a TLS record beyond the GET ([`TLS_RECORD_SLACK_BYTES`]).
    pub tls: bool,
    /// Whole objects dealt over readers: `(batch, samples per object)`. A reader then holds
    /// ⌈⌈batch ÷ RT⌉ ÷ spf⌉ GETs per step, so a suggested read_threads or prefetch must leave
    /// prefetch at least that (`None`: no such rule, Parquet).
    pub batch_hold: Option<(u64, u64)>,
    /// Size classes: `(small buffers per reader, the largest GET they hold)`; `None`: every
    /// buffer holds the largest GET.
    pub small_class: Option<(u32, u64)>,
    /// Connections a buffer's GET may use at once (1; s3dlio's ranged chunks of one object
    /// use more).
    pub slot_connections: u32,
}

impl BudgetShape {
    /// Whether a reader with `prefetch` GETs can hold its share of a batch at `read_threads`.
    fn holds_batch(&self, read_threads: u32, prefetch: u32) -> bool {
        self.batch_hold.is_none_or(|(batch, spf)| {
            let per_reader = batch.div_ceil(u64::from(read_threads.max(1)));
            u64::from(prefetch) >= per_reader.div_ceil(spf.max(1))
        })
    }
}

/// A run's memory is over a limit; the message names the budget, the limit that binds and the
/// largest `read_threads` and `prefetch` that would fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OverBudget(pub String);

impl OverBudget {
    /// The refusal, adding that `--coalesce-rgs 1` fits: GETs of `single_get_bytes` (one row
    /// group) instead of `get_bytes` (`coalesce_rgs` of them). The study this reproduces read
    /// one row group per GET; ringload's built-in default coalesces more.
    pub fn with_single_row_group_gets(
        self,
        coalesce_rgs: u32,
        get_bytes: u64,
        single_get_bytes: u64,
    ) -> OverBudget {
        OverBudget(format!(
            "{}; or --coalesce-rgs 1, the study's setting (one row group per GET), fits: GETs \
             of {} instead of {} at coalesce_rgs {coalesce_rgs}",
            self.0,
            bytes(single_get_bytes),
            bytes(get_bytes),
        ))
    }
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// [`budget_for`] of `shape` at `np` ranks, `rt` read threads and prefetch `pf`.
fn budget_of(
    shape: &BudgetShape,
    np: u32,
    rt: u32,
    pf: u32,
    small_class: Option<(u32, u64)>,
) -> MemoryBudget {
    // The checkpoint's share is counted with the server's, then named apart.
    let mut budget = budget_for(
        shape.largest_get_bytes,
        np,
        rt,
        pf,
        shape.server_bytes + shape.checkpoint_bytes,
        shape.catalog_bytes,
        shape.plan_bytes,
        shape.tls,
        small_class,
        shape.slot_connections,
    );
    budget.server_bytes = shape.server_bytes;
    budget.checkpoint_bytes = shape.checkpoint_bytes;
    budget
}

/// The memory of a run with `np × rt × prefetch` buffers of the largest GET (and a TLS record,
/// with `tls`).
#[allow(clippy::too_many_arguments)]
fn budget_for(
    largest_get_bytes: u64,
    np: u32,
    rt: u32,
    prefetch: u32,
    server_bytes: u64,
    catalog_bytes: u64,
    plan_bytes: u64,
    tls: bool,
    small_class: Option<(u32, u64)>,
    slot_connections: u32,
) -> MemoryBudget {
    let slack = if tls { TLS_RECORD_SLACK_BYTES } else { 0 };
    let buffer_bytes = round_up(largest_get_bytes + slack, BUFFER_ALIGN_BYTES);
    let buffers_per_rank = u64::from(rt) * u64::from(prefetch);
    let small_buffers = small_class
        .filter(|&(n, get_bytes)| n > 0 && n < prefetch && get_bytes < largest_get_bytes)
        .map(|(per_reader, get_bytes)| SmallBuffers {
            per_reader,
            get_bytes,
            buffer_bytes: round_up(get_bytes + slack, BUFFER_ALIGN_BYTES),
        });
    let reader_bytes = match small_buffers {
        Some(s) => {
            u64::from(prefetch - s.per_reader) * buffer_bytes
                + u64::from(s.per_reader) * s.buffer_bytes
        }
        None => u64::from(prefetch) * buffer_bytes,
    };
    let pool_bytes = u64::from(np) * u64::from(rt) * reader_bytes;
    let connections = u64::from(np) * buffers_per_rank * u64::from(slot_connections.max(1));
    let connection_bytes = connections * CONNECTION_OVERHEAD_BYTES;
    MemoryBudget {
        buffer_bytes,
        buffers_per_rank,
        small_buffers,
        pool_bytes,
        connections,
        connection_bytes,
        overhead_bytes: PROCESS_OVERHEAD_BYTES,
        server_bytes,
        checkpoint_bytes: 0,
        catalog_bytes,
        plan_bytes,
        total_bytes: pool_bytes
            + connection_bytes
            + PROCESS_OVERHEAD_BYTES
            + server_bytes
            + catalog_bytes
            + plan_bytes,
        checks: Vec::new(),
        binding: None,
    }
}

/// The smallest shape of `shape`'s run at NP 1: `(read_threads, prefetch)` with the least
/// memory that still holds a reader's share of a batch.
fn smallest_shape(shape: &BudgetShape) -> (u32, u32) {
    (1..=shape.read_threads.max(1))
        .filter_map(|rt| {
            let pf = (1..=1024).find(|&pf| shape.holds_batch(rt, pf))?;
            Some((rt, pf))
        })
        .min_by_key(|&(rt, pf)| u64::from(rt) * u64::from(pf))
        .unwrap_or((1, 1))
}

/// [`smallest_shape`] as flags.
fn smallest_shape_text(shape: &BudgetShape) -> String {
    let (rt, pf) = smallest_shape(shape);
    format!("--read-threads {rt} --prefetch {pf}")
}

/// The memory of [`smallest_shape`] at NP 1: what a limit must leave for any run of it.
fn smallest_fit_bytes(shape: &BudgetShape) -> u64 {
    let (rt, pf) = smallest_shape(shape);
    budget_of(shape, 1, rt, pf, None).total_bytes
}

/// The limits `budget` is compared with: `(name, bytes, applies to pool only)`.
fn limits_for(limits: &MemoryLimits, cap: Option<u64>) -> Vec<(String, u64, bool)> {
    let mut out = Vec::new();
    if let Some(cap) = cap {
        out.push(("--memory-budget".to_string(), cap, false));
    }
    if let Some(avail) = limits.mem_available_bytes {
        out.push(("MemAvailable".to_string(), avail, false));
    }
    if let Some(cg) = &limits.cgroup {
        out.push((
            format!("the cgroup v{} memory limit (room left)", cg.version),
            cg.available_bytes(),
            false,
        ));
    }
    if !limits.cap_ipc_lock
        && let Some(memlock) = limits.memlock_bytes
    {
        out.push((
            "RLIMIT_MEMLOCK (the pool is locked)".to_string(),
            memlock,
            true,
        ));
    }
    out
}

fn fits(budget: &MemoryBudget, checks: &[(String, u64, bool)]) -> bool {
    checks.iter().all(|(_, limit, pool_only)| {
        let need = if *pool_only {
            budget.pool_bytes
        } else {
            budget.total_bytes
        };
        need <= *limit
    })
}

/// The memory a run of `shape` needs, compared with every limit (and `cap`, the user's
/// `--memory-budget`). Over any, an error that names the budget, the limit that binds and the
/// largest read_threads and prefetch that would fit.
pub fn check(
    shape: &BudgetShape,
    limits: &MemoryLimits,
    cap: Option<u64>,
) -> Result<MemoryBudget, OverBudget> {
    let checks = limits_for(limits, cap);
    let budget = with_checks(
        budget_of(
            shape,
            shape.np,
            shape.read_threads,
            shape.prefetch,
            shape.small_class,
        ),
        &checks,
    );
    if fits(&budget, &checks) {
        return Ok(budget);
    }
    let over = budget
        .checks
        .iter()
        .find(|c| !c.fits)
        .cloned()
        .unwrap_or_else(|| budget.checks[0].clone());
    let try_fit = |rt: u32, pf: u32| {
        shape.holds_batch(rt, pf) && fits(&budget_of(shape, shape.np, rt, pf, None), &checks)
    };
    let best_rt = (1..shape.read_threads)
        .rev()
        .find(|&rt| try_fit(rt, shape.prefetch));
    let best_pf = (1..shape.prefetch)
        .rev()
        .find(|&pf| try_fit(shape.read_threads, pf));
    let suggestion = match (best_rt, best_pf) {
        (Some(rt), Some(pf)) => format!(
            "largest that fit: --read-threads {rt} (at --prefetch {}), or --prefetch {pf} (at --read-threads {})",
            shape.prefetch, shape.read_threads
        ),
        (Some(rt), None) => format!(
            "largest that fits: --read-threads {rt} (at --prefetch {}); no --prefetch fits at --read-threads {}",
            shape.prefetch, shape.read_threads
        ),
        (None, Some(pf)) => format!(
            "largest that fits: --prefetch {pf} (at --read-threads {}); no --read-threads fits at --prefetch {}",
            shape.read_threads, shape.prefetch
        ),
        // At NP 1 there is no lower --np: the smallest budget that would fit instead.
        (None, None) if shape.np == 1 && !try_fit(1, 1) && over.applies_to == "total" => format!(
            "even the smallest run (NP 1, {}) needs {}: give it at least that much \
             (--memory-budget, MemAvailable, the cgroup's room){}",
            smallest_shape_text(shape),
            bytes(smallest_fit_bytes(shape)),
            if shape.batch_hold.is_some() {
                ""
            } else {
                ", or fewer row groups per GET (--coalesce-rgs 1)"
            }
        ),
        (None, None) if shape.batch_hold.is_some() => {
            "no fewer --read-threads or --prefetch that still holds a reader's share of a batch \
             fits: lower --np"
                .to_string()
        }
        (None, None) => {
            if try_fit(1, 1) {
                "lower --read-threads and --prefetch together, or --np".to_string()
            } else {
                "even --read-threads 1 --prefetch 1 does not fit: lower --np or --coalesce-rgs"
                    .to_string()
            }
        }
    };
    let pool = pool_formula(shape.np, shape.read_threads, shape.prefetch, &budget);
    Err(refusal(&budget, &over, &pool, &suggestion))
}

/// The numbers that size one host's memory in a checkpoint run: each of `ranks` holds, at
/// most, `parts_in_flight` parts of `part_bytes` while it writes, or `read_blocks` ranges of
/// `read_range_bytes` while it restores (never both at once), with a connection per part or
/// block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectBudgetShape {
    pub ranks: u32,
    pub part_bytes: u64,
    pub parts_in_flight: u64,
    /// The smallest part size the largest object allows (S3's 10,000 parts), for suggestions.
    pub min_part_bytes: u64,
    pub read_range_bytes: u64,
    pub read_blocks: u64,
    /// The largest object sent as one PUT (0 when none is): a buffer holds its body whole.
    pub single_put_bytes: u64,
    pub server_bytes: u64,
    /// Bodies and ranges go over TLS ([`object_buffer_bytes`]).
    pub tls: bool,
    /// Bodies go aws-chunked, their tails after them ([`object_buffer_bytes`]).
    pub chunked: bool,
}

impl ObjectBudgetShape {
    /// One connection's buffer: the larger of a part, a read range and the largest single
    /// PUT, rounded up to whole pages (as `checkpoint::ObjectIoShape::buffer_bytes`).
    fn buffer_bytes(&self) -> u64 {
        object_buffer_bytes(
            self.part_bytes,
            self.read_range_bytes,
            self.single_put_bytes,
            self.tls,
            self.chunked,
        )
    }

    /// One rank's buffers as the io_uring engine registers them: one per connection
    /// (max(parts in flight, read blocks)), each [`Self::buffer_bytes`]. The baseline holds at
    /// most as much (a heap buffer per part or range in flight).
    pub fn rank_buffer_bytes(&self) -> u64 {
        self.parts_in_flight.max(self.read_blocks).max(1) * self.buffer_bytes()
    }

    fn budget(&self) -> MemoryBudget {
        let buffers_per_rank = self.parts_in_flight.max(self.read_blocks).max(1);
        let pool_bytes = u64::from(self.ranks) * self.rank_buffer_bytes();
        let connections = u64::from(self.ranks) * buffers_per_rank;
        let connection_bytes = connections * CONNECTION_OVERHEAD_BYTES;
        MemoryBudget {
            buffer_bytes: self.buffer_bytes(),
            buffers_per_rank,
            small_buffers: None,
            pool_bytes,
            connections,
            connection_bytes,
            overhead_bytes: PROCESS_OVERHEAD_BYTES,
            server_bytes: self.server_bytes,
            checkpoint_bytes: 0,
            catalog_bytes: 0,
            plan_bytes: 0,
            total_bytes: pool_bytes + connection_bytes + PROCESS_OVERHEAD_BYTES + self.server_bytes,
            checks: Vec::new(),
            binding: None,
        }
    }
}

/// The memory of `shape` with each limit's check filled in, whether it fits or not.
pub fn object_budget(
    shape: &ObjectBudgetShape,
    limits: &MemoryLimits,
    cap: Option<u64>,
) -> MemoryBudget {
    with_checks(shape.budget(), &limits_for(limits, cap))
}

/// [`check`] for a checkpoint run: the memory of `shape` compared with every limit. In the
/// budget, `buffer_bytes` is the larger of a part and a range, `buffers_per_rank` the larger of
/// parts in flight and read blocks, and `pool_bytes` the ranks × the larger side. Over any
/// limit, the error names the budget, the limit and the largest part size, parts in flight,
/// read range and read blocks that would fit (each with the others as they are).
pub fn check_objects(
    shape: &ObjectBudgetShape,
    limits: &MemoryLimits,
    cap: Option<u64>,
) -> Result<MemoryBudget, OverBudget> {
    let checks = limits_for(limits, cap);
    let budget = with_checks(shape.budget(), &checks);
    if fits(&budget, &checks) {
        return Ok(budget);
    }
    let over = budget
        .checks
        .iter()
        .find(|c| !c.fits)
        .cloned()
        .unwrap_or_else(|| budget.checks[0].clone());
    let try_fit = |s: ObjectBudgetShape| fits(&s.budget(), &checks);
    const MIB: u64 = 1 << 20;
    let mut fixes = Vec::new();
    let part_floor = shape.min_part_bytes.max(5 * MIB).div_ceil(MIB);
    if let Some(mib) = (part_floor..shape.part_bytes.div_ceil(MIB))
        .rev()
        .find(|&mib| {
            try_fit(ObjectBudgetShape {
                part_bytes: mib * MIB,
                ..*shape
            })
        })
    {
        fixes.push(format!(
            "--part-size {mib}MiB (at --parts-in-flight {})",
            shape.parts_in_flight
        ));
    }
    if let Some(n) = (1..shape.parts_in_flight).rev().find(|&n| {
        try_fit(ObjectBudgetShape {
            parts_in_flight: n,
            ..*shape
        })
    }) {
        fixes.push(format!(
            "--parts-in-flight {n} (at --part-size {})",
            bytes(shape.part_bytes)
        ));
    }
    if let Some(mib) = (1..shape.read_range_bytes.div_ceil(MIB))
        .rev()
        .find(|&mib| {
            try_fit(ObjectBudgetShape {
                read_range_bytes: mib * MIB,
                ..*shape
            })
        })
    {
        fixes.push(format!(
            "--read-range {mib}MiB (at --read-blocks {})",
            shape.read_blocks
        ));
    }
    if let Some(n) = (1..shape.read_blocks).rev().find(|&n| {
        try_fit(ObjectBudgetShape {
            read_blocks: n,
            ..*shape
        })
    }) {
        fixes.push(format!(
            "--read-blocks {n} (at --read-range {})",
            bytes(shape.read_range_bytes)
        ));
    }
    let suggestion = if fixes.is_empty() {
        format!(
            "no single one of --part-size, --parts-in-flight, --read-range, --read-blocks fits; lower several, or the ranks on this host ({})",
            shape.ranks
        )
    } else {
        format!("largest that fit: {}", fixes.join(", or "))
    };
    let single_put = match shape.single_put_bytes {
        0 => String::new(),
        b => format!(", a single PUT's {}", bytes(b)),
    };
    let pool = format!(
        "{} ranks × max({} parts, {} read blocks) × max({}, {}{single_put})",
        shape.ranks,
        shape.parts_in_flight,
        shape.read_blocks,
        bytes(shape.part_bytes),
        bytes(shape.read_range_bytes)
    );
    Err(refusal(&budget, &over, &pool, &suggestion))
}

/// The one line of a refusal: what is over (`pool` explains the buffer pool's figure), the
/// limit it exceeds, and `suggestion`. Every figure printed adds up to the one it explains (to
/// its rounding).
fn refusal(budget: &MemoryBudget, over: &LimitCheck, pool: &str, suggestion: &str) -> OverBudget {
    let (need, fix) = if over.applies_to == "pool" {
        (
            format!("buffer pool {} ({pool})", bytes(budget.pool_bytes)),
            " (raise it with `ulimit -l unlimited` or grant CAP_IPC_LOCK)",
        )
    } else {
        (
            format!(
                "memory budget {} ({})",
                bytes(budget.total_bytes),
                parts(budget, pool)
            ),
            "",
        )
    };
    OverBudget(format!(
        "{need} exceeds {} {}{fix}; {suggestion}",
        over.name,
        bytes(over.limit_bytes),
    ))
}

/// `budget` with each limit's check and the binding one (the least room left) filled in.
fn with_checks(mut budget: MemoryBudget, checks: &[(String, u64, bool)]) -> MemoryBudget {
    budget.checks = checks
        .iter()
        .map(|(name, limit, pool_only)| {
            let need = if *pool_only {
                budget.pool_bytes
            } else {
                budget.total_bytes
            };
            LimitCheck {
                name: name.clone(),
                limit_bytes: *limit,
                applies_to: if *pool_only { "pool" } else { "total" },
                fits: need <= *limit,
            }
        })
        .collect();
    budget.binding = budget
        .checks
        .iter()
        .min_by_key(|c| {
            let need = if c.applies_to == "pool" {
                budget.pool_bytes
            } else {
                budget.total_bytes
            };
            i128::from(c.limit_bytes) - i128::from(need)
        })
        .map(|c| c.name.clone());
    budget
}

/// The parts of `budget`'s total, each with its figure: `pool` (how the buffers multiply up)
/// `= pool bytes, + connections + the process [+ the in-process server]`.
/// [`check`] for a loader whose window is a workload key (`key`, s3dlio's `prefetch_window`):
/// over a limit, the refusal names the largest window that fits (at least the GETs a step
/// needs of a reader), or says that none does.
pub fn check_window(
    shape: &BudgetShape,
    key: &str,
    limits: &MemoryLimits,
    cap: Option<u64>,
) -> Result<MemoryBudget, OverBudget> {
    let over = match check(shape, limits, cap) {
        Ok(budget) => return Ok(budget),
        Err(over) => over,
    };
    // What was over, without check's suggestions (they name --read-threads and --prefetch).
    let head = over
        .0
        .split_once("; ")
        .map_or(over.0.as_str(), |(head, _)| head);
    let floor = (1..=shape.prefetch)
        .find(|&w| shape.holds_batch(shape.read_threads, w))
        .unwrap_or(1);
    let fits = |w: u32| {
        check(
            &BudgetShape {
                prefetch: w,
                ..*shape
            },
            limits,
            cap,
        )
        .is_ok()
    };
    let largest = (floor..shape.prefetch).rev().find(|&w| fits(w));
    Err(OverBudget(match largest {
        Some(w) => format!(
            "{head}; a window of {} objects per reader does not fit: the largest that fits is \
             {key}={w}",
            shape.prefetch
        ),
        None => format!(
            "{head}; not even a window of {floor} objects per reader (what a step needs) fits: \
             lower --np or --read-threads"
        ),
    }))
}

/// When `shape` (every buffer the largest GET) is over a limit: the budget with two size
/// classes per reader ([`SmallBuffers`]), `hold` large buffers (the most GETs one step needs
/// of a reader) and the rest small, each small buffer as large as fits — at most one byte below
/// the largest GET, at least `smallest_get_bytes`. `None` when no reader has buffers to spare
/// beyond `hold`, or even the smallest GETs do not fit.
pub fn size_classes(
    shape: &BudgetShape,
    hold: u32,
    smallest_get_bytes: u64,
    limits: &MemoryLimits,
    cap: Option<u64>,
) -> Option<MemoryBudget> {
    if hold == 0 || hold >= shape.prefetch || smallest_get_bytes >= shape.largest_get_bytes {
        return None;
    }
    let with = |get_bytes: u64| {
        check(
            &BudgetShape {
                small_class: Some((shape.prefetch - hold, get_bytes)),
                ..*shape
            },
            limits,
            cap,
        )
        .ok()
    };
    // The pool grows with the small size: the largest that fits, by bisection.
    let (mut lo, mut hi) = (smallest_get_bytes, shape.largest_get_bytes - 1);
    let mut best = with(lo)?;
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        match with(mid) {
            Some(budget) => {
                best = budget;
                lo = mid;
            }
            None => hi = mid - 1,
        }
    }
    Some(best)
}

/// How the pool adds up: `NP n × RT r × prefetch p × B buffers`, or with size classes
/// `NP n × RT r × (l × B + s × b) buffers`.
pub fn pool_formula(np: u32, rt: u32, prefetch: u32, budget: &MemoryBudget) -> String {
    match budget.small_buffers {
        Some(small) => format!(
            "NP {np} × RT {rt} × ({} × {} + {} × {}) buffers",
            prefetch - small.per_reader,
            bytes(budget.buffer_bytes),
            small.per_reader,
            bytes(small.buffer_bytes),
        ),
        None => format!(
            "NP {np} × RT {rt} × prefetch {prefetch} × {} buffers",
            bytes(budget.buffer_bytes)
        ),
    }
}

fn parts(budget: &MemoryBudget, pool: &str) -> String {
    let mut text = format!(
        "{pool} = {}, + {} for {} connection{} + {} for the process",
        bytes(budget.pool_bytes),
        bytes(budget.connection_bytes),
        budget.connections,
        if budget.connections == 1 { "" } else { "s" },
        bytes(budget.overhead_bytes),
    );
    if budget.server_bytes > 0 {
        text.push_str(&format!(
            " + {} for the in-process server",
            bytes(budget.server_bytes)
        ));
    }
    if budget.checkpoint_bytes > 0 {
        text.push_str(&format!(
            " + {} for the checkpoints' buffers",
            bytes(budget.checkpoint_bytes)
        ));
    }
    if budget.catalog_bytes > 0 {
        text.push_str(&format!(
            " + {} for the catalog's listing",
            bytes(budget.catalog_bytes)
        ));
    }
    if budget.plan_bytes > 0 {
        text.push_str(&format!(
            " + {} for the plan's GETs and their records",
            bytes(budget.plan_bytes)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every figure of a refusal, in bytes, in the order printed (`12.34 MiB`, `256.00 KiB`).
    fn figures(line: &str) -> Vec<f64> {
        let words: Vec<&str> = line.split_whitespace().collect();
        words
            .windows(2)
            .filter_map(|w| {
                let value: f64 = w[0].trim_start_matches('(').parse().ok()?;
                let unit = w[1].trim_end_matches([',', ')', ';']);
                let scale = match unit {
                    "B" => 1.0,
                    "KiB" => 1024.0,
                    "MiB" => 1024.0 * 1024.0,
                    "GiB" => 1024.0 * 1024.0 * 1024.0,
                    _ => return None,
                };
                Some(value * scale)
            })
            .collect()
    }

    /// A refusal's figures add up: the total is the sum of the parts it prints (to their
    /// rounding), with an in-process server's share among them; the pool alone for the
    /// memlock limit.
    #[test]
    fn suggestions_for_whole_objects_still_hold_a_readers_share_of_a_batch() {
        const GIB: u64 = 1 << 30;
        // unet3d_b200 at NP 8: batch 7 over 4 readers, prefetch 4, its largest object.
        let shape = BudgetShape {
            np: 8,
            read_threads: 4,
            prefetch: 4,
            largest_get_bytes: 468_662_272,
            server_bytes: 0,
            checkpoint_bytes: 0,
            catalog_bytes: 0,
            plan_bytes: 0,
            tls: false,
            batch_hold: Some((7, 1)),
            small_class: None,
            slot_connections: 1,
        };
        let limits = MemoryLimits::unlimited();
        // RT 2 holds ⌈7 ÷ 2⌉ = 4 (fits prefetch 4), prefetch 2 holds ⌈7 ÷ 4⌉ = 2; prefetch 1 or
        // RT 1 would fit the memory but not the batch, so neither is offered.
        let line = check(&shape, &limits, Some(30 * GIB)).unwrap_err().0;
        assert!(
            line.contains("--read-threads 2 (at --prefetch 4)")
                && line.contains("--prefetch 2 (at --read-threads 4)"),
            "{line}"
        );
        let line = check(&shape, &limits, Some(21 * GIB)).unwrap_err().0;
        assert!(line.ends_with("fits: lower --np"), "{line}");
        assert!(!line.contains("--prefetch 1"), "{line}");
        // Without the rule (Parquet), the smaller values are offered as before.
        let parquet = BudgetShape {
            batch_hold: None,
            small_class: None,
            slot_connections: 1,
            ..shape
        };
        let line = check(&parquet, &limits, Some(21 * GIB)).unwrap_err().0;
        assert!(line.contains("--prefetch 1"), "{line}");
    }

    #[test]
    fn size_classes_take_the_largest_small_buffer_that_fits_or_none() {
        const MIB: u64 = 1 << 20;
        // unet3d_b200 at NP 4: 4 readers each holding 2 objects of a step, prefetch 4; 447 MiB
        // its largest object.
        let shape = BudgetShape {
            np: 4,
            read_threads: 4,
            prefetch: 4,
            largest_get_bytes: 468_662_272,
            server_bytes: 0,
            checkpoint_bytes: 0,
            catalog_bytes: 0,
            plan_bytes: 0,
            tls: false,
            batch_hold: Some((7, 1)),
            small_class: None,
            slot_connections: 1,
        };
        let limits = MemoryLimits::unlimited();
        let cap = Some(20 << 30);
        assert!(
            check(&shape, &limits, cap).is_err(),
            "uniform: 16 × 4 × 447 MiB"
        );
        let budget = size_classes(&shape, 2, 20 * MIB, &limits, cap).unwrap();
        let small = budget.small_buffers.unwrap();
        assert_eq!(small.per_reader, 2);
        // 16 readers × (2 × 447 MiB + 2 × S) + the rest ≤ 20 GiB, and S one page more would not.
        assert!(budget.total_bytes <= 20 << 30);
        let larger = BudgetShape {
            small_class: Some((2, small.buffer_bytes + 1)),
            ..shape
        };
        assert!(check(&larger, &limits, cap).is_err(), "{small:?}");
        assert_eq!(
            budget.pool_bytes,
            16 * (2 * budget.buffer_bytes + 2 * small.buffer_bytes)
        );
        assert!(
            pool_formula(4, 4, 4, &budget)
                .starts_with("NP 4 × RT 4 × (2 × 446.95 MiB + 2 × 190.55 MiB) buffers"),
            "{}",
            pool_formula(4, 4, 4, &budget)
        );
        // No buffers beyond a step's share, or not even the smallest objects fit: none.
        assert!(size_classes(&shape, 4, 20 * MIB, &limits, cap).is_none());
        assert!(size_classes(&shape, 2, 20 * MIB, &limits, Some(14 << 30)).is_none());
    }

    #[test]
    fn a_refusal_prints_parts_that_add_up_to_its_total() {
        const MIB: u64 = 1 << 20;
        // The case: flux_b200, NP 2, RT 2, prefetch 1, one row group per GET, with
        // the in-process server's share, against --memory-budget 470MiB.
        let shape = BudgetShape {
            np: 2,
            read_threads: 2,
            prefetch: 1,
            largest_get_bytes: 103_912_345,
            server_bytes: 147 * MIB + 12_345,
            checkpoint_bytes: 0,
            catalog_bytes: 0,
            plan_bytes: 0,
            tls: false,
            batch_hold: None,
            small_class: None,
            slot_connections: 1,
        };
        let limits = MemoryLimits::unlimited();
        let budget = budget_for(
            103_912_345,
            2,
            2,
            1,
            shape.server_bytes,
            0,
            0,
            false,
            None,
            1,
        );
        for (shape, cap, applies_to) in [
            (shape, 470 * MIB, "total"),
            (
                BudgetShape {
                    server_bytes: 0,
                    checkpoint_bytes: 0,
                    ..shape
                },
                300 * MIB,
                "total",
            ),
        ] {
            let line = check(&shape, &limits, Some(cap)).unwrap_err().0;
            // The figures up to the limit; the suggestion follows the first ';'.
            let f = figures(line.split(';').next().unwrap());
            // total, buffer, pool, then the parts after the pool, then the limit.
            let (total, parts, limit) = (f[0], &f[2..f.len() - 1], f[f.len() - 1]);
            let sum: f64 = parts.iter().sum();
            // Each printed figure is rounded to 0.005 of its unit (MiB here).
            let rounding = 0.006 * MIB as f64 * (parts.len() + 1) as f64;
            assert!(
                (sum - total).abs() <= rounding,
                "{applies_to}: {sum} vs {total}: {line}"
            );
            assert!((limit - cap as f64).abs() < 1.0, "{line}");
            if shape.server_bytes > 0 {
                assert!(line.contains("for the in-process server"), "{line}");
            }
            // NP × RT × prefetch × buffer is the pool printed.
            let buffers = f64::from(shape.np * shape.read_threads * shape.prefetch);
            assert!(
                (buffers * f[1] - f[2]).abs() <= 0.006 * MIB as f64 * buffers,
                "{line}"
            );
        }
        assert_eq!(
            budget.total_bytes,
            budget.pool_bytes
                + budget.connection_bytes
                + budget.overhead_bytes
                + budget.server_bytes
        );

        // Over RLIMIT_MEMLOCK only the pool counts, and only the pool is printed.
        let memlock = MemoryLimits {
            memlock_bytes: Some(300 * MIB),
            cap_ipc_lock: false,
            ..MemoryLimits::unlimited()
        };
        let line = check(&shape, &memlock, None).unwrap_err().0;
        let f = figures(&line);
        assert!(line.starts_with("buffer pool"), "{line}");
        assert!((f[0] - 4.0 * f[1]).abs() <= 0.03 * MIB as f64, "{line}");
        assert!(!line.contains("connections"), "{line}");
    }

    /// A checkpoint host of 8 ranks, 2 parts of 32 MiB or 2 blocks of 128 MiB each.
    fn object_shape() -> ObjectBudgetShape {
        ObjectBudgetShape {
            ranks: 8,
            part_bytes: 32 << 20,
            parts_in_flight: 2,
            min_part_bytes: 0,
            read_range_bytes: 128 << 20,
            read_blocks: 2,
            single_put_bytes: 0,
            server_bytes: 0,
            tls: false,
            chunked: false,
        }
    }

    #[test]
    fn checkpoint_budgets_count_a_buffer_per_connection_and_name_what_fits() {
        let limits = MemoryLimits {
            mem_available_bytes: Some(24 << 30),
            mem_total_bytes: Some(24 << 30),
            cgroup: None,
            memlock_bytes: Some(8 << 20),
            cap_ipc_lock: false,
            notes: Vec::new(),
        };
        // The read side binds: 8 × 2 × 128 MiB = 2 GiB, + 16 connections + the process.
        let shape = object_shape();
        let unlimited = object_budget(&shape, &MemoryLimits::unlimited(), None);
        assert_eq!(unlimited.pool_bytes, 2 << 30);
        assert_eq!(unlimited.connections, 16);
        assert_eq!(
            unlimited.total_bytes,
            (2 << 30) + 16 * CONNECTION_OVERHEAD_BYTES + PROCESS_OVERHEAD_BYTES
        );
        // The locked pool over RLIMIT_MEMLOCK: the refusal says how to raise it.
        let err = check_objects(&shape, &limits, None).unwrap_err().0;
        assert!(
            err.starts_with(
                "buffer pool 2.00 GiB (8 ranks × max(2 parts, 2 read blocks) × max(32.00 MiB, \
                 128.00 MiB)) exceeds RLIMIT_MEMLOCK (the pool is locked) 8.00 MiB (raise it"
            ),
            "{err}"
        );
        // Over a cap with the write side larger (one read block of 1 MiB; a buffer per
        // connection, each the larger of a part and a range): smaller parts or fewer in flight
        // fit.
        let write_heavy = ObjectBudgetShape {
            read_range_bytes: 1 << 20,
            read_blocks: 1,
            ..shape
        };
        // 400 MiB for buffers: 50 MiB per rank, two 25 MiB parts, or one of 32 MiB.
        let cap = (400 << 20) + 16 * CONNECTION_OVERHEAD_BYTES + PROCESS_OVERHEAD_BYTES;
        let err = check_objects(&write_heavy, &MemoryLimits::unlimited(), Some(cap))
            .unwrap_err()
            .0;
        assert!(
            err.ends_with(
                "largest that fit: --part-size 25MiB (at --parts-in-flight 2), or \
                 --parts-in-flight 1 (at --part-size 32.00 MiB)"
            ),
            "{err}"
        );
        // Nothing single fits: the line says to lower several, or the ranks.
        let err = check_objects(&shape, &MemoryLimits::unlimited(), Some(1 << 20))
            .unwrap_err()
            .0;
        assert!(err.ends_with("or the ranks on this host (8)"), "{err}");
    }
}
