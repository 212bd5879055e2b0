//! S3's additional checksums on the server's side (`crate::checksum`): every form a request
//! carries is verified against the bytes received, and a wrong one is answered `400 BadDigest`
//! with nothing stored.
//!
//! - **PutObject, UploadPart**: an `x-amz-checksum-*` header (CRC32, CRC32C, CRC64NVME,
//!   SHA-256) is checked against the body's digest, computed frame by frame as the body streams
//!   in ([`Inbound`]); a part of an upload created with an algorithm gets its digest computed
//!   and kept even without a header.
//! - **CreateMultipartUpload** names the algorithm (`x-amz-checksum-algorithm`) and the type
//!   (`x-amz-checksum-type`, FULL_OBJECT or COMPOSITE as S3 allows for each).
//! - **CompleteMultipartUpload**: each part's listed checksum against the part's as received,
//!   the type against the creation's, and the object's checksum header, FULL_OBJECT (the CRC of
//!   the whole object, combined from the parts') or COMPOSITE (`-N`), against the parts'.
//! - **HEAD and GET with `x-amz-checksum-mode: ENABLED`**: the object's checksum and type.
//!
//! Kept here for both backends (the directory keeps files, the sink no bytes): the algorithm
//! and the parts' digests of each open upload, and each object's checksum, by bucket and key.
//! `serve --faults flip-upload=N@part` inverts body byte N before any of this sees it
//! ([`Inbound`]), as a changed byte between a client and the store would be.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};

use super::error::S3Error;
use crate::checksum::{ALGORITHMS, Algorithm, Completion, Digest, Hasher};
use crate::s3::xml::CompletedPart;

/// An object's checksum as HEAD returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub algorithm: Algorithm,
    /// Base64, `-N` when COMPOSITE.
    pub value: String,
    pub object_type: &'static str,
}

#[derive(Debug)]
struct Upload {
    algorithm: Option<Algorithm>,
    /// Each part's digest and size, as received.
    parts: BTreeMap<u32, (Digest, u64)>,
}

#[derive(Debug, Default)]
struct Inner {
    uploads: HashMap<String, Upload>,
    objects: HashMap<(String, String), Stored>,
}

/// The checksums of every open upload and stored object.
#[derive(Debug, Default)]
pub struct Checksums {
    inner: Mutex<Inner>,
}

