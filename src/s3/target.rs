//! Where the storage is: endpoint, bucket, region and credentials, resolved once from the
//! command line, the usual AWS environment and the workload, in that order of precedence.
//!
//! | what | flag | environment | workload |
//! |---|---|---|---|
//! | endpoint | `--endpoint` | `AWS_ENDPOINT_URL_S3`, then `AWS_ENDPOINT_URL` | `storage.storage_options.endpoint_url` |
//! | bucket | `--bucket` | — | `storage.storage_root` |
//! | region | `--region` | `AWS_REGION`, then `AWS_DEFAULT_REGION` | `storage.storage_options.region` |
//! | keys | `--access-key` + `--secret-key` | `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`) | `storage.storage_options.access_key_id` + `secret_access_key` |
//!
//! No keys anywhere means unsigned (anonymous) requests. No endpoint anywhere means `run` uses
//! the embedded server.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

use serde::Serialize;

use crate::exit::UsageError;

/// The workload's storage keys (DLIO's conventions), as settings resolution read them.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct StorageSettings {
    pub storage_type: Option<String>,
    /// `storage.storage_root`: the bucket.
    pub bucket: Option<String>,
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    /// Whether the workload carries credentials (never printed).
    pub has_credentials: bool,
    /// `storage.storage_options.access_key_id` and `secret_access_key`: never serialized or
    /// shown by Debug.
    #[serde(skip)]
    pub static_keys: Option<(String, String)>,
}

impl fmt::Debug for StorageSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageSettings")
            .field("storage_type", &self.storage_type)
            .field("bucket", &self.bucket)
            .field("endpoint_url", &self.endpoint_url)
            .field("region", &self.region)
            .field("has_credentials", &self.has_credentials)
            .finish_non_exhaustive()
    }
}

/// The region signed into requests when none is configured.
pub const DEFAULT_REGION: &str = "us-east-1";

/// An `http://host[:port]` endpoint. Buckets are addressed path-style under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://host[:port]`, as given, without a trailing slash.
    pub url: String,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Parses an endpoint URL; the error says what to write instead.
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let trimmed = text.trim().trim_end_matches('/');
        if trimmed.starts_with("https://") {
            return Err(format!(
                "'{text}': https is not supported; ringload speaks plain HTTP/1.1 (use an http:// \
                 endpoint, or a TLS-terminating proxy in front of the store)"
            ));
        }
        let Some(rest) = trimmed.strip_prefix("http://") else {
            return Err(format!(
                "'{text}' is not an endpoint URL; write http://HOST[:PORT], e.g. \
                 http://127.0.0.1:9000"
            ));
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "'{text}': write the endpoint as http://HOST[:PORT] with no path, user or query \
                 (buckets are addressed path-style under it)"
            ));
        }
        let authority: http::uri::Authority = rest
            .parse()
            .map_err(|_| format!("'{text}' has no valid host[:port]; write http://HOST[:PORT]"))?;
        let port_text = rest
            .rsplit_once(':')
            .filter(|(_, p)| !p.ends_with(']'))
            .map(|(_, p)| p);
        if port_text.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(format!(
                "'{text}' has no valid port; write http://HOST[:PORT]"
            ));
        }
        if authority.host().is_empty() {
            return Err(format!("'{text}' names no host; write http://HOST[:PORT]"));
        }
        Ok(Endpoint {
            url: format!("http://{rest}"),
            host: authority.host().to_string(),
            port: authority.port_u16().unwrap_or(80),
        })
    }

    /// The `Host` header value: `host` on port 80, `host:port` otherwise (what SigV4 signs).
    pub fn host_header(&self) -> String {
        if self.port == 80 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The addresses the host resolves to.
    pub fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        Ok((host, self.port).to_socket_addrs()?.collect())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// An access key pair, with an optional session token. Debug output never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// S3's bucket naming rules: 3–63 characters of `a-z 0-9 . -`, starting and ending with a letter
/// or digit.
pub fn valid_bucket_name(name: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&name.len())
        && name.bytes().all(|c| alnum(c) || c == b'.' || c == b'-')
        && name.bytes().next().is_some_and(alnum)
        && name.bytes().last().is_some_and(alnum)
        && !name.contains("..")
}

