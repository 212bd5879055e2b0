//! Where the storage is: endpoints, bucket, region, credentials, addressing and TLS trust,
//! resolved once from the command line, the usual AWS environment, the AWS profile
//! ([`super::profile`]) and the workload, in that order of precedence.
//!
//! | what | flag | environment | profile | workload |
//! |---|---|---|---|---|
//! | endpoints | `--endpoint` (comma list) | `AWS_ENDPOINT_URL_S3`, then `AWS_ENDPOINT_URL` | `[services]` s3 `endpoint_url`, then `endpoint_url` | `storage.storage_options.endpoint_url` |
//! | bucket | `--bucket` | — | — | `storage.storage_root`, else `ringload` (what `serve` serves) |
//! | region | `--region` | `AWS_REGION`, then `AWS_DEFAULT_REGION` | `region` | `storage.storage_options.region` |
//! | keys | `--access-key` + `--secret-key` | `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), not with `--profile` | `aws_access_key_id` + … | `storage.storage_options.access_key_id` + `secret_access_key` |
//! | addressing | `--addressing` | — | `s3 =` `addressing_style` | — |
//! | CA bundle | `--ca-bundle` | `AWS_CA_BUNDLE` | `ca_bundle` | — |
//! | pins | `--resolve` | — | — | — |
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
/// The bucket when neither `--bucket` nor the workload names one: the one `ringload serve`
/// serves by default, so `serve` and `run --endpoint URL` pair without naming it.
pub const DEFAULT_BUCKET: &str = "ringload";

/// How an endpoint is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// An `http[s]://host[:port]` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http[s]://host[:port]`, as given, without a trailing slash.
    pub url: String,
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Whether the host is this machine's loopback (`localhost`, 127.0.0.0/8, `::1`): where the
    /// kernel copies `SEND_ZC` data anyway.
    pub fn is_loopback(&self) -> bool {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Parses an endpoint URL; the error says what to write instead.
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let trimmed = text.trim().trim_end_matches('/');
        let (scheme, rest) = if let Some(rest) = trimmed.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = trimmed.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            return Err(format!(
                "'{text}' is not an endpoint URL; write http[s]://HOST[:PORT], e.g. \
                 http://127.0.0.1:9000"
            ));
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "'{text}': write the endpoint as http[s]://HOST[:PORT] with no path, user or \
                 query (buckets are addressed under it, see --addressing)"
            ));
        }
        let authority: http::uri::Authority = rest.parse().map_err(|_| {
            format!("'{text}' has no valid host[:port]; write http[s]://HOST[:PORT]")
        })?;
        let port_text = rest
            .rsplit_once(':')
            .filter(|(_, p)| !p.ends_with(']'))
            .map(|(_, p)| p);
        if port_text.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(format!(
                "'{text}' has no valid port; write http[s]://HOST[:PORT]"
            ));
        }
        if authority.host().is_empty() {
            return Err(format!(
                "'{text}' names no host; write http[s]://HOST[:PORT]"
            ));
        }
        Ok(Endpoint {
            url: format!("{}://{rest}", scheme.as_str()),
            scheme,
            host: authority.host().to_string(),
            port: authority.port_u16().unwrap_or(scheme.default_port()),
        })
    }

    /// Parses a comma-separated list of endpoints (several gateways of one store).
    pub fn parse_list(text: &str) -> Result<Vec<Endpoint>, String> {
        let endpoints = text
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Endpoint::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(format!(
                "'{text}' names no endpoint; write http[s]://HOST[:PORT][,http[s]://HOST2[:PORT]…]"
            ));
        }
        for (i, e) in endpoints.iter().enumerate() {
            if endpoints[..i].contains(e) {
                return Err(format!("'{text}' names {e} twice; name each gateway once"));
            }
        }
        Ok(endpoints)
    }

    /// The `Host` header value: `host` on the scheme's port, `host:port` otherwise (what SigV4
    /// signs).
    pub fn host_header(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn is_tls(&self) -> bool {
        self.scheme == Scheme::Https
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

/// How a bucket is named in a request: in the path (`host/bucket/key`) or in the host name
/// (`bucket.host/key`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Addressing {
    #[default]
    Path,
    Virtual,
}

impl Addressing {
    pub fn parse(text: &str) -> Result<Addressing, String> {
        match text.trim() {
            "path" => Ok(Addressing::Path),
            "virtual" => Ok(Addressing::Virtual),
            // The AWS CLI's `auto` picks virtual-hosted for AWS itself; ringload's targets are
            // mostly other stores, where path-style is what works everywhere.
            "auto" => Ok(Addressing::Path),
            other => Err(format!(
                "'{other}' is not an addressing style; write path or virtual"
            )),
        }
    }
}

/// `--resolve HOST:PORT:ADDR`, as in curl: connections to HOST on PORT go to ADDR, whatever
/// DNS says. The name still goes into `Host`, SigV4 and TLS's server name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub host: String,
    pub port: u16,
    pub addr: std::net::IpAddr,
}

