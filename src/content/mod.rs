//! Content: the bytes an object carries (checkpoint objects, the payload of generated
//! datasets, what the embedded server serves and checks), computable at any offset, so a
//! writer generates each part straight into its send buffer, a reader checks each landed range,
//! and the embedded server's sink checks an upload or serves an object without storing it.
//!
//! # The algorithm, content version 2 (for a check written in another language)
//!
//! - An object's **seed** is the 64-bit FNV-1a hash of its key (the bucket-relative key, UTF-8
//!   bytes, as sent on the wire, e.g. `checkpoints/llama3_8b/global_epoch1_step1/zero_pp_rank_0_mp_rank_0_model_states.pt`):
//!   start from `0xcbf29ce484222325`; for each byte, `h = (h ^ byte) * 0x100000001b3` (mod
//!   2⁶⁴). The key names the checkpoint (step), the rank and the object, so the content is a
//!   function of (checkpoint, rank, object, offset). (A generated Parquet file's values use
//!   `splitmix64(dataset_seed ^ splitmix64(file_index))` instead, in value order.)
//! - `word(s, i)` is splitmix64's finalizer of `s ^ (i * 0x9e3779b97f4a7c15)` (mod 2⁶⁴):
//!   `z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
//!   z ^ (z >> 31)`.
//! - The object is cut into **blocks** of `B` bytes (`--dedupe-block`, 4096 by default; the
//!   last block is cut at the object's size). Block `b` carries the bytes of **source block**
//!   `id(b)`: with `U = max(256, ⌊2²⁰ / B⌋)` (a run of unique blocks about 1 MiB long, so a
//!   duplicate lies beyond a compressor's window) and `G = ⌊R · U + ½⌋` for the dedupe ratio
//!   `R`, `id(b) = (b div G) · U + (b mod G) mod U`. With `R = 1`, `id(b) = b`.
//! - A block's first `r = clamp(⌊B / C + ½⌋, 16, B)` bytes are random, the rest zero, for the
//!   compression ratio `C` (`r = B` with `C = 1`).
//! - The random bytes of source block `j` are 64-bit little-endian words: word 0 is the
//!   **header** `word(seed, j)` (it locates a block); word `k ≥ 1` is the output of step
//!   `k div 8` (counted from 0; lane 0's output of step 0 is replaced by the header) of lane
//!   `k mod 8` of eight xorshift128+ generators, lane `l` starting from
//!   `a = word(seed ^ 0x5851f42d4c957f2d, 16j + 2l)`, `b = word(seed ^ 0x5851f42d4c957f2d,
//!   16j + 2l + 1) | 1`; a step is `s1 = a; s0 = b; a = s0; s1 ^= s1 << 23;
//!   b = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26); output b + s0` (mod 2⁶⁴). The last word is cut
//!   at `r`.
//! - With `checkpoint.randomize_tensor: False` every byte is zero (DLIO writes zero tensors).
//!
//! ```text
//! python: def word(s, i):
//!     z = (s ^ (i * 0x9e3779b97f4a7c15)) & M
//!     z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
//!     z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
//!     return z ^ (z >> 31)
//! ```
//!
//! Version 1 (ringload before the reduction ratios) made word `i` of the whole object as
//! `word(seed, i)`: `--verify` on data it wrote names version 2 as the one it expected.
//!
//! A leaf: it uses nothing of the crate.

mod kernel;

use std::cell::RefCell;

pub use kernel::{Kernel, word};

/// The content version this build makes (named by `--verify` when bytes differ).
pub const VERSION: u32 = 2;

/// The default dedupe block (`--dedupe-block`).
pub const DEFAULT_BLOCK_BYTES: u64 = 4096;

/// The shortest run of unique blocks: a duplicate lies at least this far from its source.
const UNIQUE_SPAN_BYTES: u64 = 1 << 20;

