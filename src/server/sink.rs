//! The sink backend (`serve --sink`): takes PUTs and multipart uploads at speed and keeps no
//! bytes, only each object's key and size; serves GETs and listings of its objects by making
//! their bytes again from [`crate::content`]. So checkpoints far larger than the disk can be
//! written and restored, and a read-only run works against a fresh sink given the object list
//! (`Vec<(key, size)>`, plain data from the caller: the server never sees a plan).
//!
//! **Content.** An object's bytes are `Content::of(key, randomize)` (the bucket-relative key),
//! its blocks laid out by the sink's reduction ([`SinkStore::reduced`]: `serve --dedupe-ratio`…).
//! A GET always answers the generator's bytes, whatever was uploaded: only with `verify` are
//! uploads checked against them.
//!
//! **Verify** (`serve --sink --verify`). Every body byte is checked as it arrives against the
//! generator at its object offset; the first wrong byte fails the request with `400 BadDigest`
//! naming the object, the part and the offset, the body is not stored (the client tries it
//! again, as any `BadDigest`, and fails when every try is refused), and the mismatch is counted ([`SinkStats::mismatches`]). A PutObject and
//! part 1 start at offset 0. A later part's offset is the sum of the earlier parts' sizes,
//! which is unknown while parts arrive out of order or are retried, so the sink does not assume
//! equal parts: it **locates** the part from its own first bytes ([`Content::locate`]: each
//! block starts with a header word that is a bijection of the block's id, so the first block
//! start in the part's first [`locate_bytes`] gives the offset; a wrong byte there spoils only
//! that block, and the next one locates the part, so the wrong byte is still found at its
//! offset). With dedupe a block's bytes lie at several offsets: the part keeps every offset its
//! bytes fit and drops each as soon as a byte tells it apart. It checks the whole part at those
//! offsets as it streams, and records where the part claims to lie. At
//! CompleteMultipartUpload it checks that each listed part's claimed offset is the sum of the
//! sizes listed before it (a part sent in the wrong place fails there, naming both offsets).
//! A part shorter than [`locate_bytes`] (a tiny last part) is kept whole, and checked at
//! completion. With zero content (`randomize` off) every byte is checked to be zero, and a
//! part's place cannot be told from its bytes.
//!
//! Multipart rules are S3's, as in the directory backend: parts numbered 1-10,000, a retried
//! part replaces the earlier one (with a new ETag), completion lists parts in ascending order
//! with their ETags, every part but the last is at least 5 MiB.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::StatusCode;

use super::body::{Body, MakeBytes};
use super::dir::{MAX_PART_NUMBER, MIN_PART_BYTES};
use super::error::S3Error;
use super::object::{ObjectInfo, UploadInfo, tag_of};
use crate::content::{self, Content};
use crate::s3::target::valid_bucket_name;
use crate::s3::xml::CompletedPart;

/// The first bytes of a part that locate it (and shorter parts are kept whole): two blocks and
/// a header word, so that a block start whose first bytes are wrong has another after it.
pub fn locate_bytes(content: &Content) -> usize {
    match content {
        Content::Random { shape, .. } => 2 * shape.block as usize + 64,
        Content::Zeros => 0,
    }
}

/// Zeros, shared by every GET of zero content.
static ZEROS: [u8; super::body::GENERATED_FRAME_BYTES] = [0; super::body::GENERATED_FRAME_BYTES];

/// What the sink has taken, for the server's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkStats {
    /// Objects stored (PutObject and completed multipart uploads).
    pub objects_written: u64,
    /// Body bytes checked against the generator (0 without verify).
    pub verified_bytes: u64,
    /// Uploads refused because a byte was not the generator's.
    pub mismatches: u64,
}

/// One part taken: its size, ETag, and where its bytes lie.
#[derive(Debug, Clone)]
struct Part {
    size: u64,
    etag: String,
    /// The object offsets its bytes were checked at (random content, verified; several with
    /// dedupe); empty: any.
    at: Vec<u64>,
    /// A part too short to locate, kept whole to be checked at completion.
    small: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Upload {
    bucket: String,
    key: String,
    initiated: SystemTime,
    parts: BTreeMap<u32, Part>,
}

#[derive(Debug)]
struct Bucket {
    created: SystemTime,
    objects: BTreeMap<String, ObjectInfo>,
}

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, Bucket>,
    uploads: BTreeMap<String, Upload>,
}

