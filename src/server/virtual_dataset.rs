//! A virtual dataset: every training file of a workload served at full size from metadata, one
//! real footer and one shared row-group template, the trick the Flux study's test server used.
//!
//! With the generator's writer settings (uncompressed, PLAIN, no statistics, no dictionary) a
//! row group's bytes do not depend on where it sits in the file (page headers carry sizes, not
//! offsets) and all row groups of the same row count have the same length. So a file is served
//! as
//!
//! ```text
//! "PAR1" | template(rows of rg 0) | … | template(rows of rg n-1) | tail
//! ```
//!
//! where the templates are row groups written by the real writer on seeded random data (one per
//! distinct row count: at most two), and the tail (page index and footer) comes from
//! [`datagen::probe_file`], which writes the whole file with zeros and keeps its end. The footer's
//! offsets describe exactly this layout; [`VirtualDataset::build`] checks that the template
//! lengths agree with it before serving anything. Memory: the templates (one row group each,
//! ~99 MiB for Flux) and the tail, whatever the number of files.

use std::time::SystemTime;

use bytes::Bytes;

use crate::catalog::{self, CatalogError};
use crate::datagen::{self, Fill};
use crate::exit::{self, ExitClass};
use crate::schema::{DatasetSpec, ProbedFile};
use crate::units;
use crate::verify;

use super::error::S3Error;
use super::object::{ObjectInfo, tag_of};

