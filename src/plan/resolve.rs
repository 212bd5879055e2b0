//! [`Plan::resolve`] and its steps: the steps per rank, each rank's share, the window each
//! reader holds, the largest GET, the memory budget, and the plan's notes.

use super::{
    Loader, ObjectFetch, Plan, PlanError, PlanOptions, RankPlan, RowGroupGet, RowGroupRef,
    Sharding, plan_rank, split_shares, v3_shares,
};
use crate::budget::{self, BudgetShape, MemoryBudget, MemoryLimits};
use crate::catalog::Catalog;
use crate::settings::Settings;

impl Plan {
    /// Resolves the plan of a run. Pure: the catalog and limits were read before.
    pub fn resolve(
        settings: &Settings,
        catalog: &Catalog,
        options: &PlanOptions,
        limits: &MemoryLimits,
    ) -> Result<Plan, PlanError> {
        let np = options.np;
        if np == 0 {
            return Err(PlanError::Unsatisfiable(
                "--np 0: a run needs at least one rank".to_string(),
            ));
        }
        let (formula_steps, steps, steps_formula) = steps_per_rank(settings, np)?;
        let rows_per_rank = steps * settings.batch_size;
        let units = row_group_sequence(catalog);
        let window = options.window(settings);
        let object_fetch = match (options.loader, &settings.objects) {
            (Loader::Dlio, Some(_)) => Some(
                ObjectFetch::for_record_length(settings.record_bytes)
                    .map_err(PlanError::Unsatisfiable)?,
            ),
            _ => None,
        };
        let whole_objects = catalog.objects.is_some();
        let (shares, overshoot) =
            rank_shares(&units, options, whole_objects, window, rows_per_rank)?;
        let mut ranks = Vec::with_capacity(np as usize);
        for (rank, share) in shares.iter().enumerate() {
            ranks.push(plan_rank(rank, share, catalog, settings, steps, overshoot)?);
        }
        check_held(&ranks, settings, options, window, whole_objects)?;
        let largest_get_bytes = largest_get_bytes(&ranks, catalog, settings, options);
        let slot_connections = object_fetch.map_or(1, |f| {
            most_in_flight(&f, &ranks, catalog, settings, options)
        });
        // s3dlio's window never holds more objects than its reader has.
        let readers = ranks.iter().flat_map(|r| &r.readers);
        let most = readers.map(|r| r.gets.len() as u32).max().unwrap_or(1);
        let window = object_fetch.map_or(window, |_| window.min(most.max(1)));
        let shape = BudgetShape {
            np,
            read_threads: settings.read_threads,
            prefetch: window,
            largest_get_bytes,
            server_bytes: options.server_bytes,
            checkpoint_bytes: options.checkpoint_bytes,
            catalog_bytes: catalog.listing_bytes(),
            plan_bytes: plan_held_bytes(
                &ranks,
                catalog,
                settings.epochs,
                settings.column_gets == crate::extents::ColumnGets::Coalesced,
            ),
            tls: options.tls,
            batch_hold: whole_objects.then_some((settings.batch_size, settings.samples_per_file)),
            small_class: None,
            // s3dlio's ranged chunks of one object go over connections of their own.
            slot_connections,
        };
        let memory = check_budget(
            &shape,
            settings,
            catalog,
            options,
            limits,
            &ranks,
            object_fetch,
        )?;
        let notes = plan_notes(settings, catalog, &ranks, np, steps, formula_steps);
        Ok(Plan {
            settings: settings.clone(),
            options: PlanOptions {
                sharding: options.effective_sharding(),
                ..options.clone()
            },
            steps_per_rank: steps,
            steps_formula,
            samples_per_rank: rows_per_rank,
            catalog: catalog.clone(),
            get_count: ranks.iter().map(|r| r.get_count).sum(),
            bytes_per_epoch: ranks.iter().map(|r| r.bytes).sum(),
            largest_get_bytes,
            slot_connections,
            ranks,
            window_per_reader: window,
            prefetch_factor: options.prefetch_factor(settings),
            object_fetch,
            verify_objects: None,
            memory,
            limits: limits.clone(),
            notes,
        })
    }
}

/// A window's slot and size class per GET of the epoch it holds (`engine::window`'s `Slot` of
/// an engine's in-flight and arrived handles, and one byte): an allowance, not a `size_of`.
const WINDOW_SLOT_BYTES: u64 = 40;

/// A request path's bytes beyond its key: `/`, the bucket's name, `/`, escapes (an allowance).
const PATH_EXTRA_BYTES: u64 = 72;

