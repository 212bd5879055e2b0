//! `Plan::resolve`: everything a run needs, decided before any data moves.
//!
//! Pure. It takes the validated [`Settings`], the catalog (files and row-group byte ranges from
//! footers), the run options and the machine's memory limits, and produces:
//!
//! - **steps per rank**: `floor(num_samples_per_file × num_files_train / batch_size / NP)`, as
//!   DLIO computes it (capped by `train.total_training_steps` when that is set);
//! - **shares**: with `--sharding rank` (the default) each rank gets a disjoint, contiguous run of
//!   the file-major row-group sequence, whole row groups, just long enough for its steps (a
//!   share may split a file between two ranks). With `--sharding dlio` every rank walks the same
//!   share — the first `steps × batch_size` samples — as DLIO's PyTorch path does, so each file
//!   is read NP times; `--loader dlio` always shards so, over the whole file list;
//! - **readers**: reader `k` of a rank owns files `[k::RT]` of the rank's share and walks them
//!   file-major; each GET covers up to `coalesce_rgs` consecutive row groups of one file, as one
//!   range from the first chunk's start to the last chunk's end;
//! - **the batch schedule**: step `s` takes `batch_size` rows from the readers round-robin (one
//!   reader per step; if that reader runs dry mid-batch, the rest comes from the next one), and
//!   a GET's buffer is released after the step that consumes its last row. GETs no step reaches
//!   are not planned, so shares cover exactly the row groups that are read;
//! - **the memory budget**, from [`crate::budget::check`]: over any limit, the error names the
//!   largest `read_threads` and `prefetch` that fit.
//!
//! **Whole objects** (npz, jpeg, tfrecord: the catalog's `objects`): each object is read by one
//! GET of all its bytes, its rows the file's `num_samples_per_file` (a TFRecord file too: the
//! DLIO fork's `TFRecordReaderS3Iterable` fetches whole objects). Steps are the same formula.
//! The batch schedule differs: a Parquet step takes its rows from one reader, which for whole
//! objects would make one reader hold B GETs (retinanet: 24 objects; unet3d: 7 × 382 MB), so
//! instead each batch's samples are **dealt round-robin over the rank's readers**, one sample at
//! a time, the first reader rotating from step to step ([`deal_schedule`]): a step needs
//! ⌈B ÷ RT⌉ samples of each reader, and a reader holds ⌈⌈B ÷ RT⌉ ÷ spf⌉ GETs (+1 where a share
//! straddles two objects) whatever B is. The default prefetch is one batch ahead
//! ([`crate::settings::whole_object_prefetch`]); the same check refuses a plan whose reader
//! must hold more GETs than its window. `--sharding dlio` deals files as the DLIO fork of MLPerf
//! Storage v3.0 does ([`v3_shares`]), and deals them again before each later epoch
//! ([`reshard`]). The budget sizes buffers for the largest object planned (any object, then).

use serde::Serialize;

use crate::budget::{MemoryBudget, MemoryLimits, OverBudget};
use crate::catalog::Catalog;
use crate::exit::{self, ExitClass};
use crate::settings::Settings;
use crate::verify::Check;

pub use crate::loader::{Loader, ObjectFetch, Sharding, dlio_prefetch_factor};
pub use crate::ranged::RangedGet;
mod reshard;
mod resolve;

/// Errors found while resolving a plan. All are usage or environment errors (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Unsatisfiable(String),
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
}

impl ExitClass for PlanError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// A run whose compute alone takes longer than this (ten minutes) says how long before it
/// starts ([`Plan::long_run_estimate`]), and `plan` shows it.
pub const LONG_RUN_S: f64 = 600.0;

/// Options of a run that are not workload keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanOptions {
    /// Ranks (simulated accelerators).
    pub np: u32,
    /// How ranks share the dataset; the dlio loader always shards as DLIO (the resolved plan
    /// says `dlio`).
    pub sharding: Sharding,
    /// `--memory-budget`: a cap below the machine's limits.
    pub memory_cap_bytes: Option<u64>,
    /// Memory an in-process server holds (a virtual dataset's templates, and what the process
    /// held when it started), counted in the budget because it is in the same process.
    pub server_bytes: u64,
    /// A training run's checkpoint buffers on this host (`workflow.checkpoint`), counted in
    /// the budget beside the loader's; 0 without.
    pub checkpoint_bytes: u64,
    pub loader: Loader,
    /// `--prefetch-factor`: with the dlio loader, finished GETs queued per reader beyond
    /// `prefetch`, in place of [`dlio_prefetch_factor`].
    pub prefetch_factor: Option<u32>,
    /// The endpoint is `https://`: each buffer also holds a TLS record in flight
    /// ([`budget::TLS_RECORD_SLACK_BYTES`](crate::budget::TLS_RECORD_SLACK_BYTES)), as the
    /// io_uring engine decrypts bodies in place.
    pub tls: bool,
}

impl PlanOptions {
    /// With the dlio loader, the prefetch factor in use: `--prefetch-factor`, else DLIO's
    /// [`dlio_prefetch_factor`]. `None` for ringload's loader, which queues nothing.
    /// Whole objects have none: the fork's s3dlio loader keeps a window of objects instead.
    pub fn prefetch_factor(&self, settings: &Settings) -> Option<u32> {
        match self.loader {
            Loader::Ringload => None,
            Loader::Dlio if settings.objects.is_some() => None,
            Loader::Dlio => Some(self.prefetch_factor.unwrap_or_else(|| {
                dlio_prefetch_factor(settings.prefetch_size, settings.read_threads)
            })),
        }
    }

    /// GETs one reader may hold: `prefetch`, plus the prefetch factor's queue for the dlio
    /// loader; with the dlio loader on whole objects, s3dlio's `prefetch_window` objects.
    pub fn window(&self, settings: &Settings) -> u32 {
        if self.loader == Loader::Dlio && settings.objects.is_some() {
            return settings.prefetch_window;
        }
        settings.prefetch + self.prefetch_factor(settings).unwrap_or(0)
    }

    /// Whether later epochs of a whole-object plan read other files ([`Plan::reshuffled`]).
    pub fn reshuffles(&self, epochs: u32) -> bool {
        self.effective_sharding() == Sharding::Dlio && epochs > 1
    }

    /// The sharding the plan follows: `dlio` with the dlio loader, else `--sharding`'s.
    pub fn effective_sharding(&self) -> Sharding {
        match self.loader {
            Loader::Ringload => self.sharding,
            Loader::Dlio => Sharding::Dlio,
        }
    }
}

/// What the plan decided one GET reads: `coalesce_rgs` (or fewer) consecutive row groups of
/// one catalog file. [`Plan::ranged`] turns it into the [`RangedGet`] an engine sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RowGroupGet {
    /// Index into the catalog's files.
    pub file: usize,
    pub first_row_group: usize,
    pub row_groups: usize,
    /// The first byte fetched, and the bytes fetched: with a column subset read chunk by
    /// chunk, the chunks' (packed in the GET's buffer), else the span's.
    pub offset: u64,
    pub len_bytes: u64,
    pub rows: u64,
    /// The requests the GET sends: 1, or its column chunks' ([`crate::extents`]).
    pub requests: usize,
}

