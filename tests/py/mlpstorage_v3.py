"""Judges an MLPerf Storage results tree as MLPerf v3.0's own report generator does, for the
tests (mlpstorage is not on the package registries, so CI cannot install it). Each check below
follows `mlpstorage_py` of russfellows/mlc-storage at 64165f7; the line numbers cite that
commit. The real tool was run on trees ringload made, with the same verdicts
(docs/mlperf.md).

Usage: mlpstorage_v3.py SYSTEM_DIR (the folder holding training/ and checkpointing/, the one
the report generator takes); prints JSON {"runs": [...], "groups": [...]}.
"""

import json
import os
import re
import sys

import yaml  # mlpstorage loads the dlio_config files with yaml.load(Loader=yaml.Loader)

# reporting/directory_validator.py:56-58
BENCHMARK_TYPES = ["training", "checkpointing", "vector_database", "kv_cache"]
COMMANDS = ["run", "datagen", "datasize"]
DATETIME = re.compile(r"^\d{8}_\d{6}")
# config.py:48-54, 66-70
MODELS = ["cosmoflow", "resnet50", "unet3d", "dlrm", "retinanet", "flux"]
LLM_MODELS = ["llama3-70b", "llama3-405b", "llama3-1t", "llama3-8b"]
# rules/run_checkers/training.py:19-31, 34-39
CLOSED_ALLOWED = [
    "dataset.num_files_train", "dataset.num_subfolders_train", "dataset.data_folder",
    "reader.read_threads", "reader.computation_threads", "reader.transfer_size",
    "reader.odirect", "reader.prefetch_size", "checkpoint.checkpoint_folder",
    "storage.storage_type", "storage.storage_root",
]
OPEN_ALLOWED = ["framework", "dataset.format", "dataset.num_samples_per_file",
                "reader.data_loader"]
# rules/submission_checkers/training.py:18
REQUIRED_RUNS = 5
ORDER = {"CLOSED": 0, "OPEN": 1, "INVALID": 2}


def validate_structure(system_dir):
    """reporting/directory_validator.py:111-125: the folder passed must hold a benchmark
    type's folder (else the tool exits 3)."""
    present = [d for d in os.listdir(system_dir) if d in BENCHMARK_TYPES]
    assert present, f"{system_dir}: no benchmark type folder (the report generator exits 3)"


def run_folders(system_dir):
    """rules/utils.py:189-231: every folder below holding summary.json or exactly one
    *_metadata.json is a run; more than one *_metadata.json is skipped."""
    for path, dirs, names in os.walk(system_dir):
        dirs.sort()
        metadata = [n for n in names if n.endswith("_metadata.json")]
        if "summary.json" in names or len(metadata) == 1:
            assert len(metadata) <= 1, f"{path}: {len(metadata)} metadata files"
            yield path, metadata


