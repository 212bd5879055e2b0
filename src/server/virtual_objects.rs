//! A whole-object virtual store: every object of an [`ObjectDataset`] (npz, jpeg, tfrecord; DLIO's
//! names and sizes) served from the file index alone, without a disk.
//!
//! Nothing is held per object. A GET or HEAD parses the key back to its index
//! ([`ObjectDataset::index_of`]), takes the size from [`ObjectDataset::object_bytes`] and makes
//! the bytes with [`ObjectDataset::read_at`] a frame at a time as hyper takes them
//! ([`super::body::GENERATED_FRAME_BYTES`] per response in flight, whatever the object's size). A LIST is cut
//! from the keys by bisection on the index ([`super::list::page`] over [`Sorted`]): one page of
//! at most 1,000 keys is made per request, so retinanet's 1,170,301 objects list in pages as S3
//! lists them, at no cost before someone asks.
//!
//! Memory per LIST request: the page's entries, at most [`super::list::MAX_KEYS`] objects of
//! ~200 bytes each (key, ETag, size, time) plus their XML (~300 bytes each): under 1 MB,
//! independent of the number of objects; finding the page's start makes O(log n) keys.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};

use crate::dataset::ObjectDataset;
use crate::units;

use super::body::{Body, MakeBytes};
use super::error::S3Error;
use super::list::Sorted;
use super::object::{ObjectInfo, tag_of};

/// The served dataset: its description, and nothing per object.
#[derive(Debug)]
pub struct VirtualObjects {
    pub bucket: String,
    /// Workload name, for messages.
    pub label: String,
    dataset: Arc<ObjectDataset>,
    /// Every object's Last-Modified: when the store was made.
    pub created: SystemTime,
}

impl VirtualObjects {
    pub fn new(bucket: &str, dataset: ObjectDataset, label: String) -> VirtualObjects {
        VirtualObjects {
            bucket: bucket.to_string(),
            label,
            dataset: Arc::new(dataset),
            created: SystemTime::now(),
        }
    }

    /// What is served.
    pub fn dataset(&self) -> &ObjectDataset {
        &self.dataset
    }

    /// One line for the operator.
    pub fn describe(&self) -> String {
        let d = &self.dataset;
        let sizes = if d.record_length_stdev == 0.0 {
            format!("{} each", units::bytes(d.object_bytes(0)))
        } else {
            format!(
                "sizes drawn around {} (record_length_bytes_stdev {})",
                units::bytes(d.record_length as u64),
                units::bytes(d.record_length_stdev as u64)
            )
        };
        format!(
            "virtual {}: {} {} object{} under {}, {sizes}, in bucket '{}' (made on request; \
             nothing held per object)",
            self.label,
            d.num_files,
            d.format,
            if d.num_files == 1 { "" } else { "s" },
            d.train_prefix,
            self.bucket,
        )
    }

    pub fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        if bucket == self.bucket {
            Ok(())
        } else {
            Err(S3Error::no_such_bucket(bucket))
        }
    }

    /// Object `i`'s metadata; its ETag is a tag of the dataset's description and `i`, stable
    /// across restarts.
    fn info_at(&self, i: u64) -> ObjectInfo {
        let d = &self.dataset;
        let size_bytes = d.object_bytes(i);
        ObjectInfo {
            key: d.key(i),
            size_bytes,
            etag: tag_of(&[
                d.seed,
                d.format as u64,
                d.num_files,
                d.samples_per_file,
                d.record_length.to_bits(),
                d.record_length_stdev.to_bits(),
                u64::from(d.randomize),
                i,
                size_bytes,
            ]),
            last_modified: self.created,
        }
    }

    /// The object at `key` and its index, if `key` is one of the dataset's names.
    pub fn info(&self, key: &str) -> Option<(u64, ObjectInfo)> {
        let i = self.dataset.index_of(key)?;
        Some((i, self.info_at(i)))
    }

    /// Bytes `first..=last` of object `i` (within its size), made as they are sent.
    pub(crate) fn body(&self, i: u64, first: u64, last: u64) -> Body {
        let dataset = Arc::clone(&self.dataset);
        let make: MakeBytes = Arc::new(move |offset, len| {
            let mut buf = BytesMut::zeroed(len);
            dataset.read_at(i, offset, &mut buf);
            buf.freeze()
        });
        Body::generated(first, last, make)
    }

    /// Bytes `first..=last` of object `i` in one buffer (for callers that want them whole).
    pub fn bytes(&self, i: u64, first: u64, last: u64) -> Bytes {
        let len = (last + 1 - first) as usize;
        let mut buf = BytesMut::zeroed(len);
        self.dataset.read_at(i, first, &mut buf);
        buf.freeze()
    }
}

/// Positions are file indices: DLIO's zero-padded names sort in index order.
impl Sorted for VirtualObjects {
    fn total(&self) -> u64 {
        self.dataset.num_files
    }

    fn key(&self, position: u64) -> Cow<'_, str> {
        Cow::Owned(self.dataset.key(position))
    }

    fn object(&self, position: u64) -> Cow<'_, ObjectInfo> {
        Cow::Owned(self.info_at(position))
    }
}

#[cfg(test)]
mod tests {
    use super::super::list::{self, After, Entry, ListParams};
    use super::*;
    use crate::dataset::{DLIO_GENERATION_SEED, Format};

    fn jpegs(files: u64) -> VirtualObjects {
        VirtualObjects::new(
            "bkt",
            ObjectDataset {
                format: Format::Jpeg,
                train_prefix: "data/retinanet/train/".into(),
                num_files: files,
                samples_per_file: 1,
                record_length: 322_957.0,
                record_length_stdev: 0.0,
                seed: DLIO_GENERATION_SEED,
                randomize: true,
                content: crate::content::Shape::default(),
            },
            "retinanet".into(),
        )
    }

