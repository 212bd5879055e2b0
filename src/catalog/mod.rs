//! The dataset catalog: which Parquet files a run reads, and where each row group's bytes are.
//!
//! Objects are listed under `<data_folder>/train/`, the `*.parquet` ones kept and sorted, and the
//! first `num_files_train` taken, as DLIO does. Each file's footer is read with one suffix-range
//! request (`FOOTER_FIRST_FETCH_BYTES`; a second one if the metadata is longer), decoded, and
//! each row group's byte range derived from its column chunks: from the smallest dictionary or
//! data page offset to the largest chunk end, over the columns the workload reads. Row-group
//! ranges always come from a footer, never from arithmetic on the schema.
//!
//! Storage is reached through [`ObjectSource`], so the same code reads footers from a directory
//! now and over S3 later. A dataset that does not exist yet gets its footer from
//! [`crate::datagen::probe_file`], which writes the file with the generator into a sink that
//! keeps only its tail, and is then read by this same code.
//!
//! Whole-object datasets (npz, jpeg, tfrecord) have no footers: their catalog is a key and a size
//! per object, held compactly, computed, listed ([`objects`]) or read from a manifest
//! ([`manifest`]).

pub mod held;
pub mod manifest;
pub mod objects;

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parquet::file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader};
use serde::{Deserialize, Serialize};

use crate::exit::{self, ExitClass};
use crate::extents;
use crate::s3::{Bucket, ByteRange, ObjectMeta};
use crate::schema::{DatasetSpec, ProbedFile};
use crate::verify::{self, Chunk};

/// The first suffix fetched for a footer: enough for any Flux-shaped footer (~3.5 KB) in one
/// request; a longer one costs a second request for exactly what is missing.
pub const FOOTER_FIRST_FETCH_BYTES: u64 = 64 << 10;

/// Length of the Parquet file trailer: 4-byte metadata length and the `PAR1` magic.
const TRAILER_BYTES: u64 = 8;

/// Errors reading the catalog. All are usage or environment errors (exit 2): the dataset is
/// missing, incomplete or not what the workload says.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "{location} does not exist; create the dataset with `ringload generate WORKLOAD --output DIR` or point --dir at it"
    )]
    NoPrefix { location: String },
    #[error("cannot read {location}: {source}")]
    Io {
        location: String,
        source: std::io::Error,
    },
    #[error("{}", not_enough_files(location, *found, *needed))]
    NotEnoughFiles {
        location: String,
        found: usize,
        needed: usize,
    },
    #[error("{}", not_enough_objects(location, extension, *found, *needed))]
    NotEnoughObjects {
        location: String,
        extension: String,
        found: usize,
        needed: usize,
    },
    #[error("--manifest {path}:{line}: {reason}")]
    BadManifest {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("{key} is not Parquet: {reason}")]
    NotParquet { key: String, reason: String },
    #[error("{key} has a truncated or corrupt footer: {reason}")]
    BadFooter { key: String, reason: String },
    #[error("{key} has no column '{column}' (it has {available}); fix dataset.parquet.columns")]
    MissingColumn {
        key: String,
        column: String,
        available: String,
    },
    /// A request to the object store failed (after its retries).
    #[error(transparent)]
    Request(#[from] crate::s3::RequestError),
}

fn not_enough_files(location: &str, found: usize, needed: usize) -> String {
    if found == 0 {
        if let Some(hint) = bucket_folder_hint(location) {
            return format!("no Parquet objects under {location}; {hint}");
        }
        format!(
            "no Parquet objects under {location}; write the dataset there with `ringload generate` \
             (--output DIR, or --endpoint URL --bucket NAME), or fix dataset.data_folder"
        )
    } else {
        format!(
            "found {found} Parquet files under {location}, the workload needs {needed} \
             (dataset.num_files_train); generate more or pass --files {found}"
        )
    }
}

fn not_enough_objects(location: &str, extension: &str, found: usize, needed: usize) -> String {
    if found == 0 {
        format!(
            "no .{extension} objects under {location}; write the dataset there with `ringload \
             generate` (--output DIR, or --endpoint URL --bucket NAME), or fix dataset.data_folder"
        )
    } else {
        format!(
            "found {found} .{extension} objects under {location}, the workload needs {needed} \
             (dataset.num_files_train); generate more or pass --files {found}"
        )
    }
}

