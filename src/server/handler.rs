//! One request, start to finish: header limits, signature, path-style bucket and key, the
//! operation named by method and query, the store call, and the S3 response (or S3 error).

use std::convert::Infallible;
use std::future::poll_fn;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, LAST_MODIFIED, LOCATION,
    RANGE,
};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use super::body::Body;
use super::dir::TempFile;
use super::error::S3Error;
use super::list::{self, After, Entry, ListParams};
use super::range::{RangeError, RangeSpec};
use super::sigv4::{self, Credentials, PayloadHash, SignedRequest};
use super::store::{ObjectInfo, Store};
use super::trailing::Trailing;
use crate::s3::sigv4::uri_encode;
use crate::s3::xml::{self, XmlWriter};

/// S3's limit on the request header section.
pub const MAX_HEADER_SECTION_BYTES: usize = 8 << 10;
/// S3's largest single PUT and largest part.
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// The largest XML request body read (CompleteMultipartUpload of 10,000 parts fits).
pub const MAX_XML_BODY_BYTES: u64 = 2 << 20;
/// Upload bytes gathered before one blocking write.
const WRITE_BATCH_BYTES: usize = 8 << 20;

/// Query parameters that never select an operation.
fn ignored_param(name: &str) -> bool {
    name == "x-id" || name.starts_with("response-") || name.starts_with("X-Amz-")
}

/// The server's running totals.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    /// Response body bytes handed to the connection.
    pub bytes_sent: Arc<AtomicU64>,
    /// Upload body bytes received.
    pub bytes_received: AtomicU64,
    /// Requests answered with an S3 error.
    pub errors: AtomicU64,
    pub connections: AtomicU64,
    /// Connections that ended in an I/O or protocol error (peer reset, header timeout, …).
    pub connection_errors: AtomicU64,
    /// Connections closed at once because the server had its maximum open.
    pub connections_refused: AtomicU64,
    /// TLS connections whose handshake failed or did not finish in time.
    pub tls_handshake_failures: AtomicU64,
    /// TLS handshakes that resumed an earlier session (a client reconnecting).
    pub tls_resumed: AtomicU64,
}

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    pub store: Store,
    pub credentials: Option<Credentials>,
    pub region: String,
    /// Each object body is sent no faster than this.
    pub throttle_bytes_per_s: Option<u64>,
    pub faults: super::faults::Faults,
    pub counters: Counters,
}

/// The decoded query string.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(raw: &str) -> Result<Query, S3Error> {
        let mut pairs = Vec::new();
        for item in raw.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            pairs.push((sigv4::percent_decode(k)?, sigv4::percent_decode(v)?));
        }
        Ok(Query(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// `NotImplemented` for a parameter the operation does not know (S3 answers unknown
    /// subresources the same way).
    fn only(&self, known: &[&str]) -> Result<(), S3Error> {
        match self
            .0
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()) && !ignored_param(k))
        {
            Some((k, _)) => Err(S3Error::not_implemented(format!(
                "ringload serve does not implement the '{k}' query parameter (subresource) for \
                 this request"
            ))),
            None => Ok(()),
        }
    }
}

/// A request, taken apart.
struct Req<'a> {
    method: &'a Method,
    headers: &'a HeaderMap,
    query: Query,
    bucket: &'a str,
    key: &'a str,
    payload: PayloadHash,
    body: Incoming,
}