/// The sink backend.
#[derive(Debug)]
pub struct SinkStore {
    randomize: bool,
    /// How random content's blocks are laid out (dedupe and compression ratios).
    shape: content::Shape,
    verify: bool,
    state: Mutex<State>,
    /// Makes upload ids and ETags unique.
    next: AtomicU64,
    objects_written: AtomicU64,
    verified_bytes: AtomicU64,
    mismatches: AtomicU64,
}

/// A body being taken: counted and, with verify, checked frame by frame.
#[derive(Debug)]
pub struct SinkWrite {
    key: String,
    /// `None` for a PutObject.
    part: Option<u32>,
    content: Content,
    verify: bool,
    /// The object offsets the body's first byte may lie at, once located (several with dedupe
    /// until a byte tells them apart; for zero content, 0: any offset checks the same).
    starts: Option<Vec<u64>>,
    /// Whether `starts` are where the body may lie in the object (not so for a later part of
    /// zero content, whose place is known only at completion).
    placed: bool,
    /// The first bytes, kept until the part is located.
    head: Vec<u8>,
    received: u64,
    /// The first wrong byte: (offset in the body, its object offset when known).
    bad: Option<(u64, Option<u64>)>,
}

fn error_of(part: Option<u32>) -> String {
    part.map(|n| format!(" (part {n})")).unwrap_or_default()
}

/// The 400 a body that is not the generator's gets.
fn mismatch(key: &str, part: Option<u32>, what: String, offset: Option<u64>) -> S3Error {
    let mut e = S3Error::new(
        StatusCode::BAD_REQUEST,
        "BadDigest",
        format!(
            "ringload serve --sink --verify: object '{key}'{}: {what}",
            error_of(part)
        ),
    )
    .with("Key", key);
    if let Some(offset) = offset {
        e = e.with("Offset", offset.to_string());
    }
    e
}

impl SinkWrite {
    /// Takes the next frame of the body.
    pub fn take(&mut self, data: &[u8]) {
        let before = self.received;
        self.received += data.len() as u64;
        if !self.verify || self.bad.is_some() {
            return;
        }
        let rest = match self.starts {
            Some(_) => data,
            None => {
                let need = locate_bytes(&self.content);
                let n = (need - self.head.len()).min(data.len());
                self.head.extend_from_slice(&data[..n]);
                if self.head.len() < need {
                    return;
                }
                let found = self.content.locate(&self.head);
                if found.is_empty() {
                    self.bad = Some((0, None));
                    return;
                }
                self.starts = Some(found);
                self.placed = true;
                let head = std::mem::take(&mut self.head);
                self.narrow(0, &head);
                &data[n..]
            }
        };
        self.narrow(before + (data.len() - rest.len()) as u64, rest);
    }

    /// Keeps the offsets at which `bytes` (body bytes from `body_at`) are the generator's;
    /// when none is left, the first wrong byte (at the offset that held longest).
    fn narrow(&mut self, body_at: u64, bytes: &[u8]) {
        let Some(starts) = self.starts.as_mut().filter(|s| !s.is_empty()) else {
            return;
        };
        let content = self.content;
        let mut wrong = None::<(u64, u64)>;
        starts.retain(|&start| match content.check(start + body_at, bytes) {
            Ok(()) => true,
            Err(at) => {
                if wrong.is_none_or(|(body, _)| at - start > body) {
                    wrong = Some((at - start, at));
                }
                false
            }
        });
        if starts.is_empty() {
            self.bad = wrong.map(|(body, at)| (body, Some(at)));
        }
    }