/// When the prefix listed starts with the bucket's own name (`s3://data/data/flux_small/…`),
/// the likely cause: `generate --output DIR` wrote DIR/data/flux_small/…, and `serve --dir DIR`
/// serves folder `data` as a bucket, so the files are in bucket `data` without the `data/`.
fn bucket_folder_hint(location: &str) -> Option<String> {
    let (bucket, rest) = location.strip_prefix("s3://")?.split_once('/')?;
    let inner = rest.strip_prefix(bucket)?.strip_prefix('/')?;
    let inner = inner.split(" at ").next()?;
    Some(format!(
        "if `ringload generate --output DIR` wrote them and `ringload serve --dir DIR` serves \
         them: serve makes each folder of DIR a bucket, so DIR/{bucket}/{inner} is bucket \
         '{bucket}' holding {inner}…; \
         generate into a bucket's folder instead (`ringload generate --output DIR/ringload`, \
         then `run` reads bucket 'ringload', the default), or pass \
         dataset.data_folder={folder}",
        folder = inner.strip_suffix("train/").unwrap_or(inner),
    ))
}

impl ExitClass for CatalogError {
    /// Reading the catalog is set-up: nothing has run yet, whatever failed (a dataset that is
    /// missing or not what the workload says, keys or a bucket refused, a storage that fails
    /// or does not answer the LIST or a footer read). All are 2.
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}

/// Footers read at once while building a catalog.
pub const FOOTER_READS_IN_FLIGHT: usize = 16;

/// Where objects are read from: a directory or an S3 bucket; the footer code does not care.
pub trait ObjectSource: Sync {
    /// The location, for messages: a directory or `s3://bucket`.
    fn describe(&self, prefix: &str) -> String;
    /// Every object whose key starts with `prefix` and has no further `/` after it.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, CatalogError>;
    /// The bytes of `range` of object `key`.
    fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, CatalogError>;
}

/// Objects as files under a root directory: key `a/b/c.parquet` is `ROOT/a/b/c.parquet`.
#[derive(Debug)]
pub struct DirSource {
    root: PathBuf,
}

impl DirSource {
    pub fn new(root: &Path) -> DirSource {
        DirSource {
            root: root.to_path_buf(),
        }
    }
}

impl ObjectSource for DirSource {
    fn describe(&self, prefix: &str) -> String {
        self.root.join(prefix).display().to_string()
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, CatalogError> {
        let dir = self.root.join(prefix);
        let location = dir.display().to_string();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CatalogError::NoPrefix { location });
            }
            Err(source) => return Err(CatalogError::Io { location, source }),
        };
        let mut objects = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| CatalogError::Io {
                location: location.clone(),
                source,
            })?;
            // Follow links: a dataset may be assembled from links to files elsewhere.
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            // Files being written by `generate` are hidden until renamed.
            if name.starts_with('.') {
                continue;
            }
            objects.push(ObjectMeta {
                key: format!("{prefix}{name}"),
                size_bytes: meta.len(),
            });
        }
        Ok(objects)
    }

    fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, CatalogError> {
        let path = self.root.join(key);
        let io_error = |source| CatalogError::Io {
            location: path.display().to_string(),
            source,
        };
        let mut file = File::open(&path).map_err(io_error)?;
        let size = file.metadata().map_err(io_error)?.len();
        let (start, len) = match range {
            ByteRange::Bounded { first, last } => (first, last.saturating_sub(first) + 1),
            ByteRange::Suffix(n) => (size.saturating_sub(n), n.min(size)),
        };
        file.seek(SeekFrom::Start(start)).map_err(io_error)?;
        let mut buf = Vec::with_capacity(len as usize);
        file.take(len).read_to_end(&mut buf).map_err(io_error)?;
        Ok(Bytes::from(buf))
    }
}

/// A file that exists only as its tail, from the layout probe.
#[derive(Debug)]
struct ProbedSource<'a> {
    key: &'a str,
    file: &'a ProbedFile,
}