/// One reader of a rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReaderPlan {
    pub reader: usize,
    /// Catalog file indices this reader walks, in order.
    pub files: Vec<usize>,
    pub gets: Vec<RowGroupGet>,
}

/// Rows a step takes from one GET of one reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchPart {
    pub reader: usize,
    /// Index into that reader's `gets`.
    pub get: usize,
    pub rows: u64,
    /// Whether this step consumes the GET's last row, so its buffer is released after it.
    pub releases: bool,
}

/// One rank's share, readers and batch schedule for one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankPlan {
    pub rank: usize,
    pub readers: Vec<ReaderPlan>,
    /// `steps[s]`: what step `s` consumes; almost always a single take.
    pub steps: Vec<Vec<BatchPart>>,
    pub get_count: usize,
    pub row_groups: usize,
    pub bytes: u64,
    /// The most GETs one reader must hold at once (≤ prefetch, checked).
    pub max_gets_held_per_reader: usize,
    /// GETs read past the rank's last step, that no step uses (the dlio loader's read-ahead).
    pub overshoot_gets: usize,
    /// Their bytes (part of `bytes`).
    pub overshoot_bytes: u64,
}

/// Everything a run needs, resolved before it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub settings: Settings,
    pub options: PlanOptions,
    pub steps_per_rank: u64,
    /// `floor(samples_per_file × files / batch / NP)` before any total_training_steps cap.
    pub steps_formula: String,
    pub samples_per_rank: u64,
    pub catalog: Catalog,
    pub ranks: Vec<RankPlan>,
    /// GETs a reader holds at most: prefetch, plus the prefetch factor with the dlio loader.
    pub window_per_reader: u32,
    /// With the dlio loader: the prefetch factor in use ([`PlanOptions::prefetch_factor`]).
    pub prefetch_factor: Option<u32>,
    /// With the dlio loader on whole objects: how s3dlio fetches each object.
    pub object_fetch: Option<ObjectFetch>,
    /// `--verify` on whole objects: their dataset (object i is catalog file i); set by the run.
    #[serde(skip)]
    pub verify_objects: Option<crate::dataset::check::ObjectRef>,
    /// GETs and bytes per epoch, all ranks.
    pub get_count: usize,
    pub bytes_per_epoch: u64,
    pub largest_get_bytes: u64,
    /// The connections each reader's object slot needs: the most ranged GETs any object of
    /// the plan keeps in flight when fetched as s3dlio does (1 otherwise).
    pub slot_connections: u32,
    pub memory: MemoryBudget,
    pub limits: MemoryLimits,
    pub notes: Vec<String>,
}

/// `(file, row group)` with the row group's rows: one element of the file-major sequence.
#[derive(Debug, Clone, Copy)]
struct RowGroupRef {
    file: usize,
    row_group: usize,
    rows: u64,
}

impl Plan {
    /// The GET `get` as an engine sends it.
    pub fn ranged(&self, get: &RowGroupGet) -> RangedGet {
        let chunks = self
            .catalog
            .files
            .get(get.file)
            .and_then(|file| file.chunks.as_ref());
        // A column subset read chunk by chunk: the requests over the row groups' span.
        let extents = self
            .catalog
            .objects
            .is_none()
            .then(|| {
                let first = self.catalog.span(get.file, get.first_row_group);
                let last = self
                    .catalog
                    .span(get.file, get.first_row_group + get.row_groups.max(1) - 1);
                let extents = self.catalog.requests(
                    get.file,
                    first.offset,
                    last.end(),
                    self.settings.column_gets,
                )?;
                Some((first.offset, last.end(), extents))
            })
            .flatten();
        if let Some((from, to, extents)) = extents {
            debug_assert_eq!(
                extents.bytes(),
                get.len_bytes,
                "a GET's pieces fill its buffer"
            );
            return RangedGet {
                whole: false,
                key: self.catalog.key(get.file).into_owned(),
                offset: get.offset,
                len_bytes: get.len_bytes,
                check: chunks.map(|chunks| Check::within(chunks, from, to - from)),
                fetch: None,
                object: None,
                extents: Some(extents),
            };
        }
        RangedGet {
            // Whole objects (npz, jpeg, tfrecord) are fetched as DLIO fetches them: a plain
            // GET, no Range.
            whole: self.catalog.objects.is_some(),
            key: self.catalog.key(get.file).into_owned(),
            offset: get.offset,
            len_bytes: get.len_bytes,
            check: chunks.map(|chunks| Check::within(chunks, get.offset, get.len_bytes)),
            fetch: self.object_fetch,
            object: self.verify_objects.as_ref().map(|o| o.at(get.file as u64)),
            extents: None,
        }
    }

    /// The GETs of each reader of `rank_plan` (epoch 0's `ranks[r]`, or a reshuffled epoch's),
    /// in the order the reader issues them.
    pub fn ranged_gets(&self, rank_plan: &RankPlan) -> Vec<Vec<RangedGet>> {
        rank_plan
            .readers
            .iter()
            .map(|reader| reader.gets.iter().map(|g| self.ranged(g)).collect())
            .collect()
    }
}

/// Splits the row-group sequence into `parts` contiguous shares of whole row groups, each just
/// long enough to hold `rows` rows.
fn split_shares(
    units: &[RowGroupRef],
    parts: usize,
    rows: u64,
) -> Result<Vec<Vec<RowGroupRef>>, PlanError> {
    let mut shares = Vec::with_capacity(parts);
    let mut next = 0;
    for part in 0..parts {
        let start = next;
        let mut have = 0;
        while have < rows && next < units.len() {
            have += units[next].rows;
            next += 1;
        }
        if have < rows {
            let total: u64 = units.iter().map(|u| u.rows).sum();
            return Err(PlanError::Unsatisfiable(format!(
                "the dataset's row groups hold {total} rows; share {part} of {parts} needs {rows} rows from whole row groups and only {have} are left; lower --np or dataset.num_samples_per_file, or add files"
            )));
        }
        shares.push(units[start..next].to_vec());
    }
    Ok(shares)
}

