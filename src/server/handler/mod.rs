//! One request, start to finish: header limits, signature, path-style bucket and key, the
//! operation named by method and query, the store call, and the S3 response (or S3 error).
//!
//! The operations live by job: [`bucket`] (the service and buckets, listings), [`read`] (GET
//! and HEAD of an object), [`upload`] (request bodies: PUT, parts, multipart completion);
//! [`request`] holds what they share.

mod bucket;
mod read;
mod request;
mod upload;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::body::Body;
use super::error::S3Error;
use super::faults::{self, Target, WriteFault};
use super::request_log::{LoggedRequest, without_secrets};
use super::sigv4::{self, PayloadHash, SignedRequest};
use super::store::Store;
use super::trailing::Trailing;
use crate::s3::xml::XmlWriter;
use bucket::{bucket_operation, service_operation};
use read::get_object;
pub use request::{Counters, State};
use request::{Query, Req, empty_response, method_not_allowed, xml_response};
use upload::{complete_multipart, put_object, upload_part};

/// S3's limit on the request header section.
pub const MAX_HEADER_SECTION_BYTES: usize = 8 << 10;

/// Which write a request is, for faults aimed at writes: an UploadPart (a PUT with a
/// `partNumber`), a CompleteMultipartUpload (a POST with an `uploadId`), or a PutObject (a PUT
/// of a key with neither).
fn write_target(method: &Method, path: &str, query: &str) -> Option<Target> {
    let has = |name: &str| {
        query
            .split('&')
            .any(|item| item.split('=').next() == Some(name))
    };
    match *method {
        Method::PUT if has("partNumber") => Some(Target::Part),
        Method::PUT if !has("uploadId") && path.trim_matches('/').contains('/') => {
            Some(Target::Put)
        }
        Method::POST if has("uploadId") => Some(Target::Complete),
        _ => None,
    }
}

/// Acts out a write's fault before the store sees the request: reads the body (or, for a cut,
/// part of it) and answers the fault's error, closes the connection, or never answers.
async fn write_fault(
    state: &Arc<State>,
    fault: WriteFault,
    request: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    let mut body = request.into_body();
    match fault {
        WriteFault::Answer(kind) => {
            upload::drain(state, &mut body, u64::MAX).await;
            state.counters.errors.fetch_add(1, Ordering::Relaxed);
            Ok(faults::write_answer(kind))
        }
        WriteFault::Cut(n) => {
            let read = upload::drain(state, &mut body, n).await;
            state
                .counters
                .connection_errors
                .fetch_add(1, Ordering::Relaxed);
            Err(std::io::Error::other(format!(
                "injected fault: the connection is cut after {read} body bytes of an upload"
            )))
        }
        WriteFault::Early(status, linger) => {
            // Answered now; the body is read and dropped behind the answer (a lingering close,
            // as nginx and S3 do, so the client is not reset before it reads the answer), and
            // the connection closes after it (`Connection: close`). `early-reset`: not read,
            // so the close resets the client while it sends, the answer in its socket.
            if linger {
                let lingering = Arc::clone(state);
                tokio::spawn(async move {
                    upload::drain(&lingering, &mut body, u64::MAX).await;
                });
            }
            state.counters.errors.fetch_add(1, Ordering::Relaxed);
            Ok(faults::early_answer(status))
        }
        WriteFault::Hang => {
            upload::drain(state, &mut body, u64::MAX).await;
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
        }
        // Acted out after the store took the write, or as it reads the body, in `respond`.
        WriteFault::AfterStore(_) | WriteFault::Flip(_) => Err(std::io::Error::other(
            "an after-store or body fault (a bug)",
        )),
    }
}

