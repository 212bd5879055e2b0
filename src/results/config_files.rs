//! The text of a leaf's configuration: `dlio_config/{config,hydra,overrides}.yaml` in the block
//! YAML Hydra writes (floats as PyYAML reads them back), the workload's settings nested as
//! mlpstorage reads them, the overrides, and the redaction that keeps every secret out.

use std::path::Path;

use serde_json::{Map, Value as Json, json};

use super::leaf::{LeafCommand, TOOL, VERSION};
use crate::config::{Origin, RawConfig, Value};
use crate::redact::{REDACTED, redacted_command_line};

/// Whether a configuration key (its last part) holds a secret: AWS's names, and any
/// `key`, `secret`, `password`, `token`, `credential(s)` or `passphrase` (s3fs's
/// `storage_options: {key, secret}`), or a name ending in one of them after `_`.
pub(super) fn secret_key(key: &str) -> bool {
    let last = key
        .rsplit(['.', '-'])
        .next()
        .unwrap_or(key)
        .to_ascii_lowercase();
    let words = [
        "key",
        "secret",
        "password",
        "token",
        "credential",
        "credentials",
        "passphrase",
    ];
    let aws = [
        "access_key_id",
        "secret_access_key",
        "session_token",
        "key_id",
    ];
    words.contains(&last.as_str())
        || aws.iter().any(|a| last.ends_with(a))
        || words
            .iter()
            .any(|w| last.ends_with(&format!("_{w}")) || last.ends_with(&format!("-{w}")))
}

/// `value` with every secret inside it redacted: the whole value under a secret `key`, and in a
/// mapping each entry whose own key is one.
fn redacted(key: &str, value: &Value) -> Value {
    if secret_key(key) {
        return Value::Str(REDACTED.into());
    }
    match value {
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), redacted(k, v)))
                .collect(),
        ),
        Value::List(items) => Value::List(items.iter().map(|v| redacted(key, v)).collect()),
        other => other.clone(),
    }
}

/// Whether an override's value text holds a secret: a flow mapping or list (`{k: v, …}`) one of
/// whose keys is a secret.
fn holds_secret(value: &str) -> bool {
    value.starts_with(['{', '['])
        && value
            .split(['{', '}', '[', ']', ','])
            .filter_map(|piece| piece.split_once(':'))
            .any(|(k, _)| secret_key(k.trim().trim_matches(['\'', '"'])))
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
                Some((key, value))
                    if !key.starts_with("--") && (secret_key(key) || holds_secret(value)) =>
                {
                    format!("{key}={REDACTED}")
                }
                _ => arg,
            }
        })
        .collect();
    redacted_command_line(args)
}

/// A value as JSON, a secret key's value redacted.
pub(super) fn value_json(key: &str, value: &Value) -> Json {
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

/// The workload parameters a run set apart from its workload file (each override and flag
/// that sets one): key and value as `overrides.yaml` records them, a secret's value redacted.
/// What mlpstorage judges CLOSED, OPEN or INVALID ([`crate::mlperf::parameters`]).
pub fn overrides(config: &RawConfig) -> Vec<(String, String)> {
    config
        .settings()
        .filter(|(_, setting)| !matches!(setting.origin, Origin::File { .. }))
        .map(|(key, setting)| (key.clone(), scalar(&redacted(key, &setting.value))))
        .collect()
}

/// Hydra's task overrides: `workload=NAME`, then each override and flag as
/// `++workload.KEY=VALUE`.
pub(super) fn task_overrides(config: &RawConfig) -> Vec<String> {
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
        Value::Float(x) => yaml_float(*x),
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

/// `config.yaml`: the workload's settings as Hydra writes the composed configuration, under
/// `workload:` ([`nested`]: `model.name` as MLPerf's workload file names it; a datagen leaf's
/// workflow that of a generate-only run).
pub(super) fn config_yaml(config: &RawConfig, command: LeafCommand) -> String {
    let mut out = format!("# written by {TOOL} {VERSION}: the workload as it ran\n");
    json_yaml("workload", &nested(config, command, false), "", &mut out);
    out
}

/// The name MLPerf's workload file gives a model: ringload's `llama3_8b` is MLPerf's
/// `llama_8b` (its `configs/dlio/workload/llama3_8b.yaml`), likewise 70b, 405b and 1t; others
/// as they are.
pub fn mlperf_yaml_model_name(name: &str) -> String {
    match name.strip_prefix("llama3_") {
        Some(size @ ("8b" | "70b" | "405b" | "1t")) => format!("llama_{size}"),
        _ => name.to_string(),
    }
}

/// The workload's settings as nested mappings (secret values redacted), `model.name` as
/// MLPerf's file names it and, for a datagen leaf, the workflow of a generate-only run;
/// `from_file`: only the workload file's own settings (mlpstorage's `yaml_params`), else every
/// setting as the run used it (`combined_params`, `config.yaml`).
pub fn nested(config: &RawConfig, command: LeafCommand, from_file: bool) -> Json {
    let mut root = Map::new();
    for (key, setting) in config.settings() {
        if from_file && !matches!(setting.origin, Origin::File { .. }) {
            continue;
        }
        let mut value = value_json(key, &setting.value);
        if key == "model.name"
            && let Some(name) = value.as_str()
        {
            value = mlperf_yaml_model_name(name).into();
        }
        insert(&mut root, key, value);
    }
    if command == LeafCommand::Datagen {
        for (key, on) in [
            ("workflow.generate_data", true),
            ("workflow.train", false),
            ("workflow.checkpoint", false),
        ] {
            insert(&mut root, key, on.into());
        }
    }
    Json::Object(root)
}

/// `value` at the dotted `key` of `root`, the mappings on the way made as needed.
fn insert(root: &mut Map<String, Json>, key: &str, value: Json) {
    let mut node = root;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            node.insert(part.to_string(), value);
            return;
        }
        let next = node
            .entry(part.to_string())
            .or_insert_with(|| Json::Object(Map::new()));
        if !next.is_object() {
            *next = Json::Object(Map::new());
        }
        let Json::Object(map) = next else {
            return;
        };
        node = map;
    }
}