def parse(path, metadata):
    """rules/models.py:800-855: metadata holding all of benchmark_type, run_datetime,
    num_processes and parameters is read alone (and then has no host memory: every training
    run INVALID, rules/utils.py:51-52); otherwise the DLIO path, 700-761."""
    meta = json.load(open(os.path.join(path, metadata[0]))) if metadata else {}
    complete = all(k in meta for k in
                   ("benchmark_type", "run_datetime", "num_processes", "parameters"))
    assert not complete, f"{path}: metadata takes the report generator's metadata path"
    with open(os.path.join(path, "summary.json")) as f:
        summary = json.load(f)
    configs = {}
    config_dir = os.path.join(path, "dlio_config")
    for name in os.listdir(config_dir):  # models.py:775-791
        if name.endswith(".yaml"):
            with open(os.path.join(config_dir, name)) as f:
                configs[name] = yaml.load(f, Loader=yaml.Loader)
    workload = configs["config.yaml"]["workload"]  # models.py:708
    workflow = workload.get("workflow", {})  # 710-733
    accelerator = None
    if workflow.get("generate_data") or workflow.get("train"):
        kind = "training"
        command = "run" if workflow.get("train") else "datagen"
    elif workflow.get("checkpoint"):
        kind, command = "checkpointing", "run"
    else:
        raise AssertionError(f"{path}: config.yaml's workflow names no benchmark")
    overrides = {}
    for item in configs.get("overrides.yaml") or []:  # 724-745
        if item.startswith("workload=") and command == "run" and kind == "training":
            accelerator = item.split("_")[1]
        if item.startswith("++workload.") and "=" in item:
            key, value = item[len("++workload."):].split("=", 1)
            overrides[key] = value
    model = workload["model"]["name"].replace("llama_", "llama3-").replace("_", "-")  # 735-738
    # ClusterInformation.from_dlio_summary_json, 557-578: both lists or no host memory.
    memory = summary.get("host_memory_GB")
    cpus = summary.get("host_cpu_count")
    assert isinstance(memory, list) and isinstance(cpus, list), f"{path}: host lists"
    return {
        "path": path, "kind": kind, "command": command, "model": model,
        "accelerator": accelerator, "parameters": workload, "overrides": overrides,
        "num_processes": summary["num_accelerators"],  # 754
        "run_datetime": summary["start"],  # 753
        "total_memory_bytes": sum(int(gb * 1024 ** 3) for gb in memory),
        "metadata": meta,
    }


def required_files(run):
    """rules/utils.py:15-118, calculate_training_data_size."""
    dataset, reader = run["parameters"]["dataset"], run["parameters"]["reader"]
    rl = dataset.get("record_length_bytes")
    if rl is None:
        rl = 0
        if dataset.get("format") == "parquet" and "parquet" in dataset:
            for column in dataset["parquet"]["columns"]:
                width = {"float64": 8, "int64": 8, "uint8": 1, "bool": 1}.get(
                    column.get("dtype"), 4)
                rl += column["size"] * width
    file_bytes = dataset["num_samples_per_file"] * rl
    by_bytes = (5 * run["total_memory_bytes"]) // file_bytes if file_bytes else 0
    by_steps = (500 * run["num_processes"] * reader["batch_size"]) // \
        dataset["num_samples_per_file"]
    return max(by_bytes, by_steps)


def check_training(run):
    """rules/run_checkers/training.py:41-143."""
    issues = []
    if run["model"] not in MODELS:  # 53-63
        issues.append(("INVALID", f"Unrecognized model {run['model']}"))
    dataset = run["parameters"].get("dataset")
    if not dataset or "num_files_train" not in dataset:  # 67-75
        issues.append(("INVALID", "Missing dataset parameters"))
    else:
        required = required_files(run)
        if int(dataset["num_files_train"]) < required:  # 94-101
            issues.append(("INVALID", "Insufficient number of training files: "
                           f"{dataset['num_files_train']} < {required}"))
    for key, value in run["overrides"].items():  # 105-143
        if key.startswith("workflow"):
            continue
        if key in CLOSED_ALLOWED:
            issues.append(("CLOSED", f"Closed parameter override allowed: {key}"))
        elif key in OPEN_ALLOWED:
            issues.append(("OPEN", f"Open parameter override allowed: {key}"))
        else:
            issues.append(("INVALID", f"Disallowed parameter override: {key} = {value}"))
    odirect = run["parameters"].get("reader", {}).get("odirect")
    if odirect and run["model"] != "unet3d":  # 173-186
        issues.append(("INVALID", "odirect only for unet3d"))
    return issues


def check_checkpointing(run):
    """rules/run_checkers/checkpointing.py:19-43."""
    if run["model"] not in LLM_MODELS:
        return [("INVALID", f"Unrecognized model {run['model']}")]
    return []


def verdict(issues):
    """rules/verifier.py:160-174: INVALID if any issue is, else OPEN if any is, else CLOSED."""
    return max((v for v, _ in issues), key=ORDER.get, default="CLOSED")


