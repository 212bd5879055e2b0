//! One object's metadata as listings and HEAD describe it, and the tags its ETag is made of:
//! shared by both backends ([`super::dir`], [`super::virtual_dataset`]) and the [`super::store`]
//! over them, so none of them imports another for it.

use std::time::SystemTime;

/// One object as listings and HEAD describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size_bytes: u64,
    /// The entity tag, without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
}

/// A 128-bit tag from a few numbers (for ETags and upload ids): splitmix64 rounds.
pub fn tag_of(parts: &[u64]) -> String {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (mut a, mut b) = (0x5157_4c4f_4144u64, 0x7269_6e67u64);
    for &p in parts {
        a = mix(a ^ p);
        b = mix(b.rotate_left(17) ^ a);
    }
    format!("{a:016x}{b:016x}")
}

/// One multipart upload in progress, as ListMultipartUploads describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadInfo {
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
}