/// Answers one request; errors become S3 error responses. `Err` closes the connection without
/// an answer (an injected cut of an upload).
pub async fn respond(
    state: Arc<State>,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    let n = state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let request_id = format!("{:016X}", n + 1);
    let method = request.method().clone();
    let resource = request.uri().path().to_string();
    if method == Method::HEAD {
        state.counters.heads.fetch_add(1, Ordering::Relaxed);
    } else if method == Method::GET && request.headers().contains_key(http::header::RANGE) {
        state.counters.ranged_gets.fetch_add(1, Ordering::Relaxed);
    }
    // A GET of a bucket (no key) is a listing, for fault injection.
    let listing = method == Method::GET && !resource.trim_matches('/').contains('/');
    let trailing = request.extensions().get::<Arc<Trailing>>().cloned();
    // What the request log records of the request (only when there is a log).
    let logged = state.request_log.get().map(|_| {
        let range = request.headers().get(http::header::RANGE);
        (
            request
                .uri()
                .query()
                .map(without_secrets)
                .unwrap_or_default(),
            range.and_then(|r| r.to_str().ok()).map(str::to_string),
        )
    });
    let write = write_target(&method, &resource, request.uri().query().unwrap_or(""));
    let mut after_store = None;
    match write
        .filter(|_| !state.faults.is_empty())
        .and_then(|t| state.faults.pick_write(t))
    {
        Some(WriteFault::AfterStore(kind)) => after_store = Some(kind),
        Some(WriteFault::Flip(at)) => {
            // The last byte of a shorter body, as `flip=N` on a GET: of its data, when it
            // comes aws-chunked.
            let headers = request.headers();
            let len = headers
                .get("x-amz-decoded-content-length")
                .or_else(|| headers.get(http::header::CONTENT_LENGTH))
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(0);
            if len > 0 {
                let flip = faults::FlipUpload(at.min(len - 1));
                request.extensions_mut().insert(flip);
            }
        }
        Some(fault) => {
            let mut response = write_fault(&state, fault, request).await?;
            if let Ok(v) = request_id.parse() {
                response.headers_mut().insert("x-amz-request-id", v);
            }
            log_request(&state, &method, &resource, logged, &response);
            return Ok(response);
        }
        None => {}
    }
    let mut response = match dispatch(&state, request).await {
        Ok(r) => r,
        Err(e) => {
            state.counters.errors.fetch_add(1, Ordering::Relaxed);
            let body = if method == Method::HEAD {
                Body::empty()
            } else {
                Body::text(e.to_xml(&resource, &request_id))
                    .counted(state.counters.bytes_sent.clone())
            };
            let mut r = Response::new(body);
            *r.status_mut() = e.status;
            r.headers_mut().insert(
                CONTENT_TYPE,
                http::HeaderValue::from_static("application/xml"),
            );
            r
        }
    };
    if let Some(kind) = after_store.filter(|_| response.status().is_success()) {
        state.counters.errors.fetch_add(1, Ordering::Relaxed);
        response = faults::after_store(kind, response);
    } else if !state.faults.is_empty() {
        // The answer, whatever it was, misbehaves as the spec says.
        response = state.faults.apply(listing, response, trailing).await;
    }
    let headers = response.headers_mut();
    if let Ok(v) = request_id.parse() {
        headers.insert("x-amz-request-id", v);
    }
    headers.insert(
        http::header::SERVER,
        http::HeaderValue::from_static("ringload"),
    );
    log_request(&state, &method, &resource, logged, &response);
    Ok(response)
}

/// Records the request in the request log, when there is one: `logged` is its query (less
/// any secret) and `Range`, taken before the request was consumed.
fn log_request(
    state: &State,
    method: &Method,
    path: &str,
    logged: Option<(String, Option<String>)>,
    response: &Response<Body>,
) {
    if let (Some(log), Some((query, range))) = (state.request_log.get(), logged) {
        log.record(&LoggedRequest {
            method: method.as_str(),
            path,
            query,
            range: range.as_deref(),
            status: response.status().as_u16(),
        });
    }
}

fn check_header_size(headers: &HeaderMap) -> Result<(), S3Error> {
    let bytes: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    if bytes > MAX_HEADER_SECTION_BYTES {
        return Err(S3Error::new(
            StatusCode::BAD_REQUEST,
            "RequestHeaderSectionTooLarge",
            format!(
                "Your request header section exceeds the maximum allowed size: {bytes} bytes of \
                 headers, at most {MAX_HEADER_SECTION_BYTES}"
            ),
        )
        .with("MaxSizeAllowed", MAX_HEADER_SECTION_BYTES.to_string()));
    }
    Ok(())
}

