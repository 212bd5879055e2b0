//! What the server serves: a directory of buckets, one read-only virtual dataset (Parquet
//! files from templates, or whole objects made from their index), or a sink that takes writes
//! and keeps only names and sizes. Requests see one [`Store`]; the directory
//! and the sink take writes.

use std::time::SystemTime;

use bytes::Bytes;

use super::body::Body;
use super::dir::{DirStore, OpenFile};
use super::error::S3Error;
use super::list::{self, ListParams, Page};
use super::object::{ObjectInfo, UploadInfo};
use super::sink::{SinkStats, SinkStore};
use super::virtual_dataset::VirtualDataset;
use super::virtual_objects::VirtualObjects;
use crate::dataset::ObjectDataset;

/// The backend.
#[derive(Debug)]
pub enum Store {
    Dir(DirStore),
    Virtual(VirtualDataset),
    /// Whole objects (npz, jpeg, tfrecord) made from their index: nothing held per object.
    VirtualObjects(VirtualObjects),
    Sink(SinkStore),
    /// A read-only dataset (`data`) with its bucket's keys under `prefix` sent to a sink: a
    /// training run that checkpoints between its steps (`workflow.checkpoint`) on the embedded
    /// server. Reads and listings under `prefix` and every write and upload go to the sink.
    WithSink {
        data: Box<Store>,
        prefix: String,
        sink: SinkStore,
    },
}

/// An object opened for reading: its metadata, and where its bytes come from.
#[derive(Debug)]
pub struct OpenObject<'a> {
    pub info: ObjectInfo,
    source: Source<'a>,
}

#[derive(Debug)]
enum Source<'a> {
    File(OpenFile),
    Virtual(&'a VirtualDataset),
    /// Object `.1` of the whole-object store.
    Objects(&'a VirtualObjects, u64),
    Sink(&'a SinkStore),
}

/// What a listing pages through: the objects under the prefix, listed in full, or (the
/// whole-object store) the store itself, paged from its index without listing it.
#[derive(Debug)]
pub enum Listing<'a> {
    Listed(Vec<ObjectInfo>),
    Objects(&'a VirtualObjects),
}

impl Listing<'_> {
    /// One page, as [`list::page`] cuts it.
    pub fn page(&self, params: &ListParams) -> Page<'_> {
        match self {
            Listing::Listed(objects) => list::page(objects.as_slice(), params),
            Listing::Objects(v) => list::page(*v, params),
        }
    }
}

impl OpenObject<'_> {
    /// Bytes `first..=last` of the object as shared slices (no copy).
    pub fn slices(&self, first: u64, last: u64) -> Result<Vec<Bytes>, S3Error> {
        match &self.source {
            Source::File(file) => Ok(vec![file.map(first, last)?]),
            Source::Virtual(dataset) => Ok(dataset.slices(first, last)),
            Source::Objects(v, i) => Ok(vec![v.bytes(*i, first, last)]),
            Source::Sink(sink) => Ok(vec![Bytes::from(
                sink.body(&self.info.key, first, last).into_bytes(),
            )]),
        }
    }

    /// Bytes `first..=last` as a response body: shared slices, or (the sink) made as sent.
    pub(crate) fn body(&self, first: u64, last: u64) -> Result<Body, S3Error> {
        match &self.source {
            Source::Sink(sink) => Ok(sink.body(&self.info.key, first, last)),
            Source::Objects(v, i) => Ok(v.body(*i, first, last)),
            _ => Ok(Body::from_chunks(self.slices(first, last)?)),
        }
    }
}

