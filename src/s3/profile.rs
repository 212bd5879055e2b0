//! AWS shared configuration files, read as the AWS CLI reads them.
//!
//! - **Which profile**: `--profile`, then `AWS_PROFILE`, then `default`. A profile named by
//!   `--profile` hides the `AWS_ACCESS_KEY_ID` pair (as botocore drops its environment provider
//!   for an explicit profile); one named by `AWS_PROFILE` does not.
//! - **Which files**: `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials` (sections `[name]`),
//!   and `AWS_CONFIG_FILE` or `~/.aws/config` (sections `[profile name]`, and `[default]`).
//!   Keys in the credentials file win over the same keys in the config file.
//! - **What is read**: `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
//!   `region`, `endpoint_url`, `ca_bundle`, the `s3` sub-section's `addressing_style`, and
//!   `services = NAME`, whose `[services NAME]` section's `s3` sub-section may give an
//!   `endpoint_url` (it wins over the profile's own, as in the SDKs).
//!   `ignore_configured_endpoint_urls = true` (or `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`) drops
//!   both.
//! - A profile that gets its keys another way (`role_arn`, `credential_process`, SSO) is
//!   refused with a line saying how to export keys; a named profile that is in neither file is
//!   an error; a missing `default` is not.
//!
//! The format: `[section]` lines, `key = value` lines, `#` and `;` comment lines, and nested
//! sub-sections — a key with an empty value followed by indented `key = value` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One section: its keys, and its nested sub-sections (`s3 =` followed by indented keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    pub keys: BTreeMap<String, String>,
    pub nested: BTreeMap<String, BTreeMap<String, String>>,
}

impl Section {
    fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn nested(&self, section: &str, key: &str) -> Option<&str> {
        self.nested
            .get(section)?
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Parses an AWS INI file into its sections, by their header's text (`profile dev`,
/// `default`, `services local`). The error names the line.
pub fn parse_ini(text: &str) -> Result<BTreeMap<String, Section>, String> {
    let mut sections: BTreeMap<String, Section> = BTreeMap::new();
    let mut current: Option<String> = None;
    // The key whose indented lines follow, inside the current section.
    let mut open_nested: Option<String> = None;
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if trimmed.starts_with('[') {
            let Some(name) = trimmed
                .strip_prefix('[')
                .and_then(|t| t.split_once(']'))
                .map(|(name, _)| name.trim())
            else {
                return Err(format!(
                    "line {line_no}: a section header has no closing ']'"
                ));
            };
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            open_nested = None;
            continue;
        }
        let Some(section) = current.as_ref() else {
            return Err(format!(
                "line {line_no}: '{trimmed}' comes before any [section] header"
            ));
        };
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(format!("line {line_no}: '{trimmed}' is not 'key = value'"));
        };
        let key = key.trim().to_ascii_lowercase();
        let value = strip_comment(value.trim()).to_string();
        let indented = raw.starts_with([' ', '\t']);
        let entry = sections.entry(section.clone()).or_default();
        match (&open_nested, indented) {
            (Some(parent), true) => {
                entry
                    .nested
                    .entry(parent.clone())
                    .or_default()
                    .insert(key, value);
            }
            _ => {
                open_nested = value.is_empty().then(|| key.clone());
                if value.is_empty() {
                    entry.nested.entry(key.clone()).or_default();
                }
                entry.keys.insert(key, value);
            }
        }
    }
    Ok(sections)
}

/// An inline comment needs whitespace before its `#` or `;` (as botocore's parser).
fn strip_comment(value: &str) -> &str {
    let cut = value
        .char_indices()
        .find(|&(i, c)| {
            (c == '#' || c == ';') && i > 0 && value[..i].ends_with(char::is_whitespace)
        })
        .map_or(value.len(), |(i, _)| i);
    value[..cut].trim_end()
}

/// What a profile says, where it says it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name, and what chose it (`--profile`, `AWS_PROFILE`, or the default).
    pub name: String,
    pub chosen_by: &'static str,
    /// Whether either file has the profile at all.
    pub found: bool,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Which file the keys came from, for messages.
    pub keys_from: Option<PathBuf>,
    pub region: Option<String>,
    /// The S3 endpoint: the services section's, then the profile's `endpoint_url`.
    pub endpoint_url: Option<String>,
    pub endpoint_from: Option<String>,
    pub ca_bundle: Option<String>,
    pub addressing_style: Option<String>,
}

impl Profile {
    /// `profile 'dev' (--profile)`, for messages.
    pub fn describe(&self) -> String {
        format!("profile '{}' ({})", self.name, self.chosen_by)
    }
}

/// The environment and the flag that choose a profile and its files.
#[derive(Debug, Clone, Copy)]
pub struct ProfileSource<'a> {
    /// `--profile`.
    pub flag: Option<&'a str>,
    /// The home directory, for `~/.aws/…` when the file variables are not set.
    pub home: Option<&'a Path>,
}

