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

pub mod dlio;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value as Json, json};

use crate::cluster::Cluster;
use crate::config::{Origin, RawConfig, Value};
use crate::exit::UsageError;
use crate::redact::{REDACTED, redacted_command_line};

/// The tool named in every file of a leaf.
pub const TOOL: &str = "ringload";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `{"tool": "ringload", "version": …}`: the mark every JSON file of a leaf carries.
pub fn made_by() -> Json {
    json!({ "tool": TOOL, "version": VERSION })
}

/// Which of MLPerf's benchmarks a leaf holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Benchmark {
    Training,
    Checkpointing,
}

impl Benchmark {
    pub fn word(self) -> &'static str {
        match self {
            Benchmark::Training => "training",
            Benchmark::Checkpointing => "checkpointing",
        }
    }
}

/// Everything a leaf is made of.
#[derive(Debug)]
pub struct Leaf<'a> {
    pub benchmark: Benchmark,
    /// `--results-dir`: the tree's root.
    pub root: &'a Path,
    /// `--system`: the system's name in the tree [default: this host's name].
    pub system: Option<String>,
    /// The workload's configuration, overrides and flags applied.
    pub config: &'a RawConfig,
    /// The model's name in the workload (`model.name`): `retinanet`, `llama3_8b`, …
    pub model: &'a str,
    pub np: u32,
    pub hosts: u32,
    /// The accelerator the workload stands for, when known (`b200`, …).
    pub accelerator: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    /// DLIO's summary.json fields of this run (`metric`, `num_files_train`, …); the leaf adds
    /// the times, the hosts and the tool's mark.
    pub summary: Map<String, Json>,
    /// Per rank: its `<rank>_output.json` and `<rank>_per_epoch_stats.json`.
    pub ranks: Vec<(Json, Json)>,
    /// ringload's own summary.json of the run (kept beside DLIO's, as `ringload_summary.json`).
    pub ringload_summary: Json,
    /// What the run printed on stdout (the report) and on stderr (warnings, notes).
    pub stdout: String,
    pub stderr: String,
}

/// MLPerf's model name for a workload's `model.name`: `llama3_8b` → `llama3-8b`, `unet3d` →
/// `unet3d`, lower case, `_` as `-`.
pub fn mlperf_model(model: &str) -> String {
    model.to_ascii_lowercase().replace('_', "-")
}

/// The accelerator a workload's name ends in (`unet3d_b200` → `b200`), if any.
pub fn accelerator_of(workload: &str) -> Option<String> {
    let suffix = workload.rsplit('_').next()?;
    ["b200", "mi355", "h100", "a100"]
        .contains(&suffix)
        .then(|| suffix.to_string())
}

/// This host's memory (MemTotal) in DLIO's `host_memory_GB` (GiB) and its CPUs.
pub fn host_figures() -> (f64, usize) {
    let memory = crate::budget::probe().mem_total_bytes.unwrap_or(0);
    (
        memory as f64 / f64::from(1u32 << 30),
        crate::affinity::cores(),
    )
}

/// Writes the leaf; its path.
pub fn write(leaf: &Leaf) -> anyhow::Result<PathBuf> {
    let root = leaf.root;
    let system = leaf.system.clone().unwrap_or_else(Cluster::host);
    check_name("--system", &system)?;
    let model = mlperf_model(leaf.model);
    let parent = match leaf.benchmark {
        Benchmark::Training => root.join(&system).join("training").join(&model).join("run"),
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

    let (parameters, overrides) = parameters(leaf.config);
    let metadata = json!({
        "benchmark_type": kind,
        "model": model,
        "command": command,
        "run_datetime": ts,
        "num_processes": leaf.np,
        "accelerator": leaf.accelerator,
        "parameters": parameters,
        "override_parameters": overrides,
        "system_info": {
            "hostname": host,
            "system_name": system,
            "num_hosts": hosts,
            "host_cpu_count": cpus,
            "host_memory_GB": memory_gib,
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        },
        "workload": leaf.config.source.name,
        "generated_by": made_by(),
    });
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
            dir.join(format!("{kind}_run.stdout.log")),
            leaf.stdout.clone(),
        ),
        (
            dir.join(format!("{kind}_run.stderr.log")),
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
    files.push((config_dir.join("config.yaml"), config_yaml(leaf.config)));
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
    Ok(dir)
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

/// UTC (year, month, day, hour, minute, second, microsecond) of `t`.
fn utc(t: SystemTime) -> (i64, u32, u32, i64, i64, i64, u32) {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::units::civil_from_days(days);
    (
        year,
        month,
        day,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros(),
    )
}

/// `YYYYMMDD_HHmmss`, mlpstorage's timestamp folder.
pub fn folder_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, _) = utc(t);
    format!("{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}")
}

