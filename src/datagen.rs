//! The Flux-schema Parquet writer behind `ringload generate`, and the layout probe that lets a
//! plan (and later the virtual server) know a file's exact byte layout without writing it.
//!
//! A file is written with the arrow-rs `ArrowWriter` and the settings of the Flux dataset:
//! uncompressed, no statistics, no dictionary, PLAIN values, one row group per
//! `row_group_rows` rows (the batch size). Each column of width > 1 is a non-nullable
//! `FixedSizeList<T>` whose child field is `element`; a column of width 1 is a plain `T`, as
//! DLIO's Parquet generator writes it.
//!
//! Row groups are fed to the writer in sub-batches of at most `GENERATION_BATCH_BYTES`, so the
//! generator's own buffers stay small and are reused by the allocator from one sub-batch to the
//! next instead of being faulted in fresh (the writer itself holds one encoded row group). With
//! these settings the byte layout depends only on the schema and the row counts, never on the
//! values, so [`probe_file`] can write the same file with zeros into a sink that keeps only its
//! tail and obtain the real footer; a test checks that probe and generated file agree.
//!
//! Output goes through an [`ObjectSink`]: a directory here, an S3 bucket later. Nothing is
//! visible under an object's key until the whole object is written.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, FixedSizeListArray, RecordBatch, make_array};
use arrow_buffer::MutableBuffer;
use arrow_data::ArrayDataBuilder;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::Serialize;

use crate::exit::{self, ExitClass};
use crate::s3::bucket::{Bucket, BucketWriter};
use crate::schema::{ColumnSpec, DatasetSpec, Dtype, ProbedFile};
use crate::units;
use crate::verify;

pub mod objects;

/// The most bytes of column values the generator builds at once.
pub const GENERATION_BATCH_BYTES: u64 = 8 << 20;

/// How many trailing bytes of a probed file are kept: the footer and then some. The DLIO reader
/// fetches a 4 MiB tail; a footer is a few KiB.
pub const PROBE_TAIL_BYTES: usize = 4 << 20;

/// Footer bytes a probe allows per column chunk (its metadata, about 80 bytes with these
/// settings, and its hash), over [`PROBE_TAIL_BYTES`].
const PROBE_BYTES_PER_CHUNK: usize = 256;

/// The tail a probe of `spec` keeps: [`PROBE_TAIL_BYTES`], and room for a footer of many
/// row groups × columns (DLRM's 768 × 200 make a 12 MB footer).
fn probe_tail_bytes(spec: &DatasetSpec) -> usize {
    let row_groups = spec.rows_per_file.div_ceil(spec.row_group_rows.max(1)) as usize;
    let leaves = spec.columns.len();
    PROBE_TAIL_BYTES.saturating_add(
        row_groups
            .saturating_mul(leaves)
            .saturating_mul(PROBE_BYTES_PER_CHUNK),
    )
}

/// The Arrow type of a column element.
fn arrow_type(dtype: Dtype) -> DataType {
    match dtype {
        Dtype::Float16 => DataType::Float16,
        Dtype::Float32 => DataType::Float32,
        Dtype::Float64 => DataType::Float64,
        Dtype::Int8 => DataType::Int8,
        Dtype::Int16 => DataType::Int16,
        Dtype::Int32 => DataType::Int32,
        Dtype::Int64 => DataType::Int64,
        Dtype::Uint8 => DataType::UInt8,
        Dtype::Uint16 => DataType::UInt16,
        Dtype::Uint32 => DataType::UInt32,
        Dtype::Uint64 => DataType::UInt64,
    }
}

/// Rows per generator sub-batch: as many as fit in `GENERATION_BATCH_BYTES`, at least one.
fn generation_batch_rows(spec: &DatasetSpec) -> u64 {
    (GENERATION_BATCH_BYTES / spec.record_bytes().max(1)).clamp(1, spec.row_group_rows)
}