/// What a run keeps per GET beyond its buffers, for the budget ([`BudgetShape::plan_bytes`]):
/// the plan's lists (each GET, its batch part, its file index, each step's list), one epoch's
/// requests in each reader's window (a [`crate::ranged::RangedGet`] with its key, its request
/// path and its slot), a record per GET of every epoch (requests.csv's [`crate::metrics::GetRecord`]), and
/// the plan's own copy of a whole-object catalog, and with `coalesced` each GET's own merged
/// list of a column subset's chunks (the catalog's lists are the catalog's bytes). A full retinanet is 1.17 M GETs per epoch: these, not the buffers, are most
/// of its memory.
pub(super) fn plan_held_bytes(
    ranks: &[RankPlan],
    catalog: &Catalog,
    epochs: u32,
    coalesced: bool,
) -> u64 {
    use std::mem::size_of;
    let readers = || ranks.iter().flat_map(|r| &r.readers);
    let gets: u64 = readers().map(|r| r.gets.len() as u64).sum();
    let files: u64 = readers().map(|r| r.files.len() as u64).sum();
    let steps: u64 = ranks.iter().map(|r| r.steps.len() as u64).sum();
    let parts: u64 = ranks
        .iter()
        .flat_map(|r| &r.steps)
        .map(|s| s.len() as u64)
        .sum();
    let key_bytes = catalog
        .file_count()
        .checked_sub(1)
        .map_or(0, |last| catalog.key(last).len() as u64);
    let plan = gets * size_of::<RowGroupGet>() as u64
        + parts * size_of::<super::BatchPart>() as u64
        + steps * size_of::<Vec<super::BatchPart>>() as u64
        + files * size_of::<usize>() as u64;
    // Each key twice on the heap: the request's, and the io_uring engine's request path
    // (`/bucket/key`, escaped), each in a malloc chunk (8 bytes of header, 16-byte steps).
    let heap_string = |len: u64| (len + 8).div_ceil(16) * 16;
    let window = gets
        * (size_of::<crate::ranged::RangedGet>() as u64
            + heap_string(key_bytes)
            + size_of::<String>() as u64
            + heap_string(key_bytes + PATH_EXTRA_BYTES)
            + WINDOW_SLOT_BYTES);
    let records = gets * u64::from(epochs.max(1)) * size_of::<crate::metrics::GetRecord>() as u64;
    let catalog_copy = catalog
        .objects
        .as_ref()
        .map_or(0, |o| o.heap_bytes() as u64);
    let extent = size_of::<crate::extents::Extent>() as u64;
    let merged = match coalesced {
        true => readers()
            .flat_map(|r| &r.gets)
            .map(|g| g.requests as u64 * extent + 16)
            .sum(),
        false => 0,
    };
    plan + window + records + catalog_copy + merged
}

/// Steps per rank per epoch: `(the formula's, after the total_training_steps cap, the formula)`.
pub(super) fn steps_per_rank(
    settings: &Settings,
    np: u32,
) -> Result<(u64, u64, String), PlanError> {
    let total_samples = settings.samples_per_file * settings.num_files as u64;
    let formula_steps = total_samples / settings.batch_size / u64::from(np);
    let steps_formula = format!(
        "floor({} × {} / {} / {}) = {}",
        settings.samples_per_file, settings.num_files, settings.batch_size, np, formula_steps
    );
    let steps = match settings.total_training_steps {
        Some(cap) => formula_steps.min(cap),
        None => formula_steps,
    };
    if steps == 0 {
        // One step of every rank needs batch × NP samples: the files that hold them.
        let files =
            (settings.batch_size * u64::from(np)).div_ceil(settings.samples_per_file.max(1));
        let fewer = if np > 1 { "fewer ranks (--np) or " } else { "" };
        return Err(PlanError::Unsatisfiable(format!(
            "0 steps per rank: {steps_formula}; one step of {} needs {} (--files {files}); \
             or use {fewer}a smaller batch (reader.batch_size)",
            crate::units::counted(u64::from(np), "rank"),
            crate::units::counted(files, "file"),
        )));
    }
    Ok((formula_steps, steps, steps_formula))
}

