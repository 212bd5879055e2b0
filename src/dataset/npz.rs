//! The npz container as DLIO writes it: `np.savez(f, x=records, y=record_labels)`, with
//! `records` a uint8 array of shape (d1, d2, samples_per_file) and `record_labels` the list
//! `[0] * samples_per_file` (numpy makes it int64).
//!
//! numpy's `savez` writes a *stored* (uncompressed) zip through Python's `zipfile`, opening each
//! member with `force_zip64=True` and the date 1980-01-01 00:00 (numpy 2.x):
//!
//! ```text
//! local header x.npy   30 + 5 name + 20 zip64 extra (sizes 0xffffffff, real ones in the extra)
//! x.npy                .npy v1.0 header (padded to 64 bytes) + d1·d2·spf payload bytes
//! local header y.npy   55 bytes, as above
//! y.npy                .npy v1.0 header + spf · 8 zero bytes
//! central directory    46 + 5 per member (+ a zip64 extra where a size or offset > 2³¹ − 1)
//! [zip64 end record 56 + locator 20, when the directory starts beyond 2³¹ − 1]
//! end record           22
//! ```
//!
//! so a file is its payload plus 490 + 8 · spf bytes (numpy 2.4, small shapes: two 128-byte
//! .npy headers). Every byte is a function of (d1, d2, spf, key), so the container is computed,
//! not stored: [`Npz::fill`] writes any range of it.
//!
//! **Cost.** x.npy's CRC-32 covers its whole payload and sits in the local header (bytes
//! 14..18) and in the central directory. A range that touches neither costs only its own bytes;
//! one that does costs a pass over the payload unless the range holds all of x.npy (then the
//! CRC is taken from the bytes just written) or the caller's [`super::ObjectReader`] has it
//! already. A whole-object read in chunks therefore generates the payload twice (once for the
//! CRC, once for the bytes): numpy seeks back to write it, a stream cannot.

use super::span::{copy, overlap};
use crate::content::Content;

/// Python's `zipfile.ZIP64_LIMIT`: sizes and offsets above it go to a zip64 extra field.
const ZIP64_LIMIT: u64 = (1 << 31) - 1;
/// numpy's `ARRAY_ALIGN`: .npy headers are padded to a multiple of it.
const ARRAY_ALIGN: usize = 64;
/// numpy's `GROWTH_AXIS_MAX_DIGITS`: spare spaces so the first axis can grow in place.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;
/// The zip64 version (4.5) Python writes for members opened with `force_zip64`.
const ZIP64_VERSION: u16 = 45;
/// The DOS date of 1980-01-01 (numpy's fixed member date); the time is 00:00:00.
const DOS_DATE: u16 = (1 << 5) | 1;
/// `0o600 << 16`: the permissions Python gives a member written with `ZipFile.open(name, 'w')`.
const EXTERNAL_ATTR: u32 = 0o600 << 16;
/// Bytes of a local header for a 5-character name with the zip64 extra.
const LOCAL_HEADER: u64 = 30 + 5 + 20;
/// Where the CRC-32 sits in a local header and in a central directory entry.
const LOCAL_CRC_AT: u64 = 14;
const CENTRAL_CRC_AT: u64 = 16;
/// Bytes generated at once to compute x.npy's CRC.
const CRC_CHUNK: usize = 1 << 20;

/// One npz object's layout.
#[derive(Debug, Clone)]
pub(super) struct Npz {
    x_header: Vec<u8>,
    payload: u64,
    y_header: Vec<u8>,
    labels: u64,
    /// CRC-32 of y.npy (header and zero labels): cheap, so always known.
    y_crc: u32,
}

