//! S3's additional checksums, as the AWS SDKs name them: the algorithm a run sends
//! ([`Checksum`], `--checksum`), a part's digest computed over its bytes ([`Hasher`]), and a
//! multipart object's checksum from its parts' ([`ObjectChecksum`]) — a leaf, shared by the
//! plan (which names the algorithm), both engines (which compute and send it) and the embedded
//! server (which verifies it).
//!
//! **Forms.** A checksum goes as a header (`x-amz-checksum-crc32c: <base64>`) on each
//! UploadPart and PutObject: the whole part is generated before its head is sent, so its
//! digest is known in time and no `aws-chunked` trailer is needed. CreateMultipartUpload names
//! the algorithm (`x-amz-checksum-algorithm`) and the type (`x-amz-checksum-type`): the CRCs
//! complete as **FULL_OBJECT** (the CRC of the whole object, which S3 computes by combining
//! the parts' CRCs, [`combine`]; sent as the Complete's header), SHA-256 as **COMPOSITE** (the
//! SHA-256 of the parts' binary digests in order, then `-N`). Every value is the digest's
//! big-endian bytes in base64.

use sha2::Digest as _;

/// `--checksum`: the additional checksum each upload carries.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Checksum {
    /// CRC-32C (Castagnoli), FULL_OBJECT: the AWS SDKs' choice where the CPU has it in
    /// hardware.
    #[default]
    Crc32c,
    /// CRC-64/NVME, FULL_OBJECT.
    Crc64nvme,
    /// SHA-256, COMPOSITE.
    Sha256,
    /// No checksum (a store that refuses or mishandles them).
    None,
}

/// An algorithm a digest is made with: the three `--checksum` sends, and CRC-32, which other
/// clients (boto3) send and the embedded server verifies too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64nvme,
    Sha256,
}

/// Every algorithm, for the server to find the header a request carries.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Crc32,
    Algorithm::Crc32c,
    Algorithm::Crc64nvme,
    Algorithm::Sha256,
];

impl Checksum {
    /// The algorithm, `None` for `--checksum none`.
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            Checksum::Crc32c => Some(Algorithm::Crc32c),
            Checksum::Crc64nvme => Some(Algorithm::Crc64nvme),
            Checksum::Sha256 => Some(Algorithm::Sha256),
            Checksum::None => None,
        }
    }
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Checksum::Crc32c => "crc32c",
            Checksum::Crc64nvme => "crc64nvme",
            Checksum::Sha256 => "sha256",
            Checksum::None => "none",
        })
    }
}

impl Algorithm {
    /// S3's name (`x-amz-checksum-algorithm`'s value): `CRC32C`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64nvme => "CRC64NVME",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The header a digest goes in: `x-amz-checksum-crc32c`.
    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// A part's element in CompleteMultipartUpload's XML: `ChecksumCRC32C`.
    pub fn element(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "ChecksumCRC32",
            Algorithm::Crc32c => "ChecksumCRC32C",
            Algorithm::Crc64nvme => "ChecksumCRC64NVME",
            Algorithm::Sha256 => "ChecksumSHA256",
        }
    }

    /// Whether a multipart object's checksum is FULL_OBJECT (the CRCs) rather than COMPOSITE.
    pub fn full_object(self) -> bool {
        self != Algorithm::Sha256
    }

    /// `x-amz-checksum-type`'s value for a multipart upload.
    pub fn object_type(self) -> &'static str {
        if self.full_object() {
            "FULL_OBJECT"
        } else {
            "COMPOSITE"
        }
    }

    /// CreateMultipartUpload's headers: the algorithm and how the object's checksum is made.
    pub fn create_headers(self) -> [(&'static str, &'static str); 2] {
        [
            ("x-amz-checksum-algorithm", self.name()),
            ("x-amz-checksum-type", self.object_type()),
        ]
    }

    /// The algorithm S3 names `name` (`CRC32C`, any case).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        ALGORITHMS
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The CRC as `crc-fast` names it: its folding with the CPU's carry-less multiply
    /// (VPCLMULQDQ where there is AVX-512) is about twice the `crc32c` crate's speed for
    /// CRC32C on this machine (0.030 against 0.071 CPU-s/GiB over 32 MiB parts).
    fn crc_fast(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algorithm::Crc64nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            Algorithm::Sha256 => None,
        }
    }

    /// A CRC's width in bytes (0 for SHA-256).
    fn crc_bytes(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64nvme => 8,
            Algorithm::Sha256 => 0,
        }
    }
}