impl Pin {
    pub fn parse(text: &str) -> Result<Pin, String> {
        let bad = || {
            format!(
                "'{text}' is not HOST:PORT:ADDR; write e.g. --resolve \
                 bucket.s3.example:443:10.0.0.5 (an IPv6 ADDR in [brackets])"
            )
        };
        let (host, rest) = text.split_once(':').ok_or_else(bad)?;
        let (port, addr) = rest.split_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        let addr = addr.parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Pin {
            host: host.to_ascii_lowercase(),
            port,
            addr,
        })
    }
}

/// How TLS connections check the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlsOptions {
    /// A PEM file of CA certificates trusted besides the system's, and where it was named
    /// (`--ca-bundle`, `AWS_CA_BUNDLE`, the profile).
    pub ca_bundle: Option<std::path::PathBuf>,
    pub ca_bundle_from: Option<String>,
    /// `--insecure`: no certificate or name checks at all.
    pub insecure: bool,
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

/// A bucket on one or more endpoints (gateways of one store), and how to reach and sign for
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// At least one. Connections are spread over them (see [`Target::endpoint_for`]).
    pub endpoints: Vec<Endpoint>,
    pub bucket: String,
    pub region: String,
    /// `None`: requests go unsigned.
    pub credentials: Option<Credentials>,
    /// Where the credentials came from, for messages: "--access-key", "AWS_ACCESS_KEY_ID", ….
    pub credentials_from: String,
    pub addressing: Addressing,
    /// `--resolve` pins.
    pub pins: Vec<Pin>,
    pub tls: TlsOptions,
    /// The AWS profile read, when one was found (`--profile`, `AWS_PROFILE`, or `default`).
    pub profile: Option<String>,
}

impl Target {
    /// A target on one plain endpoint, path-style, with nothing else set (tests, the embedded
    /// server).
    pub fn simple(endpoint: Endpoint, bucket: &str, credentials: Option<Credentials>) -> Target {
        Target {
            endpoints: vec![endpoint],
            bucket: bucket.to_string(),
            region: DEFAULT_REGION.to_string(),
            credentials_from: if credentials.is_some() {
                "the embedded server's keys".into()
            } else {
                "nowhere (unsigned requests)".into()
            },
            credentials,
            addressing: Addressing::Path,
            pins: Vec::new(),
            tls: TlsOptions::default(),
            profile: None,
        }
    }