/// DLIO's time stamps: `2026-12-03T06:36:23.672674` (Python's `isoformat()`).
pub fn dlio_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, us) = utc(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}")
}

/// Whether a configuration key (its last part) holds a secret.
fn secret_key(key: &str) -> bool {
    let last = key
        .rsplit(['.', '-'])
        .next()
        .unwrap_or(key)
        .to_ascii_lowercase();
    let key = key.to_ascii_lowercase();
    [
        "secret_access_key",
        "session_token",
        "access_key_id",
        "secret_key",
        "access_key",
    ]
    .iter()
    .any(|s| key.ends_with(s))
        || last == "password"
        || last == "token"
}

/// The command line as a leaf records it: [`redacted_command_line`], and the access key's
/// value hidden too.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let mut hide_next = false;
    let args: Vec<String> = args
        .into_iter()
        .map(|arg| {
            if std::mem::take(&mut hide_next) {
                return REDACTED.to_string();
            }
            if arg == "--access-key" {
                hide_next = true;
                return arg;
            }
            if arg.starts_with("--access-key=") {
                return format!("--access-key={REDACTED}");
            }
            match arg.split_once('=') {
                Some((key, _)) if !key.starts_with("--") && secret_key(key) => {
                    format!("{key}={REDACTED}")
                }
                _ => arg,
            }
        })
        .collect();
    redacted_command_line(args)
}

/// A value as JSON, a secret key's value redacted.
fn value_json(key: &str, value: &Value) -> Json {
    if secret_key(key) {
        return REDACTED.into();
    }
    to_json(value)
}

fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(x) => json!(x),
        Value::Str(s) => s.clone().into(),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), value_json(k, v)))
                .collect(),
        ),
    }
}

/// The metadata's `parameters` (every setting, flat dotted keys) and `override_parameters`
/// (those an override or a flag set).
fn parameters(config: &RawConfig) -> (Json, Json) {
    let mut all = Map::new();
    let mut overridden = Map::new();
    for (key, setting) in config.settings() {
        let v = value_json(key, &setting.value);
        if !matches!(setting.origin, Origin::File { .. }) {
            overridden.insert(key.clone(), v.clone());
        }
        all.insert(key.clone(), v);
    }
    (Json::Object(all), Json::Object(overridden))
}

/// The workload parameters a run set apart from its workload file (each override and flag
/// that sets one): key and value as `overrides.yaml` records them, a secret's value redacted.
/// What mlpstorage judges CLOSED, OPEN or INVALID ([`crate::mlperf::parameters`]).
pub fn overrides(config: &RawConfig) -> Vec<(String, String)> {
    config
        .settings()
        .filter(|(_, setting)| !matches!(setting.origin, Origin::File { .. }))
        .map(|(key, setting)| {
            let value = if secret_key(key) {
                REDACTED.to_string()
            } else {
                scalar(&setting.value)
            };
            (key.clone(), value)
        })
        .collect()
}

/// Hydra's task overrides: `workload=NAME`, then each override and flag as
/// `++workload.KEY=VALUE`.
fn task_overrides(config: &RawConfig) -> Vec<String> {
    let mut out = vec![format!("workload={}", config.source.name)];
    out.extend(
        overrides(config)
            .into_iter()
            .map(|(key, value)| format!("++workload.{key}={value}")),
    );
    out
}

/// A scalar as YAML writes it: plain when YAML reads it back as the same text, else quoted.
fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(x) => format!("{x:?}"),
        Value::Str(s) => text(s),
        // Flow style for what is not a scalar (only inside an override).
        other => other.to_string(),
    }
}

/// Text as YAML: plain when safe, else single-quoted.
fn text(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-+=@,".contains(c))
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '/')
        && ![
            "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
        ]
        .contains(&s.to_ascii_lowercase().as_str())
        || (s.starts_with("http") && !s.contains([' ', '\'', '#']));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// A tree of the flat dotted keys.
#[derive(Debug, Default)]
struct Tree {
    leaves: Vec<(String, Tree, Option<Json>)>,
}