/// A float as YAML 1.1 (PyYAML, which mlpstorage loads with) reads it back as a float: with a
/// dot, and an exponent only with its sign (`1.0e+16`; Rust's `1e16` would be read as text).
fn yaml_float(x: f64) -> String {
    if x.is_nan() {
        return ".nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let debug = format!("{x:?}");
    match debug.split_once('e') {
        Some((mantissa, exponent)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exponent = if exponent.starts_with('-') {
                exponent.to_string()
            } else {
                format!("+{exponent}")
            };
            format!("{mantissa}e{exponent}")
        }
        None => debug,
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
            Some(x) if n.is_f64() => yaml_float(x),
            _ => n.to_string(),
        },
        Json::String(s) => text(s),
        Json::Array(_) => "[]".into(),
        Json::Object(_) => "{}".into(),
    }
}

/// A block list of texts at `indent`.
pub(super) fn list_yaml(items: &[String], indent: &str) -> String {
    items
        .iter()
        .map(|i| format!("{indent}- {}\n", text(i)))
        .collect()
}

/// `hydra.yaml`: the parts of Hydra's own record mlpstorage and a reader look at (the run's
/// folder, the overrides, the workload chosen).
pub(super) fn hydra_yaml(dir: &Path, config: &RawConfig, task: &[String]) -> String {
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

    /// Every secret stays out: AWS's names, s3fs's `key`/`secret`, and secrets inside a
    /// mapping given as one override, in the overrides and on the command line.
    #[test]
    fn secrets_inside_values_and_under_other_names_are_redacted() {
        for key in [
            "storage.storage_options.access_key_id",
            "storage.storage_options.secret_access_key",
            "storage.storage_options.key",
            "storage.storage_options.secret",
            "storage.storage_options.api_key",
            "storage.storage_options.aws_session_token",
            "storage.storage_options.credentials",
        ] {
            assert!(secret_key(key), "{key}");
        }
        for key in [
            "dataset.num_files_train",
            "storage.storage_options.endpoint_url",
        ] {
            assert!(!secret_key(key), "{key}");
        }
        let value = Value::Map(vec![
            ("aws_secret_access_key".into(), Value::Str("S3CR3T".into())),
            ("region".into(), Value::Str("us-east-1".into())),
        ]);
        let text = scalar(&redacted("storage.storage_options.client_kwargs", &value));
        assert!(
            !text.contains("S3CR3T") && text.contains("us-east-1"),
            "{text}"
        );
        let line = command_line(
            [
                "ringload",
                "run",
                "storage.storage_options.client_kwargs={aws_secret_access_key: S3CR3T}",
                "storage.storage_options.secret=S3CR3T",
            ]
            .map(String::from),
        );
        assert!(!line.contains("S3CR3T"), "{line}");
    }

    /// Floats PyYAML reads back as floats; MLPerf's model names; nesting.
    #[test]
    fn yaml_floats_model_names_and_nesting() {
        assert_eq!(yaml_float(0.05), "0.05");
        assert_eq!(yaml_float(1.0), "1.0");
        assert_eq!(yaml_float(1e16), "1.0e+16");
        assert_eq!(yaml_float(2.5e-7), "2.5e-7");
        assert_eq!(mlperf_yaml_model_name("llama3_8b"), "llama_8b");
        assert_eq!(mlperf_yaml_model_name("llama3_1t"), "llama_1t");
        assert_eq!(mlperf_yaml_model_name("llama3_tiny"), "llama3_tiny");
        assert_eq!(mlperf_yaml_model_name("unet3d"), "unet3d");
        let mut root = Map::new();
        insert(&mut root, "a.b.c", serde_json::json!(1));
        insert(&mut root, "a.d", serde_json::json!("x"));
        assert_eq!(
            Json::Object(root),
            serde_json::json!({"a": {"b": {"c": 1}, "d": "x"}})
        );
    }
}
