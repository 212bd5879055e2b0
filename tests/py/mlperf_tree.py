"""Checks an MLPerf Storage results tree the way mlpstorage's run discovery reads it (the
reference's part B4): a leaf is a folder holding summary.json or exactly one *_metadata.json;
its path is <system>/training/<model>/run/<YYYYMMDD_HHmmss>, <system>/training/<model>/datagen/
<ts> or <system>/checkpointing/<model>/<ts>; the metadata in the key set of mlpstorage v3.0
(tests/py/mlpstorage_v3.py judges the tree as its report generator does). Every file of every leaf is parsed (JSON, and the YAML of
dlio_config/ with a small block-YAML reader of its own, stricter than PyYAML about what
ringload writes), the fields B4 lists are checked, and no secret given on the command line may
appear in any file.

Usage: mlperf_tree.py ROOT SECRET[,SECRET…]; prints JSON {"leaves": [...]} on success, raises
(exit 1) naming the leaf and the file otherwise.
"""

import json
import os
import re
import sys

TS = re.compile(r"^\d{8}_\d{6}$")
METADATA_FIELDS = [
    "benchmark_type", "model", "command", "run_datetime", "accelerator", "combined_params",
    "yaml_params", "params_dict", "override_parameters", "verification", "args", "system_info",
]
# With all four at the top level mlpstorage's report generator reads the metadata alone and
# judges every training run INVALID (rules/models.py:825-828; rules/utils.py:51-52).
NOT_ALL_OF = ["benchmark_type", "run_datetime", "num_processes", "parameters"]


def scalar(text):
    text = text.strip()
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise ValueError(f"unterminated quote: {text}")
        return text[1:-1].replace("''", "'")
    if text in ("null", "~", ""):
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.startswith(("{", "[", '"', "&", "*", "!", "|", ">")):
        raise ValueError(f"unsupported YAML scalar: {text}")
    return text


