//! A leaf's `<type>_<ts>_metadata.json` and `dlio_config/config.yaml` contents in the shapes
//! MLPerf v3.0's own tools read (`mlpstorage_py` of russfellows/mlc-storage at 64165f7):
//!
//! - **The report generator** builds a run from the metadata alone when it holds all of
//!   `benchmark_type`, `run_datetime`, `num_processes` and `parameters` (`rules/models.py:
//!   825-828`), and then has no host memory, so every training run is INVALID there
//!   (`rules/utils.py:51-52`); otherwise it reads `summary.json` and `dlio_config/` as it reads
//!   a DLIO run (`models.py:700-761`). So the metadata carries neither `parameters` nor
//!   `num_processes` at its top level: the DLIO path is taken.
//! - **The submission checker** reads `combined_params` (the workload as it ran, nested),
//!   `params_dict` (the overrides, flat), `yaml_params` (the workload file before overrides),
//!   `verification` (`closed`/`open`, lower case) and `args` (`num_processes`, `data_dir`,
//!   `results_dir`, `checkpoint_folder`, `model`) (`submission_checker/checks/
//!   training_checks.py`, `checkpointing_checks.py`).
//! - `command` is the benchmark command, `run` or `datagen`, as mlpstorage writes it (the
//!   command line is `executed_command`).
//! - Model names: the folder is MLPerf's (`llama3-8b`, `unet3d`: `models.py:737-738`);
//!   `model.name` in the configuration is the name MLPerf's own workload file gives
//!   (`llama_8b` in `configs/dlio/workload/llama3_8b.yaml`), the workload's own name kept beside
//!   it as `workload_model_name`.

use serde_json::{Map, Value as Json, json};

use super::config_files::{nested, overrides, value_json};
use super::leaf::{Benchmark, Leaf, LeafCommand, host_figures, made_by, mlperf_model};
use crate::config::RawConfig;
use crate::mlperf::parameters::Division;

/// `closed`, `open` or `invalid`, as mlpstorage would judge the run's overrides: training by
/// the report generator's allowed parameters ([`crate::mlperf::parameters`]); a checkpoint run
/// is `closed` when it changes only the folder and the counts (what mlpstorage's own runs set),
/// else `open`.
pub fn verification(leaf: &Leaf) -> &'static str {
    let overrides = overrides(leaf.config);
    match leaf.benchmark {
        Benchmark::Training => Division::of(overrides.iter().map(|(k, _)| k.as_str())).word(),
        Benchmark::Checkpointing => {
            let fixed = [
                "checkpoint.checkpoint_folder",
                "checkpoint.num_checkpoints_write",
                "checkpoint.num_checkpoints_read",
            ];
            if overrides.iter().all(|(k, _)| fixed.contains(&k.as_str())) {
                "closed"
            } else {
                "open"
            }
        }
    }
}

/// A setting's value as text (`None` when the workload has no such key).
fn setting(config: &RawConfig, key: &str) -> Option<Json> {
    config
        .settings()
        .find(|(k, _)| k.as_str() == key)
        .map(|(k, s)| value_json(k, &s.value))
}

/// The leaf's metadata (see the module docs). `ts`: the leaf's folder name; `command_line`:
/// ringload's command line, redacted.
pub fn metadata(leaf: &Leaf, ts: &str, command_line: &str, system: &str) -> Json {
    let kind = leaf.benchmark.word();
    let model = mlperf_model(leaf.model);
    let (memory_gib, cpus) = host_figures();
    let overrides = overrides(leaf.config);
    let params: Map<String, Json> = overrides
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let verification = verification(leaf);
    let host = crate::cluster::Cluster::host();
    let mut args = json!({
        "program": kind,
        "command": leaf.command.word(),
        "model": model,
        "num_accelerators": leaf.np,
        "num_processes": leaf.np,
        "num_client_hosts": leaf.hosts.max(1),
        "hosts": vec![host.clone(); leaf.hosts.max(1) as usize],
        "client_host_memory_in_gb": memory_gib,
        "results_dir": leaf.root.display().to_string(),
        "params": overrides.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "closed": verification == "closed",
    });
    match leaf.benchmark {
        Benchmark::Training => {
            args["accelerator_type"] = json!(leaf.accelerator);
            args["data_dir"] = setting(leaf.config, "dataset.data_folder").unwrap_or(Json::Null);
        }
        Benchmark::Checkpointing => {
            args["checkpoint_folder"] =
                setting(leaf.config, "checkpoint.checkpoint_folder").unwrap_or(Json::Null);
            for key in ["num_checkpoints_read", "num_checkpoints_write"] {
                args[key] =
                    setting(leaf.config, &format!("checkpoint.{key}")).unwrap_or(Json::Null);
            }
        }
    }
    // The accelerator forms the report generator's groups for `run` only (`models.py:724-728`).
    let accelerator = match (leaf.benchmark, leaf.command) {
        (Benchmark::Training, LeafCommand::Run) => json!(leaf.accelerator),
        _ => Json::Null,
    };
    json!({
        "benchmark_type": kind,
        "model": model,
        "command": leaf.command.word(),
        "run_datetime": ts,
        "accelerator": accelerator,
        "combined_params": nested(leaf.config, leaf.command, false),
        "yaml_params": nested(leaf.config, leaf.command, true),
        "params_dict": params.clone(),
        "override_parameters": params,
        "verification": verification,
        "args": args,
        "executed_command": command_line,
        "runtime": leaf.end.duration_since(leaf.start).unwrap_or_default().as_secs_f64(),
        "system_info": {
            "hostname": host,
            "system_name": system,
            "num_hosts": leaf.hosts.max(1),
            "host_cpu_count": cpus,
            "host_memory_GB": memory_gib,
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        },
        "workload": leaf.config.source.name,
        "workload_model_name": leaf.model,
        "generated_by": made_by(),
    })
}
