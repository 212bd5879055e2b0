//! Whole-object datasets (npz, jpeg, tfrecord): DLIO's names and size distribution, and the
//! bytes of every object, computed from the file index alone.
//!
//! One description ([`ObjectDataset`]) serves `generate` (which writes the objects), the embedded
//! server's virtual store (which serves them without a disk) and the plan (which knows every
//! object's size without listing). Nothing here is stored per object: a million objects cost
//! nothing until someone lists them.
//!
//! Sizes follow DLIO's generators (`data_generator/*.py`): d = ⌊√L⌋, σ = stdev ÷ (2√L), and
//! each file draws two normals d1, d2, each `max(int(N(d, σ)), 1)` (truncated toward zero,
//! floored at 1, no upper clamp); the payload is d1 · d2 · samples_per_file bytes. DLIO seeds
//! numpy once (`np.random.seed(10)`) and draws file after file; ringload draws file i's two
//! normals from a counter-based stream (splitmix64 of the seed and 2i, 2i + 1, Box–Muller), so
//! file i's size is the same on every machine, for any process count and without drawing the
//! files before it. The distribution is DLIO's; numpy's stream is not reproduced bit for bit.
//!
//! Containers: npz is numpy's `savez` zip ([`npz`]), tfrecord is TFRecord-framed
//! `tf.train.Example` records ([`tfrecord`]), jpeg is the raw payload. Any range of any object
//! is computed from its index; [`ObjectReader`] reads one object in pieces and keeps the
//! checksums it has computed, so a chunked whole-object read does not recompute them.

use std::fmt;

pub mod check;
mod npz;
mod span;
mod tfrecord;

/// The generation seed DLIO's generators use (`np.random.seed(10)`).
pub const DLIO_GENERATION_SEED: u64 = 10;

/// The on-store format of a whole-object dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// numpy `savez`: a zip of `x.npy` (uint8, d1 × d2 × samples) and `y.npy` (labels).
    Npz,
    /// As the DLIO fork that MLPerf Storage v3.0 runs writes them for object storage: d1 · d2
    /// raw random bytes, not JPEG-encoded, named `.jpeg`. For retinanet (record_length 322,957,
    /// no spread) that is 568 × 568 = 322,624 bytes per object, not the configured 322,957.
    Jpeg,
    /// TFRecord files of `tf.train.Example` records, one bytes feature each.
    Tfrecord,
}

impl Format {
    /// `dataset.format`'s value, as DLIO spells it.
    pub fn parse(name: &str) -> Option<Format> {
        match name.to_ascii_lowercase().as_str() {
            "npz" => Some(Format::Npz),
            "jpeg" | "jpg" => Some(Format::Jpeg),
            "tfrecord" => Some(Format::Tfrecord),
            _ => None,
        }
    }

    /// The file name extension DLIO gives it.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Npz => "npz",
            Format::Jpeg => "jpeg",
            Format::Tfrecord => "tfrecord",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.extension())
    }
}

/// A whole-object dataset as DLIO lays it out.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ObjectDataset {
    pub format: Format,
    /// Where the files are, ending in `/`: `<data_folder>/train/`.
    pub train_prefix: String,
    pub num_files: u64,
    pub samples_per_file: u64,
    /// DLIO's `record_length_bytes` (may be fractional: resnet50's 114,660.07).
    pub record_length: f64,
    /// DLIO's `record_length_bytes_stdev`.
    pub record_length_stdev: f64,
    /// The seed the sizes are drawn with ([`DLIO_GENERATION_SEED`]).
    pub seed: u64,
    /// Whether the payload bytes are random (else zeros).
    pub randomize: bool,
    /// How random payload is laid out: the dedupe and compression ratios (`generate
    /// --dedupe-ratio`…; unique and incompressible, as DLIO writes, by default).
    pub content: crate::content::Shape,
}

impl ObjectDataset {
    /// The side of DLIO's square sample: ⌊√L⌋.
    pub fn mean_dim(&self) -> u64 {
        self.record_length.max(0.0).sqrt().floor() as u64
    }

