//! The two types every side of a checkpoint shares: what a rank writes ([`PlannedObject`]) and
//! how it moves the bytes ([`ObjectIoShape`]). A leaf of `checkpoint`, re-exported there.
//!
//! The shape is also the one place that says which requests a checkpoint sends, so both engines
//! send the same ones for the same plan and differ only in how: whether an object goes as one
//! PUT or a multipart upload ([`ObjectIoShape::single_put`]), its parts
//! ([`ObjectIoShape::parts`]), a restore's blocks and their ranged GETs as DLIO cuts them
//! ([`ObjectIoShape::restore_blocks`], [`ObjectIoShape::block_gets`]), and a rank's connections
//! and buffers ([`ObjectIoShape::connections`], [`ObjectIoShape::buffer_bytes`]).

use std::ops::Range;

/// How a rank moves a checkpoint's bytes: the write side's multipart parts and the read side's
/// ranged GETs. Every size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ObjectIoShape {
    /// Multipart part size (the DLIO fork's s3dlio writer: 32 MiB; `--part-size`,
    /// `S3DLIO_MULTIPART_PART_SIZE_MB`).
    pub part_bytes: u64,
    /// Parts in flight per rank (max(2, ⌈16 / ranks⌉); `--parts-in-flight`,
    /// `S3DLIO_MULTIPART_MAX_IN_FLIGHT`).
    pub parts_in_flight: usize,
    /// Objects smaller than this go as one PUT (0: every object is a multipart upload, as the
    /// fork's writer does, an empty one as one empty part; `--single-put-below`).
    pub single_put_below: u64,
    /// The largest object a rank sends as one PUT (0 when none is): its body is held whole, so
    /// a connection's buffer holds it too.
    pub single_put_bytes: u64,
    /// A restore's ranged GET size (128 MiB, as the fork's s3dlio reader).
    pub read_range_bytes: u64,
    /// Contiguous blocks of an object a restore reads in parallel (max(2, ⌈16 / ranks⌉)).
    pub read_blocks: usize,
    /// Send bodies with `IORING_OP_SEND_ZC` (io_uring engine only).
    pub send_zc: bool,
    /// Check every written (server side) and restored byte against the generator.
    pub verify: bool,
    /// The additional checksum every part and single PUT carries as a header, and every
    /// multipart upload names at its creation and completion (`--checksum`, CRC32C by
    /// default; see `crate::checksum`).
    pub checksum: crate::checksum::Checksum,
    /// How an upload's body is signed (`--payload-signing`, unsigned by default).
    pub payload: PayloadSigning,
    /// Where the checksum goes (`--checksum-form`, a header by default).
    pub checksum_form: ChecksumForm,
    /// A restore HEADs each object (`x-amz-checksum-mode: ENABLED`) and checks its
    /// FULL_OBJECT CRC against the CRCs of the blocks it reads (`--restore-checksum on`,
    /// the default, without `--verify`).
    pub restore_check: bool,
    /// The target is reached over TLS (`https://`): buffers hold sealed records.
    pub tls: bool,
    /// How the content's random blocks are laid out: the dedupe and compression ratios
    /// (`--dedupe-ratio`, `--dedupe-block`, `--compress-ratio`; unique and incompressible,
    /// as DLIO writes, by default).
    pub content: crate::content::Shape,
}

impl ObjectIoShape {
    /// Connections (and buffers) a rank holds: one per part in flight or block read in
    /// parallel, whichever is more (the write and read phases never overlap).
    pub fn connections(&self) -> usize {
        self.parts_in_flight.max(self.read_blocks).max(1)
    }

    /// One connection's buffer: the larger of a part, a read range and the largest single PUT,
    /// in whole pages (over TLS, with room to seal a body's records in place and for a record
    /// beyond a range).
    pub fn buffer_bytes(&self) -> u64 {
        crate::budget::object_buffer_bytes(
            self.part_bytes,
            self.read_range_bytes,
            self.single_put_bytes,
            self.tls,
            self.chunked(),
        )
    }

