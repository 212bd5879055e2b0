//! The control-plane S3 client: listing, footer reads and uploads, on hyper's pooled HTTP/1.1
//! client (keep-alive, TCP_NODELAY) in a tokio runtime.
//!
//! Every request is described by a [`RequestSpec`] that can be rebuilt and re-signed for each
//! attempt; [`with_retries`] retries what [`RequestError::retryable`] allows, with exponential
//! backoff, up to [`RetryPolicy::retries`] times, each attempt under [`RetryPolicy::timeout`].
//! The baseline engine sends its GETs through the same [`Client::http_request`] and
//! [`with_retries`], so both planes sign, address and retry alike.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, ETAG, HOST, HeaderName, RANGE};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

use super::body::RequestBody;
use super::connect::{Connector, TlsFailure};
use super::error::{HintContext, RequestError, Wait};
use super::framing::StrayLog;
use super::sign::{Payload, Signer};
use super::target::{Addressing, Target};
use super::xml;

/// A byte range of an object, as HTTP `Range` states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=first-last`, both inclusive.
    Bounded { first: u64, last: u64 },
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectMeta {
    pub key: String,
    pub size_bytes: u64,
}

/// Retries after the first attempt, by default.
pub const DEFAULT_RETRIES: u32 = 3;
/// The wait before the first retry; doubled for each further one.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Default limits of the stages of an attempt (see [`RetryPolicy`]).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The time one attempt of a request may take, by default (a 99 MiB GET at 10 MiB/s).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// A bound on ListObjectsV2 pages (1,000 keys each): ten million objects.
const MAX_LIST_PAGES: usize = 10_000;
/// Idle pooled connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often and how long a request is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub retries: u32,
    /// The whole of one attempt.
    pub timeout: Duration,
    pub first_backoff: Duration,
    /// Establishing the connection.
    pub connect_timeout: Duration,
    /// From sending a request to its response head.
    pub first_byte_timeout: Duration,
    /// Between body bytes: a stall is caught by this, not by the whole attempt's limit.
    pub idle_timeout: Duration,
}

impl RetryPolicy {
    /// The most the backoff before retry number `retry` (0-based) can be: `first_backoff`,
    /// doubling, capped at [`MAX_BACKOFF`].
    pub fn backoff_cap(&self, retry: u32) -> Duration {
        (self.first_backoff * 2u32.saturating_pow(retry.min(31))).min(MAX_BACKOFF)
    }

    /// The wait before retry number `retry`, as the AWS SDKs wait: "full jitter", a uniform
    /// draw from zero to the backoff cap, so that clients that failed together do not retry
    /// together; at least the server's `Retry-After` (itself capped at [`MAX_BACKOFF`]).
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let jittered = self.backoff_cap(retry).mul_f64(unit_random());
        jittered.max(retry_after.unwrap_or(Duration::ZERO).min(MAX_BACKOFF))
    }

    /// The longest one request can legitimately take: every attempt's timeout and the longest
    /// every wait between them can be, plus a little slack. A wait for a GET past this is a
    /// stall.
    pub fn longest_request(&self) -> Duration {
        let waits = MAX_BACKOFF * self.retries;
        self.timeout * (self.retries + 1) + waits + Duration::from_secs(5)
    }
}

/// The longest wait between two attempts, jittered or asked for with `Retry-After` (the AWS
/// SDKs' cap).
pub const MAX_BACKOFF: Duration = Duration::from_secs(20);

/// A uniform draw from [0, 1): jitter needs no stronger randomness than the standard
/// library's per-process hash keys and a counter.
fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            retries: DEFAULT_RETRIES,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            first_backoff: FIRST_BACKOFF,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Runs `attempt` until it succeeds, fails with an error that is not retryable, or has been
/// retried `policy.retries` times. Each attempt is bounded by `policy.timeout`. Returns the
/// result and the cause of each retry made ([`RequestError::cause`]; empty without retries, so
/// nothing is allocated then).
pub async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    operation: &str,
    mut attempt: F,
) -> (Result<T, RequestError>, Vec<&'static str>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let mut causes = Vec::new();
    loop {
        let retries = causes.len() as u32;
        let result = match tokio::time::timeout(policy.timeout, attempt()).await {
            Ok(result) => result,
            Err(_) => Err(RequestError::Timeout {
                operation: operation.to_string(),
                after: policy.timeout,
                what: Wait::Request,
            }),
        };
        match result {
            Err(e) if e.retryable() && retries < policy.retries => {
                tokio::time::sleep(policy.delay(retries, e.retry_after())).await;
                causes.push(e.cause());
            }
            other => return (other, causes),
        }
    }
}