def check_group(runs):
    """report_generator.py:209-255 and rules/submission_checkers/: a group of one run is
    judged alone; of two or more, training needs 5 runs (training.py:25-32) and checkpointing
    exactly 10 writes and 10 reads in all (checkpointing.py:33-61)."""
    issues = []
    if len(runs) < 2:
        return issues
    worst = verdict([(r["verdict"], "") for r in runs])  # base.py:42-76
    issues.append((worst, "runs"))
    if runs[0]["kind"] == "training":
        if len(runs) < REQUIRED_RUNS:
            issues.append(("INVALID", f"Training submission requires {REQUIRED_RUNS} runs"))
    else:
        for what in ("write", "read"):
            n = sum(r["parameters"].get("checkpoint", {}).get(f"num_checkpoints_{what}", 0)
                    for r in runs)
            if n != 10:
                issues.append(("INVALID", f"Expected 10 total {what} operations, but found {n}"))
    return issues


def submission_keys(run, system_dir):
    """What the submission checker reads of a run's metadata (submission_checker/checks/
    training_checks.py, checkpointing_checks.py) and needs beside it (directory_checks.py)."""
    meta, problems = run["metadata"], []
    for key in ("combined_params", "params_dict", "yaml_params", "verification", "args"):
        if key not in meta:
            problems.append(f"metadata has no {key}")
    if meta.get("verification") not in ("closed", "open", "invalid"):
        problems.append(f"verification {meta.get('verification')!r} is not lower case")
    if meta.get("command") != run["command"]:
        problems.append(f"metadata command {meta.get('command')!r} is not {run['command']!r}")
    args = meta.get("args", {})
    if "num_processes" not in args:
        problems.append("args has no num_processes")
    if run["kind"] == "training":
        if not meta.get("combined_params", {}).get("dataset"):  # training_checks.py:54-78
            problems.append("combined_params has no dataset")
        if not args.get("data_dir") or not args.get("results_dir"):  # 396-424
            problems.append("args has no data_dir or results_dir")
        if run["command"] == "run":  # directory_checks.py:122-138
            index = os.path.join(os.path.dirname(run["path"]), "results.json")
            if not os.path.isfile(index):
                problems.append("no results.json in run/")
    else:
        if not meta.get("combined_params", {}).get("checkpoint", {}).get("fsync"):
            problems.append("combined_params.checkpoint.fsync is not true")  # :81-98
        if not args.get("checkpoint_folder") or not args.get("results_dir"):  # :331-359
            problems.append("args has no checkpoint_folder or results_dir")
    return problems


def main():
    system_dir = sys.argv[1]
    validate_structure(system_dir)
    runs = []
    for path, metadata in run_folders(system_dir):
        run = parse(path, metadata)
        issues = check_training(run) if run["kind"] == "training" else check_checkpointing(run)
        run["issues"] = issues
        run["verdict"] = verdict(issues)
        run["submission_problems"] = submission_keys(run, system_dir)
        runs.append(run)
    groups = {}
    for run in runs:  # report_generator.py:220: grouped by (model, accelerator)
        groups.setdefault((run["model"], run["accelerator"]), []).append(run)
    out_groups = []
    for (model, accelerator), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        issues = check_group(members)
        out_groups.append({"model": model, "accelerator": accelerator, "runs": len(members),
                           "verdict": verdict(issues) if issues else members[0]["verdict"],
                           "issues": [f"[{v}] {t}" for v, t in issues]})
    print(json.dumps({
        "runs": [{
            "path": os.path.relpath(r["path"], system_dir), "kind": r["kind"],
            "command": r["command"], "model": r["model"], "accelerator": r["accelerator"],
            "verdict": r["verdict"], "issues": [f"[{v}] {t}" for v, t in r["issues"]],
            "required_files": required_files(r) if r["kind"] == "training" else None,
            "submission_problems": r["submission_problems"],
        } for r in runs],
        "groups": out_groups,
    }))


if __name__ == "__main__":
    main()
