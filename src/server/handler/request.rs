//! What every handler shares: the server's state and counters, a request taken apart (its
//! decoded query), and the small builders of S3 responses.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method, Response, StatusCode};
use hyper::body::Incoming;

use super::super::body::Body;
use super::super::error::S3Error;
use super::super::sigv4::{self, Credentials, PayloadHash};
use super::super::store::Store;

/// Query parameters that never select an operation.
fn ignored_param(name: &str) -> bool {
    name == "x-id" || name.starts_with("response-") || name.starts_with("X-Amz-")
}

/// The server's running totals.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    /// HEADs of objects, and GETs with a `Range` header, among `requests`.
    pub heads: AtomicU64,
    pub ranged_gets: AtomicU64,
    /// Response body bytes handed to the connection.
    pub bytes_sent: Arc<AtomicU64>,
    /// Upload body bytes received.
    pub bytes_received: AtomicU64,
    /// Requests answered with an S3 error.
    pub errors: AtomicU64,
    /// Additional checksums (`x-amz-checksum-*`) checked against what arrived, and those
    /// refused (`BadDigest`).
    pub checksums_verified: AtomicU64,
    pub checksums_refused: AtomicU64,
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
    /// The server-wide limit every body shares (none until [`super::super::Server::limit_bandwidth`]).
    pub bandwidth: std::sync::Arc<super::super::bandwidth::Bandwidth>,
    pub faults: super::super::faults::Faults,
    pub counters: Counters,
    /// `serve --request-log`: every request answered, one line each.
    pub request_log: std::sync::OnceLock<super::super::request_log::RequestLog>,
    /// Open uploads' and stored objects' additional checksums (both backends).
    pub checksums: super::super::checksums::Checksums,
}

/// The decoded query string.
#[derive(Debug, Default)]
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(raw: &str) -> Result<Query, S3Error> {
        let mut pairs = Vec::new();
        for item in raw.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            pairs.push((sigv4::percent_decode(k)?, sigv4::percent_decode(v)?));
        }
        Ok(Query(pairs))
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// `NotImplemented` for a parameter the operation does not know (S3 answers unknown
    /// subresources the same way).
    pub(super) fn only(&self, known: &[&str]) -> Result<(), S3Error> {
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
pub(super) struct Req<'a> {
    pub(super) method: &'a Method,
    pub(super) headers: &'a HeaderMap,
    pub(super) query: Query,
    pub(super) bucket: &'a str,
    pub(super) key: &'a str,
    pub(super) payload: PayloadHash,
    pub(super) body: Incoming,
    /// The body byte `serve --faults flip-upload=N` inverts before the store sees it.
    pub(super) flip: Option<u64>,
    /// `serve --faults ignore-checksums` fired for this request: its checksum headers were
    /// removed, and a checksum its aws-chunked trailer brings is not checked either.
    pub(super) checksums_ignored: bool,
}

pub(super) fn method_not_allowed(method: &Method, what: &str) -> S3Error {
    S3Error::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("The specified method is not allowed against this resource: {method} on {what}"),
    )
}

pub(super) fn xml_response(status: StatusCode, text: String, state: &State) -> Response<Body> {
    let mut r = Response::new(Body::text(text).counted(state.counters.bytes_sent.clone()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    r
}

pub(super) fn empty_response(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

pub(super) fn set(response: &mut Response<Body>, name: http::HeaderName, value: &str) {
    if let Ok(v) = http::HeaderValue::from_str(value) {
        response.headers_mut().insert(name, v);
    }
}
