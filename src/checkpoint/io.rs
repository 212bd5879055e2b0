//! The I/O shape of a checkpoint run ([`ObjectIoShape`]): the DLIO fork's defaults (32 MiB
//! parts, max(2, ⌈16 / ranks⌉) parts in flight per rank, 128 MiB ranged GETs over as many
//! parallel blocks), its environment variables, ringload's flags, and S3's limits checked up
//! front.

use serde::Serialize;

use super::object::{ChecksumForm, ObjectIoShape, PayloadSigning};
use crate::units::{bytes, count};

const MIB: u64 = 1 << 20;
/// The DLIO fork's multipart part size (s3dlio's `MultipartUploadWriter`).
pub const DEFAULT_PART_BYTES: u64 = 32 * MIB;
/// The DLIO fork's restore range (4 × its 32 MiB chunk).
pub const DEFAULT_READ_RANGE_BYTES: u64 = 128 * MIB;
/// S3's limits: parts of 5 MiB to 5 GiB (the last may be smaller), at most 10,000 of them,
/// and a single PUT of at most 5 GiB.
pub const MIN_PART_BYTES: u64 = 5 * MIB;
pub const MAX_PART_BYTES: u64 = 5 << 30;
pub const MAX_PARTS: u64 = 10_000;
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// The smallest restore range ringload takes.
pub const MIN_READ_RANGE_BYTES: u64 = MIB;
/// The fork's environment variables: part size in MiB, parts in flight per rank.
pub const ENV_PART_SIZE_MB: &str = "S3DLIO_MULTIPART_PART_SIZE_MB";
pub const ENV_MAX_IN_FLIGHT: &str = "S3DLIO_MULTIPART_MAX_IN_FLIGHT";

/// `--send-zc`: send request bodies with `IORING_OP_SEND_ZC` (io_uring engine only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SendZc {
    /// Plain `SEND` on loopback, where the kernel copies `SEND_ZC` data anyway; `SEND_ZC`
    /// elsewhere.
    #[default]
    Auto,
    /// `SEND_ZC` always (its notification keeps a buffer busy until the kernel lets go).
    #[value(alias = "true")]
    On,
    /// Plain `SEND` from registered buffers always.
    #[value(alias = "false")]
    Off,
}

impl SendZc {
    /// Whether to send with `SEND_ZC`, for a target that is (or is not) on loopback.
    pub fn enabled(self, loopback: bool) -> bool {
        match self {
            SendZc::On => true,
            SendZc::Off => false,
            SendZc::Auto => !loopback,
        }
    }
}

impl std::fmt::Display for SendZc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendZc::Auto => "auto",
            SendZc::On => "on",
            SendZc::Off => "off",
        })
    }
}

/// `--restore-checksum`: whether a restore checks each object's checksum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RestoreChecksum {
    /// One HEAD per object (`x-amz-checksum-mode: ENABLED`, a request DLIO does not send), its
    /// FULL_OBJECT CRC checked against the CRCs of the blocks read (not with `--verify`,
    /// which checks every byte).
    #[default]
    On,
    /// DLIO's requests only.
    Off,
}

/// What the command line asked of the I/O shape; `None` takes the environment's or DLIO's
/// default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IoOptions {
    pub part_bytes: Option<u64>,
    pub parts_in_flight: Option<usize>,
    pub single_put_below: Option<u64>,
    pub read_range_bytes: Option<u64>,
    pub read_blocks: Option<usize>,
    pub send_zc: SendZc,
    pub verify: bool,
    pub checksum: crate::checksum::Checksum,
    pub payload: PayloadSigning,
    pub checksum_form: ChecksumForm,
    pub restore_checksum: RestoreChecksum,
    /// The target is reached over TLS (`https://`): set by the caller that knows it.
    pub tls: bool,
    /// The objects are files (`--data-dir`): S3's part limits do not apply, a part is any
    /// whole number of 4 KiB blocks (DLIO's file writer's chunk; `O_DIRECT` writes at their
    /// offsets).
    pub files: bool,
    /// The content's dedupe and compression ratios (`--dedupe-ratio`, `--compress-ratio`).
    pub reduction: crate::content::Reduction,
}

/// `--checksum-form trailer` needs a checksum to carry, and a body whose
/// `x-amz-content-sha256` can name a streaming form (not the body's SHA-256).
fn check_body_form(options: &IoOptions) -> Result<(), String> {
    if options.checksum_form != ChecksumForm::Trailer {
        return Ok(());
    }
    if options.checksum.algorithm().is_none() {
        return Err(
            "--checksum-form trailer sends the checksum after the body, but --checksum \
                    none sends none: use --checksum crc32c (or another), or drop \
                    --checksum-form"
                .into(),
        );
    }
    if options.payload == PayloadSigning::Sha256 {
        return Err("--checksum-form trailer makes the body aws-chunked, whose \
                    x-amz-content-sha256 names its streaming form, not the body's SHA-256: use \
                    --payload-signing streaming (chunks signed) or unsigned with it"
            .into());
    }
    Ok(())
}

