//! `run --results-dir DIR`: one run written where MLPerf Storage's tools look for it (the
//! reference's part B4): `DIR/<system>/training/<model>/run/<YYYYMMDD_HHmmss>/`, or
//! `DIR/<system>/checkpointing/<model>/<ts>/`, a leaf holding DLIO's files under DLIO's names —
//! `summary.json`, `<rank>_output.json`, `<rank>_per_epoch_stats.json`,
//! `dlio_config/{config,hydra,overrides}.yaml`, `<type>_<ts>_metadata.json`, `dlio.log`,
//! `<type>_run.{stdout,stderr}.log` — and `provenance.json`, every file marked as ringload's.
//!
//! Times are UTC (DLIO writes local time). No secret reaches a file: command lines, overrides
//! and configuration values of secret keys are replaced by [`REDACTED`].
//!
//! The DLIO-shaped JSON of each kind of run is built by [`dlio`].

mod config_files;
pub mod dlio;
mod leaf;
pub mod metadata;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value as Json, json};

use crate::cluster::Cluster;
use crate::exit::UsageError;
pub use config_files::{command_line, mlperf_yaml_model_name, overrides};
use config_files::{config_yaml, hydra_yaml, list_yaml, task_overrides};
pub use leaf::{
    Benchmark, Leaf, LeafCommand, TOOL, VERSION, accelerator_of, dlio_time, folder_time,
    host_figures, made_by, mlperf_model,
};

/// Writes the leaf; its path.
pub fn write(leaf: &Leaf) -> anyhow::Result<PathBuf> {
    let root = leaf.root;
    let system = leaf.system.clone().unwrap_or_else(Cluster::host);
    check_name("--system", &system)?;
    let model = mlperf_model(leaf.model);
    let parent = match leaf.benchmark {
        Benchmark::Training => root
            .join(&system)
            .join("training")
            .join(&model)
            .join(leaf.command.word()),
        Benchmark::Checkpointing => root.join(&system).join("checkpointing").join(&model),
    };
    let fail = |what: &str, e: std::io::Error| {
        UsageError(format!(
            "--results-dir {}: cannot write {what} ({e}); choose another folder",
            root.display()
        ))
    };
    std::fs::create_dir_all(&parent).map_err(|e| fail("its folders", e))?;
    let (dir, ts) = new_leaf(&parent, leaf.start).map_err(|e| fail("a run's folder", e))?;
    let kind = leaf.benchmark.word();
    let command = command_line(std::env::args());
    let (memory_gib, cpus) = host_figures();
    let host = Cluster::host();
    let hosts = leaf.hosts.max(1) as usize;

    let mut summary = Map::new();
    summary.insert("start".into(), dlio_time(leaf.start).into());
    summary.insert("num_accelerators".into(), leaf.np.into());
    summary.insert("num_hosts".into(), hosts.into());
    summary.insert("hostname".into(), host.clone().into());
    summary.extend(leaf.summary.clone());
    summary.insert("host_cpu_count".into(), json!(vec![cpus; hosts]));
    summary.insert("host_processor_name".into(), "".into());
    summary.insert("host_memory_GB".into(), json!(vec![memory_gib; hosts]));
    summary.insert("end".into(), dlio_time(leaf.end).into());
    summary.insert("generated_by".into(), made_by());

    let metadata = metadata::metadata(leaf, &ts, &command, &system);
    let provenance = json!({
        "tool": TOOL,
        "version": VERSION,
        "generated_by": made_by(),
        "made_by": "ringload, not DLIO: these files follow DLIO's and mlpstorage's names and \
                    shapes so that mlpstorage's tools read them; the I/O was ringload's",
        "command": command,
        "workload": leaf.config.source.name,
        "workload_source": leaf.config.source.path,
        "benchmark_type": kind,
        "model": model,
        "system": system,
        "start": dlio_time(leaf.start),
        "end": dlio_time(leaf.end),
        "times": "UTC (DLIO writes local time)",
        "per_host_figures": "host_memory_GB and host_cpu_count are this host's (process 0's), \
                             repeated per host",
        "not_dlio": [
            "no .mlps-code-image: mlpstorage's code checksum belongs to a DLIO run",
            "dlio.log is ringload's report, not DLIO's log",
            "per-epoch start and end times are the run's start plus each rank's measured windows",
        ],
    });
    let mut files: Vec<(PathBuf, String)> = vec![
        (dir.join("summary.json"), pretty(&Json::Object(summary))),
        (
            dir.join(format!("{kind}_{ts}_metadata.json")),
            pretty(&metadata),
        ),
        (dir.join("provenance.json"), pretty(&provenance)),
        (
            dir.join("ringload_summary.json"),
            pretty(&leaf.ringload_summary),
        ),
        (
            dir.join("dlio.log"),
            format!(
                "# written by {TOOL} {VERSION}: its report of the run (not DLIO's log)\n\
                 [INFO] {} {command}\n{}",
                dlio_time(leaf.start),
                leaf.stdout
            ),
        ),
        (
            dir.join(format!("{kind}_{}.stdout.log", leaf.command.word())),
            leaf.stdout.clone(),
        ),
        (
            dir.join(format!("{kind}_{}.stderr.log", leaf.command.word())),
            leaf.stderr.clone(),
        ),
    ];
    for (rank, (output, stats)) in leaf.ranks.iter().enumerate() {
        files.push((dir.join(format!("{rank}_output.json")), pretty(output)));
        files.push((
            dir.join(format!("{rank}_per_epoch_stats.json")),
            pretty(stats),
        ));
    }
    let config_dir = dir.join("dlio_config");
    std::fs::create_dir(&config_dir).map_err(|e| fail("dlio_config/", e))?;
    let task = task_overrides(leaf.config);
    files.push((
        config_dir.join("config.yaml"),
        config_yaml(leaf.config, leaf.command),
    ));
    files.push((config_dir.join("overrides.yaml"), list_yaml(&task, "")));
    files.push((
        config_dir.join("hydra.yaml"),
        hydra_yaml(&dir, leaf.config, &task),
    ));
    for (path, text) in files {
        std::fs::write(&path, text).map_err(|e| {
            fail(
                &path
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                e,
            )
        })?;
    }
    if leaf.command == LeafCommand::Run {
        write_index(&parent).map_err(|e| fail("results.json", e))?;
    }
    Ok(dir)
}

