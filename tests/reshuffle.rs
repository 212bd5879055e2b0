//! `--sharding dlio` on a whole-object workload reads each later epoch's own files, as the DLIO
//! fork of MLPerf Storage v3.0 reshards them: both engines against the embedded default, the
//! keys of every GET taken from requests.csv and checked against the reshuffle restated here
//! (a permutation of the files seeded 123 + e dealt round-robin to the ranks, ⌊N ÷ P⌋ each,
//! then each rank's list shuffled with seed 123 + e + 31r; Fisher–Yates over splitmix64 words).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::run;

/// retinanet_b200 with 480 files over 2 ranks: B 24, 10 steps, 240 files per rank, 8 readers.
const FILES: usize = 480;
const NP: usize = 2;
const READ_THREADS: usize = 8;

/// Fisher–Yates, the k-th draw `content::word(seed, k)` scaled by a 128-bit multiply.
fn shuffle<T>(items: &mut [T], seed: u64) {
    for (k, i) in (1..items.len()).rev().enumerate() {
        let draw = ringload::content::word(seed, k as u64);
        let j = ((u128::from(draw) * (i as u128 + 1)) >> 64) as usize;
        items.swap(i, j);
    }
}

/// The files rank `rank` reads in epoch `epoch`, in its order.
fn rank_files(epoch: u64, rank: usize) -> Vec<usize> {
    if epoch == 0 {
        // Round-robin: file i to rank i mod P, ⌊N ÷ P⌋ each, in index order.
        return (rank..FILES).step_by(NP).take(FILES / NP).collect();
    }
    let mut global: Vec<usize> = (0..FILES).collect();
    shuffle(&mut global, 123 + epoch);
    let mut mine: Vec<usize> = global
        .into_iter()
        .skip(rank)
        .step_by(NP)
        .take(FILES / NP)
        .collect();
    shuffle(&mut mine, 123 + epoch + 31 * rank as u64);
    mine
}

/// The object index in DLIO's `img_<i>_of_<N>.jpeg`.
fn index(key: &str) -> usize {
    let name = key.rsplit('/').next().unwrap();
    let digits = name
        .strip_prefix("img_")
        .unwrap()
        .split('_')
        .next()
        .unwrap();
    digits.parse().unwrap()
}

#[test]
fn dlio_sharding_reads_each_later_epochs_reshuffled_files_with_both_engines() {
    for engine in ["uring", "baseline"] {
        let results = tempfile::tempdir().unwrap();
        let (code, _, stderr) = run(&[
            "run",
            "retinanet_b200",
            &format!("dataset.num_files_train={FILES}"),
            "train.epochs=2",
            "train.computation_time=0",
            "--np",
            &NP.to_string(),
            "--sharding",
            "dlio",
            "--engine",
            engine,
            "--output",
            results.path().to_str().unwrap(),
        ]);
        // Exit 1: no compute gives no AU, a missed target; the run completed.
        assert!(code == 0 || code == 1, "{engine}: {stderr}");
        let summary = std::fs::read_to_string(results.path().join("summary.json")).unwrap();
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
        assert_eq!(summary["outcome"], "completed", "{engine}");
        assert_eq!(summary["requests"], 2 * FILES as u64, "{engine}");
        assert_eq!(summary["bytes_read"], summary["bytes_planned"], "{engine}");
        let csv = std::fs::read_to_string(results.path().join("requests.csv")).unwrap();
        // (rank, epoch) → (reader, get) → object index.
        let mut read: BTreeMap<(usize, u64), BTreeMap<(usize, usize), usize>> = BTreeMap::new();
        let mut lines = csv.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with("rank,epoch,reader,get,key,")
        );
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            let (rank, epoch) = (f[0].parse().unwrap(), f[1].parse().unwrap());
            let get = (f[2].parse().unwrap(), f[3].parse().unwrap());
            let first = read
                .entry((rank, epoch))
                .or_default()
                .insert(get, index(f[4]));
            assert_eq!(first, None, "{engine}: one row per GET: {line}");
        }
        assert_eq!(read.len(), NP * 2, "{engine}: every rank, both epochs");
        for rank in 0..NP {
            let mut sets = Vec::new();
            for epoch in 0..2 {
                let files = rank_files(epoch, rank);
                // Reader k walks files[k::RT] of the rank's list, one GET per object.
                let expected: BTreeMap<(usize, usize), usize> = files
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| ((i % READ_THREADS, i / READ_THREADS), f))
                    .collect();
                assert_eq!(
                    read[&(rank, epoch)],
                    expected,
                    "{engine}: rank {rank} epoch {epoch}"
                );
                sets.push(files.into_iter().collect::<BTreeSet<usize>>());
            }
            assert_ne!(sets[0], sets[1], "{engine}: rank {rank} reads other files");
        }
        // No file on two ranks in an epoch.
        let epoch_1: BTreeSet<usize> = (0..NP).flat_map(|r| rank_files(1, r)).collect();
        assert_eq!(epoch_1.len(), FILES / NP * NP);
    }
}