    /// Bodies go aws-chunked (a checksum trailer, or chunk signatures): each buffer keeps
    /// room for a body's tail after it.
    pub fn chunked(&self) -> bool {
        self.checksum_form == ChecksumForm::Trailer || self.payload == PayloadSigning::Streaming
    }

    /// Whether an object of `bytes` goes as one PutObject; else it is a multipart upload of
    /// [`Self::parts`] (an empty object as one empty part, as the fork's writer sends it).
    pub fn single_put(&self, bytes: u64) -> bool {
        bytes < self.single_put_below
    }

    /// How many parts a multipart upload of `bytes` has: ⌈bytes ÷ part⌉, at least one.
    pub fn part_count(&self, bytes: u64) -> u32 {
        bytes.div_ceil(self.part_bytes.max(1)).max(1) as u32
    }

    /// Part `number`'s (from 1) bytes of an object of `bytes`: `part_bytes` each, the last one
    /// shorter.
    pub fn part(&self, bytes: u64, number: u32) -> Range<u64> {
        let start = u64::from(number.max(1) - 1) * self.part_bytes;
        start.min(bytes)..(start + self.part_bytes).min(bytes)
    }

    /// Every part of an object of `bytes`, in order: (number from 1, its bytes).
    pub fn parts(&self, bytes: u64) -> impl Iterator<Item = (u32, Range<u64>)> + '_ {
        (1..=self.part_count(bytes)).map(move |n| (n, self.part(bytes, n)))
    }

    /// The contiguous blocks a restore of `bytes` reads in parallel, as the MLPerf v3.0
    /// harness's streaming checkpoint reader cuts them: `read_blocks` blocks of ⌈bytes ÷ n⌉,
    /// the last one shorter, fewer when the object runs out first (none for an empty object).
    pub fn restore_blocks(&self, bytes: u64) -> Vec<Range<u64>> {
        let size = bytes.div_ceil(self.read_blocks.max(1) as u64).max(1);
        (0..self.read_blocks.max(1) as u64)
            .map(|b| b * size)
            .take_while(|&start| start < bytes)
            .map(|start| start..(start + size).min(bytes))
            .collect()
    }

    /// A block's ranged GETs, sent one after another: ranges of `read_range_bytes`, the last
    /// one shorter.
    pub fn block_gets(&self, block: Range<u64>) -> impl Iterator<Item = Range<u64>> + use<> {
        let step = self.read_range_bytes.max(1);
        (block.start..block.end)
            .step_by(step as usize)
            .map(move |start| start..(start + step).min(block.end))
    }
}

/// `--payload-signing`: how SigV4 covers an upload's body (with keys; without, nothing is
/// signed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PayloadSigning {
    /// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: the head is signed, the body is not hashed
    /// (the AWS SDKs' default over https; the additional checksum covers the bytes).
    #[default]
    Unsigned,
    /// The body's SHA-256 in `x-amz-content-sha256`, signed with the head, as s3dlio signs
    /// every upload: computed in the pass that generates the part.
    Sha256,
    /// `aws-chunked` with chunk signatures (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`, `-TRAILER`
    /// with `--checksum-form trailer`): the body as one signed chunk, its SHA-256 computed in
    /// the pass that generates it (`s3::chunked`).
    Streaming,
}

impl std::fmt::Display for PayloadSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PayloadSigning::Unsigned => "unsigned",
            PayloadSigning::Sha256 => "sha256",
            PayloadSigning::Streaming => "streaming",
        })
    }
}

/// `--checksum-form`: where an upload's additional checksum goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumForm {
    /// An `x-amz-checksum-*` header: its digest is computed as the part is generated, before
    /// the head goes (every S3 store takes it).
    #[default]
    Header,
    /// An `aws-chunked` trailer after the body (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, the AWS
    /// SDKs' form over https; some stores, e.g. older Ceph, refuse it).
    Trailer,
}

