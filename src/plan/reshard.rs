//! The per-epoch reshuffle of the DLIO fork that MLPerf Storage v3.0 runs, for whole-object
//! datasets under `--sharding dlio` (or `--loader dlio`).
//!
//! Epoch 0 deals file i to rank i mod P, each rank keeping ⌊N ÷ P⌋ (`plan::v3_shares`). Before
//! each later epoch e the fork redistributes the files with an alltoall shuffled with seed
//! 123 + e, then each rank shuffles its own list with seed 123 + e + 31·r (V3 `main.py`,
//! `config.py` `_reshard_files`). Here that is, for epoch e ≥ 1:
//!
//! 1. a global permutation of the N files, seeded 123 + e;
//! 2. dealt round-robin: file j of the permutation goes to rank j mod P, each rank keeping
//!    ⌊N ÷ P⌋ (the files past ⌊N ÷ P⌋ · P are read by no rank that epoch);
//! 3. each rank's list shuffled with seed 123 + e + 31·r.
//!
//! Every shuffle is Fisher–Yates, its k-th draw [`content::word`]`(seed, k)` (splitmix64's
//! finalizer over a counter) scaled to the range by a 128-bit multiply. The seeds and the
//! steps are the fork's; numpy's random stream is **not** reproduced bit for bit, so the lists
//! are not the very files DLIO's rank r reads in epoch e, but they have its shape: each epoch
//! a new, disjoint ⌊N ÷ P⌋ files per rank in a new order, the same for the same N, P and epoch.
//!
//! Nothing is kept: [`Plan::reshuffled`] makes a rank's plan for an epoch when the run needs it
//! (O(N) time, and 4 bytes per file while the permutation is made), before that epoch's
//! barrier; the plan holds epoch 0's alone. The schedule has the same shape every epoch (each
//! object holds `num_samples_per_file` samples, each rank ⌊N ÷ P⌋ objects), so the steps, the
//! GETs per reader and the most a reader holds are epoch 0's; only which objects, and their
//! sizes, differ (the budget's buffers are sized for the catalog's largest object then).

use super::{Loader, Plan, PlanError, RankPlan, RowGroupRef, plan_rank};
use crate::content;

/// The fork's base seed: epoch e's global shuffle is seeded `SEED + e`.
pub const SEED: u64 = 123;
/// Rank r's local shuffle is seeded `SEED + e + RANK_SEED_STRIDE · r`.
pub const RANK_SEED_STRIDE: u64 = 31;

/// Seed of epoch `epoch`'s global permutation.
pub fn global_seed(epoch: u32) -> u64 {
    SEED + u64::from(epoch)
}

/// Seed of rank `rank`'s local shuffle in epoch `epoch`.
pub fn rank_seed(epoch: u32, rank: usize) -> u64 {
    global_seed(epoch).wrapping_add(RANK_SEED_STRIDE.wrapping_mul(rank as u64))
}

/// Shuffles `items` in place (Fisher–Yates), the k-th draw from `content::word(seed, k)`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    for (k, i) in (1..items.len()).rev().enumerate() {
        let draw = content::word(seed, k as u64);
        // A uniform index in 0..=i: the high half of draw × (i + 1).
        let j = ((u128::from(draw) * (i as u128 + 1)) >> 64) as usize;
        items.swap(i, j);
    }
}

/// The files (catalog indices) rank `rank` of `ranks` reads in epoch `epoch` ≥ 1, in the order
/// it reads them: ⌊files ÷ ranks⌋ of them. `files` is below 2³² ([`Plan::reshuffled`] checks).
pub fn epoch_files(files: usize, ranks: usize, rank: usize, epoch: u32) -> Vec<usize> {
    debug_assert!(rank < ranks, "rank {rank} of {ranks}");
    debug_assert!(u32::try_from(files).is_ok(), "{files} files");
    let mut global: Vec<u32> = (0..files as u32).collect();
    shuffle(&mut global, global_seed(epoch));
    let mut mine: Vec<usize> = global
        .iter()
        .skip(rank)
        .step_by(ranks.max(1))
        .take(files / ranks.max(1))
        .map(|&f| f as usize)
        .collect();
    shuffle(&mut mine, rank_seed(epoch, rank));
    mine
}

impl Plan {
    /// Whether epochs after the first read their own files: a whole-object dataset sharded
    /// as the DLIO fork does (`--sharding dlio` or `--loader dlio`), for more than one epoch.
    pub fn reshuffles(&self) -> bool {
        self.catalog.objects.is_some() && self.options.reshuffles(self.settings.epochs)
    }

    /// The least a run of this plan takes: every step's compute, in lockstep, over every
    /// epoch (`steps_per_rank × computation_time × epochs`); I/O waits only add to it.
    pub fn compute_floor_s(&self) -> f64 {
        self.steps_per_rank as f64
            * self.settings.computation_time_s
            * f64::from(self.settings.epochs.max(1))
    }