    fn params(
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: usize,
        after: Option<After>,
    ) -> ListParams {
        ListParams {
            prefix: prefix.into(),
            delimiter: delimiter.map(String::from),
            max_keys,
            after,
        }
    }

    fn keys(page: &list::Page<'_>) -> Vec<String> {
        page.entries
            .iter()
            .map(|e| match e {
                Entry::Object(o) => o.key.clone(),
                Entry::CommonPrefix(p) => format!("{p}*"),
            })
            .collect()
    }

    #[test]
    fn pages_follow_the_index_and_end_where_the_objects_do() {
        let v = jpegs(2500);
        let d = v.dataset();
        let mut after = None;
        let mut seen = Vec::new();
        for want in [1000, 1000, 500] {
            let page = list::page(&v, &params("", None, 1000, after.clone()));
            assert_eq!(page.entries.len(), want);
            assert_eq!(page.truncated, want == 1000);
            seen.extend(keys(&page));
            after = page.next.clone();
        }
        assert!(after.is_none());
        let all: Vec<String> = (0..2500).map(|i| d.key(i)).collect();
        assert_eq!(seen, all);
        // Sizes and ETags come with each entry.
        let page = list::page(&v, &params("", None, 2, None));
        let Entry::Object(o) = &page.entries[1] else {
            panic!("not an object")
        };
        assert_eq!(o.size_bytes, 322_624);
        assert_eq!(o.etag, v.info(&d.key(1)).unwrap().1.etag);
        assert_ne!(o.etag, v.info(&d.key(0)).unwrap().1.etag);
    }

    #[test]
    fn edge_cases_prefix_of_none_start_after_past_the_end_and_zero_keys() {
        let v = jpegs(2500);
        let d = v.dataset();
        let empty = |p: &ListParams| {
            let page = list::page(&v, p);
            page.entries.is_empty() && !page.truncated && page.next.is_none()
        };
        // A prefix that matches none, before, inside and after the keys.
        assert!(empty(&params("a", None, 1000, None)));
        assert!(empty(&params(
            "data/retinanet/train/img_9",
            None,
            1000,
            None
        )));
        assert!(empty(&params("zzz", None, 1000, None)));
        // Start-after past the end, and at the last key.
        assert!(empty(&params(
            "",
            None,
            1000,
            Some(After::Key("zzz".into()))
        )));
        assert!(empty(&params(
            "",
            None,
            1000,
            Some(After::Key(d.key(2499)))
        )));
        // MaxKeys 0: nothing, not truncated (as S3 answers).
        assert!(empty(&params("", None, 0, None)));
        // Start-after before every key, and between two keys.
        let page = list::page(&v, &params("", None, 3, Some(After::Key("a".into()))));
        assert_eq!(keys(&page), [d.key(0), d.key(1), d.key(2)]);
        let between = format!("{}~", d.key(1233));
        let page = list::page(&v, &params("", None, 2, Some(After::Key(between))));
        assert_eq!(keys(&page), [d.key(1234), d.key(1235)]);
        // A prefix picks a run of indices: img_02… is 200..=299.
        let page = list::page(&v, &params("data/retinanet/train/img_02", None, 1000, None));
        assert_eq!(page.entries.len(), 100);
        assert_eq!(keys(&page)[0], d.key(200));
        assert_eq!(keys(&page)[99], d.key(299));
        // Start-after before the prefix starts at the prefix.
        let page = list::page(
            &v,
            &params(
                "data/retinanet/train/img_02",
                None,
                1,
                Some(After::Key(d.key(5))),
            ),
        );
        assert_eq!(keys(&page), [d.key(200)]);
    }

    #[test]
    fn a_delimiter_rolls_every_key_into_one_prefix_without_walking_them() {
        let v = jpegs(1_170_301);
        let page = list::page(&v, &params("", Some("/"), 1000, None));
        assert_eq!(keys(&page), ["data/*"]);
        assert!(!page.truncated);
        let page = list::page(&v, &params("data/retinanet/", Some("/"), 1, None));
        assert_eq!(keys(&page), ["data/retinanet/train/*"]);
        // Past the prefix nothing is left.
        let after = Some(After::Prefix("data/".into()));
        assert!(
            list::page(&v, &params("", Some("/"), 1000, after))
                .entries
                .is_empty()
        );
        // The last page of the million.
        let d = v.dataset();
        let page = list::page(
            &v,
            &params("", None, 1000, Some(After::Key(d.key(1_170_300 - 1000)))),
        );
        assert_eq!(page.entries.len(), 1000);
        assert!(!page.truncated);
        assert_eq!(keys(&page)[999], d.key(1_170_300));
    }

    #[test]
    fn objects_are_found_by_name_and_read_as_the_dataset_makes_them() {
        let v = jpegs(30);
        let d = v.dataset();
        assert!(v.info("data/retinanet/train/img_30_of_30.jpeg").is_none());
        assert!(v.info("data/retinanet/train/img_3_of_30.jpeg").is_none());
        let (i, info) = v.info(&d.key(7)).unwrap();
        assert_eq!((i, info.size_bytes), (7, 322_624));
        let mut want = vec![0u8; 322_624];
        d.read_at(7, 0, &mut want);
        let whole = v.body(7, 0, 322_623).into_bytes();
        assert_eq!(whole, want);
        assert_eq!(v.body(7, 1000, 322_623).into_bytes(), want[1000..]);
        assert_eq!(v.bytes(7, 5, 9), want[5..=9]);
        assert!(v.check_bucket("other").is_err());
    }
}