    /// The first endpoint: the one set-up requests (LIST, footers) go to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoints[0]
    }

    /// Which endpoint connection `slot` of reader `reader` uses, where `reader` counts every
    /// rank's readers (rank × RT + reader) and each reader has `prefetch` connection slots:
    /// `(reader × prefetch + slot) mod endpoints`. Both engines assign connections so.
    pub fn endpoint_for(&self, reader: usize, prefetch: usize, slot: usize) -> usize {
        (reader * prefetch + slot) % self.endpoints.len()
    }

    /// The host name a request to `endpoint` names (and TLS checks): `bucket.host` when
    /// addressing is virtual-hosted.
    pub fn request_hostname(&self, endpoint: &Endpoint) -> String {
        match self.addressing {
            Addressing::Path => endpoint.host.clone(),
            Addressing::Virtual => format!("{}.{}", self.bucket, endpoint.host),
        }
    }

    /// The `Host` header of a request to `endpoint` (what SigV4 signs).
    pub fn host_header(&self, endpoint: &Endpoint) -> String {
        let name = self.request_hostname(endpoint);
        if endpoint.port == endpoint.scheme.default_port() {
            name
        } else {
            format!("{name}:{}", endpoint.port)
        }
    }

    /// The request path of `key` (or of the bucket itself): `/bucket/key` path-style, `/key`
    /// virtual-hosted; the key URI-encoded, slashes kept.
    pub fn request_path(&self, key: Option<&str>) -> String {
        let key = key.map(|k| super::sigv4::uri_encode(k, true));
        match (self.addressing, key) {
            (Addressing::Path, Some(key)) => format!("/{}/{key}", self.bucket),
            (Addressing::Path, None) => format!("/{}", self.bucket),
            (Addressing::Virtual, Some(key)) => format!("/{key}"),
            (Addressing::Virtual, None) => "/".to_string(),
        }
    }

    /// The full URL of a request to `endpoint`: scheme, host, path, and `?query` if any.
    pub fn request_url(&self, endpoint: &Endpoint, path: &str, query: &str) -> String {
        let host = self.host_header(endpoint);
        let scheme = endpoint.scheme.as_str();
        if query.is_empty() {
            format!("{scheme}://{host}{path}")
        } else {
            format!("{scheme}://{host}{path}?{query}")
        }
    }

    /// The addresses a connection to `endpoint` may use: a `--resolve` pin of the request's
    /// host name and port, else what DNS says.
    pub fn addresses(&self, endpoint: &Endpoint) -> std::io::Result<Vec<SocketAddr>> {
        let name = self.request_hostname(endpoint).to_ascii_lowercase();
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        let pinned: Vec<SocketAddr> = self
            .pins
            .iter()
            .filter(|p| p.host == bare && p.port == endpoint.port)
            .map(|p| SocketAddr::new(p.addr, endpoint.port))
            .collect();
        if !pinned.is_empty() {
            return Ok(pinned);
        }
        let addrs: Vec<SocketAddr> = (bare, endpoint.port).to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{bare} has no address"),
            ));
        }
        Ok(addrs)
    }

    /// `s3://bucket` and the endpoints, for messages.
    pub fn describe(&self) -> String {
        format!("s3://{} at {}", self.bucket, self.endpoints_text())
    }

    /// The endpoints, comma-separated.
    pub fn endpoints_text(&self) -> String {
        self.endpoints
            .iter()
            .map(|e| e.url.as_str())
            .collect::<Vec<_>>()
            .join(",")
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
    /// `--secret-key-file`: the secret on its first line.
    pub secret_key_file: Option<std::path::PathBuf>,
    pub profile: Option<String>,
    pub addressing: Option<String>,
    pub resolve: Vec<String>,
    pub ca_bundle: Option<String>,
    pub insecure: bool,
}

