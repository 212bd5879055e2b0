//! Content checks: what `run --verify` compares each landed GET with.
//!
//! - **Hashes.** `generate` and the embedded server's virtual datasets store, in the Parquet
//!   footer's key-value metadata under [`HASHES_KEY`], the XXH3-64 (seed 0) of every column
//!   chunk's bytes: from its first page (the dictionary page, if any) through its
//!   `total_compressed_size`. The value is one group per row group, separated by `;`, each a
//!   `,`-separated list of 16 lowercase hex digits per leaf column in schema order:
//!   `0123456789abcdef,fedcba9876543210;…`. Per chunk rather than per row group, so a run
//!   that reads only some columns checks exactly the bytes it fetched.
//! - **Page headers.** A file without the hashes (written by pyarrow, say) is checked by
//!   structure instead: every page header in each chunk parses (Thrift compact protocol) and
//!   the pages' sizes add up to the chunk's length exactly.
//!
//! A leaf: it uses nothing of the crate, so the writers, the catalog and the engines share it.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use parquet::file::metadata::ColumnChunkMetaData;

/// The footer key-value metadata key that holds the chunk hashes.
pub const HASHES_KEY: &str = "ringload.chunk_xxh3_64";

/// The hash the checks compare: XXH3-64 with seed 0.
pub fn hash(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// A column chunk's file offset and length: from its dictionary page, if any, else its first
/// data page. Not `ColumnChunkMetaData::byte_range`, which panics on the negative offsets a
/// corrupt footer can carry.
pub fn chunk_span(chunk: &ColumnChunkMetaData) -> Option<(u64, u64)> {
    let offset = chunk
        .dictionary_page_offset()
        .unwrap_or_else(|| chunk.data_page_offset());
    Some((
        u64::try_from(offset).ok()?,
        u64::try_from(chunk.compressed_size()).ok()?,
    ))
}

/// The [`HASHES_KEY`] value for `row_groups[rg][column]` hashes.
pub fn encode_hashes(row_groups: &[Vec<u64>]) -> String {
    row_groups
        .iter()
        .map(|columns| {
            columns
                .iter()
                .map(|h| format!("{h:016x}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Reads a [`HASHES_KEY`] value for a file of `row_groups` row groups of `columns` leaf
/// columns each.
pub fn decode_hashes(value: &str, row_groups: usize, columns: usize) -> Result<Vec<u64>, String> {
    let groups: Vec<&str> = if value.is_empty() {
        Vec::new()
    } else {
        value.split(';').collect()
    };
    if groups.len() != row_groups {
        return Err(format!(
            "{HASHES_KEY} lists {} row groups; the file has {row_groups}",
            groups.len()
        ));
    }
    // Never more than the text can hold (16 digits and a separator each), whatever the counts.
    let mut hashes = Vec::with_capacity(row_groups.saturating_mul(columns).min(value.len() / 16));
    for (rg, group) in groups.iter().enumerate() {
        let before = hashes.len();
        for hex in group.split(',') {
            if hex.len() != 16 {
                return Err(format!(
                    "{HASHES_KEY}, row group {rg}: '{}' is not 16 hex digits",
                    hex.chars().take(20).collect::<String>()
                ));
            }
            let h = u64::from_str_radix(hex, 16).map_err(|_| {
                format!("{HASHES_KEY}, row group {rg}: '{hex}' is not 16 hex digits")
            })?;
            hashes.push(h);
        }
        if hashes.len() - before != columns {
            return Err(format!(
                "{HASHES_KEY}, row group {rg}: {} hashes for {columns} columns",
                hashes.len() - before
            ));
        }
    }
    Ok(hashes)
}

/// One column chunk of a file, as the footer places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    pub row_group: u32,
    /// The leaf column's index in the schema.
    pub column: u32,
    /// File offset of the chunk's first page.
    pub offset: u64,
    pub len_bytes: u64,
    /// Its XXH3-64 from the footer, when the file carries [`HASHES_KEY`].
    pub xxh3: Option<u64>,
}

impl Chunk {
    pub fn end(&self) -> u64 {
        self.offset + self.len_bytes
    }
}

/// What to check in one GET: the chunks of one file (shared by all its GETs) that lie inside
/// the GET's range, in offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    chunks: Arc<[Chunk]>,
    range: Range<usize>,
}

impl Check {
    /// The chunks of `chunks` (a file's, in offset order) that lie whole inside
    /// `offset..offset + len_bytes`.
    pub fn within(chunks: &Arc<[Chunk]>, offset: u64, len_bytes: u64) -> Check {
        let end = offset + len_bytes;
        let first = chunks.partition_point(|c| c.offset < offset);
        let last = first + chunks[first..].partition_point(|c| c.end() <= end);
        Check {
            chunks: Arc::clone(chunks),
            range: first..last,
        }
    }

    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks[self.range.clone()]
    }
}

/// What checking one or more GETs found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verified {
    /// Bytes whose hash matched the footer's.
    pub hashed_bytes: u64,
    /// Bytes of chunks checked by their page headers (no hash in the footer).
    pub paged_bytes: u64,
    /// Page headers parsed in those chunks.
    pub pages: u64,
    /// Bytes of GETs that no chunk covers (e.g. a bloom filter between chunks).
    pub unchecked_bytes: u64,
    /// Whole objects (npz, jpeg, tfrecord) compared byte for byte with what `generate` writes.
    #[serde(default)]
    pub objects: u64,
    /// Their bytes.
    #[serde(default)]
    pub object_bytes: u64,
}

impl Verified {
    pub fn add(&mut self, other: Verified) {
        self.hashed_bytes += other.hashed_bytes;
        self.paged_bytes += other.paged_bytes;
        self.pages += other.pages;
        self.unchecked_bytes += other.unchecked_bytes;
        self.objects += other.objects;
        self.object_bytes += other.object_bytes;
    }

    /// Which check ran: "xxh3", "page headers", both, "generated bytes" (whole objects), or
    /// none.
    pub fn method(&self) -> &'static str {
        match (self.hashed_bytes > 0, self.paged_bytes > 0) {
            (true, false) => "xxh3",
            (false, true) => "page headers",
            (true, true) => "xxh3 and page headers",
            (false, false) if self.object_bytes > 0 => "generated bytes",
            (false, false) => "none",
        }
    }

    /// Bytes checked by any method.
    pub fn checked_bytes(&self) -> u64 {
        self.hashed_bytes + self.paged_bytes + self.object_bytes
    }
}

/// A GET whose bytes are not what the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub row_group: u32,
    pub column: u32,
    /// The chunk's file offset and length.
    pub offset: u64,
    pub len_bytes: u64,
    pub what: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "row group {}, column {} (bytes {}..{}): {}",
            self.row_group,
            self.column,
            self.offset,
            self.offset + self.len_bytes,
            self.what
        )
    }
}