impl Npz {
    pub(super) fn new(d1: u64, d2: u64, samples: u64) -> Npz {
        let x_header = npy_header("|u1", &[d1, d2, samples]);
        let y_header = npy_header("<i8", &[samples]);
        let labels = samples * 8;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&y_header);
        let zeros = [0u8; 4096];
        let mut left = labels;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            hasher.update(&zeros[..n]);
            left -= n as u64;
        }
        Npz {
            x_header,
            payload: d1 * d2 * samples,
            y_crc: hasher.finalize(),
            y_header,
            labels,
        }
    }

    fn x_size(&self) -> u64 {
        self.x_header.len() as u64 + self.payload
    }

    fn y_size(&self) -> u64 {
        self.y_header.len() as u64 + self.labels
    }

    /// Where the payload starts in the object.
    fn payload_at(&self) -> u64 {
        LOCAL_HEADER + self.x_header.len() as u64
    }

    /// Where y.npy's local header starts.
    fn y_at(&self) -> u64 {
        LOCAL_HEADER + self.x_size()
    }

    /// Where the central directory starts.
    fn central_at(&self) -> u64 {
        self.y_at() + LOCAL_HEADER + self.y_size()
    }

    /// The central directory and the end records, with x.npy's CRC `x_crc`.
    fn tail(&self, x_crc: u32) -> Vec<u8> {
        let central_at = self.central_at();
        let mut out = Vec::with_capacity(256);
        central_entry(&mut out, "x.npy", x_crc, self.x_size(), 0);
        central_entry(&mut out, "y.npy", self.y_crc, self.y_size(), self.y_at());
        let central_size = out.len() as u64;
        if central_at > ZIP64_LIMIT {
            let end64_at = central_at + central_size;
            out.extend_from_slice(b"PK\x06\x06");
            out.extend_from_slice(&44u64.to_le_bytes());
            out.extend_from_slice(&ZIP64_VERSION.to_le_bytes());
            out.extend_from_slice(&ZIP64_VERSION.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&2u64.to_le_bytes());
            out.extend_from_slice(&2u64.to_le_bytes());
            out.extend_from_slice(&central_size.to_le_bytes());
            out.extend_from_slice(&central_at.to_le_bytes());
            out.extend_from_slice(b"PK\x06\x07");
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&end64_at.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
        }
        out.extend_from_slice(b"PK\x05\x06");
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&(central_size.min(0xffff_ffff) as u32).to_le_bytes());
        out.extend_from_slice(&(central_at.min(0xffff_ffff) as u32).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    /// The object's size.
    pub(super) fn total(&self) -> u64 {
        self.central_at() + self.tail(0).len() as u64
    }

    /// Whether `offset..offset + len` touches a copy of x.npy's CRC.
    fn needs_x_crc(&self, offset: u64, len: u64) -> bool {
        let touches = |at: u64| offset < at + 4 && at < offset + len;
        touches(LOCAL_CRC_AT) || touches(self.central_at() + CENTRAL_CRC_AT)
    }

    /// Writes bytes `offset..offset + out.len()` of the object. `x_crc` caches x.npy's CRC
    /// across calls (see the module's note on cost).
    pub(super) fn fill(
        &self,
        content: &Content,
        x_crc: &mut Option<u32>,
        offset: u64,
        out: &mut [u8],
    ) {
        let len = out.len() as u64;
        let payload_at = self.payload_at();
        if let Some((from, range)) = overlap(payload_at, self.payload, offset, out.len()) {
            content.fill(from, &mut out[range]);
        }
        let y_at = self.y_at();
        let y_data_at = y_at + LOCAL_HEADER + self.y_header.len() as u64;
        if let Some((_, range)) = overlap(y_data_at, self.labels, offset, out.len()) {
            out[range].fill(0);
        }
        copy(LOCAL_HEADER, &self.x_header, offset, out);
        copy(y_at + LOCAL_HEADER, &self.y_header, offset, out);
        copy(
            y_at,
            &local_header("y.npy", self.y_crc, self.y_size()),
            offset,
            out,
        );
        let crc = if self.needs_x_crc(offset, len) {
            let x_at = LOCAL_HEADER;
            let crc = match *x_crc {
                Some(crc) => crc,
                None if offset <= x_at && x_at + self.x_size() <= offset + len => {
                    // The whole of x.npy is in `out` already.
                    let from = (x_at - offset) as usize;
                    crc32fast::hash(&out[from..from + self.x_size() as usize])
                }
                None => self.x_crc(content),
            };
            *x_crc = Some(crc);
            crc
        } else {
            0 // No copy of the CRC is in range.
        };
        copy(0, &local_header("x.npy", crc, self.x_size()), offset, out);
        copy(self.central_at(), &self.tail(crc), offset, out);
    }

    /// x.npy's CRC-32: one pass over the payload.
    fn x_crc(&self, content: &Content) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.x_header);
        let mut buf = vec![0u8; CRC_CHUNK.min(self.payload as usize)];
        let mut at = 0;
        while at < self.payload {
            let n = (self.payload - at).min(buf.len() as u64) as usize;
            content.fill(at, &mut buf[..n]);
            hasher.update(&buf[..n]);
            at += n as u64;
        }
        hasher.finalize()
    }
}

