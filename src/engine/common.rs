//! What both engines use besides the window: the walk that gives each connection slot its
//! endpoint, and the check of a `206 Partial Content` answer's framing. Below both engines and
//! [`super::Engine`], so the engines and their driver never import each other.

use std::ops::Range;

use crate::plan::RangedGet;
use crate::s3::Target;

/// The endpoint of each connection slot of `readers` (numbered over every rank: rank × RT +
/// reader), `prefetch` slots per reader: entry `r × prefetch + j` is slot `j` of the range's
/// `r`-th reader, sent to endpoint [`Target::endpoint_for`]. The one walk behind both engines'
/// connections and the baseline's pre-connect.
pub fn slot_endpoints(target: &Target, readers: Range<usize>, prefetch: usize) -> Vec<usize> {
    readers
        .flat_map(|g| (0..prefetch).map(move |j| target.endpoint_for(g, prefetch, j)))
        .collect()
}

/// Checks the answer to a whole-object GET: `200 OK` with exactly the object's size.
pub fn check_whole_object(
    status: u16,
    content_length: Option<&str>,
    get: &RangedGet,
) -> Result<(), String> {
    if status != 200 {
        return Err(format!(
            "answered {status} to a whole-object GET instead of 200 OK"
        ));
    }
    match content_length.map(|l| l.trim().parse::<u64>()) {
        Some(Ok(n)) if n == get.len_bytes => Ok(()),
        Some(Ok(n)) => Err(format!(
            "the object is {n} bytes by its Content-Length, the catalog says {}",
            get.len_bytes
        )),
        Some(Err(_)) => Err("the answer's Content-Length is not a number".into()),
        None => Err("the 200 answer has no Content-Length".into()),
    }
}

/// Checks a `206 Partial Content` answer's `Content-Range` and `Content-Length` against the
/// range asked for; the error says what was wrong.
pub fn check_partial_content(
    content_range: Option<&str>,
    content_length: Option<&str>,
    get: &RangedGet,
) -> Result<(), String> {
    let expected = format!("bytes {}-{}/", get.offset, get.last_byte());
    match content_range {
        None => return Err("the 206 answer has no Content-Range".into()),
        Some(range) => {
            let total_ok = range
                .strip_prefix(&expected)
                .is_some_and(|total| total == "*" || total.parse::<u64>().is_ok());
            if !total_ok {
                return Err(format!(
                    "asked for {} and the answer's Content-Range is '{range}'",
                    get.range_header()
                ));
            }
        }
    }
    match content_length.map(|l| l.trim().parse::<u64>()) {
        Some(Ok(n)) if n == get.len_bytes => Ok(()),
        Some(Ok(n)) => Err(format!(
            "asked for {} bytes and the answer's Content-Length is {n}",
            get.len_bytes
        )),
        Some(Err(_)) => Err("the answer's Content-Length is not a number".into()),
        None => Err("the 206 answer has no Content-Length".into()),
    }
}

/// The error of an upload that could not be journaled before its first part (the journal's
/// folder is not writable): the upload was aborted (or, `aborted` false, left open).
pub fn unjournaled(key: &str, error: &std::io::Error, aborted: bool) -> crate::rank::RankError {
    crate::rank::RankError::Engine(format!(
        "cannot journal the upload of {key} before its first part ({error}); set {} to a \
         writable folder; the upload was {}",
        crate::rank::journal::STATE_DIR_ENV,
        if aborted {
            "aborted"
        } else {
            "left open (its abort failed too)"
        }
    ))
}

/// Bytes generated, then digested, at a time by [`fill_and_digest`]: small enough that a
/// chunk is still in the core's cache when the digest reads it.
const FILL_CHUNK_BYTES: usize = 128 << 10;