/// Checks `body`, the bytes of a GET starting at file offset `offset`, against `check`.
pub fn verify(check: &Check, offset: u64, body: &[u8]) -> Result<Verified, Mismatch> {
    let mut verified = Verified::default();
    let mut covered = 0u64;
    for chunk in check.chunks() {
        let mismatch = |what: String| Mismatch {
            row_group: chunk.row_group,
            column: chunk.column,
            offset: chunk.offset,
            len_bytes: chunk.len_bytes,
            what,
        };
        let bytes = usize::try_from(chunk.offset - offset)
            .ok()
            .zip(usize::try_from(chunk.len_bytes).ok())
            .and_then(|(from, len)| body.get(from..from.checked_add(len)?))
            .ok_or_else(|| mismatch(format!("the GET holds only {} bytes", body.len())))?;
        match chunk.xxh3 {
            Some(expected) => {
                let got = hash(bytes);
                if got != expected {
                    return Err(mismatch(format!(
                        "XXH3-64 {got:016x}, the footer says {expected:016x}"
                    )));
                }
                verified.hashed_bytes += chunk.len_bytes;
            }
            None => {
                verified.pages += walk_pages(bytes).map_err(mismatch)?;
                verified.paged_bytes += chunk.len_bytes;
            }
        }
        covered += chunk.len_bytes;
    }
    verified.unchecked_bytes = (body.len() as u64).saturating_sub(covered);
    Ok(verified)
}

/// Checks `body`, the bytes of a GET sent as several ranged requests (a column subset's
/// chunks), landed packed in the order of `ranges` (file offset, length), against `check`:
/// each range's chunks are checked where that range landed.
pub fn verify_packed(
    check: &Check,
    ranges: impl Iterator<Item = (u64, u64)>,
    body: &[u8],
) -> Result<Verified, Mismatch> {
    let mut verified = Verified::default();
    let mut at = 0usize;
    for (offset, len_bytes) in ranges {
        let len = usize::try_from(len_bytes).unwrap_or(usize::MAX);
        let part = body.get(at..at.saturating_add(len)).unwrap_or_default();
        verified.add(verify(
            &Check::within(&check.chunks, offset, len_bytes),
            offset,
            part,
        )?);
        at = at.saturating_add(len);
    }
    verified.unchecked_bytes += (body.len() as u64).saturating_sub(at as u64);
    Ok(verified)
}

