//! The catalog of a whole-object dataset (npz, jpeg, tfrecord): which objects a run reads and
//! how big each one is. A reader fetches each object whole, so nothing is read from inside an
//! object (no footer, no index): the catalog is a key and a size per object.
//!
//! Two routes give one [`ObjectCatalog`]:
//!
//! - [`ObjectCatalog::computed`] ([`super::computed_objects`]): from the [`ObjectDataset`] alone, no listing: the keys are DLIO's names and
//!   each size is [`ObjectDataset::object_bytes`] (what `generate` writes and the virtual store
//!   serves). `plan` uses it, so it needs no server.
//! - [`ObjectCatalog::listed`] ([`super::discover_objects`]): listed from a bucket or a directory through [`ObjectSource`]: the objects
//!   under `<data_folder>/train/` whose names end in the format's extension, in key order, the
//!   first `num_files_train` (as DLIO lists and sorts them); sizes from the listing.
//!
//! **Bytes per object.** A million objects must not cost a million `String`s. When the keys are
//! DLIO's names (`img_<i>_of_<M>.<ext>`, indices 0…N−1 in order; a listing is checked for that)
//! only the index is kept, implicitly: **8 bytes per object** (its size, a `u64`). Other keys go
//! into one arena (`String`) with each key's end offset (`u64`): **16 bytes per object plus the
//! key's bytes**. No per-object allocation either way, against a target of 64 bytes plus the key.
//! [`ObjectCatalog::heap_bytes`] states what a catalog holds; a unit test builds 10,000,000
//! computed entries and checks it. A listing itself is transient: `ObjectSource::list` hands
//! over the whole listing (one `ObjectMeta`, ~32 bytes plus the key, per object listed) before
//! it is compacted.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::dataset::{Format, ObjectDataset, object_name, parse_object_name};
use crate::s3::ObjectMeta;

/// The keys of an object catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectKeys {
    /// DLIO's names: key `i` is `<train_prefix>img_<i>_of_<names_of>.<ext>`, nothing stored
    /// per object. `names_of` is the N in the names, which is the dataset's size when it was
    /// generated, not necessarily the number of files read (`--files` may take fewer).
    Dlio { train_prefix: String, names_of: u64 },
    /// Any other keys: one arena, and the end of key `i` in it.
    Arena { text: String, ends: Vec<u64> },
}

/// The objects a run reads, compactly: see the module's doc for the bytes per object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCatalog {
    /// The format's extension (`npz`, `jpeg`, `tfrecord`).
    pub extension: String,
    /// Samples in each object (DLIO's `num_samples_per_file`): the rows of its one GET.
    pub samples_per_file: u64,
    /// Objects listed that matched the format (before taking the first N); for a computed
    /// catalog, the number of files.
    pub listed: usize,
    keys: ObjectKeys,
    sizes: Vec<u64>,
    /// What the listing held before it was compacted: every object listed under the prefix,
    /// an `ObjectMeta` and its key each (0 for a computed catalog). Transient, but the run's
    /// memory budget counts it, as the process's peak includes it.
    #[serde(default)]
    pub listing_bytes: u64,
}

impl ObjectCatalog {
    /// The objects' format.
    pub fn format(&self) -> Option<Format> {
        Format::parse(&self.extension)
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Object `i`'s size in bytes.
    pub fn size(&self, i: usize) -> u64 {
        self.sizes[i]
    }

    /// Every object's size, in key order.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// How the keys are held.
    pub fn keys(&self) -> &ObjectKeys {
        &self.keys
    }

    /// Object `i`'s key.
    pub fn key(&self, i: usize) -> Cow<'_, str> {
        match &self.keys {
            ObjectKeys::Dlio {
                train_prefix,
                names_of,
            } => Cow::Owned(object_name(
                train_prefix,
                i as u64,
                *names_of,
                &self.extension,
            )),
            ObjectKeys::Arena { text, ends } => {
                let start = if i == 0 { 0 } else { ends[i - 1] as usize };
                Cow::Borrowed(&text[start..ends[i] as usize])
            }
        }
    }

    /// Bytes this catalog holds on the heap: 8 per object with DLIO's names, 16 per object plus
    /// the keys' bytes otherwise (plus the prefix or format strings, once).
    pub fn heap_bytes(&self) -> usize {
        let keys = match &self.keys {
            ObjectKeys::Dlio { train_prefix, .. } => train_prefix.capacity(),
            ObjectKeys::Arena { text, ends } => text.capacity() + ends.capacity() * 8,
        };
        self.sizes.capacity() * 8 + keys + self.extension.capacity()
    }