    /// The body's size.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The part this body makes, or the error its bytes earn.
    fn finish(self) -> Result<Part, S3Error> {
        let part = self.part;
        match self.bad {
            Some((_, None)) => {
                return Err(mismatch(
                    &self.key,
                    part,
                    format!(
                        "its first {} bytes are not content version {}'s at any offset (with \
                         this server's reduction: {}); data written by another ringload \
                         version, or with other --dedupe-ratio/--compress-ratio, differs",
                        locate_bytes(&self.content),
                        content::VERSION,
                        self.content.describe()
                    ),
                    None,
                ));
            }
            Some((body_at, Some(_))) if !self.placed => {
                return Err(mismatch(
                    &self.key,
                    part,
                    format!("byte {body_at} of the part is not zero"),
                    None,
                ));
            }
            Some((body_at, Some(at))) => {
                return Err(mismatch(
                    &self.key,
                    part,
                    format!(
                        "the byte at object offset {at} (byte {body_at} of the body) is not the \
                         generator's"
                    ),
                    Some(at),
                ));
            }
            None => {}
        }
        let (at, small) = match (self.verify, self.starts) {
            (false, _) => (Vec::new(), None),
            (true, Some(starts)) if matches!(self.content, Content::Random { .. }) => {
                (starts, None)
            }
            (true, Some(_)) => (Vec::new(), None),
            (true, None) => (Vec::new(), Some(self.head)),
        };
        Ok(Part {
            size: self.received,
            etag: String::new(),
            at,
            small,
        })
    }
}

impl SinkStore {
    /// A sink with `objects` (bucket-relative keys and sizes) in `bucket`, their content made
    /// by `Content::of(key, randomize)`; `verify` checks every upload against it.
    pub fn new(
        bucket: &str,
        objects: Vec<(String, u64)>,
        randomize: bool,
        verify: bool,
    ) -> SinkStore {
        let created = SystemTime::now();
        let objects = objects
            .into_iter()
            .map(|(key, size)| {
                let info = ObjectInfo {
                    etag: tag_of(&[content::seed(&key), size, u64::from(randomize)]),
                    key: key.clone(),
                    size_bytes: size,
                    last_modified: created,
                };
                (key, info)
            })
            .collect();
        let mut state = State::default();
        state
            .buckets
            .insert(bucket.to_string(), Bucket { created, objects });
        SinkStore {
            randomize,
            shape: content::Shape::default(),
            verify,
            state: Mutex::new(state),
            next: AtomicU64::new(1),
            objects_written: AtomicU64::new(0),
            verified_bytes: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
        }
    }

    /// This sink with random content's blocks laid out as `shape` (dedupe and compression
    /// ratios: `serve --dedupe-ratio`, a run's embedded server).
    pub fn reduced(mut self, shape: content::Shape) -> SinkStore {
        self.shape = shape;
        self
    }

    /// The content of `key`.
    fn content(&self, key: &str) -> Content {
        Content::of(key, self.randomize).reduced(self.shape)
    }

    pub fn describe(&self) -> String {
        let state = self.lock();
        let objects: usize = state.buckets.values().map(|b| b.objects.len()).sum();
        format!(
            "sink ({} content{}, {objects} objects listed; bytes written are discarded)",
            if self.randomize {
                format!("random ({})", self.content("").describe())
            } else {
                "zero".to_string()
            },
            if self.verify {
                ", every upload verified"
            } else {
                ""
            }
        )
    }

    pub fn stats(&self) -> SinkStats {
        SinkStats {
            objects_written: self.objects_written.load(Ordering::Relaxed),
            verified_bytes: self.verified_bytes.load(Ordering::Relaxed),
            mismatches: self.mismatches.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tag(&self, parts: &[u64]) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut all = parts.to_vec();
        all.push(n);
        tag_of(&all)
    }

    pub fn buckets(&self) -> Vec<(String, SystemTime)> {
        self.lock()
            .buckets
            .iter()
            .map(|(name, b)| (name.clone(), b.created))
            .collect()
    }

    pub fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        match self.lock().buckets.contains_key(bucket) {
            true => Ok(()),
            false => Err(S3Error::no_such_bucket(bucket)),
        }
    }

    pub fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        if !valid_bucket_name(bucket) {
            return Err(S3Error::new(
                StatusCode::BAD_REQUEST,
                "InvalidBucketName",
                format!("'{bucket}' is not a valid bucket name"),
            ));
        }
        let mut state = self.lock();
        if state.buckets.contains_key(bucket) {
            return Err(S3Error::new(
                StatusCode::CONFLICT,
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with("BucketName", bucket));
        }
        state.buckets.insert(
            bucket.to_string(),
            Bucket {
                created: SystemTime::now(),
                objects: BTreeMap::new(),
            },
        );
        Ok(())
    }

