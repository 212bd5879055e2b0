//! Parts made as they are sent (the connection's side, `making.rs`; this file: the body's): over plain HTTP with `SEND` (the kernel copies each send into
//! the socket), a part's bytes are generated [`SLICE_BYTES`] at a time into its registered
//! buffer just before the send that carries them, so the kernel's copy reads them from the
//! core's cache instead of reading a whole part back from memory (BENCHMARKS.md, "Made as it
//! is sent").
//!
//! How each integrity form is made (the plan's `ObjectIoShape`; chosen by [`Making::of`]):
//! - no checksum, or the checksum as an aws-chunked trailer, with an unsigned payload: made as
//!   sent; the trailer's digest is computed slice by slice as the slices are made and the tail
//!   (final chunk, trailer) placed after the data once the last slice is made;
//! - the checksum as a header (the default), or a signed payload (`--payload-signing sha256`,
//!   `streaming`): the digest must be in the head, before the first body byte. Made twice (a
//!   first pass for the digests into a slice of scratch, then again as sent) it cost more than
//!   made whole (the generator's second pass outweighs the copy from cache: BENCHMARKS.md),
//!   so it is made whole before the head, its digest in the same pass;
//! - `SEND_ZC` and TLS: made whole before the head (`SEND_ZC` does not copy; TLS seals each
//!   record where it was generated, `sealed.rs`).

use std::time::Duration;

use crate::checksum::{Digest, Hasher};
use crate::content::Content;
use crate::metrics::thread_cpu;
use crate::s3::chunked::Chunked;

/// The body bytes one send carries when the body is made as it is sent: small enough that the
/// slice is still in the core's caches when the kernel copies it, large enough that a send's
/// own cost stays small (256 and 512 KiB cost more than a part made whole; 1, 2 and 4 MiB
/// saved alike: BENCHMARKS.md).
pub(super) const SLICE_BYTES: usize = 2 << 20;

/// How a body is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Making {
    /// Generated whole into the buffer before the head is sent.
    Whole,
    /// Generated slice by slice, each just before the send that carries it.
    AsSent,
}

impl Making {
    /// How a body goes that is sent with `SEND_ZC` (`zc`) or over TLS (`tls`), whose digests
    /// must be known before the head (`digest_first`: a checksum header, a signed payload).
    pub(super) fn of(zc: bool, tls: bool, digest_first: bool) -> Making {
        if zc || tls || digest_first {
            Making::Whole
        } else {
            Making::AsSent
        }
    }
}

/// A body being made as it is sent: its content, how much of its data is in the buffer.
#[derive(Debug)]
pub(super) struct AsSent {
    content: Content,
    /// The object offset of the body's first byte.
    offset: u64,
    /// The body's data bytes (an aws-chunked tail follows them in the buffer).
    data: usize,
    /// Data bytes generated into the buffer so far.
    made: usize,
    /// The trailer's digest, computed as the slices are made.
    hasher: Option<Hasher>,
    /// The aws-chunked framing whose tail carries the trailer, once its digest is known.
    chunked: Option<Chunked>,
    /// The tail, made once the last slice is.
    tail: Option<Vec<u8>>,
    /// The trailer's digest, once the last slice is made.
    digest: Option<Digest>,
}

/// CPU time spent making slices: the generator's and the digest's, apart.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Spent {
    pub generate: Duration,
    pub checksum: Duration,
}

impl AsSent {
    /// A body of `data` bytes of `content` from `offset`. `trailer`: the aws-chunked framing
    /// whose trailer's digest is computed as the body is made (`None`: no trailer to fill in).
    pub(super) fn new(
        content: Content,
        offset: u64,
        data: usize,
        trailer: Option<Chunked>,
    ) -> AsSent {
        let hasher = trailer
            .as_ref()
            .and_then(|c| c.trailer)
            .map(|d| Hasher::new(d.algorithm));
        AsSent {
            content,
            offset,
            data,
            made: 0,
            hasher,
            chunked: trailer,
            tail: None,
            digest: None,
        }
    }