def yaml_load(text):
    """Block mappings and sequences of plain or single-quoted scalars (what ringload writes)."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        lines.append((indent, raw.strip()))

    def split_key(item):
        m = re.match(r"^('(?:[^']|'')*'|[^:'][^:]*?):(?: (.*))?$", item)
        if not m:
            return None
        return scalar(m.group(1)), m.group(2)

    def block(i, indent):
        if lines[i][1].startswith("- ") or lines[i][1] == "-":
            out = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("-"):
                rest = lines[i][1][2:]
                kv = split_key(rest)
                if kv is None:
                    out.append(scalar(rest))
                    i += 1
                    continue
                # A mapping item: its first key on the dash's line, the rest under it.
                lines[i] = (indent + 2, rest)
                value, i = block(i, indent + 2)
                out.append(value)
            return out, i
        out = {}
        while i < len(lines) and lines[i][0] == indent:
            kv = split_key(lines[i][1])
            if kv is None:
                raise ValueError(f"not key: value: {lines[i][1]!r}")
            key, value = kv
            i += 1
            if value is not None and value != "":
                out[key] = scalar(value)
            elif i < len(lines) and (lines[i][0] > indent or
                                     (lines[i][0] == indent and lines[i][1].startswith("- "))):
                out[key], i = block(i, lines[i][0])
            else:
                out[key] = None
        return out, i

    if not lines:
        return None
    value, end = block(0, lines[0][0])
    if end != len(lines):
        raise ValueError(f"unparsed from line {end}: {lines[end]}")
    return value


def is_leaf(path, names):
    return "summary.json" in names or len([n for n in names if n.endswith("_metadata.json")]) == 1


def check_leaf(root, path, names, secrets):
    parts = os.path.relpath(path, root).split(os.sep)
    where = "/".join(parts)
    command = "run"
    if len(parts) == 5 and parts[1] == "training" and parts[3] in ("run", "datagen"):
        kind, command = "training", parts[3]
    elif len(parts) == 4 and parts[1] == "checkpointing":
        kind = "checkpointing"
    else:
        raise AssertionError(f"{where}: not <system>/training/<model>/run/<ts> nor "
                             "<system>/checkpointing/<model>/<ts>")
    system, model, ts = parts[0], parts[2], parts[-1]
    assert TS.match(ts), f"{where}: {ts} is not YYYYMMDD_HHmmss"
    metadata = [n for n in names if n.endswith("_metadata.json")]
    assert metadata == [f"{kind}_{ts}_metadata.json"], f"{where}: metadata files {metadata}"

    def load(name):
        with open(os.path.join(path, name), encoding="utf-8") as f:
            return json.load(f)

    summary = load("summary.json")
    for field in ("start", "num_accelerators", "metric", "end", "num_hosts", "hostname",
                  "host_memory_GB", "host_cpu_count", "potential_caching"):
        assert field in summary, f"{where}/summary.json has no {field}"
    assert summary["generated_by"]["tool"] == "ringload", where
    np = summary["num_accelerators"]
    metric = summary["metric"]
    if command == "datagen":
        assert metric == {} and summary["num_files_train"] > 0, where
    elif kind == "training":
        for field in ("train_au_mean_percentage", "train_au_percentage",
                      "train_throughput_mean_samples_per_second", "train_io_mean_MB_per_second"):
            assert field in metric, f"{where}: metric has no {field}"
    elif kind == "checkpointing":
        assert "checkpoint_size_GB" in metric, where
        assert summary["epochs"] == 0, where
        assert len(summary["rules"]) == 5, where
        assert all(r["verdict"] in ("pass", "fail", "unknown") for r in summary["rules"]), where
    meta = load(metadata[0])
    for field in METADATA_FIELDS:
        assert field in meta, f"{where}/{metadata[0]} has no {field}"
    assert not all(k in meta for k in NOT_ALL_OF), f"{where}: the metadata-only path"
    assert meta["benchmark_type"] == kind and meta["model"] == model, where
    assert meta["command"] == command, where
    assert meta["run_datetime"] == ts and meta["args"]["num_processes"] == np, where
    assert meta["verification"] in ("closed", "open", "invalid"), where
    assert meta["generated_by"]["tool"] == "ringload", where
    provenance = load("provenance.json")
    assert provenance["tool"] == "ringload" and provenance["version"], where
    for rank in range(np if command == "run" else 0):
        output = load(f"{rank}_output.json")
        stats = load(f"{rank}_per_epoch_stats.json")
        assert "host_memory_GB" in output and "hostname" in output, where
        epochs = [k for k in stats if k.isdigit()]
        assert epochs, f"{where}/{rank}_per_epoch_stats.json has no epoch"
        for e in epochs:
            assert "start" in stats[e] and "end" in stats[e], where
            if kind == "training":
                assert set(stats[e]["block1"]) >= {"start", "end", "duration"}, where
                assert set(output[e]) >= {"load", "proc", "au", "throughput", "compute"}, where
            else:
                ckpts = [k for k in stats[e] if re.match(r"^(save|load)_ckpt\d+$", k)]
                assert ckpts, where
                for k in ckpts:
                    assert set(stats[e][k]) >= {"start", "end", "duration", "throughput"}, where
    config = yaml_load(open(os.path.join(path, "dlio_config/config.yaml")).read())
    assert "workload" in config and "model" in config["workload"], where
    hydra = yaml_load(open(os.path.join(path, "dlio_config/hydra.yaml")).read())
    overrides = yaml_load(open(os.path.join(path, "dlio_config/overrides.yaml")).read())
    assert isinstance(overrides, list) and overrides[0].startswith("workload="), where
    assert hydra["hydra"]["overrides"]["task"] == overrides, where
    for log in ("dlio.log", f"{kind}_{command}.stdout.log", f"{kind}_{command}.stderr.log"):
        assert os.path.isfile(os.path.join(path, log)), f"{where}: no {log}"
    # No secret in any file of the leaf.
    for folder, _, files in os.walk(path):
        for name in files:
            data = open(os.path.join(folder, name), "rb").read()
            for secret in secrets:
                assert secret.encode() not in data, f"{where}: {name} holds a secret"
    return {
        "system": system, "benchmark": kind, "command": command, "model": model,
        "timestamp": ts, "num_accelerators": np, "stdout_bytes": os.path.getsize(
            os.path.join(path, f"{kind}_{command}.stdout.log")),
    }


def main():
    root = sys.argv[1]
    secrets = [s for s in sys.argv[2].split(",") if s] if len(sys.argv) > 2 else []
    leaves = []
    for path, dirs, names in os.walk(root):
        dirs.sort()
        if is_leaf(path, names):
            leaves.append(check_leaf(root, path, names, secrets))
    print(json.dumps({"leaves": leaves}))


if __name__ == "__main__":
    main()