/// The shares of the DLIO fork of MLPerf Storage v3.0 (`DLIO_local_changes`, `config.py`): file
/// i goes to rank i mod NP, and each rank keeps the first ⌊N ÷ NP⌋ of its files (the files past
/// ⌊N ÷ NP⌋ · NP are read by no rank), in index order; its readers take files[k::RT], as the
/// fork's workers do. Each share must hold the `rows` its steps take.
///
/// This is epoch 0's sharding. Before each later epoch the fork redistributes the files (an
/// alltoall shuffled with seed 123 + epoch) and shuffles each rank's list locally (seed
/// 123 + epoch + 31 · rank): [`Plan::reshuffled`] plans those epochs with the same seeds
/// ([`reshard`]; not numpy's random stream, so not DLIO's very lists).
fn v3_shares(
    units: &[RowGroupRef],
    parts: usize,
    rows: u64,
) -> Result<Vec<Vec<RowGroupRef>>, PlanError> {
    let per_rank = units.len() / parts;
    let mut shares = Vec::with_capacity(parts);
    for rank in 0..parts {
        let share: Vec<RowGroupRef> = units
            .iter()
            .skip(rank)
            .step_by(parts)
            .take(per_rank)
            .copied()
            .collect();
        let have: u64 = share.iter().map(|u| u.rows).sum();
        if have < rows {
            return Err(PlanError::Unsatisfiable(format!(
                "--sharding dlio gives each of {parts} ranks {per_rank} files (⌊{} ÷ {parts}⌋), \
                 {have} samples, and its steps need {rows}; add files or lower --np",
                units.len()
            )));
        }
        shares.push(share);
    }
    Ok(shares)
}

/// The plan of one rank over `share`: its readers' GETs and the batch schedule. `overshoot`:
/// GETs each reader keeps past the last one a step uses (read, never consumed).
fn plan_rank(
    rank: usize,
    share: &[RowGroupRef],
    catalog: &Catalog,
    settings: &Settings,
    steps: u64,
    overshoot: usize,
) -> Result<RankPlan, PlanError> {
    let rt = settings.read_threads as usize;
    // The share's files in order, each with its row groups in the share.
    let mut files: Vec<(usize, Vec<RowGroupRef>)> = Vec::new();
    for unit in share {
        match files.last_mut() {
            Some((file, units)) if *file == unit.file => units.push(*unit),
            _ => files.push((unit.file, vec![*unit])),
        }
    }
    let mut readers: Vec<ReaderPlan> = (0..rt)
        .map(|reader| ReaderPlan {
            reader,
            files: Vec::new(),
            gets: Vec::new(),
        })
        .collect();
    for (i, (file, units)) in files.iter().enumerate() {
        let reader = &mut readers[i % rt];
        reader.files.push(*file);
        for chunk in units.chunks(settings.coalesce_rgs as usize) {
            let spans = chunk.iter().map(|u| catalog.span(*file, u.row_group));
            let offset = spans.clone().map(|s| s.offset).min().unwrap_or(0);
            let end = spans.clone().map(|s| s.end()).max().unwrap_or(0);
            let (offset, len_bytes, requests) =
                match catalog.requests(*file, offset, end, settings.column_gets) {
                    Some(extents) => (
                        extents.as_slice().first().map_or(offset, |e| e.offset),
                        extents.bytes(),
                        extents.len(),
                    ),
                    None => (offset, end - offset, 1),
                };
            reader.gets.push(RowGroupGet {
                file: *file,
                first_row_group: chunk[0].row_group,
                row_groups: chunk.len(),
                offset,
                len_bytes,
                rows: chunk.iter().map(|u| u.rows).sum(),
                requests,
            });
        }
    }

    let (schedule, cursor, max_held) = match catalog.objects {
        Some(_) => deal_schedule(rank, &readers, settings.batch_size, steps)?,
        None => take_schedule(rank, &readers, settings.batch_size, steps)?,
    };
    // GETs no step reached are not part of the plan, but for `overshoot` of them; a partly
    // consumed one is (its bytes are read), and its buffer is released after the last step.
    let mut overshoot_gets = 0;
    let mut overshoot_bytes = 0;
    for (r, reader) in readers.iter_mut().enumerate() {
        let (get, taken) = cursor[r];
        let keep = if taken > 0 { get + 1 } else { get };
        let keep_all = (keep + overshoot).min(reader.gets.len());
        overshoot_gets += keep_all - keep;
        overshoot_bytes += reader.gets[keep..keep_all]
            .iter()
            .map(|g| g.len_bytes)
            .sum::<u64>();
        reader.gets.truncate(keep_all);
        let kept: std::collections::BTreeSet<usize> = reader.gets.iter().map(|g| g.file).collect();
        reader.files.retain(|f| kept.contains(f));
    }
    let gets = readers.iter().flat_map(|r| &r.gets);
    Ok(RankPlan {
        rank,
        get_count: gets.clone().count(),
        row_groups: gets.clone().map(|g| g.row_groups).sum(),
        bytes: gets.map(|g| g.len_bytes).sum(),
        readers,
        steps: schedule,
        overshoot_gets,
        overshoot_bytes,
        max_gets_held_per_reader: max_held,
    })
}

/// A step's takes, each reader's cursor after the last step (GET, rows taken from it), and the
/// most GETs one reader held at once.
type Schedule = (Vec<Vec<BatchPart>>, Vec<(usize, u64)>, usize);

/// The Parquet batch schedule: step s takes `batch_size` rows from one reader, round-robin; a
/// reader that runs dry mid-batch hands the rest of the batch to the next one.
fn take_schedule(
    rank: usize,
    readers: &[ReaderPlan],
    batch_size: u64,
    steps: u64,
) -> Result<Schedule, PlanError> {
    let rt = readers.len();
    let mut cursor: Vec<(usize, u64)> = vec![(0, 0); rt]; // (get, rows already taken from it)
    let mut rows_left: Vec<u64> = readers
        .iter()
        .map(|r| r.gets.iter().map(|g| g.rows).sum())
        .collect();
    let mut schedule = Vec::with_capacity(steps as usize);
    let mut next_reader = 0;
    let mut held = vec![0usize; rt]; // GETs a reader holds (started, not released)
    let mut max_held = 0;
    for step in 0..steps {
        let mut need = batch_size;
        let mut takes = Vec::with_capacity(1);
        let mut reader = next_reader;
        // A bound on the search: each reader is visited at most once per batch.
        for _ in 0..rt {
            if need == 0 {
                break;
            }
            if rows_left[reader] == 0 {
                reader = (reader + 1) % rt;
                continue;
            }
            while need > 0 && cursor[reader].0 < readers[reader].gets.len() {
                let (get, taken) = cursor[reader];
                let available = readers[reader].gets[get].rows - taken;
                let rows = need.min(available);
                if taken == 0 {
                    held[reader] += 1;
                    max_held = max_held.max(held[reader]);
                }
                let releases = rows == available;
                takes.push(BatchPart {
                    reader,
                    get,
                    rows,
                    releases,
                });
                need -= rows;
                rows_left[reader] -= rows;
                cursor[reader] = if releases {
                    (get + 1, 0)
                } else {
                    (get, taken + rows)
                };
            }
            if need > 0 {
                reader = (reader + 1) % rt;
            }
        }
        if need > 0 {
            return Err(PlanError::Unsatisfiable(format!(
                "rank {rank} runs out of rows at step {step}; this is a bug in share sizing, please report it"
            )));
        }
        for take in &takes {
            if take.releases {
                held[take.reader] -= 1;
            }
        }
        schedule.push(takes);
        next_reader = (next_reader + 1) % rt;
        // Skip readers with nothing left so the round-robin keeps to those that have rows.
        for _ in 0..rt {
            if rows_left[next_reader] > 0 {
                break;
            }
            next_reader = (next_reader + 1) % rt;
        }
    }
    Ok((schedule, cursor, max_held))
}