/// Resolves the target from flags, then the environment (read through `env`), then the AWS
/// profile, then the workload. `Ok(None)`: no endpoint is configured anywhere.
pub fn resolve(
    flags: &TargetFlags,
    storage: &StorageSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Target>, UsageError> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let home = env("HOME").map(std::path::PathBuf::from);
    let profile = super::profile::load(
        super::profile::ProfileSource {
            flag: flags.profile.as_deref(),
            home: home.as_deref(),
        },
        &env,
    )
    .map_err(UsageError)?;
    let ignore_env_endpoints =
        env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let env_endpoint = |name: &'static str| {
        if ignore_env_endpoints {
            None
        } else {
            env(name).map(|e| (e, name.to_string()))
        }
    };
    let endpoint = if let Some(e) = &flags.endpoint {
        Some((e.clone(), "--endpoint".to_string()))
    } else if let Some(e) = env_endpoint("AWS_ENDPOINT_URL_S3") {
        Some(e)
    } else if let Some(e) = env_endpoint("AWS_ENDPOINT_URL") {
        Some(e)
    } else if let (Some(e), Some(from)) = (&profile.endpoint_url, &profile.endpoint_from) {
        Some((e.clone(), from.clone()))
    } else {
        storage
            .endpoint_url
            .clone()
            .map(|e| (e, "storage.storage_options.endpoint_url".to_string()))
    };
    let Some((endpoint_text, endpoint_from)) = endpoint else {
        return Ok(None);
    };
    let endpoints = Endpoint::parse_list(&endpoint_text)
        .map_err(|e| UsageError(format!("{endpoint_from} {e}")))?;
    let (bucket, bucket_from) = match (&flags.bucket, &storage.bucket) {
        (Some(b), _) => (b.clone(), "--bucket"),
        (None, Some(b)) => (b.clone(), "storage.storage_root"),
        (None, None) => (DEFAULT_BUCKET.to_string(), "the default bucket"),
    };
    check_bucket_name(&bucket).map_err(|e| UsageError(format!("{bucket_from}: {e}")))?;
    let region = flags
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| profile.region.clone())
        .or_else(|| storage.region.clone())
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
    let (credentials, credentials_from) = credentials(flags, storage, &profile, &env)?;
    let (addressing, addressing_from) = match (&flags.addressing, &profile.addressing_style) {
        (Some(a), _) => (a.clone(), "--addressing".to_string()),
        (None, Some(a)) => (
            a.clone(),
            format!("{} s3.addressing_style", profile.describe()),
        ),
        (None, None) => ("path".to_string(), String::new()),
    };
    let addressing = Addressing::parse(&addressing)
        .map_err(|e| UsageError(format!("{addressing_from}: {e}")))?;
    if addressing == Addressing::Virtual && !valid_bucket_name(&bucket) {
        return Err(UsageError(format!(
            "{bucket_from}: '{bucket}' cannot be addressed virtual-hosted (it is not a DNS \
             name: 3–63 of a-z, 0-9, '.', '-'); use --addressing path"
        )));
    }
    let pins = flags
        .resolve
        .iter()
        .map(|p| Pin::parse(p).map_err(|e| UsageError(format!("--resolve {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let ca = if let Some(c) = &flags.ca_bundle {
        Some((c.clone(), "--ca-bundle".to_string()))
    } else if let Some(c) = env("AWS_CA_BUNDLE") {
        Some((c, "AWS_CA_BUNDLE".to_string()))
    } else {
        profile
            .ca_bundle
            .clone()
            .map(|c| (c, format!("{} ca_bundle", profile.describe())))
    };
    let tls = TlsOptions {
        ca_bundle: ca.as_ref().map(|(path, _)| std::path::PathBuf::from(path)),
        ca_bundle_from: ca.map(|(_, from)| from),
        insecure: flags.insecure,
    };
    Ok(Some(Target {
        endpoints,
        bucket,
        region,
        credentials,
        credentials_from,
        addressing,
        pins,
        tls,
        profile: profile.found.then(|| profile.name.clone()),
    }))
}

/// The keys: flags, then the `AWS_ACCESS_KEY_ID` pair (unless `--profile` names a profile, as
/// botocore does), then the profile, then the workload.
fn credentials(
    flags: &TargetFlags,
    storage: &StorageSettings,
    profile: &super::profile::Profile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<Credentials>, String), UsageError> {
    let secret = match (&flags.secret_key, &flags.secret_key_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(file)) => Some(secret_from_file(file)?),
        (None, None) => None,
    };
    match (&flags.access_key, secret) {
        (Some(a), Some(s)) => return Ok((Some(keys(a, &s, None)), "--access-key".into())),
        // The id on the command line, the secret in the environment (as a sweep hands keys to
        // its points: see `cli::S3Args::secret_env`).
        (Some(a), None) => match env("AWS_SECRET_ACCESS_KEY") {
            Some(s) => return Ok((Some(keys(a, &s, None)), "--access-key".into())),
            None => {
                return Err(UsageError(
                    "--access-key needs its secret: pass --secret-key-file FILE or set \
                     AWS_SECRET_ACCESS_KEY (--secret-key SECRET works too, but shows in `ps`)"
                        .into(),
                ));
            }
        },
        (None, Some(_)) => {
            return Err(UsageError(
                "--secret-key and --secret-key-file need --access-key; pass it, or neither to \
                 use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                    .into(),
            ));
        }
        (None, None) => {}
    }
    if flags.profile.is_none() {
        match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(a), Some(s)) => {
                return Ok((
                    Some(keys(&a, &s, env("AWS_SESSION_TOKEN"))),
                    "AWS_ACCESS_KEY_ID".into(),
                ));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(UsageError(
                    "only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set; set both, \
                     or pass --access-key and --secret-key"
                        .into(),
                ));
            }
            (None, None) => {}
        }
    }
    match (&profile.access_key_id, &profile.secret_access_key) {
        (Some(a), Some(s)) => {
            let file = profile
                .keys_from
                .as_ref()
                .map_or_else(String::new, |f| format!(" in {}", f.display()));
            return Ok((
                Some(keys(a, s, profile.session_token.clone())),
                format!("{}{file}", profile.describe()),
            ));
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(UsageError(format!(
                "{} has only one of aws_access_key_id and aws_secret_access_key; set both",
                profile.describe()
            )));
        }
        (None, None) => {}
    }
    Ok(match &storage.static_keys {
        Some((a, s)) => (
            Some(keys(a, s, None)),
            "storage.storage_options.access_key_id".into(),
        ),
        None => (None, "nowhere (unsigned requests)".into()),
    })
}

