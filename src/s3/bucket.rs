//! A blocking handle on one bucket: a [`Client`] and a small tokio runtime of its own, for the
//! synchronous parts of ringload (the catalog's footer reads, `generate`'s uploads).
//!
//! Uploads: a [`BucketWriter`] buffers what the Parquet writer produces into parts of
//! [`PART_BYTES`]; the first full part starts a multipart upload, and each part is uploaded by a
//! task while the writer goes on, at most [`PARTS_IN_FLIGHT`] per object. An object smaller than
//! one part is sent with one PutObject. Nothing is visible under the key until the upload is
//! completed; a writer dropped before its commit aborts the upload.

use std::future::Future;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::client::{ByteRange, ObjectMeta};
use super::client::{Client, ClientSetupError, RetryPolicy};
use super::error::RequestError;
use super::target::Target;

/// The size of an upload part (the last one may be shorter; S3's minimum is 5 MiB).
pub const PART_BYTES: usize = 16 << 20;
/// Parts of one object uploaded at once.
pub const PARTS_IN_FLIGHT: usize = 4;
/// Worker threads of the bucket's runtime.
const RUNTIME_THREADS: usize = 2;
/// A set-up request still waiting after this long says what it waits for, once.
pub const SETUP_NOTICE_AFTER: Duration = Duration::from_secs(5);
/// The longest the "does it speak TLS?" probe after a failed check waits for an answer.
const TLS_PROBE_LIMIT: Duration = Duration::from_secs(2);

/// One bucket, reached through blocking calls.
#[derive(Debug)]
pub struct Bucket {
    client: Client,
    runtime: Runtime,
    /// Hash upload bodies into their signatures (else `UNSIGNED-PAYLOAD`).
    sign_payloads: bool,
}

/// What the server at `addr` sends when it is not HTTP, run when a request to an `http://`
/// endpoint fails: its first line, as it greets (SSH, SMTP and MySQL servers speak first) or
/// as it answers a plain `GET /`; `None` when the answer starts as HTTP, or nothing came.
fn not_http(
    addr: std::net::SocketAddr,
    hostname: &str,
    connect_timeout: std::time::Duration,
    answer_timeout: std::time::Duration,
) -> Option<String> {
    use std::io::Read;
    /// How long a greeting may take: a server that speaks first does so at once.
    const GREETING_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
    /// The longest line quoted.
    const QUOTED_CHARS: usize = 60;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, connect_timeout).ok()?;
    let mut first = [0u8; 256];
    stream.set_read_timeout(Some(GREETING_WAIT)).ok()?;
    let n = match stream.read(&mut first) {
        Ok(n) if n > 0 => n,
        // Nothing yet (or a close): ask as HTTP would.
        _ => {
            let request =
                format!("GET / HTTP/1.1\r\nHost: {hostname}\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).ok()?;
            stream
                .set_read_timeout(Some(answer_timeout.min(std::time::Duration::from_secs(2))))
                .ok()?;
            stream.read(&mut first).ok().filter(|&n| n > 0)?
        }
    };
    let first = &first[..n];
    if first.starts_with(b"HTTP/") {
        return None;
    }
    let line = first.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut quoted: String = line
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .take(QUOTED_CHARS)
        .collect();
    if line.len() > QUOTED_CHARS {
        quoted.push('…');
    }
    Some(quoted)
}

/// The line a set-up request prints when it is slow: what it waits for, and the flags that
/// bound the wait (lower them to give up sooner).
pub fn waiting_line(what: &str, policy: &RetryPolicy) -> String {
    format!(
        "waiting for {what} ({} s so far): each attempt waits up to --connect-timeout {} s to \
         connect, --first-byte-timeout {} s for the response head and --request-timeout {} s \
         in all, with --retries {}; lower them to give up sooner",
        SETUP_NOTICE_AFTER.as_secs(),
        policy.connect_timeout.as_secs_f64(),
        policy.first_byte_timeout.as_secs_f64(),
        policy.timeout.as_secs_f64(),
        policy.retries
    )
}

