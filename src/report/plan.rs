//! `ringload plan` for people: the dataset, the run, the I/O, the memory budget, per-rank shares
//! and, for rank 0 (or every rank with `--full`), each reader's GETs.

use std::fmt::Write;

use crate::plan::{Plan, RowGroupGet};
use crate::units::{bytes, count, seconds};

/// How many GETs of each reader are listed without `--full`.
const GETS_SHOWN: usize = 3;

/// How many ranks are listed without `--full`.
const RANKS_SHOWN: usize = 16;

fn file_name(plan: &Plan, file: usize) -> String {
    let key = plan.catalog.key(file);
    key.rsplit('/').next().unwrap_or(&key).to_string()
}

fn get_line(plan: &Plan, get: &RowGroupGet) -> String {
    if plan.catalog.objects.is_some() {
        return format!(
            "{}  GET {}  ({}, {} sample{})",
            file_name(plan, get.file),
            plan.ranged(get).describe(),
            bytes(get.len_bytes),
            get.rows,
            if get.rows == 1 { "" } else { "s" }
        );
    }
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
        {
            let ranged = plan.ranged(get);
            match ranged.extents {
                Some(_) => ranged.describe(),
                None => ranged.range_header(),
            }
        },
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
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "ringload plan: {} ({}), model {}",
        s.workload.name, s.workload.path, s.model
    );
    render_dataset(w, plan);
    render_run(w, plan);
    render_io(w, plan);
    render_memory(w, plan);
    // A long run's estimate, as `run` says it before it starts.
    if let Some(line) = plan.long_run_estimate(crate::plan::LONG_RUN_S) {
        let _ = writeln!(w, "\nTime\n  {line}");
    }
    render_ranks(w, plan, full);
    render_readers(w, plan, full);
    render_notes(w, plan);
    out
}

/// The Dataset section: files, layout, the first file's row groups, the sample.
fn render_dataset(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let _ = writeln!(w, "\nDataset");
    let _ = writeln!(
        w,
        "  files       {} × {} samples under {}",
        count(s.num_files as u64),
        count(s.samples_per_file),
        s.dataset.train_prefix
    );
    let _ = writeln!(w, "  layout      {}", plan.catalog.source);
    if let Some(objects) = &s.objects {
        render_objects(w, plan, objects);
    }
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
        Some(cols) => {
            let row: u64 = s
                .dataset
                .columns
                .iter()
                .filter(|c| cols.contains(&c.name))
                .map(|c| c.row_bytes())
                .sum();
            format!(
                "reading {} of them, {} B a row: {}",
                cols.len(),
                count(row),
                cols.join(", ")
            )
        }
    };
    if s.objects.is_none() {
        let _ = writeln!(
            w,
            "  sample      {} B; {} columns ({read})",
            count(s.record_bytes),
            s.dataset.columns.len()
        );
    }
}

/// The Run section: the shape, the loader, compute and steps.
fn render_run(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let o = &plan.options;
    let _ = writeln!(w, "\nRun");
    if s.objects.is_some() {
        let _ = writeln!(
            w,
            "  shape       NP {} × RT {}, prefetch {}, batch {}, sharding {}{}",
            o.np,
            s.read_threads,
            s.prefetch,
            s.batch_size,
            o.sharding,
            match o.sharding {
                crate::plan::Sharding::Rank => " (disjoint contiguous shares)",
                crate::plan::Sharding::Dlio if plan.reshuffles() => {
                    " (the v3.0 fork's: file i to rank i mod NP, ⌊N ÷ NP⌋ each; before each \
                     later epoch e dealt again from a permutation seeded 123 + e, each rank's \
                     list shuffled with 123 + e + 31·rank; the lists below are epoch 0's)"
                }
                crate::plan::Sharding::Dlio => {
                    " (the v3.0 fork's: file i to rank i mod NP, ⌊N ÷ NP⌋ each)"
                }
            }
        );
        render_deal(w, plan);
    } else {
        let _ = writeln!(
            w,
            "  shape       NP {} × RT {}, prefetch {}, coalesce_rgs {}, batch {}, sharding {}",
            o.np, s.read_threads, s.prefetch, s.coalesce_rgs, s.batch_size, o.sharding
        );
    }
    render_loader(w, plan);
    render_steps(w, plan);
}