/// The whole-object batch schedule: each step's `batch_size` samples are dealt one at a time
/// over the rank's readers, round-robin, carrying on from where the last step stopped (so the
/// readers that give ⌈B ÷ RT⌉ rather than ⌊B ÷ RT⌋ rotate); readers with nothing left are
/// passed over. A step's consecutive samples from one GET are one take. A reader so holds
/// about ⌈B ÷ RT⌉ samples' GETs per step, where [`take_schedule`] would make one reader hold B.
fn deal_schedule(
    rank: usize,
    readers: &[ReaderPlan],
    batch_size: u64,
    steps: u64,
) -> Result<Schedule, PlanError> {
    let rt = readers.len();
    let mut cursor: Vec<(usize, u64)> = vec![(0, 0); rt]; // (get, rows already taken from it)
    let mut rows_left: Vec<u64> = readers
        .iter()
        .map(|r| r.gets.iter().map(|g| g.rows).sum())
        .collect();
    let mut schedule = Vec::with_capacity(steps as usize);
    let mut held = vec![0usize; rt]; // GETs a reader holds (started, not released)
    let mut max_held = 0;
    let mut next = 0; // the reader the next sample comes from
    // The step's take from each reader so far (its index in `takes`).
    let mut last: Vec<Option<usize>> = vec![None; rt];
    for step in 0..steps {
        let mut takes: Vec<BatchPart> = Vec::with_capacity(batch_size.min(rt as u64) as usize);
        last.iter_mut().for_each(|l| *l = None);
        for _ in 0..batch_size {
            // A bound on the search: each reader is looked at once.
            for _ in 0..rt {
                if rows_left[next] > 0 {
                    break;
                }
                next = (next + 1) % rt;
            }
            if rows_left[next] == 0 {
                return Err(PlanError::Unsatisfiable(format!(
                    "rank {rank} runs out of rows at step {step}; this is a bug in share sizing, please report it"
                )));
            }
            let reader = next;
            let (get, taken) = cursor[reader];
            if taken == 0 {
                held[reader] += 1;
                max_held = max_held.max(held[reader]);
            }
            let releases = taken + 1 == readers[reader].gets[get].rows;
            match last[reader] {
                Some(i) if takes[i].get == get => {
                    takes[i].rows += 1;
                    takes[i].releases = releases;
                }
                _ => {
                    last[reader] = Some(takes.len());
                    takes.push(BatchPart {
                        reader,
                        get,
                        rows: 1,
                        releases,
                    });
                }
            }
            rows_left[reader] -= 1;
            cursor[reader] = if releases {
                (get + 1, 0)
            } else {
                (get, taken + 1)
            };
            next = (next + 1) % rt;
        }
        for take in &takes {
            if take.releases {
                held[take.reader] -= 1;
            }
        }
        schedule.push(takes);
    }
    Ok((schedule, cursor, max_held))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::CgroupMemory;
    use crate::catalog::{FileLayout, RowGroupSpan};
    use crate::config::RawConfig;

    /// The study's dataset as BRIEF §1 lays it out: 6 row groups of 48 rows and 103,915,069
    /// bytes, row group k at 4 + k × 103,915,069.
    const RG_BYTES: u64 = 103_915_069;

    fn flux_catalog(files: usize) -> Catalog {
        let layout = |i: usize| FileLayout {
            key: format!("data/flux/train/train_{i:04}.parquet"),
            size_bytes: 623_498_435,
            footer_fetch_bytes: 64 << 10,
            metadata_bytes: 3_500,
            rows: 288,
            row_groups: (0..6)
                .map(|k| RowGroupSpan {
                    rows: 48,
                    offset: 4 + k * RG_BYTES,
                    len_bytes: RG_BYTES,
                })
                .collect(),
            chunks: None,
            extents: None,
        };
        Catalog {
            source: "test".into(),
            parquet_objects_listed: files,
            files: (0..files).map(layout).collect(),
            objects: None,
        }
    }

    fn flux_settings(overrides: &[&str]) -> Settings {
        let mut cfg = RawConfig::load("flux_b200").unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Settings::resolve(&cfg).unwrap()
    }

    fn study_settings(rt: u32) -> Settings {
        flux_settings(&[
            "dataset.num_files_train=500",
            &format!("reader.read_threads={rt}"),
            "storage.storage_options.prefetch_workers=2",
            "storage.storage_options.coalesce_rgs=1",
            "train.computation_time=0.05",
        ])
    }

    fn options(np: u32, sharding: Sharding) -> PlanOptions {
        PlanOptions {
            np,
            sharding,
            memory_cap_bytes: None,
            server_bytes: 0,
            checkpoint_bytes: 0,
            loader: Loader::Ringload,
            prefetch_factor: None,
            tls: false,
        }
    }

    /// Resolves on a machine without limits.
    fn resolve(
        settings: &Settings,
        catalog: &Catalog,
        np: u32,
        sharding: Sharding,
    ) -> Result<Plan, PlanError> {
        Plan::resolve(
            settings,
            catalog,
            &options(np, sharding),
            &MemoryLimits::unlimited(),
        )
    }

    fn machine_24_gib() -> MemoryLimits {
        MemoryLimits {
            mem_available_bytes: Some(23 << 30),
            mem_total_bytes: Some(24 << 30),
            cgroup: None,
            memlock_bytes: Some(8 << 20),
            cap_ipc_lock: true,
            notes: vec![],
        }
    }

    #[test]
    fn steps_per_rank_reproduce_the_study() {
        let catalog = flux_catalog(500);
        let settings = study_settings(1);
        for (np, steps) in [(1, 3000), (2, 1500), (4, 750), (8, 375)] {
            let plan = resolve(&settings, &catalog, np, Sharding::Rank).unwrap();
            assert_eq!(plan.steps_per_rank, steps, "NP={np}");
            assert!(plan.ranks.iter().all(|r| r.steps.len() as u64 == steps));
        }
    }

    #[test]
    fn study_memory_np8_rt8_is_12_4_gib_and_np16_is_refused() {
        let catalog = flux_catalog(500);
        let settings = study_settings(8);
        let plan = Plan::resolve(
            &settings,
            &catalog,
            &options(8, Sharding::Rank),
            &machine_24_gib(),
        )
        .unwrap();
        // 8 × 8 × 2 buffers of one ~99.1 MiB row group (rounded up to a page).
        assert_eq!(plan.memory.buffer_bytes, 103_915_520);
        assert_eq!(plan.memory.pool_bytes, 128 * 103_915_520);
        let gib = plan.memory.pool_bytes as f64 / (1u64 << 30) as f64;
        assert!((gib - 12.39).abs() < 0.01, "{gib}");
        assert!(plan.memory.total_bytes < 13 << 30);

        let err = Plan::resolve(
            &settings,
            &catalog,
            &options(16, Sharding::Rank),
            &machine_24_gib(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("memory budget 24."), "{err}");
        assert!(err.contains("exceeds MemAvailable 23.00 GiB"), "{err}");
        assert!(
            err.contains(
                "--read-threads 7 (at --prefetch 2), or --prefetch 1 (at --read-threads 8)"
            ),
            "{err}"
        );
    }

    #[test]
    fn memlock_binds_without_cap_ipc_lock_and_cgroup_counts() {
        let catalog = flux_catalog(500);
        let settings = study_settings(1);
        let mut limits = machine_24_gib();
        limits.cap_ipc_lock = false;
        let err = Plan::resolve(&settings, &catalog, &options(1, Sharding::Rank), &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exceeds RLIMIT_MEMLOCK (the pool is locked) 8.00 MiB"),
            "{err}"
        );
        assert!(err.contains("ulimit -l unlimited"), "{err}");
        assert!(
            err.contains("even --read-threads 1 --prefetch 1 does not fit"),
            "{err}"
        );

        let mut limits = machine_24_gib();
        limits.cgroup = Some(CgroupMemory {
            version: 2,
            path: "/sys/fs/cgroup/job".into(),
            limit_bytes: 4 << 30,
            usage_bytes: 1 << 30,
            reclaimable_bytes: 1 << 30,
        });
        let settings = study_settings(8);
        let err = Plan::resolve(&settings, &catalog, &options(4, Sharding::Rank), &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exceeds the cgroup v2 memory limit (room left) 4.00 GiB"),
            "{err}"
        );
        assert!(err.contains("--read-threads 5 (at --prefetch 2)"), "{err}");
        // --memory-budget caps a machine that would otherwise fit.
        let mut opts = options(1, Sharding::Rank);
        opts.memory_cap_bytes = Some(1 << 30);
        let err = Plan::resolve(&study_settings(8), &catalog, &opts, &machine_24_gib())
            .unwrap_err()
            .to_string();
        assert!(err.contains("exceeds --memory-budget 1.00 GiB"), "{err}");
    }

    /// Every planned row group, as (file, row group), with how many ranks plan it.
    fn planned_units(plan: &Plan) -> std::collections::BTreeMap<(usize, usize), usize> {
        let mut seen = std::collections::BTreeMap::new();
        for rank in &plan.ranks {
            for reader in &rank.readers {
                for get in &reader.gets {
                    for rg in get.first_row_group..get.first_row_group + get.row_groups {
                        *seen.entry((get.file, rg)).or_insert(0) += 1;
                    }
                }
            }
        }
        seen
    }

    /// Checks what must hold of any plan: schedules take exactly batch_size rows per step, every
    /// GET is consumed in order and released exactly once, GETs cover their row groups exactly.
    fn check_schedule(plan: &Plan) {
        let batch = plan.settings.batch_size;
        for rank in &plan.ranks {
            let mut consumed: Vec<Vec<u64>> =
                rank.readers.iter().map(|r| vec![0; r.gets.len()]).collect();
            let mut released: Vec<Vec<bool>> = rank
                .readers
                .iter()
                .map(|r| vec![false; r.gets.len()])
                .collect();
            for (s, takes) in rank.steps.iter().enumerate() {
                assert_eq!(takes.iter().map(|t| t.rows).sum::<u64>(), batch, "step {s}");
                for t in takes {
                    let get = rank.readers[t.reader].gets[t.get];
                    // Earlier GETs of the reader are fully consumed first.
                    assert!(released[t.reader][..t.get].iter().all(|&r| r));
                    consumed[t.reader][t.get] += t.rows;
                    assert!(consumed[t.reader][t.get] <= get.rows);
                    assert_eq!(t.releases, consumed[t.reader][t.get] == get.rows);
                    assert!(!released[t.reader][t.get]);
                    released[t.reader][t.get] = t.releases;
                }
            }
            for (r, reader) in rank.readers.iter().enumerate() {
                for (g, get) in reader.gets.iter().enumerate() {
                    assert!(
                        consumed[r][g] > 0,
                        "rank {} reader {r} get {g} unused",
                        rank.rank
                    );
                    let layout = &plan.catalog.files[get.file];
                    let first = layout.row_groups[get.first_row_group];
                    let last = layout.row_groups[get.first_row_group + get.row_groups - 1];
                    assert_eq!(get.offset, first.offset);
                    assert_eq!(get.offset + get.len_bytes, last.end());
                    assert!(get.row_groups <= plan.settings.coalesce_rgs as usize);
                }
            }
        }
    }

    #[test]
    fn rank_shares_are_disjoint_and_cover_each_planned_row_group_once() {
        let catalog = flux_catalog(50);
        for np in [1, 2, 3, 4, 8] {
            for rt in [1, 2, 3, 8] {
                for coalesce in [1, 2, 4, 8] {
                    let settings = flux_settings(&[
                        "dataset.num_files_train=50",
                        &format!("reader.read_threads={rt}"),
                        &format!("storage.storage_options.coalesce_rgs={coalesce}"),
                        "storage.storage_options.prefetch_workers=2",
                    ]);
                    let plan = resolve(&settings, &catalog, np, Sharding::Rank).unwrap();
                    check_schedule(&plan);
                    let seen = planned_units(&plan);
                    assert!(
                        seen.values().all(|&n| n == 1),
                        "np {np} rt {rt} c {coalesce}"
                    );
                    // Exactly the row groups the steps need: one 48-row group per step.
                    assert_eq!(
                        seen.len() as u64,
                        plan.steps_per_rank * u64::from(np),
                        "np {np} rt {rt} c {coalesce}"
                    );
                    let bytes: u64 = plan.ranks.iter().map(|r| r.bytes).sum();
                    assert_eq!(bytes, seen.len() as u64 * RG_BYTES);
                    // Shares are contiguous: rank r's units all precede rank r+1's.
                    let mut last_end = None;
                    for rank in &plan.ranks {
                        let mut units: Vec<(usize, usize)> = rank
                            .readers
                            .iter()
                            .flat_map(|rd| &rd.gets)
                            .flat_map(|g| {
                                (g.first_row_group..g.first_row_group + g.row_groups)
                                    .map(move |rg| (g.file, rg))
                            })
                            .collect();
                        units.sort();
                        if let Some(prev) = last_end {
                            assert!(units[0] > prev);
                        }
                        last_end = units.last().copied();
                    }
                }
            }
        }
    }

    #[test]
    fn readers_own_every_rt_th_file_and_batches_go_round_robin() {
        let catalog = flux_catalog(500);
        let settings = study_settings(4);
        let plan = resolve(&settings, &catalog, 8, Sharding::Rank).unwrap();
        // Rank 1 starts in the middle of file 62 (375 = 62 × 6 + 3 row groups for rank 0).
        let rank1 = &plan.ranks[1];
        let share_files: Vec<usize> = (62..=124).collect();
        for (k, reader) in rank1.readers.iter().enumerate() {
            let expected: Vec<usize> = share_files.iter().copied().skip(k).step_by(4).collect();
            assert_eq!(reader.files, expected, "reader {k}");
        }
        assert_eq!(rank1.readers[0].gets[0].first_row_group, 3);
        assert_eq!(rank1.readers[0].gets[0].offset, 4 + 3 * RG_BYTES);
        for (s, takes) in rank1.steps.iter().take(8).enumerate() {
            assert_eq!(takes.len(), 1);
            assert_eq!(takes[0].reader, s % 4, "step {s}");
        }
    }

    #[test]
    fn dlio_sharding_walks_the_same_files_on_every_rank() {
        let catalog = flux_catalog(500);
        for np in [1, 2, 4, 8] {
            for rt in [1, 2, 4, 8] {
                let settings = study_settings(rt);
                let plan = resolve(&settings, &catalog, np, Sharding::Dlio).unwrap();
                check_schedule(&plan);
                // DLIO: each rank reads the first steps × batch samples, i.e. the first
                // ceil(500 / NP) files, reader k taking files k, k + RT, ...
                let samples = plan.steps_per_rank * 48;
                let files = samples.div_ceil(288) as usize;
                assert_eq!(files, 500usize.div_ceil(np as usize));
                for rank in &plan.ranks {
                    assert_eq!(rank.readers, plan.ranks[0].readers);
                    for (k, reader) in rank.readers.iter().enumerate() {
                        let expected: Vec<usize> = (k..files).step_by(rt as usize).collect();
                        assert_eq!(reader.files, expected, "np {np} rt {rt} reader {k}");
                    }
                    assert_eq!(rank.bytes, plan.steps_per_rank * RG_BYTES);
                }
                // Each planned row group is read by every rank.
                assert!(planned_units(&plan).values().all(|&n| n == np as usize));
            }
        }
    }

    #[test]
    fn dlio_prefetch_factor_is_prefetch_size_over_read_threads_rounded_up() {
        // (prefetch_size, read_threads) → DLIO's DataLoader prefetch_factor.
        for (size, rt, factor) in [
            (2, 1, 2),
            (2, 2, 1),
            (2, 4, 1),
            (4, 3, 2),
            (8, 2, 4),
            (2, 0, 2),
        ] {
            assert_eq!(dlio_prefetch_factor(size, rt), factor, "{size} / {rt}");
        }
    }

    #[test]
    fn the_dlio_loader_queues_dlios_prefetch_factor_and_shards_as_dlio() {
        let catalog = flux_catalog(500);
        let dlio = |rt: u32, factor: Option<u32>| {
            let options = PlanOptions {
                loader: Loader::Dlio,
                prefetch_factor: factor,
                ..options(2, Sharding::Rank)
            };
            Plan::resolve(
                &study_settings(rt),
                &catalog,
                &options,
                &MemoryLimits::unlimited(),
            )
            .unwrap()
        };
        // prefetch_size 2 (DLIO's default): factor 2 at RT=1, 1 at RT=2 and RT=4.
        for (rt, factor) in [(1, 2), (2, 1), (4, 1)] {
            let plan = dlio(rt, None);
            assert_eq!(plan.prefetch_factor, Some(factor), "rt {rt}");
            assert_eq!(plan.window_per_reader, 2 + factor, "rt {rt}");
            // Each reader reads on until its window is full.
            for rank in &plan.ranks {
                assert_eq!(rank.overshoot_gets, (rt * (2 + factor)) as usize, "rt {rt}");
                assert_eq!(rank.overshoot_bytes, rank.overshoot_gets as u64 * RG_BYTES);
            }
            // Every rank walks the whole list: the plan says dlio, whatever --sharding said.
            assert_eq!(plan.options.sharding, Sharding::Dlio);
        }
        // --prefetch-factor overrides the formula.
        let plan = dlio(2, Some(3));
        assert_eq!((plan.prefetch_factor, plan.window_per_reader), (Some(3), 5));
        // ringload's loader queues nothing and keeps its sharding.
        let plan = resolve(&study_settings(2), &catalog, 2, Sharding::Rank).unwrap();
        assert_eq!((plan.prefetch_factor, plan.window_per_reader), (None, 2));
        assert_eq!(plan.options.sharding, Sharding::Rank);
    }

    #[test]
    fn coalesced_gets_span_consecutive_row_groups_of_one_file() {
        let catalog = flux_catalog(10);
        let settings = flux_settings(&["dataset.num_files_train=10", "reader.read_threads=2"]);
        assert_eq!(settings.coalesce_rgs, 8);
        let plan = resolve(&settings, &catalog, 1, Sharding::Rank).unwrap();
        check_schedule(&plan);
        let get = plan.ranks[0].readers[0].gets[0];
        // A file has 6 row groups, so a GET coalescing up to 8 is one whole file's data.
        assert_eq!(
            (get.row_groups, get.offset, get.len_bytes),
            (6, 4, 6 * RG_BYTES)
        );
        assert_eq!(plan.ranged(&get).last_byte(), 4 + 6 * RG_BYTES - 1);
        assert_eq!(
            plan.ranged(&get).range_header(),
            format!("bytes=4-{}", 4 + 6 * RG_BYTES - 1)
        );
        assert_eq!(plan.largest_get_bytes, 6 * RG_BYTES);
    }

    #[test]
    fn uneven_row_groups_still_schedule_whole_batches() {
        // 100-row groups under 48-row batches: batches straddle GETs.
        let mut catalog = flux_catalog(4);
        for f in &mut catalog.files {
            f.rows = 300;
            f.row_groups = (0..3)
                .map(|k| RowGroupSpan {
                    rows: 100,
                    offset: 4 + k * 1000,
                    len_bytes: 1000,
                })
                .collect();
        }
        let settings = flux_settings(&[
            "dataset.num_files_train=4",
            "dataset.num_samples_per_file=300",
            "reader.read_threads=3",
            "storage.storage_options.coalesce_rgs=1",
            "storage.storage_options.prefetch_workers=2",
        ]);
        for np in [1, 2, 3] {
            let plan = resolve(&settings, &catalog, np, Sharding::Rank).unwrap();
            check_schedule(&plan);
            assert!(planned_units(&plan).values().all(|&n| n == 1));
            assert_eq!(plan.steps_per_rank, 1200 / 48 / u64::from(np));
        }
        // A batch bigger than two GETs of one reader cannot be assembled with prefetch 2.
        let tiny = flux_settings(&[
            "dataset.num_files_train=4",
            "dataset.num_samples_per_file=300",
            "reader.batch_size=250",
            "storage.storage_options.coalesce_rgs=1",
            "storage.storage_options.prefetch_workers=2",
        ]);
        let err = resolve(&tiny, &catalog, 1, Sharding::Rank)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs 3 GETs of one reader at once, more than prefetch 2"),
            "{err}"
        );
    }

    #[test]
    fn impossible_plans_say_why() {
        let catalog = flux_catalog(2);
        let settings = flux_settings(&["dataset.num_files_train=2"]);
        let err = resolve(&settings, &catalog, 64, Sharding::Rank)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("0 steps per rank: floor(288 × 2 / 48 / 64) = 0"),
            "{err}"
        );
        let err = resolve(&settings, &catalog, 0, Sharding::Rank)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--np 0"), "{err}");
        // Footers with fewer rows than the workload promises.
        let mut short = flux_catalog(2);
        short.files[1].row_groups.truncate(2);
        short.files[1].rows = 96;
        let err = resolve(&settings, &short, 1, Sharding::Rank)
            .unwrap_err()
            .to_string();
        assert!(err.contains("hold 384 rows"), "{err}");
    }

    /// A whole-object workload's settings, with overrides.
    fn object_settings(name: &str, overrides: &[&str]) -> Settings {
        let mut cfg = RawConfig::load(name).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        Settings::resolve(&cfg).unwrap()
    }

    fn object_plan(s: &Settings, np: u32, sharding: Sharding) -> Result<Plan, PlanError> {
        let catalog = crate::catalog::computed_objects(s.objects.as_ref().unwrap(), s.num_files);
        resolve(s, &catalog, np, sharding)
    }

    /// Every (reader, GET) of a rank taken by its steps, with the rows taken.
    fn taken(rank: &RankPlan) -> std::collections::BTreeMap<(usize, usize), u64> {
        let mut rows = std::collections::BTreeMap::new();
        for take in rank.steps.iter().flatten() {
            *rows.entry((take.reader, take.get)).or_insert(0) += take.rows;
        }
        rows
    }

    #[test]
    fn whole_objects_get_one_whole_object_get_per_sample() {
        let s = object_settings("unet3d_b200", &["dataset.num_files_train=56"]);
        let plan = object_plan(&s, 2, Sharding::Rank).unwrap();
        // ⌊1 × 56 ÷ 7 ÷ 2⌋ = 4 steps per rank, 28 samples, 28 GETs of whole objects.
        assert_eq!(plan.steps_per_rank, 4);
        assert_eq!(plan.steps_formula, "floor(1 × 56 / 7 / 2) = 4");
        let objects = plan.catalog.objects.as_ref().unwrap();
        for rank in &plan.ranks {
            assert_eq!(rank.get_count, 28);
            for get in rank.readers.iter().flat_map(|r| &r.gets) {
                assert_eq!((get.offset, get.rows, get.row_groups), (0, 1, 1));
                assert_eq!(get.len_bytes, objects.size(get.file));
                let ranged = plan.ranged(get);
                assert_eq!(ranged.key, s.objects.as_ref().unwrap().key(get.file as u64));
                assert_eq!(
                    ranged.range_header(),
                    format!("bytes=0-{}", get.len_bytes - 1)
                );
            }
            // Every planned sample is taken exactly once.
            let rows = taken(rank);
            assert_eq!(rows.len(), 28);
            assert!(rows.values().all(|&r| r == 1));
        }
        // Disjoint contiguous shares: rank 0 files 0–27, rank 1 files 28–55.
        let files = |r: usize| -> Vec<usize> {
            let mut f: Vec<usize> = plan.ranks[r]
                .readers
                .iter()
                .flat_map(|rd| rd.files.iter().copied())
                .collect();
            f.sort_unstable();
            f
        };
        assert_eq!(files(0), (0..28).collect::<Vec<_>>());
        assert_eq!(files(1), (28..56).collect::<Vec<_>>());
        // The budget's buffers fit the largest object planned, not the mean.
        let largest = (0..56).map(|i| objects.size(i)).max().unwrap();
        assert_eq!(plan.largest_get_bytes, largest);
        assert!(plan.memory.buffer_bytes >= largest);
        assert!((largest as f64) > objects.size_range().1);
    }

    #[test]
    fn a_batch_is_dealt_over_the_readers_so_the_hold_does_not_grow_with_it() {
        // retinanet_b200: B 24, RT 8 → 3 samples of each reader per step, at the default
        // prefetch of 6 (one batch ahead). One reader taking the whole batch would hold 24.
        let s = object_settings("retinanet_b200", &["dataset.num_files_train=24000"]);
        assert_eq!(s.prefetch, 6);
        let plan = object_plan(&s, 8, Sharding::Rank).unwrap();
        assert_eq!(plan.steps_per_rank, 125);
        for rank in &plan.ranks {
            assert_eq!(rank.max_gets_held_per_reader, 3);
            for takes in &rank.steps {
                let mut per_reader = [0u64; 8];
                for t in takes {
                    per_reader[t.reader] += t.rows;
                    assert!(t.releases);
                }
                assert_eq!(per_reader, [3; 8]);
            }
        }
        // B 7 over RT 4: 2, 2, 2, 1, the reader that gives 1 rotating.
        let s = object_settings("unet3d_b200", &["dataset.num_files_train=56"]);
        let plan = object_plan(&s, 1, Sharding::Rank).unwrap();
        let rank = &plan.ranks[0];
        assert_eq!(rank.max_gets_held_per_reader, 2);
        let counts = |step: usize| -> Vec<u64> {
            let mut c = vec![0u64; 4];
            for t in &rank.steps[step] {
                c[t.reader] += t.rows;
            }
            c
        };
        assert_eq!(counts(0), [2, 2, 2, 1]);
        assert_eq!(counts(1), [2, 2, 1, 2]);
        assert_eq!(counts(2), [2, 1, 2, 2]);
        // The guard still holds: prefetch 2 at B 24, RT 4 needs 6 GETs of one reader.
        let s = object_settings(
            "retinanet_b200",
            &[
                "dataset.num_files_train=2400",
                "reader.read_threads=4",
                "storage.storage_options.prefetch_workers=2",
            ],
        );
        let err = object_plan(&s, 1, Sharding::Rank).unwrap_err().to_string();
        assert!(
            err.contains(
                "needs 6 GETs of one reader at once, more than prefetch 2; raise --prefetch to 6"
            ),
            "{err}"
        );
    }

    #[test]
    fn multi_sample_objects_are_shared_by_steps() {
        // resnet50: 1,251 samples per TFRecord file, one GET each; B 400 over RT 8 is 50 of
        // each reader per step, so a GET serves ~25 steps and a reader holds at most 2.
        let s = object_settings("resnet50_h100", &["dataset.num_files_train=16"]);
        let plan = object_plan(&s, 1, Sharding::Rank).unwrap();
        assert_eq!(plan.steps_per_rank, 16 * 1251 / 400);
        let rank = &plan.ranks[0];
        assert_eq!(rank.get_count, 16);
        assert!(rank.max_gets_held_per_reader <= 2);
        let rows: u64 = taken(rank).values().sum();
        assert_eq!(rows, plan.steps_per_rank * 400);
    }

    #[test]
    fn dlio_sharding_deals_files_round_robin_as_the_v3_fork_does() {
        // 10 files over 3 ranks: rank r gets files r, r + 3, r + 6 (⌊10 ÷ 3⌋ = 3); file 9 is
        // read by no rank. B 1: 3 steps per rank.
        let s = object_settings(
            "cosmoflow_h100",
            &["dataset.num_files_train=10", "reader.read_threads=2"],
        );
        let plan = object_plan(&s, 3, Sharding::Dlio).unwrap();
        assert_eq!(plan.options.sharding, Sharding::Dlio);
        assert_eq!(plan.steps_per_rank, 3);
        let lists: Vec<Vec<Vec<usize>>> = plan
            .ranks
            .iter()
            .map(|r| r.readers.iter().map(|rd| rd.files.clone()).collect())
            .collect();
        // Reader k takes files[k::RT] of the rank's list.
        assert_eq!(
            lists,
            vec![
                vec![vec![0, 6], vec![3]],
                vec![vec![1, 7], vec![4]],
                vec![vec![2, 8], vec![5]],
            ]
        );
        // The default stays ringload's disjoint contiguous shares.
        let plan = object_plan(&s, 3, Sharding::Rank).unwrap();
        assert_eq!(plan.ranks[1].readers[0].files, vec![3, 5]);
        // A share too small for its steps is refused with the arithmetic.
        let s = object_settings(
            "resnet50_h100",
            &["dataset.num_files_train=10", "reader.read_threads=1"],
        );
        let err = object_plan(&s, 3, Sharding::Dlio).unwrap_err().to_string();
        assert!(
            err.contains("--sharding dlio gives each of 3 ranks 3 files (⌊10 ÷ 3⌋), 3753 samples, and its steps need 4000"),
            "{err}"
        );
    }

    /// The files a rank reads, in its order: reader k took files[k::RT] of the list.
    fn rank_files(rank: &RankPlan) -> Vec<usize> {
        let rt = rank.readers.len();
        let total: usize = rank.readers.iter().map(|r| r.files.len()).sum();
        (0..total)
            .map(|i| rank.readers[i % rt].files[i / rt])
            .collect()
    }

    #[test]
    fn dlio_sharding_reshuffles_whole_objects_before_each_later_epoch() {
        // 103 files over 4 ranks, B 1, one sample per file: 25 steps, 25 files per rank.
        let s = object_settings(
            "cosmoflow_h100",
            &[
                "dataset.num_files_train=103",
                "reader.read_threads=2",
                "train.epochs=3",
            ],
        );
        let plan = object_plan(&s, 4, Sharding::Dlio).unwrap();
        assert!(plan.reshuffles());
        assert_eq!(plan.steps_per_rank, 25);
        for rank in 0..4 {
            assert_eq!(
                plan.reshuffled(0, rank).unwrap(),
                None,
                "epoch 0 is v3_shares'"
            );
        }
        for epoch in 1..3u32 {
            // The global permutation seeded 123 + e, dealt round-robin.
            let mut global: Vec<u32> = (0..103).collect();
            reshard::shuffle(&mut global, 123 + u64::from(epoch));
            let mut seen = std::collections::BTreeSet::new();
            for rank in 0..4 {
                let own = plan.reshuffled(epoch, rank).unwrap().unwrap();
                assert_eq!(
                    Some(&own),
                    plan.reshuffled(epoch, rank).unwrap().as_ref(),
                    "the same N, P and epoch give the same plan"
                );
                let files = rank_files(&own);
                assert_eq!(files.len(), 103 / 4);
                // Rank r's share of the deal, in the order its own seed 123 + e + 31r gives.
                let mut dealt: Vec<usize> =
                    (0..25).map(|j| global[rank + 4 * j] as usize).collect();
                reshard::shuffle(&mut dealt, 123 + u64::from(epoch) + 31 * rank as u64);
                assert_eq!(files, dealt, "epoch {epoch} rank {rank}");
                assert_ne!(
                    files,
                    rank_files(&plan.ranks[rank]),
                    "epoch {epoch} rank {rank}"
                );
                for f in &files {
                    assert!(seen.insert(*f), "file {f} on two ranks in epoch {epoch}");
                }
                // Only which objects differ: the steps and their shape are epoch 0's.
                assert_eq!(own.steps, plan.ranks[rank].steps);
                assert_eq!(own.get_count, plan.ranks[rank].get_count);
                let get = own.readers[0].gets[0];
                assert_eq!(
                    get.len_bytes,
                    plan.catalog.objects.as_ref().unwrap().size(get.file)
                );
            }
        }
        assert_ne!(
            plan.reshuffled(1, 0).unwrap(),
            plan.reshuffled(2, 0).unwrap(),
            "each epoch its own lists"
        );
        // Each epoch's bytes are its own objects' sizes (cosmoflow's vary).
        let sizes = |e: u32| -> u64 {
            (0..4)
                .flat_map(|r| reshard::epoch_files(103, 4, r, e))
                .map(|f| plan.catalog.objects.as_ref().unwrap().size(f))
                .sum()
        };
        assert_eq!(
            plan.bytes_per_epoch,
            (0..100)
                .map(|f| plan.catalog.objects.as_ref().unwrap().size(f))
                .sum::<u64>()
        );
        assert_eq!(
            plan.bytes_planned(),
            plan.bytes_per_epoch + sizes(1) + sizes(2)
        );
        assert_ne!(plan.bytes_planned(), plan.bytes_per_epoch * 3);
        // Any object may be read in some epoch: the buffers fit the largest.
        let objects = plan.catalog.objects.as_ref().unwrap();
        assert_eq!(
            plan.largest_get_bytes,
            objects.sizes().iter().copied().max().unwrap()
        );
        // ringload's own sharding, and one epoch, replay one schedule.
        let once = object_plan(&s, 4, Sharding::Rank).unwrap();
        assert!(!once.reshuffles());
        assert_eq!(once.reshuffled(1, 0).unwrap(), None);
        let one = object_settings(
            "cosmoflow_h100",
            &["dataset.num_files_train=103", "train.epochs=1"],
        );
        assert!(!object_plan(&one, 4, Sharding::Dlio).unwrap().reshuffles());
    }

    #[test]
    fn ten_million_objects_plan_in_bounded_memory() {
        // The catalog is 8 bytes per object (catalog::objects); the plan adds, per sample
        // read, one GET (48 bytes), one take (32 bytes) and a file index (8 bytes), and while
        // it resolves, the row-group sequence and the shares (24 bytes each). 10,000,000
        // retinanet-sized objects over 8 ranks resolve in ~3 s with a peak RSS of ~1.7 GB
        // (measured: /usr/bin/time -v on this test); the budget is for 8 × 8 × 6 buffers of
        // one object each.
        let s = object_settings(
            "retinanet_b200",
            &["dataset.num_files_train=10000000", "train.epochs=1"],
        );
        let plan = object_plan(&s, 8, Sharding::Rank).unwrap();
        assert_eq!(plan.steps_per_rank, 10_000_000 / 24 / 8);
        assert_eq!(plan.get_count as u64, plan.steps_per_rank * 24 * 8);
        assert_eq!(plan.largest_get_bytes, 568 * 568);
        assert_eq!(plan.memory.pool_bytes / plan.memory.buffer_bytes, 8 * 8 * 6);
    }
}
