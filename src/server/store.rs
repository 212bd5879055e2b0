//! What the server serves: a directory of buckets, or one read-only virtual dataset. Requests
//! see one [`Store`]; only the directory backend can write.

use std::time::SystemTime;

use bytes::Bytes;

use super::dir::{DirStore, OpenFile};
use super::error::S3Error;
use super::object::ObjectInfo;
use super::virtual_dataset::VirtualDataset;

/// The backend.
#[derive(Debug)]
pub enum Store {
    Dir(DirStore),
    Virtual(VirtualDataset),
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
}

impl OpenObject<'_> {
    /// Bytes `first..=last` of the object as shared slices (no copy).
    pub fn slices(&self, first: u64, last: u64) -> Result<Vec<Bytes>, S3Error> {
        match &self.source {
            Source::File(file) => Ok(vec![file.map(first, last)?]),
            Source::Virtual(dataset) => Ok(dataset.slices(first, last)),
        }
    }
}

impl Store {
    /// One line for the operator: what is served.
    pub fn describe(&self) -> String {
        match self {
            Store::Dir(d) => d.describe(),
            Store::Virtual(v) => v.describe(),
        }
    }

    /// The directory backend, for writes.
    pub fn writable(&self) -> Result<&DirStore, S3Error> {
        match self {
            Store::Dir(d) => Ok(d),
            Store::Virtual(_) => Err(S3Error::read_only()),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, SystemTime)>, S3Error> {
        match self {
            Store::Dir(d) => d.buckets(),
            Store::Virtual(v) => Ok(vec![(v.bucket.clone(), v.created)]),
        }
    }

    /// `Ok` when the bucket exists, `NoSuchBucket` otherwise.
    pub fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        match self {
            Store::Dir(d) => d.bucket_path(bucket).map(|_| ()),
            Store::Virtual(v) => v.check_bucket(bucket),
        }
    }

    /// The objects whose keys start with `prefix`, sorted by key.
    pub fn objects(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, S3Error> {
        match self {
            Store::Dir(d) => d.objects(bucket, prefix),
            Store::Virtual(v) => {
                v.check_bucket(bucket)?;
                Ok(v.objects(prefix))
            }
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
        }
    }
}