impl ObjectSource for ProbedSource<'_> {
    fn describe(&self, prefix: &str) -> String {
        format!("{prefix} (layout computed from the schema)")
    }

    fn list(&self, _prefix: &str) -> Result<Vec<ObjectMeta>, CatalogError> {
        Ok(vec![ObjectMeta {
            key: self.key.to_string(),
            size_bytes: self.file.size_bytes,
        }])
    }

    fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, CatalogError> {
        let tail_start = self.file.size_bytes - self.file.tail.len() as u64;
        let (start, end) = match range {
            ByteRange::Bounded { first, last } => (first, last + 1),
            ByteRange::Suffix(n) => (self.file.size_bytes.saturating_sub(n), self.file.size_bytes),
        };
        if start < tail_start || end > self.file.size_bytes {
            return Err(CatalogError::BadFooter {
                key: key.to_string(),
                reason: format!(
                    "footer of {} bytes exceeds the {} bytes the probe keeps",
                    end - start,
                    self.file.tail.len()
                ),
            });
        }
        Ok(self
            .file
            .tail
            .slice((start - tail_start) as usize..(end - tail_start) as usize))
    }
}

impl ObjectSource for Bucket {
    fn describe(&self, prefix: &str) -> String {
        format!(
            "s3://{}/{prefix} at {}",
            self.client().target().bucket,
            self.client().target().endpoints_text()
        )
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, CatalogError> {
        Ok(Bucket::list(self, prefix)?)
    }

    fn get_range(&self, key: &str, range: ByteRange) -> Result<Bytes, CatalogError> {
        Ok(Bucket::get_range(self, key, range)?)
    }
}

/// Where one row group's bytes are, for the columns read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowGroupSpan {
    pub rows: u64,
    /// Offset of the first byte of the row group's chunks read.
    pub offset: u64,
    /// Bytes from `offset` to the end of the last chunk read.
    pub len_bytes: u64,
}

impl RowGroupSpan {
    pub fn end(&self) -> u64 {
        self.offset + self.len_bytes
    }
}

/// One file of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLayout {
    pub key: String,
    pub size_bytes: u64,
    /// Bytes fetched to read the footer (one or two suffix requests).
    pub footer_fetch_bytes: u64,
    /// Length of the Thrift-encoded file metadata.
    pub metadata_bytes: u64,
    pub rows: u64,
    pub row_groups: Vec<RowGroupSpan>,
    /// The column chunks inside the row groups read, for `run --verify` (else `None`).
    #[serde(skip)]
    pub chunks: Option<Arc<[Chunk]>>,
    /// With a column subset: the chunks read, every row group's, in offset order
    /// ([`extents`]; `None` when every column is read).
    #[serde(skip)]
    pub extents: Option<Arc<[extents::Extent]>>,
}

/// The files a run reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// Where the layouts came from: a directory, or "computed from the schema".
    pub source: String,
    /// Objects listed under the prefix that were `*.parquet` (before taking the first N).
    pub parquet_objects_listed: usize,
    /// The Parquet files' layouts (empty for a whole-object dataset).
    pub files: Vec<FileLayout>,
    /// A whole-object dataset's objects (`None` for Parquet, and then left out of the JSON, so
    /// a Parquet plan's JSON is as before): one GET per object, compact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<objects::ObjectCatalog>,
}

impl Catalog {
    /// No files: what a process that is not process 0 has until the broadcast.
    pub fn empty() -> Catalog {
        Catalog {
            source: String::new(),
            parquet_objects_listed: 0,
            files: Vec::new(),
            objects: None,
        }
    }

    pub fn footer_fetch_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.footer_fetch_bytes).sum()
    }
}

/// The catalog of the first `files` objects of a whole-object `dataset`, computed from DLIO's
/// names and size distribution: nothing is listed or read ([`objects::ObjectCatalog::computed`]).
pub fn computed_objects(dataset: &crate::dataset::ObjectDataset, files: usize) -> Catalog {
    Catalog {
        source: format!(
            "{} ({files} objects computed from DLIO's names and size distribution)",
            dataset.train_prefix
        ),
        parquet_objects_listed: 0,
        files: Vec::new(),
        objects: Some(objects::ObjectCatalog::computed(dataset, files)),
    }
}