/// A digest: its algorithm and bytes (big-endian for a CRC), without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub algorithm: Algorithm,
    bytes: [u8; 32],
    len: usize,
}

impl Digest {
    fn of_crc(algorithm: Algorithm, crc: u64) -> Digest {
        let len = algorithm.crc_bytes();
        let mut bytes = [0; 32];
        bytes[..len].copy_from_slice(&crc.to_be_bytes()[8 - len..]);
        Digest {
            algorithm,
            bytes,
            len,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// A CRC's value (0 for SHA-256).
    pub fn crc(&self) -> u64 {
        self.bytes().iter().fold(0, |v, b| (v << 8) | u64::from(*b))
    }

    /// Lowercase hex of the bytes (`x-amz-content-sha256`'s form).
    pub fn hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(2 * self.len);
        for b in self.bytes() {
            out.push(DIGITS[usize::from(b >> 4)] as char);
            out.push(DIGITS[usize::from(b & 15)] as char);
        }
        out
    }

    /// The header's value: base64 of the bytes.
    pub fn base64(&self) -> String {
        base64(self.bytes())
    }
}

/// A digest being computed over bytes given in order.
#[derive(Debug, Clone)]
pub enum Hasher {
    Crc(Algorithm, Box<crc_fast::Digest>),
    Sha256(Box<sha2::Sha256>),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm.crc_fast() {
            None => Hasher::Sha256(Box::default()),
            Some(crc) => Hasher::Crc(algorithm, Box::new(crc_fast::Digest::new(crc))),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc(_, digest) => digest.update(data),
            Hasher::Sha256(sha) => sha.update(data),
        }
    }

    pub fn finish(self) -> Digest {
        match self {
            Hasher::Crc(algorithm, digest) => Digest::of_crc(algorithm, digest.finalize()),
            Hasher::Sha256(sha) => {
                let mut bytes = [0; 32];
                bytes.copy_from_slice(&sha.finalize());
                Digest {
                    algorithm: Algorithm::Sha256,
                    bytes,
                    len: 32,
                }
            }
        }
    }
}

/// The digest of `data` with `algorithm`.
pub fn digest(algorithm: Algorithm, data: &[u8]) -> Digest {
    let mut hasher = Hasher::new(algorithm);
    hasher.update(data);
    hasher.finish()
}

/// The CRC of `a || b` from the CRC of `a`, the CRC of `b` and `b`'s length (zlib's
/// `crc32_combine`, per algorithm: the `crc32c` crate's for CRC32C, `crc-fast`'s for the
/// others). `None` for SHA-256, which does not combine.
pub fn combine(algorithm: Algorithm, crc_a: u64, crc_b: u64, len_b: u64) -> Option<u64> {
    match algorithm {
        Algorithm::Crc32c => Some(u64::from(crc32c::crc32c_combine(
            crc_a as u32,
            crc_b as u32,
            len_b as usize,
        ))),
        Algorithm::Sha256 => None,
        _ => algorithm
            .crc_fast()
            .map(|crc| crc_fast::checksum_combine(crc, crc_a, crc_b, len_b)),
    }
}

/// A multipart object's checksum, built from its parts' digests in part order: FULL_OBJECT
/// for a CRC (the parts' CRCs combined: the CRC of the whole object), COMPOSITE for SHA-256
/// (the SHA-256 of the parts' binary digests, `-N`).
#[derive(Debug, Clone)]
pub struct ObjectChecksum {
    algorithm: Algorithm,
    crc: u64,
    composite: sha2::Sha256,
    parts: u32,
}

impl ObjectChecksum {
    pub fn new(algorithm: Algorithm) -> ObjectChecksum {
        ObjectChecksum {
            algorithm,
            // The CRC of no bytes is 0 for every algorithm here (init and xorout cancel).
            crc: 0,
            composite: sha2::Sha256::new(),
            parts: 0,
        }
    }

    /// Adds the next part: its digest and length.
    pub fn push(&mut self, part: &Digest, len: u64) {
        self.parts += 1;
        match combine(self.algorithm, self.crc, part.crc(), len) {
            Some(crc) => self.crc = crc,
            None => self.composite.update(part.bytes()),
        }
    }

    /// The object's checksum as its header carries it: base64, and `-N` when COMPOSITE.
    pub fn value(&self) -> String {
        if self.algorithm.full_object() {
            Digest::of_crc(self.algorithm, self.crc).base64()
        } else {
            let sha = self.composite.clone().finalize();
            format!("{}-{}", base64(&sha), self.parts)
        }
    }
}

