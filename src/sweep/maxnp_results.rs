//! `sweep --find-max-np --results-dir DIR`: MLPerf's results tree holds the answer's runs only.
//!
//! Each run of the search writes its leaf into its own point folder (`points/NAME/mlperf/`,
//! the user's `--system`); once the search has its answer, the leaves of the answer NP's runs —
//! the warm-up and the timed runs, as MLPerf counts them (6) — are copied into DIR, so DIR
//! holds one configuration per model as `mlpstorage` expects, and the other NPs' leaves stay
//! beside their points. With several families (`--engine uring,baseline`, …) each family's
//! runs go under `<system>-<family>` so no two configurations share a model folder.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::maxnp::FindMaxNp;

/// Where a run of the search writes its leaf: its own point folder.
pub fn staging(point_folder: &Path) -> PathBuf {
    point_folder.join("mlperf")
}

/// Copies the leaves of every family's answer runs from `output/points/NAME/mlperf/` into
/// `results_dir`; returns one line per family saying where they went.
pub fn gather(output: &Path, results_dir: &Path, find: &FindMaxNp) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let several = find.families.len() > 1;
    for family in &find.families {
        let Some(outcome) = family.last_pass() else {
            lines.push(format!(
                "{}: no NP held AU; nothing written to {}",
                family.key,
                results_dir.display()
            ));
            continue;
        };
        let mut copied = 0usize;
        let mut checked: Vec<PathBuf> = Vec::new();
        for run in &outcome.runs {
            let staged = staging(&output.join("points").join(&run.name));
            for leaf in leaves(&staged)? {
                let relative = leaf.strip_prefix(&staged).expect("a leaf under its root");
                let mut parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if several && let Some(system) = parts.first_mut() {
                    *system = format!("{system}-{}", family.key);
                }
                // Two runs that started in the same second (short runs, their own folders)
                // take the next free second, as `run --results-dir` does in one folder.
                let Some(ts) = parts.pop() else { continue };
                let parent = results_dir.join(parts.iter().collect::<PathBuf>());
                if !checked.contains(&parent) {
                    let before = std::fs::read_dir(&parent).map_or(0, |d| d.count());
                    if before > 0 {
                        lines.push(format!(
                            "{}: {} held {before} runs already (an earlier search's?): \
                             mlpstorage expects one configuration's 6 runs per model folder; \
                             give each search its own --results-dir",
                            family.key,
                            parent.display()
                        ));
                    }
                    checked.push(parent.clone());
                }
                let ts = free_second(&parent, &ts)?;
                copy_leaf(&leaf, &parent.join(&ts.0))?;
                if let Some(old) = ts.1 {
                    rename_metadata(&parent.join(&ts.0), &old, &ts.0)?;
                }
                copied += 1;
            }
        }
        for parent in &checked {
            crate::results::write_index(parent)
                .with_context(|| format!("writing {}/results.json", parent.display()))?;
        }
        lines.push(format!(
            "{}: the {copied} runs of NP={} (1 warm-up + {} timed) in {}",
            family.key,
            outcome.np,
            copied.saturating_sub(1),
            results_dir.display()
        ));
    }
    Ok(lines)
}

/// Every leaf under `root`: a folder holding `summary.json` (mlpstorage's rule), in path order.
fn leaves(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    if !root.exists() {
        return Ok(found);
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("summary.json").is_file() {
            found.push(dir);
            continue;
        }
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `ts` (`YYYYMMDD_HHmmss`) if no folder of that name is under `parent`, else the next second
/// that is free, with the name it replaces.
fn free_second(parent: &Path, ts: &str) -> anyhow::Result<(String, Option<String>)> {
    if !parent.join(ts).exists() {
        return Ok((ts.to_string(), None));
    }
    let mut t =
        parse_folder_time(ts).with_context(|| format!("a leaf named {ts}, not YYYYMMDD_HHmmss"))?;
    loop {
        t += std::time::Duration::from_secs(1);
        let next = crate::results::folder_time(t);
        if !parent.join(&next).exists() {
            return Ok((next, Some(ts.to_string())));
        }
    }
}

/// The UTC time a `YYYYMMDD_HHmmss` folder names.
fn parse_folder_time(ts: &str) -> Option<std::time::SystemTime> {
    let (date, time) = ts.split_once('_')?;
    if date.len() != 8 || time.len() != 6 {
        return None;
    }
    let n = |s: &str| s.parse::<i64>().ok();
    let (y, m, d) = (n(&date[..4])?, n(&date[4..6])?, n(&date[6..])?);
    let (hh, mm, ss) = (n(&time[..2])?, n(&time[2..4])?, n(&time[4..])?);
    let (month, day) = (u32::try_from(m).ok()?, u32::try_from(d).ok()?);
    let days = crate::units::days_from_civil(y, month, day);
    let secs = u64::try_from(days * 86_400 + hh * 3_600 + mm * 60 + ss).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// A leaf renamed from `old` to `new` seconds: its `<type>_<ts>_metadata.json` follows.
fn rename_metadata(leaf: &Path, old: &str, new: &str) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(leaf)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with("_metadata.json") && name.contains(old) {
            let renamed = name.replace(old, new);
            std::fs::rename(leaf.join(&name), leaf.join(&renamed))
                .with_context(|| format!("renaming {name} in {}", leaf.display()))?;
            // Its run_datetime names the folder too.
            let path = leaf.join(&renamed);
            let text = std::fs::read_to_string(&path)?;
            if let Ok(mut meta) = serde_json::from_str::<serde_json::Value>(&text)
                && meta["run_datetime"] == old
            {
                meta["run_datetime"] = new.into();
                std::fs::write(&path, serde_json::to_string_pretty(&meta)? + "\n")?;
            }
        }
    }
    Ok(())
}

/// Copies one leaf (its files and `dlio_config/`) to `to`.
fn copy_leaf(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_leaf(&path, &dest)?;
        } else {
            std::fs::copy(&path, &dest)
                .with_context(|| format!("copying {} to {}", path.display(), dest.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_times_read_back_as_the_time_they_name() {
        for secs in [0u64, 951_782_400, 1_796_000_000, 1_796_601_599] {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let ts = crate::results::folder_time(t);
            assert_eq!(parse_folder_time(&ts), Some(t), "{ts}");
        }
        assert_eq!(parse_folder_time("2026120_101010"), None);
        assert_eq!(parse_folder_time("x"), None);
    }

    #[test]
    fn a_taken_second_moves_to_the_next_free_one_with_its_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path();
        std::fs::create_dir_all(parent.join("20261206_235959")).unwrap();
        std::fs::create_dir_all(parent.join("20261207_000000")).unwrap();
        let (ts, old) = free_second(parent, "20261206_235959").unwrap();
        assert_eq!(
            (ts.as_str(), old.as_deref()),
            ("20261207_000001", Some("20261206_235959"))
        );
        assert_eq!(
            free_second(parent, "20261206_120000").unwrap(),
            ("20261206_120000".into(), None)
        );
        let leaf = parent.join(&ts);
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(leaf.join("training_20261206_235959_metadata.json"), "{}").unwrap();
        rename_metadata(&leaf, "20261206_235959", &ts).unwrap();
        assert!(
            leaf.join("training_20261207_000001_metadata.json")
                .is_file()
        );
    }
}