/// A store that takes writes.
#[derive(Debug, Clone, Copy)]
pub enum Writable<'a> {
    Dir(&'a DirStore),
    Sink(&'a SinkStore),
}

impl Store {
    /// A sink (`serve --sink`): `objects` (bucket-relative keys and sizes) listed in `bucket`
    /// and served by making their bytes (`Content::of(key, randomize)`); writes are discarded,
    /// and checked against the same content when `verify`. See [`super::sink`].
    pub fn sink(
        bucket: &str,
        objects: Vec<(String, u64)>,
        randomize: bool,
        verify: bool,
        shape: crate::content::Shape,
    ) -> Store {
        Store::Sink(SinkStore::new(bucket, objects, randomize, verify).reduced(shape))
    }

    /// The whole objects of `dataset` (npz, jpeg, tfrecord; DLIO's names under its train
    /// prefix) served read-only in `bucket`, made from their index on request; `label` names
    /// the workload in messages. See [`super::virtual_objects`].
    pub fn virtual_objects(bucket: &str, dataset: ObjectDataset, label: String) -> Store {
        Store::VirtualObjects(VirtualObjects::new(bucket, dataset, label))
    }

    /// `data` with the keys under `prefix` of its bucket sent to a sink of content
    /// `Content::of(key, randomize)` laid out as `shape` (see [`Store::WithSink`]).
    pub fn with_sink(
        data: Store,
        prefix: &str,
        randomize: bool,
        shape: crate::content::Shape,
    ) -> Result<Store, S3Error> {
        let buckets = data.buckets()?;
        let bucket = buckets.first().map_or("", |(b, _)| b.as_str());
        let sink = SinkStore::new(bucket, Vec::new(), randomize, false).reduced(shape);
        Ok(Store::WithSink {
            data: Box::new(data),
            prefix: prefix.to_string(),
            sink,
        })
    }

    /// Whether `key` is the sink's in a [`Store::WithSink`].
    fn sinks(prefix: &str, key: &str) -> bool {
        key.starts_with(prefix)
    }

    /// One line for the operator: what is served.
    pub fn describe(&self) -> String {
        match self {
            Store::WithSink { data, prefix, .. } => format!(
                "{}; writes and the keys under {prefix} to a sink (checkpoints)",
                data.describe()
            ),
            Store::Dir(d) => d.describe(),
            Store::Virtual(v) => v.describe(),
            Store::VirtualObjects(v) => v.describe(),
            Store::Sink(s) => s.describe(),
        }
    }

    /// The sink's totals, for a sink.
    pub fn sink_stats(&self) -> Option<SinkStats> {
        match self {
            Store::Sink(s) | Store::WithSink { sink: s, .. } => Some(s.stats()),
            _ => None,
        }
    }

    /// The backend, for writes (the virtual dataset is read-only).
    pub fn writable(&self) -> Result<Writable<'_>, S3Error> {
        match self {
            Store::Dir(d) => Ok(Writable::Dir(d)),
            Store::Sink(s) | Store::WithSink { sink: s, .. } => Ok(Writable::Sink(s)),
            Store::Virtual(_) | Store::VirtualObjects(_) => Err(S3Error::read_only()),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, SystemTime)>, S3Error> {
        match self {
            Store::Dir(d) => d.buckets(),
            Store::Virtual(v) => Ok(vec![(v.bucket.clone(), v.created)]),
            Store::VirtualObjects(v) => Ok(vec![(v.bucket.clone(), v.created)]),
            Store::Sink(s) => Ok(s.buckets()),
            Store::WithSink { data, .. } => data.buckets(),
        }
    }

    /// `Ok` when the bucket exists, `NoSuchBucket` otherwise.
    pub fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        match self {
            Store::Dir(d) => d.bucket_path(bucket).map(|_| ()),
            Store::Virtual(v) => v.check_bucket(bucket),
            Store::VirtualObjects(v) => v.check_bucket(bucket),
            Store::Sink(s) => s.check_bucket(bucket),
            Store::WithSink { data, .. } => data.check_bucket(bucket),
        }
    }

    /// What a listing of `bucket` under `prefix` pages through: the objects whose keys start
    /// with `prefix`, sorted by key (the whole-object store pages from its index instead).
    pub fn listing(&self, bucket: &str, prefix: &str) -> Result<Listing<'_>, S3Error> {
        match self {
            Store::Dir(d) => d.objects(bucket, prefix).map(Listing::Listed),
            Store::Virtual(v) => {
                v.check_bucket(bucket)?;
                Ok(Listing::Listed(v.objects(prefix)))
            }
            Store::VirtualObjects(v) => {
                v.check_bucket(bucket)?;
                Ok(Listing::Objects(v))
            }
            Store::Sink(s) => s.objects(bucket, prefix).map(Listing::Listed),
            Store::WithSink {
                data,
                prefix: sunk,
                sink,
            } => {
                if Store::sinks(sunk, prefix) {
                    return sink.objects(bucket, prefix).map(Listing::Listed);
                }
                let listing = data.listing(bucket, prefix)?;
                // A prefix above the checkpoint folder (`checkpoints/`, the bucket): the
                // dataset's keys and the sink's, in key order.
                match listing {
                    Listing::Listed(mut objects) if sunk.starts_with(prefix) => {
                        objects.extend(sink.objects(bucket, prefix)?);
                        objects.sort_by(|a, b| a.key.cmp(&b.key));
                        Ok(Listing::Listed(objects))
                    }
                    other => Ok(other),
                }
            }
        }
    }

    /// The multipart uploads in progress in `bucket` under `prefix`, sorted by key and id.
    pub fn uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>, S3Error> {
        match self {
            Store::Dir(d) => d.uploads(bucket, prefix),
            Store::Sink(s) | Store::WithSink { sink: s, .. } => s.uploads(bucket, prefix),
            Store::Virtual(v) => v.check_bucket(bucket).map(|()| Vec::new()),
            Store::VirtualObjects(v) => v.check_bucket(bucket).map(|()| Vec::new()),
        }
    }

    pub fn open(&self, bucket: &str, key: &str) -> Result<OpenObject<'_>, S3Error> {
        match self {
            Store::Dir(d) => {
                let file = d.open(bucket, key)?;
                Ok(OpenObject {
                    info: file.info.clone(),
                    source: Source::File(file),
                })
            }
            Store::Virtual(v) => {
                v.check_bucket(bucket)?;
                Ok(OpenObject {
                    info: v.info(key).ok_or_else(|| S3Error::no_such_key(key))?,
                    source: Source::Virtual(v),
                })
            }
            Store::VirtualObjects(v) => {
                v.check_bucket(bucket)?;
                let (i, info) = v.info(key).ok_or_else(|| S3Error::no_such_key(key))?;
                Ok(OpenObject {
                    info,
                    source: Source::Objects(v, i),
                })
            }
            Store::Sink(s) => Ok(OpenObject {
                info: s.info(bucket, key)?,
                source: Source::Sink(s),
            }),
            Store::WithSink { data, prefix, sink } => {
                if Store::sinks(prefix, key) {
                    Ok(OpenObject {
                        info: sink.info(bucket, key)?,
                        source: Source::Sink(sink),
                    })
                } else {
                    data.open(bucket, key)
                }
            }
        }
    }
}