/// The file-major sequence of row groups (one unit per object for whole objects).
pub(super) fn row_group_sequence(catalog: &Catalog) -> Vec<RowGroupRef> {
    match &catalog.objects {
        Some(objects) => (0..objects.len())
            .map(|file| RowGroupRef {
                file,
                row_group: 0,
                rows: objects.samples_per_file,
            })
            .collect(),
        None => catalog
            .files
            .iter()
            .enumerate()
            .flat_map(|(file, layout)| {
                layout
                    .row_groups
                    .iter()
                    .enumerate()
                    .map(move |(row_group, rg)| RowGroupRef {
                        file,
                        row_group,
                        rows: rg.rows,
                    })
            })
            .collect(),
    }
}

/// Each rank's share of `units` by loader and sharding, and the GETs read past its last step.
pub(super) fn rank_shares(
    units: &[RowGroupRef],
    options: &PlanOptions,
    whole_objects: bool,
    window: u32,
    rows_per_rank: u64,
) -> Result<(Vec<Vec<RowGroupRef>>, usize), PlanError> {
    let np = options.np;
    Ok(match (options.loader, options.sharding) {
        // Whole objects: the DLIO fork's sharding, with the dlio loader's read-ahead.
        (Loader::Dlio, _) if whole_objects => (
            v3_shares(units, np as usize, rows_per_rank)?,
            window as usize,
        ),
        (Loader::Ringload, Sharding::Dlio) if whole_objects => {
            (v3_shares(units, np as usize, rows_per_rank)?, 0)
        }
        // Every rank walks the whole file list and reads on past its last step until its
        // readers' windows are full.
        (Loader::Dlio, _) => (vec![units.to_vec(); np as usize], window as usize),
        (Loader::Ringload, Sharding::Rank) => (split_shares(units, np as usize, rows_per_rank)?, 0),
        (Loader::Ringload, Sharding::Dlio) => {
            let share = split_shares(units, 1, rows_per_rank)?;
            (vec![share[0].clone(); np as usize], 0)
        }
    })
}

/// Refuses a plan whose batch needs more GETs of one reader at once than its window holds.
pub(super) fn check_held(
    ranks: &[RankPlan],
    settings: &Settings,
    options: &PlanOptions,
    window: u32,
    whole_objects: bool,
) -> Result<(), PlanError> {
    for rank in ranks {
        if rank.max_gets_held_per_reader > window as usize {
            let needed = rank.max_gets_held_per_reader;
            // With the dlio loader the window is prefetch + the prefetch factor.
            let (holds, prefetch_needed) = match options.prefetch_factor(settings) {
                Some(factor) => (
                    format!("prefetch {} + prefetch factor {factor}", settings.prefetch),
                    needed.saturating_sub(factor as usize),
                ),
                None => (format!("prefetch {window}"), needed),
            };
            let fix = if whole_objects {
                format!("raise --prefetch to {prefetch_needed} or --read-threads")
            } else {
                format!("raise --coalesce-rgs or --prefetch to {prefetch_needed}")
            };
            return Err(PlanError::Unsatisfiable(format!(
                "a batch of {} rows needs {needed} GETs of one reader at once, more than \
                 {holds}; {fix}",
                settings.batch_size,
            )));
        }
    }
    Ok(())
}

/// The largest GET of any epoch: epoch 0's, or the largest object when later epochs reshuffle.
pub(super) fn largest_get_bytes(
    ranks: &[RankPlan],
    catalog: &Catalog,
    settings: &Settings,
    options: &PlanOptions,
) -> u64 {
    let mut largest_get_bytes = all_gets(ranks).map(|g| g.len_bytes).max().unwrap_or(0);
    if let Some(objects) = catalog.objects.as_ref()
        && options.reshuffles(settings.epochs)
    {
        // Later epochs read other objects (reshard.rs): any of them, at most the largest.
        largest_get_bytes = objects.sizes().iter().copied().max().unwrap_or(0);
    }
    largest_get_bytes
}

/// The most ranged GETs one object keeps in flight, fetched as `fetch` says, over every
/// object the run can read (as [`largest_get_bytes`] goes over them).
pub(super) fn most_in_flight(
    fetch: &ObjectFetch,
    ranks: &[RankPlan],
    catalog: &Catalog,
    settings: &Settings,
    options: &PlanOptions,
) -> u32 {
    match catalog.objects.as_ref() {
        Some(objects) if options.reshuffles(settings.epochs) => {
            fetch.most_in_flight_of(objects.sizes().iter().copied())
        }
        _ => fetch.most_in_flight_of(all_gets(ranks).map(|g| g.len_bytes)),
    }
}

