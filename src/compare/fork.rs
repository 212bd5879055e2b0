//! The ways the DLIO fork that MLPerf Storage v3.0 ran (russfellows/dlio_benchmark at 21c0723)
//! changes a run's traffic and steps against the formula `DLIO_local_changes` (and ringload)
//! follows, found in a DLIO run's own output so `compare` can name them with the bytes and steps
//! that follow (docs/dlio-versions.md lists every known difference, with sources):
//!
//! - **Every rank reads the whole file list** (the fork's `main.py` gives each rank all N files;
//!   each DataLoader worker takes every W-th, `torch_data_loader.py`): a rank stops only at the
//!   step cap ⌊s·N ÷ (B·P)⌋, so at NP P the store is read up to P times over. Seen in the run's
//!   logs: each worker prints `[ITER…] … total_files=M`, and M = N at P > 1.
//! - **Steps lost to each worker's partial batch** (the fork batches per worker and drops each
//!   worker's remainder): worker k of W holds nₖ = ⌈(n − k) ÷ W⌉ of the rank's n files and gives
//!   ⌊nₖ·s ÷ B⌋ batches, so a rank runs min(T, Σₖ ⌊nₖ·s ÷ B⌋) steps where the formula gives T.
//!   Seen in each rank's `N_output.json`.

use std::path::Path;

/// What the formulas need of a DLIO run: its summary's and its configuration's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunShape {
    /// `num_accelerators`.
    pub ranks: u64,
    /// `num_files_train`.
    pub files: u64,
    pub samples_per_file: u64,
    /// `reader.batch_size`.
    pub batch: u64,
    /// `reader.read_threads` as configured.
    pub read_threads: u64,
    /// The host's CPUs and the ranks per host: `read_threads: 1` is raised by DLIO to
    /// min(CPUs ÷ ranks per host, 8) when that is more (its `config.py`).
    pub host_cpus: Option<u64>,
    pub ranks_per_host: u64,
    /// `dataset.record_length_bytes`, for the bytes that follow.
    pub record_bytes: Option<u64>,
}

impl RunShape {
    /// The formula's steps per rank per epoch: ⌊s·N ÷ (B·P)⌋.
    pub fn formula_steps(&self) -> u64 {
        self.samples_per_file.saturating_mul(self.files)
            / self.batch.saturating_mul(self.ranks).max(1)
    }

    /// The DataLoader workers each rank may have run: the configured read threads, and with
    /// `read_threads: 1` also DLIO's automatic count.
    fn worker_counts(&self) -> Vec<u64> {
        let mut counts = vec![self.read_threads.max(1)];
        if self.read_threads == 1
            && let Some(cpus) = self.host_cpus
        {
            let auto = (cpus / self.ranks_per_host.max(1)).min(8);
            if auto > 1 {
                counts.push(auto);
            }
        }
        counts
    }

    /// Batches `workers` workers give from `files` files when each drops its partial batch.
    pub fn batches_per_worker(&self, files: u64, workers: u64) -> u64 {
        // A DataLoader has at most a few dozen workers: a larger figure is not one (no loop
        // over it).
        let w = workers.clamp(1, 4096);
        (0..w.min(files.max(1)))
            .map(|k| {
                files
                    .saturating_sub(k)
                    .div_ceil(w)
                    .saturating_mul(self.samples_per_file)
                    / self.batch.max(1)
            })
            .fold(0, u64::saturating_add)
    }
}

/// What the fork did, with the bytes and steps that follow: lines for `compare`'s explanation
/// (empty when nothing shows). `steps[r][e]`: the steps rank `r` ran in epoch `e` (from its
/// `N_output.json`).
pub fn ways(folder: &Path, shape: &RunShape, steps: &[Vec<u64>]) -> Vec<String> {
    let mut lines = Vec::new();
    let whole_list = whole_list_seen(folder, shape);
    if let Some(line) = whole_list.as_ref() {
        lines.push(line.clone());
    }
    // The rank's list: all N files under the fork's way, else ⌊N ÷ P⌋.
    let listed = if whole_list.is_some() || shape.ranks == 1 {
        shape.files
    } else {
        shape.files / shape.ranks.max(1)
    };
    if let Some(line) = partial_batches(shape, listed, steps) {
        lines.push(line);
    }
    lines
}

/// The logs' `[ITER…] total_files=M` lines, when M = N at NP > 1: the line that says so.
fn whole_list_seen(folder: &Path, shape: &RunShape) -> Option<String> {
    if shape.ranks < 2 {
        return None;
    }
    let mut totals = Vec::new();
    for text in logs(folder) {
        for line in text.lines().filter(|l| l.contains("[ITER")) {
            let total = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("total_files="))
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(total) = total {
                totals.push(total);
            }
        }
    }
    if totals.is_empty() || !totals.iter().all(|&t| t == shape.files) {
        return None;
    }
    let (p, n) = (shape.ranks, shape.files);
    let bytes = |files: u64| {
        shape.record_bytes.map_or(String::new(), |b| {
            format!(" (about {})", crate::units::bytes(files.saturating_mul(b)))
        })
    };
    Some(format!(
        "every rank read the whole file list: the run's logs show its DataLoader workers \
         splitting all {n} files (total_files={n}) on each of its {p} ranks, as the DLIO fork \
         at 21c0723 does; DLIO_local_changes, which ringload follows, gives each rank {} (⌊N ÷ \
         P⌋). Each rank reads until it has run ⌊s·N ÷ (B·P)⌋ = {} steps, up to all {n} \
         files{}, so the store served up to {p}× the dataset{} while DLIO counted {} samples \
         in all; a ringload run that deals disjoint shares (its whole-object runs; Parquet \
         without --loader dlio) reads about 1/{p} of those bytes, so a storage share measured \
         by it is for a lighter load than DLIO's",
        n / p,
        shape.formula_steps(),
        bytes(n),
        bytes(n.saturating_mul(p)),
        shape
            .formula_steps()
            .saturating_mul(shape.batch)
            .saturating_mul(p),
    ))
}