/// The catalog of a whole-object `dataset` listed in `source`: the first `files` objects under
/// its prefix, in key order, with the format's extension ([`objects::ObjectCatalog::listed`]).
pub fn discover_objects(
    source: &dyn ObjectSource,
    dataset: &crate::dataset::ObjectDataset,
    files: usize,
) -> Result<Catalog, CatalogError> {
    let prefix = &dataset.train_prefix;
    let listing = source.list(prefix)?;
    let objects = objects::ObjectCatalog::listed(listing, dataset, files).map_err(|found| {
        CatalogError::NotEnoughObjects {
            location: source.describe(prefix),
            extension: dataset.format.extension().to_string(),
            found,
            needed: files,
        }
    })?;
    Ok(Catalog {
        source: source.describe(prefix),
        parquet_objects_listed: 0,
        files: Vec::new(),
        objects: Some(objects),
    })
}

impl Catalog {
    /// Files (objects) in the catalog, Parquet or whole objects.
    pub fn file_count(&self) -> usize {
        match &self.objects {
            Some(objects) => objects.len(),
            None => self.files.len(),
        }
    }

    /// File `file`'s key.
    pub fn key(&self, file: usize) -> Cow<'_, str> {
        match &self.objects {
            Some(objects) => objects.key(file),
            None => Cow::Borrowed(&self.files[file].key),
        }
    }

    /// File `file`'s size in bytes.
    pub fn size_bytes(&self, file: usize) -> u64 {
        match &self.objects {
            Some(objects) => objects.size(file),
            None => self.files[file].size_bytes,
        }
    }

    /// The requests of a GET over bytes `from..to` of Parquet file `file` under `gets`: its
    /// column chunks' extents, or `None` (one ranged GET) when every column is read or
    /// `gets` is a span.
    pub fn requests(
        &self,
        file: usize,
        from: u64,
        to: u64,
        gets: extents::ColumnGets,
    ) -> Option<extents::Extents> {
        let selected = self.files.get(file)?.extents.as_ref()?;
        extents::requests(selected, from, to, gets)
    }

    /// Row group `row_group` of file `file`: a whole object is one "row group" of all its
    /// samples, spanning every byte.
    pub fn span(&self, file: usize, row_group: usize) -> RowGroupSpan {
        match &self.objects {
            Some(objects) => RowGroupSpan {
                rows: objects.samples_per_file,
                offset: 0,
                len_bytes: objects.size(file),
            },
            None => self.files[file].row_groups[row_group],
        }
    }
}

/// Lists `prefix`, keeps the first `files` Parquet objects in key order and reads their footers.
/// `columns`: the top-level columns whose bytes a reader fetches (`None`: all).
/// `with_chunks`: also keep each file's column chunks and hashes, for `run --verify`.
pub fn discover(
    source: &dyn ObjectSource,
    prefix: &str,
    files: usize,
    columns: Option<&[String]>,
    with_chunks: bool,
) -> Result<Catalog, CatalogError> {
    let mut objects: Vec<ObjectMeta> = source
        .list(prefix)?
        .into_iter()
        .filter(|o| o.key.ends_with(".parquet"))
        .collect();
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    let listed = objects.len();
    if listed < files {
        return Err(CatalogError::NotEnoughFiles {
            location: source.describe(prefix),
            found: listed,
            needed: files,
        });
    }
    objects.truncate(files);
    let layouts = read_layouts(source, &objects, columns, with_chunks)?;
    Ok(Catalog {
        source: source.describe(prefix),
        parquet_objects_listed: listed,
        files: layouts,
        objects: None,
    })
}

/// Reads the footers of `objects`, [`FOOTER_READS_IN_FLIGHT`] at a time, in order.
fn read_layouts(
    source: &dyn ObjectSource,
    objects: &[ObjectMeta],
    columns: Option<&[String]>,
    with_chunks: bool,
) -> Result<Vec<FileLayout>, CatalogError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<FileLayout, CatalogError>>>> = objects
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..FOOTER_READS_IN_FLIGHT.min(objects.len()) {
            scope.spawn(|| {
                use std::sync::atomic::Ordering::Relaxed;
                while !failed.load(Relaxed) {
                    let i = next.fetch_add(1, Relaxed);
                    let Some(object) = objects.get(i) else { break };
                    let result = read_layout(source, object, columns, with_chunks);
                    failed.fetch_or(result.is_err(), Relaxed);
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(result);
                    }
                }
            });
        }
    });
    let slots: Vec<Option<Result<FileLayout, CatalogError>>> = results
        .into_iter()
        .map(|slot| slot.into_inner().ok().flatten())
        .collect();
    // After a failure the other workers stop, so some files may be unread: report the failure
    // that comes first in key order, never the unread files.
    let mut layouts = Vec::with_capacity(objects.len());
    let mut unread = None;
    for (i, slot) in slots.into_iter().enumerate() {
        match slot {
            Some(Ok(layout)) => layouts.push(layout),
            Some(Err(e)) => return Err(e),
            None => unread = unread.or(Some(i)),
        }
    }
    if let Some(i) = unread {
        return Err(CatalogError::BadFooter {
            key: objects[i].key.clone(),
            reason: "its footer was not read (a footer reader stopped early)".into(),
        });
    }
    Ok(layouts)
}

