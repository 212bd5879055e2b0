//! The floor of TLS's decrypt pass: how fast one core opens TLS 1.3 records with the `ring`
//! provider rustls and the io_uring engine use, per cipher suite. Records of 16 KiB (the
//! largest TLS allows) are opened in place for about a second each; prints GiB/s and
//! CPU-s/GiB (the thread's CPU clock). Then the two ways of decrypting a body the io_uring
//! engine received (64 such records back to back, 1 MiB): each record opened in place and its
//! plaintext moved down over the headers and tags before it (a second pass), or opened straight
//! to its plaintext's place (`open_within`, one pass), as the engine does; alternated, median of
//! 5. `scripts/bench-tls` runs it. Last, the floor of the write side's seal pass: 16 KiB
//! records sealed in place (in cache, as the decrypt floor is measured), and a 32 MiB part of
//! them laid out end to end and sealed in place (from memory, as a checkpoint's part is);
//! `scripts/bench-write-tls` runs it.
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
    for (name, algorithm) in [
        ("TLS13_AES_128_GCM_SHA256", &aead::AES_128_GCM),
        ("TLS13_AES_256_GCM_SHA384", &aead::AES_256_GCM),
        ("TLS13_CHACHA20_POLY1305_SHA256", &aead::CHACHA20_POLY1305),
    ] {
        let (mut moved, mut within) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            moved.push(body_rate(algorithm, false));
            within.push(body_rate(algorithm, true));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (moved, within) = (median(&mut moved), median(&mut within));
        println!(
            "body {name}: decrypted in place then moved down {moved:.3} CPU-s/GiB, decrypted \
             to place in one pass {within:.3} CPU-s/GiB (the move: {:.3})",
            moved - within
        );
    }
    for (name, algorithm) in [
        ("TLS13_AES_128_GCM_SHA256", &aead::AES_128_GCM),
        ("TLS13_AES_256_GCM_SHA384", &aead::AES_256_GCM),
        ("TLS13_CHACHA20_POLY1305_SHA256", &aead::CHACHA20_POLY1305),
    ] {
        let (mut record, mut part) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            record.push(seal_rate(algorithm, 1));
            part.push(seal_rate(algorithm, 2048));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "seal {name}: 16 KiB records in place {:.3} CPU-s/GiB (in cache), a 32 MiB part's \
             records in place {:.3} CPU-s/GiB (from memory)",
            median(&mut record),
            median(&mut part)
        );
    }
}

/// CPU-s per GiB of plaintext to seal `records` TLS 1.3 records of 16 KiB laid out end to end
/// (room for each header in front and inner type and tag behind), each in place, over and
/// over for about 0.3 s.
fn seal_rate(algorithm: &'static aead::Algorithm, records: usize) -> f64 {
    const RECORD: usize = 16 << 10;
    const STRIDE: usize = 5 + RECORD + 1 + 16;
    let key_bytes = vec![7u8; algorithm.key_len()];
    let key = LessSafeKey::new(UnboundKey::new(algorithm, &key_bytes).unwrap());
    let header = [23u8, 3, 3, ((STRIDE - 5) >> 8) as u8, (STRIDE - 5) as u8];
    let mut part = vec![0x5au8; records * STRIDE];
    let (mut sealed, started, cpu) = (0u64, Instant::now(), thread_cpu());
    let mut seq = 0u64;
    while started.elapsed() < Duration::from_millis(300) {
        for r in 0..records {
            let rec = &mut part[r * STRIDE..(r + 1) * STRIDE];
            rec[5 + RECORD] = 23;
            let tag = key
                .seal_in_place_separate_tag(
                    nonce(seq),
                    Aad::from(header),
                    &mut rec[5..5 + RECORD + 1],
                )
                .unwrap();
            rec[5 + RECORD + 1..].copy_from_slice(tag.as_ref());
            seq += 1;
        }
        std::hint::black_box(&part);
        sealed += records as u64;
    }
    let gib = (sealed * RECORD as u64) as f64 / (1u64 << 30) as f64;
    (thread_cpu() - cpu).as_secs_f64() / gib
}

/// CPU-s per GiB of plaintext to decrypt a 1 MiB body of 64 TLS 1.3 records (16 KiB each)
/// received back to back, leaving its plaintext contiguous at the front: each record opened in
/// place and moved down, or (`one_pass`) opened straight to its place; about 0.4 s.
fn body_rate(algorithm: &'static aead::Algorithm, one_pass: bool) -> f64 {
    const RECORD: usize = 16 << 10;
    const RECORDS: usize = 64;
    const WIRE: usize = RECORD + 1 + 16;
    let key_bytes = vec![7u8; algorithm.key_len()];
    let key = LessSafeKey::new(UnboundKey::new(algorithm, &key_bytes).unwrap());
    let header = [23u8, 3, 3, (WIRE >> 8) as u8, WIRE as u8];
    let mut pristine = Vec::new();
    for seq in 0..RECORDS as u64 {
        let mut record = vec![0x5au8; RECORD];
        record.push(23);
        let tag = key
            .seal_in_place_separate_tag(nonce(seq), Aad::from(header), &mut record)
            .unwrap();
        pristine.extend_from_slice(&header);
        pristine.extend_from_slice(&record);
        pristine.extend_from_slice(tag.as_ref());
    }
    let mut work = pristine.clone();
    let (mut bodies, started, cpu) = (0u64, Instant::now(), thread_cpu());
    while started.elapsed() < Duration::from_millis(400) {
        work.copy_from_slice(&pristine);
        let mut plain_end = 0;
        for seq in 0..RECORDS {
            let body = seq * (5 + WIRE) + 5..(seq + 1) * (5 + WIRE);
            if one_pass {
                key.open_within(
                    nonce(seq as u64),
                    Aad::from(header),
                    &mut work[plain_end..body.end],
                    body.start - plain_end..,
                )
                .expect("opens");
            } else {
                key.open_in_place(
                    nonce(seq as u64),
                    Aad::from(header),
                    &mut work[body.clone()],
                )
                .expect("opens");
                work.copy_within(body.start..body.start + RECORD, plain_end);
            }
            plain_end += RECORD;
        }
        std::hint::black_box(&work);
        bodies += 1;
    }
    let loop_cpu = thread_cpu() - cpu;
    let copy_started = thread_cpu();
    for _ in 0..bodies {
        work.copy_from_slice(&pristine);
        std::hint::black_box(&work);
    }
    let copy_cpu = thread_cpu() - copy_started;
    let gib = (bodies * (RECORD * RECORDS) as u64) as f64 / (1u64 << 30) as f64;
    loop_cpu.saturating_sub(copy_cpu).as_secs_f64() / gib
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [9u8; 12];
    for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    Nonce::assume_unique_for_key(n)
}
