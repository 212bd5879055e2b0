//! Checkpoint content: the bytes a checkpoint object carries, computable at any offset, so a
//! writer generates each part straight into its send buffer, a reader checks each landed range,
//! and the embedded server's sink checks an upload or serves an object without storing it.
//!
//! # The algorithm (for a check written in another language)
//!
//! - An object's **seed** is the 64-bit FNV-1a hash of its key (the bucket-relative key, UTF-8
//!   bytes, as sent on the wire, e.g. `checkpoints/llama3_8b/global_epoch1_step1/zero_pp_rank_0_mp_rank_0_model_states.pt`):
//!   start from `0xcbf29ce484222325`; for each byte, `h = (h ^ byte) * 0x100000001b3` (mod
//!   2⁶⁴). The key names the checkpoint (step), the rank and the object, so the content is a
//!   function of (checkpoint, rank, object, offset).
//! - The object is a sequence of 64-bit **words**, little-endian. Word `i` (bytes `8i..8i+8`)
//!   is `splitmix64(seed ^ (i * 0x9e3779b97f4a7c15))` (mod 2⁶⁴), with splitmix64's finalizer:
//!   `z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
//!   z ^ (z >> 31)`. The byte at offset `o` is byte `o % 8` of word `o / 8`; the last word is
//!   cut at the object's size.
//! - With `checkpoint.randomize_tensor: False` every byte is zero (DLIO writes zero tensors).
//!
//! ```text
//! python: def word(seed, i):
//!     z = (seed ^ (i * 0x9e3779b97f4a7c15)) & M
//!     z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
//!     z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
//!     return z ^ (z >> 31)
//! ```
//!
//! A leaf: it uses nothing of the crate.

/// What an object's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// Pseudo-random words from the key's seed (`randomize_tensor: True`, DLIO's default).
    Random { seed: u64 },
    /// Zero bytes (`randomize_tensor: False`).
    Zeros,
}

impl Content {
    /// The content of the object `key`: random from its seed, or zeros.
    pub fn of(key: &str, randomize: bool) -> Content {
        if randomize {
            Content::Random { seed: seed(key) }
        } else {
            Content::Zeros
        }
    }

    /// Writes the object's bytes `offset..offset + buf.len()` into `buf`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match *self {
            Content::Zeros => buf.fill(0),
            Content::Random { seed } => fill_random(seed, offset, buf),
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
            Content::Random { seed } => check_random(seed, offset, buf),
        }
    }
}

/// FNV-1a 64 of `key`.
pub fn seed(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Word `i` of the object seeded `seed`.
#[inline(always)]
pub fn word(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The cut of `buf` (object bytes from `offset`) into a head before the first word boundary,
/// whole words, and a tail.
fn split(offset: u64, len: usize) -> (usize, usize) {
    let head = ((8 - (offset % 8)) % 8) as usize;
    let head = head.min(len);
    let words = (len - head) / 8;
    (head, words)
}

fn fill_random(seed: u64, offset: u64, buf: &mut [u8]) {
    let (head, words) = split(offset, buf.len());
    if head > 0 {
        let w = word(seed, offset / 8).to_le_bytes();
        let from = (offset % 8) as usize;
        buf[..head].copy_from_slice(&w[from..from + head]);
    }
    let first = (offset + head as u64) / 8;
    let (middle, tail) = buf[head..].split_at_mut(words * 8);
    for (k, chunk) in middle.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(seed, first + k as u64).to_le_bytes());
    }
    if !tail.is_empty() {
        let w = word(seed, first + words as u64).to_le_bytes();
        let n = tail.len();
        tail.copy_from_slice(&w[..n]);
    }
}

fn check_random(seed: u64, offset: u64, buf: &[u8]) -> Result<(), u64> {
    let (head, words) = split(offset, buf.len());
    let first_diff = |at: usize, expected: &[u8], got: &[u8]| -> u64 {
        let k = expected
            .iter()
            .zip(got)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        offset + (at + k) as u64
    };
    if head > 0 {
        let w = word(seed, offset / 8).to_le_bytes();
        let from = (offset % 8) as usize;
        if buf[..head] != w[from..from + head] {
            return Err(first_diff(0, &w[from..from + head], &buf[..head]));
        }
    }
    let first = (offset + head as u64) / 8;
    let (middle, tail) = buf[head..].split_at(words * 8);
    for (k, chunk) in middle.chunks_exact(8).enumerate() {
        let expected = word(seed, first + k as u64);
        let got = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        if got != expected {
            return Err(first_diff(head + k * 8, &expected.to_le_bytes(), chunk));
        }
    }
    if !tail.is_empty() {
        let w = word(seed, first + words as u64).to_le_bytes();
        if tail != &w[..tail.len()] {
            return Err(first_diff(head + words * 8, &w[..tail.len()], tail));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole object's bytes, word by word, the slow way.
    fn reference(seed: u64, len: usize) -> Vec<u8> {
        (0..len.div_ceil(8) as u64)
            .flat_map(|i| word(seed, i).to_le_bytes())
            .take(len)
            .collect()
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
    }

    #[test]
    fn any_window_equals_the_whole_object() {
        let content = Content::of("ckpt/global_epoch1_step1/x.pt", true);
        let Content::Random { seed } = content else {
            panic!("random")
        };
        let whole = reference(seed, 203);
        for offset in 0..20u64 {
            for len in [0usize, 1, 3, 7, 8, 9, 15, 16, 17, 64, 100] {
                let end = (offset as usize + len).min(whole.len());
                let mut buf = vec![0xAAu8; end - offset as usize];
                content.fill(offset, &mut buf);
                assert_eq!(
                    buf,
                    whole[offset as usize..end],
                    "offset {offset} len {len}"
                );
                assert_eq!(content.check(offset, &buf), Ok(()));
            }
        }
    }

    #[test]
    fn check_names_the_first_wrong_byte() {
        let content = Content::of("k", true);
        let mut buf = vec![0u8; 100];
        content.fill(5, &mut buf);
        for at in [0usize, 2, 3, 10, 99] {
            let mut bad = buf.clone();
            bad[at] ^= 1;
            assert_eq!(content.check(5, &bad), Err(5 + at as u64));
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
}
