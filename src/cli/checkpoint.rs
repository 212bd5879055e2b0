//! The flags of a checkpoint workload's I/O: part size, parts in flight, single PUTs, restore
//! ranges and blocks, `SEND_ZC`. Flattened into `run`, `sweep` and `plan`; a training workload
//! ignores them.

use clap::Args;

use super::values::{parse_memory, parse_size};
use crate::checkpoint::{ChecksumForm, IoOptions, PayloadSigning, RestoreChecksum, SendZc};
use crate::checksum::Checksum;

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct CheckpointArgs {
    /// Multipart part size of a checkpoint's uploads, 5MiB to 5GiB (with --data-dir: each
    /// write's size, whole 4KiB blocks) [default: S3DLIO_MULTIPART_PART_SIZE_MB MiB when set,
    /// else 32MiB, as the DLIO fork]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Checkpoint")]
    pub part_size: Option<u64>,

    /// Parts in flight per rank [default: S3DLIO_MULTIPART_MAX_IN_FLIGHT when set, else
    /// max(2, ⌈16 ÷ ranks⌉), as the DLIO fork]
    #[arg(long, value_name = "N", help_heading = "Checkpoint")]
    pub parts_in_flight: Option<usize>,

    /// Send objects smaller than SIZE as one PUT [default: 0, every object a multipart
    /// upload, as the DLIO fork's writer]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Checkpoint")]
    pub single_put_below: Option<u64>,

    /// A restore's ranged GET size [default: 128MiB, as the DLIO fork]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Checkpoint")]
    pub read_range: Option<u64>,

    /// Contiguous blocks of an object a restore reads in parallel [default: max(2, ⌈16 ÷
    /// ranks⌉), as the DLIO fork]
    #[arg(long, value_name = "N", help_heading = "Checkpoint")]
    pub read_blocks: Option<usize>,

    /// io_uring engine: send bodies with SEND_ZC (on), plain SEND (off), or SEND_ZC except on
    /// loopback, where the kernel copies anyway (auto)
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = SendZc::Auto, help_heading = "Checkpoint")]
    pub send_zc: SendZc,

    /// The additional checksum each part and single PUT carries (a header, as the AWS SDKs
    /// send it), and each multipart upload completes with: CRC32C and CRC64NVME as
    /// FULL_OBJECT, SHA-256 as COMPOSITE; none for a store that refuses them
    #[arg(long, value_name = "ALGORITHM", value_enum, default_value_t = Checksum::Crc32c, help_heading = "Checkpoint")]
    pub checksum: Checksum,

    /// Where each part's and PUT's checksum goes: an x-amz-checksum-* header (its digest known
    /// before the head) or an aws-chunked trailer after the body
    /// (STREAMING-UNSIGNED-PAYLOAD-TRAILER, as the AWS SDKs send it over https; with
    /// --payload-signing streaming, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER; some stores
    /// refuse it)
    #[arg(long, value_name = "FORM", value_enum, default_value_t = ChecksumForm::Header, help_heading = "Checkpoint")]
    pub checksum_form: ChecksumForm,

    /// How SigV4 covers an upload's body, with keys: unsigned (UNSIGNED-PAYLOAD, the head
    /// signed), sha256 (the body's SHA-256 signed, as s3dlio does) or streaming (aws-chunked,
    /// the body one chunk signed after the head, STREAMING-AWS4-HMAC-SHA256-PAYLOAD); the
    /// SHA-256 computed as each part is generated
    #[arg(long, value_name = "FORM", value_enum, default_value_t = PayloadSigning::Unsigned, help_heading = "Checkpoint")]
    pub payload_signing: PayloadSigning,

    /// Restores: HEAD each object (x-amz-checksum-mode: ENABLED, a request DLIO does not send)
    /// and check its FULL_OBJECT CRC against the CRCs of the blocks read (on; not with
    /// --verify, which checks every byte), or send DLIO's requests only (off)
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = RestoreChecksum::On, help_heading = "Checkpoint")]
    pub restore_checksum: RestoreChecksum,

    /// MLPerf's split form: the --output folder of the write run this read run follows
    /// (checkpoint.num_checkpoints_write=0); the summary says how long after that run's end
    /// this one started (the rules allow 30 s)
    #[arg(long, value_name = "DIR", help_heading = "Checkpoint")]
    pub after: Option<std::path::PathBuf>,

    /// One accelerator's memory, for MLPerf's rule that the accelerators together hold the
    /// checkpoint [default: 180GB, B200's; MI355's is 288GB]
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, help_heading = "Checkpoint")]
    pub accelerator_memory: Option<u64>,

    /// Before the clock, abort every multipart upload open under the checkpoint folder, not
    /// only those an earlier ringload run journaled (another writer's included: use it only
    /// when no other writer is live there)
    #[arg(long, help_heading = "Checkpoint")]
    pub abort_foreign_uploads: bool,

    #[command(flatten)]
    pub content: super::data::ReductionArgs,
}