/// Reads the chosen profile from the shared files (`env` reads the environment). A file that
/// does not exist is empty; one that cannot be read or parsed is an error naming it.
pub fn load(
    source: ProfileSource<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Profile, String> {
    let (name, chosen_by) = match (source.flag, env("AWS_PROFILE")) {
        (Some(p), _) => (p.to_string(), "--profile"),
        (None, Some(p)) => (p, "AWS_PROFILE"),
        (None, None) => ("default".to_string(), "the default profile"),
    };
    let home_file = |rest: &str| source.home.map(|h| h.join(".aws").join(rest));
    let credentials_path = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(|p| expand_home(&p, source.home))
        .or_else(|| home_file("credentials"));
    let config_path = env("AWS_CONFIG_FILE")
        .map(|p| expand_home(&p, source.home))
        .or_else(|| home_file("config"));
    let credentials = read_sections(credentials_path.as_deref())?;
    let config = read_sections(config_path.as_deref())?;

    let from_credentials = credentials.get(&name);
    let config_section = if name == "default" {
        config
            .get("default")
            .or_else(|| config.get("profile default"))
    } else {
        config.get(&format!("profile {name}"))
    };
    let mut profile = Profile {
        name: name.clone(),
        chosen_by,
        found: from_credentials.is_some() || config_section.is_some(),
        ..Profile::default()
    };
    if !profile.found && chosen_by != "the default profile" {
        let files = [credentials_path.as_deref(), config_path.as_deref()]
            .into_iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ");
        return Err(format!(
            "{chosen_by} names the profile '{name}', which is not in {files}; name a profile \
             that is there (aws configure list-profiles) or create it"
        ));
    }
    // Keys: the credentials file's section wins over the config file's, key by key.
    let key = |k: &str| -> Option<(String, Option<PathBuf>)> {
        if let Some(v) = from_credentials.and_then(|s| s.get(k)) {
            return Some((v.to_string(), credentials_path.clone()));
        }
        config_section
            .and_then(|s| s.get(k))
            .map(|v| (v.to_string(), config_path.clone()))
    };
    if let Some((id, file)) = key("aws_access_key_id") {
        profile.access_key_id = Some(id);
        profile.keys_from = file;
    }
    profile.secret_access_key = key("aws_secret_access_key").map(|(v, _)| v);
    profile.session_token = key("aws_session_token").map(|(v, _)| v);
    if profile.access_key_id.is_none() && profile.secret_access_key.is_none() {
        let indirect = [
            "role_arn",
            "credential_process",
            "sso_session",
            "sso_start_url",
        ]
        .into_iter()
        .find(|k| key(k).is_some());
        if let Some(how) = indirect {
            return Err(format!(
                "{} gets its keys through {how}, which ringload does not resolve; export keys \
                 (aws configure export-credentials --profile {name} --format env) or pass \
                 --access-key and --secret-key",
                profile.describe()
            ));
        }
    }
    if let Some(section) = config_section {
        profile.region = section.get("region").map(str::to_string);
        profile.ca_bundle = section.get("ca_bundle").map(str::to_string);
        profile.addressing_style = section.nested("s3", "addressing_style").map(str::to_string);
        let ignore = env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            .or_else(|| {
                section
                    .get("ignore_configured_endpoint_urls")
                    .map(str::to_string)
            })
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let config_name = config_path
            .as_deref()
            .map_or_else(String::new, |p| p.display().to_string());
        let from_services = section.get("services").and_then(|services| {
            config
                .get(&format!("services {services}"))?
                .nested("s3", "endpoint_url")
                .map(|url| {
                    (
                        url.to_string(),
                        format!("[services {services}] in {config_name}"),
                    )
                })
        });
        let own = section.get("endpoint_url").map(|url| {
            (
                url.to_string(),
                format!("[{}] in {config_name}", profile_header(&name)),
            )
        });
        if !ignore && let Some((url, from)) = from_services.or(own) {
            profile.endpoint_url = Some(url);
            profile.endpoint_from = Some(from);
        }
    }
    Ok(profile)
}

fn profile_header(name: &str) -> String {
    if name == "default" {
        "default".into()
    } else {
        format!("profile {name}")
    }
}

fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

fn read_sections(path: Option<&Path>) -> Result<BTreeMap<String, Section>, String> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    match std::fs::read_to_string(path) {
        Ok(text) => parse_ini(&text).map_err(|e| {
            format!(
                "{}: {e}; fix the file (its format: aws help config-vars)",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!(
            "cannot read {}: {e}; fix its permissions or point AWS_CONFIG_FILE / \
             AWS_SHARED_CREDENTIALS_FILE elsewhere",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_nested_keys_and_comments() {
        let text = "\
# a comment
[default]
region = eu-west-1 # inline
s3 =
  addressing_style = virtual
  max_concurrent_requests = 20
aws_access_key_id=AKID;not-a-comment

[profile  dev]
endpoint_url = http://dev:9000
";
        let s = parse_ini(text).unwrap();
        let d = &s["default"];
        assert_eq!(d.get("region"), Some("eu-west-1"));
        assert_eq!(d.nested("s3", "addressing_style"), Some("virtual"));
        assert_eq!(d.get("aws_access_key_id"), Some("AKID;not-a-comment"));
        assert_eq!(
            s["profile dev"].get("endpoint_url"),
            Some("http://dev:9000")
        );
        assert!(parse_ini("key = value\n").unwrap_err().contains("line 1"));
        assert!(parse_ini("[a\n").unwrap_err().contains("line 1"));
        assert!(
            parse_ini("[a]\nnot a pair\n")
                .unwrap_err()
                .contains("line 2")
        );
    }
}