/// (Re)writes `results.json` in `parent` (a model's `run/`, or a checkpoint model's folder)
/// from the leaves it holds ([`results_index`]).
pub fn write_index(parent: &Path) -> std::io::Result<()> {
    std::fs::write(parent.join("results.json"), pretty(&results_index(parent)))
}

/// `results.json` beside a model's run leaves, as mlpstorage's report generator writes it
/// (`report_generator.py:416-434`: a list of `BenchmarkRun.as_dict()`, `rules/models.py:
/// 994-1009`), one entry per leaf under `parent`, rewritten after each run; its submission
/// checker wants the file in `run/` (`checks/directory_checks.py:122-138`).
fn results_index(parent: &Path) -> Json {
    let mut leaves: Vec<PathBuf> = std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    leaves.sort();
    let read = |path: PathBuf| -> Option<Json> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    };
    let runs: Vec<Json> = leaves
        .into_iter()
        .filter_map(|dir| {
            let name = std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.ends_with("_metadata.json"))?;
            let meta = read(dir.join(name))?;
            let summary = read(dir.join("summary.json")).unwrap_or(Json::Null);
            Some(json!({
                "run_id": meta["run_datetime"],
                "benchmark_type": meta["benchmark_type"],
                "model": meta["model"],
                "command": meta["command"],
                "num_processes": summary["num_accelerators"],
                "parameters": meta["combined_params"],
                "system_info": meta["system_info"],
                "metrics": summary["metric"],
                "accelerator": meta["accelerator"],
                "generated_by": made_by(),
            }))
        })
        .collect();
    Json::Array(runs)
}

fn pretty(value: &Json) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// `--results-dir DIR` checked before anything runs, as `--output` is: DIR created and a file
/// written and removed in it, so a run never finishes unable to write its leaf.
pub fn check_root(root: &Path) -> Result<(), UsageError> {
    let fail = |e: std::io::Error| {
        UsageError(format!(
            "--results-dir {}: cannot write its folders ({e}); choose another folder",
            root.display()
        ))
    };
    std::fs::create_dir_all(root).map_err(fail)?;
    let probe = root.join(format!(".ringload-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// A name used as a folder: no separators, not empty, not `.` or `..`.
fn check_name(flag: &str, name: &str) -> Result<(), UsageError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(UsageError(format!(
            "{flag} '{name}' is not a folder name; pass a name without '/'"
        )));
    }
    Ok(())
}

/// A new leaf under `parent` named for `start` (YYYYMMDD_HHmmss, UTC): never an existing one —
/// a run whose second is taken gets the next free second.
fn new_leaf(parent: &Path, start: SystemTime) -> std::io::Result<(PathBuf, String)> {
    let mut t = start;
    loop {
        let ts = folder_time(t);
        let dir = parent.join(&ts);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((dir, ts)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                t += Duration::from_secs(1);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_and_times_are_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(951_782_400_000_000 + 123_456);
        assert_eq!(folder_time(t), "20000229_000000");
        assert_eq!(dlio_time(t), "2000-02-29T00:00:00.123456");
    }

    #[test]
    fn command_lines_hide_every_key() {
        let line = command_line(
            [
                "ringload",
                "run",
                "--access-key",
                "AKID",
                "--secret-key",
                "SK",
                "storage.storage_options.access_key_id=AKID2",
                "--access-key=AKID3",
                "--np",
                "2",
            ]
            .map(String::from),
        );
        for secret in ["AKID", "SK"] {
            assert!(!line.contains(secret), "{line}");
        }
        assert!(line.ends_with("--np 2"), "{line}");
    }

    #[test]
    fn model_names_are_mlperfs() {
        assert_eq!(mlperf_model("llama3_8b"), "llama3-8b");
        // MLPerf's own llama3_8b.yaml names its model llama_8b (mlpstorage: models.py:737-738).
        assert_eq!(mlperf_model("llama_8b"), "llama3-8b");
        assert_eq!(mlperf_model("unet3d"), "unet3d");
        assert_eq!(accelerator_of("retinanet_b200").as_deref(), Some("b200"));
        assert_eq!(accelerator_of("flux_small"), None);
    }

    #[test]
    fn leaves_never_reuse_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (a, _) = new_leaf(dir.path(), t).unwrap();
        let (b, ts) = new_leaf(dir.path(), t).unwrap();
        assert_ne!(a, b);
        assert_eq!(ts, folder_time(t + Duration::from_secs(1)));
    }
}
