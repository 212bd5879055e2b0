//! Made whole, or in slices as it is sent: what the kernel's copy of a plain `SEND` costs when a
//! checkpoint part was generated whole (32 MiB, then read back from memory by the copy) against
//! each 256 KiB slice generated just before its copy (read from cache), and against slices
//! made twice (once for a digest the request head must carry, once to send). Parts rotate
//! through 16 buffers (a rank's parts in flight); the copy is modelled as a memcpy in 64 KiB
//! pieces into a 4 MiB ring, as socket buffers are fresh pages. The generator is ringload's
//! (`Content::fill`). 16 GiB per mode, 3 rounds, the thread's CPU time; BENCHMARKS.md ("The
//! content generator, version 2") has the figures.
//!
//!     cargo run --release --example made_as_sent
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ringload::content::Content;
use ringload::metrics::thread_cpu;

const PART: usize = 32 << 20;
const SLICE: usize = 256 << 10;
const IN_FLIGHT: usize = 16;
const TOTAL: usize = 16 << 30;

/// A socket's copy of `src`: 64 KiB pieces into a 4 MiB ring.
struct Copier {
    ring: Vec<u8>,
    at: usize,
}

impl Copier {
    fn copy(&mut self, src: &[u8]) {
        for piece in src.chunks(64 << 10) {
            if self.at + piece.len() > self.ring.len() {
                self.at = 0;
            }
            self.ring[self.at..self.at + piece.len()].copy_from_slice(piece);
            self.at += piece.len();
        }
    }
}

fn main() {
    let content = Content::of("bench/part.pt", true);
    let mut parts: Vec<Vec<u8>> = (0..IN_FLIGHT).map(|_| vec![1u8; PART]).collect();
    let mut scratch = vec![0u8; SLICE];
    let mut sock = Copier {
        ring: vec![0u8; 4 << 20],
        at: 0,
    };
    let modes = [
        "whole, then sent",
        "slices, each sent at once",
        "slices made twice",
        "generated only",
    ];
    for round in 1..=3 {
        for (m, mode) in modes.iter().enumerate() {
            let start = thread_cpu();
            let mut offset = 0u64;
            for k in 0..TOTAL / PART {
                let part = &mut parts[k % IN_FLIGHT];
                match m {
                    0 => {
                        content.fill(offset, part);
                        sock.copy(part);
                    }
                    1 | 2 => {
                        for (i, slice) in part.chunks_mut(SLICE).enumerate() {
                            let at = offset + (i * SLICE) as u64;
                            if m == 2 {
                                // The first making, for the digest: into a slice-sized scratch.
                                content.fill(at, &mut scratch);
                                std::hint::black_box(&scratch);
                            }
                            content.fill(at, slice);
                            sock.copy(slice);
                        }
                    }
                    _ => content.fill(offset, part),
                }
                offset += PART as u64;
            }
            let cpu = thread_cpu().saturating_sub(start).as_secs_f64();
            println!(
                "round {round} {mode:28} {:.4} CPU-s/GiB",
                cpu / (TOTAL as f64 / (1u64 << 30) as f64)
            );
            std::hint::black_box(&sock.ring);
        }
    }
}
