//! The two types every side of a checkpoint shares: what a rank writes ([`PlannedObject`]) and
//! how it moves the bytes ([`ObjectIoShape`]). A leaf of `checkpoint`, re-exported there.

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
    /// fork's writer does; `--single-put-below`).
    pub single_put_below: u64,
    /// A restore's ranged GET size (128 MiB, as the fork's s3dlio reader).
    pub read_range_bytes: u64,
    /// Contiguous blocks of an object a restore reads in parallel (max(2, ⌈16 / ranks⌉)).
    pub read_blocks: usize,
    /// Send bodies with `IORING_OP_SEND_ZC` (io_uring engine only).
    pub send_zc: bool,
    /// Check every written (server side) and restored byte against the generator.
    pub verify: bool,
}

impl ObjectIoShape {
    /// Bytes of buffers one rank holds at most: a buffer per connection (max(parts in flight,
    /// read blocks)), each the larger of a part and a read range (the io_uring engine's
    /// registered pool; the phases never overlap).
    pub fn rank_buffer_bytes(&self) -> u64 {
        (self.parts_in_flight.max(self.read_blocks) as u64)
            * self.part_bytes.max(self.read_range_bytes)
    }
}

/// One object a rank writes per checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedObject {
    /// The file name DLIO gives it, e.g. `zero_pp_rank_0_mp_rank_0_model_states.pt`.
    pub name: String,
    pub bytes: u64,
}
