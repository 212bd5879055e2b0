//! `run --verify` of a whole object: a landed body compared, byte for byte, with what
//! [`ObjectDataset::read_at`] makes for that object (what `ringload generate` writes and the
//! embedded virtual store serves).
//!
//! The expected bytes are made a piece at a time into the caller's scratch buffer (reused from
//! GET to GET), through one [`super::ObjectReader`] per body, so an npz's CRC is computed once
//! and a TFRecord's running CRC goes forward with the pieces: nothing the size of the object
//! is allocated.

use std::fmt;
use std::sync::Arc;

use super::ObjectDataset;

/// The bytes of a scratch buffer a comparison makes at a time.
pub const PIECE_BYTES: usize = 64 << 10;

/// Object `index` of `dataset`: what a whole-object GET's body must be under `--verify`.
/// Cheap to clone (the dataset is shared).
#[derive(Debug, Clone)]
pub struct ObjectRef {
    pub dataset: Arc<ObjectDataset>,
    pub index: u64,
}

/// Two references are equal when they name the same object of the same (shared) dataset.
impl PartialEq for ObjectRef {
    fn eq(&self, other: &ObjectRef) -> bool {
        self.index == other.index
            && (Arc::ptr_eq(&self.dataset, &other.dataset) || self.dataset == other.dataset)
    }
}

impl Eq for ObjectRef {}

/// A body that is not the object's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMismatch {
    /// The object's offset of the first byte that differs (the shorter length, when one is a
    /// prefix of the other).
    pub at: u64,
    /// The body's byte there and the expected one (`None` past either's end).
    pub got: Option<u8>,
    pub expected: Option<u8>,
    pub body_bytes: u64,
    pub object_bytes: u64,
}

impl fmt::Display for ObjectMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.got, self.expected) {
            (Some(got), Some(expected)) => {
                write!(f, "byte {} is {got:#04x}, not {expected:#04x}", self.at)?
            }
            _ => write!(
                f,
                "the body is {} bytes, the object {} (their first {} bytes agree)",
                self.body_bytes, self.object_bytes, self.at
            )?,
        }
        f.write_str(
            "; the store's bytes are not what `ringload generate` writes for this dataset \
             (content version 2, with the --dedupe-ratio, --dedupe-block and --compress-ratio \
             given here; DLIO's generator, or another writer, fills objects with other bytes): \
             run without --verify",
        )
    }
}

impl ObjectRef {
    /// Object `index` of the same dataset.
    pub fn at(&self, index: u64) -> ObjectRef {
        ObjectRef {
            dataset: Arc::clone(&self.dataset),
            index,
        }
    }

    /// Compares `body` (the whole object, as it landed) with the object's bytes, making them
    /// [`PIECE_BYTES`] at a time in `scratch` (grown to that once, then reused). `Ok` holds the
    /// bytes compared.
    pub fn compare(&self, body: &[u8], scratch: &mut Vec<u8>) -> Result<u64, ObjectMismatch> {
        if scratch.len() < PIECE_BYTES {
            scratch.resize(PIECE_BYTES, 0);
        }
        let mut reader = self.dataset.reader(self.index);
        let object_bytes = reader.len();
        let common = body
            .len()
            .min(usize::try_from(object_bytes).unwrap_or(usize::MAX));
        let mut offset = 0;
        while offset < common {
            let n = (common - offset).min(PIECE_BYTES);
            let expected = &mut scratch[..n];
            reader.read_at(offset as u64, expected);
            let got = &body[offset..offset + n];
            if got != expected {
                let k = got
                    .iter()
                    .zip(expected.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(ObjectMismatch {
                    at: (offset + k) as u64,
                    got: Some(got[k]),
                    expected: Some(expected[k]),
                    body_bytes: body.len() as u64,
                    object_bytes,
                });
            }
            offset += n;
        }
        if body.len() as u64 != object_bytes {
            return Err(ObjectMismatch {
                at: common as u64,
                got: None,
                expected: None,
                body_bytes: body.len() as u64,
                object_bytes,
            });
        }
        Ok(object_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{DLIO_GENERATION_SEED, Format};

    fn dataset(format: Format, length: f64, stdev: f64) -> Arc<ObjectDataset> {
        Arc::new(ObjectDataset {
            format,
            train_prefix: "data/x/train/".into(),
            num_files: 12,
            samples_per_file: 2,
            record_length: length,
            record_length_stdev: stdev,
            seed: DLIO_GENERATION_SEED,
            randomize: true,
            content: crate::content::Shape::default(),
        })
    }

    fn body(object: &ObjectRef) -> Vec<u8> {
        let mut out = vec![0; object.dataset.object_bytes(object.index) as usize];
        object.dataset.read_at(object.index, 0, &mut out);
        out
    }

    #[test]
    fn a_body_with_one_flipped_byte_is_caught_at_that_offset() {
        for format in [Format::Npz, Format::Jpeg, Format::Tfrecord] {
            // Objects of a few pieces, so a flip lands in a later piece too.
            let object = ObjectRef {
                dataset: dataset(format, 90_000.0, 20_000.0),
                index: 7,
            };
            let good = body(&object);
            assert!(good.len() > 2 * PIECE_BYTES, "{format}: {}", good.len());
            let mut scratch = Vec::new();
            assert_eq!(
                object.compare(&good, &mut scratch),
                Ok(good.len() as u64),
                "{format}"
            );
            assert_eq!(scratch.len(), PIECE_BYTES, "one scratch, reused");
            // The first byte, a container byte, one past a piece's end and the last.
            for at in [0, 3, PIECE_BYTES, PIECE_BYTES + 1, good.len() - 1] {
                let mut bad = good.clone();
                bad[at] ^= 0x40;
                let mismatch = object.compare(&bad, &mut scratch).unwrap_err();
                assert_eq!(mismatch.at, at as u64, "{format}");
                assert_eq!(
                    (mismatch.got, mismatch.expected),
                    (Some(good[at] ^ 0x40), Some(good[at])),
                    "{format}"
                );
                let text = mismatch.to_string();
                assert!(
                    text.contains(&format!("byte {at} is"))
                        && text.contains("not what `ringload generate` writes")
                        && text.ends_with("run without --verify"),
                    "{text}"
                );
            }
            // Another object's bytes are not this one's.
            let other = ObjectRef {
                index: 8,
                ..object.clone()
            };
            assert!(other.compare(&good, &mut scratch).is_err(), "{format}");
        }
    }

    #[test]
    fn a_body_of_another_length_is_caught_where_it_ends() {
        let object = ObjectRef {
            dataset: dataset(Format::Jpeg, 10_000.0, 0.0),
            index: 1,
        };
        let good = body(&object);
        let mut scratch = Vec::new();
        let short = object
            .compare(&good[..good.len() - 5], &mut scratch)
            .unwrap_err();
        assert_eq!(
            (short.at, short.got, short.body_bytes),
            (good.len() as u64 - 5, None, good.len() as u64 - 5)
        );
        assert!(
            short.to_string().contains("first") && short.to_string().contains("bytes agree"),
            "{short}"
        );
        let mut long = good.clone();
        long.push(0);
        let long = object.compare(&long, &mut scratch).unwrap_err();
        assert_eq!(
            (long.at, long.object_bytes),
            (good.len() as u64, good.len() as u64)
        );
    }
}