async fn dispatch(
    state: &Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, S3Error> {
    let (mut parts, body) = request.into_parts();
    check_header_size(&parts.headers)?;
    let raw_path = parts.uri.path();
    let raw_query = parts.uri.query().unwrap_or("");
    let mut signing = None;
    if let Some(credentials) = &state.credentials {
        let signed = SignedRequest {
            method: &parts.method,
            raw_path,
            raw_query,
            headers: &parts.headers,
        };
        signing = Some(sigv4::verify(
            &signed,
            credentials,
            &state.region,
            SystemTime::now(),
        )?);
    }
    let checksums_ignored = !state.faults.is_empty() && state.faults.ignores_checksums();
    if checksums_ignored {
        // A store that neither checks nor keeps checksums never reads these (its signature
        // check, above, covered them as sent).
        let names: Vec<_> = parts
            .headers
            .keys()
            .filter(|n| n.as_str().starts_with("x-amz-checksum-"))
            .cloned()
            .collect();
        for name in names {
            parts.headers.remove(name);
        }
    }
    let payload = PayloadHash::from_headers(&parts.headers, signing)?;
    let query = Query::parse(raw_query)?;
    let path = sigv4::percent_decode(raw_path)?;
    let path = path.strip_prefix('/').unwrap_or(&path);
    let host_bucket = virtual_host_bucket(&parts.headers, &state.store);
    let (bucket, key) = match &host_bucket {
        // Virtual-hosted: the bucket is in the host name, the whole path is the key.
        Some(bucket) => (bucket.as_str(), path),
        None => path.split_once('/').unwrap_or((path, "")),
    };
    let req = Req {
        method: &parts.method,
        headers: &parts.headers,
        query,
        bucket,
        key,
        payload,
        body,
        flip: parts.extensions.get::<faults::FlipUpload>().map(|f| f.0),
        checksums_ignored,
    };
    if bucket.is_empty() {
        service_operation(state, &req)
    } else if key.is_empty() {
        bucket_operation(state, req).await
    } else {
        object_operation(state, req).await
    }
}

/// The bucket a virtual-hosted request names in its `Host` (`bucket.rest[:port]`): the first
/// label, when the host is a name (not an IP address) with more labels after it and the store
/// has a bucket by that name. Path-style requests (an IP, `localhost`, or a first label that
/// is no bucket) give `None`.
fn virtual_host_bucket(headers: &HeaderMap, store: &Store) -> Option<String> {
    let host = headers.get(http::header::HOST)?.to_str().ok()?;
    if host.starts_with('[') {
        return None;
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let (first, rest) = name.split_once('.')?;
    if rest.is_empty() || first.is_empty() {
        return None;
    }
    store.check_bucket(first).ok()?;
    Some(first.to_string())
}

async fn object_operation(state: &Arc<State>, req: Req<'_>) -> Result<Response<Body>, S3Error> {
    match *req.method {
        Method::GET | Method::HEAD => {
            req.query.only(&["partNumber", "versionId", "uploadId"])?;
            if req.query.has("uploadId") {
                return Err(S3Error::not_implemented(
                    "ringload serve does not implement ListParts",
                ));
            }
            if req.query.has("partNumber") {
                return Err(S3Error::not_implemented(
                    "ringload serve does not implement GET by partNumber; use a Range",
                ));
            }
            if req.query.get("versionId").is_some_and(|v| v != "null") {
                return Err(S3Error::not_implemented(
                    "ringload serve does not keep object versions",
                ));
            }
            get_object(state, &req)
        }
        Method::PUT => {
            req.query.only(&["uploadId", "partNumber"])?;
            if req.headers.contains_key("x-amz-copy-source") {
                return Err(S3Error::not_implemented(
                    "ringload serve does not implement CopyObject or UploadPartCopy",
                ));
            }
            match (req.query.get("uploadId"), req.query.get("partNumber")) {
                (None, None) => put_object(state, req).await,
                (Some(id), Some(n)) => {
                    let id = id.to_string();
                    let n = n.parse::<u32>().map_err(|_| {
                        S3Error::invalid_argument(format!(
                            "partNumber={n}: Part number must be an integer between 1 and 10000, \
                             inclusive"
                        ))
                    })?;
                    upload_part(state, req, &id, n).await
                }
                _ => Err(S3Error::invalid_request(
                    "an UploadPart request needs both uploadId and partNumber",
                )),
            }
        }
        Method::POST => {
            req.query.only(&["uploads", "uploadId"])?;
            if req.query.has("uploads") {
                let algorithm = super::checksums::create_algorithm(req.headers)?;
                let id = state
                    .store
                    .writable()?
                    .create_multipart(req.bucket, req.key)?;
                state.checksums.created(&id, algorithm);
                let mut x = XmlWriter::document();
                x.root("InitiateMultipartUploadResult");
                x.element("Bucket", req.bucket);
                x.element("Key", req.key);
                x.element("UploadId", id);
                x.close("InitiateMultipartUploadResult");
                Ok(xml_response(StatusCode::OK, x.finish(), state))
            } else if let Some(id) = req.query.get("uploadId") {
                let id = id.to_string();
                complete_multipart(state, req, id).await
            } else {
                Err(S3Error::not_implemented(
                    "ringload serve does not implement POST Object (browser form uploads)",
                ))
            }
        }
        Method::DELETE => {
            req.query.only(&["uploadId"])?;
            let store = state.store.writable()?;
            match req.query.get("uploadId") {
                Some(id) => {
                    store.abort_multipart(id, req.bucket, req.key)?;
                    state.checksums.ended(id);
                }
                None => {
                    store.delete(req.bucket, req.key)?;
                    state.checksums.object_stored(req.bucket, req.key, None);
                }
            }
            Ok(empty_response(StatusCode::NO_CONTENT))
        }
        _ => Err(method_not_allowed(req.method, "an object")),
    }
}