/// Answers one request; errors become S3 error responses.
pub async fn respond(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let n = state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let request_id = format!("{:016X}", n + 1);
    let method = request.method().clone();
    let resource = request.uri().path().to_string();
    // A GET of a bucket (no key) is a listing, for fault injection.
    let listing = method == Method::GET && !resource.trim_matches('/').contains('/');
    let trailing = request.extensions().get::<Arc<Trailing>>().cloned();
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
    if !state.faults.is_empty() {
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
    Ok(response)
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
    let (parts, body) = request.into_parts();
    check_header_size(&parts.headers)?;
    let raw_path = parts.uri.path();
    let raw_query = parts.uri.query().unwrap_or("");
    if let Some(credentials) = &state.credentials {
        let signed = SignedRequest {
            method: &parts.method,
            raw_path,
            raw_query,
            headers: &parts.headers,
        };
        sigv4::verify(&signed, credentials, &state.region, SystemTime::now())?;
    }
    let payload = PayloadHash::from_headers(&parts.headers)?;
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
fn virtual_host_bucket(headers: &HeaderMap, store: &crate::server::store::Store) -> Option<String> {
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

fn method_not_allowed(method: &Method, what: &str) -> S3Error {
    S3Error::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("The specified method is not allowed against this resource: {method} on {what}"),
    )
}

fn xml_response(status: StatusCode, text: String, state: &State) -> Response<Body> {
    let mut r = Response::new(Body::text(text).counted(state.counters.bytes_sent.clone()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    r
}

fn empty_response(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

fn set(response: &mut Response<Body>, name: http::HeaderName, value: &str) {
    if let Ok(v) = http::HeaderValue::from_str(value) {
        response.headers_mut().insert(name, v);
    }
}

fn service_operation(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
    if req.method != Method::GET {
        return Err(method_not_allowed(req.method, "the service"));
    }
    req.query.only(&[])?;
    let mut x = XmlWriter::document();
    x.root("ListAllMyBucketsResult");
    x.open("Owner");
    x.element("ID", "ringload");
    x.element("DisplayName", "ringload");
    x.close("Owner");
    x.open("Buckets");
    for (name, created) in state.store.buckets()? {
        x.open("Bucket");
        x.element("Name", name);
        x.element("CreationDate", xml::iso8601(created));
        x.close("Bucket");
    }
    x.close("Buckets");
    x.close("ListAllMyBucketsResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
}

const LIST_PARAMS: &[&str] = &[
    "list-type",
    "prefix",
    "delimiter",
    "max-keys",
    "continuation-token",
    "start-after",
    "encoding-type",
    "fetch-owner",
    "marker",
    "location",
];

async fn bucket_operation(state: &Arc<State>, mut req: Req<'_>) -> Result<Response<Body>, S3Error> {
    let bucket = req.bucket;
    match *req.method {
        Method::GET => {
            req.query.only(LIST_PARAMS)?;
            state.store.check_bucket(bucket)?;
            if req.query.has("location") {
                let mut x = XmlWriter::document();
                x.root("LocationConstraint");
                // S3 writes an empty constraint for us-east-1.
                if state.region != "us-east-1" {
                    x.text(&state.region);
                }
                x.close("LocationConstraint");
                let text = x.finish();
                return Ok(xml_response(StatusCode::OK, text, state));
            }
            list_objects(state, &req)
        }
        Method::HEAD => {
            req.query.only(&[])?;
            state.store.check_bucket(bucket)?;
            let mut r = empty_response(StatusCode::OK);
            set(
                &mut r,
                http::HeaderName::from_static("x-amz-bucket-region"),
                &state.region,
            );
            Ok(r)
        }
        Method::PUT => {
            req.query.only(&[])?;
            let dir = state.store.writable()?;
            read_small_body(&mut req.body, req.payload).await?;
            dir.create_bucket(bucket)?;
            let mut r = empty_response(StatusCode::OK);
            set(&mut r, LOCATION, &format!("/{bucket}"));
            Ok(r)
        }
        Method::DELETE => {
            req.query.only(&[])?;
            state.store.writable()?.delete_bucket(bucket)?;
            Ok(empty_response(StatusCode::NO_CONTENT))
        }
        Method::POST if req.query.has("delete") => {
            req.query.only(&["delete"])?;
            delete_objects(state, req).await
        }
        Method::POST => {
            req.query.only(&[])?;
            Err(S3Error::not_implemented(
                "ringload serve does not implement POST Object (browser form uploads)",
            ))
        }
        _ => Err(method_not_allowed(req.method, "a bucket")),
    }
}

/// S3's cap on the keys of one DeleteObjects request.
const MAX_DELETE_KEYS: usize = 1000;

async fn delete_objects(state: &Arc<State>, mut req: Req<'_>) -> Result<Response<Body>, S3Error> {
    let dir = state.store.writable()?;
    state.store.check_bucket(req.bucket)?;
    let body = read_small_body(&mut req.body, req.payload).await?;
    let (keys, quiet) =
        xml::delete_request(&body).map_err(|reason| S3Error::malformed_xml(&reason))?;
    if keys.len() > MAX_DELETE_KEYS {
        return Err(S3Error::malformed_xml(&format!(
            "it names {} objects, at most {MAX_DELETE_KEYS}",
            keys.len()
        )));
    }
    let mut x = XmlWriter::document();
    x.root("DeleteResult");
    for key in &keys {
        match dir.delete(req.bucket, key) {
            Ok(()) if quiet => {}
            Ok(()) => {
                x.open("Deleted");
                x.element("Key", key);
                x.close("Deleted");
            }
            Err(e) => {
                x.open("Error");
                x.element("Key", key);
                x.element("Code", e.code);
                x.element("Message", &e.message);
                x.close("Error");
            }
        }
    }
    x.close("DeleteResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
}

fn list_objects(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
    let q = &req.query;
    let v2 = match q.get("list-type") {
        Some("2") => true,
        None => false,
        Some(other) => {
            return Err(S3Error::invalid_argument(format!(
                "list-type={other} is not a list type; use list-type=2 (ListObjectsV2)"
            )));
        }
    };
    let prefix = q.get("prefix").unwrap_or("").to_string();
    let delimiter = q
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .map(String::from);
    let max_keys = match q.get("max-keys") {
        None => list::MAX_KEYS,
        Some(t) => match t.parse::<u64>() {
            Ok(n) => (n as usize).min(list::MAX_KEYS),
            Err(_) => {
                return Err(S3Error::invalid_argument(format!(
                    "max-keys={t}: Provided max-keys not an integer or within integer range"
                )));
            }
        },
    };
    let url_encoded = match q.get("encoding-type") {
        None => false,
        Some("url") => true,
        Some(other) => {
            return Err(S3Error::invalid_argument(format!(
                "encoding-type={other}: Invalid Encoding Method specified in Request (only 'url')"
            )));
        }
    };
    let after = if v2 {
        match (q.get("continuation-token"), q.get("start-after")) {
            (Some(token), _) => Some(list::decode_token(token)?),
            (None, Some(key)) if !key.is_empty() => Some(After::Key(key.to_string())),
            _ => None,
        }
    } else {
        match (q.get("marker"), &delimiter) {
            (Some(m), Some(d)) if !m.is_empty() && m.ends_with(d.as_str()) => {
                Some(After::Prefix(m.to_string()))
            }
            (Some(m), _) if !m.is_empty() => Some(After::Key(m.to_string())),
            _ => None,
        }
    };
    let objects = state.store.objects(req.bucket, &prefix)?;
    let params = ListParams {
        prefix,
        delimiter,
        max_keys,
        after,
    };
    let page = list::page(&objects, &params);
    let enc = |s: &str| {
        if url_encoded {
            uri_encode(s, true)
        } else {
            s.to_string()
        }
    };
    let mut x = XmlWriter::document();
    x.root("ListBucketResult");
    x.element("Name", req.bucket);
    x.element("Prefix", enc(&params.prefix));
    if v2 {
        if let Some(token) = q.get("continuation-token") {
            x.element("ContinuationToken", token);
        }
        if let Some(next) = &page.next {
            x.element("NextContinuationToken", list::encode_token(next));
        }
        if let Some(start_after) = q.get("start-after") {
            x.element("StartAfter", enc(start_after));
        }
        x.element("KeyCount", page.entries.len());
    } else {
        x.element("Marker", enc(q.get("marker").unwrap_or("")));
        if let Some(After::Key(k) | After::Prefix(k)) = &page.next {
            x.element("NextMarker", enc(k));
        }
    }
    x.element("MaxKeys", max_keys);
    if let Some(d) = &params.delimiter {
        x.element("Delimiter", enc(d));
    }
    if url_encoded {
        x.element("EncodingType", "url");
    }
    x.element("IsTruncated", page.truncated);
    for entry in &page.entries {
        if let Entry::Object(o) = entry {
            x.open("Contents");
            x.element("Key", enc(&o.key));
            x.element("LastModified", xml::iso8601(o.last_modified));
            x.element("ETag", format!("\"{}\"", o.etag));
            x.element("Size", o.size_bytes);
            x.element("StorageClass", "STANDARD");
            x.close("Contents");
        }
    }
    for entry in &page.entries {
        if let Entry::CommonPrefix(p) = entry {
            x.open("CommonPrefixes");
            x.element("Prefix", enc(p));
            x.close("CommonPrefixes");
        }
    }
    x.close("ListBucketResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
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
                let id = state
                    .store
                    .writable()?
                    .create_multipart(req.bucket, req.key)?;
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
            let dir = state.store.writable()?;
            match req.query.get("uploadId") {
                Some(id) => dir.abort_multipart(id, req.bucket, req.key)?,
                None => dir.delete(req.bucket, req.key)?,
            }
            Ok(empty_response(StatusCode::NO_CONTENT))
        }
        _ => Err(method_not_allowed(req.method, "an object")),
    }
}

fn object_headers(response: &mut Response<Body>, info: &ObjectInfo) {
    set(response, ETAG, &format!("\"{}\"", info.etag));
    set(
        response,
        LAST_MODIFIED,
        &httpdate::fmt_http_date(info.last_modified),
    );
}

fn get_object(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
    let object = state.store.open(req.bucket, req.key)?;
    let size = object.info.size_bytes;
    let range = match req.headers.get(RANGE) {
        None => None,
        Some(value) => {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match RangeSpec::parse(&text) {
                Ok(spec) => Some((spec, text)),
                // RFC 9110 §14.2 lets a server ignore a Range it cannot parse; S3 does, and
                // answers 200 with the whole object.
                Err(RangeError::Syntax) => None,
                Err(RangeError::Multiple) => {
                    return Err(S3Error::not_implemented(format!(
                        "Range '{text}' asks for several ranges; S3 serves one range per request"
                    )));
                }
            }
        }
    };
    let (status, first, last) = match range {
        None => (StatusCode::OK, 0, size.checked_sub(1)),
        Some((spec, text)) => match spec.resolve(size) {
            Some((first, last)) => (StatusCode::PARTIAL_CONTENT, first, Some(last)),
            None => {
                return Err(S3Error::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                )
                .with("RangeRequested", text)
                .with("ActualObjectSize", size.to_string()));
            }
        },
    };
    let len = last.map_or(0, |l| l + 1 - first);
    let body = match last {
        Some(last) if *req.method == Method::GET => Body::from_chunks(object.slices(first, last)?)
            .counted(state.counters.bytes_sent.clone())
            .paced(state.throttle_bytes_per_s),
        _ => Body::empty(),
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    set(&mut r, CONTENT_LENGTH, &len.to_string());
    set(&mut r, CONTENT_TYPE, "binary/octet-stream");
    set(&mut r, ACCEPT_RANGES, "bytes");
    if let (StatusCode::PARTIAL_CONTENT, Some(last)) = (status, last) {
        set(
            &mut r,
            CONTENT_RANGE,
            &format!("bytes {first}-{last}/{size}"),
        );
    }
    object_headers(&mut r, &object.info);
    Ok(r)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn too_large(limit: u64) -> S3Error {
    S3Error::new(
        StatusCode::BAD_REQUEST,
        "EntityTooLarge",
        format!("Your proposed upload exceeds the maximum allowed size ({limit} bytes)"),
    )
}

/// The next body frame's data, `None` at the end.
async fn next_data(body: &mut Incoming) -> Result<Option<Bytes>, S3Error> {
    loop {
        match poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            None => return Ok(None),
            Some(Err(e)) => {
                return Err(S3Error::new(
                    StatusCode::BAD_REQUEST,
                    "IncompleteBody",
                    format!("The request body ended before its declared length: {e}"),
                ));
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// Reads a small body (XML) whole, checking the payload hash.
async fn read_small_body(body: &mut Incoming, payload: PayloadHash) -> Result<Vec<u8>, S3Error> {
    let mut out = Vec::new();
    while let Some(data) = next_data(body).await? {
        if (out.len() + data.len()) as u64 > MAX_XML_BODY_BYTES {
            return Err(too_large(MAX_XML_BODY_BYTES));
        }
        out.extend_from_slice(&data);
    }
    payload.check(&Sha256::digest(&out).into())?;
    Ok(out)
}

/// Streams an upload body into `temp` (in batches written off the async threads), hashing it
/// when the payload is signed; the temp file is dropped (removed) on any error.
async fn receive(
    state: &State,
    body: &mut Incoming,
    payload: PayloadHash,
    mut temp: TempFile,
) -> Result<TempFile, S3Error> {
    let mut hasher = matches!(payload, PayloadHash::Sha256(_)).then(Sha256::new);
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_bytes = 0;
    let mut total: u64 = 0;
    loop {
        let data = next_data(body).await?;
        let end = data.is_none();
        if let Some(data) = data {
            total += data.len() as u64;
            if total > MAX_PUT_BYTES {
                return Err(too_large(MAX_PUT_BYTES));
            }
            batch_bytes += data.len();
            batch.push(data);
        }
        if batch_bytes >= WRITE_BATCH_BYTES || (end && !batch.is_empty()) {
            let chunks = std::mem::take(&mut batch);
            batch_bytes = 0;
            let write = tokio::task::spawn_blocking(move || {
                for chunk in &chunks {
                    if let Some(h) = hasher.as_mut() {
                        h.update(chunk);
                    }
                    temp.file.write_all(chunk)?;
                }
                Ok::<_, std::io::Error>((temp, hasher))
            });
            (temp, hasher) = write
                .await
                .map_err(|e| S3Error::internal(format!("upload writer failed: {e}")))?
                .map_err(|e| super::error::from_io(&e, "writing an upload"))?;
        }
        if end {
            break;
        }
    }
    state
        .counters
        .bytes_received
        .fetch_add(total, Ordering::Relaxed);
    let digest: [u8; 32] = hasher.map_or([0; 32], |h| h.finalize().into());
    payload.check(&digest)?;
    Ok(temp)
}

fn check_upload_length(headers: &HeaderMap) -> Result<(), S3Error> {
    match content_length(headers) {
        Some(n) if n > MAX_PUT_BYTES => Err(too_large(MAX_PUT_BYTES)),
        _ => Ok(()),
    }
}

async fn put_object(state: &Arc<State>, mut req: Req<'_>) -> Result<Response<Body>, S3Error> {
    let dir = state.store.writable()?;
    dir.check_writable(req.bucket, req.key)?;
    check_upload_length(req.headers)?;
    let temp = receive(state, &mut req.body, req.payload, dir.temp_file()?).await?;
    let info = dir.commit(temp, req.bucket, req.key)?;
    let mut r = empty_response(StatusCode::OK);
    set(&mut r, ETAG, &format!("\"{}\"", info.etag));
    Ok(r)
}

async fn upload_part(
    state: &Arc<State>,
    mut req: Req<'_>,
    upload_id: &str,
    part_number: u32,
) -> Result<Response<Body>, S3Error> {
    let dir = state.store.writable()?;
    dir.check_part(upload_id, req.bucket, req.key, part_number)?;
    check_upload_length(req.headers)?;
    let temp = receive(state, &mut req.body, req.payload, dir.temp_file()?).await?;
    let etag = dir.commit_part(temp, upload_id, req.bucket, req.key, part_number)?;
    let mut r = empty_response(StatusCode::OK);
    set(&mut r, ETAG, &format!("\"{etag}\""));
    Ok(r)
}

async fn complete_multipart(
    state: &Arc<State>,
    mut req: Req<'_>,
    upload_id: String,
) -> Result<Response<Body>, S3Error> {
    state.store.writable()?;
    let body = read_small_body(&mut req.body, req.payload).await?;
    let parts = xml::completed_parts(&body).map_err(|reason| S3Error::malformed_xml(&reason))?;
    let (bucket, key) = (req.bucket.to_string(), req.key.to_string());
    let shared = state.clone();
    // Joining parts copies whole files: off the async threads.
    let info = tokio::task::spawn_blocking(move || {
        shared
            .store
            .writable()?
            .complete_multipart(&upload_id, &bucket, &key, &parts)
    })
    .await
    .map_err(|e| S3Error::internal(format!("joining parts failed: {e}")))??;
    let host = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let mut x = XmlWriter::document();
    x.root("CompleteMultipartUploadResult");
    x.element(
        "Location",
        format!("http://{host}/{}/{}", req.bucket, req.key),
    );
    x.element("Bucket", req.bucket);
    x.element("Key", req.key);
    x.element("ETag", format!("\"{}\"", info.etag));
    x.close("CompleteMultipartUploadResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
}