/// The fewest unique blocks in a dedupe group (the ratio's precision: 1/256).
const MIN_UNIQUE_BLOCKS: u64 = 256;

/// The highest dedupe ratio taken: a part's bytes fit up to this many offsets until a byte tells
/// them apart, and the sink checks each.
const MAX_DEDUPE_RATIO: f64 = 100.0;

/// `x` rounded to the nearest integer, halves up (README's rounding; Python's `round` rounds
/// halves to even).
fn half_up(x: f64) -> u64 {
    (x + 0.5).floor() as u64
}

/// The fewest random bytes a block carries (its header and one stream word).
const MIN_RANDOM_BYTES: u64 = 16;

/// The data reduction a user asks for: dedupe `R:1` over blocks of `dedupe_block` bytes, and
/// compression `C:1`. `1, 4096, 1` is DLIO's unique, incompressible data.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Reduction {
    pub dedupe_ratio: f64,
    pub dedupe_block: u64,
    pub compress_ratio: f64,
}

impl Default for Reduction {
    fn default() -> Self {
        Reduction {
            dedupe_ratio: 1.0,
            dedupe_block: DEFAULT_BLOCK_BYTES,
            compress_ratio: 1.0,
        }
    }
}

impl Reduction {
    /// The block layout these ratios make, or what is wrong with them (naming the flag and a
    /// fix).
    pub fn shape(&self) -> Result<Shape, String> {
        let block = self.dedupe_block;
        if !(512..=(1 << 20)).contains(&block) || !block.is_multiple_of(512) {
            return Err(format!(
                "--dedupe-block {block}: give a multiple of 512 bytes from 512 to 1MiB (4KiB, \
                 the default, is what most inline dedupe uses)"
            ));
        }
        for (flag, ratio) in [
            ("--dedupe-ratio", self.dedupe_ratio),
            ("--compress-ratio", self.compress_ratio),
        ] {
            if !ratio.is_finite() {
                return Err(format!(
                    "{flag} {ratio}: give a finite ratio, 1 (unique, incompressible data, what \
                     DLIO writes) or more, e.g. 2 for 2:1"
                ));
            }
            if ratio < 1.0 {
                return Err(format!(
                    "{flag} {ratio}: a ratio below 1 is not a reduction; give 1 (unique, \
                 incompressible data, what DLIO writes) or more, e.g. 2 for 2:1"
                ));
            }
        }
        let most = (block / MIN_RANDOM_BYTES) as f64;
        if self.compress_ratio > most {
            return Err(format!(
                "--compress-ratio {}: at most {most} with {block}-byte blocks (each keeps \
                 {MIN_RANDOM_BYTES} random bytes); give a lower ratio or a larger --dedupe-block",
                self.compress_ratio
            ));
        }
        if self.dedupe_ratio > MAX_DEDUPE_RATIO {
            return Err(format!(
                "--dedupe-ratio {}: give {MAX_DEDUPE_RATIO} or less (a block's copies are told \
                 apart only by their neighbours, so checking a part costs up to R times more)",
                self.dedupe_ratio
            ));
        }
        let unique = MIN_UNIQUE_BLOCKS.max(UNIQUE_SPAN_BYTES / block);
        let random = half_up(block as f64 / self.compress_ratio).clamp(MIN_RANDOM_BYTES, block);
        Ok(Shape {
            block,
            random,
            unique,
            group: half_up(self.dedupe_ratio * unique as f64).max(unique),
        })
    }
}

/// The block layout of random content (see the module's algorithm): `block` bytes a block,
/// its first `random` random, source ids repeating every `unique` blocks within groups of
/// `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub block: u64,
    pub random: u64,
    pub unique: u64,
    pub group: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Reduction::default()
            .shape()
            .expect("the default reduction is valid")
    }
}