impl CheckpointArgs {
    /// The plan's I/O options, with `run --verify`.
    pub fn io_options(&self, verify: bool) -> IoOptions {
        IoOptions {
            part_bytes: self.part_size,
            parts_in_flight: self.parts_in_flight,
            single_put_below: self.single_put_below,
            read_range_bytes: self.read_range,
            read_blocks: self.read_blocks,
            send_zc: self.send_zc,
            verify,
            checksum: self.checksum,
            payload: self.payload_signing,
            checksum_form: self.checksum_form,
            restore_checksum: self.restore_checksum,
            // Set where the target is known (a run's `--endpoint`); `plan` and a sweep's
            // pre-plan, without one, size buffers for plain HTTP (0.2 % less per buffer).
            tls: false,
            // Set by the checkpoint session when the run is on a file system (`--data-dir`).
            files: false,
            reduction: self.content.reduction(),
        }
    }

    /// The flags given, by name (those left at their default are not): what a training run
    /// refuses. The content's ratios are not among them: a whole-object training run takes them
    /// (its dataset's layout).
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--part-size", self.part_size.is_some()),
            ("--parts-in-flight", self.parts_in_flight.is_some()),
            ("--single-put-below", self.single_put_below.is_some()),
            ("--read-range", self.read_range.is_some()),
            ("--read-blocks", self.read_blocks.is_some()),
            ("--send-zc", self.send_zc != SendZc::Auto),
            ("--checksum", self.checksum != Checksum::Crc32c),
            (
                "--checksum-form",
                self.checksum_form != ChecksumForm::Header,
            ),
            (
                "--payload-signing",
                self.payload_signing != PayloadSigning::Unsigned,
            ),
            ("--after", self.after.is_some()),
            ("--accelerator-memory", self.accelerator_memory.is_some()),
            ("--abort-foreign-uploads", self.abort_foreign_uploads),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                args.extend([flag.to_string(), value]);
            }
        };
        push("--part-size", self.part_size.map(|v| v.to_string()));
        push(
            "--parts-in-flight",
            self.parts_in_flight.map(|v| v.to_string()),
        );
        push(
            "--single-put-below",
            self.single_put_below.map(|v| v.to_string()),
        );
        push("--read-range", self.read_range.map(|v| v.to_string()));
        push("--read-blocks", self.read_blocks.map(|v| v.to_string()));
        push(
            "--accelerator-memory",
            self.accelerator_memory.map(|v| format!("{v}B")),
        );
        push(
            "--after",
            self.after.as_ref().map(|d| d.display().to_string()),
        );
        if self.send_zc != SendZc::Auto {
            push("--send-zc", Some(self.send_zc.to_string()));
        }
        if self.checksum != Checksum::Crc32c {
            push("--checksum", Some(self.checksum.to_string()));
        }
        if self.checksum_form != ChecksumForm::Header {
            push("--checksum-form", Some(self.checksum_form.to_string()));
        }
        if self.payload_signing != PayloadSigning::Unsigned {
            push("--payload-signing", Some(self.payload_signing.to_string()));
        }
        if self.restore_checksum != RestoreChecksum::On {
            push("--restore-checksum", Some("off".to_string()));
        }
        if self.abort_foreign_uploads {
            args.push("--abort-foreign-uploads".to_string());
        }
        args.extend(self.content.to_args());
        args
    }
}

/// `plan`'s checkpoint flags: the I/O flags, and the hosts to spread the ranks over.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct CheckpointPlanArgs {
    #[command(flatten)]
    pub io: CheckpointArgs,

    /// Checkpoint workloads: hosts the ranks are spread over (contiguous blocks, as mpirun
    /// fills them), for per-host bytes and each host's memory
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Checkpoint"
    )]
    pub hosts: u32,
}
