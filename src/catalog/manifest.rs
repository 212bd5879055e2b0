//! `--manifest FILE`: the catalog of a whole-object dataset read from a file of one key and
//! size per line instead of a LIST, for stores where listing is the problem (slow, paged a
//! thousand keys at a time, or not allowed). The objects are still fetched from the target.
//!
//! Each non-empty line is `KEY SIZE` (whitespace-separated; lines starting with `#` are
//! comments), the key bucket-relative, directly under the dataset's train prefix, ending in the
//! format's extension, the size in bytes. The manifest's objects are taken in key order and the
//! first `num_files_train` kept, as a listing's are ([`ObjectCatalog::listed`]).

use std::path::Path;

use super::objects::ObjectCatalog;
use super::{Catalog, CatalogError};
use crate::dataset::ObjectDataset;
use crate::s3::ObjectMeta;

/// The catalog of the first `files` objects of `dataset` named in the manifest at `path`.
pub fn manifest_objects(
    path: &Path,
    dataset: &ObjectDataset,
    files: usize,
) -> Result<Catalog, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Io {
        location: format!("--manifest {}", path.display()),
        source,
    })?;
    let objects = parse(&text, dataset).map_err(|(line, reason)| CatalogError::BadManifest {
        path: path.display().to_string(),
        line,
        reason,
    })?;
    let location = format!("{} in --manifest {}", dataset.train_prefix, path.display());
    let objects = ObjectCatalog::listed(objects, dataset, files).map_err(|found| {
        CatalogError::NotEnoughObjects {
            location: location.clone(),
            extension: dataset.format.extension().to_string(),
            found,
            needed: files,
        }
    })?;
    Ok(Catalog {
        source: location,
        parquet_objects_listed: 0,
        files: Vec::new(),
        objects: Some(objects),
    })
}

/// The manifest's objects, or the first bad line (1-based) and what is wrong with it.
fn parse(text: &str, dataset: &ObjectDataset) -> Result<Vec<ObjectMeta>, (usize, String)> {
    let prefix = &dataset.train_prefix;
    let suffix = format!(".{}", dataset.format.extension());
    let mut objects: Vec<(ObjectMeta, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(key), Some(size), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err((
                number,
                format!("'{line}' is not `KEY SIZE` (one key and its size in bytes per line)"),
            ));
        };
        let size_bytes = match size.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err((
                    number,
                    format!("the size '{size}' of {key} is not a positive number of bytes"),
                ));
            }
        };
        let Some(name) = key.strip_prefix(prefix.as_str()) else {
            return Err((
                number,
                format!(
                    "{key} is not under the dataset's train prefix {prefix} (keys are \
                     bucket-relative; fix the key or dataset.data_folder)"
                ),
            ));
        };
        if name.contains('/') {
            return Err((
                number,
                format!("{key} is in a subfolder of {prefix}; list objects directly under it"),
            ));
        }
        if !name.ends_with(&suffix) || name.len() == suffix.len() {
            return Err((
                number,
                format!("{key} does not end in {suffix}, the workload's format"),
            ));
        }
        objects.push((
            ObjectMeta {
                key: key.to_string(),
                size_bytes,
            },
            number,
        ));
    }
    objects.sort_unstable_by(|a, b| a.0.key.cmp(&b.0.key).then(a.1.cmp(&b.1)));
    if let Some(pair) = objects.windows(2).find(|w| w[0].0.key == w[1].0.key) {
        return Err((
            pair[1].1,
            format!(
                "{} is listed twice (also at line {}); keep one line per object",
                pair[1].0.key, pair[0].1
            ),
        ));
    }
    Ok(objects.into_iter().map(|(o, _)| o).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::objects::ObjectKeys;
    use crate::dataset::Format;

    fn dataset(files: u64) -> ObjectDataset {
        ObjectDataset {
            format: Format::Jpeg,
            train_prefix: "data/x/train/".into(),
            num_files: files,
            samples_per_file: 1,
            record_length: 100.0,
            record_length_stdev: 0.0,
            seed: crate::dataset::DLIO_GENERATION_SEED,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    fn manifest(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.txt");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn error(text: &str, files: usize) -> String {
        let (_dir, path) = manifest(text);
        let err = manifest_objects(&path, &dataset(files as u64), files).unwrap_err();
        assert_eq!(crate::exit::ExitClass::exit_code(&err), crate::exit::USAGE);
        let err = err.to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(!err.contains('\n'), "{err}");
        err
    }

    #[test]
    fn a_manifest_gives_its_objects_in_key_order() {
        let ds = dataset(4);
        let keys: Vec<String> = (0..4).map(|i| ds.key(i)).collect();
        let text = format!(
            "# made by hand\n\n{} 13\n  {}\t11  \n# another comment\n{} 12\n{} 14\n",
            keys[2], keys[0], keys[1], keys[3]
        );
        let (_dir, path) = manifest(&text);
        let catalog = manifest_objects(&path, &ds, 3).unwrap();
        let objects = catalog.objects.as_ref().unwrap();
        assert_eq!((objects.len(), objects.listed), (3, 4));
        for (i, key) in keys.iter().enumerate().take(3) {
            assert_eq!(catalog.key(i), *key);
            assert_eq!(catalog.size_bytes(i), 11 + i as u64);
        }
        // DLIO's names are kept as indices, as a listing's are.
        assert!(matches!(
            objects.keys(),
            ObjectKeys::Dlio { names_of: 4, .. }
        ));
        assert!(catalog.listing_bytes() > 0);
        assert!(catalog.source.contains("--manifest"), "{}", catalog.source);
    }

    #[test]
    fn a_bad_size_names_the_line() {
        let err = error("data/x/train/a.jpeg 10\ndata/x/train/b.jpeg 1O\n", 2);
        assert!(err.contains(":2:") && err.contains("'1O'"), "{err}");
        let err = error("data/x/train/a.jpeg 0\n", 1);
        assert!(err.contains(":1:") && err.contains("positive"), "{err}");
    }

    #[test]
    fn a_missing_size_names_the_line() {
        let err = error("# sizes in bytes\ndata/x/train/a.jpeg\n", 1);
        assert!(err.contains(":2:") && err.contains("KEY SIZE"), "{err}");
        let err = error("data/x/train/a.jpeg 10 extra\n", 1);
        assert!(err.contains(":1:") && err.contains("KEY SIZE"), "{err}");
    }

    #[test]
    fn keys_outside_the_prefix_or_format_name_the_line() {
        let err = error("data/x/train/a.jpeg 10\ndata/y/train/b.jpeg 10\n", 2);
        assert!(
            err.contains(":2:") && err.contains("not under the dataset's train prefix"),
            "{err}"
        );
        let err = error("data/x/train/a.npz 10\n", 1);
        assert!(
            err.contains(":1:") && err.contains("does not end in .jpeg"),
            "{err}"
        );
        let err = error("data/x/train/sub/a.jpeg 10\n", 1);
        assert!(err.contains(":1:") && err.contains("subfolder"), "{err}");
        let err = error("data/x/train/a.jpeg 10\ndata/x/train/a.jpeg 11\n", 2);
        assert!(err.contains(":2:") && err.contains("listed twice"), "{err}");
    }

    #[test]
    fn too_few_objects_give_the_listings_error() {
        let err = error("data/x/train/a.jpeg 10\n", 4);
        assert!(
            err.contains("found 1 .jpeg objects under data/x/train/ in --manifest")
                && err.contains("the workload needs 4 (dataset.num_files_train)")
                && err.contains("--files 1"),
            "{err}"
        );
    }
}