/// Serialized as what it means: the ratios, the block, and the content version.
impl serde::Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Content", 4)?;
        out.serialize_field("version", &VERSION)?;
        out.serialize_field("dedupe_ratio", &self.dedupe_ratio())?;
        out.serialize_field("dedupe_block_bytes", &self.block)?;
        out.serialize_field("compress_ratio", &self.compress_ratio())?;
        out.end()
    }
}

impl Shape {
    /// The source block that block `b` carries.
    pub fn source(&self, b: u64) -> u64 {
        (b / self.group) * self.unique + (b % self.group) % self.unique
    }

    /// The blocks that carry source block `id` (ascending; one with no dedupe).
    pub fn blocks_of(&self, id: u64) -> impl Iterator<Item = u64> + use<> {
        let (g, p, unique, group) = (id / self.unique, id % self.unique, self.unique, self.group);
        (0..)
            .map(move |k| p + k * unique)
            .take_while(move |&at| at < group)
            .filter_map(move |at| g.checked_mul(group)?.checked_add(at))
    }

    /// The dedupe ratio this layout makes (`group / unique`).
    pub fn dedupe_ratio(&self) -> f64 {
        self.group as f64 / self.unique as f64
    }

    /// The compression ratio it aims at (`block / random`).
    pub fn compress_ratio(&self) -> f64 {
        self.block as f64 / self.random as f64
    }

    /// The layout in words: `unique, incompressible (as DLIO writes)` or the ratios.
    pub fn describe(&self) -> String {
        if self.is_unreduced() {
            return "unique, incompressible (dedupe 1:1, compression 1:1, as DLIO writes)".into();
        }
        format!(
            "dedupe {}:1 over {}-byte blocks, compression {}:1 (DLIO writes unique, \
             incompressible data)",
            trim(self.dedupe_ratio()),
            self.block,
            trim(self.compress_ratio())
        )
    }

    /// Whether this is unique, incompressible data (DLIO's).
    pub fn is_unreduced(&self) -> bool {
        self.group == self.unique && self.random == self.block
    }
}

/// A ratio with at most three decimals, trailing zeros dropped.
fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What an object's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// Pseudo-random blocks from the key's seed (`randomize_tensor: True`, DLIO's default),
    /// reduced as `shape` says.
    Random { seed: u64, shape: Shape },
    /// Zero bytes (`randomize_tensor: False`).
    Zeros,
}