/// Why a virtual dataset could not be laid out.
#[derive(Debug, thiserror::Error)]
pub enum VirtualError {
    #[error("cannot write the virtual dataset's template files: {0}")]
    Writer(#[from] parquet::errors::ParquetError),
    #[error("cannot read the virtual dataset's template layout: {0}")]
    Layout(#[from] CatalogError),
    #[error("the writer's layout cannot be served from templates: {0}")]
    NotTemplatable(String),
}

impl ExitClass for VirtualError {
    /// The workload cannot be laid out: a configuration error.
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// One stretch of a virtual file.
#[derive(Debug, Clone)]
struct Segment {
    offset: u64,
    bytes: Bytes,
}

/// The served dataset.
#[derive(Debug)]
pub struct VirtualDataset {
    pub bucket: String,
    /// Workload name and file count, for messages.
    pub label: String,
    /// Keys in S3 order (byte-wise), each with its file index.
    keys: Vec<(String, usize)>,
    pub file_size_bytes: u64,
    /// The layout shared by every file, in offset order, covering `0..file_size_bytes`.
    segments: Vec<Segment>,
    /// Bytes held by templates and tail.
    pub resident_bytes: u64,
    seed: u64,
    pub created: SystemTime,
}

/// Writes a one-row-group file of `rows` rows with seeded random values and returns the row
/// group's bytes (from offset 4 to the end of its last column chunk).
fn row_group_template(spec: &DatasetSpec, rows: u64) -> Result<Bytes, VirtualError> {
    let one = DatasetSpec {
        rows_per_file: rows,
        row_group_rows: rows,
        ..spec.clone()
    };
    let file = datagen::write_file(&one, Fill::for_file(spec.seed, 0), Vec::new(), |_| {})?;
    let file = Bytes::from(file);
    let probe = ProbedFile {
        size_bytes: file.len() as u64,
        tail: file.clone(),
    };
    let layout = catalog::computed(&one, &probe, 1, None, false)?;
    let span = layout
        .files
        .first()
        .and_then(|f| f.row_groups.first())
        .copied()
        .ok_or_else(|| VirtualError::NotTemplatable("the template has no row group".into()))?;
    if span.offset != 4 {
        return Err(VirtualError::NotTemplatable(format!(
            "the template's row group starts at {}, not 4",
            span.offset
        )));
    }
    Ok(file.slice(4..(4 + span.len_bytes) as usize))
}

impl VirtualDataset {
    /// Lays out `files` files of `spec` (this writes one whole file's worth of zeros through
    /// the encoder, and one row group per distinct row count of random data).
    pub fn build(
        bucket: &str,
        label: &str,
        spec: &DatasetSpec,
        files: usize,
    ) -> Result<VirtualDataset, VirtualError> {
        let probe = datagen::probe_virtual_file(spec)?;
        let layout = catalog::computed(spec, &probe, 1, None, true)?;
        let file = layout
            .files
            .first()
            .ok_or_else(|| VirtualError::NotTemplatable("no file laid out".into()))?;
        let mut templates: Vec<(u64, Bytes)> = Vec::new();
        let mut segments = vec![Segment {
            offset: 0,
            bytes: Bytes::from_static(b"PAR1"),
        }];
        let mut offset = 4;
        for (i, rg) in file.row_groups.iter().enumerate() {
            if rg.offset != offset {
                return Err(VirtualError::NotTemplatable(format!(
                    "row group {i} starts at {}, not right after the previous one at {offset}",
                    rg.offset
                )));
            }
            let template = match templates.iter().find(|(rows, _)| *rows == rg.rows) {
                Some((_, t)) => t.clone(),
                None => {
                    let t = row_group_template(spec, rg.rows)?;
                    templates.push((rg.rows, t.clone()));
                    t
                }
            };
            if template.len() as u64 != rg.len_bytes {
                return Err(VirtualError::NotTemplatable(format!(
                    "a {}-row group is {} bytes in the footer but {} in the template",
                    rg.rows,
                    rg.len_bytes,
                    template.len()
                )));
            }
            // The footer's hashes were taken from the probe's own row groups: the template
            // must hold the same bytes, or `run --verify` would fail on a healthy server.
            let chunks = file.chunks.as_deref().unwrap_or_default();
            for chunk in chunks.iter().filter(|c| c.row_group as usize == i) {
                let from = (chunk.offset - rg.offset) as usize;
                let bytes = template.get(from..from + chunk.len_bytes as usize);
                if bytes.map(verify::hash) != chunk.xxh3 {
                    return Err(VirtualError::NotTemplatable(format!(
                        "row group {i}, column {}: the template's bytes differ from the \
                         probed file's",
                        chunk.column
                    )));
                }
            }
            segments.push(Segment {
                offset,
                bytes: template,
            });
            offset += rg.len_bytes;
        }
        let tail_len = probe.size_bytes - offset;
        if tail_len > probe.tail.len() as u64 {
            return Err(VirtualError::NotTemplatable(format!(
                "the page index and footer take {tail_len} bytes, more than the probe keeps"
            )));
        }
        let tail = probe.tail.slice(probe.tail.len() - tail_len as usize..);
        segments.push(Segment {
            offset,
            bytes: tail.clone(),
        });
        let mut keys: Vec<(String, usize)> = (0..files).map(|i| (spec.file_key(i), i)).collect();
        keys.sort();
        let resident_bytes =
            templates.iter().map(|(_, t)| t.len() as u64).sum::<u64>() + tail.len() as u64;
        Ok(VirtualDataset {
            bucket: bucket.to_string(),
            label: label.to_string(),
            keys,
            file_size_bytes: probe.size_bytes,
            segments,
            resident_bytes,
            seed: spec.seed,
            created: SystemTime::now(),
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "virtual {}: {} file{} of {} = {} in bucket '{}' ({} held in memory)",
            self.label,
            self.keys.len(),
            if self.keys.len() == 1 { "" } else { "s" },
            units::bytes(self.file_size_bytes),
            units::bytes(self.file_size_bytes * self.keys.len() as u64),
            self.bucket,
            units::bytes(self.resident_bytes),
        )
    }

    pub fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        if bucket == self.bucket {
            Ok(())
        } else {
            Err(S3Error::no_such_bucket(bucket))
        }
    }

    fn info_at(&self, position: usize) -> ObjectInfo {
        let (key, index) = &self.keys[position];
        ObjectInfo {
            key: key.clone(),
            size_bytes: self.file_size_bytes,
            etag: tag_of(&[self.seed, *index as u64, self.file_size_bytes]),
            last_modified: self.created,
        }
    }

    pub fn info(&self, key: &str) -> Option<ObjectInfo> {
        let position = self
            .keys
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()?;
        Some(self.info_at(position))
    }

    /// The files whose keys start with `prefix`, in key order.
    pub fn objects(&self, prefix: &str) -> Vec<ObjectInfo> {
        let start = self.keys.partition_point(|(k, _)| k.as_str() < prefix);
        (start..self.keys.len())
            .take_while(|&i| self.keys[i].0.starts_with(prefix))
            .map(|i| self.info_at(i))
            .collect()
    }

    /// Bytes `first..=last` of any file, as slices of the shared segments.
    pub fn slices(&self, first: u64, last: u64) -> Vec<Bytes> {
        let end = last + 1;
        let start = self
            .segments
            .partition_point(|s| s.offset + s.bytes.len() as u64 <= first);
        let mut out = Vec::new();
        for s in &self.segments[start..] {
            if s.offset >= end {
                break;
            }
            let from = first.saturating_sub(s.offset) as usize;
            let to = (end - s.offset).min(s.bytes.len() as u64) as usize;
            out.push(s.bytes.slice(from..to));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rows_per_file: u64, row_group_rows: u64) -> DatasetSpec {
        DatasetSpec {
            rows_per_file,
            row_group_rows,
            ..crate::datagen::tests::tiny_spec()
        }
    }

    fn whole(v: &VirtualDataset) -> Vec<u8> {
        v.slices(0, v.file_size_bytes - 1).concat()
    }

    #[test]
    fn a_virtual_file_reads_back_with_the_parquet_reader() {
        // 10 rows in groups of 4: two 4-row templates and one 2-row template.
        let s = spec(10, 4);
        let v = VirtualDataset::build("b", "t", &s, 3).unwrap();
        let bytes = whole(&v);
        assert_eq!(bytes.len() as u64, v.file_size_bytes);
        let reader =
            parquet::file::serialized_reader::SerializedFileReader::new(Bytes::from(bytes))
                .unwrap();
        use parquet::file::reader::FileReader;
        let meta = reader.metadata();
        assert_eq!(meta.num_row_groups(), 3);
        assert_eq!(meta.file_metadata().num_rows(), 10);
        // Every value page decodes: read all rows.
        let rows = reader.get_row_iter(None).unwrap().count();
        assert_eq!(rows, 10);
    }

    #[test]
    fn slices_cover_any_range_exactly() {
        let v = VirtualDataset::build("b", "t", &spec(8, 4), 2).unwrap();
        let all = whole(&v);
        let n = v.file_size_bytes;
        for (first, last) in [
            (0, 0),
            (0, 3),
            (3, 4),
            (4, n - 1),
            (n - 9, n - 1),
            (5, n / 2),
        ] {
            let got = v.slices(first, last).concat();
            assert_eq!(got, all[first as usize..=last as usize], "{first}-{last}");
        }
        assert_eq!(
            v.objects("data/t/train/")
                .iter()
                .map(|o| o.key.as_str())
                .collect::<Vec<_>>(),
            [
                "data/t/train/train_0000.parquet",
                "data/t/train/train_0001.parquet"
            ]
        );
        assert!(v.info("data/t/train/train_0002.parquet").is_none());
    }
}