/// The catalog of a dataset that need not exist: every file has the layout the generator would
/// write, read from the footer of a probed file.
pub fn computed(
    spec: &DatasetSpec,
    probe: &ProbedFile,
    files: usize,
    columns: Option<&[String]>,
    with_chunks: bool,
) -> Result<Catalog, CatalogError> {
    let first_key = spec.file_key(0);
    let source = ProbedSource {
        key: &first_key,
        file: probe,
    };
    let template = read_layout(
        &source,
        &ObjectMeta {
            key: first_key.clone(),
            size_bytes: probe.size_bytes,
        },
        columns,
        with_chunks,
    )?;
    let layouts = (0..files)
        .map(|i| FileLayout {
            key: spec.file_key(i),
            ..template.clone()
        })
        .collect();
    Ok(Catalog {
        source: source.describe(&spec.train_prefix),
        parquet_objects_listed: files,
        files: layouts,
        objects: None,
    })
}

/// Reads one file's footer and derives its row-group byte ranges.
pub fn read_layout(
    source: &dyn ObjectSource,
    object: &ObjectMeta,
    columns: Option<&[String]>,
    with_chunks: bool,
) -> Result<FileLayout, CatalogError> {
    let key = &object.key;
    let size = object.size_bytes;
    let not_parquet = |reason: String| CatalogError::NotParquet {
        key: key.clone(),
        reason,
    };
    if size < 4 + TRAILER_BYTES {
        return Err(not_parquet(format!("it is only {size} bytes long")));
    }
    let first = source.get_range(key, ByteRange::Suffix(FOOTER_FIRST_FETCH_BYTES.min(size)))?;
    let mut fetched = first.len() as u64;
    let trailer: &[u8; 8] = first
        .get(first.len().saturating_sub(8)..)
        .and_then(|t| t.try_into().ok())
        .ok_or_else(|| not_parquet("the storage returned fewer bytes than asked".into()))?;
    if &trailer[4..] == b"PARE" {
        return Err(not_parquet(
            "its footer is encrypted, which ringload does not read".into(),
        ));
    }
    if &trailer[4..] != b"PAR1" {
        return Err(not_parquet("it does not end with the PAR1 magic".into()));
    }
    let tail = FooterTail::try_new(trailer).map_err(|e| CatalogError::BadFooter {
        key: key.clone(),
        reason: e.to_string(),
    })?;
    let metadata_len = tail.metadata_length() as u64;
    if metadata_len + TRAILER_BYTES + 4 > size {
        return Err(CatalogError::BadFooter {
            key: key.clone(),
            reason: format!("it claims {metadata_len} bytes of metadata in a file of {size} bytes"),
        });
    }
    let footer = if metadata_len + TRAILER_BYTES <= first.len() as u64 {
        first
    } else {
        // The metadata is longer than the first fetch: get exactly all of it.
        let all = source.get_range(key, ByteRange::Suffix(metadata_len + TRAILER_BYTES))?;
        fetched += all.len() as u64;
        if (all.len() as u64) < metadata_len + TRAILER_BYTES {
            // A listing that claims more bytes than the object holds, or a short answer.
            return Err(not_parquet(format!(
                "asked for its last {} bytes (the footer) and the storage returned {}",
                metadata_len + TRAILER_BYTES,
                all.len()
            )));
        }
        all
    };
    let start = footer.len() as u64 - metadata_len - TRAILER_BYTES;
    let metadata_bytes = footer.slice(start as usize..(footer.len() - TRAILER_BYTES as usize));
    let metadata = ParquetMetaDataReader::decode_metadata(&metadata_bytes).map_err(|e| {
        CatalogError::BadFooter {
            key: key.clone(),
            reason: e.to_string(),
        }
    })?;
    let data_end = size - metadata_len - TRAILER_BYTES;
    let leaves = chosen_leaves(key, &metadata, columns)?;
    let row_groups = row_group_spans(key, &metadata, &leaves, data_end)?;
    let chunks = match with_chunks {
        true => Some(chunks_within(key, &metadata, &row_groups)?),
        false => None,
    };
    let extents = match columns {
        Some(_) => Some(selected_extents(&metadata, &leaves).map_err(|reason| {
            CatalogError::BadFooter {
                key: key.clone(),
                reason,
            }
        })?),
        None => None,
    };
    Ok(FileLayout {
        key: key.clone(),
        size_bytes: size,
        footer_fetch_bytes: fetched,
        metadata_bytes: metadata_len,
        rows: metadata.file_metadata().num_rows().max(0) as u64,
        row_groups,
        chunks,
        extents,
    })
}