    pub fn delete_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let mut state = self.lock();
        match state.buckets.get(bucket) {
            None => Err(S3Error::no_such_bucket(bucket)),
            Some(b) if !b.objects.is_empty() => Err(S3Error::new(
                StatusCode::CONFLICT,
                "BucketNotEmpty",
                "The bucket you tried to delete is not empty",
            )
            .with("BucketName", bucket)),
            Some(_) => {
                state.buckets.remove(bucket);
                Ok(())
            }
        }
    }

    /// The objects whose keys start with `prefix`, sorted by key.
    pub fn objects(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, S3Error> {
        let state = self.lock();
        let b = state
            .buckets
            .get(bucket)
            .ok_or_else(|| S3Error::no_such_bucket(bucket))?;
        Ok(b.objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, info)| info.clone())
            .collect())
    }

    pub fn info(&self, bucket: &str, key: &str) -> Result<ObjectInfo, S3Error> {
        let state = self.lock();
        let b = state
            .buckets
            .get(bucket)
            .ok_or_else(|| S3Error::no_such_bucket(bucket))?;
        b.objects
            .get(key)
            .cloned()
            .ok_or_else(|| S3Error::no_such_key(key))
    }

    /// Bytes `first..=last` of `key`, made again as they are sent.
    pub(crate) fn body(&self, key: &str, first: u64, last: u64) -> Body {
        let make: MakeBytes = match self.content(key) {
            Content::Zeros => std::sync::Arc::new(|_, len| Bytes::from_static(&ZEROS[..len])),
            content => std::sync::Arc::new(move |offset, len| {
                let mut buf = BytesMut::zeroed(len);
                content.fill(offset, &mut buf);
                buf.freeze()
            }),
        };
        Body::generated(first, last, make)
    }

    /// Deletes an object; a missing key is not an error.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let mut state = self.lock();
        let b = state
            .buckets
            .get_mut(bucket)
            .ok_or_else(|| S3Error::no_such_bucket(bucket))?;
        b.objects.remove(key);
        Ok(())
    }

    fn write(&self, key: &str, part: Option<u32>, start: Option<u64>) -> SinkWrite {
        SinkWrite {
            placed: part.is_none_or(|n| n == 1),
            key: key.to_string(),
            part,
            content: self.content(key),
            verify: self.verify,
            starts: start.map(|s| vec![s]),
            head: Vec::new(),
            received: 0,
            bad: None,
        }
    }

    /// Counts a finished body's verification; the part it makes, or its mismatch.
    fn finished(&self, write: SinkWrite) -> Result<Part, S3Error> {
        if self.verify {
            self.verified_bytes
                .fetch_add(write.received, Ordering::Relaxed);
        }
        write.finish().inspect_err(|_| {
            self.mismatches.fetch_add(1, Ordering::Relaxed);
        })
    }

    fn store(&self, bucket: &str, key: &str, size: u64, etag: String) -> ObjectInfo {
        let info = ObjectInfo {
            key: key.to_string(),
            size_bytes: size,
            etag,
            last_modified: SystemTime::now(),
        };
        if let Some(b) = self.lock().buckets.get_mut(bucket) {
            b.objects.insert(key.to_string(), info.clone());
        }
        self.objects_written.fetch_add(1, Ordering::Relaxed);
        info
    }

    /// Starts a PutObject body (checks the bucket first).
    pub fn begin_put(&self, bucket: &str, key: &str) -> Result<SinkWrite, S3Error> {
        self.check_bucket(bucket)?;
        Ok(self.write(key, None, Some(0)))
    }

    /// Ends a PutObject: the object is listed with its size.
    pub fn finish_put(
        &self,
        write: SinkWrite,
        bucket: &str,
        key: &str,
    ) -> Result<ObjectInfo, S3Error> {
        let part = self.finished(write)?;
        let etag = self.tag(&[content::seed(key), part.size]);
        Ok(self.store(bucket, key, part.size, etag))
    }

    pub fn create_multipart(&self, bucket: &str, key: &str) -> Result<String, S3Error> {
        self.check_bucket(bucket)?;
        // With `+`, `/` and `=`, as base64 ids of real stores have them: every client's query
        // must encode the id, and every test of the sink checks that it does.
        let tag = self.tag(&[content::seed(bucket), content::seed(key)]);
        let id = format!("{}+{}/{}=", &tag[..8], &tag[8..20], &tag[20..]);
        self.lock().uploads.insert(
            id.clone(),
            Upload {
                bucket: bucket.to_string(),
                key: key.to_string(),
                initiated: SystemTime::now(),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    fn with_upload<T>(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        f: impl FnOnce(&mut State) -> Result<T, S3Error>,
    ) -> Result<T, S3Error> {
        let mut state = self.lock();
        match state.uploads.get(upload_id) {
            Some(u) if u.bucket == bucket && u.key == key => f(&mut state),
            _ => Err(S3Error::no_such_upload(upload_id)),
        }
    }

    /// Starts an UploadPart body.
    pub fn begin_part(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> Result<SinkWrite, S3Error> {
        self.with_upload(upload_id, bucket, key, |_| Ok(()))?;
        if !(1..=MAX_PART_NUMBER).contains(&part_number) {
            return Err(S3Error::invalid_argument(format!(
                "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
            )));
        }
        let start = (part_number == 1 || !self.randomize).then_some(0);
        Ok(self.write(key, Some(part_number), start))
    }

    /// Ends an UploadPart: the part is kept (replacing one of the same number); its ETag.
    pub fn finish_part(
        &self,
        write: SinkWrite,
        upload_id: &str,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> Result<String, S3Error> {
        let mut part = self.finished(write)?;
        part.etag = self.tag(&[content::seed(key), u64::from(part_number), part.size]);
        let etag = part.etag.clone();
        self.with_upload(upload_id, bucket, key, |state| {
            if let Some(u) = state.uploads.get_mut(upload_id) {
                u.parts.insert(part_number, part);
            }
            Ok(etag)
        })
    }

    /// Checks the listed parts (S3's rules, and with verify their places) and stores the
    /// object; the upload ends. A failed check leaves the upload open.
    pub fn complete_multipart(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        listed: &[CompletedPart],
    ) -> Result<ObjectInfo, S3Error> {
        let parts = self.with_upload(upload_id, bucket, key, |state| {
            let upload = state.uploads.get(upload_id).expect("checked");
            check_listed(listed, &upload.parts)
        })?;
        let content = self.content(key);
        let mut offset = 0u64;
        for (n, part) in &parts {
            let wrong = |what: String, at: u64| {
                self.mismatches.fetch_add(1, Ordering::Relaxed);
                Err(mismatch(key, Some(*n), what, Some(at)))
            };
            if let Some(bytes) = &part.small
                && let Err(at) = content.check(offset, bytes)
            {
                return wrong(
                    format!("the byte at object offset {at} is not the generator's"),
                    at,
                );
            }
            if let Some(&at) = part.at.first()
                && !part.at.contains(&offset)
            {
                let place = match part.at.len() {
                    1 => format!("object offset {at}"),
                    n => format!("one of {n} object offsets from {at} (dedupe copies)"),
                };
                return wrong(
                    format!(
                        "its bytes are the generator's for {place}, but the part lies at offset \
                         {offset} (the sum of the sizes of the parts before it)"
                    ),
                    offset,
                );
            }
            offset += part.size;
        }
        self.lock().uploads.remove(upload_id);
        // S3's multipart ETag, so that a client can tell this upload's object from an older
        // one of the same key and size (s3::complete); its parts' ETags are 128-bit tags.
        let etags: Vec<String> = parts.iter().map(|(_, p)| p.etag.clone()).collect();
        let etag = crate::s3::complete::multipart_etag(&etags).unwrap_or_else(|| {
            format!(
                "{}-{}",
                self.tag(&[content::seed(key), offset]),
                parts.len()
            )
        });
        Ok(self.store(bucket, key, offset, etag))
    }

    /// Ends an upload and drops its parts.
    pub fn abort_multipart(&self, upload_id: &str, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.with_upload(upload_id, bucket, key, |state| {
            state.uploads.remove(upload_id);
            Ok(())
        })
    }

    /// The uploads in progress in `bucket` whose keys start with `prefix`, by key and id.
    pub fn uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>, S3Error> {
        self.check_bucket(bucket)?;
        let state = self.lock();
        let mut out: Vec<UploadInfo> = state
            .uploads
            .iter()
            .filter(|(_, u)| u.bucket == bucket && u.key.starts_with(prefix))
            .map(|(id, u)| UploadInfo {
                key: u.key.clone(),
                upload_id: id.clone(),
                initiated: u.initiated,
            })
            .collect();
        out.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(out)
    }
}

/// The listed parts, checked as S3 checks them: ascending, each taken with that ETag, every
/// one but the last at least 5 MiB.
fn check_listed(
    listed: &[CompletedPart],
    parts: &BTreeMap<u32, Part>,
) -> Result<Vec<(u32, Part)>, S3Error> {
    if listed
        .windows(2)
        .any(|w| w[0].part_number >= w[1].part_number)
    {
        return Err(S3Error::new(
            StatusCode::BAD_REQUEST,
            "InvalidPartOrder",
            "The list of parts was not in ascending order. The parts list must be specified in \
             order by part number.",
        ));
    }
    let mut out = Vec::with_capacity(listed.len());
    for (i, l) in listed.iter().enumerate() {
        let part = parts
            .get(&l.part_number)
            .filter(|p| p.etag == l.etag)
            .ok_or_else(|| {
                S3Error::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidPart",
                    format!(
                        "One or more of the specified parts could not be found or its entity \
                         tag did not match: part {}",
                        l.part_number
                    ),
                )
            })?;
        if i + 1 < listed.len() && part.size < MIN_PART_BYTES {
            return Err(S3Error::new(
                StatusCode::BAD_REQUEST,
                "EntityTooSmall",
                format!(
                    "Your proposed upload is smaller than the minimum allowed object size: part \
                     {} is {} bytes; every part but the last needs 5 MiB",
                    l.part_number, part.size
                ),
            ));
        }
        out.push((l.part_number, part.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_finds_the_first_wrong_byte_in_any_frame_split() {
        let sink = SinkStore::new("b", vec![], true, true);
        let id = sink.create_multipart("b", "k").unwrap();
        let content = Content::of("k", true);
        let mut tries = 0;
        let len = locate_bytes(&content) + 3000;
        // In the first block's header, its first words, past the first block, past the head.
        for bad in [3usize, 20, 700, 5000, len - 1] {
            let mut part2 = vec![0u8; len];
            content.fill(6 << 20, &mut part2);
            part2[bad] ^= 1;
            for split in [1usize, 5, 31, 32, 33, 64, 65, 699, 701, 8255, 8256, 8257] {
                let mut w = sink.begin_part(&id, "b", "k", 2).unwrap();
                w.take(&part2[..split]);
                w.take(&part2[split..]);
                let err = sink.finish_part(w, &id, "b", "k", 2).unwrap_err();
                tries += 1;
                assert_eq!(err.code, "BadDigest");
                assert!(
                    err.message
                        .contains(&format!("offset {} (byte {bad} ", (6 << 20) + bad)),
                    "{split}: {}",
                    err.message
                );
            }
        }
        assert_eq!(sink.stats().mismatches, tries);
    }

    #[test]
    fn dedupe_copies_are_told_apart_by_their_neighbours_and_placed_at_completion() {
        let shape = content::Reduction {
            dedupe_ratio: 4.0,
            ..Default::default()
        }
        .shape()
        .unwrap();
        let sink = SinkStore::new("b", vec![], true, true).reduced(shape);
        let content = sink.content("k");
        let sizes = [5u64 << 20, 6 << 20, 5 << 20];
        let upload = |order: [usize; 3]| {
            let id = sink.create_multipart("b", "k").unwrap();
            let mut listed = Vec::new();
            for (n, &i) in order.iter().enumerate() {
                let at: u64 = sizes[..i].iter().sum();
                let mut body = vec![0u8; sizes[i] as usize];
                content.fill(at, &mut body);
                let number = n as u32 + 1;
                let mut w = sink.begin_part(&id, "b", "k", number).unwrap();
                for frame in body.chunks(100_000) {
                    w.take(frame);
                }
                let etag = sink.finish_part(w, &id, "b", "k", number).unwrap();
                listed.push(CompletedPart {
                    part_number: number,
                    etag,
                    checksum: None,
                });
            }
            sink.complete_multipart(&id, "b", "k", &listed)
        };
        let stored = upload([0, 1, 2]).unwrap();
        assert_eq!(stored.size_bytes, 16 << 20);
        // Parts 2 and 3 swapped: each part's bytes fit where it was made, not where it is listed.
        let err = upload([0, 2, 1]).unwrap_err();
        assert_eq!(err.code, "BadDigest");
        assert!(
            err.message.contains("but the part lies at offset"),
            "{}",
            err.message
        );
        assert_eq!(sink.stats().mismatches, 1);
    }
}