/// The fork's parallelism per rank: max(2, ⌈16 / ranks⌉).
pub fn default_in_flight(np: u64) -> usize {
    16u64.div_ceil(np.max(1)).max(2) as usize
}

/// Resolves the shape for `np` ranks whose largest object is `largest` (`(name, bytes)`):
/// flags win over the fork's environment variables, which win over its defaults. The error is
/// the line to print, naming the setting, where it came from and the fix.
pub fn resolve_io(
    options: &IoOptions,
    np: u64,
    largest: (&str, u64),
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ObjectIoShape, String> {
    let env_count = |name: &str| -> Result<Option<u64>, String> {
        match env(name) {
            None => Ok(None),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(format!(
                    "{name}={text} must be a positive integer; fix or unset it"
                )),
            },
        }
    };
    let (part_bytes, part_from) = match (options.part_bytes, env_count(ENV_PART_SIZE_MB)?) {
        (Some(b), _) => (b, "--part-size".to_string()),
        (None, Some(mib)) => (mib.saturating_mul(MIB), format!("{ENV_PART_SIZE_MB}={mib}")),
        (None, None) => (DEFAULT_PART_BYTES, "the default".to_string()),
    };
    let parts_in_flight = match (options.parts_in_flight, env_count(ENV_MAX_IN_FLIGHT)?) {
        (Some(n), _) => n,
        (None, Some(n)) => n as usize,
        (None, None) => default_in_flight(np),
    };
    if options.files {
        if part_bytes == 0 || !part_bytes.is_multiple_of(4096) || part_bytes > MAX_PART_BYTES {
            return Err(format!(
                "part size {} ({part_from}): a file's chunks are whole 4 KiB blocks (O_DIRECT \
                 writes them at their offsets), at most 5 GiB: use --part-size 4KiB, 4MiB, \
                 32MiB, …",
                bytes(part_bytes)
            ));
        }
    } else if !(MIN_PART_BYTES..=MAX_PART_BYTES).contains(&part_bytes) {
        return Err(format!(
            "part size {} ({part_from}) is outside S3's limits for parts, 5 MiB to 5 GiB (only \
             the last part may be smaller): use --part-size between 5MiB and 5GiB",
            bytes(part_bytes)
        ));
    }
    let (name, size) = largest;
    let parts = size.div_ceil(part_bytes);
    if parts > MAX_PARTS && !options.files {
        let fits = size.div_ceil(MAX_PARTS).div_ceil(MIB);
        return Err(format!(
            "part size {} ({part_from}) cuts the largest object, {name} ({} B), into {} parts; \
             S3 allows 10,000: use --part-size {fits}MiB or more",
            bytes(part_bytes),
            count(size),
            count(parts)
        ));
    }
    if parts_in_flight == 0 {
        return Err("--parts-in-flight 0: a rank needs a part in flight; use 1 or more".into());
    }
    let single_put_below = options.single_put_below.unwrap_or(0);
    if single_put_below > MAX_PUT_BYTES {
        return Err(format!(
            "--single-put-below {}: S3 takes a single PUT of at most 5 GiB; use 5GiB or less",
            bytes(single_put_below)
        ));
    }
    let read_range_bytes = options.read_range_bytes.unwrap_or(DEFAULT_READ_RANGE_BYTES);
    if read_range_bytes < MIN_READ_RANGE_BYTES {
        return Err(format!(
            "--read-range {}: a restore's ranged GET is 1 MiB or more; use --read-range 1MiB \
             or more",
            bytes(read_range_bytes)
        ));
    }
    check_body_form(options)?;
    let content = options.reduction.shape()?;
    let read_blocks = options.read_blocks.unwrap_or_else(|| default_in_flight(np));
    if read_blocks == 0 {
        return Err("--read-blocks 0: a restore needs a block; use 1 or more".into());
    }
    Ok(ObjectIoShape {
        part_bytes,
        parts_in_flight,
        single_put_below,
        // The plan knows its objects: it sets this (`CheckpointPlan::resolve`).
        single_put_bytes: 0,
        read_range_bytes,
        read_blocks,
        // Resolved by the run once it knows whether the target is on loopback
        // (`SendZc::enabled`); the plan keeps the choice.
        send_zc: options.send_zc == SendZc::On,
        verify: options.verify,
        checksum: options.checksum,
        payload: options.payload,
        checksum_form: options.checksum_form,
        // `--verify` checks every byte against the generator: the HEAD would add nothing.
        restore_check: options.restore_checksum == RestoreChecksum::On && !options.verify,
        tls: options.tls,
        content,
    })
}