impl Writable<'_> {
    pub fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        match self {
            Writable::Dir(d) => d.create_bucket(bucket),
            Writable::Sink(s) => s.create_bucket(bucket),
        }
    }

    pub fn delete_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        match self {
            Writable::Dir(d) => d.delete_bucket(bucket),
            Writable::Sink(s) => s.delete_bucket(bucket),
        }
    }

    /// Deletes an object; a missing key is not an error.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        match self {
            Writable::Dir(d) => d.delete(bucket, key),
            Writable::Sink(s) => s.delete(bucket, key),
        }
    }

    /// Starts a multipart upload; its id.
    pub fn create_multipart(&self, bucket: &str, key: &str) -> Result<String, S3Error> {
        match self {
            Writable::Dir(d) => d.create_multipart(bucket, key),
            Writable::Sink(s) => s.create_multipart(bucket, key),
        }
    }

    /// Ends an upload and drops its parts; `NoSuchUpload` for an id it does not know.
    pub fn abort_multipart(&self, upload_id: &str, bucket: &str, key: &str) -> Result<(), S3Error> {
        match self {
            Writable::Dir(d) => d.abort_multipart(upload_id, bucket, key),
            Writable::Sink(s) => s.abort_multipart(upload_id, bucket, key),
        }
    }
}