/// Listing pages (ListObjectsV2, ListMultipartUploads) answered to this process: the set-up's
/// LISTs, which the runs count by kind beside their GETs and parts ([`lists_sent`]).
static LISTS_SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Listing pages answered to this process so far: a run counts its own as the difference from
/// its start to its end.
pub fn lists_sent() -> u64 {
    LISTS_SENT.load(std::sync::atomic::Ordering::Relaxed)
}

/// A request, before it is signed for an attempt.
#[derive(Debug, Clone)]
pub struct RequestSpec<'a> {
    pub method: Method,
    /// `None`: the bucket itself.
    pub key: Option<&'a str>,
    pub query: &'a [(&'a str, &'a str)],
    pub headers: Vec<(HeaderName, String)>,
    pub body: Bytes,
    /// Hash the body into the signature (else `UNSIGNED-PAYLOAD`).
    pub sign_body: bool,
    /// The body's SHA-256 (hex), computed beforehand, signed as `x-amz-content-sha256`
    /// (instead of hashing the body here).
    pub payload_sha256: Option<String>,
    /// `body` goes `aws-chunked` ([`super::chunked`]): framed after signing, its chunk header
    /// and tail sent as frames around it ([`RequestBody`]), the data not copied.
    pub chunked: Option<super::chunked::Chunked>,
    /// Which of the target's endpoints to send it to.
    pub endpoint: usize,
    /// The most answer body bytes read before the attempt fails: [`CONTROL_BODY_LIMIT`]
    /// unless the request reads data (a ranged GET sets its range's length).
    pub body_limit: u64,
}

/// The most body bytes a control-plane answer (a listing page, an upload's creation or
/// completion, an error document) may carry: a page of 1,000 keys of 1,024 bytes is under
/// 2 MiB, so this is only passed by something that is not S3's answer.
pub const CONTROL_BODY_LIMIT: u64 = 16 << 20;

impl<'a> RequestSpec<'a> {
    pub fn new(method: Method, key: Option<&'a str>) -> RequestSpec<'a> {
        RequestSpec {
            method,
            key,
            query: &[],
            headers: Vec::new(),
            body: Bytes::new(),
            sign_body: false,
            payload_sha256: None,
            chunked: None,
            endpoint: 0,
            body_limit: CONTROL_BODY_LIMIT,
        }
    }

    /// A listing: a GET of the bucket with `list-type` (ListObjectsV2) or `uploads`
    /// (ListMultipartUploads).
    fn is_list(&self) -> bool {
        self.method == Method::GET
            && self.key.is_none()
            && self
                .query
                .iter()
                .any(|(name, _)| *name == "list-type" || *name == "uploads")
    }
}

/// An S3 client for one bucket. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    target: Target,
    signer: Signer,
    http: HttpClient<Connector, RequestBody>,
    connector: Connector,
    policy: RetryPolicy,
    /// Connections hyper dropped for bytes after a body.
    stray: Arc<StrayLog>,
    /// The TLS configuration of every connection (one session cache), when an endpoint is
    /// `https://`.
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// Why a client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    /// Its TLS trust: a CA bundle that cannot be read (the user's to fix: exit 2).
    #[error("{0}")]
    Tls(String),
    #[error("cannot start the S3 client's runtime: {0}")]
    Runtime(std::io::Error),
}

impl crate::exit::ExitClass for ClientSetupError {
    fn exit_code(&self) -> u8 {
        match self {
            ClientSetupError::Tls(_) => crate::exit::USAGE,
            ClientSetupError::Runtime(_) => crate::exit::FAILED,
        }
    }
}

