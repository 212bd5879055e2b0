//! The block generator: one block's random bytes from `(seed, id)`, eight xorshift128+ lanes
//! stepped together so the compiler keeps them in vector registers. The same code is compiled
//! three times (AVX-512, AVX2 and the baseline x86-64 or any other target) and picked once at
//! run time; every variant makes the same bytes, as the arithmetic is the same.
//!
//! Unsafe here: calling the `target_feature` variants (only where the CPU has the features)
//! and viewing whole aligned words as bytes and back (any bit pattern is valid for both).
#![allow(unsafe_code)]

/// splitmix64's finalizer of `seed ^ i·γ`: the header of block `i`, the lanes' seeds, and a
/// counter-based draw elsewhere (shuffles, dataset sizes).
#[inline(always)]
pub fn word(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Lanes stepped together: 64 bytes a step (one AVX-512 register, two AVX2 ones).
pub const LANES: usize = 8;

/// The lane seeds' key: the block's lanes are seeded from `word(seed ^ LANE_KEY, …)`, apart
/// from the header word `word(seed, id)`.
pub const LANE_KEY: u64 = 0x5851_f42d_4c95_7f2d;

/// The eight lanes' states `(a, b)` of block `id`: `a[l] = word(seed ^ LANE_KEY, 16·id + 2l)`,
/// `b[l] = word(seed ^ LANE_KEY, 16·id + 2l + 1) | 1` (never both zero).
#[inline(always)]
fn seeds(seed: u64, id: u64) -> ([u64; LANES], [u64; LANES]) {
    let key = seed ^ LANE_KEY;
    let base = id.wrapping_mul(2 * LANES as u64);
    let mut a = [0u64; LANES];
    let mut b = [0u64; LANES];
    for l in 0..LANES {
        a[l] = word(key, base.wrapping_add(2 * l as u64));
        b[l] = word(key, base.wrapping_add(2 * l as u64 + 1)) | 1;
    }
    (a, b)
}

/// One xorshift128+ step of every lane (Vigna's shifts 23, 17, 26): lane `l`'s output
/// goes to `out[l]`.
#[inline(always)]
fn step(a: &mut [u64; LANES], b: &mut [u64; LANES], out: &mut [u64]) {
    for l in 0..LANES {
        let mut s1 = a[l];
        let s0 = b[l];
        a[l] = s0;
        s1 ^= s1 << 23;
        b[l] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
        out[l] = b[l].wrapping_add(s0).to_le();
    }
}

/// The stream words of block `id` into `out` (whole steps; the caller cuts the last): word
/// `8t + l` is lane `l`'s output of step `t`.
#[inline(always)]
fn stream(seed: u64, id: u64, out: &mut [u64]) {
    let (mut a, mut b) = seeds(seed, id);
    let mut steps = out.chunks_exact_mut(LANES);
    for chunk in &mut steps {
        step(&mut a, &mut b, chunk);
    }
    let rest = steps.into_remainder();
    if !rest.is_empty() {
        let mut last = [0u64; LANES];
        step(&mut a, &mut b, &mut last);
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }
}

fn stream_portable(seed: u64, id: u64, out: &mut [u64]) {
    stream(seed, id, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn stream_avx2(seed: u64, id: u64, out: &mut [u64]) {
    stream(seed, id, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn stream_avx512(seed: u64, id: u64, out: &mut [u64]) {
    stream(seed, id, out)
}

/// Which compiled variant this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Kernel {
    /// The fastest variant this CPU has (detected once; the detection is cached by std).
    pub fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                return Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// The variant's name, for the benchmark's record.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => "avx512",
        }
    }

    /// Block `id`'s stream words into `out`, word 0 then replaced by the header
    /// `word(seed, id)` (which locates the block).
    pub fn block_words(self, seed: u64, id: u64, out: &mut [u64]) {
        match self {
            Kernel::Portable => stream_portable(seed, id, out),
            // SAFETY: `detect` picked these only where the CPU has the features they enable.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { stream_avx2(seed, id, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { stream_avx512(seed, id, out) },
        }
        if let Some(first) = out.first_mut() {
            *first = word(seed, id).to_le();
        }
    }
}

/// `bytes` as little-endian words, when they start on a word boundary and hold whole words.
pub fn as_words(bytes: &mut [u8]) -> Option<&mut [u64]> {
    // SAFETY: any bit pattern is a valid u64; align_to_mut keeps the middle aligned.
    let (pre, words, post) = unsafe { bytes.align_to_mut::<u64>() };
    (pre.is_empty() && post.is_empty()).then_some(words)
}

/// The bytes of `words` (little-endian on the targets ringload builds for).
pub fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: any bit pattern is a valid u8, and u8 has no alignment.
    let (_, bytes, _) = unsafe { words.align_to::<u8>() };
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_makes_the_same_words() {
        let mut want = vec![0u64; 517];
        Kernel::Portable.block_words(42, 7, &mut want);
        let mut got = vec![0u64; 517];
        Kernel::detect().block_words(42, 7, &mut got);
        assert_eq!(want, got);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut avx2 = vec![0u64; 517];
            Kernel::Avx2.block_words(42, 7, &mut avx2);
            assert_eq!(want, avx2);
        }
    }

    #[test]
    fn the_first_words_follow_the_written_algorithm() {
        // Lane 0's first output and lane 3's second, recomputed step by step as the README
        // writes them.
        let (seed, id) = (0x1234_5678_9abc_def0u64, 3u64);
        let key = seed ^ LANE_KEY;
        let xorshift = |mut a: u64, b: u64| {
            let s0 = b;
            a ^= a << 23;
            let nb = a ^ s0 ^ (a >> 17) ^ (s0 >> 26);
            (s0, nb, nb.wrapping_add(s0))
        };
        let lane = |l: u64| {
            (
                word(key, 16 * id + 2 * l),
                word(key, 16 * id + 2 * l + 1) | 1,
            )
        };
        let mut out = vec![0u64; 16];
        Kernel::detect().block_words(seed, id, &mut out);
        assert_eq!(u64::from_le(out[0]), word(seed, id), "the header");
        let (a1, b1) = lane(1);
        assert_eq!(u64::from_le(out[1]), xorshift(a1, b1).2);
        let (a3, b3) = lane(3);
        let (a3, b3, _) = xorshift(a3, b3);
        assert_eq!(u64::from_le(out[8 + 3]), xorshift(a3, b3).2);
    }
}
