//! The service and its buckets: ListBuckets, GetBucketLocation, HeadBucket, CreateBucket,
//! DeleteBucket, DeleteObjects, ListObjects (V1 and V2) and ListMultipartUploads.

use std::sync::Arc;

use http::header::LOCATION;
use http::{Method, Response, StatusCode};

use super::super::body::Body;
use super::super::error::S3Error;
use super::super::list::{self, After, Entry, ListParams};
use super::request::{Req, State, empty_response, method_not_allowed, set, xml_response};
use super::upload::read_small_body;
use crate::s3::sigv4::uri_encode;
use crate::s3::xml::{self, XmlWriter};

pub(super) fn service_operation(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
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

const UPLOAD_LIST_PARAMS: &[&str] = &[
    "uploads",
    "prefix",
    "delimiter",
    "max-uploads",
    "key-marker",
    "upload-id-marker",
    "encoding-type",
];

pub(super) async fn bucket_operation(
    state: &Arc<State>,
    mut req: Req<'_>,
) -> Result<Response<Body>, S3Error> {
    let bucket = req.bucket;
    match *req.method {
        Method::GET if req.query.has("uploads") => {
            req.query.only(UPLOAD_LIST_PARAMS)?;
            list_uploads(state, &req)
        }
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
            let store = state.store.writable()?;
            read_small_body(&mut req.body, req.payload).await?;
            store.create_bucket(bucket)?;
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
    let store = state.store.writable()?;
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
        match store.delete(req.bucket, key) {
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
    let listing = state.store.listing(req.bucket, &prefix)?;
    let params = ListParams {
        prefix,
        delimiter,
        max_keys,
        after,
    };
    let page = listing.page(&params);
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

/// ListMultipartUploads: the uploads in progress under `prefix`, by key and upload id, paged by
/// `max-uploads` (at most 1,000) from `key-marker` / `upload-id-marker`.
fn list_uploads(state: &State, req: &Req<'_>) -> Result<Response<Body>, S3Error> {
    let q = &req.query;
    if q.get("delimiter").is_some_and(|d| !d.is_empty()) {
        return Err(S3Error::not_implemented(
            "ringload serve does not implement a delimiter in ListMultipartUploads; list by \
             prefix",
        ));
    }
    let url_encoded = match q.get("encoding-type") {
        None => false,
        Some("url") => true,
        Some(other) => {
            return Err(S3Error::invalid_argument(format!(
                "encoding-type={other}: Invalid Encoding Method specified in Request (only 'url')"
            )));
        }
    };
    let max = match q.get("max-uploads") {
        None => list::MAX_KEYS,
        Some(t) => t
            .parse::<u64>()
            .map(|n| (n as usize).min(list::MAX_KEYS))
            .map_err(|_| {
                S3Error::invalid_argument(format!(
                    "max-uploads={t}: Provided max-uploads not an integer or within integer range"
                ))
            })?,
    };
    // `ignore-prefix`: answered as a store that ignores the prefix does.
    let prefix = match state.faults.ignores_prefix() {
        true => "",
        false => q.get("prefix").unwrap_or(""),
    };
    let key_marker = q.get("key-marker").unwrap_or("");
    let id_marker = q.get("upload-id-marker").filter(|m| !m.is_empty());
    let after = |key: &str, id: &str| match id_marker {
        Some(m) if key == key_marker => id > m,
        _ => key > key_marker,
    };
    let uploads: Vec<_> = state
        .store
        .uploads(req.bucket, prefix)?
        .into_iter()
        .filter(|u| key_marker.is_empty() || after(&u.key, &u.upload_id))
        .collect();
    let truncated = uploads.len() > max;
    let page = &uploads[..uploads.len().min(max)];
    let enc = |s: &str| {
        if url_encoded {
            uri_encode(s, true)
        } else {
            s.to_string()
        }
    };
    let mut x = XmlWriter::document();
    x.root("ListMultipartUploadsResult");
    x.element("Bucket", req.bucket);
    x.element("KeyMarker", enc(key_marker));
    x.element("UploadIdMarker", id_marker.unwrap_or(""));
    if let (true, Some(last)) = (truncated, page.last()) {
        x.element("NextKeyMarker", enc(&last.key));
        x.element("NextUploadIdMarker", &last.upload_id);
    }
    x.element("Prefix", enc(prefix));
    x.element("MaxUploads", max);
    if url_encoded {
        x.element("EncodingType", "url");
    }
    x.element("IsTruncated", truncated);
    for u in page {
        x.open("Upload");
        x.element("Key", enc(&u.key));
        x.element("UploadId", &u.upload_id);
        for who in ["Initiator", "Owner"] {
            x.open(who);
            x.element("ID", "ringload");
            x.element("DisplayName", "ringload");
            x.close(who);
        }
        x.element("StorageClass", "STANDARD");
        x.element("Initiated", xml::iso8601(u.initiated));
        x.close("Upload");
    }
    x.close("ListMultipartUploadsResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
}