/// What a CompleteMultipartUpload carries of an upload's checksums: each part's, listed in
/// its `<Part>` (`element`, `parts` in part order), and the Complete's headers: the type, as
/// CreateMultipartUpload named it (a store takes a Complete without it as COMPOSITE), and
/// the object's FULL_OBJECT checksum (a CRC; for COMPOSITE SHA-256 the store computes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub element: &'static str,
    pub parts: Vec<String>,
    pub headers: Vec<(&'static str, String)>,
    /// The object's checksum: FULL_OBJECT, or COMPOSITE with its `-N`.
    pub object: String,
}

impl Completion {
    /// The completion of an upload whose parts, in order, have `parts` (digest, length).
    pub fn of(algorithm: Algorithm, parts: &[(Digest, u64)]) -> Completion {
        let mut object = ObjectChecksum::new(algorithm);
        for (digest, len) in parts {
            object.push(digest, *len);
        }
        let value = object.value();
        Completion {
            element: algorithm.element(),
            parts: parts.iter().map(|(d, _)| d.base64()).collect(),
            headers: std::iter::once(("x-amz-checksum-type", algorithm.object_type().to_string()))
                .chain(
                    algorithm
                        .full_object()
                        .then(|| (algorithm.header(), value.clone())),
                )
                .collect(),
            object: value,
        }
    }
}

/// Standard base64 with padding (RFC 4648 §4), as S3's checksum headers carry it.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An object's checksum as a HEAD with `x-amz-checksum-mode: ENABLED` returns it: the
/// algorithm of the `x-amz-checksum-*` header present, its value (base64; a COMPOSITE one ends
/// in `-N`), and whether it is FULL_OBJECT (`x-amz-checksum-type`; without it, a value with no
/// `-N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChecksum {
    pub algorithm: Algorithm,
    pub value: String,
    pub full_object: bool,
}

impl StoredChecksum {
    /// From an answer's headers (`header(name)`: its value, names lowercase).
    pub fn from_headers<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<StoredChecksum> {
        let (algorithm, value) = ALGORITHMS
            .into_iter()
            .find_map(|a| header(a.header()).map(|v| (a, v.trim().to_string())))?;
        let full_object = match header("x-amz-checksum-type") {
            Some(t) => t.trim().eq_ignore_ascii_case("FULL_OBJECT"),
            None => !value.contains('-'),
        };
        Some(StoredChecksum {
            algorithm,
            value,
            full_object,
        })
    }

    /// Whether the CRCs of an object's blocks can be checked against it: a FULL_OBJECT CRC.
    pub fn checkable(&self) -> bool {
        self.full_object && self.algorithm.full_object()
    }
}

/// The CRC of an object read as contiguous blocks, each block's bytes given in order (a
/// restore's ranged GETs, one after another per block): the blocks' CRCs combined into the
/// object's, as S3 computes a FULL_OBJECT checksum.
#[derive(Debug, Clone)]
pub struct BlockCrcs {
    algorithm: Algorithm,
    /// Each block's CRC so far, and its length.
    blocks: Vec<(u64, u64)>,
}