/// The Run section's loader line, for DLIO's loader (whole objects or row groups); none else.
fn render_loader(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let o = &plan.options;
    if let Some(fetch) = plan.object_fetch {
        let overshoot: usize = plan.ranks.iter().map(|r| r.overshoot_gets).sum();
        let largest = plan.largest_get_bytes;
        let how = if fetch.head {
            format!(
                "a HEAD, then objects of {} or more as ranged GETs of {} ({} for the largest), \
                 {} in flight per object (cores {}), smaller ones whole",
                bytes(fetch.range_threshold_bytes),
                bytes(fetch.chunk_bytes_for(fetch.range_threshold_bytes)),
                bytes(fetch.chunk_bytes_for(largest)),
                fetch.concurrency_for(largest),
                fetch.cores,
            )
        } else {
            "one plain GET (no HEAD below 16 MiB records, so s3dlio never splits)".to_string()
        };
        let _ = writeln!(
            w,
            "  loader      dlio (the v3.0 fork's s3dlio loader): the fork's shares (file i to \
             rank i mod NP); a window of {} objects per reader (storage_options.prefetch_window \
             {}, at most the objects a reader has); each object: {how}; {overshoot} objects per \
             epoch past the last steps, landing after the clock stops",
            plan.window_per_reader, s.prefetch_window,
        );
    } else if o.loader == crate::plan::Loader::Dlio {
        let overshoot: usize = plan.ranks.iter().map(|r| r.overshoot_gets).sum();
        let (shares, footers) = if s.objects.is_some() {
            ("the v3.0 fork's shares (file i to rank i mod NP)", "")
        } else {
            (
                "every rank walks the whole file list",
                "; every rank reads every footer (HEAD + 4 MiB)",
            )
        };
        let _ = writeln!(
            w,
            "  loader      dlio: {shares}; {} GETs held per reader \
             (prefetch {} + prefetch_factor {}{}); {overshoot} GETs per epoch past the last \
             steps, landing after the clock stops{footers}",
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
}

/// The Run section's compute and steps lines.
fn render_steps(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let o = &plan.options;
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
}

/// The I/O per epoch section: GETs and bytes.
fn render_io(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let o = &plan.options;
    let _ = writeln!(w, "\nI/O per epoch");
    let per_rank_gets = plan.get_count as f64 / f64::from(o.np);
    let _ = writeln!(
        w,
        "  GETs        {} ({:.0} per rank), largest {}",
        count(plan.get_count as u64),
        per_rank_gets,
        bytes(plan.largest_get_bytes)
    );
    if s.columns_read.is_some() && s.objects.is_none() {
        let requests: usize = plan
            .ranks
            .iter()
            .flat_map(|r| &r.readers)
            .flat_map(|r| &r.gets)
            .map(|g| g.requests)
            .sum();
        let _ = writeln!(
            w,
            "  requests    {} ranged GETs (storage.storage_options.column_gets {}: {})",
            count(requests as u64),
            s.column_gets.name(),
            s.column_gets.describe()
        );
    }
    let per_step = plan.bytes_per_epoch as f64 / (plan.steps_per_rank * u64::from(o.np)) as f64;
    let footers = if s.objects.is_some() {
        "no footers: whole objects".to_string()
    } else {
        format!(
            "footers {} fetched once",
            bytes(plan.catalog.footer_fetch_bytes())
        )
    };
    let _ = writeln!(
        w,
        "  bytes       {} ({} per rank, {} per step); {footers}",
        bytes(plan.bytes_per_epoch),
        bytes(plan.bytes_per_epoch / u64::from(o.np)),
        bytes(per_step as u64),
    );
}

/// The Memory section: buffers, size classes, connections, the server, the total, locking.
fn render_memory(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let o = &plan.options;
    let m = &plan.memory;
    let _ = writeln!(w, "\nMemory (checked before anything is allocated)");
    let _ = writeln!(
        w,
        "  buffers     {} = {} (pre-faulted, locked, registered)",
        crate::budget::pool_formula(o.np, s.read_threads, plan.window_per_reader, m),
        bytes(m.pool_bytes)
    );
    if let Some(small) = m.small_buffers {
        let large = plan.window_per_reader - small.per_reader;
        let _ = writeln!(
            w,
            "  classes     {} × the largest GET per reader would not fit: each reader has \
             {large} buffer{} of the largest object (what a step needs of it) and {} of {}; a \
             GET over {} waits for a large buffer, so large objects are prefetched less deep",
            plan.window_per_reader,
            if large == 1 { "" } else { "s" },
            small.per_reader,
            bytes(small.buffer_bytes),
            bytes(small.get_bytes),
        );
    }
    let _ = writeln!(
        w,
        "  other       {} connections × {} = {}; process {}",
        m.connections,
        bytes(crate::budget::CONNECTION_OVERHEAD_BYTES),
        bytes(m.connection_bytes),
        bytes(m.overhead_bytes)
    );
    if m.plan_bytes > 0 {
        let _ = writeln!(
            w,
            "  GETs        {} for {} GETs: the plan's lists, one epoch's requests, a record per \
             GET of every epoch",
            bytes(m.plan_bytes),
            crate::units::count(plan.get_count as u64)
        );
    }
    if m.catalog_bytes > 0 && plan.catalog.objects.is_none() {
        let _ = writeln!(
            w,
            "  catalog     {}: the largest footer decoded ({} × its {}), the row-group spans, \
             chunk lists and column extents kept",
            bytes(m.catalog_bytes),
            crate::catalog::held::FOOTER_DECODE_FACTOR,
            bytes(
                plan.catalog
                    .files
                    .iter()
                    .map(|f| f.metadata_bytes)
                    .max()
                    .unwrap_or(0)
            )
        );
    }
    if m.checkpoint_bytes > 0 {
        let _ = writeln!(
            w,
            "  checkpoint  {} for the checkpoints' buffers and connections (workflow.checkpoint)",
            bytes(m.checkpoint_bytes)
        );
    }
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
}

/// The Ranks section: each rank's files, GETs, row groups, bytes and first GET (16 without `full`).
fn render_ranks(w: &mut String, plan: &Plan, full: bool) {
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
}

/// The Readers sections: rank 0's readers and first GETs (every rank's, all GETs, with `full`).
fn render_readers(w: &mut String, plan: &Plan, full: bool) {
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
}

/// A training run's checkpoints (`workflow.checkpoint: True`): when they are written, what
/// objects, their sizes and keys.
pub fn render_train_checkpoints(c: &crate::checkpoint::training::TrainCheckpointPlan) -> String {
    use crate::checkpoint::training::Schedule;
    let mut out = String::new();
    let w = &mut out;
    let when = match c.schedule {
        Schedule::Off => "never (checkpoint.steps_between_checkpoints=0)".to_string(),
        Schedule::Epochs {
            after_epoch,
            every_epochs,
        } => format!(
            "after the last step of epoch {after_epoch}, then every {every_epochs} epoch(s), \
             outside the epoch's window (epoch mode)"
        ),
        Schedule::Steps { every_steps } => format!(
            "after every {} of each epoch, outside AU (step mode)",
            crate::units::counted(every_steps, "step")
        ),
    };
    let _ = writeln!(w, "\nCheckpoints during training (workflow.checkpoint)");
    let _ = writeln!(w, "  when       {when}");
    let fired: Vec<String> = c
        .saves
        .iter()
        .take(8)
        .map(|s| format!("epoch {} step {}", s.epoch, s.after_step))
        .collect();
    let _ = writeln!(
        w,
        "  saves      {}{}{}",
        c.saves.len(),
        if fired.is_empty() { "" } else { ": " },
        fired.join(", ") + if c.saves.len() > 8 { ", …" } else { "" }
    );
    let p = &c.objects;
    let _ = writeln!(
        w,
        "  objects    {} per save, {} ({} B; checkpoint_size_GB {:.6e}), by {} of {} rank{}",
        p.objects_per_checkpoint,
        bytes(p.written_bytes),
        p.written_bytes,
        p.checkpoint_size_gb,
        p.ranks.iter().filter(|r| !r.is_empty()).count(),
        p.np,
        if p.np == 1 { "" } else { "s" }
    );
    let example = c.saves.first().and_then(|s| {
        let (rank, o) = p
            .ranks
            .iter()
            .enumerate()
            .find_map(|(r, os)| os.first().map(|o| (r, o)))?;
        Some(format!(
            "{} ({} B, rank {rank})",
            c.key(s.epoch, s.key_step, o),
            o.bytes
        ))
    });
    let _ = writeln!(
        w,
        "  keys       {}",
        example.unwrap_or_else(|| format!("{}global_epoch<E>_step<K>/…", p.prefix()))
    );
    for note in &c.notes {
        let _ = writeln!(w, "  ! {note}");
    }
    out
}

/// The Notes section and the DLIO keys ringload does not use.
fn render_notes(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
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
}

/// The whole-object dataset's lines: format, names, sizes, the catalog's bytes.
fn render_objects(w: &mut String, plan: &Plan, objects: &crate::dataset::ObjectDataset) {
    let Some(catalog) = &plan.catalog.objects else {
        return;
    };
    let how = match objects.format {
        crate::dataset::Format::Npz => "numpy savez, one GET of the whole object per sample",
        crate::dataset::Format::Jpeg => {
            "raw bytes named .jpeg, one GET of the whole object per sample"
        }
        crate::dataset::Format::Tfrecord => {
            "TFRecord, one GET of the whole file, its records the file's samples"
        }
    };
    let _ = writeln!(w, "  format      {} ({how})", objects.format);
    let (min, mean, max) = catalog.size_range();
    let _ = writeln!(
        w,
        "  objects     {} planned of {} listed; first {}; size mean {}, min {}, max {}",
        count(catalog.len() as u64),
        count(catalog.listed as u64),
        file_name(plan, 0),
        bytes(mean as u64),
        bytes(min),
        bytes(max)
    );
    let per_object = match catalog.keys() {
        crate::catalog::objects::ObjectKeys::Dlio { .. } => {
            "8 bytes per object: DLIO's names kept as indices".to_string()
        }
        crate::catalog::objects::ObjectKeys::Arena { text, .. } => {
            format!(
                "16 bytes per object and {} of keys",
                bytes(text.len() as u64)
            )
        }
    };
    let _ = writeln!(
        w,
        "  catalog     {} in memory ({per_object})",
        bytes(catalog.heap_bytes() as u64),
    );
    let stdev = if objects.record_length_stdev > 0.0 {
        format!(" ± {}", count(objects.record_length_stdev.round() as u64))
    } else {
        String::new()
    };
    let _ = writeln!(
        w,
        "  sample      {} B{stdev} configured (record_length_bytes: drives the nominal MiB/s \
         and datasize); sizes drawn as DLIO does, side N(⌊√L⌋ = {}, σ {:.1}), so an object is \
         side² bytes, not the configured length (docs/whole-objects.md)",
        count(plan.settings.record_bytes),
        objects.mean_dim(),
        objects.dim_sigma()
    );
}

/// The whole-object batch schedule: samples and GETs per step, and what a reader holds.
fn render_deal(w: &mut String, plan: &Plan) {
    let s = &plan.settings;
    let rt = u64::from(s.read_threads.max(1));
    let gets_per_step =
        plan.get_count as f64 / (plan.steps_per_rank * u64::from(plan.options.np)) as f64;
    let held = plan
        .ranks
        .iter()
        .map(|r| r.max_gets_held_per_reader)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        w,
        "  batches     dealt over the readers: at most {} of each reader per step (⌈{} ÷ {}⌉ samples), \
         {gets_per_step:.2} GETs per step per rank; a reader holds at most {held} GET{} of a \
         step, prefetch {} (default: one batch ahead)",
        s.batch_size.div_ceil(rt),
        s.batch_size,
        rt,
        if held == 1 { "" } else { "s" },
        s.prefetch
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryLimits;
    use crate::config::RawConfig;
    use crate::plan::{Loader, PlanOptions, Sharding};
    use crate::settings::Settings;

    fn rendered(name: &str, overrides: &[&str], np: u32) -> String {
        let mut cfg = RawConfig::load(name).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        let settings = Settings::resolve(&cfg).unwrap();
        let objects = settings.objects.as_ref().unwrap();
        let catalog = crate::catalog::computed_objects(objects, settings.num_files);
        let options = PlanOptions {
            np,
            sharding: Sharding::Rank,
            memory_cap_bytes: None,
            server_bytes: 0,
            checkpoint_bytes: 0,
            loader: Loader::Ringload,
            prefetch_factor: None,
            tls: false,
        };
        let plan =
            Plan::resolve(&settings, &catalog, &options, &MemoryLimits::unlimited()).unwrap();
        render(&plan, false)
    }

    #[test]
    fn a_whole_object_plan_names_format_sizes_steps_gets_and_budget() {
        let out = rendered("unet3d_b200", &["dataset.num_files_train=56"], 2);
        for expected in [
            "format      npz (numpy savez, one GET of the whole object per sample)",
            "objects     56 planned of 56 listed; first img_00_of_56.npz; size mean ",
            "catalog     ",
            "(8 bytes per object: DLIO's names kept as indices)",
            "batch 7, sharding rank",
            "dealt over the readers: at most 2 of each reader per step (⌈7 ÷ 4⌉ samples), 7.00 GETs per \
             step per rank; a reader holds at most 2 GETs of a step, prefetch 4",
            "steps       4 per rank per epoch: floor(1 × 56 / 7 / 2) = 4",
            "GETs        56 (28 per rank), largest ",
            "no footers: whole objects",
            "buffers     NP 2 × RT 4 × prefetch 4 × ",
            "img_00_of_56.npz  GET whole object, ",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in\n{out}");
        }
        assert!(!out.contains("row groups, first at byte"), "{out}");
        let out = rendered("retinanet_b200", &["dataset.num_files_train=24000"], 8);
        for expected in [
            "format      jpeg (raw bytes named .jpeg",
            "size mean 315.06 KiB, min 315.06 KiB, max 315.06 KiB",
            "at most 3 of each reader per step (⌈24 ÷ 8⌉ samples), 24.00 GETs per step per rank",
            "steps       125 per rank per epoch",
            "buffers     NP 8 × RT 8 × prefetch 6 × ",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in\n{out}");
        }
    }
}