thread_local! {
    /// A block's words, for pieces that do not start a block or are not 8-byte aligned.
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Content {
    /// The content of the object `key`: random from its seed (unique, incompressible), or
    /// zeros.
    pub fn of(key: &str, randomize: bool) -> Content {
        if randomize {
            Content::Random {
                seed: seed(key),
                shape: Shape::default(),
            }
        } else {
            Content::Zeros
        }
    }

    /// This content with its random blocks laid out as `shape` (zeros stay zeros).
    pub fn reduced(self, shape: Shape) -> Content {
        match self {
            Content::Random { seed, .. } => Content::Random { seed, shape },
            Content::Zeros => Content::Zeros,
        }
    }

    /// Writes the object's bytes `offset..offset + buf.len()` into `buf`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match *self {
            Content::Zeros => buf.fill(0),
            Content::Random { seed, shape } => {
                let kernel = Kernel::detect();
                let Ok(()) = for_pieces(shape, offset, buf.len(), |id, within, range| {
                    fill_piece(kernel, seed, shape, id, within, &mut buf[range]);
                    Ok::<(), std::convert::Infallible>(())
                });
            }
        }
    }

    /// Checks `buf` against the object's bytes from `offset`; `Err` holds the object offset of
    /// the first byte that differs.
    pub fn check(&self, offset: u64, buf: &[u8]) -> Result<(), u64> {
        match *self {
            Content::Zeros => match buf.iter().position(|&b| b != 0) {
                None => Ok(()),
                Some(at) => Err(offset + at as u64),
            },
            Content::Random { seed, shape } => {
                let kernel = Kernel::detect();
                for_pieces(shape, offset, buf.len(), |id, within, range| {
                    let start = range.start;
                    check_piece(kernel, seed, shape, id, within, &buf[range])
                        .map_err(|k| offset + (start + k) as u64)
                })
            }
        }
    }

    /// What [`Content::check`]'s `Err(at)` means, in words: the byte, and the content version
    /// and layout it was checked against.
    pub fn mismatch(&self, at: u64) -> String {
        format!(
            "byte {at} is not content version {VERSION}'s ({}): the object was written by \
             another writer (a DLIO run, another tool: other bytes), by another ringload \
             version, or with other --dedupe-ratio, --dedupe-block, --compress-ratio or \
             checkpoint.randomize_tensor; restore such objects without --verify",
            self.describe()
        )
    }

    /// The layout in words: its random blocks' ratios, or zeros.
    pub fn describe(&self) -> String {
        match self {
            Content::Random { shape, .. } => shape.describe(),
            Content::Zeros => "zeros, randomize_tensor False".to_string(),
        }
    }

    /// The object offsets at which `head` (a body's first bytes, at least a block and 64 bytes
    /// long to be sure to hold a block's start) may lie: located from the header word of the
    /// first block that starts in it and whose first 64 bytes are the generator's (a wrong
    /// byte there spoils that block, not the next). Several with dedupe (duplicates cannot be
    /// told apart by their bytes); none when no block start in `head` is the generator's.
    /// The caller checks the rest of `head` at each.
    pub fn locate(&self, head: &[u8]) -> Vec<u64> {
        let Content::Random { seed, shape } = *self else {
            return Vec::new();
        };
        let probe = 64.min(shape.random as usize);
        for k in 0..head.len().saturating_sub(probe - 1) {
            let w = u64::from_le_bytes(head[k..k + 8].try_into().expect("8 bytes"));
            let id = word_index(seed, w);
            if id >= PLAUSIBLE_BLOCKS {
                continue;
            }
            let starts: Vec<u64> = shape
                .blocks_of(id)
                .filter_map(|b| b.checked_mul(shape.block)?.checked_sub(k as u64))
                .filter(|&start| self.check(start + k as u64, &head[k..k + probe]).is_ok())
                .collect();
            if !starts.is_empty() {
                return starts;
            }
        }
        Vec::new()
    }
}

/// Block ids at or above this are taken for chance words, not headers (objects up to 2⁴⁰
/// blocks: 4 EiB of 4 KiB blocks).
const PLAUSIBLE_BLOCKS: u64 = 1 << 40;

/// Calls `each(id, within, range)` for each block piece of the bytes `offset..offset + len`:
/// `range` in the caller's buffer, the piece starting `within` bytes into the block that
/// carries source block `id`.
fn for_pieces<E>(
    shape: Shape,
    offset: u64,
    len: usize,
    mut each: impl FnMut(u64, usize, std::ops::Range<usize>) -> Result<(), E>,
) -> Result<(), E> {
    let mut at = 0usize;
    while at < len {
        let o = offset + at as u64;
        let within = (o % shape.block) as usize;
        let n = (shape.block as usize - within).min(len - at);
        each(shape.source(o / shape.block), within, at..at + n)?;
        at += n;
    }
    Ok(())
}

/// The bytes `within..within + out.len()` of source block `id` into `out`.
fn fill_piece(kernel: Kernel, seed: u64, shape: Shape, id: u64, within: usize, out: &mut [u8]) {
    let random = (shape.random as usize)
        .saturating_sub(within)
        .min(out.len());
    let (head, zeros) = out.split_at_mut(random);
    // Not called when empty: glibc's AVX-512 memset stores under an empty mask, which costs
    // this loop a third of its time on AMD Zen 4 (perf, `ringload content --time`).
    if !zeros.is_empty() {
        zeros.fill(0);
    }
    if head.is_empty() {
        return;
    }
    if within == 0
        && let Some(words) = kernel::as_words(head)
    {
        kernel.block_words(seed, id, words);
        return;
    }
    with_block(kernel, seed, id, within + head.len(), |bytes| {
        head.copy_from_slice(&bytes[within..]);
    });
}

