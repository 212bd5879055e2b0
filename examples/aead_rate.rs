//! The floor of TLS's decrypt pass: how fast one core opens TLS 1.3 records with the `ring`
//! provider rustls and the io_uring engine use, per cipher suite. Records of 16 KiB (the
//! largest TLS allows) are opened in place for about a second each; prints GiB/s and
//! CPU-s/GiB (the thread's CPU clock). `scripts/bench-tls` runs it.
//!
//!     cargo run --release --example aead_rate
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn main() {
    const RECORD: usize = 16 << 10;
    for (name, algorithm) in [
        ("TLS13_AES_128_GCM_SHA256", &aead::AES_128_GCM),
        ("TLS13_AES_256_GCM_SHA384", &aead::AES_256_GCM),
        ("TLS13_CHACHA20_POLY1305_SHA256", &aead::CHACHA20_POLY1305),
    ] {
        let key_bytes = vec![7u8; algorithm.key_len()];
        let key = LessSafeKey::new(UnboundKey::new(algorithm, &key_bytes).unwrap());
        let header = [23u8, 3, 3, 0x40, 0x11];
        // One sealed record per sequence number, reopened from a pristine copy each time.
        let mut sealed = Vec::new();
        for seq in 0..64u64 {
            let mut record = vec![0x5au8; RECORD + 1];
            let tag = key
                .seal_in_place_separate_tag(nonce(seq), Aad::from(header), &mut record)
                .unwrap();
            record.extend_from_slice(tag.as_ref());
            sealed.push(record);
        }
        let mut work = sealed[0].clone();
        let (mut bytes, started, cpu) = (0u64, Instant::now(), thread_cpu());
        let mut seq = 0u64;
        while started.elapsed() < Duration::from_secs(1) {
            let i = (seq % 64) as usize;
            work.copy_from_slice(&sealed[i]);
            key.open_in_place(nonce(i as u64), Aad::from(header), &mut work)
                .expect("opens");
            bytes += RECORD as u64;
            seq += 1;
        }
        let loop_cpu = thread_cpu() - cpu;
        // The loop also copied a pristine record each time: time those copies alone and
        // take them out.
        let copy_started = thread_cpu();
        for n in 0..seq {
            work.copy_from_slice(&sealed[(n % 64) as usize]);
            std::hint::black_box(&work);
        }
        let copy_cpu = thread_cpu() - copy_started;
        let open_cpu = loop_cpu.saturating_sub(copy_cpu).as_secs_f64();
        let gib = bytes as f64 / (1u64 << 30) as f64;
        println!(
            "{name}: {:.2} GiB/s per core, {:.3} CPU-s/GiB (16 KiB records opened in place)",
            gib / open_cpu,
            open_cpu / gib
        );
    }
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [9u8; 12];
    for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    Nonce::assume_unique_for_key(n)
}