impl Bucket {
    /// A handle on `target`'s bucket. Nothing is sent yet.
    pub fn new(target: Target, policy: RetryPolicy) -> Result<Bucket, ClientSetupError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("ringload-s3")
            .enable_all()
            .build()
            .map_err(ClientSetupError::Runtime)?;
        Ok(Bucket {
            client: Client::new(target, policy)?,
            runtime,
            sign_payloads: false,
        })
    }

    /// Uploads with signed payloads (SHA-256 of every part) instead of `UNSIGNED-PAYLOAD`.
    pub fn with_signed_payloads(mut self, sign: bool) -> Bucket {
        self.sign_payloads = sign;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `request` to its end; if it is still waiting after [`SETUP_NOTICE_AFTER`], says
    /// once on stderr what it waits for and the limits that bound the wait, so that a silent
    /// store is never a silent hang.
    fn wait_for<T>(&self, what: &str, request: impl Future<Output = T>) -> T {
        self.runtime.block_on(async {
            tokio::pin!(request);
            tokio::select! {
                done = &mut request => return done,
                () = tokio::time::sleep(SETUP_NOTICE_AFTER) => {}
            }
            eprintln!("ringload: {}", waiting_line(what, self.client.policy()));
            request.await
        })
    }

    /// Checks, through every endpoint, that the bucket exists and the keys are accepted: an
    /// endpoint that is down, or that speaks TLS at an `http://` URL, is named before the run.
    pub fn check(&self) -> Result<(), RequestError> {
        let target = self.client.target();
        for (i, endpoint) in target.endpoints.iter().enumerate() {
            let what = format!(
                "the first LIST of s3://{} at {}",
                target.bucket, endpoint.url
            );
            let Err(error) = self.wait_for(&what, self.client.check_bucket_at(i)) else {
                continue;
            };
            if error.code() == Some("NoSuchBucket") {
                // The buckets it has, when it says: the likely right --bucket among them.
                let names = self.runtime.block_on(self.client.list_buckets());
                return Err(error.with_buckets(names.as_deref()));
            }
            let transport = matches!(
                error,
                RequestError::Transport { .. }
                    | RequestError::BadResponse { .. }
                    | RequestError::Timeout { .. }
            );
            if transport && !endpoint.is_tls() {
                let hostname = target.request_hostname(endpoint);
                let tls = target.addresses(endpoint).ok().is_some_and(|addrs| {
                    addrs.first().is_some_and(|addr| {
                        super::tls::speaks_tls(
                            *addr,
                            &hostname,
                            // A TLS server answers a ClientHello at once: a short probe,
                            // so a silent server's failure is not held up by it.
                            self.client.policy().connect_timeout.min(TLS_PROBE_LIMIT),
                        )
                    })
                });
                if tls {
                    return Err(RequestError::Tls {
                        operation: self.client.operation("GET", None),
                        reason: format!(
                            "{endpoint} answers in TLS, not plain HTTP; use https://{}:{}",
                            endpoint.host, endpoint.port
                        ),
                    });
                }
                let policy = self.client.policy();
                // A silent server (a timeout) sent nothing to quote: no second wait for it.
                let silent = matches!(error, RequestError::Timeout { .. });
                let not_http = target
                    .addresses(endpoint)
                    .ok()
                    .filter(|_| !silent)
                    .and_then(|addrs| {
                        let addr = *addrs.first()?;
                        not_http(
                            addr,
                            &hostname,
                            policy.connect_timeout,
                            policy.first_byte_timeout,
                        )
                    });
                if let Some(sent) = not_http {
                    return Err(RequestError::NotS3 {
                        operation: self.client.operation("GET", None),
                        reason: format!(
                            "{endpoint} does not look like an S3 endpoint: the server sent \
                             '{sent}' instead of HTTP; check --endpoint's host and port"
                        ),
                    });
                }
            }
            if target.endpoints.len() > 1 && !matches!(error, RequestError::Unreachable { .. }) {
                return Err(error.at_endpoint(endpoint));
            }
            return Err(error);
        }
        Ok(())
    }

    /// `s3://bucket/path at URL`, for messages.
    fn location(&self, path: &str) -> String {
        let target = self.client.target();
        format!(
            "s3://{}/{path} at {}",
            target.bucket,
            target.endpoints_text()
        )
    }

    /// Every object under `prefix` (ListObjectsV2, all pages).
    pub fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, RequestError> {
        let what = format!("the LIST of {}", self.location(prefix));
        self.wait_for(&what, self.client.list(prefix))
    }

    /// One ranged GET, its body whole.
    pub fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, RequestError> {
        let what = format!("a GET of {}", self.location(key));
        self.wait_for(&what, self.client.get_range(key, range))
    }

    /// What every one of `readers` does to each of `objects` when it reads the footer itself,
    /// as DLIO's ranks do: a HEAD, then a GET of the last `tail_bytes`. At most 16 at once.
    /// Returns the requests and the bytes received.
    pub fn read_footers_each(
        &self,
        objects: &[ObjectMeta],
        readers: usize,
        tail_bytes: u64,
    ) -> Result<(u64, u64), RequestError> {
        let what = format!("the footer reads of {}", self.location(""));
        self.wait_for(&what, async {
            let limit = Arc::new(Semaphore::new(16));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..readers {
                for object in objects {
                    let client = self.client.clone();
                    let key = object.key.clone();
                    let tail = tail_bytes.min(object.size_bytes);
                    let limit = limit.clone();
                    tasks.spawn(async move {
                        let _permit = limit.acquire_owned().await;
                        client.head(&key).await?;
                        let body = client.get_range(&key, ByteRange::Suffix(tail)).await?;
                        Ok::<u64, RequestError>(body.len() as u64)
                    });
                }
            }
            let (mut requests, mut bytes) = (0, 0);
            while let Some(joined) = tasks.join_next().await {
                let received = joined.map_err(|e| RequestError::Transport {
                    operation: "a footer read".into(),
                    reason: e.to_string(),
                })??;
                requests += 2;
                bytes += received;
            }
            Ok((requests, bytes))
        })
    }

    /// A writer that uploads `key`: nothing is visible until [`BucketWriter::finish`].
    pub fn writer(&self, key: &str) -> BucketWriter {
        BucketWriter {
            client: self.client.clone(),
            runtime: self.runtime.handle().clone(),
            key: key.to_string(),
            sign_payloads: self.sign_payloads,
            buffer: Vec::with_capacity(PART_BYTES),
            upload_id: None,
            parts: Vec::new(),
            in_flight: Arc::new(Semaphore::new(PARTS_IN_FLIGHT)),
            committed: false,
            bytes: 0,
        }
    }
}