/// Whether `name` can name a bucket on any S3-compatible store: stores differ on case and `_`
/// (S3's own rule is [`valid_bucket_name`]), but none takes an empty name, `.`/`..`, a `/`,
/// whitespace or control characters. The error says what is wrong and what to do.
pub fn check_bucket_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the bucket name is empty; name a bucket".into());
    }
    if name.contains('/') {
        return Err(format!(
            "'{name}' is not a bucket name: it has a '/'; name the bucket alone and put the \
             folder inside it in dataset.data_folder"
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("'{name}' is not a bucket name; name a bucket"));
    }
    if name.len() > 255 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "'{name}' is not a bucket name: use up to 63 characters of a-z, 0-9, '.' and '-'"
        ));
    }
    Ok(())
}

/// A bucket on an endpoint, and how to sign for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub endpoint: Endpoint,
    pub bucket: String,
    pub region: String,
    /// `None`: requests go unsigned.
    pub credentials: Option<Credentials>,
    /// Where the credentials came from, for messages: "--access-key", "AWS_ACCESS_KEY_ID", ….
    pub credentials_from: &'static str,
}

impl Target {
    /// `s3://bucket` and the endpoint, for messages.
    pub fn describe(&self) -> String {
        format!("s3://{} at {}", self.bucket, self.endpoint)
    }
}

/// What the command line says about the storage.
#[derive(Debug, Clone, Default)]
pub struct TargetFlags {
    pub endpoint: Option<String>,
    pub bucket: Option<String>,
    pub region: Option<String>,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
}

/// Resolves the target from flags, then the environment (read through `env`), then the
/// workload. `Ok(None)`: no endpoint is configured anywhere.
pub fn resolve(
    flags: &TargetFlags,
    storage: &StorageSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Target>, UsageError> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let endpoint = if let Some(e) = &flags.endpoint {
        Some((e.clone(), "--endpoint"))
    } else if let Some(e) = env("AWS_ENDPOINT_URL_S3") {
        Some((e, "AWS_ENDPOINT_URL_S3"))
    } else if let Some(e) = env("AWS_ENDPOINT_URL") {
        Some((e, "AWS_ENDPOINT_URL"))
    } else {
        storage
            .endpoint_url
            .clone()
            .map(|e| (e, "storage.storage_options.endpoint_url"))
    };
    let Some((endpoint_text, endpoint_from)) = endpoint else {
        return Ok(None);
    };
    let endpoint =
        Endpoint::parse(&endpoint_text).map_err(|e| UsageError(format!("{endpoint_from} {e}")))?;
    let (bucket, bucket_from) = match (&flags.bucket, &storage.bucket) {
        (Some(b), _) => (b.clone(), "--bucket"),
        (None, Some(b)) => (b.clone(), "storage.storage_root"),
        (None, None) => {
            return Err(UsageError(format!(
                "no bucket for {endpoint}: pass --bucket NAME or set storage.storage_root in the \
                 workload"
            )));
        }
    };
    check_bucket_name(&bucket).map_err(|e| UsageError(format!("{bucket_from}: {e}")))?;
    let region = flags
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| storage.region.clone())
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
    let (credentials, credentials_from) = match (&flags.access_key, &flags.secret_key) {
        (Some(a), Some(s)) => (Some(keys(a, s, None)), "--access-key"),
        (Some(_), None) | (None, Some(_)) => {
            return Err(UsageError(
                "--access-key and --secret-key go together; pass both, or neither to use \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                    .into(),
            ));
        }
        (None, None) => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(a), Some(s)) => (
                Some(keys(&a, &s, env("AWS_SESSION_TOKEN"))),
                "AWS_ACCESS_KEY_ID",
            ),
            (Some(_), None) | (None, Some(_)) => {
                return Err(UsageError(
                    "only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set; set both, or \
                     pass --access-key and --secret-key"
                        .into(),
                ));
            }
            (None, None) => match &storage.static_keys {
                Some((a, s)) => (
                    Some(keys(a, s, None)),
                    "storage.storage_options.access_key_id",
                ),
                None => (None, "nowhere (unsigned requests)"),
            },
        },
    };
    Ok(Some(Target {
        endpoint,
        bucket,
        region,
        credentials,
        credentials_from,
    }))
}

