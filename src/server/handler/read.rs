//! GetObject and HeadObject: one range (or the whole object) of a stored object, sent from
//! shared slices without a copy, paced when the server is throttled or its bandwidth limited.

use http::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, LAST_MODIFIED, RANGE,
};
use http::{Method, Response, StatusCode};

use super::super::body::Body;
use super::super::error::S3Error;
use super::super::object::ObjectInfo;
use super::super::range::{RangeError, RangeSpec};
use super::request::{Req, State, set};

fn object_headers(response: &mut Response<Body>, info: &ObjectInfo) {
    set(response, ETAG, &format!("\"{}\"", info.etag));
    set(
        response,
        LAST_MODIFIED,
        &httpdate::fmt_http_date(info.last_modified),
    );
}

pub(super) fn get_object(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
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
        Some(last) if *req.method == Method::GET => object
            .body(first, last)?
            .counted(state.counters.bytes_sent.clone())
            .paced(state.throttle_bytes_per_s)
            .shared_pace(&state.bandwidth),
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
    // The object's checksum, when asked (`x-amz-checksum-mode: ENABLED`) of the whole object:
    // a ranged GET has none, as on S3.
    let asked = req
        .headers
        .get("x-amz-checksum-mode")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"ENABLED"));
    if let Some(c) = state
        .checksums
        .object(req.bucket, req.key)
        .filter(|_| asked && status == StatusCode::OK)
    {
        if let Ok(name) = http::HeaderName::from_bytes(c.algorithm.header().as_bytes()) {
            set(&mut r, name, &c.value);
        }
        set(
            &mut r,
            http::HeaderName::from_static("x-amz-checksum-type"),
            c.object_type,
        );
    }
    Ok(r)
}