/// A .npy v1.0 header as numpy 2.x writes it: the dict in key order, the shape's spare spaces
/// for growth, padded with spaces to a multiple of 64 bytes and ended by a newline.
pub(super) fn npy_header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_repr = match dims.as_slice() {
        [one] => format!("({one},)"),
        many => format!("({})", many.join(", ")),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_repr}, }}");
    let first = dims.first().map_or(0, String::len);
    dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(first)));
    let hlen = dict.len() + 1;
    // numpy pads a full 64 when the header is already aligned.
    let pad = ARRAY_ALIGN - ((8 + 2 + hlen) % ARRAY_ALIGN);
    let mut out = Vec::with_capacity(10 + hlen + pad);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&((hlen + pad) as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

/// A stored member's local header, zip64-forced as Python writes it.
fn local_header(name: &str, crc: u32, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(LOCAL_HEADER as usize);
    out.extend_from_slice(b"PK\x03\x04");
    out.extend_from_slice(&ZIP64_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // flags
    out.extend_from_slice(&0u16.to_le_bytes()); // stored
    out.extend_from_slice(&0u16.to_le_bytes()); // time
    out.extend_from_slice(&DOS_DATE.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&u32::MAX.to_le_bytes());
    out.extend_from_slice(&u32::MAX.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&20u16.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out
}

/// A member's central directory entry, with a zip64 extra for what exceeds `ZIP64_LIMIT`.
fn central_entry(out: &mut Vec<u8>, name: &str, crc: u32, size: u64, header_at: u64) {
    let mut extra: Vec<u64> = Vec::new();
    let size32 = if size > ZIP64_LIMIT {
        extra.extend([size, size]);
        u32::MAX
    } else {
        size as u32
    };
    let at32 = if header_at > ZIP64_LIMIT {
        extra.push(header_at);
        u32::MAX
    } else {
        header_at as u32
    };
    let extra_len = if extra.is_empty() {
        0
    } else {
        4 + 8 * extra.len()
    };
    out.extend_from_slice(b"PK\x01\x02");
    out.extend_from_slice(&(ZIP64_VERSION | (3 << 8)).to_le_bytes()); // made by: unix, 4.5
    out.extend_from_slice(&ZIP64_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // flags
    out.extend_from_slice(&0u16.to_le_bytes()); // stored
    out.extend_from_slice(&0u16.to_le_bytes()); // time
    out.extend_from_slice(&DOS_DATE.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&size32.to_le_bytes());
    out.extend_from_slice(&size32.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&(extra_len as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // comment
    out.extend_from_slice(&0u16.to_le_bytes()); // disk
    out.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
    out.extend_from_slice(&EXTERNAL_ATTR.to_le_bytes());
    out.extend_from_slice(&at32.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    if !extra.is_empty() {
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&((8 * extra.len()) as u16).to_le_bytes());
        for v in extra {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Format, ObjectDataset};
    use super::*;

    /// CRC-32 (zip's), bit by bit: independent of crc32fast.
    fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn u16_at(b: &[u8], at: usize) -> usize {
        u16::from_le_bytes([b[at], b[at + 1]]) as usize
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn dataset(record_length: f64, stdev: f64, samples: u64) -> ObjectDataset {
        ObjectDataset {
            format: Format::Npz,
            train_prefix: "data/npz/train/".into(),
            num_files: 16,
            samples_per_file: samples,
            record_length,
            record_length_stdev: stdev,
            seed: 10,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    /// The members of a zip read from its central directory: (name, crc, data).
    fn members(zip: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let end = zip.len() - 22;
        assert_eq!(&zip[end..end + 4], b"PK\x05\x06");
        let count = u16_at(zip, end + 10);
        let mut at = u32_at(zip, end + 16) as usize;
        let mut out = Vec::new();
        for _ in 0..count {
            assert_eq!(&zip[at..at + 4], b"PK\x01\x02");
            let crc = u32_at(zip, at + 16);
            let size = u32_at(zip, at + 24) as usize;
            let (name_len, extra_len) = (u16_at(zip, at + 28), u16_at(zip, at + 30));
            let local = u32_at(zip, at + 42) as usize;
            let name = String::from_utf8(zip[at + 46..at + 46 + name_len].to_vec()).unwrap();
            assert_eq!(&zip[local..local + 4], b"PK\x03\x04");
            assert_eq!(
                u32_at(zip, local + 14),
                crc,
                "local and central CRCs of {name}"
            );
            let data_at = local + 30 + u16_at(zip, local + 26) + u16_at(zip, local + 28);
            // The zip64 extra holds the real size.
            let x = local + 30 + name_len + 4;
            let zip64 = u64::from_le_bytes(zip[x..x + 8].try_into().unwrap());
            assert_eq!(zip64 as usize, size);
            out.push((name, crc, zip[data_at..data_at + size].to_vec()));
            at += 46 + name_len + extra_len;
        }
        out
    }

    #[test]
    fn npz_sizes_crcs_and_shapes_are_numpys() {
        for (length, stdev, samples) in [(100.0, 0.0, 1), (4096.0, 2000.0, 3), (50_000.0, 9e3, 2)] {
            let d = dataset(length, stdev, samples);
            for i in 0..6 {
                let (d1, d2) = d.dims(i);
                let size = d.object_bytes(i);
                // numpy 2.4 measured: payload + 490 + 8 per sample for small shapes.
                assert_eq!(size, d1 * d2 * samples + 490 + 8 * samples, "file {i}");
                let mut zip = vec![0xaa; size as usize];
                d.read_at(i, 0, &mut zip);
                let m = members(&zip);
                assert_eq!(m.len(), 2);
                for (name, crc, data) in &m {
                    assert_eq!(*crc, crc32_bitwise(data), "{name}");
                }
                let (x, y) = (&m[0].2, &m[1].2);
                let header = String::from_utf8_lossy(&x[10..128]).into_owned();
                assert!(
                    header.starts_with(&format!(
                        "{{'descr': '|u1', 'fortran_order': False, 'shape': ({d1}, {d2}, {samples}), }}"
                    )),
                    "{header}"
                );
                assert_eq!(x.len() as u64, 128 + d1 * d2 * samples);
                assert_eq!(y.len() as u64, 128 + 8 * samples);
                assert!(y[128..].iter().all(|&b| b == 0));
                // The payload is the key's content.
                let mut want = vec![0u8; (d1 * d2 * samples) as usize];
                crate::content::Content::of(&d.key(i), true).fill(0, &mut want);
                assert_eq!(&x[128..], &want[..]);
            }
        }
    }

    #[test]
    fn ranges_and_piecewise_reads_agree_with_the_whole() {
        let d = dataset(30_000.0, 5_000.0, 2);
        for i in 0..3 {
            let size = d.object_bytes(i) as usize;
            let mut whole = vec![0u8; size];
            d.read_at(i, 0, &mut whole);
            for chunk in [1, 7, 64, 1000, 4096] {
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
            for (from, len) in [
                (0, 18),
                (13, 3),
                (size - 22, 22),
                (size - 140, 40),
                (300, 999),
            ] {
                let mut buf = vec![0u8; len];
                d.read_at(i, from as u64, &mut buf);
                assert_eq!(buf, whole[from..from + len], "{from}+{len}");
            }
        }
    }

    #[test]
    fn npy_headers_are_padded_as_numpy_pads_them() {
        // numpy 2.4: np.lib.format header bytes for these shapes are 128 long.
        assert_eq!(npy_header("|u1", &[12107, 12000, 1]).len(), 128);
        assert_eq!(npy_header("<i8", &[1]).len(), 128);
        let h = npy_header("<i8", &[3]);
        assert_eq!(&h[..10], b"\x93NUMPY\x01\x00\x76\x00");
        assert_eq!(h[127], b'\n');
        assert!(String::from_utf8_lossy(&h).contains("'shape': (3,), }"));
    }

    #[test]
    fn beyond_two_gib_the_directory_takes_zip64_fields() {
        // x.npy of 2.3 GB: the central entry carries the sizes and y's offset in an extra,
        // and the directory starts beyond 2³¹ − 1, so the zip64 end records come first.
        let npz = Npz::new(48_000, 48_000, 1);
        let central = npz.central_at();
        assert!(central > ZIP64_LIMIT);
        let tail = npz.tail(0);
        // Two entries: 46 + 5 + (4 + 16) and 46 + 5 + (4 + 8); then 56 + 20 + 22.
        assert_eq!(tail.len(), 71 + 63 + 56 + 20 + 22);
        assert_eq!(npz.total(), central + tail.len() as u64);
        let end = &tail[tail.len() - 22..];
        assert_eq!(u64::from(u32_at(end, 16)), central.min(0xffff_ffff));
        // The end records are far from the CRC: reading them costs no pass.
        assert!(!npz.needs_x_crc(npz.total() - 98, 98));
        assert!(npz.needs_x_crc(0, 18));
        assert!(npz.needs_x_crc(central + 16, 1));
        assert!(!npz.needs_x_crc(1 << 30, 1 << 20));
    }
}
