//! The TFRecord container as DLIO's generator (`tf_generator.py`) writes it: samples_per_file
//! records, each one serialized `tf.train.Example` with two features:
//!
//! - `image`: a `BytesList` of one value, the d1·d2 bytes of a uint8 image (`record.tobytes()`);
//! - `size`: an `Int64List` of one value, DLIO's `dimension` = ⌊√record_length⌋.
//!
//! Every record of a file has the same d1 × d2 (drawn once per file), so every record has the
//! same length and record r starts at r · record length. The Example is written by hand in
//! protobuf's wire format (map entries `image` then `size`; Python's protobuf may order the map
//! otherwise, which changes no size). Each record is framed as TFRecord frames it:
//!
//! ```text
//! u64 LE data length | u32 LE masked CRC-32C of those 8 bytes | data | u32 LE masked CRC-32C of data
//! ```
//!
//! with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2³²).
//!
//! Image bytes: record r's image is the object's payload stream (`Content::of(key)`) at
//! offsets r·d1·d2 .. (r + 1)·d1·d2.
//!
//! **Cost.** A record's trailing CRC covers its data. A range that holds the record's whole data
//! takes the CRC from the bytes just written; a sequential reader ([`super::ObjectReader`])
//! carries a running CRC across calls; otherwise the record's data is generated once more
//! (one record: d1·d2 bytes, not the file).

use super::span::{copy, overlap};
use crate::content::Content;

/// Bytes generated at once to compute a record's CRC.
const CRC_CHUNK: usize = 1 << 20;

/// TFRecord's CRC mask.
pub(super) fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// A running CRC of one record's data: (record, data bytes covered, CRC so far).
pub(super) type Running = Option<(u64, u64, u32)>;

/// One TFRecord object's layout.
#[derive(Debug, Clone)]
pub(super) struct TfRecord {
    /// The 12-byte record header (length and its masked CRC), the same for every record.
    head: [u8; 12],
    /// Example bytes before the image.
    prefix: Vec<u8>,
    /// Image bytes per record (d1 · d2).
    image: u64,
    /// Example bytes after the image (the `size` feature).
    suffix: Vec<u8>,
    records: u64,
}

impl TfRecord {
    pub(super) fn new(d1: u64, d2: u64, records: u64, dimension: u64) -> TfRecord {
        let image = d1 * d2;
        let (prefix, suffix) = example_around(image, dimension);
        let data = prefix.len() as u64 + image + suffix.len() as u64;
        let len = data.to_le_bytes();
        let mut head = [0u8; 12];
        head[..8].copy_from_slice(&len);
        head[8..].copy_from_slice(&mask(crc32c::crc32c(&len)).to_le_bytes());
        TfRecord {
            head,
            prefix,
            image,
            suffix,
            records,
        }
    }

    /// Bytes of one record's data (the serialized Example).
    pub(super) fn data_len(&self) -> u64 {
        self.prefix.len() as u64 + self.image + self.suffix.len() as u64
    }

    /// Bytes of one framed record.
    fn record_len(&self) -> u64 {
        12 + self.data_len() + 4
    }

    pub(super) fn total(&self) -> u64 {
        self.records * self.record_len()
    }

    /// Writes bytes `offset..offset + out.len()` of the object. `running` carries record
    /// data's CRC across sequential calls (see the module's note on cost).
    pub(super) fn fill(
        &self,
        content: &Content,
        running: &mut Running,
        offset: u64,
        out: &mut [u8],
    ) {
        if out.is_empty() {
            return;
        }
        let rec_len = self.record_len();
        let data_len = self.data_len();
        let end = offset + out.len() as u64;
        let first = offset / rec_len;
        let last = ((end - 1) / rec_len).min(self.records.saturating_sub(1));
        for r in first..=last {
            let at = r * rec_len;
            copy(at, &self.head, offset, out);
            let data_at = at + 12;
            copy(data_at, &self.prefix, offset, out);
            let image_at = data_at + self.prefix.len() as u64;
            if let Some((from, range)) = overlap(image_at, self.image, offset, out.len()) {
                content.fill(r * self.image + from, &mut out[range]);
            }
            copy(image_at + self.image, &self.suffix, offset, out);
            // The data now in `out`: extend the running CRC if it continues it.
            if let Some((from, range)) = overlap(data_at, data_len, offset, out.len()) {
                let slice = &out[range];
                *running = match *running {
                    _ if from == 0 => Some((r, slice.len() as u64, crc32c::crc32c(slice))),
                    Some((rr, covered, crc)) if rr == r && covered == from => Some((
                        r,
                        covered + slice.len() as u64,
                        crc32c::crc32c_append(crc, slice),
                    )),
                    _ => None,
                };
            }
            let crc_at = data_at + data_len;
            if overlap(crc_at, 4, offset, out.len()).is_some() {
                let crc = match *running {
                    Some((rr, covered, crc)) if rr == r && covered == data_len => crc,
                    _ => self.data_crc(content, r),
                };
                copy(crc_at, &mask(crc).to_le_bytes(), offset, out);
            }
        }
    }