impl BlockCrcs {
    /// For a FULL_OBJECT CRC algorithm (`None` for SHA-256, which does not combine).
    pub fn new(algorithm: Algorithm, blocks: usize) -> Option<BlockCrcs> {
        algorithm.full_object().then(|| BlockCrcs {
            algorithm,
            blocks: vec![(0, 0); blocks],
        })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The next bytes of block `block`.
    pub fn update(&mut self, block: usize, bytes: &[u8]) {
        let crc = digest(self.algorithm, bytes).crc();
        self.push(block, crc, bytes.len() as u64);
    }

    /// The CRC of the next `len` bytes of block `block`, computed elsewhere.
    pub fn push(&mut self, block: usize, crc: u64, len: u64) {
        let (block_crc, block_len) = &mut self.blocks[block];
        *block_crc = combine(self.algorithm, *block_crc, crc, len).unwrap_or(0);
        *block_len += len;
    }

    /// The object's checksum as a header carries it (base64).
    pub fn value(self) -> String {
        let mut object = ObjectChecksum::new(self.algorithm);
        for (crc, len) in self.blocks {
            object.push(&Digest::of_crc(self.algorithm, crc), len);
        }
        object.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: &[u8] = b"123456789";

    /// The catalogue's check values (the CRC of "123456789") and SHA-256's FIPS 180-2 vector.
    #[test]
    fn digests_match_the_known_vectors() {
        assert_eq!(digest(Algorithm::Crc32c, CHECK).crc(), 0xE306_9283);
        // Two implementations agree (the hasher's and the combine's crate).
        let long: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 253) as u8).collect();
        assert_eq!(
            digest(Algorithm::Crc32c, &long).crc(),
            u64::from(crc32c::crc32c(&long))
        );
        assert_eq!(digest(Algorithm::Crc32, CHECK).crc(), 0xCBF4_3926);
        assert_eq!(
            digest(Algorithm::Crc64nvme, CHECK).crc(),
            0xAE8B_1486_0A79_9888
        );
        assert_eq!(digest(Algorithm::Crc32c, CHECK).base64(), "4waSgw==");
        assert_eq!(
            digest(Algorithm::Sha256, b"abc").base64(),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
        // Zero bytes: every CRC here is 0.
        for a in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64nvme] {
            assert_eq!(digest(a, b"").crc(), 0, "{a:?}");
        }
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn combined_crcs_are_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for a in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64nvme] {
            let whole = digest(a, &data).crc();
            for cut in [0, 1, 4, 4096, 9_999, 10_000] {
                let (x, y) = data.split_at(cut);
                let combined = combine(a, digest(a, x).crc(), digest(a, y).crc(), y.len() as u64);
                assert_eq!(combined, Some(whole), "{a:?} cut at {cut}");
            }
            // Parts in order, from nothing: the full-object checksum.
            let mut object = ObjectChecksum::new(a);
            for part in data.chunks(3_000) {
                object.push(&digest(a, part), part.len() as u64);
            }
            assert_eq!(object.value(), digest(a, &data).base64(), "{a:?}");
        }
        assert_eq!(combine(Algorithm::Sha256, 1, 2, 3), None);
    }

    #[test]
    fn sha256_completes_as_a_composite_of_the_part_digests() {
        let (a, b) = (
            digest(Algorithm::Sha256, b"a"),
            digest(Algorithm::Sha256, b"b"),
        );
        let mut object = ObjectChecksum::new(Algorithm::Sha256);
        object.push(&a, 1);
        object.push(&b, 1);
        let mut both = sha2::Sha256::new();
        both.update(a.bytes());
        both.update(b.bytes());
        assert_eq!(object.value(), format!("{}-2", base64(&both.finalize())));
    }

    #[test]
    fn names_are_s3s() {
        assert_eq!(
            Algorithm::from_name("crc64nvme"),
            Some(Algorithm::Crc64nvme)
        );
        assert_eq!(Algorithm::Crc32c.header(), "x-amz-checksum-crc32c");
        assert_eq!(Algorithm::Sha256.object_type(), "COMPOSITE");
        assert_eq!(Checksum::default().algorithm(), Some(Algorithm::Crc32c));
        assert_eq!(Checksum::None.algorithm(), None);
    }

    /// A HEAD's checksum headers read back, and an object's CRC from its blocks read in any
    /// split: the same as the CRC of the whole.
    #[test]
    fn an_objects_crc_from_its_blocks_is_the_whole_ones() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for algorithm in [Algorithm::Crc32c, Algorithm::Crc64nvme, Algorithm::Crc32] {
            let whole = digest(algorithm, &data).base64();
            for cut in [1, 4096, 33_333, 99_999] {
                let mut crcs = BlockCrcs::new(algorithm, 2).unwrap();
                // Block 0 in two ranges, block 1 in one.
                crcs.update(0, &data[..cut / 2]);
                crcs.update(0, &data[cut / 2..cut]);
                crcs.update(1, &data[cut..]);
                assert_eq!(crcs.value(), whole, "{algorithm:?} cut {cut}");
            }
        }
        let headers = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        };
        let full = StoredChecksum::from_headers(headers(&[
            ("x-amz-checksum-crc32c", "yZRlqg=="),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ]))
        .unwrap();
        assert!(full.checkable() && full.algorithm == Algorithm::Crc32c);
        let composite = StoredChecksum::from_headers(headers(&[(
            "x-amz-checksum-sha256",
            "n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=-3",
        )]))
        .unwrap();
        assert!(!composite.checkable());
        assert_eq!(
            StoredChecksum::from_headers(headers(&[("etag", "x")])),
            None
        );
    }
}