    /// The standard deviation of one side: stdev ÷ (2√L) (0 when L is 0).
    pub fn dim_sigma(&self) -> f64 {
        if self.record_length <= 0.0 {
            0.0
        } else {
            self.record_length_stdev / (2.0 * self.record_length.sqrt())
        }
    }

    /// DLIO's name of file `i` ([`object_name`]).
    pub fn key(&self, i: u64) -> String {
        object_name(
            &self.train_prefix,
            i,
            self.num_files,
            self.format.extension(),
        )
    }

    /// The index of `key` if it is one of this dataset's names ([`parse_object_name`]).
    pub fn index_of(&self, key: &str) -> Option<u64> {
        parse_object_name(key, &self.train_prefix, self.format.extension())
            .and_then(|(i, n)| (n == self.num_files).then_some(i))
    }

    /// The first index whose key sorts after `key` (S3's `start-after`), for listing from the
    /// middle without holding the keys.
    pub fn first_after(&self, key: &str) -> u64 {
        // Keys are in index order; find the first one greater than `key` by bisection.
        let (mut lo, mut hi) = (0u64, self.num_files);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid).as_str() <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// File `i`'s two sides, DLIO's `max(int(N(d, σ)), 1)` each.
    pub fn dims(&self, i: u64) -> (u64, u64) {
        let d = self.mean_dim() as f64;
        let sigma = self.dim_sigma();
        if sigma == 0.0 {
            let d = (d as u64).max(1);
            return (d, d);
        }
        let (z0, z1) = normal_pair(self.seed, i);
        let side = |z: f64| -> u64 {
            let x = d + sigma * z;
            // int() truncates toward zero; then the floor at 1.
            (x.trunc() as i64).max(1) as u64
        };
        (side(z0), side(z1))
    }

    /// The payload of file `i`: d1 · d2 · samples_per_file bytes of uint8.
    pub fn payload_bytes(&self, i: u64) -> u64 {
        let (d1, d2) = self.dims(i);
        d1 * d2 * self.samples_per_file
    }

    /// The size of object `i` on the store, headers and framing included.
    pub fn object_bytes(&self, i: u64) -> u64 {
        self.reader(i).len()
    }

    /// Writes bytes `offset..offset + out.len()` of object `i` into `out`. The caller keeps
    /// within [`ObjectDataset::object_bytes`]. A range that touches an npz's x.npy CRC costs a
    /// pass over the payload (see [`ObjectReader`] to read an object in pieces).
    pub fn read_at(&self, i: u64, offset: u64, out: &mut [u8]) {
        self.reader(i).read_at(offset, out);
    }

    /// A reader of object `i`, for reading it in pieces.
    pub fn reader(&self, i: u64) -> ObjectReader {
        let (d1, d2) = self.dims(i);
        let layout = match self.format {
            Format::Jpeg => Layout::Raw(d1 * d2 * self.samples_per_file),
            Format::Npz => Layout::Npz(npz::Npz::new(d1, d2, self.samples_per_file)),
            Format::Tfrecord => Layout::Tfrecord(tfrecord::TfRecord::new(
                d1,
                d2,
                self.samples_per_file,
                self.mean_dim(),
            )),
        };
        ObjectReader {
            content: crate::content::Content::of(&self.key(i), self.randomize)
                .reduced(self.content),
            layout,
            npz_crc: None,
            running: None,
        }
    }
}

/// One object's container layout.
#[derive(Debug, Clone)]
enum Layout {
    Raw(u64),
    Npz(npz::Npz),
    Tfrecord(tfrecord::TfRecord),
}

/// One object of an [`ObjectDataset`], read in pieces at any offsets. It keeps what its
/// checksums cost: an npz's x.npy CRC once computed, and a TFRecord record's running CRC-32C
/// while reads go forward, so reading an object front to back in chunks generates an npz's
/// payload twice (its CRC precedes it) and a TFRecord's once.
#[derive(Debug, Clone)]
pub struct ObjectReader {
    content: crate::content::Content,
    layout: Layout,
    npz_crc: Option<u32>,
    running: tfrecord::Running,
}

impl ObjectReader {
    /// The object's size.
    pub fn len(&self) -> u64 {
        match &self.layout {
            Layout::Raw(n) => *n,
            Layout::Npz(npz) => npz.total(),
            Layout::Tfrecord(tf) => tf.total(),
        }
    }

