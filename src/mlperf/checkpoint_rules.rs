//! MLPerf Storage's checkpointing rules (Rules.md 4.x, 2.1.23; the checkpointing README), each
//! checked as a [`Rule`] line from the figures of one run: the 10 saves then 10 restores (one
//! run, or the split form's read run starting within 30 s of the write run's end), the cache
//! rule, the accelerator-memory rule and the processes per host.
//!
//! Pure: the caller gives the numbers (its settings, its plan, the machine's memory).

use super::{Rule, Verdict};

/// Checkpoints each phase must hold (write 10, then read 10).
pub const CHECKPOINTS: u32 = 10;
/// The split form: the read run must start at most this long after the write run's end.
pub const SPLIT_GAP_S: f64 = 30.0;
/// The cache rule: data written per client below this multiple of its memory must have the
/// client's caches cleared between the write and the read.
pub const CACHE_MULTIPLE: u64 = 3;
/// CLOSED: more than this many processes per host.
pub const MIN_PROCESSES_PER_HOST_EXCLUSIVE: u32 = 4;
/// CLOSED's process counts.
pub const CLOSED_PROCESSES: [u32; 4] = [8, 64, 512, 1024];
/// B200's accelerator memory (180 GB), the rules' default accelerator.
pub const B200_MEMORY_BYTES: u64 = 180_000_000_000;

/// What one checkpoint run did, in the figures the rules are stated in.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFacts {
    /// `checkpoint.num_checkpoints_write` and `_read` of this run.
    pub writes: u32,
    pub reads: u32,
    /// The split form's read run: seconds from the write run's end to this run's start
    /// (`--after`), when known.
    pub after_write_run_s: Option<f64>,
    /// Processes (accelerators) of the run, and the hosts they ran on.
    pub processes: u32,
    pub hosts: u32,
    /// The most bytes one host writes per checkpoint.
    pub bytes_per_checkpoint_per_host: u64,
    /// One client host's memory (MemTotal), when known.
    pub host_memory_bytes: Option<u64>,
    /// Bytes of one whole checkpoint (all ranks).
    pub checkpoint_bytes: u64,
    /// One accelerator's memory.
    pub accelerator_memory_bytes: u64,
    /// The model's name (`model.name`).
    pub model: String,
    /// How the restores read: S3 GETs or `O_DIRECT` into the client's own buffers (no page
    /// cache holds what was written), or through the client's page cache (`--direct off`).
    pub restores_cached: bool,
}

/// MLPerf Storage's checkpointing models.
pub const MODELS: [&str; 4] = ["llama3_8b", "llama3_70b", "llama3_405b", "llama3_1t"];

fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// One line per rule, in the rules' order.
pub fn rules(f: &CheckpointFacts) -> Vec<Rule> {
    vec![
        sequence(f),
        cache(f),
        accelerator_memory(f),
        per_host(f),
        model(f),
    ]
}

/// Whether the model is one MLPerf scores: llama3_demo and llama3_tiny are not.
fn model(f: &CheckpointFacts) -> Rule {
    let name = "one of MLPerf's models";
    if MODELS.contains(&f.model.as_str()) {
        return Rule::new(name, Verdict::Pass, f.model.clone());
    }
    Rule::new(
        name,
        Verdict::Fail,
        format!(
            "{} is not one of MLPerf's checkpointing models ({}): a demonstration of the \
             workflow, not a result to publish",
            f.model,
            MODELS.join(", ")
        ),
    )
}

fn sequence(f: &CheckpointFacts) -> Rule {
    let name = "10 writes then 10 reads";
    let fix = format!(
        "set checkpoint.num_checkpoints_write={CHECKPOINTS} checkpoint.num_checkpoints_read={CHECKPOINTS}"
    );
    match (f.writes, f.reads) {
        (CHECKPOINTS, CHECKPOINTS) => {
            Rule::new(name, Verdict::Pass, "10 saves then 10 restores in one run")
        }
        (CHECKPOINTS, 0) => Rule::new(
            name,
            Verdict::Unknown,
            "the write run of the split form: the read run (checkpoint.num_checkpoints_write=0 \
             checkpoint.num_checkpoints_read=10 --after this run's --output) must start within \
             30 s of this run's end",
        ),
        (0, CHECKPOINTS) => match f.after_write_run_s {
            Some(gap) => Rule::new(
                name,
                Verdict::of(gap <= SPLIT_GAP_S),
                format!(
                    "the read run of the split form started {gap:.1} s after the write run's end \
                     (at most {SPLIT_GAP_S:.0} s); the write run's own count is not checked here"
                ),
            ),
            None => Rule::new(
                name,
                Verdict::Unknown,
                "the read run of the split form without --after: the gap since the write run's \
                 end (at most 30 s) is not known; pass --after WRITE_RUN_OUTPUT",
            ),
        },
        // A run of the split form keeps its half: the write run writes 10, the read run
        // reads 10.
        (w, 0) => Rule::new(
            name,
            Verdict::Fail,
            format!(
                "{w} saves and 0 restores; for the split form's write run set \
                 checkpoint.num_checkpoints_write={CHECKPOINTS} (its read run then reads \
                 {CHECKPOINTS}), or {fix} for one run"
            ),
        ),
        (0, r) => Rule::new(
            name,
            Verdict::Fail,
            format!(
                "0 saves and {r} restores; for the split form's read run set \
                 checkpoint.num_checkpoints_read={CHECKPOINTS} (after a write run of \
                 {CHECKPOINTS}), or {fix} for one run"
            ),
        ),
        (w, r) => Rule::new(
            name,
            Verdict::Fail,
            format!("{w} saves and {r} restores; {fix}"),
        ),
    }
}