    /// The smallest, mean and largest object size (0s when empty).
    pub fn size_range(&self) -> (u64, f64, u64) {
        let min = self.sizes.iter().copied().min().unwrap_or(0);
        let max = self.sizes.iter().copied().max().unwrap_or(0);
        let sum: u128 = self.sizes.iter().map(|&s| u128::from(s)).sum();
        let mean = if self.sizes.is_empty() {
            0.0
        } else {
            sum as f64 / self.sizes.len() as f64
        };
        (min, mean, max)
    }
}

impl ObjectCatalog {
    /// The first `files` objects of `dataset`, computed: DLIO's names and
    /// [`ObjectDataset::object_bytes`] sizes, nothing listed.
    pub fn computed(dataset: &ObjectDataset, files: usize) -> ObjectCatalog {
        ObjectCatalog {
            extension: dataset.format.extension().to_string(),
            samples_per_file: dataset.samples_per_file,
            listed: files,
            keys: ObjectKeys::Dlio {
                train_prefix: dataset.train_prefix.clone(),
                names_of: dataset.num_files,
            },
            sizes: (0..files as u64).map(|i| dataset.object_bytes(i)).collect(),
            listing_bytes: 0,
        }
    }

    /// The first `files` objects of a listing of `dataset.train_prefix`, in key order, whose
    /// names end in the format's extension. Keys that are DLIO's names in index order are kept
    /// as indices; others in an arena. `Err(found)`: fewer than `files` matched.
    pub fn listed(
        mut objects: Vec<ObjectMeta>,
        dataset: &ObjectDataset,
        files: usize,
    ) -> Result<ObjectCatalog, usize> {
        let prefix = &dataset.train_prefix;
        let extension = dataset.format.extension();
        let suffix = format!(".{extension}");
        let listing_bytes = objects
            .iter()
            .map(|o| (std::mem::size_of::<ObjectMeta>() + o.key.capacity()) as u64)
            .sum();
        objects.retain(|o| o.key.ends_with(&suffix));
        objects.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let listed = objects.len();
        if listed < files {
            return Err(listed);
        }
        objects.truncate(files);
        let sizes: Vec<u64> = objects.iter().map(|o| o.size_bytes).collect();
        // DLIO's names when the first is one, and each key is the name of its index.
        let names_of = objects
            .first()
            .and_then(|o| parse_object_name(&o.key, prefix, extension))
            .map(|(_, n)| n);
        let dlio = names_of.filter(|&n| {
            objects
                .iter()
                .enumerate()
                .all(|(i, o)| o.key == object_name(prefix, i as u64, n, extension))
        });
        let keys = match dlio {
            Some(names_of) => ObjectKeys::Dlio {
                train_prefix: prefix.clone(),
                names_of,
            },
            None => {
                let mut text = String::with_capacity(objects.iter().map(|o| o.key.len()).sum());
                let mut ends = Vec::with_capacity(objects.len());
                for o in objects {
                    text.push_str(&o.key);
                    ends.push(text.len() as u64);
                }
                ObjectKeys::Arena { text, ends }
            }
        };
        Ok(ObjectCatalog {
            extension: extension.to_string(),
            samples_per_file: dataset.samples_per_file,
            listed,
            keys,
            sizes,
            listing_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, DirSource, computed_objects as computed, discover_objects};

    fn discover(
        source: &DirSource,
        ds: &ObjectDataset,
        files: usize,
    ) -> Result<Catalog, crate::catalog::CatalogError> {
        discover_objects(source, ds, files)
    }

    fn dataset(format: Format, files: u64, length: f64, stdev: f64) -> ObjectDataset {
        ObjectDataset {
            format,
            train_prefix: "data/x/train/".into(),
            num_files: files,
            samples_per_file: 1,
            record_length: length,
            record_length_stdev: stdev,
            seed: crate::dataset::DLIO_GENERATION_SEED,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    #[test]
    fn a_computed_catalog_has_dlios_names_and_sizes() {
        let ds = dataset(Format::Npz, 7200, 146_600_628.0, 68_341_808.0);
        let catalog = computed(&ds, 56);
        let objects = catalog.objects.as_ref().unwrap();
        assert_eq!((objects.len(), catalog.file_count()), (56, 56));
        for i in [0usize, 1, 55] {
            assert_eq!(catalog.key(i), ds.key(i as u64));
            assert_eq!(catalog.size_bytes(i), ds.object_bytes(i as u64));
            let span = catalog.span(i, 0);
            assert_eq!((span.rows, span.offset), (1, 0));
            assert_eq!(span.len_bytes, ds.object_bytes(i as u64));
        }
        assert_eq!(catalog.key(3), "data/x/train/img_0003_of_7200.npz");
        let (min, mean, max) = objects.size_range();
        assert!(min < max && (min as f64) < mean && mean < max as f64);
        assert_eq!(objects.format(), Some(Format::Npz));
    }

    #[test]
    fn ten_million_computed_objects_cost_8_bytes_each() {
        let n = 10_000_000;
        let ds = dataset(Format::Jpeg, n as u64, 322_957.0, 0.0);
        let catalog = computed(&ds, n);
        let objects = catalog.objects.as_ref().unwrap();
        assert_eq!(objects.len(), n);
        let per_object = objects.heap_bytes() as f64 / n as f64;
        assert!(per_object <= 8.0001, "{per_object} bytes per object");
        assert_eq!(
            catalog.key(n - 1),
            "data/x/train/img_09999999_of_10000000.jpeg"
        );
        assert_eq!(catalog.size_bytes(n - 1), 568 * 568);
        // The wire form (one process to the others) keeps the compact form.
        let back = Catalog::from_wire(&catalog.to_wire()).unwrap();
        assert_eq!(back.objects.as_ref().unwrap().keys(), objects.keys());
        assert_eq!(back.file_count(), n);
    }

    /// Writes `names` (with `len` bytes each) under `root/data/x/train/`.
    fn files(root: &std::path::Path, names: &[String], len: usize) {
        let dir = root.join("data/x/train");
        std::fs::create_dir_all(&dir).unwrap();
        for (i, name) in names.iter().enumerate() {
            std::fs::write(dir.join(name), vec![7u8; len + i]).unwrap();
        }
    }

    #[test]
    fn a_listing_of_dlios_names_is_kept_as_indices() {
        let tmp = tempfile::tempdir().unwrap();
        // Generated as a dataset of 12 files; the run reads 5. Another format and a stray file
        // are left out.
        let big = dataset(Format::Jpeg, 12, 100.0, 0.0);
        let names: Vec<String> = (0..12)
            .map(|i| big.key(i).trim_start_matches("data/x/train/").to_string())
            .chain(["img_0_of_1.npz".to_string(), "notes.txt".to_string()])
            .rev()
            .collect();
        files(tmp.path(), &names, 10);
        let ds = dataset(Format::Jpeg, 5, 100.0, 0.0);
        let catalog = discover(&DirSource::new(tmp.path()), &ds, 5).unwrap();
        let objects = catalog.objects.as_ref().unwrap();
        assert_eq!(
            objects.keys(),
            &ObjectKeys::Dlio {
                train_prefix: "data/x/train/".into(),
                names_of: 12
            }
        );
        assert_eq!((objects.len(), objects.listed), (5, 12));
        assert_eq!(catalog.key(4), "data/x/train/img_04_of_12.jpeg");
        // Sizes from the listing: file k of `names` has 10 + k bytes; names are reversed.
        let position = names.iter().position(|n| n == "img_04_of_12.jpeg").unwrap();
        assert_eq!(catalog.size_bytes(4), 10 + position as u64);
        assert_eq!(
            objects.heap_bytes(),
            5 * 8 + "data/x/train/".len() + "jpeg".len()
        );
    }

    #[test]
    fn other_names_go_into_one_arena() {
        let tmp = tempfile::tempdir().unwrap();
        let names: Vec<String> = ["b.npz", "a.npz", "c.npz", "img_7_of_9.npz"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        files(tmp.path(), &names, 3);
        let ds = dataset(Format::Npz, 3, 100.0, 0.0);
        let catalog = discover(&DirSource::new(tmp.path()), &ds, 3).unwrap();
        let objects = catalog.objects.as_ref().unwrap();
        assert!(matches!(objects.keys(), ObjectKeys::Arena { .. }));
        let keys: Vec<String> = (0..3).map(|i| catalog.key(i).into_owned()).collect();
        assert_eq!(
            keys,
            [
                "data/x/train/a.npz",
                "data/x/train/b.npz",
                "data/x/train/c.npz"
            ]
        );
        assert_eq!(catalog.size_bytes(0), 4); // "a.npz" was written second: 3 + 1 bytes
        let key_bytes: usize = keys.iter().map(String::len).sum();
        assert_eq!(objects.heap_bytes(), 3 * 16 + key_bytes + "npz".len());
    }

    #[test]
    fn too_few_objects_name_the_count_and_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        files(tmp.path(), &["a.npz".to_string()], 3);
        let ds = dataset(Format::Npz, 4, 100.0, 0.0);
        let err = discover(&DirSource::new(tmp.path()), &ds, 4)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("found 1 .npz objects under")
                && err.contains("the workload needs 4 (dataset.num_files_train)")
                && err.contains("--files 1"),
            "{err}"
        );
        let ds = dataset(Format::Jpeg, 4, 100.0, 0.0);
        let err = discover(&DirSource::new(tmp.path()), &ds, 4)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("no .jpeg objects under"), "{err}");
    }
}