/// Compares `got` with the bytes `within..` of source block `id`: `Err` holds the index in
/// `got` of the first that differs.
fn check_piece(
    kernel: Kernel,
    seed: u64,
    shape: Shape,
    id: u64,
    within: usize,
    got: &[u8],
) -> Result<(), usize> {
    let random = (shape.random as usize)
        .saturating_sub(within)
        .min(got.len());
    let (head, zeros) = got.split_at(random);
    let mut result = Ok(());
    if !head.is_empty() {
        with_block(kernel, seed, id, within + head.len(), |bytes| {
            let want = &bytes[within..];
            if want != head {
                let k = want.iter().zip(head).position(|(a, b)| a != b);
                result = Err(k.unwrap_or(0));
            }
        });
    }
    result?;
    match zeros.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(k) => Err(random + k),
    }
}

/// Calls `with` on the first `len` bytes of source block `id`'s random bytes, made in the
/// thread's scratch.
fn with_block(kernel: Kernel, seed: u64, id: u64, len: usize, with: impl FnOnce(&[u8])) {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let words = len.div_ceil(8);
        if scratch.len() < words {
            scratch.resize(words, 0);
        }
        kernel.block_words(seed, id, &mut scratch[..words]);
        with(&kernel::as_bytes(&scratch[..words])[..len]);
    });
}