fn cache(f: &CheckpointFacts) -> Rule {
    let name = "cache (data per client vs 3 × its memory)";
    let checkpoints = f.writes.max(f.reads);
    let written = f
        .bytes_per_checkpoint_per_host
        .saturating_mul(u64::from(checkpoints));
    let Some(memory) = f.host_memory_bytes else {
        return Rule::new(
            name,
            Verdict::Unknown,
            format!(
                "{:.2} GiB per client; its memory is not known",
                gib(written)
            ),
        );
    };
    let bound = memory.saturating_mul(CACHE_MULTIPLE);
    let detail = if written >= bound {
        format!(
            "{:.2} GiB written per client ({checkpoints} checkpoints) ≥ 3 × {:.2} GiB of memory: \
             no cache clearing required",
            gib(written),
            gib(memory)
        )
    } else if f.restores_cached {
        return Rule::new(
            name,
            Verdict::Unknown,
            format!(
                "{:.2} GiB written per client ({checkpoints} checkpoints) < 3 × {:.2} GiB of \
                 memory: the rules require the client's caches cleared between the write and \
                 the read, and these restores read through the page cache (--direct off; \
                 DLIO's DONTNEED after each chunk drops only clean pages): write and read in \
                 two runs with --drop-caches on the read, or run with --direct on",
                gib(written),
                gib(memory)
            ),
        );
    } else {
        format!(
            "{:.2} GiB written per client ({checkpoints} checkpoints) < 3 × {:.2} GiB of memory: \
             the rules require the client's caches cleared between the write and the read; \
             ringload restores with S3 GETs or O_DIRECT reads into its own buffers, so no client \
             page cache holds the objects (a cache inside the store is the store's)",
            gib(written),
            gib(memory)
        )
    };
    Rule::new(name, Verdict::Pass, detail)
}

fn accelerator_memory(f: &CheckpointFacts) -> Rule {
    let total = f
        .accelerator_memory_bytes
        .saturating_mul(u64::from(f.processes));
    Rule::new(
        "accelerator memory × count ≥ checkpoint",
        Verdict::of(total >= f.checkpoint_bytes),
        format!(
            "{} × {:.0} GB = {:.1} GB {} the checkpoint's {:.1} GB ({:.2} GiB)",
            f.processes,
            gb(f.accelerator_memory_bytes),
            gb(total),
            if total >= f.checkpoint_bytes {
                "≥"
            } else {
                "<"
            },
            gb(f.checkpoint_bytes),
            gib(f.checkpoint_bytes)
        ),
    )
}