/// A part's bytes and their digest, made in one pass.
#[derive(Debug)]
pub struct Filled {
    pub digest: Option<crate::checksum::Digest>,
    /// The body's SHA-256, when it is signed (`--payload-signing sha256`): the checksum's own
    /// digest when that is SHA-256 too, else computed beside it (not timed apart: signing is
    /// part of the I/O's cost).
    pub payload_sha256: Option<crate::checksum::Digest>,
    /// The generator's CPU and the digest's, timed apart.
    pub generate_cpu: std::time::Duration,
    pub checksum_cpu: std::time::Duration,
}

/// Generates `content`'s bytes from `offset` into `buf` and, with `algorithm`, their digest in
/// the same pass: [`FILL_CHUNK_BYTES`] at a time, each chunk digested while it is in cache (a
/// second pass over a 32 MiB part would read it back from memory). Both engines fill their
/// parts with it.
pub fn fill_and_digest(
    content: &crate::content::Content,
    offset: u64,
    buf: &mut [u8],
    digests: Digests,
) -> Filled {
    let len = buf.len();
    fill_spaced(content, offset, buf, len, Spacing::contiguous(), digests)
}

/// The digests a body's generation computes: the additional checksum's, and the SHA-256 a
/// signed payload carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Digests {
    pub checksum: Option<crate::checksum::Algorithm>,
    pub payload_sha256: bool,
}

/// Where the pieces of a body go in its buffer: piece `i` (`piece` bytes, the last one
/// shorter) at `i × stride + lead`. Contiguous for plain HTTP; over TLS, one piece per record,
/// with room around each for its header and tag, so the records are sealed where they were
/// generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spacing {
    pub lead: usize,
    pub stride: usize,
    pub piece: usize,
}

impl Spacing {
    pub fn contiguous() -> Spacing {
        Spacing {
            lead: 0,
            stride: FILL_CHUNK_BYTES,
            piece: FILL_CHUNK_BYTES,
        }
    }

    /// The buffer range of piece `i` of a body of `len` bytes.
    fn piece(&self, i: usize, len: usize) -> std::ops::Range<usize> {
        let start = i * self.stride + self.lead;
        start..start + (len - i * self.piece).min(self.piece)
    }
}

/// [`fill_and_digest`] of a body of `len` bytes laid out in `buf` as `spacing` says: the
/// pieces generated, then digested, about [`FILL_CHUNK_BYTES`] at a time.
pub fn fill_spaced(
    content: &crate::content::Content,
    offset: u64,
    buf: &mut [u8],
    len: usize,
    spacing: Spacing,
    digests: Digests,
) -> Filled {
    use crate::checksum::{Algorithm, Hasher};
    use crate::metrics::thread_cpu;
    let mut hasher = digests.checksum.map(Hasher::new);
    // A SHA-256 checksum is the signed payload's hash too.
    let shared = digests.checksum == Some(Algorithm::Sha256);
    let mut payload = (digests.payload_sha256 && !shared).then(|| Hasher::new(Algorithm::Sha256));
    let (mut generate_cpu, mut checksum_cpu) = Default::default();
    let pieces = len.div_ceil(spacing.piece.max(1));
    if hasher.is_none() && payload.is_none() {
        // Nothing digests the bytes: one pass, the clock read twice per body, not per chunk
        // (two clock reads per 128 KiB cost 0.006 CPU-s per GiB; scripts/bench-files).
        let start = thread_cpu();
        for i in 0..pieces {
            let at = (i * spacing.piece) as u64;
            content.fill(offset + at, &mut buf[spacing.piece(i, len)]);
        }
        return Filled {
            digest: None,
            payload_sha256: None,
            generate_cpu: thread_cpu().saturating_sub(start),
            checksum_cpu,
        };
    }
    let per_round = (FILL_CHUNK_BYTES / spacing.piece.max(1)).max(1);
    for first in (0..pieces).step_by(per_round) {
        let round = first..(first + per_round).min(pieces);
        let start = thread_cpu();
        for i in round.clone() {
            let at = (i * spacing.piece) as u64;
            content.fill(offset + at, &mut buf[spacing.piece(i, len)]);
        }
        let generated = thread_cpu();
        generate_cpu += generated.saturating_sub(start);
        if let Some(hasher) = &mut hasher {
            for i in round.clone() {
                hasher.update(&buf[spacing.piece(i, len)]);
            }
            checksum_cpu += thread_cpu().saturating_sub(generated);
        }
        if let Some(payload) = &mut payload {
            for i in round {
                payload.update(&buf[spacing.piece(i, len)]);
            }
        }
    }
    let digest = hasher.map(Hasher::finish);
    Filled {
        digest,
        payload_sha256: match payload {
            Some(payload) => Some(payload.finish()),
            None if shared && digests.payload_sha256 => digest,
            None => None,
        },
        generate_cpu,
        checksum_cpu,
    }
}