/// FNV-1a 64 of `key`.
pub fn seed(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The inverse of `a` modulo 2⁶⁴ (`a` odd), by Newton's iteration.
const fn inverse(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

const INV_M1: u64 = inverse(0xbf58_476d_1ce4_e5b9);
const INV_M2: u64 = inverse(0x94d0_49bb_1331_11eb);
const INV_GOLDEN: u64 = inverse(0x9e37_79b9_7f4a_7c15);

/// `x` with `x ^= x >> k` undone.
fn unshift(z: u64, k: u32) -> u64 {
    let mut x = z;
    for _ in 0..64 / k + 1 {
        x = z ^ (x >> k);
    }
    x
}

/// The index `i` with `word(seed, i) == w` (the word is a bijection of its index).
pub fn word_index(seed: u64, w: u64) -> u64 {
    let mut z = unshift(w, 31).wrapping_mul(INV_M2);
    z = unshift(z, 27).wrapping_mul(INV_M1);
    (unshift(z, 30) ^ seed).wrapping_mul(INV_GOLDEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object's bytes the slow way, from the module's algorithm as written (one word at a
    /// time, no lanes in step, no scratch).
    fn reference(seed: u64, shape: Shape, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let mut b = 0u64;
        while out.len() < len {
            let (g, unique) = (shape.group, shape.unique);
            let id = (b / g) * unique + (b % g) % unique;
            let key = seed ^ 0x5851_f42d_4c95_7f2d;
            let mut lanes: Vec<(u64, u64)> = (0..8)
                .map(|l| {
                    (
                        word(key, 16 * id + 2 * l),
                        word(key, 16 * id + 2 * l + 1) | 1,
                    )
                })
                .collect();
            let mut block = Vec::new();
            for k in 0..shape.block.div_ceil(8) {
                let (a, bb) = lanes[(k % 8) as usize];
                let s0 = bb;
                let s1 = a ^ (a << 23);
                let nb = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
                lanes[(k % 8) as usize] = (s0, nb);
                let w = if k == 0 {
                    word(seed, id)
                } else {
                    nb.wrapping_add(s0)
                };
                block.extend_from_slice(&w.to_le_bytes());
            }
            block.truncate(shape.random as usize);
            block.resize(shape.block as usize, 0);
            out.extend_from_slice(&block);
            b += 1;
        }
        out.truncate(len);
        out
    }

    fn shape(r: f64, block: u64, c: f64) -> Shape {
        Reduction {
            dedupe_ratio: r,
            dedupe_block: block,
            compress_ratio: c,
        }
        .shape()
        .unwrap()
    }

    fn shapes() -> Vec<Shape> {
        vec![
            Shape::default(),
            shape(2.0, 512, 1.0),
            shape(1.0, 512, 3.0),
            shape(1.5, 1024, 4.0),
        ]
    }

    #[test]
    fn fnv1a_matches_published_vectors() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo): "" and "a".
        assert_eq!(seed(""), 0xcbf29ce484222325);
        assert_eq!(seed("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(seed("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn splitmix_matches_its_reference_sequence() {
        // splitmix64 seeded 0 yields 0xe220a8397b1dcdaf first: its state after one step is
        // the golden gamma, which is word(0, 1).
        assert_eq!(word(0, 1), 0xe220a8397b1dcdaf);
        for i in [0u64, 1, 77, u64::MAX] {
            assert_eq!(word_index(99, word(99, i)), i);
        }
    }

    #[test]
    fn any_window_at_any_alignment_equals_the_whole_object() {
        for shape in shapes() {
            let content = Content::of("ckpt/global_epoch1_step1/x.pt", true).reduced(shape);
            let Content::Random { seed, .. } = content else {
                panic!("random")
            };
            let len = (3 * shape.block + 203) as usize;
            let whole = reference(seed, shape, len);
            let mut filled = vec![0xAAu8; len];
            content.fill(0, &mut filled);
            assert_eq!(filled, whole, "{shape:?} whole");
            let b = shape.block as usize;
            let starts = [0, 1, 7, 8, 9, b - 8, b - 1, b, b + 3, 2 * b - 5];
            for offset in starts {
                for n in [0usize, 1, 3, 8, 17, 64, 100, b, b + 9, 2 * b + 1] {
                    let end = (offset + n).min(len);
                    // A buffer that starts off 8-byte alignment as well as one on it.
                    for shift in [0usize, 3] {
                        let mut backing = vec![0x55u8; end - offset + shift];
                        let buf = &mut backing[shift..];
                        content.fill(offset as u64, buf);
                        assert_eq!(&buf[..], &whole[offset..end], "{shape:?} at {offset}+{n}");
                        assert_eq!(content.check(offset as u64, buf), Ok(()));
                    }
                }
            }
        }
    }

    #[test]
    fn check_names_the_first_wrong_byte() {
        for shape in shapes() {
            let content = Content::of("k", true).reduced(shape);
            let mut buf = vec![0u8; 2 * shape.block as usize];
            content.fill(5, &mut buf);
            let last = buf.len() - 1;
            let zero_at = shape.random as usize; // a zero byte when the block is compressed
            for at in [0usize, 2, 3, 10, zero_at, last] {
                let mut bad = buf.clone();
                bad[at] ^= 1;
                assert_eq!(content.check(5, &bad), Err(5 + at as u64), "{shape:?} {at}");
            }
        }
        let zeros = Content::of("k", false);
        let mut z = vec![0u8; 50];
        zeros.fill(0, &mut z);
        assert_eq!(zeros.check(7, &z), Ok(()));
        z[20] = 1;
        assert_eq!(zeros.check(7, &z), Err(27));
    }

    #[test]
    fn keys_give_different_content() {
        let a = Content::of("step1/a.pt", true);
        let b = Content::of("step2/a.pt", true);
        let mut x = [0u8; 64];
        let mut y = [0u8; 64];
        a.fill(0, &mut x);
        b.fill(0, &mut y);
        assert_ne!(x, y);
        assert!(b.check(0, &x).is_err());
    }

    #[test]
    fn dedupe_repeats_blocks_a_mebibyte_apart_and_compression_zeroes_their_tails() {
        let s = shape(2.0, 4096, 4.0);
        assert_eq!((s.unique, s.group, s.random), (256, 512, 1024));
        assert_eq!(s.source(0), 0);
        assert_eq!(s.source(256), 0);
        assert_eq!(s.source(511), 255);
        assert_eq!(s.source(512), 256);
        assert_eq!(s.blocks_of(257).collect::<Vec<_>>(), vec![513, 769]);
        for b in 0..3000 {
            assert!(s.blocks_of(s.source(b)).any(|x| x == b), "block {b}");
        }
        let content = Content::of("k", true).reduced(s);
        let mut whole = vec![0u8; (1 << 20) + 8192];
        content.fill(0, &mut whole);
        assert_eq!(whole[..4096], whole[1 << 20..(1 << 20) + 4096]);
        assert_ne!(whole[..4096], whole[4096..8192]);
        assert!(whole[1024..4096].iter().all(|&b| b == 0));
        assert!(whole[1016..1024].iter().any(|&b| b != 0));
        let plain = Shape::default();
        assert!(plain.is_unreduced());
        assert_eq!((plain.dedupe_ratio(), plain.compress_ratio()), (1.0, 1.0));
        assert_eq!((0..5000).map(|b| plain.source(b)).max(), Some(4999));
    }

    #[test]
    fn a_body_is_located_from_the_first_block_start_in_it() {
        for shape in shapes() {
            let content = Content::of("ckpt/x.pt", true).reduced(shape);
            let head_len = shape.block as usize + 64;
            for start in [0u64, 5, shape.block, 3 * shape.block + 100, 7 << 20] {
                let mut head = vec![0u8; head_len];
                content.fill(start, &mut head);
                let found = content.locate(&head);
                assert!(found.contains(&start), "{shape:?} {start}: {found:?}");
                for &other in &found {
                    assert_eq!(content.check(other, &head), Ok(()), "{shape:?}");
                }
                if shape.group == shape.unique {
                    assert_eq!(found, vec![start]);
                }
            }
            let mut other = vec![0u8; head_len];
            Content::of("ckpt/y.pt", true)
                .reduced(shape)
                .fill(64, &mut other);
            assert!(content.locate(&other).is_empty());
        }
        assert!(Content::of("k", false).locate(&[0; 64]).is_empty());
    }

    #[test]
    fn halves_round_up_as_readme_says() {
        // tests/content.rs checks the Python version against the same numbers.
        assert_eq!(
            shape(1.25, 1536, 1.0),
            Shape {
                block: 1536,
                random: 1536,
                unique: 682,
                group: 853
            }
        );
        assert_eq!(shape(1.0, 4096, 65.536).random, 63);
        assert_eq!(shape(2.5, 3072, 1.0).group, 853);
    }

    #[test]
    fn ratios_below_one_and_blocks_off_the_grid_are_refused_naming_the_flag() {
        let bad = |r: f64, block: u64, c: f64| {
            Reduction {
                dedupe_ratio: r,
                dedupe_block: block,
                compress_ratio: c,
            }
            .shape()
            .unwrap_err()
        };
        assert!(bad(0.5, 4096, 1.0).starts_with("--dedupe-ratio 0.5: a ratio below 1"));
        assert!(bad(1.0, 4096, 0.9).starts_with("--compress-ratio 0.9"));
        assert!(bad(1.0, 4096, f64::NAN).starts_with("--compress-ratio NaN: give a finite"));
        assert!(bad(101.0, 4096, 1.0).starts_with("--dedupe-ratio 101: give 100 or less"));
        assert!(bad(1.0, 1000, 1.0).starts_with("--dedupe-block 1000"));
        assert!(bad(1.0, 4 << 20, 1.0).starts_with("--dedupe-block"));
        assert!(bad(1.0, 512, 64.0).contains("at most 32"));
    }
}
