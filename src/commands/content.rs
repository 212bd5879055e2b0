//! `ringload content KEY --size N`: an object's bytes as the content generator makes them,
//! written to a file or stdout chunk by chunk (so any size fits in one chunk of memory), and
//! with `--time` the generator's CPU per GiB, timed apart from the writes.

use std::io::Write;

use anyhow::Context;

use crate::cli::ContentArgs;
use crate::content::{Content, Kernel};
use crate::exit::{self, UsageError};
use crate::metrics::thread_cpu;

/// The largest chunk taken: a chunk is one buffer in memory.
const MAX_CHUNK_BYTES: u64 = 1 << 30;

pub fn write(args: &ContentArgs) -> anyhow::Result<u8> {
    let shape = args.content.reduction().shape().map_err(UsageError)?;
    if !(1..=MAX_CHUNK_BYTES).contains(&args.chunk) {
        return Err(UsageError(format!(
            "--chunk {}: give 1 byte to 1GiB (one buffer of it is held)",
            args.chunk
        ))
        .into());
    }
    if args.offset.checked_add(args.size).is_none() {
        return Err(UsageError(format!(
            "--offset {} + --size {} is past 2⁶⁴ bytes: give a smaller offset or size",
            args.offset, args.size
        ))
        .into());
    }
    let content = Content::of(&args.key, true).reduced(shape);
    let mut out: Box<dyn Write> = if args.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let file = std::fs::File::create(&args.out).map_err(|e| {
            UsageError(format!(
                "--output {}: cannot create it ({e}); give a writable path or - for stdout",
                args.out.display()
            ))
        })?;
        Box::new(file)
    };
    let mut buf = vec![0u8; args.chunk.min(args.size).max(1) as usize];
    let (mut at, mut cpu) = (0u64, std::time::Duration::ZERO);
    while at < args.size {
        let n = (args.size - at).min(buf.len() as u64) as usize;
        let start = thread_cpu();
        content.fill(args.offset + at, &mut buf[..n]);
        cpu += thread_cpu().saturating_sub(start);
        match out.write_all(&buf[..n]) {
            // A reader that stopped (`| head`) ends the command, as for any Unix tool.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            other => other.with_context(|| format!("writing to {}", args.out.display()))?,
        }
        at += n as u64;
    }
    out.flush()
        .with_context(|| format!("writing to {}", args.out.display()))?;
    if args.time {
        let gib = args.size as f64 / (1u64 << 30) as f64;
        let line = serde_json::json!({
            "bytes": args.size,
            "chunk_bytes": buf.len(),
            "cpu_s": cpu.as_secs_f64(),
            "cpu_s_per_gib": (gib > 0.0).then(|| cpu.as_secs_f64() / gib),
            "kernel": Kernel::detect().name(),
            "content": shape,
        });
        eprintln!("{line}");
    }
    Ok(exit::OK)
}