    /// Makes the body in `buf` up to byte `upto` (data, then the tail when `upto` passes the
    /// data): nothing for what is made already, so a retry sends the same bytes.
    pub(super) fn make(&mut self, buf: &mut [u8], upto: usize) -> Result<Spent, String> {
        let mut spent = Spent::default();
        let end = upto.min(self.data);
        if self.made < end {
            let start = thread_cpu();
            self.content
                .fill(self.offset + self.made as u64, &mut buf[self.made..end]);
            let generated = thread_cpu();
            spent.generate = generated.saturating_sub(start);
            if let Some(hasher) = &mut self.hasher {
                hasher.update(&buf[self.made..end]);
                spent.checksum = thread_cpu().saturating_sub(generated);
            }
            self.made = end;
        }
        if upto > self.data && self.made == self.data {
            self.place_tail(buf)?;
        }
        Ok(spent)
    }

    /// Places the tail after the data: made with the trailer's digest the first time, the same
    /// bytes again on a retry.
    pub(super) fn place_tail(&mut self, buf: &mut [u8]) -> Result<(), String> {
        if self.made < self.data {
            // Placed when the last slice is made.
            return Ok(());
        }
        if self.tail.is_none() {
            let Some(mut chunked) = self.chunked.take() else {
                return Ok(());
            };
            self.digest = self.hasher.take().map(Hasher::finish);
            chunked.trailer = self.digest;
            self.tail = Some(chunked.frame(None)?.1);
        }
        if let Some(tail) = &self.tail {
            buf[self.data..self.data + tail.len()].copy_from_slice(tail);
        }
        Ok(())
    }

    /// The trailer's digest, once the whole body is made.
    pub(super) fn digest(&self) -> Option<Digest> {
        self.digest
    }
}

impl AsSent {
    /// Whether the tail after the data is this body's to place (a trailer made as it goes).
    pub(super) fn owns_tail(&self) -> bool {
        self.chunked.is_some() || self.tail.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Algorithm;

    /// Made in uneven slices, the body and its tail equal the body made whole and framed with
    /// its digest; a second make (a retry) changes nothing.
    #[test]
    fn slices_make_the_whole_body_and_its_trailer() {
        let content = Content::of("ck/part", true);
        let data = 3 * SLICE_BYTES + 1234;
        let mut whole = vec![0u8; data];
        content.fill(4096, &mut whole);
        let digest = crate::checksum::digest(Algorithm::Crc32c, &whole);
        let framing = |d| Chunked {
            data_len: data as u64,
            data_sha256: None,
            trailer: Some(d),
        };
        let expected_tail = framing(digest).frame(None).unwrap().1;
        // The placeholder digest (of nothing) gives the tail its length, not its bytes.
        let placeholder = crate::checksum::digest(Algorithm::Crc32c, &[]);
        let mut made = AsSent::new(content, 4096, data, Some(framing(placeholder)));
        let tail_len = framing(placeholder).tail_len();
        assert_eq!(tail_len, expected_tail.len());
        let mut buf = vec![0u8; data + tail_len];
        for upto in [1000, SLICE_BYTES, 2 * SLICE_BYTES + 7, data + tail_len] {
            made.make(&mut buf, upto).unwrap();
            assert!(made.digest().is_none() || upto > data);
        }
        assert_eq!(&buf[..data], &whole[..]);
        assert_eq!(&buf[data..], &expected_tail[..]);
        assert_eq!(made.digest(), Some(digest));
        buf[data..].fill(0);
        made.place_tail(&mut buf).unwrap();
        assert_eq!(&buf[data..], &expected_tail[..]);
        made.make(&mut buf, data + tail_len).unwrap();
        assert_eq!(&buf[..data], &whole[..]);
    }

    #[test]
    fn the_forms_that_are_made_as_sent() {
        assert_eq!(Making::of(true, false, false), Making::Whole);
        assert_eq!(Making::of(false, true, false), Making::Whole);
        assert_eq!(Making::of(false, false, true), Making::Whole);
        assert_eq!(Making::of(false, false, false), Making::AsSent);
    }
}
