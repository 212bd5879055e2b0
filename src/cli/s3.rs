//! The flags that name and reach a store: endpoints, bucket, addressing, TLS, credentials,
//! retries and timeouts (`run`, `sweep`, `plan`, `generate`).

use std::path::PathBuf;

use clap::Args;

use super::values::parse_seconds;

#[derive(Debug, Clone, PartialEq, Args, Default)]
pub struct S3Args {
    /// The S3 endpoint, http[s]://HOST[:PORT], or several gateways of one store separated by
    /// commas (also AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, or
    /// storage.storage_options.endpoint_url)
    #[arg(long, value_name = "URL[,URL…]", help_heading = "Storage")]
    pub endpoint: Option<String>,

    /// The AWS profile to read from ~/.aws/credentials and ~/.aws/config (also AWS_PROFILE)
    /// [default: default]
    #[arg(long, value_name = "NAME", help_heading = "Storage")]
    pub profile: Option<String>,

    /// How requests name the bucket: in the path (host/bucket/key) or in the host name
    /// (bucket.host/key) (also the profile's s3 addressing_style) [default: path]
    #[arg(long, value_name = "STYLE", value_parser = ["path", "virtual"], help_heading = "Storage")]
    pub addressing: Option<String>,

    /// Connect to HOST on PORT at ADDR whatever DNS says, as curl's --resolve (repeatable)
    #[arg(long, value_name = "HOST:PORT:ADDR", help_heading = "Storage")]
    pub resolve: Vec<String>,

    /// A PEM file of the CA certificates to trust for https:// endpoints, instead of the
    /// system's, as the AWS CLI (also AWS_CA_BUNDLE, the profile's ca_bundle)
    #[arg(long, value_name = "FILE", help_heading = "Storage")]
    pub ca_bundle: Option<String>,

    /// Do not check https:// endpoints' certificates at all (said in the report and summary)
    #[arg(long, help_heading = "Storage")]
    pub insecure: bool,

    /// The bucket (also storage.storage_root) [default: ringload, the bucket `ringload serve`
    /// serves]
    #[arg(long, value_name = "NAME", help_heading = "Storage")]
    pub bucket: Option<String>,

    /// The region signed into requests (also AWS_REGION, AWS_DEFAULT_REGION) [default:
    /// us-east-1]
    #[arg(long, value_name = "REGION", help_heading = "Storage")]
    pub region: Option<String>,

    /// Access key id (also AWS_ACCESS_KEY_ID); its secret from --secret-key-file, else
    /// AWS_SECRET_ACCESS_KEY; without keys requests go unsigned
    #[arg(long, value_name = "KEY", help_heading = "Storage")]
    pub access_key: Option<String>,

    /// Secret access key. Typed here it shows in `ps` to every user of the machine: prefer
    /// AWS_SECRET_ACCESS_KEY, the profile, or --secret-key-file
    #[arg(
        long,
        value_name = "SECRET",
        requires = "access_key",
        conflicts_with = "secret_key_file",
        help_heading = "Storage"
    )]
    pub secret_key: Option<String>,

    /// Read the secret access key of --access-key from the first line of FILE
    #[arg(
        long,
        value_name = "FILE",
        requires = "access_key",
        help_heading = "Storage"
    )]
    pub secret_key_file: Option<PathBuf>,

    /// Attempts after the first for a request that fails with 5xx, a broken connection or a
    /// timeout
    #[arg(long, value_name = "N", default_value_t = crate::s3::client::DEFAULT_RETRIES, help_heading = "Storage")]
    pub retries: u32,

    /// The time one attempt of a request may take, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = crate::s3::client::DEFAULT_REQUEST_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, help_heading = "Storage")]
    pub request_timeout: f64,

    /// The time a connection may take to open, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = crate::s3::client::DEFAULT_CONNECT_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, help_heading = "Storage")]
    pub connect_timeout: f64,

    /// The time from sending a request to its response head, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = crate::s3::client::DEFAULT_FIRST_BYTE_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, help_heading = "Storage")]
    pub first_byte_timeout: f64,

    /// The longest pause between body bytes before the attempt counts as stalled, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = crate::s3::client::DEFAULT_IDLE_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, help_heading = "Storage")]
    pub idle_timeout: f64,
}

impl S3Args {
    /// These flags as a command line, for a child `ringload run`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                args.push(flag.to_string());
                args.push(value);
            }
        };
        push("--endpoint", self.endpoint.clone());
        push("--bucket", self.bucket.clone());
        push("--region", self.region.clone());
        push("--access-key", self.access_key.clone());
        // Never --secret-key: a child's command line shows in `ps` (see `secret_env`).
        push(
            "--secret-key-file",
            self.secret_key_file
                .as_ref()
                .map(|f| f.display().to_string()),
        );
        push("--profile", self.profile.clone());
        push("--addressing", self.addressing.clone());
        for pin in &self.resolve {
            push("--resolve", Some(pin.clone()));
        }
        push("--ca-bundle", self.ca_bundle.clone());
        push("--retries", Some(self.retries.to_string()));
        push("--request-timeout", Some(self.request_timeout.to_string()));
        push("--connect-timeout", Some(self.connect_timeout.to_string()));
        push(
            "--first-byte-timeout",
            Some(self.first_byte_timeout.to_string()),
        );
        push("--idle-timeout", Some(self.idle_timeout.to_string()));
        if self.insecure {
            args.push("--insecure".into());
        }
        args
    }

    /// What a child given [`S3Args::to_args`] needs in its environment to resolve the same
    /// keys: `--secret-key` as AWS_SECRET_ACCESS_KEY, which pairs with `--access-key`.
    pub fn secret_env(&self) -> Option<(&'static str, String)> {
        self.secret_key
            .clone()
            .map(|secret| ("AWS_SECRET_ACCESS_KEY", secret))
    }

    pub fn target_flags(&self) -> crate::s3::TargetFlags {
        crate::s3::TargetFlags {
            endpoint: self.endpoint.clone(),
            bucket: self.bucket.clone(),
            region: self.region.clone(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            secret_key_file: self.secret_key_file.clone(),
            profile: self.profile.clone(),
            addressing: self.addressing.clone(),
            resolve: self.resolve.clone(),
            ca_bundle: self.ca_bundle.clone(),
            insecure: self.insecure,
        }
    }

    pub fn retry_policy(&self) -> crate::s3::RetryPolicy {
        let seconds = std::time::Duration::from_secs_f64;
        crate::s3::RetryPolicy {
            retries: self.retries,
            timeout: seconds(self.request_timeout),
            connect_timeout: seconds(self.connect_timeout),
            first_byte_timeout: seconds(self.first_byte_timeout),
            idle_timeout: seconds(self.idle_timeout),
            ..crate::s3::RetryPolicy::default()
        }
    }
}
