//! `ringload plan` for people: the dataset, the run, the I/O, the memory budget, per-rank shares
//! and, for rank 0 (or every rank with `--full`), each reader's GETs.

use std::fmt::Write;

use crate::plan::{Plan, RowGroupGet};
use crate::units::{bytes, count, seconds};

/// How many GETs of each reader are listed without `--full`.
const GETS_SHOWN: usize = 3;

/// How many ranks are listed without `--full`.
const RANKS_SHOWN: usize = 16;

fn file_name(plan: &Plan, file: usize) -> &str {
    let key = &plan.catalog.files[file].key;
    key.rsplit('/').next().unwrap_or(key)
}

fn get_line(plan: &Plan, get: &RowGroupGet) -> String {
    let groups = if get.row_groups == 1 {
        format!("rg {}", get.first_row_group)
    } else {
        format!(
            "rg {}–{}",
            get.first_row_group,
            get.first_row_group + get.row_groups - 1
        )
    };
    format!(
        "{}  {groups:<8} {}  ({}, {} rows)",
        file_name(plan, get.file),
        plan.ranged(get).range_header(),
        bytes(get.len_bytes),
        get.rows
    )
}

/// A compact list of file indices: `0–62 (63)` when contiguous, else the count.
fn file_span(files: &[usize]) -> String {
    match (files.first(), files.last()) {
        (Some(first), Some(last)) if last - first + 1 == files.len() => {
            format!("{first}–{last} ({})", files.len())
        }
        (Some(_), Some(_)) => crate::units::counted(files.len() as u64, "file"),
        _ => "none".to_string(),
    }
}