/// The digests a body of `shape` needs computed as it is generated: the checksum, and the
/// SHA-256 a signed body carries (with keys: `--payload-signing sha256` or `streaming`).
pub fn digests(shape: &crate::checkpoint::ObjectIoShape, signs: bool) -> Digests {
    use crate::checkpoint::PayloadSigning;
    Digests {
        checksum: shape.checksum.algorithm(),
        payload_sha256: signs && shape.payload != PayloadSigning::Unsigned,
    }
}

/// How a generated body goes, the same on both engines: its `x-amz-checksum-*` header, its
/// signed SHA-256, or its `aws-chunked` framing (the checksum as a trailer, the chunk signed).
#[derive(Debug, Clone, Default)]
pub struct BodyForm {
    /// Headers sent (and signed) with it: the checksum's, in the header form.
    pub headers: Vec<(&'static str, String)>,
    /// `x-amz-content-sha256`: the body's SHA-256 (hex), signed (`--payload-signing sha256`).
    pub payload_sha256: Option<String>,
    /// Sent `aws-chunked` (`--checksum-form trailer`, `--payload-signing streaming`).
    pub chunked: Option<crate::s3::chunked::Chunked>,
}

impl BodyForm {
    /// The form of a body of `len` bytes under `shape`, from the digests its generation made.
    pub fn of(shape: &crate::checkpoint::ObjectIoShape, len: u64, filled: &Filled) -> BodyForm {
        use crate::checkpoint::{ChecksumForm, PayloadSigning};
        let trailer = shape.checksum_form == ChecksumForm::Trailer;
        let sha = filled.payload_sha256;
        let streaming = shape.payload == PayloadSigning::Streaming && sha.is_some();
        // The checksum is a header unless it goes as the trailer (a streaming body's too).
        let headers = filled
            .digest
            .iter()
            .filter(|_| !trailer)
            .map(|d| (d.algorithm.header(), d.base64()))
            .collect();
        if !trailer && !streaming {
            return BodyForm {
                headers,
                payload_sha256: sha.map(|d| d.hex()),
                chunked: None,
            };
        }
        let chunked = crate::s3::chunked::Chunked {
            data_len: len,
            data_sha256: sha
                .filter(|_| streaming)
                .and_then(|d| d.bytes().try_into().ok()),
            trailer: filled.digest.filter(|_| trailer),
        };
        BodyForm {
            headers,
            payload_sha256: None,
            chunked: Some(chunked),
        }
    }
}

/// Writes `bytes` at the body's offset `at` (its plaintext offset) into `buf` laid out as
/// `spacing` says: an aws-chunked body's tail, after its data.
pub fn place_spaced(buf: &mut [u8], spacing: Spacing, at: usize, bytes: &[u8]) {
    let piece = spacing.piece.max(1);
    let mut done = 0;
    while done < bytes.len() {
        let offset = at + done;
        let (i, within) = (offset / piece, offset % piece);
        let n = (piece - within).min(bytes.len() - done);
        let start = i * spacing.stride + spacing.lead + within;
        buf[start..start + n].copy_from_slice(&bytes[done..done + n]);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each slot's endpoint, reader by reader: a rank's readers continue the numbering of the
    /// ranks before it, so two ranks of two readers spread over three endpoints as one rank of
    /// four would.
    #[test]
    fn slots_walk_readers_then_their_slots() {
        let endpoint = |url| crate::s3::Endpoint::parse(url).unwrap();
        let mut target = Target::simple(endpoint("http://a.test:9000"), "b", None);
        target.endpoints.push(endpoint("http://b.test:9000"));
        target.endpoints.push(endpoint("http://c.test:9000"));
        // Readers 2 and 3 (rank 1 of RT = 2), prefetch 2: (g × 2 + j) mod 3.
        assert_eq!(slot_endpoints(&target, 2..4, 2), [1, 2, 0, 1]);
        let whole = slot_endpoints(&target, 0..4, 2);
        let ranks = [
            slot_endpoints(&target, 0..2, 2),
            slot_endpoints(&target, 2..4, 2),
        ]
        .concat();
        assert_eq!(whole, ranks);
        assert_eq!(whole, [0, 1, 2, 0, 1, 2, 0, 1]);
        assert!(slot_endpoints(&target, 3..3, 2).is_empty());
        // One endpoint: every slot goes to it.
        target.endpoints.truncate(1);
        assert_eq!(slot_endpoints(&target, 0..3, 3), [0; 9]);
    }

    #[test]
    fn partial_content_checks() {
        let get = RangedGet {
            whole: false,
            fetch: None,
            object: None,
            key: "k".into(),
            offset: 4,
            len_bytes: 10,
            check: None,
            extents: None,
        };
        assert_eq!(get.range_header(), "bytes=4-13");
        let ok = |cr, cl| check_partial_content(cr, cl, &get);
        assert_eq!(ok(Some("bytes 4-13/100"), Some("10")), Ok(()));
        assert_eq!(ok(Some("bytes 4-13/*"), Some("10")), Ok(()));
        assert!(ok(Some("bytes 4-12/100"), Some("9")).is_err());
        assert!(ok(Some("bytes 0-13/100"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/x"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("11")).is_err());
        assert!(ok(Some("bytes 4-13/100"), None).is_err());
        assert!(ok(None, Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("ten")).is_err());
    }

    #[test]
    fn whole_object_checks() {
        let get = RangedGet {
            whole: true,
            fetch: None,
            object: None,
            key: "k".into(),
            offset: 0,
            len_bytes: 10,
            check: None,
            extents: None,
        };
        assert_eq!(get.describe(), "whole object, 10 bytes");
        assert_eq!(check_whole_object(200, Some("10"), &get), Ok(()));
        let wrong = check_whole_object(200, Some("11"), &get).unwrap_err();
        assert!(
            wrong.contains("11 bytes") && wrong.contains("says 10"),
            "{wrong}"
        );
        assert!(check_whole_object(206, Some("10"), &get).is_err());
        assert!(check_whole_object(200, None, &get).is_err());
        assert!(check_whole_object(200, Some("x"), &get).is_err());
    }

    #[test]
    fn a_fused_fill_makes_the_same_bytes_and_digest_as_two_passes() {
        use crate::checksum::{Algorithm, digest};
        let content = crate::content::Content::of("ck/o.pt", false);
        for (offset, len) in [
            (0u64, 1usize),
            (32 << 20, 300_001),
            (7, FILL_CHUNK_BYTES * 3),
        ] {
            let mut whole = vec![0u8; len];
            content.fill(offset, &mut whole);
            for algorithm in [Algorithm::Crc32c, Algorithm::Crc64nvme, Algorithm::Sha256] {
                let mut fused = vec![0u8; len];
                let filled = fill_and_digest(
                    &content,
                    offset,
                    &mut fused,
                    Digests {
                        checksum: Some(algorithm),
                        payload_sha256: false,
                    },
                );
                assert!(fused == whole, "{offset} {len}");
                assert_eq!(filled.digest, Some(digest(algorithm, &whole)));
            }
            let mut plain = vec![0u8; len];
            assert!(
                fill_and_digest(&content, offset, &mut plain, Digests::default())
                    .digest
                    .is_none()
            );
            assert!(plain == whole);
        }
    }
}