/// The Arrow schema of the dataset.
pub fn arrow_schema(spec: &DatasetSpec) -> SchemaRef {
    let fields: Vec<Field> = spec
        .columns
        .iter()
        .map(|c| {
            let data_type = if c.size == 1 {
                arrow_type(c.dtype)
            } else {
                let element = Arc::new(Field::new("element", arrow_type(c.dtype), false));
                DataType::FixedSizeList(element, c.size as i32)
            };
            Field::new(&c.name, data_type, false)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// The Flux writer settings: uncompressed, no statistics, no dictionary, PLAIN values.
pub fn writer_properties(spec: &DatasetSpec) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_encoding(Encoding::PLAIN)
        .set_max_row_group_row_count(Some(spec.row_group_rows as usize))
        .build()
}

/// What fills the column values.
#[derive(Debug, Clone)]
pub enum Fill {
    /// The content generator's bytes ([`crate::content`]) of the file's seed, in value order:
    /// `at` is the next value byte's offset.
    Random {
        content: crate::content::Content,
        at: u64,
    },
    /// Zeros: for layout probes, where values do not matter.
    Zeros,
}

impl Fill {
    /// The fill of training file `index` of a dataset seeded with `seed`: content seeded
    /// `splitmix64(seed ^ splitmix64(index))`, unique and incompressible.
    pub fn for_file(seed: u64, index: usize) -> Fill {
        Fill::Random {
            content: crate::content::Content::Random {
                seed: splitmix64(seed ^ splitmix64(index as u64)),
                shape: crate::content::Shape::default(),
            },
            at: 0,
        }
    }

    /// This fill with its content laid out as `shape` (dedupe and compression ratios).
    pub fn reduced(self, shape: crate::content::Shape) -> Fill {
        match self {
            Fill::Random { content, at } => Fill::Random {
                content: content.reduced(shape),
                at,
            },
            Fill::Zeros => Fill::Zeros,
        }
    }

    /// The next `out.len()` value bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        match self {
            Fill::Random { content, at } => {
                content.fill(*at, out);
                *at += out.len() as u64;
            }
            Fill::Zeros => out.fill(0),
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One column's values for `rows` rows.
fn column_array(column: &ColumnSpec, rows: u64, fill: &mut Fill) -> Result<ArrayRef, ParquetError> {
    let elements = rows * column.size;
    let len_bytes = (elements * column.dtype.width_bytes()) as usize;
    let mut buffer = match fill {
        Fill::Zeros => MutableBuffer::from_len_zeroed(len_bytes),
        Fill::Random { .. } => {
            let mut buffer = MutableBuffer::with_capacity(len_bytes);
            buffer.resize(len_bytes, 0);
            fill.fill(buffer.as_slice_mut());
            buffer
        }
    };
    buffer.truncate(len_bytes);
    let values = ArrayDataBuilder::new(arrow_type(column.dtype))
        .len(elements as usize)
        .add_buffer(buffer.into())
        .build()?;
    let values = make_array(values);
    if column.size == 1 {
        return Ok(values);
    }
    let element = Arc::new(Field::new("element", arrow_type(column.dtype), false));
    let list = FixedSizeListArray::try_new(element, column.size as i32, values, None)?;
    Ok(Arc::new(list))
}

/// Writes one file of `spec` into `out`, calling `on_rows` after each sub-batch, and returns
/// the writer. The footer carries each column chunk's hash (see [`crate::verify`]).
pub fn write_file<W: Write + Send>(
    spec: &DatasetSpec,
    fill: Fill,
    out: W,
    on_rows: impl FnMut(u64),
) -> Result<W, ParquetError> {
    write_file_with(spec, fill, false, out, on_rows)
}

/// [`write_file`], where `restart` starts every row group over from `fill`: every row group of
/// a given row count then holds the same bytes (the embedded server's virtual files).
fn write_file_with<W: Write + Send>(
    spec: &DatasetSpec,
    fill: Fill,
    restart: bool,
    out: W,
    mut on_rows: impl FnMut(u64),
) -> Result<W, ParquetError> {
    let schema = arrow_schema(spec);
    let out = Hashing {
        inner: out,
        position: 0,
        pending_from: 0,
        pending: Vec::new(),
    };
    let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(writer_properties(spec)))?;
    let batch_rows = generation_batch_rows(spec);
    let mut hashes: Vec<Vec<u64>> = Vec::new();
    let mut group_fill = fill.clone();
    let mut written = 0;
    while written < spec.rows_per_file {
        let group_rows = spec.row_group_rows.min(spec.rows_per_file - written);
        if restart {
            group_fill = fill.clone();
        }
        let mut in_group = 0;
        while in_group < group_rows {
            let rows = batch_rows.min(group_rows - in_group);
            let columns = spec
                .columns
                .iter()
                .map(|c| column_array(c, rows, &mut group_fill))
                .collect::<Result<Vec<_>, _>>()?;
            let batch = RecordBatch::try_new(schema.clone(), columns)?;
            writer.write(&batch)?;
            in_group += rows;
            on_rows(rows);
        }
        writer.flush()?;
        writer.sync()?;
        let group = writer
            .flushed_row_groups()
            .last()
            .ok_or_else(|| ParquetError::General("a flushed row group is missing".into()))?;
        let spans = group
            .columns()
            .iter()
            .map(|c| {
                verify::chunk_span(c)
                    .ok_or_else(|| ParquetError::General("a negative chunk offset".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        hashes.push(writer.inner_mut().hash_and_forget(&spans)?);
        written += group_rows;
    }
    writer.append_key_value_metadata(KeyValue::new(
        verify::HASHES_KEY.to_string(),
        verify::encode_hashes(&hashes),
    ));
    Ok(writer.into_inner()?.inner)
}

/// A writer that keeps what passed through it since the last row group, to hash its chunks.
#[derive(Debug)]
struct Hashing<W> {
    inner: W,
    /// Bytes written so far.
    position: u64,
    /// The file offset of `pending[0]`.
    pending_from: u64,
    pending: Vec<u8>,
}

impl<W> Hashing<W> {
    /// The hashes of the chunks at file ranges `spans` (all written since the last call); then
    /// forgets what was written.
    fn hash_and_forget(&mut self, spans: &[(u64, u64)]) -> Result<Vec<u64>, ParquetError> {
        let hashes = spans
            .iter()
            .map(|&(offset, len)| {
                let from = offset.checked_sub(self.pending_from);
                from.and_then(|from| {
                    let from = usize::try_from(from).ok()?;
                    self.pending.get(from..from.checked_add(usize::try_from(len).ok()?)?)
                })
                .map(verify::hash)
                .ok_or_else(|| {
                    ParquetError::General(format!(
                        "column chunk at {offset}+{len} is not among the bytes just written                          ({}..{})",
                        self.pending_from, self.position
                    ))
                })
            })
            .collect();
        self.pending.clear();
        self.pending_from = self.position;
        hashes
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.pending.extend_from_slice(&buf[..n]);
        self.position += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A sink that keeps only the size and the last `keep` bytes of what is written.
#[derive(Debug, Default)]
struct TailWriter {
    size_bytes: u64,
    keep: usize,
    tail: Vec<u8>,
}

impl Write for TailWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.size_bytes += buf.len() as u64;
        let keep = buf.len().min(self.keep);
        self.tail.extend_from_slice(&buf[buf.len() - keep..]);
        if self.tail.len() > 2 * self.keep {
            let excess = self.tail.len() - self.keep;
            self.tail.drain(..excess);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes one file of `spec` with zeros into a sink that keeps only its tail, so the exact
/// layout and footer of every file of the dataset are known without storing any of them.
pub fn probe_file(spec: &DatasetSpec) -> Result<ProbedFile, ParquetError> {
    probe_with(spec, Fill::Zeros, false)
}

/// The file the embedded server's virtual dataset serves for `spec`: every row group starts
/// over from the dataset's seed, so one template per row count holds its bytes. Only the tail
/// is kept; its footer carries the hashes of those row groups.
pub fn probe_virtual_file(spec: &DatasetSpec) -> Result<ProbedFile, ParquetError> {
    probe_with(spec, Fill::for_file(spec.seed, 0), true)
}

fn probe_with(spec: &DatasetSpec, fill: Fill, restart: bool) -> Result<ProbedFile, ParquetError> {
    let tail = TailWriter {
        keep: probe_tail_bytes(spec),
        ..TailWriter::default()
    };
    let sink = write_file_with(spec, fill, restart, tail, |_| {})?;
    let keep = sink.tail.len().min(sink.keep);
    Ok(ProbedFile {
        size_bytes: sink.size_bytes,
        tail: Bytes::copy_from_slice(&sink.tail[sink.tail.len() - keep..]),
    })
}

/// Errors while generating a dataset.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(
        "generating needs {need} under {dest}, which has {free} free; try --files {fit} or another --output"
    )]
    NoSpace {
        dest: String,
        need: String,
        free: String,
        fit: usize,
    },
    #[error("cannot create '{dest}': {source}; choose another --output")]
    Create { dest: String, source: io::Error },
    #[error("writing {key} failed: {source}")]
    Write { key: String, source: io::Error },
    #[error("encoding {key} failed: {source}")]
    Encode { key: String, source: ParquetError },
    /// The object store refused or failed a request (after its retries).
    #[error(transparent)]
    Storage(#[from] crate::s3::RequestError),
}

impl ExitClass for GenerateError {
    /// 2 for what is wrong before anything is written, 3 for a failure while writing.
    fn exit_code(&self) -> u8 {
        match self {
            GenerateError::NoSpace { .. } | GenerateError::Create { .. } => exit::USAGE,
            GenerateError::Write { .. } | GenerateError::Encode { .. } => exit::FAILED,
            GenerateError::Storage(e) => e.exit_code(),
        }
    }
}

/// Where generated objects go: a directory ([`DirSink`]) or an S3 bucket ([`crate::s3::Bucket`]).
pub trait ObjectSink: Sync {
    type Writer: Write + Send;

    /// The destination, for messages.
    fn describe(&self) -> String;

    /// Prepares the destination and says how many bytes it can still take (`None`: no limit
    /// known, as for an object store).
    fn free_bytes(&self) -> Result<Option<u64>, GenerateError>;

    /// Starts an object. Nothing is visible under `key` until [`ObjectSink::commit`].
    fn create(&self, key: &str) -> Result<Self::Writer, GenerateError>;

    /// Makes a fully written object visible under its key, all at once.
    fn commit(&self, key: &str, writer: Self::Writer) -> Result<(), GenerateError>;
}

impl ObjectSink for Bucket {
    type Writer = BucketWriter;

    fn describe(&self) -> String {
        self.client().target().describe()
    }

    fn free_bytes(&self) -> Result<Option<u64>, GenerateError> {
        self.check()?;
        Ok(None)
    }

    fn create(&self, key: &str) -> Result<BucketWriter, GenerateError> {
        Ok(self.writer(key))
    }

    fn commit(&self, key: &str, writer: BucketWriter) -> Result<(), GenerateError> {
        writer.finish().map_err(|source| GenerateError::Write {
            key: key.to_string(),
            source: io::Error::other(source),
        })
    }
}

/// Objects as files under a root directory: key `a/b/c.parquet` is `ROOT/a/b/c.parquet`.
#[derive(Debug)]
pub struct DirSink {
    root: PathBuf,
}

impl DirSink {
    pub fn new(root: &Path) -> DirSink {
        DirSink {
            root: root.to_path_buf(),
        }
    }
}

/// A file being written under a temporary name; dropped without commit, it is removed.
#[derive(Debug)]
pub struct DirWriter {
    file: Option<File>,
    temp_path: PathBuf,
    final_path: PathBuf,
}

impl Write for DirWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(file) => file.write(buf),
            None => Err(io::Error::other("write after commit")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for DirWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.temp_path);
        }
    }
}

impl ObjectSink for DirSink {
    type Writer = DirWriter;

    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    fn free_bytes(&self) -> Result<Option<u64>, GenerateError> {
        let create_error = |source| GenerateError::Create {
            dest: self.describe(),
            source,
        };
        fs::create_dir_all(&self.root).map_err(create_error)?;
        let stat = rustix::fs::statvfs(&self.root).map_err(|e| create_error(e.into()))?;
        Ok(Some(stat.f_bavail.saturating_mul(stat.f_frsize)))
    }

    fn create(&self, key: &str) -> Result<DirWriter, GenerateError> {
        let final_path = self.root.join(key);
        let dir = final_path.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(|source| GenerateError::Create {
            dest: dir.display().to_string(),
            source,
        })?;
        let name = final_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp_path = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let file = File::create(&temp_path).map_err(|source| GenerateError::Create {
            dest: temp_path.display().to_string(),
            source,
        })?;
        Ok(DirWriter {
            file: Some(file),
            temp_path,
            final_path,
        })
    }

    fn commit(&self, key: &str, mut writer: DirWriter) -> Result<(), GenerateError> {
        let write_error = |source| GenerateError::Write {
            key: key.to_string(),
            source,
        };
        let file = writer
            .file
            .take()
            .ok_or_else(|| write_error(io::Error::other("committed twice")))?;
        drop(file);
        if let Err(e) = fs::rename(&writer.temp_path, &writer.final_path) {
            let _ = fs::remove_file(&writer.temp_path);
            return Err(write_error(e));
        }
        Ok(())
    }
}

/// Counts bytes as they go to the sink, for the summary.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What `generate` did.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateSummary {
    pub destination: String,
    pub files: usize,
    pub bytes_written: u64,
    pub elapsed_s: f64,
    pub jobs: usize,
    /// The content's layout (its dedupe and compression ratios).
    pub content: crate::content::Shape,
}

impl GenerateSummary {
    pub fn mib_per_s(&self) -> f64 {
        self.bytes_written as f64 / (1 << 20) as f64 / self.elapsed_s.max(1e-9)
    }
}

/// Writes files `0..files` of `spec` into `sink` with `jobs` threads, each writing whole files.
/// Shows a progress bar on a terminal. The first failure stops the other threads; objects
/// already committed stay, the one being written is discarded.
pub fn generate<S: ObjectSink>(
    spec: &DatasetSpec,
    files: usize,
    sink: &S,
    jobs: usize,
    show_progress: bool,
    shape: crate::content::Shape,
) -> Result<GenerateSummary, GenerateError> {
    let rows_bytes = spec.record_bytes() * spec.rows_per_file * files as u64;
    let file_bytes = spec.file_bytes_estimate();
    let need = file_bytes * files as u64;
    if let Some(free) = sink.free_bytes()?
        && need > free
    {
        return Err(GenerateError::NoSpace {
            dest: sink.describe(),
            need: units::bytes(need),
            free: units::bytes(free),
            fit: (free / file_bytes.max(1)) as usize,
        });
    }
    let jobs = jobs.clamp(1, files.max(1));
    let progress = progress_bar(
        show_progress,
        rows_bytes,
        format!("generating {files} files"),
    );
    let bytes_written = AtomicU64::new(0);
    let started = Instant::now();
    let record_bytes = spec.record_bytes();
    on_jobs(
        files as u64,
        jobs,
        || (),
        |(), index| {
            let index = index as usize;
            let key = spec.file_key(index);
            let writer = sink.create(&key)?;
            let counted = Counted {
                inner: writer,
                bytes: 0,
            };
            let fill = Fill::for_file(spec.seed, index).reduced(shape);
            let counted = write_file(spec, fill, counted, |rows| {
                progress.inc(rows * record_bytes)
            })
            .map_err(|source| match source {
                ParquetError::External(e) => GenerateError::Write {
                    key: key.clone(),
                    source: io::Error::other(e),
                },
                source => GenerateError::Encode {
                    key: key.clone(),
                    source,
                },
            })?;
            bytes_written.fetch_add(counted.bytes, Ordering::Relaxed);
            sink.commit(&key, counted.inner)
        },
    )
    .inspect_err(|_| progress.finish_and_clear())?;
    progress.finish_and_clear();
    Ok(GenerateSummary {
        destination: format!("{}/{}", sink.describe(), spec.train_prefix),
        files,
        bytes_written: bytes_written.into_inner(),
        elapsed_s: started.elapsed().as_secs_f64(),
        jobs,
        content: shape,
    })
}

/// A progress bar of `total` bytes with `message` on a terminal (`show`), else a hidden one.
pub(crate) fn progress_bar(show: bool, total: u64, message: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs `work(state, index)` for every index in `0..files` on `jobs` threads, each with its
/// own `init()` state, taking the next index as it finishes one. The first failure stops the
/// others (a file already started is finished or fails on its own) and is returned.
pub(crate) fn on_jobs<T>(
    files: u64,
    jobs: usize,
    init: impl Fn() -> T + Sync,
    work: impl Fn(&mut T, u64) -> Result<(), GenerateError> + Sync,
) -> Result<(), GenerateError> {
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<GenerateError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                let mut state = init();
                while !failed.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= files {
                        break;
                    }
                    if let Err(e) = work(&mut state, index) {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert(e);
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two small columns, 30 rows per file in groups of 8 (the last one 6).
    pub(crate) fn tiny_spec() -> DatasetSpec {
        DatasetSpec {
            train_prefix: "data/t/train/".into(),
            columns: vec![
                ColumnSpec {
                    name: "a".into(),
                    dtype: Dtype::Float32,
                    size: 100,
                    read: true,
                },
                ColumnSpec {
                    name: "b".into(),
                    dtype: Dtype::Int64,
                    size: 1,
                    read: true,
                },
            ],
            rows_per_file: 30,
            row_group_rows: 8,
            seed: 7,
        }
    }

    #[test]
    fn a_files_values_are_its_content_in_value_order() {
        let mut fill = Fill::for_file(1, 3);
        let (mut x, mut y) = ([0u8; 13], [0u8; 7000]);
        fill.fill(&mut x);
        fill.fill(&mut y);
        let Fill::Random { content, at } = fill else {
            panic!("random")
        };
        assert_eq!(at, 7013);
        let mut whole = vec![0u8; 7013];
        content.fill(0, &mut whole);
        assert_eq!(whole[..13], x);
        assert_eq!(whole[13..], y);
        assert_ne!(x, [0u8; 13]);
        let mut other = [0u8; 13];
        Fill::for_file(1, 4).fill(&mut other);
        assert_ne!(x, other);
    }

    #[test]
    fn probe_matches_a_written_file_byte_for_byte_in_layout() {
        let spec = tiny_spec();
        let bytes = write_file(&spec, Fill::for_file(spec.seed, 0), Vec::new(), |_| {}).unwrap();
        let meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(bytes.clone()))
            .unwrap();
        let probe = probe_file(&spec).unwrap();
        assert_eq!(probe.size_bytes, bytes.len() as u64);
        // Row groups of 8, 8, 8 and 6 rows.
        let rows: Vec<i64> = meta.row_groups().iter().map(|rg| rg.num_rows()).collect();
        assert_eq!(rows, vec![8, 8, 8, 6]);
        // The footers agree but for the chunk hashes (fixed-width hex): values never reach
        // the layout.
        let footer = |b: &[u8]| {
            let n = b.len();
            let meta_len = u32::from_le_bytes(b[n - 8..n - 4].try_into().unwrap()) as usize;
            b[n - 8 - meta_len..].to_vec()
        };
        let (real, probed) = (footer(&bytes), footer(&probe.tail));
        assert_eq!(real.len(), probed.len());
        let probed_meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(probe.tail.to_vec()))
            .unwrap();
        let layout = |m: &parquet::file::metadata::ParquetMetaData| -> Vec<(u64, u64)> {
            m.row_groups()
                .iter()
                .flat_map(|rg| rg.columns().iter().map(|c| verify::chunk_span(c).unwrap()))
                .collect()
        };
        assert_eq!(layout(&meta), layout(&probed_meta));
        let hashes = |m: &parquet::file::metadata::ParquetMetaData| {
            let kv = m.file_metadata().key_value_metadata().unwrap();
            let value = kv.iter().find(|e| e.key == verify::HASHES_KEY).unwrap();
            value.value.clone().unwrap()
        };
        let (a, b) = (hashes(&meta), hashes(&probed_meta));
        assert_eq!(a.len(), b.len());
        assert_ne!(a, b, "zeros and random values hash apart");
        assert_eq!(
            String::from_utf8_lossy(&real).replace(&a, ""),
            String::from_utf8_lossy(&probed).replace(&b, ""),
            "the footers differ beyond the hashes"
        );
    }

    #[test]
    fn size_estimate_bounds_real_files() {
        let tiny = tiny_spec();
        let probe = probe_file(&tiny).unwrap();
        assert!(probe.size_bytes <= tiny.file_bytes_estimate());
        let flux = DatasetSpec {
            columns: vec![ColumnSpec {
                name: "t".into(),
                dtype: Dtype::Float32,
                size: 524_328,
                read: true,
            }],
            rows_per_file: 96,
            row_group_rows: 48,
            ..tiny
        };
        let probe = probe_file(&flux).unwrap();
        assert!(probe.size_bytes <= flux.file_bytes_estimate());
        assert!(probe.size_bytes > flux.record_bytes() * flux.rows_per_file);
    }

    #[test]
    fn files_differ_and_repeat_with_the_seed() {
        let spec = tiny_spec();
        let write =
            |i| write_file(&spec, Fill::for_file(spec.seed, i), Vec::new(), |_| {}).unwrap();
        assert_eq!(write(0), write(0));
        assert_ne!(write(0), write(1));
    }

    /// A directory that claims to have only `free` bytes left.
    struct SmallDisk {
        dir: DirSink,
        free: u64,
    }

    impl ObjectSink for SmallDisk {
        type Writer = DirWriter;
        fn describe(&self) -> String {
            self.dir.describe()
        }
        fn free_bytes(&self) -> Result<Option<u64>, GenerateError> {
            Ok(Some(self.free))
        }
        fn create(&self, key: &str) -> Result<DirWriter, GenerateError> {
            self.dir.create(key)
        }
        fn commit(&self, key: &str, writer: DirWriter) -> Result<(), GenerateError> {
            self.dir.commit(key, writer)
        }
    }

    #[test]
    fn too_little_space_is_refused_before_writing() {
        let root = tempfile::tempdir().unwrap();
        let spec = tiny_spec();
        let sink = SmallDisk {
            dir: DirSink::new(root.path()),
            free: 3 * spec.file_bytes_estimate() + 100,
        };
        let err = generate(&spec, 10, &sink, 2, false, Default::default()).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(text.contains("try --files 3 or another --output"), "{text}");
        assert!(!root.path().join("data").exists(), "nothing written");
        let summary = generate(&spec, 3, &sink, 2, false, Default::default()).unwrap();
        assert_eq!(summary.files, 3);
    }

    #[test]
    fn dir_sink_leaves_nothing_behind_an_uncommitted_object() {
        let root = tempfile::tempdir().unwrap();
        let sink = DirSink::new(root.path());
        let mut w = sink.create("x/y.parquet").unwrap();
        w.write_all(b"partial").unwrap();
        drop(w);
        let left: Vec<_> = fs::read_dir(root.path().join("x")).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
        let mut w = sink.create("x/y.parquet").unwrap();
        w.write_all(b"whole").unwrap();
        sink.commit("x/y.parquet", w).unwrap();
        assert_eq!(fs::read(root.path().join("x/y.parquet")).unwrap(), b"whole");
        assert_eq!(fs::read_dir(root.path().join("x")).unwrap().count(), 1);
    }
}