impl Client {
    /// A client with its own connection pool. Needs a tokio runtime only when used.
    pub fn new(target: Target, policy: RetryPolicy) -> Result<Client, ClientSetupError> {
        let tls = if target.endpoints.iter().any(|e| e.is_tls()) {
            Some(super::tls::client_config(&target.tls).map_err(ClientSetupError::Tls)?)
        } else {
            None
        };
        let virtual_bucket =
            (target.addressing == Addressing::Virtual).then_some(target.bucket.as_str());
        let stray = Arc::new(StrayLog::new(virtual_bucket));
        let connector = Connector::new(
            target.endpoints.clone(),
            target.pins.clone(),
            tls.clone(),
            target.tls.clone(),
            policy.connect_timeout,
            stray.clone(),
        );
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector.clone());
        Ok(Client {
            connector,
            signer: Signer::new(target.credentials.clone(), &target.region),
            target,
            http,
            policy,
            stray,
            tls,
        })
    }

    /// The TLS version and cipher suite this client's connections negotiated, once one did.
    pub fn tls_negotiated(&self) -> Option<&str> {
        self.connector.negotiated()
    }

    /// Records the TLS version and suite a connection of the io_uring engine negotiated.
    pub fn note_tls_negotiated(&self, negotiated: &str) {
        self.connector.note_negotiated(negotiated);
    }

    /// The TLS configuration, when an endpoint is `https://` (the io_uring engine's
    /// connections share it, and its session cache).
    pub fn tls_config(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.tls.as_ref()
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Endpoint `i` of the target (wrapping around).
    pub fn endpoint(&self, i: usize) -> &super::Endpoint {
        &self.target.endpoints[i % self.target.endpoints.len()]
    }

    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The hyper client: its pool holds the keep-alive connections.
    pub fn http(&self) -> &HttpClient<Connector, RequestBody> {
        &self.http
    }

    /// Connections dropped for bytes after a body (see [`super::framing`]).
    pub fn stray_bytes(&self) -> &StrayLog {
        &self.stray
    }

    /// `s3://bucket/`, to name objects in messages.
    pub fn location(&self) -> String {
        format!("s3://{}/", self.target.bucket)
    }

    /// `GET s3://bucket/key`, for messages.
    pub fn operation(&self, method: &str, key: Option<&str>) -> String {
        format!("{method} s3://{}/{}", self.target.bucket, key.unwrap_or(""))
    }

    pub fn hint_context(&self) -> HintContext<'_> {
        HintContext {
            bucket: &self.target.bucket,
            endpoint: &self.target.endpoints[0].url,
            signed: self.signer.signs(),
            credentials_from: &self.target.credentials_from,
        }
    }

    /// The signed HTTP request of `spec`, ready to send.
    pub fn http_request(
        &self,
        spec: &RequestSpec<'_>,
    ) -> Result<http::Request<RequestBody>, RequestError> {
        let endpoint = self.endpoint(spec.endpoint);
        let path = self.target.request_path(spec.key);
        let query = super::sign::query(spec.query);
        let url = self.target.request_url(endpoint, &path, &query);
        let host = self.target.host_header(endpoint);
        let chunked_headers = spec.chunked.as_ref().map(super::chunked::Chunked::headers);
        let mut to_sign: Vec<(&str, &str)> = vec![("host", &host)];
        to_sign.extend(spec.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        to_sign.extend(
            chunked_headers
                .iter()
                .flatten()
                .map(|(n, v)| (*n, v.as_str())),
        );
        let payload = match (&spec.chunked, &spec.payload_sha256, spec.sign_body) {
            (Some(chunked), _, _) => Payload::Streaming(chunked.content_sha256()),
            (None, Some(hex), _) => Payload::Sha256(hex),
            (None, None, true) => Payload::Bytes(&spec.body),
            (None, None, false) => Payload::Unsigned,
        };
        let operation = || self.operation(spec.method.as_str(), spec.key);
        let bad = |reason| RequestError::BadResponse {
            operation: operation(),
            reason,
        };
        let (signed, chain) = self
            .signer
            .signed_with_chain(
                spec.method.as_str(),
                &url,
                &to_sign,
                payload,
                SystemTime::now(),
            )
            .map_err(bad)?;
        let mut builder = http::Request::builder()
            .method(spec.method.clone())
            .uri(&url)
            .header(HOST, &host);
        for (name, value) in to_sign.iter().skip(1) {
            builder = builder.header(*name, *value);
        }
        let body = match &spec.chunked {
            Some(chunked) => {
                if !self.signer.signs() {
                    // Unsigned, the form is still named.
                    builder = builder.header("x-amz-content-sha256", chunked.content_sha256());
                }
                let (prefix, tail) = chunked.frame(chain.as_ref()).map_err(bad)?;
                // Three frames: the data is not copied.
                RequestBody::of([prefix.into(), spec.body.clone(), tail.into()])
            }
            None => RequestBody::from(spec.body.clone()),
        };
        for (name, value) in signed {
            builder = builder.header(name, value);
        }
        if spec.method == Method::PUT || spec.method == Method::POST {
            builder = builder.header(CONTENT_LENGTH, body.len());
        }
        builder.body(body).map_err(|e| RequestError::BadResponse {
            operation: operation(),
            reason: format!("cannot build the request: {e}"),
        })
    }

    /// Sends `spec` once and reads the whole response; an error status becomes a
    /// [`RequestError::Status`].
    async fn send_once(
        &self,
        spec: &RequestSpec<'_>,
    ) -> Result<(http::response::Parts, Bytes), RequestError> {
        let operation = || self.operation(spec.method.as_str(), spec.key);
        let timed_out = |what: Wait, after: Duration| RequestError::Timeout {
            operation: operation(),
            after,
            what,
        };
        let request = self.http_request(spec)?;
        // The run's limits hold for set-up requests too: the response head within
        // --first-byte-timeout, no pause between body bytes longer than --idle-timeout.
        let first_byte = self.policy.first_byte_timeout;
        let response = tokio::time::timeout(first_byte, self.http.request(request))
            .await
            .map_err(|_| timed_out(Wait::FirstByte, first_byte))?
            .map_err(|e| transport_error(operation(), self.endpoint(spec.endpoint), &e))?;
        let (parts, mut body) = response.into_parts();
        let idle = self.policy.idle_timeout;
        let length = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            .unwrap_or(0);
        let limit = spec.body_limit;
        let too_long = |what: String| RequestError::BadResponse {
            operation: operation(),
            reason: format!(
                "{what}, past the {limit} bytes this request's answer may carry (an S3 \
                 control-plane answer is far smaller): the endpoint, or a proxy before it, is \
                 not answering as S3"
            ),
        };
        // A HEAD's Content-Length is the object's, not a body's.
        if length as u64 > limit && spec.method != Method::HEAD {
            return Err(too_long(format!("the answer's Content-Length is {length}")));
        }
        let mut bytes = bytes::BytesMut::with_capacity(length.min(64 << 20));
        while let Some(frame) = tokio::time::timeout(idle, body.frame())
            .await
            .map_err(|_| timed_out(Wait::Idle, idle))?
        {
            let frame = frame
                .map_err(|e| transport_error(operation(), self.endpoint(spec.endpoint), &e))?;
            if let Ok(data) = frame.into_data() {
                if (bytes.len() + data.len()) as u64 > limit {
                    return Err(too_long(format!(
                        "the answer's body ran to {} bytes",
                        bytes.len() + data.len()
                    )));
                }
                bytes.extend_from_slice(&data);
            }
        }
        let body = bytes.freeze();
        if !parts.status.is_success() {
            let retry_after = parts
                .headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok());
            return Err(RequestError::from_response(
                operation(),
                parts.status.as_u16(),
                &body,
                &self.hint_context(),
            )
            .with_retry_after(retry_after));
        }
        Ok((parts, body))
    }

    /// Sends `spec` once (no retry): for callers that count their own retries with
    /// [`with_retries`].
    pub async fn send_attempt(
        &self,
        spec: &RequestSpec<'_>,
    ) -> Result<(http::response::Parts, Bytes), RequestError> {
        self.send_once(spec).await
    }

    /// Sends `spec` with retries; returns the response head and whole body.
    pub async fn send(
        &self,
        spec: &RequestSpec<'_>,
    ) -> Result<(http::response::Parts, Bytes), RequestError> {
        let operation = self.operation(spec.method.as_str(), spec.key);
        let answer = with_retries(&self.policy, &operation, || self.send_once(spec))
            .await
            .0;
        if answer.is_ok() && spec.is_list() {
            LISTS_SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        answer
    }

    /// A HEAD of `key`: its size.
    pub async fn head(&self, key: &str) -> Result<u64, RequestError> {
        let spec = RequestSpec::new(Method::HEAD, Some(key));
        let (parts, _) = self.send(&spec).await?;
        Ok(parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0))
    }

    /// Checks that the bucket exists and the keys are accepted, with a one-key listing (a
    /// HEAD would answer without the error document that names the cause).
    pub async fn check_bucket(&self) -> Result<(), RequestError> {
        self.check_bucket_at(0).await
    }

    /// [`Client::check_bucket`] through endpoint `endpoint`.
    pub async fn check_bucket_at(&self, endpoint: usize) -> Result<(), RequestError> {
        let spec = RequestSpec {
            query: &[("list-type", "2"), ("max-keys", "1")],
            endpoint,
            ..RequestSpec::new(Method::GET, None)
        };
        self.send(&spec).await.map(|_| ())
    }

    /// The buckets the endpoint holds (ListBuckets: `GET /`, path-style), for a NoSuchBucket's
    /// message; `None` when it will not say (a store that refuses it, keys without the right).
    pub async fn list_buckets(&self) -> Option<Vec<String>> {
        let mut target = self.target.clone();
        target.bucket = String::new();
        target.addressing = Addressing::Path;
        let service = Client::new(target, self.policy).ok()?;
        let (_, body) = service
            .send_once(&RequestSpec::new(Method::GET, None))
            .await
            .ok()?;
        let mut names = Vec::new();
        xml::walk(&body, |path, text| {
            if path.ends_with(&["Bucket".to_string(), "Name".to_string()]) {
                names.push(text);
            }
            Ok(())
        })
        .ok()?;
        Some(names)
    }

    /// Every object under `prefix` with no further `/` after it (ListObjectsV2, all pages).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, RequestError> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        let mut tokens_seen = std::collections::HashSet::new();
        for page_number in 1..=MAX_LIST_PAGES {
            let mut query = vec![("list-type", "2"), ("prefix", prefix), ("delimiter", "/")];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let spec = RequestSpec {
                query: &query,
                ..RequestSpec::new(Method::GET, None)
            };
            let (_, body) = self.send(&spec).await?;
            let page = parse_list_page(&body).map_err(|reason| RequestError::BadResponse {
                operation: format!("LIST s3://{}/{prefix}", self.target.bucket),
                reason,
            })?;
            objects.extend(page.objects);
            match page.next_token {
                Some(next) if page.truncated && !tokens_seen.insert(next.clone()) => {
                    return Err(RequestError::BadResponse {
                        operation: format!("LIST s3://{}/{prefix}", self.target.bucket),
                        reason: format!(
                            "page {page_number} gives continuation token '{next}' again: the \
                             server pages in a loop (a server bug), so the listing never ends"
                        ),
                    });
                }
                Some(next) if page.truncated => token = Some(next),
                None if page.truncated => {
                    return Err(RequestError::BadResponse {
                        operation: format!("LIST s3://{}/{prefix}", self.target.bucket),
                        reason: "a truncated page carries no NextContinuationToken".into(),
                    });
                }
                _ => return Ok(objects),
            }
        }
        Err(RequestError::BadResponse {
            operation: format!("LIST s3://{}/{prefix}", self.target.bucket),
            reason: format!(
                "more than {MAX_LIST_PAGES} pages of objects under the prefix; point \
                 dataset.data_folder at a folder that holds only the training files"
            ),
        })
    }

    /// The bytes of `range` of `key`. The answer must be `206` with exactly the bytes asked
    /// for (fewer only for a suffix longer than the object).
    pub async fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, RequestError> {
        self.get_range_at(0, key, range).await
    }

    /// [`Client::get_range`] through endpoint `endpoint` of the target.
    pub async fn get_range_at(
        &self,
        endpoint: usize,
        key: &str,
        range: ByteRange,
    ) -> Result<Bytes, RequestError> {
        let header = match range {
            ByteRange::Bounded { first, last } => format!("bytes={first}-{last}"),
            ByteRange::Suffix(n) => format!("bytes=-{n}"),
        };
        let spec = RequestSpec {
            headers: vec![(RANGE, header)],
            endpoint,
            // A wrong answer (a whole object for a footer) is read far enough to be named.
            body_limit: match range {
                ByteRange::Bounded { first, last } => (last - first).saturating_add(1),
                ByteRange::Suffix(n) => n,
            }
            .max(CONTROL_BODY_LIMIT),
            ..RequestSpec::new(Method::GET, Some(key))
        };
        let (parts, body) = self.send(&spec).await?;
        let bad = |reason: String| RequestError::BadResponse {
            operation: self.operation("GET", Some(key)),
            reason,
        };
        match (parts.status, range) {
            (StatusCode::PARTIAL_CONTENT, ByteRange::Bounded { first, last })
                if body.len() as u64 != last - first + 1 =>
            {
                Err(bad(format!(
                    "asked for bytes {first}-{last} and got {} bytes",
                    body.len()
                )))
            }
            (StatusCode::PARTIAL_CONTENT, ByteRange::Suffix(n)) if body.len() as u64 > n => {
                Err(bad(format!(
                    "asked for the last {n} bytes and got {}",
                    body.len()
                )))
            }
            (StatusCode::PARTIAL_CONTENT, _) => Ok(body),
            // Some servers answer a suffix that covers the whole object with the object.
            (StatusCode::OK, ByteRange::Suffix(n)) if body.len() as u64 <= n => Ok(body),
            (status, _) => Err(bad(format!(
                "answered {status} to a ranged GET ({} bytes); the server ignores Range",
                body.len()
            ))),
        }
    }

    /// Writes `body` as object `key` in one PutObject.
    pub async fn put_object(
        &self,
        key: &str,
        body: Bytes,
        sign_body: bool,
    ) -> Result<(), RequestError> {
        let spec = RequestSpec {
            body,
            sign_body,
            ..RequestSpec::new(Method::PUT, Some(key))
        };
        self.send(&spec).await.map(|_| ())
    }

    /// Starts a multipart upload; returns its upload id.
    pub async fn create_multipart(&self, key: &str) -> Result<String, RequestError> {
        self.create_multipart_checked(key, None).await
    }

    /// Uploads part `number` (from 1); returns its ETag.
    pub async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
        sign_body: bool,
    ) -> Result<String, RequestError> {
        let number_text = number.to_string();
        let query = [
            ("partNumber", number_text.as_str()),
            ("uploadId", upload_id),
        ];
        let spec = RequestSpec {
            query: &query,
            body,
            sign_body,
            ..RequestSpec::new(Method::PUT, Some(key))
        };
        let (parts, _) = self.send(&spec).await?;
        let etag = parts.headers.get(ETAG).and_then(|v| v.to_str().ok());
        let operation = format!(
            "{} (part {number})",
            self.operation("UploadPart", Some(key))
        );
        super::complete::part_etag(&operation, etag)
    }

    /// Abandons a multipart upload (best effort: its parts are deleted by the server).
    pub async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), RequestError> {
        let query = [("uploadId", upload_id)];
        let spec = RequestSpec {
            query: &query,
            ..RequestSpec::new(Method::DELETE, Some(key))
        };
        self.send(&spec).await.map(|_| ())
    }
}