/// The line for ranks that ran fewer steps than the formula, when partial worker batches
/// explain it (or the plain shortfall when they do not).
fn partial_batches(shape: &RunShape, listed: u64, steps: &[Vec<u64>]) -> Option<String> {
    let t = shape.formula_steps();
    let short: Vec<(usize, usize, u64)> = steps
        .iter()
        .enumerate()
        .flat_map(|(r, epochs)| {
            epochs
                .iter()
                .enumerate()
                .filter(|(_, s)| **s < t)
                .map(move |(e, s)| (r, e + 1, *s))
        })
        .collect();
    let &(rank, epoch, ran) = short.first()?;
    let where_ = format!(
        "rank {rank} ran {ran} steps in epoch {epoch} where the formula gives ⌊s·N ÷ (B·P)⌋ = \
         ⌊{}·{} ÷ ({}·{})⌋ = {t}{}",
        shape.samples_per_file,
        shape.files,
        shape.batch,
        shape.ranks,
        if short.len() > 1 {
            format!(" ({} rank-epochs short in all)", short.len())
        } else {
            String::new()
        }
    );
    let explained = shape
        .worker_counts()
        .into_iter()
        .find(|&w| t.min(shape.batches_per_worker(listed, w)) == ran);
    Some(match explained {
        Some(w) => {
            let dropped = listed
                .saturating_mul(shape.samples_per_file)
                .saturating_sub(ran.saturating_mul(shape.batch));
            format!(
                "{where_}: each of its {w} DataLoader workers batches its own files and drops \
                 its last partial batch (the DLIO fork at 21c0723 batches per worker), so its \
                 {listed} files give {ran} batches of {}; the rank read all {listed} files, \
                 and {dropped} of their samples were never counted: AU and samples/s are for \
                 {} samples, the bytes read are for {}",
                shape.batch,
                ran.saturating_mul(shape.batch),
                listed.saturating_mul(shape.samples_per_file),
            )
        }
        None => format!(
            "{where_}; partial worker batches do not explain it (with {} worker(s), each \
             dropping its partial batch, the rank would run {})",
            shape.read_threads.max(1),
            t.min(shape.batches_per_worker(listed, shape.read_threads.max(1)))
        ),
    })
}

/// Steps each rank ran per epoch, from its `N_output.json` (each block's `proc` list holds
/// one entry per step); ranks whose file is missing or unreadable are left out.
pub fn steps_of(folder: &Path, ranks: u64) -> Vec<Vec<u64>> {
    let mut all = Vec::new();
    for rank in 0..ranks.min(4096) {
        let path = folder.join(format!("{rank}_output.json"));
        let Some(output) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        else {
            break;
        };
        let mut epochs: Vec<(u64, u64)> = output
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(epoch, figures)| {
                let epoch = epoch.parse::<u64>().ok()?;
                let proc = figures["proc"].as_object()?;
                let steps = proc
                    .values()
                    .filter_map(|v| v.as_array())
                    .map(|v| v.len() as u64)
                    .sum();
                Some((epoch, steps))
            })
            .collect();
        epochs.sort();
        all.push(epochs.into_iter().map(|(_, s)| s).collect());
    }
    all
}

/// The run's logs kept beside its summary: mpirun's output, `dlio.log`, mlpstorage's
/// `*.stdout.log` (at most 64 MiB each).
fn logs(folder: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut names: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".log"))
                && std::fs::metadata(p).is_ok_and(|m| m.len() <= 64 << 20)
        })
        .collect();
    names.sort();
    names
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ranks: u64, files: u64, spf: u64, batch: u64, rt: u64) -> RunShape {
        RunShape {
            ranks,
            files,
            samples_per_file: spf,
            batch,
            read_threads: rt,
            host_cpus: Some(2),
            ranks_per_host: ranks,
            record_bytes: None,
        }
    }

    /// The fork's formulas: 8 files of 1 sample in batches of 7 over 4 workers give no batch
    /// (each worker holds 2 samples) where the formula gives 1; flux_tiny's 16 files of 24
    /// rows at B 13 over 2 workers give 28 where it gives 29.
    #[test]
    fn partial_worker_batches_as_the_fork_drops_them() {
        let tiny = shape(1, 8, 1, 7, 4);
        assert_eq!(tiny.formula_steps(), 1);
        assert_eq!(tiny.batches_per_worker(8, 4), 0);
        let flux = shape(1, 16, 24, 13, 2);
        assert_eq!(flux.formula_steps(), 29);
        assert_eq!(flux.batches_per_worker(16, 2), 28);
        let dir = tempfile::tempdir().unwrap();
        let lines = ways(dir.path(), &flux, &[vec![28]]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("rank 0 ran 28 steps in epoch 1"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("drops its last partial batch"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("20 of their samples were never counted"),
            "{lines:?}"
        );
        // A run of the formula's steps: nothing to say.
        assert!(ways(dir.path(), &flux, &[vec![29]]).is_empty());
        // Short for another reason: said, and not blamed on the batches.
        let other = ways(dir.path(), &flux, &[vec![20]]);
        assert!(other[0].contains("do not explain it"), "{other:?}");
    }
}