    /// [`Plan::compute_floor_s`] in words when it is over `threshold_s`: the estimate a long
    /// run states before it starts.
    pub fn long_run_estimate(&self, threshold_s: f64) -> Option<String> {
        let floor = self.compute_floor_s();
        (floor > threshold_s).then(|| {
            format!(
                "this run takes at least {}: {} steps × {} s of compute × {} epoch(s) (I/O \
                 waits add to it); fewer files (--files), fewer epochs (train.epochs=N) or more \
                 ranks (--np) make it shorter",
                crate::units::duration(floor),
                crate::units::count(self.steps_per_rank),
                self.settings.computation_time_s,
                self.settings.epochs.max(1)
            )
        })
    }

    /// Bytes the plan asks for over every epoch, all ranks: epoch 0's for each epoch, or, when
    /// later epochs are reshuffled, each epoch's own (their objects' sizes differ).
    pub fn bytes_planned(&self) -> u64 {
        let epochs = self.settings.epochs;
        if !self.reshuffles() {
            return self.bytes_per_epoch * u64::from(epochs);
        }
        let later = (1..epochs).flat_map(|e| (0..self.ranks.len()).map(move |r| (e, r)));
        let later_bytes: u64 = later
            .filter_map(|(e, r)| self.reshuffled(e, r).ok().flatten())
            .map(|p| p.bytes)
            .sum();
        self.bytes_per_epoch + later_bytes
    }

    /// Rank `rank`'s plan for epoch `epoch` when that epoch reads other files than epoch 0
    /// ([`Plan::reshuffles`], `epoch` ≥ 1): [`epoch_files`]'s list, read as epoch 0
    /// reads its share (readers take files[k::RT], the same steps and schedule). `None`: the
    /// epoch walks `ranks[rank]`. Made on demand, O(N), and not kept: a run plans each epoch
    /// of a rank before that epoch's barrier.
    pub fn reshuffled(&self, epoch: u32, rank: usize) -> Result<Option<RankPlan>, PlanError> {
        let Some(objects) = self.catalog.objects.as_ref().filter(|_| epoch > 0) else {
            return Ok(None);
        };
        if !self.reshuffles() {
            return Ok(None);
        }
        if u32::try_from(objects.len()).is_err() {
            return Err(PlanError::Unsatisfiable(format!(
                "--sharding dlio reshuffles at most 2³² objects per epoch and the dataset has \
                 {}; use --sharding rank or train.epochs=1",
                objects.len()
            )));
        }
        let files = epoch_files(objects.len(), self.ranks.len(), rank, epoch);
        let share: Vec<RowGroupRef> = files
            .into_iter()
            .map(|file| RowGroupRef {
                file,
                row_group: 0,
                rows: objects.samples_per_file,
            })
            .collect();
        let overshoot = match self.options.loader {
            Loader::Dlio => self.window_per_reader as usize,
            Loader::Ringload => 0,
        };
        plan_rank(
            rank,
            &share,
            &self.catalog,
            &self.settings,
            self.steps_per_rank,
            overshoot,
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn shuffle_is_a_permutation_fixed_by_its_seed() {
        let mut a: Vec<u32> = (0..1000).collect();
        let mut b = a.clone();
        shuffle(&mut a, 124);
        shuffle(&mut b, 124);
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, (0..1000).collect::<Vec<u32>>(), "it moves things");
        let mut c: Vec<u32> = (0..1000).collect();
        shuffle(&mut c, 125);
        assert_ne!(a, c, "another seed, another order");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..1000).collect::<Vec<u32>>(),
            "nothing lost or doubled"
        );
        // Short lists are left as they are or swapped, never read past.
        let mut empty: [u32; 0] = [];
        shuffle(&mut empty, 1);
        let mut one = [7];
        shuffle(&mut one, 1);
        assert_eq!(one, [7]);
    }

    #[test]
    fn each_rank_gets_a_disjoint_floor_share_dealt_from_the_global_permutation() {
        let (n, p) = (103, 4);
        for epoch in 1..4 {
            let mut global: Vec<u32> = (0..n as u32).collect();
            shuffle(&mut global, SEED + u64::from(epoch));
            let mut seen = BTreeSet::new();
            for rank in 0..p {
                let files = epoch_files(n, p, rank, epoch);
                assert_eq!(files.len(), n / p);
                // The deal: positions rank, rank + P, … of the permutation, then the rank's
                // own shuffle with 123 + e + 31r.
                let mut dealt: Vec<usize> =
                    (0..n / p).map(|j| global[rank + j * p] as usize).collect();
                shuffle(&mut dealt, 123 + u64::from(epoch) + 31 * rank as u64);
                assert_eq!(files, dealt, "epoch {epoch} rank {rank}");
                for f in files {
                    assert!(seen.insert(f), "file {f} on two ranks in epoch {epoch}");
                }
            }
            assert_eq!(seen.len(), (n / p) * p);
        }
    }
}