/// A connection-level failure, with the cause hyper reports at the bottom of its chain.
pub fn transport_error(
    operation: String,
    endpoint: &super::Endpoint,
    err: &(dyn std::error::Error + 'static),
) -> RequestError {
    let mut causes = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(c) = cause {
        let text = c.to_string();
        if !causes.iter().any(|t: &String| t.contains(&text)) {
            causes.push(text);
        }
        cause = c.source();
    }
    let mut tls: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(c) = tls {
        if let Some(failure) = c.downcast_ref::<TlsFailure>() {
            return RequestError::Tls {
                operation,
                reason: failure.0.clone(),
            };
        }
        tls = c.source();
    }
    let reason = causes.join(": ");
    if reason.contains("failed to lookup address") {
        return RequestError::Unreachable {
            operation,
            reason: format!(
                "cannot connect to {endpoint}: the name '{}' does not resolve ({reason}); check \
                 the host name in --endpoint (or AWS_ENDPOINT_URL), or use the server's address",
                endpoint.host
            ),
        };
    }
    let unreachable = ["Connection refused", "No route to host"];
    if unreachable.iter().any(|u| reason.contains(u)) {
        return RequestError::Unreachable {
            operation,
            reason: format!(
                "cannot connect to {endpoint} ({reason}); is the server running? check --endpoint"
            ),
        };
    }
    RequestError::Transport { operation, reason }
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListPage {
    objects: Vec<ObjectMeta>,
    truncated: bool,
    next_token: Option<String>,
}

pub(crate) fn parse_list_page(body: &[u8]) -> Result<ListPage, String> {
    let mut page = ListPage::default();
    let (mut key, mut size): (Option<String>, Option<u64>) = (None, None);
    let mut saw_root = false;
    xml::walk(body, |path, text| {
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["ListBucketResult"] => saw_root = true,
            ["ListBucketResult", "IsTruncated"] => page.truncated = text == "true",
            ["ListBucketResult", "NextContinuationToken"] => page.next_token = Some(text),
            ["ListBucketResult", "Contents", "Key"] => key = Some(text),
            ["ListBucketResult", "Contents", "Size"] => {
                size = Some(
                    text.parse()
                        .map_err(|_| format!("<Size>{text}</Size> is not a number"))?,
                )
            }
            ["ListBucketResult", "Contents"] => match (key.take(), size.take()) {
                (Some(key), Some(size_bytes)) => page.objects.push(ObjectMeta { key, size_bytes }),
                _ => return Err("a <Contents> lacks its <Key> or <Size>".into()),
            },
            _ => {}
        }
        Ok(())
    })?;
    if !saw_root {
        return Err("the answer is not a ListBucketResult".into());
    }
    Ok(page)
}

/// Time since `start` in whole microseconds.
pub fn micros_since(start: Instant) -> u64 {
    start.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_pages() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>d/train/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>
<NextContinuationToken>tok&amp;1</NextContinuationToken>
<Contents><Key>d/train/a.parquet</Key><Size>10</Size><ETag>"x"</ETag></Contents>
<Contents><Key>d/train/b&amp;c.parquet</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><Size>20</Size></Contents>
<CommonPrefixes><Prefix>d/train/sub/</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let page = parse_list_page(body).unwrap();
        assert_eq!(
            page,
            ListPage {
                objects: vec![
                    ObjectMeta {
                        key: "d/train/a.parquet".into(),
                        size_bytes: 10
                    },
                    ObjectMeta {
                        key: "d/train/b&c.parquet".into(),
                        size_bytes: 20
                    },
                ],
                truncated: true,
                next_token: Some("tok&1".into()),
            }
        );
        assert!(parse_list_page(b"<Error><Code>x</Code></Error>").is_err());
        // Cut short anywhere inside the root: named as such, not as "not a ListBucketResult".
        let root = body
            .windows(17)
            .position(|w| w == b"<ListBucketResult")
            .unwrap();
        for cut in root + 18..body.len() - 1 {
            let err = parse_list_page(&body[..cut]).unwrap_err();
            assert!(
                err.contains("the XML ends") && err.contains("cut short"),
                "cut at {cut}: {err}"
            );
        }
        assert!(
            parse_list_page(
                b"<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>"
            )
            .is_err()
        );
    }

    /// A listing whose every page is truncated with the same token ends with an error that
    /// says the server pages in a loop, after two pages.
    #[test]
    fn a_server_that_repeats_its_continuation_token_is_named() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let page = "<ListBucketResult><IsTruncated>true</IsTruncated>\
                    <NextContinuationToken>again</NextContinuationToken></ListBucketResult>";
        let pages = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let served = std::sync::Arc::clone(&pages);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        if !matches!(stream.read(&mut byte), Ok(1)) {
                            break;
                        }
                        head.push(byte[0]);
                    }
                    if head.is_empty() {
                        break;
                    }
                    served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{page}",
                        page.len()
                    );
                    if stream.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        });
        let target = Target::simple(super::super::Endpoint::parse(&url).unwrap(), "b", None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = Client::new(target, RetryPolicy::default()).unwrap();
        let err = rt
            .block_on(client.list("d/train/"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("page 2 gives continuation token 'again' again")
                && err.contains("pages in a loop"),
            "{err}"
        );
        assert_eq!(pages.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn backoff_is_jittered_under_its_cap_and_honours_retry_after() {
        let policy = RetryPolicy {
            retries: 3,
            timeout: Duration::from_secs(5),
            first_backoff: Duration::from_millis(200),
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff_cap(0), Duration::from_millis(200));
        assert_eq!(policy.backoff_cap(2), Duration::from_millis(800));
        assert_eq!(policy.backoff_cap(40), MAX_BACKOFF);
        let draws: Vec<Duration> = (0..200).map(|_| policy.delay(2, None)).collect();
        assert!(draws.iter().all(|d| *d <= Duration::from_millis(800)));
        // Full jitter spreads the waits: not all the same, some in each half.
        let low = draws
            .iter()
            .filter(|d| **d < Duration::from_millis(400))
            .count();
        assert!(low > 20 && low < 180, "{low} of 200 in the lower half");
        // Retry-After is a floor, itself capped.
        let asked = policy.delay(0, Some(Duration::from_secs(3)));
        assert!(
            asked >= Duration::from_secs(3)
                && asked <= Duration::from_secs(3) + policy.backoff_cap(0)
        );
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(3600))),
            MAX_BACKOFF
        );
        assert!(policy.longest_request() >= policy.timeout * 4 + MAX_BACKOFF * 3);
    }

    #[test]
    fn retries_stop_at_the_limit_and_on_errors_that_are_not_retryable() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let policy = RetryPolicy {
            retries: 2,
            timeout: Duration::from_secs(5),
            first_backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        let server_error = || RequestError::Status {
            operation: "op".into(),
            status: 503,
            code: None,
            message: None,
            hint: String::new(),
            retry_after: None,
        };
        let mut calls = 0;
        let (result, retries) = rt.block_on(with_retries(&policy, "op", || {
            calls += 1;
            std::future::ready(Err::<(), _>(server_error()))
        }));
        assert!(result.is_err());
        assert_eq!((calls, retries), (3, vec!["503", "503"]));

        let mut calls = 0;
        let (result, retries) = rt.block_on(with_retries(&policy, "op", || {
            calls += 1;
            std::future::ready(if calls < 2 {
                Err(server_error())
            } else {
                Ok(7)
            })
        }));
        assert_eq!((result.ok(), retries), (Some(7), vec!["503"]));

        let mut calls = 0;
        let (result, _) = rt.block_on(with_retries(&policy, "op", || {
            calls += 1;
            std::future::ready(Err::<(), _>(RequestError::BadResponse {
                operation: "op".into(),
                reason: "200 not 206".into(),
            }))
        }));
        assert!(result.is_err());
        assert_eq!(calls, 1);

        let quick = RetryPolicy {
            retries: 1,
            timeout: Duration::from_millis(5),
            first_backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        let (result, retries) = rt.block_on(with_retries(&quick, "slow", || async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<(), RequestError>(())
        }));
        assert!(matches!(result, Err(RequestError::Timeout { .. })));
        assert_eq!(retries, vec!["timeout"]);
    }
}