/// Walks the pages of one column chunk: each page header parses and the pages fill `chunk`
/// exactly. Returns the number of pages.
pub fn walk_pages(chunk: &[u8]) -> Result<u64, String> {
    let mut at = 0usize;
    let mut pages = 0u64;
    while at < chunk.len() {
        let (header_len, body_len) = page_header(&chunk[at..])
            .map_err(|e| format!("page header {pages} at chunk byte {at}: {e}"))?;
        let next = at
            .checked_add(header_len)
            .and_then(|a| a.checked_add(body_len))
            .filter(|&n| n <= chunk.len())
            .ok_or_else(|| {
                format!(
                    "page {pages} at chunk byte {at} claims {body_len} bytes after its \
                     {header_len}-byte header, past the chunk's end at {}",
                    chunk.len()
                )
            })?;
        at = next;
        pages += 1;
    }
    if pages == 0 {
        return Err("the chunk holds no page".into());
    }
    Ok(pages)
}

/// Thrift compact types.
const T_BOOL_TRUE: u8 = 1;
const T_BOOL_FALSE: u8 = 2;
const T_I8: u8 = 3;
const T_I16: u8 = 4;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_DOUBLE: u8 = 7;
const T_BINARY: u8 = 8;
const T_LIST: u8 = 9;
const T_SET: u8 = 10;
const T_MAP: u8 = 11;
const T_STRUCT: u8 = 12;
const T_UUID: u8 = 13;

/// Nesting deeper than this is not a page header.
const MAX_DEPTH: u32 = 16;

/// Reads a Parquet `PageHeader` at the start of `bytes`: its length in bytes and the page's
/// `compressed_page_size` (field 3).
pub fn page_header(bytes: &[u8]) -> Result<(usize, usize), String> {
    let mut r = Compact { bytes, at: 0 };
    let mut compressed = None;
    let mut seen_type = false;
    let mut last_id = 0i16;
    while let Some((id, kind)) = r.field_header(&mut last_id)? {
        match (id, kind) {
            (1, T_I32) => {
                r.varint()?;
                seen_type = true;
            }
            (3, T_I32) => {
                let size = zigzag32(r.varint()?);
                compressed = Some(
                    usize::try_from(size)
                        .map_err(|_| format!("negative compressed_page_size {size}"))?,
                );
            }
            _ => r.skip(kind, 0)?,
        }
    }
    match (seen_type, compressed) {
        (true, Some(size)) => Ok((r.at, size)),
        _ => Err("a page header without its type or compressed_page_size".into()),
    }
}

fn zigzag32(v: u64) -> i64 {
    let v = v as u32;
    i64::from((v >> 1) as i32 ^ -((v & 1) as i32))
}