/// Renders the plan. `full` lists every rank, reader and GET.
pub fn render(plan: &Plan, full: bool) -> String {
    let s = &plan.settings;
    let o = &plan.options;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "ringload plan: {} ({}), model {}",
        s.workload.name, s.workload.path, s.model
    );

    let _ = writeln!(w, "\nDataset");
    let _ = writeln!(
        w,
        "  files       {} × {} samples under {}",
        count(s.num_files as u64),
        count(s.samples_per_file),
        s.dataset.train_prefix
    );
    let _ = writeln!(w, "  layout      {}", plan.catalog.source);
    if let Some(first) = plan.catalog.files.first() {
        let groups = &first.row_groups;
        let same = plan
            .catalog
            .files
            .iter()
            .all(|f| f.size_bytes == first.size_bytes);
        let _ = writeln!(
            w,
            "  first file  {} B ({}){}; {} row groups, first at byte {} of {} B ({} rows); metadata {} B",
            count(first.size_bytes),
            bytes(first.size_bytes),
            if same { ", as every file" } else { "" },
            groups.len(),
            groups.first().map_or(0, |g| g.offset),
            count(groups.first().map_or(0, |g| g.len_bytes)),
            groups.first().map_or(0, |g| g.rows),
            count(first.metadata_bytes)
        );
    }
    let read = match &s.columns_read {
        None => "all read".to_string(),
        Some(cols) => format!("reading {}", cols.join(", ")),
    };
    let _ = writeln!(
        w,
        "  sample      {} B; {} columns ({read})",
        count(s.record_bytes),
        s.dataset.columns.len()
    );

    let _ = writeln!(w, "\nRun");
    let _ = writeln!(
        w,
        "  shape       NP {} × RT {}, prefetch {}, coalesce_rgs {}, batch {}, sharding {}",
        o.np, s.read_threads, s.prefetch, s.coalesce_rgs, s.batch_size, o.sharding
    );
    if o.loader == crate::plan::Loader::Dlio {
        let overshoot: usize = plan.ranks.iter().map(|r| r.overshoot_gets).sum();
        let _ = writeln!(
            w,
            "  loader      dlio: every rank walks the whole file list; {} GETs held per reader \
             (prefetch {} + prefetch_factor {}{}); {overshoot} GETs per epoch past the last \
             steps, landing after the clock stops; every rank reads every footer (HEAD + 4 MiB)",
            plan.window_per_reader,
            s.prefetch,
            plan.prefetch_factor.unwrap_or(0),
            match o.prefetch_factor {
                Some(_) => " from --prefetch-factor".to_string(),
                None => format!(
                    ", DLIO's ⌈prefetch_size {} ÷ read_threads {}⌉",
                    s.prefetch_size, s.read_threads
                ),
            }
        );
    }
    let _ = writeln!(
        w,
        "  compute     {} per step, {} epoch{}, AU target {}%",
        seconds(s.computation_time_s),
        s.epochs,
        if s.epochs == 1 { "" } else { "s" },
        s.au_target_percent
    );
    let capped = if plan.steps_per_rank
        < s.samples_per_file * s.num_files as u64 / s.batch_size / u64::from(o.np)
    {
        " (capped by train.total_training_steps)"
    } else {
        ""
    };
    let _ = writeln!(
        w,
        "  steps       {} per rank per epoch: {}{capped}",
        count(plan.steps_per_rank),
        plan.steps_formula
    );

    let _ = writeln!(w, "\nI/O per epoch");
    let per_rank_gets = plan.get_count as f64 / f64::from(o.np);
    let _ = writeln!(
        w,
        "  GETs        {} ({:.0} per rank), largest {}",
        count(plan.get_count as u64),
        per_rank_gets,
        bytes(plan.largest_get_bytes)
    );
    let per_step = plan.bytes_per_epoch as f64 / (plan.steps_per_rank * u64::from(o.np)) as f64;
    let _ = writeln!(
        w,
        "  bytes       {} ({} per rank, {} per step); footers {} fetched once",
        bytes(plan.bytes_per_epoch),
        bytes(plan.bytes_per_epoch / u64::from(o.np)),
        bytes(per_step as u64),
        bytes(plan.catalog.footer_fetch_bytes())
    );

    let m = &plan.memory;
    let _ = writeln!(w, "\nMemory (checked before anything is allocated)");
    let _ = writeln!(
        w,
        "  buffers     {} ranks × {} readers × {} × {} = {} (pre-faulted, locked, registered)",
        o.np,
        s.read_threads,
        plan.window_per_reader,
        bytes(m.buffer_bytes),
        bytes(m.pool_bytes)
    );
    let _ = writeln!(
        w,
        "  other       {} connections × {} = {}; process {}",
        m.connections,
        bytes(crate::budget::CONNECTION_OVERHEAD_BYTES),
        bytes(m.connection_bytes),
        bytes(m.overhead_bytes)
    );
    if m.server_bytes > 0 {
        let _ = writeln!(
            w,
            "  server      {} resident with the in-process server when the run starts",
            bytes(m.server_bytes)
        );
    }
    let _ = writeln!(w, "  total       {}", super::budget_total_line(m));
    let lock = if plan.limits.cap_ipc_lock {
        "RLIMIT_MEMLOCK does not apply (CAP_IPC_LOCK)".to_string()
    } else {
        match plan.limits.memlock_bytes {
            None => "RLIMIT_MEMLOCK unlimited".to_string(),
            Some(_) => String::new(),
        }
    };
    if !lock.is_empty() {
        let _ = writeln!(w, "  locking     {lock}");
    }
    for note in &plan.limits.notes {
        let _ = writeln!(w, "  probe       {note}");
    }

    let _ = writeln!(w, "\nRanks");
    let _ = writeln!(
        w,
        "  {:>4}  {:<14} {:>6} {:>10} {:>11}  first GET",
        "rank", "files", "GETs", "row groups", "bytes"
    );
    let shown = if full { plan.ranks.len() } else { RANKS_SHOWN };
    for rank in plan.ranks.iter().take(shown) {
        let mut files: Vec<usize> = rank
            .readers
            .iter()
            .flat_map(|r| r.files.iter().copied())
            .collect();
        files.sort_unstable();
        files.dedup();
        let first = rank
            .steps
            .first()
            .and_then(|t| t.first())
            .map(|t| get_line(plan, &rank.readers[t.reader].gets[t.get]))
            .unwrap_or_default();
        let _ = writeln!(
            w,
            "  {:>4}  {:<14} {:>6} {:>10} {:>11}  {first}",
            rank.rank,
            file_span(&files),
            count(rank.get_count as u64),
            count(rank.row_groups as u64),
            bytes(rank.bytes)
        );
    }
    if plan.ranks.len() > shown {
        let _ = writeln!(
            w,
            "  … {} more ranks (--full lists them)",
            plan.ranks.len() - shown
        );
    }

    let ranks_listed = if full { plan.ranks.len() } else { 1 };
    for rank in plan.ranks.iter().take(ranks_listed) {
        let _ = writeln!(
            w,
            "\nReaders of rank {}{}",
            rank.rank,
            if full {
                String::new()
            } else {
                format!(" (first {GETS_SHOWN} GETs of each; --full lists all)")
            }
        );
        for reader in &rank.readers {
            let _ = writeln!(
                w,
                "  reader {}: {}, {}, {}",
                reader.reader,
                crate::units::counted(reader.files.len() as u64, "file"),
                crate::units::counted(reader.gets.len() as u64, "GET"),
                bytes(reader.gets.iter().map(|g| g.len_bytes).sum())
            );
            let limit = if full { usize::MAX } else { GETS_SHOWN };
            for get in reader.gets.iter().take(limit) {
                let _ = writeln!(w, "    {}", get_line(plan, get));
            }
            if reader.gets.len() > limit {
                let _ = writeln!(w, "    … {} more", reader.gets.len() - limit);
            }
        }
    }

    if !plan.notes.is_empty() {
        let _ = writeln!(w, "\nNotes");
        for note in &plan.notes {
            let _ = writeln!(w, "  ! {note}");
        }
    }
    if let Some(line) = super::ignored_keys_line(&s.ignored_keys, "DLIO keys ringload does not use")
    {
        let _ = writeln!(w, "\n{line}");
    }
    out
}