    /// Record r's data CRC-32C: one pass over its image.
    fn data_crc(&self, content: &Content, r: u64) -> u32 {
        let mut crc = crc32c::crc32c(&self.prefix);
        let mut buf = vec![0u8; CRC_CHUNK.min(self.image as usize)];
        let mut at = 0;
        while at < self.image {
            let n = (self.image - at).min(buf.len() as u64) as usize;
            content.fill(r * self.image + at, &mut buf[..n]);
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            at += n as u64;
        }
        crc32c::crc32c_append(crc, &self.suffix)
    }
}

/// Appends `v` as a protobuf varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes of `v` as a varint.
fn varint_len(v: u64) -> u64 {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// A length-delimited field's key and length (wire type 2).
fn len_field(out: &mut Vec<u8>, field: u64, len: u64) {
    varint(out, (field << 3) | 2);
    varint(out, len);
}

/// The serialized `Example{features{feature{"image": bytes_list[image bytes]},
/// feature{"size": int64_list[dimension]}}}` split around the image bytes: (prefix, suffix).
fn example_around(image: u64, dimension: u64) -> (Vec<u8>, Vec<u8>) {
    // Sizes from the inside out. Field numbers: Example.features 1, Features.feature 1 (map
    // entries: key 1, value 2), Feature.bytes_list 1, Feature.int64_list 3, *List.value 1
    // (Int64List packed).
    let bytes_list = 1 + varint_len(image) + image;
    let image_feature = 1 + varint_len(bytes_list) + bytes_list;
    let image_entry = (2 + 5) + 1 + varint_len(image_feature) + image_feature;
    let packed = varint_len(dimension);
    let int64_list = 1 + varint_len(packed) + packed;
    let size_feature = 1 + varint_len(int64_list) + int64_list;
    let size_entry = (2 + 4) + 1 + varint_len(size_feature) + size_feature;
    let features =
        1 + varint_len(image_entry) + image_entry + 1 + varint_len(size_entry) + size_entry;

    let mut prefix = Vec::new();
    len_field(&mut prefix, 1, features); // Example.features
    len_field(&mut prefix, 1, image_entry); // Features.feature
    len_field(&mut prefix, 1, 5); // key
    prefix.extend_from_slice(b"image");
    len_field(&mut prefix, 2, image_feature); // value
    len_field(&mut prefix, 1, bytes_list); // Feature.bytes_list
    len_field(&mut prefix, 1, image); // BytesList.value

    let mut suffix = Vec::new();
    len_field(&mut suffix, 1, size_entry); // Features.feature
    len_field(&mut suffix, 1, 4); // key
    suffix.extend_from_slice(b"size");
    len_field(&mut suffix, 2, size_feature); // value
    len_field(&mut suffix, 3, int64_list); // Feature.int64_list
    len_field(&mut suffix, 1, packed); // Int64List.value, packed
    varint(&mut suffix, dimension);
    debug_assert_eq!(
        (prefix.len() + suffix.len()) as u64 + image,
        1 + varint_len(features) + features
    );
    (prefix, suffix)
}

#[cfg(test)]
mod tests {
    use super::super::{Format, ObjectDataset};
    use super::*;

    /// CRC-32C (Castagnoli), bit by bit: independent of the crc32c crate.
    fn crc32c_bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82f6_3b78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn masked(data: &[u8]) -> u32 {
        let c = crc32c_bitwise(data);
        c.rotate_right(15).wrapping_add(0xa282_ead8)
    }

    fn dataset(record_length: f64, stdev: f64, samples: u64) -> ObjectDataset {
        ObjectDataset {
            format: Format::Tfrecord,
            train_prefix: "data/tf/train/".into(),
            num_files: 8,
            samples_per_file: samples,
            record_length,
            record_length_stdev: stdev,
            seed: 10,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    /// A varint at `b[*at..]`.
    fn read_varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    /// The (field, bytes) of a message's length-delimited fields; varints as their bytes.
    fn fields(b: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < b.len() {
            let key = read_varint(b, &mut at);
            assert_eq!(key & 7, 2, "only length-delimited fields");
            let len = read_varint(b, &mut at) as usize;
            out.push((key >> 3, b[at..at + len].to_vec()));
            at += len;
        }
        out
    }

    #[test]
    fn records_are_framed_checked_and_hold_dlios_example() {
        for (length, stdev, samples) in [(100.0, 0.0, 1), (4096.0, 1500.0, 5), (114_660.07, 0.0, 3)]
        {
            let d = dataset(length, stdev, samples);
            for i in 0..4 {
                let (d1, d2) = d.dims(i);
                let size = d.object_bytes(i) as usize;
                let mut file = vec![0u8; size];
                d.read_at(i, 0, &mut file);
                let mut at = 0;
                let mut records = 0;
                let mut payload = Vec::new();
                while at < size {
                    let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
                    assert_eq!(
                        u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()),
                        masked(&file[at..at + 8])
                    );
                    let data = &file[at + 12..at + 12 + len];
                    let crc =
                        u32::from_le_bytes(file[at + 12 + len..at + 16 + len].try_into().unwrap());
                    assert_eq!(crc, masked(data), "record {records} of file {i}");
                    // Example{features{feature: [image entry, size entry]}}.
                    let example = fields(data);
                    assert_eq!(example.len(), 1);
                    let entries = fields(&example[0].1);
                    assert_eq!(entries.len(), 2);
                    let image = fields(&entries[0].1);
                    assert_eq!(image[0].1, b"image");
                    let bytes_list = fields(&image[1].1);
                    assert_eq!(bytes_list[0].0, 1);
                    let value = fields(&bytes_list[0].1);
                    assert_eq!(value[0].1.len() as u64, d1 * d2);
                    payload.extend_from_slice(&value[0].1);
                    let size_entry = fields(&entries[1].1);
                    assert_eq!(size_entry[0].1, b"size");
                    let int64_list = fields(&size_entry[1].1);
                    assert_eq!(int64_list[0].0, 3);
                    let packed = fields(&int64_list[0].1);
                    let mut p = 0;
                    assert_eq!(read_varint(&packed[0].1, &mut p), d.mean_dim());
                    at += 16 + len;
                    records += 1;
                }
                assert_eq!(at, size);
                assert_eq!(records, samples);
                let mut want = vec![0u8; payload.len()];
                crate::content::Content::of(&d.key(i), true).fill(0, &mut want);
                assert_eq!(payload, want);
            }
        }
    }

    #[test]
    fn ranges_and_piecewise_reads_agree_with_the_whole() {
        let d = dataset(5000.0, 800.0, 4);
        for i in 0..3 {
            let size = d.object_bytes(i) as usize;
            let mut whole = vec![0u8; size];
            d.read_at(i, 0, &mut whole);
            for chunk in [1, 5, 333, 4096] {
                let mut reader = d.reader(i);
                let mut pieces = Vec::new();
                let mut at = 0;
                while at < size {
                    let mut buf = vec![0u8; chunk.min(size - at)];
                    reader.read_at(at as u64, &mut buf);
                    pieces.extend_from_slice(&buf);
                    at += buf.len();
                }
                assert_eq!(pieces, whole, "file {i} in chunks of {chunk}");
            }
            // Backwards and overlapping reads through one reader: the running CRC is dropped.
            let mut reader = d.reader(i);
            for (from, len) in [(size - 10, 10), (20, 3000), (0, 12), (size / 2, size / 2)] {
                let mut buf = vec![0u8; len];
                reader.read_at(from as u64, &mut buf);
                assert_eq!(buf, whole[from..from + len], "{from}+{len}");
            }
        }
    }

    #[test]
    fn resnet50_records_add_dlios_framing() {
        // 338 × 338 images, 1251 per file: 16 bytes of framing and 43 of Example per record.
        let d = dataset(114_660.07, 0.0, 1251);
        assert_eq!(d.dims(0), (338, 338));
        let tf = TfRecord::new(338, 338, 1251, 338);
        assert_eq!(tf.data_len(), 114_244 + 43);
        assert_eq!(d.object_bytes(0), 1251 * (114_244 + 43 + 16));
    }
}