fn per_host(f: &CheckpointFacts) -> Rule {
    let hosts = f.hosts.max(1);
    // The fullest host's count: mpirun fills hosts in contiguous blocks.
    let most = f.processes.div_ceil(hosts);
    let fewest = f.processes / hosts;
    let closed = if CLOSED_PROCESSES.contains(&f.processes) {
        "one of CLOSED's counts"
    } else {
        "not one of CLOSED's counts (8, 64, 512, 1024)"
    };
    Rule::new(
        "more than 4 processes per host",
        Verdict::of(fewest > MIN_PROCESSES_PER_HOST_EXCLUSIVE),
        format!(
            "{} process{} on {hosts} host{}: {}{} per host; {} processes is {closed}",
            f.processes,
            if f.processes == 1 { "" } else { "es" },
            if hosts == 1 { "" } else { "s" },
            fewest,
            if most == fewest {
                String::new()
            } else {
                format!(" to {most}")
            },
            f.processes
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> CheckpointFacts {
        // llama3_8b at CLOSED's 8 processes on one host of 512 GiB: 112.4 GB per checkpoint.
        CheckpointFacts {
            writes: 10,
            reads: 10,
            after_write_run_s: None,
            processes: 8,
            hosts: 1,
            bytes_per_checkpoint_per_host: 112_424_017_920,
            host_memory_bytes: Some(512 << 30),
            checkpoint_bytes: 112_424_017_920,
            accelerator_memory_bytes: B200_MEMORY_BYTES,
            model: "llama3_8b".into(),
            restores_cached: false,
        }
    }

    fn verdicts(f: &CheckpointFacts) -> Vec<Verdict> {
        rules(f).iter().map(|r| r.verdict).collect()
    }

    #[test]
    fn llama3_8b_at_closed_counts_passes_every_rule() {
        let r = rules(&facts());
        assert!(super::super::none_failed(&r), "{r:?}");
        assert_eq!(verdicts(&facts()), vec![Verdict::Pass; 5]);
        // 10 × 104.70 GiB = 1047 GiB < 1536 GiB: clearing is required, and said.
        assert!(r[1].detail.contains("< 3 × 512.00 GiB"), "{}", r[1]);
        assert!(r[2].detail.contains("8 × 180 GB = 1440.0 GB ≥"), "{}", r[2]);
    }

    #[test]
    fn each_rule_fails_on_its_own_figure() {
        let f = CheckpointFacts {
            writes: 2,
            reads: 2,
            ..facts()
        };
        assert_eq!(verdicts(&f)[0], Verdict::Fail);
        let f = CheckpointFacts {
            processes: 4,
            ..facts()
        };
        assert_eq!(verdicts(&f)[3], Verdict::Fail);
        // 8 × 1 GB < 112 GB.
        let f = CheckpointFacts {
            accelerator_memory_bytes: 1_000_000_000,
            ..facts()
        };
        assert_eq!(verdicts(&f)[2], Verdict::Fail);
        // 16 processes on 4 hosts: 4 each, not more than 4.
        let f = CheckpointFacts {
            processes: 16,
            hosts: 4,
            ..facts()
        };
        assert_eq!(verdicts(&f)[3], Verdict::Fail);
    }

    #[test]
    fn a_model_mlperf_does_not_score_is_named() {
        assert_eq!(verdicts(&facts())[4], Verdict::Pass);
        let demo = CheckpointFacts {
            model: "llama3_demo".into(),
            ..facts()
        };
        let rule = &rules(&demo)[4];
        assert_eq!(rule.verdict, Verdict::Fail);
        assert!(
            rule.detail
                .starts_with("llama3_demo is not one of MLPerf's checkpointing models"),
            "{}",
            rule.detail
        );
    }

    #[test]
    fn the_split_form_is_judged_by_its_gap() {
        let read = |gap| CheckpointFacts {
            writes: 0,
            after_write_run_s: gap,
            ..facts()
        };
        assert_eq!(verdicts(&read(Some(12.0)))[0], Verdict::Pass);
        assert_eq!(verdicts(&read(Some(31.0)))[0], Verdict::Fail);
        assert_eq!(verdicts(&read(None))[0], Verdict::Unknown);
        let write = CheckpointFacts {
            reads: 0,
            ..facts()
        };
        assert_eq!(verdicts(&write)[0], Verdict::Unknown);
        // A short run of either half is told to keep its half, not to merge the two.
        let short_write = CheckpointFacts {
            writes: 2,
            reads: 0,
            ..facts()
        };
        let detail = &rules(&short_write)[0].detail;
        assert!(
            detail
                .contains("for the split form's write run set checkpoint.num_checkpoints_write=10"),
            "{detail}"
        );
        let short_read = CheckpointFacts {
            writes: 0,
            reads: 3,
            ..facts()
        };
        let detail = &rules(&short_read)[0].detail;
        assert!(
            detail.contains("for the split form's read run set checkpoint.num_checkpoints_read=10"),
            "{detail}"
        );
    }

    #[test]
    fn the_cache_rule_states_its_direction() {
        let big = CheckpointFacts {
            host_memory_bytes: Some(16 << 30),
            ..facts()
        };
        assert!(rules(&big)[1].detail.contains("no cache clearing required"));
        let unknown = CheckpointFacts {
            host_memory_bytes: None,
            ..facts()
        };
        assert_eq!(verdicts(&unknown)[1], Verdict::Unknown);
        // Below 3× memory: own buffers pass, a page cache the restores read through does not
        // say (the caches must be cleared between the runs).
        assert_eq!(verdicts(&facts())[1], Verdict::Pass);
        let cached = CheckpointFacts {
            restores_cached: true,
            ..facts()
        };
        assert_eq!(verdicts(&cached)[1], Verdict::Unknown);
        assert!(rules(&cached)[1].detail.contains("--drop-caches"));
    }
}