impl std::fmt::Display for ChecksumForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChecksumForm::Header => "header",
            ChecksumForm::Trailer => "trailer",
        })
    }
}

/// One object a rank writes per checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedObject {
    /// The file name DLIO gives it, e.g. `zero_pp_rank_0_mp_rank_0_model_states.pt`.
    pub name: String,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        part_bytes: u64,
        single_put_below: u64,
        read_blocks: usize,
        range: u64,
    ) -> ObjectIoShape {
        ObjectIoShape {
            part_bytes,
            parts_in_flight: 2,
            single_put_below,
            single_put_bytes: 0,
            read_range_bytes: range,
            read_blocks,
            send_zc: false,
            verify: false,
            checksum: crate::checksum::Checksum::Crc32c,
            payload: Default::default(),
            checksum_form: Default::default(),
            restore_check: false,
            tls: false,
            content: Default::default(),
        }
    }

    #[test]
    fn parts_cover_the_object_once_and_an_empty_object_is_one_empty_part() {
        let mib = 1 << 20;
        let s = shape(5 * mib, 0, 2, mib);
        assert!(!s.single_put(0));
        assert_eq!(s.parts(0).collect::<Vec<_>>(), vec![(1, 0..0)]);
        assert_eq!(s.part_count(5 * mib), 1);
        assert_eq!(s.part_count(5 * mib + 1), 2);
        assert_eq!(
            s.parts(17 * mib).collect::<Vec<_>>(),
            vec![
                (1, 0..5 * mib),
                (2, 5 * mib..10 * mib),
                (3, 10 * mib..15 * mib),
                (4, 15 * mib..17 * mib)
            ]
        );
        let single = shape(5 * mib, mib, 2, mib);
        assert!(single.single_put(0) && single.single_put(mib - 1) && !single.single_put(mib));
    }

    /// The MLPerf v3.0 harness's cut, as a real DLIO run sent it here: 8 ranged GETs of
    /// 2,261,152 bytes for an 18,089,216-byte object.
    #[test]
    fn restore_blocks_are_cut_as_dlio_cuts_them() {
        let s = shape(32 << 20, 0, 8, 128 << 20);
        let blocks = s.restore_blocks(18_089_216);
        assert_eq!(blocks.len(), 8);
        assert!(
            blocks.iter().all(|b| b.end - b.start == 2_261_152),
            "{blocks:?}"
        );
        // The last one shorter; fewer blocks when the object runs out first; none when empty.
        assert_eq!(
            shape(1, 0, 4, 1).restore_blocks(10),
            vec![0..3, 3..6, 6..9, 9..10]
        );
        assert_eq!(shape(1, 0, 4, 1).restore_blocks(9), vec![0..3, 3..6, 6..9]);
        assert_eq!(shape(1, 0, 4, 1).restore_blocks(2), vec![0..1, 1..2]);
        assert!(shape(1, 0, 4, 1).restore_blocks(0).is_empty());
        // Each block in ranges of at most read_range_bytes, the last one shorter.
        assert_eq!(
            shape(1, 0, 2, 4).block_gets(3..13).collect::<Vec<_>>(),
            vec![3..7, 7..11, 11..13]
        );
    }

    #[test]
    fn a_connection_buffer_holds_a_part_a_range_or_a_single_put() {
        let mut s = shape(5 << 20, 0, 3, 1 << 20);
        assert_eq!(s.connections(), 3);
        assert_eq!(s.buffer_bytes(), 5 << 20);
        s.single_put_bytes = (7 << 20) + 1;
        assert_eq!(s.buffer_bytes(), (7 << 20) + 4096);
        // An aws-chunked body's tail goes after it in the buffer: a page more.
        s.single_put_bytes = 0;
        s.checksum_form = ChecksumForm::Trailer;
        assert_eq!(s.buffer_bytes(), (5 << 20) + 4096);
    }
}
