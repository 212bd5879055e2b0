//! Request bodies: uploads (PutObject, UploadPart) streamed to a temporary file off the async
//! threads (the directory) or checked and dropped as they arrive (the sink), with their payload
//! hash and their additional checksum (`x-amz-checksum-*`, `server::checksums`) checked before
//! the store keeps them; CompleteMultipartUpload, its checksums checked before the parts are
//! joined; and the small XML bodies other operations read whole.
//!
//! An upload whose payload is aws-chunked (`x-amz-content-sha256: STREAMING-*`) is decoded as
//! its frames arrive ([`Inflow`], `server::chunked`): the store and the checksum see the
//! decoded data, a slice of each frame at a time (the `flip-upload` fault changes its byte in
//! the decoder, before the chunk's signature is checked, as a byte changed in flight would
//! be), and the checksum a trailer brings at the end is verified, echoed and kept exactly as
//! the header's would be.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, ETAG};
use http::{HeaderMap, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use sha2::{Digest, Sha256};

use super::super::body::Body;
use super::super::checksums::{self, Inbound, Stored};
use super::super::chunked::{Decoder, Trailer};
use super::super::dir::TempFile;
use super::super::error::S3Error;
use super::super::sigv4::PayloadHash;
use super::super::sink::SinkWrite;
use super::super::store::Writable;
use super::request::{Req, State, empty_response, set, xml_response};
use crate::checksum::{Algorithm, Digest as PartDigest};
use crate::s3::xml::{self, XmlWriter};

/// S3's largest single PUT and largest part.
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// The largest XML request body read (CompleteMultipartUpload of 10,000 parts fits).
pub const MAX_XML_BODY_BYTES: u64 = 2 << 20;
/// Upload bytes gathered before one blocking write.
const WRITE_BATCH_BYTES: usize = 8 << 20;

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
pub(super) async fn read_small_body(
    body: &mut Incoming,
    payload: PayloadHash,
) -> Result<Vec<u8>, S3Error> {
    if matches!(payload, PayloadHash::Streaming(_)) {
        return Err(S3Error::not_implemented(
            "ringload serve takes aws-chunked bodies (x-amz-content-sha256: STREAMING-*) on \
             PutObject and UploadPart only; send this request's body whole",
        ));
    }
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

/// One blocking write of a batch of frames into `temp`, hashing them when the payload is
/// signed; gives both back.
type Written = tokio::task::JoinHandle<std::io::Result<(TempFile, Option<Sha256>)>>;

fn write_batch(mut temp: TempFile, mut hasher: Option<Sha256>, chunks: Vec<Bytes>) -> Written {
    tokio::task::spawn_blocking(move || {
        for chunk in &chunks {
            if let Some(h) = hasher.as_mut() {
                h.update(chunk);
            }
            temp.file.write_all(chunk)?;
        }
        Ok((temp, hasher))
    })
}

async fn written(write: Written) -> Result<(TempFile, Option<Sha256>), S3Error> {
    write
        .await
        .map_err(|e| S3Error::internal(format!("upload writer failed: {e}")))?
        .map_err(|e| super::super::error::from_io(&e, "writing an upload"))
}

/// Counts a body frame as received; `EntityTooLarge` past `limit` bytes.
fn count_frame(state: &State, total: &mut u64, limit: u64, data: &Bytes) -> Result<(), S3Error> {
    *total += data.len() as u64;
    state
        .counters
        .bytes_received
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    if *total > limit {
        return Err(too_large(limit));
    }
    Ok(())
}

/// An upload body as the store takes it: its frames counted as received (the bytes on the
/// wire), and decoded when the payload is aws-chunked, each frame into slices of itself; at
/// the end, the checksum its trailer carried.
struct Inflow<'b> {
    body: &'b mut Incoming,
    decoder: Option<Decoder>,
    /// Decoded data of the last frame not yet taken (bounded by the frame's size).
    decoded: VecDeque<Bytes>,
    wire_bytes: u64,
    /// The most bytes taken on the wire: S3's largest upload, or for an aws-chunked body
    /// twice that (its data is held to `x-amz-decoded-content-length`, which is checked
    /// against the largest upload; the framing of 64 KiB chunks adds 0.2%).
    wire_limit: u64,
    ended: bool,
    trailer: Option<Trailer>,
}

impl<'b> Inflow<'b> {
    /// `flip`: the data byte `serve --faults flip-upload` inverts; an aws-chunked body's
    /// decoder inverts it before its chunk's signature is checked.
    fn new(body: &'b mut Incoming, payload: &PayloadHash, flip: Option<u64>) -> Inflow<'b> {
        let decoder = match payload {
            PayloadHash::Streaming(s) => Some(Decoder::new(s).flipping(flip)),
            _ => None,
        };
        Inflow {
            body,
            wire_limit: if decoder.is_some() {
                2 * MAX_PUT_BYTES
            } else {
                MAX_PUT_BYTES
            },
            decoder,
            decoded: VecDeque::new(),
            wire_bytes: 0,
            ended: false,
            trailer: None,
        }
    }

    /// The flip left to the checksum's pass (`Inbound`): all of it unless a decoder took it.
    fn plain_flip(&self, flip: Option<u64>) -> Option<u64> {
        flip.filter(|_| self.decoder.is_none())
    }

    /// The next piece of the upload's data, `None` at its end (an aws-chunked body's framing
    /// and signatures checked).
    async fn next(&mut self, state: &State) -> Result<Option<Bytes>, S3Error> {
        loop {
            if let Some(data) = self.decoded.pop_front() {
                return Ok(Some(data));
            }
            if self.ended {
                return Ok(None);
            }
            match next_data(self.body).await? {
                Some(data) => {
                    count_frame(state, &mut self.wire_bytes, self.wire_limit, &data)?;
                    match self.decoder.as_mut() {
                        Some(decoder) => decoder.feed(data, &mut self.decoded)?,
                        None => return Ok(Some(data)),
                    }
                }
                None => {
                    self.ended = true;
                    if let Some(decoder) = self.decoder.take() {
                        self.trailer = decoder.finish()?;
                    }
                }
            }
        }
    }
}

/// Streams an upload body into `temp`, hashing it when the payload is signed: frames are
/// gathered into batches of [`WRITE_BATCH_BYTES`], each written off the async threads while the
/// next one arrives (at most two batches in memory per upload, whatever the part size). The
/// temp file is dropped (removed) on any error.
async fn receive(
    state: &State,
    body: &mut Inflow<'_>,
    payload: &PayloadHash,
    temp: TempFile,
    inbound: &mut Inbound,
) -> Result<TempFile, S3Error> {
    let hasher = matches!(payload, PayloadHash::Sha256(_)).then(Sha256::new);
    // The file and hasher, or the write that holds them.
    let mut idle = Some((temp, hasher));
    let mut in_flight: Option<Written> = None;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_bytes = 0;
    loop {
        let data = body.next(state).await?;
        let end = data.is_none();
        if let Some(data) = data {
            let data = inbound.frame(data);
            batch_bytes += data.len();
            batch.push(data);
        }
        if batch_bytes >= WRITE_BATCH_BYTES || (end && !batch.is_empty()) {
            let (temp, hasher) = match (idle.take(), in_flight.take()) {
                (Some(idle), _) => idle,
                (None, Some(write)) => written(write).await?,
                (None, None) => return Err(S3Error::internal("upload writer lost its file")),
            };
            batch_bytes = 0;
            in_flight = Some(write_batch(temp, hasher, std::mem::take(&mut batch)));
        }
        if end {
            break;
        }
    }
    let (temp, hasher) = match (idle, in_flight) {
        (Some(idle), _) => idle,
        (None, Some(write)) => written(write).await?,
        (None, None) => return Err(S3Error::internal("upload writer lost its file")),
    };
    let digest: [u8; 32] = hasher.map_or([0; 32], |h| h.finalize().into());
    payload.check(&digest)?;
    Ok(temp)
}

/// Takes an upload body into the sink: counted, hashed when signed, and checked frame by frame
/// when the sink verifies; no byte is kept.
async fn receive_sink(
    state: &State,
    body: &mut Inflow<'_>,
    payload: &PayloadHash,
    mut write: SinkWrite,
    inbound: &mut Inbound,
) -> Result<SinkWrite, S3Error> {
    let mut hasher = matches!(payload, PayloadHash::Sha256(_)).then(Sha256::new);
    while let Some(data) = body.next(state).await? {
        let data = inbound.frame(data);
        if let Some(h) = hasher.as_mut() {
            h.update(&data);
        }
        write.take(&data);
    }
    let digest: [u8; 32] = hasher.map_or([0; 32], |h| h.finalize().into());
    payload.check(&digest)?;
    Ok(write)
}

/// Reads and drops the rest of a body (up to `limit` bytes), counting it as received: so an
/// injected error is answered after the body, on a connection that stays usable.
pub(super) async fn drain(state: &State, body: &mut Incoming, limit: u64) -> u64 {
    let mut total = 0;
    while total < limit {
        match next_data(body).await {
            Ok(Some(data)) => {
                let _ = count_frame(state, &mut total, u64::MAX, &data);
            }
            _ => break,
        }
    }
    total
}

/// The upload's announced length against S3's largest: its data's, when aws-chunked.
fn check_upload_length(headers: &HeaderMap, payload: &PayloadHash) -> Result<(), S3Error> {
    let length = match payload {
        PayloadHash::Streaming(s) => Some(s.decoded_length),
        _ => content_length(headers),
    };
    match length {
        Some(n) if n > MAX_PUT_BYTES => Err(too_large(MAX_PUT_BYTES)),
        _ => Ok(()),
    }
}

/// A checksum a request carries: its algorithm and base64 value.
type Carried = Option<(Algorithm, String)>;

/// The checksum an upload announces: its algorithm, and the header's value (`None` when a
/// trailer brings the value at the end). A header and a trailer both is two checksums, which
/// S3 refuses. A server whose faults ignore checksums ignores a trailer's too.
fn announced(req: &Req<'_>) -> Result<(Option<Algorithm>, Carried), S3Error> {
    let requested = checksums::requested(req.headers)?;
    let trailer = match &req.payload {
        PayloadHash::Streaming(s) if !req.checksums_ignored => s.trailer,
        _ => None,
    };
    match (&requested, trailer) {
        (Some((header, _)), Some(trailer)) => Err(S3Error::invalid_request(format!(
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not \
             allowed: {} as a header and {} as x-amz-trailer",
            header.header(),
            trailer.header()
        ))),
        (Some((algorithm, _)), None) => Ok((Some(*algorithm), requested)),
        (None, trailer) => Ok((trailer, None)),
    }
}

/// The checksum the upload carried: the header's, else the trailer's as it arrived.
fn carried(requested: Carried, announced: Option<Algorithm>, body: Inflow<'_>) -> Carried {
    requested.or_else(|| {
        let trailer = body.trailer?;
        announced.map(|_| (trailer.algorithm, trailer.value))
    })
}

/// The body's digest against the checksum its request carries (`BadDigest` naming `what`):
/// checked before the store keeps anything.
fn checked(
    state: &State,
    requested: &Option<(Algorithm, String)>,
    inbound: Inbound,
    what: impl FnOnce() -> String,
) -> Result<(Option<PartDigest>, u64), S3Error> {
    let (digest, len) = inbound.finish();
    if let (Some(expected), Some(digest)) = (requested, &digest) {
        count_check(state, checksums::check(expected, digest, &what()))?;
    }
    Ok((digest, len))
}

/// Counts a checksum check: verified, or refused.
fn count_check<T>(state: &State, result: Result<T, S3Error>) -> Result<T, S3Error> {
    let counter = match &result {
        Ok(_) => &state.counters.checksums_verified,
        Err(e) if e.code == "BadDigest" => &state.counters.checksums_refused,
        Err(_) => return result,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    result
}

/// A stored upload's answer: its ETag, and its checksum header echoed, as S3 does.
fn stored_response(etag: &str, requested: Option<(Algorithm, String)>) -> Response<Body> {
    let mut r = empty_response(StatusCode::OK);
    set(&mut r, ETAG, &format!("\"{etag}\""));
    if let Some((algorithm, value)) = requested
        && let Ok(name) = http::HeaderName::from_bytes(algorithm.header().as_bytes())
    {
        set(&mut r, name, &value);
    }
    r
}

pub(super) async fn put_object(
    state: &Arc<State>,
    mut req: Req<'_>,
) -> Result<Response<Body>, S3Error> {
    check_upload_length(req.headers, &req.payload)?;
    let (algorithm, requested) = announced(&req)?;
    let mut body = Inflow::new(&mut req.body, &req.payload, req.flip);
    let mut inbound = Inbound::new(algorithm, body.plain_flip(req.flip));
    let what = || format!("object '{}'", req.key);
    let (info, requested) = match state.store.writable()? {
        Writable::Dir(dir) => {
            dir.check_writable(req.bucket, req.key)?;
            let temp = dir.temp_file()?;
            let temp = receive(state, &mut body, &req.payload, temp, &mut inbound).await?;
            let requested = carried(requested, algorithm, body);
            checked(state, &requested, inbound, what)?;
            (dir.commit(temp, req.bucket, req.key)?, requested)
        }
        Writable::Sink(sink) => {
            let write = sink.begin_put(req.bucket, req.key)?;
            let write = receive_sink(state, &mut body, &req.payload, write, &mut inbound).await?;
            let requested = carried(requested, algorithm, body);
            checked(state, &requested, inbound, what)?;
            (sink.finish_put(write, req.bucket, req.key)?, requested)
        }
    };
    let stored = requested.clone().map(|(algorithm, value)| Stored {
        algorithm,
        value,
        object_type: "FULL_OBJECT",
    });
    state.checksums.object_stored(req.bucket, req.key, stored);
    Ok(stored_response(&info.etag, requested))
}

pub(super) async fn upload_part(
    state: &Arc<State>,
    mut req: Req<'_>,
    upload_id: &str,
    part_number: u32,
) -> Result<Response<Body>, S3Error> {
    check_upload_length(req.headers, &req.payload)?;
    let (bucket, key) = (req.bucket, req.key);
    let (algorithm, requested) = announced(&req)?;
    let created = state.checksums.upload_algorithm(upload_id);
    if let (Some(algorithm), Some(created)) = (algorithm, created)
        && algorithm != created
    {
        return Err(S3Error::invalid_request(format!(
            "part {part_number} carries {}, but the upload was created with {}",
            algorithm.header(),
            created.name()
        )));
    }
    let mut body = Inflow::new(&mut req.body, &req.payload, req.flip);
    let mut inbound = Inbound::new(algorithm.or(created), body.plain_flip(req.flip));
    let what = || format!("part {part_number} of '{key}'");
    let (etag, (digest, len), requested) = match state.store.writable()? {
        Writable::Dir(dir) => {
            dir.check_part(upload_id, bucket, key, part_number)?;
            let temp = dir.temp_file()?;
            let temp = receive(state, &mut body, &req.payload, temp, &mut inbound).await?;
            let requested = carried(requested, algorithm, body);
            let sum = checked(state, &requested, inbound, what)?;
            let etag = dir.commit_part(temp, upload_id, bucket, key, part_number)?;
            (etag, sum, requested)
        }
        Writable::Sink(sink) => {
            let write = sink.begin_part(upload_id, bucket, key, part_number)?;
            let write = receive_sink(state, &mut body, &req.payload, write, &mut inbound).await?;
            let requested = carried(requested, algorithm, body);
            let sum = checked(state, &requested, inbound, what)?;
            let etag = sink.finish_part(write, upload_id, bucket, key, part_number)?;
            (etag, sum, requested)
        }
    };
    if let Some(digest) = digest {
        state
            .checksums
            .part_stored(upload_id, part_number, digest, len);
    }
    Ok(stored_response(&etag, requested))
}

pub(super) async fn complete_multipart(
    state: &Arc<State>,
    mut req: Req<'_>,
    upload_id: String,
) -> Result<Response<Body>, S3Error> {
    state.store.writable()?;
    let body = read_small_body(&mut req.body, req.payload).await?;
    let parts = xml::completed_parts(&body).map_err(|reason| S3Error::malformed_xml(&reason))?;
    // Checked before the store joins anything: a wrong checksum completes nothing.
    let checksum = state.checksums.complete(&upload_id, &parts, req.headers);
    let checksum = match checksum {
        Ok(None) => None,
        checked => count_check(state, checked)?,
    };
    let (bucket, key) = (req.bucket.to_string(), req.key.to_string());
    let ended = upload_id.clone();
    let shared = state.clone();
    // Joining parts copies whole files: off the async threads (the sink only checks a list).
    let info = tokio::task::spawn_blocking(move || match shared.store.writable()? {
        Writable::Dir(dir) => dir.complete_multipart(&upload_id, &bucket, &key, &parts),
        Writable::Sink(sink) => sink.complete_multipart(&upload_id, &bucket, &key, &parts),
    })
    .await
    .map_err(|e| S3Error::internal(format!("joining parts failed: {e}")))??;
    state.checksums.ended(&ended);
    state
        .checksums
        .object_stored(req.bucket, req.key, checksum.clone());
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
    if let Some(c) = &checksum {
        x.element(c.algorithm.element(), &c.value);
        x.element("ChecksumType", c.object_type);
    }
    x.close("CompleteMultipartUploadResult");
    Ok(xml_response(StatusCode::OK, x.finish(), state))
}