fn bad_digest(message: String) -> S3Error {
    S3Error::new(StatusCode::BAD_REQUEST, "BadDigest", message)
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The checksum a request's headers carry: its algorithm and base64 value. A request with two
/// is refused, as S3 refuses it.
pub fn requested(headers: &HeaderMap) -> Result<Option<(Algorithm, String)>, S3Error> {
    let mut found = ALGORITHMS
        .into_iter()
        .filter_map(|a| header(headers, a.header()).map(|v| (a, v.to_string())));
    let first = found.next();
    if found.next().is_some() {
        return Err(S3Error::invalid_request(
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    Ok(first)
}

/// CreateMultipartUpload's algorithm, checked against its type (CRC64NVME is FULL_OBJECT
/// only, SHA-256 COMPOSITE only).
pub fn create_algorithm(headers: &HeaderMap) -> Result<Option<Algorithm>, S3Error> {
    let Some(name) = header(headers, "x-amz-checksum-algorithm") else {
        return Ok(None);
    };
    let algorithm = Algorithm::from_name(name).ok_or_else(|| {
        S3Error::invalid_request(format!(
            "x-amz-checksum-algorithm: {name} is not an algorithm ringload serve verifies \
             (CRC32, CRC32C, CRC64NVME, SHA256)"
        ))
    })?;
    check_type(algorithm, headers)?;
    Ok(Some(algorithm))
}

/// `x-amz-checksum-type`, when given, is the one S3 allows for `algorithm`.
fn check_type(algorithm: Algorithm, headers: &HeaderMap) -> Result<(), S3Error> {
    match header(headers, "x-amz-checksum-type") {
        Some(t) if !t.eq_ignore_ascii_case(algorithm.object_type()) => {
            Err(S3Error::invalid_request(format!(
                "x-amz-checksum-type: {t} with {}: ringload serve completes {} as {}",
                algorithm.name(),
                algorithm.name(),
                algorithm.object_type()
            )))
        }
        _ => Ok(()),
    }
}

/// A body's header checksum against the digest of what arrived: `BadDigest` naming `what`.
pub fn check(expected: &(Algorithm, String), got: &Digest, what: &str) -> Result<(), S3Error> {
    let value = got.base64();
    if value == expected.1 {
        return Ok(());
    }
    Err(bad_digest(format!(
        "The {} you specified did not match the calculated checksum: {what} arrived with \
         {} {value}, the request's {} says {}",
        expected.0.header(),
        expected.0.name(),
        expected.0.header(),
        expected.1
    )))
}

impl Checksums {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn created(&self, upload_id: &str, algorithm: Option<Algorithm>) {
        self.lock().uploads.insert(
            upload_id.to_string(),
            Upload {
                algorithm,
                parts: BTreeMap::new(),
            },
        );
    }

    /// The algorithm upload `upload_id` was created with.
    pub fn upload_algorithm(&self, upload_id: &str) -> Option<Algorithm> {
        self.lock().uploads.get(upload_id)?.algorithm
    }

    /// A part stored with this digest (replacing an earlier one of the same number).
    pub fn part_stored(&self, upload_id: &str, number: u32, digest: Digest, len: u64) {
        if let Some(upload) = self.lock().uploads.get_mut(upload_id) {
            upload.parts.insert(number, (digest, len));
        }
    }

    /// The upload ended (completed or aborted).
    pub fn ended(&self, upload_id: &str) {
        self.lock().uploads.remove(upload_id);
    }

    /// Checks a CompleteMultipartUpload of `upload_id` (its `parts`, its `headers`) against
    /// the parts as received: the object's checksum when it passes, `None` for an upload
    /// created without an algorithm.
    pub fn complete(
        &self,
        upload_id: &str,
        parts: &[CompletedPart],
        headers: &HeaderMap,
    ) -> Result<Option<Stored>, S3Error> {
        let inner = self.lock();
        let Some(upload) = inner.uploads.get(upload_id) else {
            return Ok(None);
        };
        let Some(algorithm) = upload.algorithm else {
            return Ok(None);
        };
        check_type(algorithm, headers)?;
        let mut received = Vec::with_capacity(parts.len());
        for part in parts {
            // A part the store lacks is the store's to refuse (InvalidPart).
            let Some(&(digest, len)) = upload.parts.get(&part.part_number) else {
                return Ok(None);
            };
            if let Some((element, value)) = &part.checksum {
                if element != algorithm.element() {
                    return Err(S3Error::invalid_request(format!(
                        "part {} lists <{element}>, but the upload was created with {}",
                        part.part_number,
                        algorithm.name()
                    )));
                }
                if *value != digest.base64() {
                    return Err(bad_digest(format!(
                        "part {} lists <{element}>{value}</{element}>, but the part arrived \
                         with {}",
                        part.part_number,
                        digest.base64()
                    )));
                }
            }
            received.push((digest, len));
        }
        let completion = Completion::of(algorithm, &received);
        if let Some(value) = header(headers, algorithm.header()) {
            let base = completion.object.split('-').next().unwrap_or_default();
            if value != completion.object && value != base {
                return Err(bad_digest(format!(
                    "The {} you specified did not match the calculated checksum: the {} of \
                     the object from its {} parts is {}, the request says {value}",
                    algorithm.header(),
                    algorithm.object_type(),
                    parts.len(),
                    completion.object
                )));
            }
        }
        Ok(Some(Stored {
            algorithm,
            value: completion.object,
            object_type: algorithm.object_type(),
        }))
    }

    /// Object `bucket`/`key` was stored with this checksum (or none: a checksum of an earlier
    /// object under the key is forgotten).
    pub fn object_stored(&self, bucket: &str, key: &str, checksum: Option<Stored>) {
        let id = (bucket.to_string(), key.to_string());
        let mut inner = self.lock();
        match checksum {
            Some(c) => inner.objects.insert(id, c),
            None => inner.objects.remove(&id),
        };
    }

    pub fn object(&self, bucket: &str, key: &str) -> Option<Stored> {
        let id = (bucket.to_string(), key.to_string());
        self.lock().objects.get(&id).cloned()
    }
}

/// An upload body as it arrives: the byte `serve --faults flip-upload=N` inverts, and the
/// digest of what is left, frame by frame.
#[derive(Debug)]
pub struct Inbound {
    hasher: Option<Hasher>,
    /// The body offset to invert.
    flip: Option<u64>,
    received: u64,
}

impl Inbound {
    pub fn new(algorithm: Option<Algorithm>, flip: Option<u64>) -> Inbound {
        Inbound {
            hasher: algorithm.map(Hasher::new),
            flip,
            received: 0,
        }
    }

    /// The frame as the store sees it (a byte inverted when the fault's offset is in it),
    /// hashed.
    pub fn frame(&mut self, data: Bytes) -> Bytes {
        let start = self.received;
        self.received += data.len() as u64;
        let data = match self.flip {
            Some(at) if (start..self.received).contains(&at) => {
                let mut changed = BytesMut::from(&data[..]);
                changed[(at - start) as usize] ^= 0xff;
                changed.freeze()
            }
            _ => data,
        };
        if let Some(h) = self.hasher.as_mut() {
            h.update(&data);
        }
        data
    }

    /// The digest of every byte received, and their count.
    pub fn finish(self) -> (Option<Digest>, u64) {
        (self.hasher.map(Hasher::finish), self.received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_byte_changes_the_digest_in_any_frame_split() {
        let body: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let right = crate::checksum::digest(Algorithm::Crc32c, &body);
        for split in [1, 7, 500, 1000] {
            let mut clean = Inbound::new(Some(Algorithm::Crc32c), None);
            let mut flipped = Inbound::new(Some(Algorithm::Crc32c), Some(600));
            let mut seen = Vec::new();
            for chunk in body.chunks(split) {
                clean.frame(Bytes::copy_from_slice(chunk));
                seen.extend_from_slice(&flipped.frame(Bytes::copy_from_slice(chunk)));
            }
            assert_eq!(clean.finish(), (Some(right), 1000));
            assert_eq!(seen[600], body[600] ^ 0xff);
            let (wrong, _) = flipped.finish();
            let expected = (Algorithm::Crc32c, right.base64());
            let refused = check(&expected, &wrong.unwrap(), "part 1").unwrap_err();
            assert_eq!(refused.code, "BadDigest");
        }
    }

    #[test]
    fn a_completion_is_checked_against_the_parts_as_received() {
        let sums = Checksums::default();
        sums.created("u", Some(Algorithm::Crc64nvme));
        let (a, b) = (b"first part".as_slice(), b"second".as_slice());
        let da = crate::checksum::digest(Algorithm::Crc64nvme, a);
        let db = crate::checksum::digest(Algorithm::Crc64nvme, b);
        sums.part_stored("u", 1, da, a.len() as u64);
        sums.part_stored("u", 2, db, b.len() as u64);
        let listed = |c1: &str| {
            vec![
                CompletedPart {
                    part_number: 1,
                    etag: "e".into(),
                    checksum: Some(("ChecksumCRC64NVME".into(), c1.into())),
                },
                CompletedPart {
                    part_number: 2,
                    etag: "e".into(),
                    checksum: None,
                },
            ]
        };
        let whole = crate::checksum::digest(Algorithm::Crc64nvme, b"first partsecond");
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-checksum-crc64nvme", whole.base64().parse().unwrap());
        let stored = sums.complete("u", &listed(&da.base64()), &headers).unwrap();
        assert_eq!(stored.unwrap().value, whole.base64());
        let wrong = sums.complete("u", &listed(&db.base64()), &headers);
        assert_eq!(wrong.unwrap_err().code, "BadDigest");
        headers.insert("x-amz-checksum-crc64nvme", da.base64().parse().unwrap());
        let wrong = sums.complete("u", &listed(&da.base64()), &headers);
        assert_eq!(wrong.unwrap_err().code, "BadDigest");
        headers.insert("x-amz-checksum-type", "COMPOSITE".parse().unwrap());
        let wrong = sums.complete("u", &listed(&da.base64()), &headers);
        assert_eq!(wrong.unwrap_err().code, "InvalidRequest");
    }
}