/// `config.yaml`: the workload's settings as Hydra writes the composed configuration, under
/// `workload:`.
fn config_yaml(config: &RawConfig) -> String {
    let mut root = Tree::default();
    for (key, setting) in config.settings() {
        let mut node = &mut root;
        let parts: Vec<&str> = key.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let at = match node.leaves.iter().position(|(k, _, _)| k == part) {
                Some(at) => at,
                None => {
                    node.leaves.push((part.to_string(), Tree::default(), None));
                    node.leaves.len() - 1
                }
            };
            if last {
                node.leaves[at].2 = Some(value_json(key, &setting.value));
            }
            node = &mut node.leaves[at].1;
        }
    }
    let mut out = format!("# written by {TOOL} {VERSION}: the workload as it ran\nworkload:\n");
    tree_yaml(&root, "  ", &mut out);
    out
}

fn tree_yaml(tree: &Tree, indent: &str, out: &mut String) {
    for (key, sub, value) in &tree.leaves {
        match value {
            Some(v) => json_yaml(&text(key), v, indent, out),
            None => {
                out.push_str(&format!("{indent}{}:\n", text(key)));
                tree_yaml(sub, &format!("{indent}  "), out);
            }
        }
    }
}

/// `key: value` in block style, at `indent`.
fn json_yaml(key: &str, value: &Json, indent: &str, out: &mut String) {
    match value {
        Json::Object(map) if !map.is_empty() => {
            out.push_str(&format!("{indent}{key}:\n"));
            for (k, v) in map {
                json_yaml(&text(k), v, &format!("{indent}  "), out);
            }
        }
        Json::Array(items) if !items.is_empty() => {
            out.push_str(&format!("{indent}{key}:\n"));
            for item in items {
                match item {
                    Json::Object(map) if !map.is_empty() => {
                        // `- k: v` then the other keys under the first.
                        let mut first = true;
                        for (k, v) in map {
                            let lead = if first {
                                format!("{indent}- ")
                            } else {
                                format!("{indent}  ")
                            };
                            first = false;
                            let mut one = String::new();
                            json_yaml(&text(k), v, &format!("{indent}  "), &mut one);
                            out.push_str(&lead);
                            out.push_str(one.trim_start_matches(' '));
                        }
                    }
                    other => out.push_str(&format!("{indent}- {}\n", json_scalar(other))),
                }
            }
        }
        other => out.push_str(&format!("{indent}{key}: {}\n", json_scalar(other))),
    }
}

fn json_scalar(value: &Json) -> String {
    match value {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() => format!("{x:?}"),
            _ => n.to_string(),
        },
        Json::String(s) => text(s),
        Json::Array(_) => "[]".into(),
        Json::Object(_) => "{}".into(),
    }
}

/// A block list of texts at `indent`.
fn list_yaml(items: &[String], indent: &str) -> String {
    items
        .iter()
        .map(|i| format!("{indent}- {}\n", text(i)))
        .collect()
}

/// `hydra.yaml`: the parts of Hydra's own record mlpstorage and a reader look at (the run's
/// folder, the overrides, the workload chosen).
fn hydra_yaml(dir: &Path, config: &RawConfig, task: &[String]) -> String {
    let run_dir = dir.display().to_string();
    let hydra_overrides = [
        format!("++hydra.run.dir={run_dir}"),
        "++hydra.output_subdir=dlio_config".to_string(),
        "hydra.mode=RUN".to_string(),
    ];
    let mut out = format!(
        "# written by {TOOL} {VERSION}, in the shape of Hydra's record of a DLIO run\nhydra:\n  \
         run:\n    dir: {}\n  output_subdir: dlio_config\n  mode: RUN\n  overrides:\n    hydra:\n",
        text(&run_dir)
    );
    out += &list_yaml(&hydra_overrides, "    ");
    out += "    task:\n";
    out += &list_yaml(task, "    ");
    let mut sorted: Vec<&String> = task.iter().collect();
    sorted.sort();
    let dirname: Vec<&str> = sorted.iter().map(|s| s.as_str()).collect();
    out += &format!(
        "  job:\n    name: main\n    override_dirname: {}\n  runtime:\n    version: {}\n    \
         output_dir: {}\n    choices:\n      workload: {}\n",
        text(&dirname.join(",")),
        text(&format!("{TOOL}-{VERSION}")),
        text(&run_dir),
        text(&config.source.name)
    );
    out
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