    /// Whether the object has no bytes (never: every side is at least 1).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes bytes `offset..offset + out.len()` of the object into `out`, within
    /// [`ObjectReader::len`].
    pub fn read_at(&mut self, offset: u64, out: &mut [u8]) {
        match &self.layout {
            Layout::Raw(_) => self.content.fill(offset, out),
            Layout::Npz(npz) => npz.fill(&self.content, &mut self.npz_crc, offset, out),
            Layout::Tfrecord(tf) => tf.fill(&self.content, &mut self.running, offset, out),
        }
    }
}

/// Two standard normals for file `i` from a counter-based stream: Box–Muller over two
/// uniforms, each from splitmix64 of the seed and the counter.
fn normal_pair(seed: u64, i: u64) -> (f64, f64) {
    let uniform = |n: u64| -> f64 {
        let w = crate::content::word(seed, n);
        // 53 random bits in (0, 1]: never 0, so the logarithm is finite.
        ((w >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    };
    let u1 = uniform(2 * i);
    let u2 = uniform(2 * i + 1);
    let r = (-2.0 * u1.ln()).sqrt();
    let theta = 2.0 * std::f64::consts::PI * u2;
    (r * theta.cos(), r * theta.sin())
}

/// DLIO's name of whole object `i` of `n`: `<prefix>img_<i>_of_<n>.<extension>`, `i`
/// zero-padded to the digits of `n` (`len(str(n))`), so key order is index order.
pub fn object_name(prefix: &str, i: u64, n: u64, extension: &str) -> String {
    let width = n.to_string().len();
    format!("{prefix}img_{i:0width$}_of_{n}.{extension}")
}

/// `(i, n)` when `key` is exactly [`object_name`]`(prefix, i, n, extension)` with `i < n`: the
/// index padded to the digits of `n`, `n` without leading zeros. Anything else is `None`.
pub fn parse_object_name(key: &str, prefix: &str, extension: &str) -> Option<(u64, u64)> {
    let name = key.strip_prefix(prefix)?.strip_prefix("img_")?;
    let (index, rest) = name.split_once("_of_")?;
    let total = rest.strip_suffix(extension)?.strip_suffix('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(total) {
        return None;
    }
    let (i, n): (u64, u64) = (index.parse().ok()?, total.parse().ok()?);
    let canonical = n.to_string() == total && index.len() == total.len();
    (canonical && i < n).then_some((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_parse_back_only_as_dlio_writes_them() {
        assert_eq!(object_name("p/", 7, 12, "npz"), "p/img_07_of_12.npz");
        assert_eq!(object_name("", 0, 1, "jpeg"), "img_0_of_1.jpeg");
        assert_eq!(object_name("", 3, 0, "npz"), "img_3_of_0.npz");
        for (key, parsed) in [
            ("p/img_07_of_12.npz", Some((7, 12))),
            ("p/img_11_of_12.npz", Some((11, 12))),
            ("p/img_0_of_1.npz", Some((0, 1))),
            (
                "p/img_09999999_of_10000000.npz",
                Some((9_999_999, 10_000_000)),
            ),
            // Not padded to N's digits, padded too far, N with a leading zero.
            ("p/img_7_of_12.npz", None),
            ("p/img_007_of_12.npz", None),
            ("p/img_07_of_012.npz", None),
            // The index at or past N.
            ("p/img_12_of_12.npz", None),
            ("p/img_0_of_0.npz", None),
            // Another prefix or extension, a missing part, signs, other characters.
            ("q/img_07_of_12.npz", None),
            ("p/img_07_of_12.jpeg", None),
            ("p/img_07_of_12npz", None),
            ("p/img__of_12.npz", None),
            ("p/img_07_of_.npz", None),
            ("p/img_+7_of_12.npz", None),
            ("p/img_07_of_+2.npz", None),
            ("p/img_07_of_12.npz.npz", None),
            ("p/img_07_of_12_of_12.npz", None),
            ("p/im_07_of_12.npz", None),
            ("", None),
        ] {
            assert_eq!(parse_object_name(key, "p/", "npz"), parsed, "{key}");
        }
        // u64's widest N, and one past it.
        let n = u64::MAX;
        let key = object_name("", n - 1, n, "npz");
        assert_eq!(parse_object_name(&key, "", "npz"), Some((n - 1, n)));
        assert_eq!(
            parse_object_name("img_0_of_18446744073709551616.npz", "", "npz"),
            None
        );
    }

    fn unet3d(files: u64) -> ObjectDataset {
        ObjectDataset {
            format: Format::Npz,
            train_prefix: "data/unet3d/train/".into(),
            num_files: files,
            samples_per_file: 1,
            record_length: 146_600_628.0,
            record_length_stdev: 68_341_808.0,
            seed: DLIO_GENERATION_SEED,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    #[test]
    fn names_are_dlios_zero_padded_and_parse_back() {
        let d = unet3d(7200);
        assert_eq!(d.key(0), "data/unet3d/train/img_0000_of_7200.npz");
        assert_eq!(d.key(7199), "data/unet3d/train/img_7199_of_7200.npz");
        assert_eq!(d.index_of(&d.key(42)), Some(42));
        assert_eq!(d.index_of("data/unet3d/train/img_42_of_7200.npz"), None);
        assert_eq!(d.index_of("data/unet3d/train/img_7200_of_7200.npz"), None);
        assert_eq!(d.first_after(""), 0);
        assert_eq!(d.first_after(&d.key(99)), 100);
        assert_eq!(
            d.first_after("data/unet3d/train/img_0099_of_7200.npz~"),
            100
        );
        assert_eq!(d.first_after("zzz"), 7200);
    }

    #[test]
    fn retinanet_is_568_squared_with_no_spread() {
        let d = ObjectDataset {
            format: Format::Jpeg,
            record_length: 322_957.0,
            record_length_stdev: 0.0,
            ..unet3d(1_170_301)
        };
        assert_eq!(d.dims(0), (568, 568));
        assert_eq!(d.object_bytes(1_170_300), 322_624);
        assert_eq!(d.key(5), "data/unet3d/train/img_0000005_of_1170301.jpeg");
    }

    #[test]
    fn unet3d_sides_have_dlios_mean_and_sigma() {
        let d = unet3d(7200);
        assert_eq!(d.mean_dim(), 12107);
        assert!((d.dim_sigma() - 2822.2).abs() < 0.1, "{}", d.dim_sigma());
        let n: f64 = 7200.0;
        let sides: Vec<f64> = (0..7200)
            .flat_map(|i| {
                let (a, b) = d.dims(i);
                [a as f64, b as f64]
            })
            .collect();
        let mean = sides.iter().sum::<f64>() / sides.len() as f64;
        let sd =
            (sides.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / sides.len() as f64).sqrt();
        let se = 2822.2 / (2.0 * n).sqrt();
        assert!((mean - 12107.0).abs() < 3.0 * se, "mean side {mean}");
        assert!(
            (sd - 2822.2).abs() < 3.0 * 2822.2 / (2.0 * (2.0 * n)).sqrt(),
            "sd {sd}"
        );
        // The payloads d1 · d2 of 7,200 files: DLIO's computed mean 146.8 MB and spread
        // 48.9 MB (reference B2; the configured 68.3 MB stdev is not what the two-normal draw
        // gives), each within three standard errors.
        let payloads: Vec<f64> = (0..7200).map(|i| d.payload_bytes(i) as f64).collect();
        let pm = payloads.iter().sum::<f64>() / n;
        let psd = (payloads.iter().map(|p| (p - pm).powi(2)).sum::<f64>() / n).sqrt();
        let want_sd = 48.9e6;
        assert!(
            (pm - 146.8e6).abs() < 3.0 * want_sd / n.sqrt(),
            "payload mean {pm}"
        );
        assert!(
            (psd - want_sd).abs() < 3.0 * want_sd / (2.0 * n).sqrt() + 0.1e6,
            "payload sd {psd}"
        );
        // The same index gives the same size, whatever else was drawn.
        assert_eq!(d.dims(1234), unet3d(7200).dims(1234));
    }
}