/// The extents of the chunks of `leaves` in every row group of `metadata`, in offset order.
fn selected_extents(
    metadata: &ParquetMetaData,
    leaves: &[usize],
) -> Result<Arc<[extents::Extent]>, String> {
    let mut list = Vec::with_capacity(metadata.num_row_groups() * leaves.len());
    for (index, rg) in metadata.row_groups().iter().enumerate() {
        for &leaf in leaves {
            let (offset, len_bytes) = verify::chunk_span(rg.column(leaf)).ok_or_else(|| {
                format!("row group {index}, column {leaf}: a negative offset or length")
            })?;
            list.push(extents::Extent { offset, len_bytes });
        }
    }
    extents::in_order(list)
}

/// The leaf columns of the chosen top-level `columns` (`None`: all).
fn chosen_leaves(
    key: &str,
    metadata: &ParquetMetaData,
    columns: Option<&[String]>,
) -> Result<Vec<usize>, CatalogError> {
    let schema = metadata.file_metadata().schema_descr();
    let root_of = |i: usize| {
        schema
            .column(i)
            .path()
            .parts()
            .first()
            .cloned()
            .unwrap_or_default()
    };
    let leaves: Vec<usize> = match columns {
        None => (0..schema.num_columns()).collect(),
        Some(names) => {
            let mut chosen = Vec::new();
            for name in names {
                let matching: Vec<usize> = (0..schema.num_columns())
                    .filter(|&i| &root_of(i) == name)
                    .collect();
                if matching.is_empty() {
                    let mut available: Vec<String> =
                        (0..schema.num_columns()).map(root_of).collect();
                    available.dedup();
                    return Err(CatalogError::MissingColumn {
                        key: key.to_string(),
                        column: name.clone(),
                        available: available.join(", "),
                    });
                }
                chosen.extend(matching);
            }
            chosen
        }
    };
    Ok(leaves)
}

/// Each row group's span over the chosen leaf columns. Every span must lie between the
/// leading magic and the metadata (`data_end`).
fn row_group_spans(
    key: &str,
    metadata: &ParquetMetaData,
    leaves: &[usize],
    data_end: u64,
) -> Result<Vec<RowGroupSpan>, CatalogError> {
    let bad = |reason: String| CatalogError::BadFooter {
        key: key.to_string(),
        reason,
    };
    let mut spans = Vec::with_capacity(metadata.num_row_groups());
    for (index, rg) in metadata.row_groups().iter().enumerate() {
        let mut start = u64::MAX;
        let mut end = 0u64;
        for &leaf in leaves {
            let chunk = rg.column(leaf);
            let (offset, len) = verify::chunk_span(chunk).ok_or_else(|| {
                bad(format!(
                    "row group {index}, column {leaf}: negative offset {} or length {}",
                    chunk.data_page_offset(),
                    chunk.compressed_size()
                ))
            })?;
            start = start.min(offset);
            end = end.max(offset.saturating_add(len));
        }
        if leaves.is_empty() || start < 4 || end > data_end || start >= end {
            return Err(bad(format!(
                "row group {index} spans bytes {start}..{end}, outside the data region 4..{data_end}"
            )));
        }
        spans.push(RowGroupSpan {
            rows: rg.num_rows().max(0) as u64,
            offset: start,
            len_bytes: end - start,
        });
    }
    Ok(spans)
}