fn keys(access: &str, secret: &str, token: Option<String>) -> Credentials {
    Credentials {
        access_key_id: access.to_string(),
        secret_access_key: secret.to_string(),
        session_token: token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage() -> StorageSettings {
        StorageSettings {
            storage_type: Some("s3".into()),
            bucket: Some("wl-bucket".into()),
            endpoint_url: Some("http://wl:9000".into()),
            region: Some("wl-region".into()),
            has_credentials: true,
            static_keys: Some(("WLKEY".into(), "wlsecret".into())),
        }
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:9000/").unwrap();
        assert_eq!(
            (e.url.as_str(), e.host.as_str(), e.port),
            ("http://127.0.0.1:9000", "127.0.0.1", 9000)
        );
        assert_eq!(e.host_header(), "127.0.0.1:9000");
        let e = Endpoint::parse("http://storage.example").unwrap();
        assert_eq!((e.port, e.host_header()), (80, "storage.example".into()));
        let e = Endpoint::parse("http://[::1]:3900").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("[::1]", 3900));
        for bad in [
            "https://s3.amazonaws.com",
            "127.0.0.1:9000",
            "http://host/bucket",
            "http://",
            "http://h:notaport",
            "http://user@h",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_then_environment_then_workload() {
        let env = |name: &str| match name {
            "AWS_ENDPOINT_URL" => Some("http://env:1".to_string()),
            "AWS_ENDPOINT_URL_S3" => Some("http://env-s3:2".to_string()),
            "AWS_ACCESS_KEY_ID" => Some("ENVKEY".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("envsecret".to_string()),
            "AWS_SESSION_TOKEN" => Some("tok".to_string()),
            "AWS_DEFAULT_REGION" => Some("env-default".to_string()),
            _ => None,
        };
        let t = resolve(&TargetFlags::default(), &storage(), env)
            .unwrap()
            .unwrap();
        assert_eq!(t.endpoint.url, "http://env-s3:2");
        assert_eq!(t.bucket, "wl-bucket");
        assert_eq!(t.region, "env-default");
        let c = t.credentials.unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.session_token.as_deref()),
            ("ENVKEY", Some("tok"))
        );

        let flags = TargetFlags {
            endpoint: Some("http://flag:3".into()),
            bucket: Some("flag-bucket".into()),
            region: Some("flag-region".into()),
            access_key: Some("FLAGKEY".into()),
            secret_key: Some("flagsecret".into()),
        };
        let t = resolve(&flags, &storage(), env).unwrap().unwrap();
        assert_eq!(
            (
                t.endpoint.url.as_str(),
                t.bucket.as_str(),
                t.region.as_str()
            ),
            ("http://flag:3", "flag-bucket", "flag-region")
        );
        assert_eq!(t.credentials.unwrap().access_key_id, "FLAGKEY");

        let t = resolve(&TargetFlags::default(), &storage(), |_| None)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.endpoint.url.as_str(), t.region.as_str()),
            ("http://wl:9000", "wl-region")
        );
        assert_eq!(t.credentials.unwrap().access_key_id, "WLKEY");
    }

    #[test]
    fn nothing_configured_and_bad_setups() {
        let empty = StorageSettings {
            storage_type: None,
            bucket: None,
            endpoint_url: None,
            region: None,
            has_credentials: false,
            static_keys: None,
        };
        assert_eq!(
            resolve(&TargetFlags::default(), &empty, |_| None).unwrap(),
            None
        );
        let flags = TargetFlags {
            endpoint: Some("http://h:1".into()),
            ..TargetFlags::default()
        };
        let err = resolve(&flags, &empty, |_| None).unwrap_err();
        assert!(err.0.contains("--bucket"), "{err}");
        let half = TargetFlags {
            endpoint: Some("http://h:1".into()),
            bucket: Some("b".into()),
            access_key: Some("K".into()),
            ..TargetFlags::default()
        };
        assert!(resolve(&half, &empty, |_| None).is_err());
        let only_id = |n: &str| (n == "AWS_ACCESS_KEY_ID").then(|| "K".to_string());
        let flags = TargetFlags {
            endpoint: Some("http://h:1".into()),
            bucket: Some("b".into()),
            ..TargetFlags::default()
        };
        assert!(resolve(&flags, &empty, only_id).is_err());
        let t = resolve(&flags, &empty, |_| None).unwrap().unwrap();
        assert_eq!((t.credentials, t.region.as_str()), (None, DEFAULT_REGION));
        let err = resolve(
            &TargetFlags {
                endpoint: Some("https://x".into()),
                ..flags
            },
            &empty,
            |_| None,
        )
        .unwrap_err();
        assert!(
            err.0
                .starts_with("--endpoint 'https://x': https is not supported"),
            "{err}"
        );
    }
}