/// Every GET of every reader of `ranks`.
fn all_gets(ranks: &[RankPlan]) -> impl Iterator<Item = &RowGroupGet> {
    ranks
        .iter()
        .flat_map(|r| r.readers.iter().flat_map(|rd| &rd.gets))
}

/// The memory budget of `shape` checked against the limits: s3dlio's window, else the buffers
/// (two size classes before refusing), the refusal naming single-row-group GETs where they fit.
pub(super) fn check_budget(
    shape: &BudgetShape,
    settings: &Settings,
    catalog: &Catalog,
    options: &PlanOptions,
    limits: &MemoryLimits,
    ranks: &[RankPlan],
    object_fetch: Option<ObjectFetch>,
) -> Result<MemoryBudget, PlanError> {
    let cap = options.memory_cap_bytes;
    let whole_objects = catalog.objects.is_some();
    let window = shape.prefetch;
    let largest_get_bytes = shape.largest_get_bytes;
    Ok(match object_fetch {
        // s3dlio's window of objects: refused with the largest window that fits.
        Some(_) => budget::check_window(
            shape,
            "storage.storage_options.prefetch_window",
            limits,
            cap,
        )?,
        None => budget::check(shape, limits, cap)
            .or_else(|over| {
                // Whole objects of spread sizes: two buffer size classes before refusing.
                let hold = ranks.iter().map(|r| r.max_gets_held_per_reader).max();
                let smallest = all_gets(ranks).map(|g| g.len_bytes).min().unwrap_or(0);
                let classes =
                    |hold: usize| budget::size_classes(shape, hold as u32, smallest, limits, cap);
                let hold = hold.filter(|&h| whole_objects && h < window as usize);
                hold.and_then(classes).ok_or_else(|| match hold {
                    Some(h) => budget::OverBudget(format!(
                        "{over}; size classes do not fit either: each reader still needs {h} \
                     buffers of the largest GET (a step's share of it)"
                    )),
                    None => over,
                })
            })
            .map_err(|over| {
                // The study read one row group per GET; the built-in default coalesces 8. Say so
                // when that alone would make the run fit.
                if settings.coalesce_rgs <= 1 || whole_objects {
                    return over;
                }
                let single = Settings {
                    coalesce_rgs: 1,
                    ..settings.clone()
                };
                match Plan::resolve(&single, catalog, options, limits) {
                    Ok(plan) => over.with_single_row_group_gets(
                        settings.coalesce_rgs,
                        largest_get_bytes,
                        plan.largest_get_bytes,
                    ),
                    Err(_) => over,
                }
            })?,
    })
}

/// The plan's notes: a changed compute time, too few steps for a stable AU, files whose row
/// count differs from the workload's, readers with no file.
pub(super) fn plan_notes(
    settings: &Settings,
    catalog: &Catalog,
    ranks: &[RankPlan],
    np: u32,
    steps: u64,
    formula_steps: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if (settings.computation_time_s - settings.workload_computation_time_s).abs() > 1e-12 {
        notes.push(format!(
            "computation_time {} s differs from the workload's {} s: AU will measure storage stress, not {} training performance",
            settings.computation_time_s, settings.workload_computation_time_s, settings.model
        ));
    }
    if let Some(files) = crate::metrics::files_for_stable_au(
        steps,
        settings.samples_per_file,
        settings.batch_size,
        u64::from(np),
    ) {
        let fix = if steps < formula_steps {
            format!(
                "raise train.total_training_steps to {}",
                crate::metrics::STABLE_STEPS_PER_RANK
            )
        } else {
            format!(
                "--files {files} gives {}",
                settings.samples_per_file * files / settings.batch_size / u64::from(np)
            )
        };
        notes.push(format!(
            "{steps} steps per rank, below {}: the AU is not stable at this size (identical \
             runs can differ by many points); {fix}",
            crate::metrics::STABLE_STEPS_PER_RANK,
        ));
    }
    let mismatched = catalog
        .files
        .iter()
        .filter(|f| f.rows != settings.samples_per_file)
        .count();
    if mismatched > 0 {
        notes.push(format!(
            "{mismatched} of {} files hold a row count other than dataset.num_samples_per_file = {}; steps follow the workload, reads follow the footers",
            catalog.files.len(),
            settings.samples_per_file
        ));
    }
    let idle = ranks
        .iter()
        .flat_map(|r| &r.readers)
        .filter(|rd| rd.gets.is_empty())
        .count();
    if idle > 0 {
        notes.push(format!(
            "{idle} readers have no file in their rank's share (shares hold fewer files than read_threads)"
        ));
    }
    notes
}