/// Every column chunk inside the row groups' `spans` (chunks of columns not read included,
/// when they lie between read ones), in offset order, with its hash when the footer has
/// [`verify::HASHES_KEY`].
fn chunks_within(
    key: &str,
    metadata: &ParquetMetaData,
    spans: &[RowGroupSpan],
) -> Result<Arc<[Chunk]>, CatalogError> {
    let bad = |reason: String| CatalogError::BadFooter {
        key: key.to_string(),
        reason,
    };
    let leaves = metadata.file_metadata().schema_descr().num_columns();
    let hashes = match metadata
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == verify::HASHES_KEY))
        .and_then(|e| e.value.as_deref())
    {
        Some(value) => Some(verify::decode_hashes(value, spans.len(), leaves).map_err(bad)?),
        None => None,
    };
    let mut chunks = Vec::new();
    for (index, (rg, span)) in metadata.row_groups().iter().zip(spans).enumerate() {
        for leaf in 0..leaves {
            let Some((offset, len_bytes)) = verify::chunk_span(rg.column(leaf)) else {
                return Err(bad(format!(
                    "row group {index}, column {leaf}: a negative offset or length"
                )));
            };
            if offset >= span.offset && offset.saturating_add(len_bytes) <= span.end() {
                chunks.push(Chunk {
                    row_group: index as u32,
                    column: leaf as u32,
                    offset,
                    len_bytes,
                    xxh3: hashes.as_ref().map(|h| h[index * leaves + leaf]),
                });
            }
        }
    }
    chunks.sort_by_key(|c| c.offset);
    if chunks.windows(2).any(|w| w[0].end() > w[1].offset) {
        return Err(bad("two column chunks overlap".into()));
    }
    Ok(chunks.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datagen::{Fill, write_file};
    use crate::schema::{ColumnSpec, Dtype};

    fn spec() -> DatasetSpec {
        DatasetSpec {
            train_prefix: "data/t/train/".into(),
            columns: ["x", "y"]
                .iter()
                .map(|n| ColumnSpec {
                    name: (*n).into(),
                    dtype: Dtype::Float32,
                    size: 1000,
                    read: true,
                })
                .collect(),
            rows_per_file: 12,
            row_group_rows: 4,
            seed: 1,
        }
    }

    fn write_dataset(root: &Path, spec: &DatasetSpec, files: usize) {
        for i in 0..files {
            let bytes = write_file(spec, Fill::for_file(spec.seed, i), Vec::new(), |_| {}).unwrap();
            let path = root.join(spec.file_key(i));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
    }

    #[test]
    fn discovered_layout_equals_computed_layout() {
        let root = tempfile::tempdir().unwrap();
        let spec = spec();
        write_dataset(root.path(), &spec, 3);
        let source = DirSource::new(root.path());
        let found = discover(&source, &spec.train_prefix, 3, None, false).unwrap();
        let probe = crate::datagen::probe_file(&spec).unwrap();
        let computed = computed(&spec, &probe, 3, None, false).unwrap();
        assert_eq!(found.files, computed.files);
        let file = &found.files[0];
        assert_eq!(file.row_groups.len(), 3);
        assert!(file.row_groups.iter().all(|rg| rg.rows == 4));
        // Row groups follow each other from byte 4 on.
        assert_eq!(file.row_groups[0].offset, 4);
        for pair in file.row_groups.windows(2) {
            assert_eq!(pair[0].end(), pair[1].offset);
        }
    }

    #[test]
    fn column_subset_narrows_each_range() {
        let root = tempfile::tempdir().unwrap();
        let spec = spec();
        write_dataset(root.path(), &spec, 1);
        let source = DirSource::new(root.path());
        let all = discover(&source, &spec.train_prefix, 1, None, false).unwrap();
        let only_y = discover(
            &source,
            &spec.train_prefix,
            1,
            Some(&["y".to_string()]),
            false,
        )
        .unwrap();
        let (a, y) = (&all.files[0].row_groups[0], &only_y.files[0].row_groups[0]);
        assert!(y.offset > a.offset && y.end() == a.end(), "{a:?} {y:?}");
        let err = discover(
            &source,
            &spec.train_prefix,
            1,
            Some(&["z".to_string()]),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no column 'z' (it has x, y)"), "{err}");
    }

    #[test]
    fn long_footer_takes_a_second_fetch() {
        // 3000 one-value columns make a metadata block longer than the first fetch.
        let spec = DatasetSpec {
            columns: (0..3000)
                .map(|i| ColumnSpec {
                    name: format!("c{i}"),
                    dtype: Dtype::Int8,
                    size: 1,
                    read: true,
                })
                .collect(),
            rows_per_file: 2,
            row_group_rows: 2,
            ..spec()
        };
        let root = tempfile::tempdir().unwrap();
        write_dataset(root.path(), &spec, 1);
        let found = discover(
            &DirSource::new(root.path()),
            &spec.train_prefix,
            1,
            None,
            false,
        )
        .unwrap();
        let file = &found.files[0];
        assert!(
            file.metadata_bytes > FOOTER_FIRST_FETCH_BYTES,
            "{}",
            file.metadata_bytes
        );
        assert_eq!(
            file.footer_fetch_bytes,
            FOOTER_FIRST_FETCH_BYTES + file.metadata_bytes + TRAILER_BYTES
        );
    }

    /// Footers are read in parallel; the catalog keeps key order, and a bad file among many
    /// is the one named, whichever reader met it.
    #[test]
    fn parallel_footer_reads_keep_order_and_name_the_bad_file() {
        let root = tempfile::tempdir().unwrap();
        let spec = spec();
        let files = 3 * FOOTER_READS_IN_FLIGHT;
        write_dataset(root.path(), &spec, files);
        let source = DirSource::new(root.path());
        let found = discover(&source, &spec.train_prefix, files, None, false).unwrap();
        let keys: Vec<String> = found.files.iter().map(|f| f.key.clone()).collect();
        let expected: Vec<String> = (0..files).map(|i| spec.file_key(i)).collect();
        assert_eq!(keys, expected);
        let bad = root.path().join(spec.file_key(files - 5));
        std::fs::write(&bad, b"not parquet at all").unwrap();
        for _ in 0..5 {
            let err = discover(&source, &spec.train_prefix, files, None, false)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&spec.file_key(files - 5)), "{err}");
            assert!(err.contains("is not Parquet"), "{err}");
        }
    }

    #[test]
    fn bad_files_are_named() {
        let root = tempfile::tempdir().unwrap();
        let spec = spec();
        write_dataset(root.path(), &spec, 1);
        let dir = root.path().join(&spec.train_prefix);
        let good = std::fs::read(dir.join("train_0000.parquet")).unwrap();
        // A file that is not Parquet, one whose footer was cut, one too short.
        std::fs::write(dir.join("train_0001.parquet"), vec![b'x'; 4096]).unwrap();
        let mut cut = good.clone();
        let n = cut.len();
        cut.drain(n - 200..n - 8);
        std::fs::write(dir.join("train_0002.parquet"), &cut).unwrap();
        std::fs::write(dir.join("train_0003.parquet"), b"PAR1").unwrap();
        let source = DirSource::new(root.path());
        let meta = |name: &str| ObjectMeta {
            key: format!("{}{name}", spec.train_prefix),
            size_bytes: std::fs::metadata(dir.join(name)).unwrap().len(),
        };
        let table = [
            (
                "train_0001.parquet",
                "is not Parquet: it does not end with the PAR1 magic",
            ),
            ("train_0002.parquet", "has a truncated or corrupt footer"),
            (
                "train_0003.parquet",
                "is not Parquet: it is only 4 bytes long",
            ),
        ];
        for (name, expected) in table {
            let err = read_layout(&source, &meta(name), None, true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{name}: {err}");
        }
    }

    #[test]
    fn listing_sorts_filters_and_counts() {
        let root = tempfile::tempdir().unwrap();
        let spec = spec();
        write_dataset(root.path(), &spec, 2);
        let dir = root.path().join(&spec.train_prefix);
        std::fs::write(dir.join("README.txt"), b"not data").unwrap();
        std::fs::write(dir.join(".train_0009.parquet.1.tmp"), b"partial").unwrap();
        let source = DirSource::new(root.path());
        let err = discover(&source, &spec.train_prefix, 3, None, false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("found 2 Parquet files under"), "{err}");
        assert!(err.ends_with("pass --files 2"), "{err}");
        let found = discover(&source, &spec.train_prefix, 2, None, false).unwrap();
        assert_eq!(found.files[1].key, "data/t/train/train_0001.parquet");
        let err = discover(&source, "data/missing/train/", 1, None, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