/// `--secret-key-file`: the first line of `path`, trimmed. The error names the file, never
/// what it holds.
fn secret_from_file(path: &std::path::Path) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--secret-key-file {}: cannot read it ({e}); give a readable file whose first line \
             is the secret access key",
            path.display()
        ))
    })?;
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.is_empty() {
        return Err(UsageError(format!(
            "--secret-key-file {}: its first line is empty; put the secret access key there",
            path.display()
        )));
    }
    Ok(secret.to_string())
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
        let e = Endpoint::parse("https://s3.example").unwrap();
        assert_eq!(
            (e.scheme, e.port, e.host_header()),
            (Scheme::Https, 443, "s3.example".into())
        );
        let e = Endpoint::parse("https://s3.example:9443").unwrap();
        assert_eq!(e.host_header(), "s3.example:9443");
        let list = Endpoint::parse_list("http://a:1, http://b:2,").unwrap();
        assert_eq!(list.len(), 2);
        assert!(Endpoint::parse_list("http://a:1,http://a:1").is_err());
        assert!(Endpoint::parse_list(" , ").is_err());
        for bad in [
            "ftp://s3.amazonaws.com",
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
        assert_eq!(t.endpoint().url, "http://env-s3:2");
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
            ..TargetFlags::default()
        };
        let t = resolve(&flags, &storage(), env).unwrap().unwrap();
        assert_eq!(
            (
                t.endpoint().url.as_str(),
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
            (t.endpoint().url.as_str(), t.region.as_str()),
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
        // No bucket anywhere: the one `ringload serve` serves by default.
        let t = resolve(&flags, &empty, |_| None).unwrap().unwrap();
        assert_eq!(t.bucket, "ringload");
        assert_eq!(t.bucket, crate::server::DEFAULT_BUCKET);
        let half = TargetFlags {
            endpoint: Some("http://h:1".into()),
            bucket: Some("b".into()),
            access_key: Some("K".into()),
            ..TargetFlags::default()
        };
        let err = resolve(&half, &empty, |_| None).unwrap_err();
        assert!(err.0.contains("--secret-key-file FILE"), "{err}");
        // The id as a flag, the secret from the environment or a file.
        let secret = |n: &str| (n == "AWS_SECRET_ACCESS_KEY").then(|| "S3CR3T".to_string());
        let t = resolve(&half, &empty, secret).unwrap().unwrap();
        let c = t.credentials.unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.secret_access_key.as_str()),
            ("K", "S3CR3T")
        );
        assert_eq!(t.credentials_from, "--access-key");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "  from-file \nsecond line\n").unwrap();
        let with_file = TargetFlags {
            secret_key_file: Some(file.clone()),
            ..half.clone()
        };
        let t = resolve(&with_file, &empty, secret).unwrap().unwrap();
        assert_eq!(t.credentials.unwrap().secret_access_key, "from-file");
        std::fs::write(&file, "\n").unwrap();
        let err = resolve(&with_file, &empty, |_| None).unwrap_err();
        assert!(err.0.contains("first line is empty"), "{err}");
        let missing = TargetFlags {
            secret_key_file: Some(dir.path().join("nope")),
            ..half.clone()
        };
        let err = resolve(&missing, &empty, |_| None).unwrap_err();
        assert!(
            err.0.starts_with("--secret-key-file ") && err.0.contains("cannot read"),
            "{err}"
        );
        let no_id = TargetFlags {
            access_key: None,
            secret_key: Some("S".into()),
            ..half.clone()
        };
        assert!(resolve(&no_id, &empty, |_| None).is_err());
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
                endpoint: Some("ftp://x".into()),
                ..flags
            },
            &empty,
            |_| None,
        )
        .unwrap_err();
        assert!(
            err.0
                .starts_with("--endpoint 'ftp://x' is not an endpoint URL"),
            "{err}"
        );
    }

    #[test]
    fn addressing_and_pins_shape_the_request() {
        let mut t = Target::simple(Endpoint::parse("http://s3.test:9000").unwrap(), "bkt", None);
        let e = t.endpoints[0].clone();
        assert_eq!(t.request_path(Some("a b/c")), "/bkt/a%20b/c");
        assert_eq!(t.host_header(&e), "s3.test:9000");
        t.addressing = Addressing::Virtual;
        assert_eq!(t.request_path(Some("a b/c")), "/a%20b/c");
        assert_eq!(t.request_path(None), "/");
        assert_eq!(t.host_header(&e), "bkt.s3.test:9000");
        assert_eq!(
            t.request_url(&e, "/k", "x=1"),
            "http://bkt.s3.test:9000/k?x=1"
        );
        t.pins = vec![Pin::parse("BKT.s3.test:9000:127.0.0.7").unwrap()];
        assert_eq!(
            t.addresses(&e).unwrap(),
            vec!["127.0.0.7:9000".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(Pin::parse("h:1:[::1]").unwrap().addr.to_string(), "::1");
        for bad in ["h:1", "h:x:1.2.3.4", ":1:1.2.3.4", "h:1:nothost"] {
            assert!(Pin::parse(bad).is_err(), "{bad}");
        }
        // Connections of reader g, slot j: (g × prefetch + j) mod endpoints.
        t.endpoints
            .push(Endpoint::parse("http://s3b.test:9000").unwrap());
        let spread: Vec<usize> = (0..3)
            .flat_map(|g| (0..2).map(move |j| (g, j)))
            .map(|(g, j)| t.endpoint_for(g, 2, j))
            .collect();
        assert_eq!(spread, [0, 1, 0, 1, 0, 1]);
        assert_eq!(t.endpoint_for(1, 1, 0), 1);
    }

    /// Profile resolution, as the AWS CLI does it: one case per row.
    #[test]
    fn profiles_resolve_as_the_aws_cli_does() {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &credentials,
            "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n\
             [dev]\naws_access_key_id = DEVKEY\naws_secret_access_key = devsecret\n\
             aws_session_token = devtoken\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[default]\nregion = eu-west-1\nendpoint_url = http://default-gw:9000\n\
             [profile dev]\nregion = eu-north-1\nendpoint_url = http://dev-own:9000\n\
             services = dev-s3\nca_bundle = /etc/dev-ca.pem\ns3 =\n  addressing_style = virtual\n\
             [services dev-s3]\ns3 =\n  endpoint_url = https://dev-svc:9443\n\
             [profile cfgkeys]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n\
             [profile sso]\nsso_session = corp\n\
             [profile ignoring]\nendpoint_url = http://ignored:1\n\
             ignore_configured_endpoint_urls = true\n",
        )
        .unwrap();
        let files = [
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.display().to_string(),
            ),
            ("AWS_CONFIG_FILE", config.display().to_string()),
        ];
        let empty = StorageSettings {
            storage_type: None,
            bucket: Some("bkt".into()),
            endpoint_url: None,
            region: None,
            has_credentials: false,
            static_keys: None,
        };
        struct Case {
            name: &'static str,
            profile_flag: Option<&'static str>,
            env: &'static [(&'static str, &'static str)],
            endpoint: Option<&'static str>,
            region: &'static str,
            key: Option<&'static str>,
            addressing: Addressing,
        }
        let cases = [
            Case {
                name: "the default profile, nothing else set",
                profile_flag: None,
                env: &[],
                endpoint: Some("http://default-gw:9000"),
                region: "eu-west-1",
                key: Some("DEFKEY"),
                addressing: Addressing::Path,
            },
            Case {
                name: "--profile: the services section's endpoint beats the profile's own",
                profile_flag: Some("dev"),
                env: &[],
                endpoint: Some("https://dev-svc:9443"),
                region: "eu-north-1",
                key: Some("DEVKEY"),
                addressing: Addressing::Virtual,
            },
            Case {
                name: "AWS_PROFILE chooses the profile",
                profile_flag: None,
                env: &[("AWS_PROFILE", "dev")],
                endpoint: Some("https://dev-svc:9443"),
                region: "eu-north-1",
                key: Some("DEVKEY"),
                addressing: Addressing::Virtual,
            },
            Case {
                name: "the key pair in the environment beats AWS_PROFILE",
                profile_flag: None,
                env: &[
                    ("AWS_PROFILE", "dev"),
                    ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                    ("AWS_SECRET_ACCESS_KEY", "envsecret"),
                ],
                endpoint: Some("https://dev-svc:9443"),
                region: "eu-north-1",
                key: Some("ENVKEY"),
                addressing: Addressing::Virtual,
            },
            Case {
                name: "--profile beats the key pair in the environment",
                profile_flag: Some("dev"),
                env: &[
                    ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                    ("AWS_SECRET_ACCESS_KEY", "envsecret"),
                ],
                endpoint: Some("https://dev-svc:9443"),
                region: "eu-north-1",
                key: Some("DEVKEY"),
                addressing: Addressing::Virtual,
            },
            Case {
                name: "the environment's endpoint and region beat the profile's",
                profile_flag: Some("dev"),
                env: &[
                    ("AWS_ENDPOINT_URL", "http://env-gw:1"),
                    ("AWS_REGION", "env-region"),
                ],
                endpoint: Some("http://env-gw:1"),
                region: "env-region",
                key: Some("DEVKEY"),
                addressing: Addressing::Virtual,
            },
            Case {
                name: "keys in the config file when the credentials file has none",
                profile_flag: Some("cfgkeys"),
                env: &[],
                endpoint: None,
                region: DEFAULT_REGION,
                key: Some("CFGKEY"),
                addressing: Addressing::Path,
            },
            Case {
                name: "ignore_configured_endpoint_urls drops the profile's endpoint",
                profile_flag: Some("ignoring"),
                env: &[],
                endpoint: None,
                region: DEFAULT_REGION,
                key: None,
                addressing: Addressing::Path,
            },
        ];
        for case in &cases {
            let env = |name: &str| {
                files
                    .iter()
                    .map(|(k, v)| (*k, v.as_str()))
                    .chain(case.env.iter().copied())
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            };
            let flags = TargetFlags {
                profile: case.profile_flag.map(str::to_string),
                // An endpoint on the command line when the case expects none from the files,
                // so the rest still resolves.
                endpoint: case.endpoint.is_none().then(|| "http://flag:1".to_string()),
                ..TargetFlags::default()
            };
            let t = resolve(&flags, &empty, env)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name))
                .unwrap_or_else(|| panic!("{}: no target", case.name));
            assert_eq!(
                t.endpoints[0].url,
                case.endpoint.unwrap_or("http://flag:1"),
                "{}",
                case.name
            );
            assert_eq!(t.region, case.region, "{}", case.name);
            assert_eq!(
                t.credentials.as_ref().map(|c| c.access_key_id.as_str()),
                case.key,
                "{}",
                case.name
            );
            assert_eq!(t.addressing, case.addressing, "{}", case.name);
        }
        // The dev profile's session token and CA bundle come along.
        let env = |name: &str| {
            files
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        };
        let dev = TargetFlags {
            profile: Some("dev".into()),
            ..TargetFlags::default()
        };
        let t = resolve(&dev, &empty, env).unwrap().unwrap();
        assert_eq!(
            t.credentials.unwrap().session_token.as_deref(),
            Some("devtoken")
        );
        assert_eq!(
            t.tls.ca_bundle.unwrap().display().to_string(),
            "/etc/dev-ca.pem"
        );
        assert_eq!(t.profile.as_deref(), Some("dev"));
        // Errors: a named profile that is nowhere; one that gets keys through SSO.
        for (name, expect) in [("nope", "names the profile 'nope'"), ("sso", "sso_session")] {
            let flags = TargetFlags {
                profile: Some(name.into()),
                ..TargetFlags::default()
            };
            let err = resolve(&flags, &empty, env).unwrap_err();
            assert!(err.0.contains(expect), "{name}: {err}");
        }
    }
}