/// A cursor over Thrift compact-protocol bytes.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| format!("cut short at byte {}", self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<(), String> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| format!("a {n}-byte value runs past the end at byte {}", self.at))?;
        self.at = end;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("a varint longer than 10 bytes at byte {}", self.at))
    }

    /// The next field's id and type, or `None` at the struct's stop byte.
    fn field_header(&mut self, last_id: &mut i16) -> Result<Option<(i16, u8)>, String> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let kind = b & 0x0f;
        let delta = b >> 4;
        let id = if delta == 0 {
            let v = self.varint()? as u16;
            ((v >> 1) as i16) ^ -((v & 1) as i16)
        } else {
            last_id.wrapping_add(i16::from(delta))
        };
        *last_id = id;
        Ok(Some((id, kind)))
    }

    /// Skips one value of type `kind`.
    fn skip(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        match kind {
            T_BOOL_TRUE | T_BOOL_FALSE => Ok(()),
            T_I8 => self.take(1),
            T_I16 | T_I32 | T_I64 => self.varint().map(drop),
            T_DOUBLE => self.take(8),
            T_BINARY => {
                let len = self.varint()?;
                self.take(len)
            }
            T_UUID => self.take(16),
            T_LIST | T_SET => {
                let b = self.byte()?;
                let elem = b & 0x0f;
                let size = match b >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                for _ in 0..size {
                    self.element(elem, depth)?;
                }
                Ok(())
            }
            T_MAP => {
                let size = self.varint()?;
                if size == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                for _ in 0..size {
                    self.element(kinds >> 4, depth)?;
                    self.element(kinds & 0x0f, depth)?;
                }
                Ok(())
            }
            T_STRUCT => {
                let mut last_id = 0i16;
                while let Some((_, field)) = self.field_header(&mut last_id)? {
                    self.skip(field, depth + 1)?;
                }
                Ok(())
            }
            other => Err(format!("unknown Thrift type {other} at byte {}", self.at)),
        }
    }

    /// One element of a list, set or map: booleans take a byte there.
    fn element(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        if self.at >= self.bytes.len() {
            return Err(format!("cut short at byte {}", self.at));
        }
        match kind {
            T_BOOL_TRUE | T_BOOL_FALSE => self.take(1),
            _ => self.skip(kind, depth + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_round_trip_and_bad_values_are_named() {
        let groups = vec![vec![1, u64::MAX], vec![0xabc, 7]];
        let text = encode_hashes(&groups);
        assert_eq!(
            text,
            "0000000000000001,ffffffffffffffff;0000000000000abc,0000000000000007"
        );
        assert_eq!(
            decode_hashes(&text, 2, 2).unwrap(),
            vec![1, u64::MAX, 0xabc, 7]
        );
        assert!(
            decode_hashes(&text, 3, 2)
                .unwrap_err()
                .contains("2 row groups")
        );
        assert!(
            decode_hashes(&text, 2, 3)
                .unwrap_err()
                .contains("2 hashes for 3")
        );
        assert!(
            decode_hashes("xyz", 1, 1)
                .unwrap_err()
                .contains("16 hex digits")
        );
        assert_eq!(decode_hashes("", 0, 4).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn xxh3_matches_the_reference_vectors() {
        // From the xxHash reference implementation (XXH3_64bits, seed 0).
        assert_eq!(hash(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(hash(b"a"), 0xe6c6_32b6_1e96_4e1f);
    }

    /// A data page header as parquet-rs writes one: type, sizes, a nested DataPageHeader.
    fn header(compressed: i32) -> Vec<u8> {
        let zz = |v: i32| ((v << 1) ^ (v >> 31)) as u32;
        let mut out = Vec::new();
        let varint = |out: &mut Vec<u8>, mut v: u64| loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        };
        out.push(0x15); // field 1, i32: type = DATA_PAGE (0)
        varint(&mut out, u64::from(zz(0)));
        out.push(0x15); // field 2, i32: uncompressed_page_size
        varint(&mut out, u64::from(zz(compressed)));
        out.push(0x15); // field 3, i32: compressed_page_size
        varint(&mut out, u64::from(zz(compressed)));
        out.push(0x2c); // field 5, struct: DataPageHeader
        out.push(0x15); // num_values
        varint(&mut out, u64::from(zz(3)));
        out.push(0x15); // encoding
        varint(&mut out, 0);
        out.push(0x00); // end of DataPageHeader
        out.push(0x00); // end of PageHeader
        out
    }

    #[test]
    fn pages_must_fill_the_chunk_exactly() {
        let mut chunk = header(5);
        chunk.extend_from_slice(b"hello");
        chunk.extend(header(3));
        chunk.extend_from_slice(b"abc");
        assert_eq!(walk_pages(&chunk), Ok(2));
        let short = &chunk[..chunk.len() - 1];
        assert!(
            walk_pages(short)
                .unwrap_err()
                .contains("past the chunk's end")
        );
        let mut long = chunk.clone();
        long.push(0xff);
        assert!(walk_pages(&long).is_err());
        assert!(walk_pages(&[]).unwrap_err().contains("no page"));
    }

    #[test]
    fn verify_names_the_chunk_that_differs() {
        let a = b"first chunk".to_vec();
        let mut b = header(4);
        b.extend_from_slice(b"page");
        let chunks: Arc<[Chunk]> = Arc::from(vec![
            Chunk {
                row_group: 0,
                column: 0,
                offset: 100,
                len_bytes: a.len() as u64,
                xxh3: Some(hash(&a)),
            },
            Chunk {
                row_group: 0,
                column: 1,
                offset: 100 + a.len() as u64,
                len_bytes: b.len() as u64,
                xxh3: None,
            },
        ]);
        let mut body = a.clone();
        body.extend_from_slice(&b);
        let check = Check::within(&chunks, 100, body.len() as u64);
        assert_eq!(check.chunks().len(), 2);
        let v = verify(&check, 100, &body).unwrap();
        assert_eq!(
            (v.hashed_bytes, v.paged_bytes, v.pages, v.unchecked_bytes),
            (a.len() as u64, b.len() as u64, 1, 0)
        );
        assert_eq!(v.method(), "xxh3 and page headers");
        body[3] ^= 1;
        let e = verify(&check, 100, &body).unwrap_err();
        assert_eq!((e.row_group, e.column), (0, 0));
        assert!(e.to_string().contains("the footer says"), "{e}");
        // A GET over the second chunk only checks that one.
        let second = Check::within(&chunks, 111, b.len() as u64);
        assert_eq!(second.chunks().len(), 1);
        assert_eq!(verify(&second, 111, &b).unwrap().pages, 1);
    }
}