/// One object being uploaded.
#[derive(Debug)]
pub struct BucketWriter {
    client: Client,
    runtime: tokio::runtime::Handle,
    key: String,
    sign_payloads: bool,
    /// Bytes not yet handed to a part.
    buffer: Vec<u8>,
    upload_id: Option<String>,
    /// Part uploads in part order; each yields its ETag.
    parts: Vec<JoinHandle<Result<String, RequestError>>>,
    in_flight: Arc<Semaphore>,
    committed: bool,
    /// Bytes handed to parts so far.
    bytes: u64,
}

impl BucketWriter {
    /// Starts uploading the next part from `body`, waiting while [`PARTS_IN_FLIGHT`] are.
    fn send_part(&mut self, body: Bytes) -> Result<(), RequestError> {
        let upload_id = match &self.upload_id {
            Some(id) => id.clone(),
            None => {
                let id = self
                    .runtime
                    .block_on(self.client.create_multipart(&self.key))?;
                self.upload_id = Some(id.clone());
                id
            }
        };
        let permit = self
            .runtime
            .block_on(self.in_flight.clone().acquire_owned())
            .map_err(|_| RequestError::BadResponse {
                operation: self.client.operation("UploadPart", Some(&self.key)),
                reason: "the upload was closed".into(),
            })?;
        let number = self.parts.len() as u32 + 1;
        self.bytes += body.len() as u64;
        let client = self.client.clone();
        let key = self.key.clone();
        let sign = self.sign_payloads;
        self.parts.push(self.runtime.spawn(async move {
            let etag = client
                .upload_part(&key, &upload_id, number, body, sign)
                .await;
            drop(permit);
            etag
        }));
        Ok(())
    }

    /// Sends what is left and makes the object visible.
    pub fn finish(mut self) -> Result<(), RequestError> {
        let rest = Bytes::from(std::mem::take(&mut self.buffer));
        let result = if self.upload_id.is_none() {
            self.runtime
                .block_on(self.client.put_object(&self.key, rest, self.sign_payloads))
        } else {
            self.complete(rest)
        };
        if result.is_ok() {
            self.committed = true;
        }
        result
    }

    fn complete(&mut self, rest: Bytes) -> Result<(), RequestError> {
        if !rest.is_empty() {
            self.send_part(rest)?;
        }
        let mut etags = Vec::with_capacity(self.parts.len());
        for part in std::mem::take(&mut self.parts) {
            let etag = self
                .runtime
                .block_on(part)
                .map_err(|e| RequestError::BadResponse {
                    operation: self.client.operation("UploadPart", Some(&self.key)),
                    reason: format!("the upload task failed: {e}"),
                })??;
            etags.push(etag);
        }
        let upload_id = self.upload_id.clone().unwrap_or_default();
        self.client
            .complete_upload_checked(
                &self.runtime,
                &self.key,
                &upload_id,
                &etags,
                self.bytes,
                None,
            )
            .0
            .map(|_| ())
    }
}

impl Write for BucketWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            let room = PART_BYTES - self.buffer.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.buffer.extend_from_slice(now);
            rest = later;
            if self.buffer.len() == PART_BYTES {
                let part = std::mem::replace(&mut self.buffer, Vec::with_capacity(PART_BYTES));
                self.send_part(Bytes::from(part))
                    .map_err(io::Error::other)?;
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for BucketWriter {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for part in &self.parts {
            part.abort();
        }
        if let Some(upload_id) = self.upload_id.take() {
            // Best effort: a failed abort leaves parts the server's lifecycle rules clean up.
            let _ = self
                .runtime
                .block_on(self.client.abort_multipart(&self.key, &upload_id));
        }
    }
}
