//! `ringload generate` for whole-object datasets (npz, jpeg, tfrecord): every object of an
//! [`ObjectDataset`] written through an [`ObjectSink`] (a directory or a bucket) under DLIO's
//! names, with the bytes [`ObjectDataset::read_at`] defines, so a generated store and the
//! embedded server's virtual one hold the same objects.
//!
//! Each job streams one object at a time through a buffer of [`OBJECT_CHUNK_BYTES`]: never a
//! whole object (unet3d's reach 382 MB) in memory. An npz object costs two passes over its
//! payload (its CRC precedes it in the zip; see `dataset::npz`), a TFRecord one.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::{GenerateError, GenerateSummary, ObjectSink};
use crate::config::RawConfig;
use crate::dataset::{DLIO_GENERATION_SEED, Format, ObjectDataset};
use crate::exit::UsageError;
use crate::units;

/// The most bytes of one object a job holds at once.
pub const OBJECT_CHUNK_BYTES: usize = 4 << 20;

/// DLIO's defaults for the keys a whole-object dataset reads.
const DEFAULT_DATA_FOLDER: &str = "./data/";
const DEFAULT_NUM_FILES: u64 = 8;
const DEFAULT_SAMPLES_PER_FILE: u64 = 1;
const DEFAULT_RECORD_LENGTH: f64 = 65_536.0;

/// The whole-object dataset a workload describes, from its `dataset.*` keys: `format` (npz,
/// jpeg or tfrecord), `num_files_train`, `num_samples_per_file`, `record_length_bytes` (or
/// `record_length`), `record_length_bytes_stdev` (or `record_length_stdev`) and `data_folder`;
/// DLIO's defaults where a key is absent. Content is random, as DLIO's generators write it.
pub fn object_dataset_of(cfg: &RawConfig) -> anyhow::Result<ObjectDataset> {
    let bad = |key: &str, value: String, fix: &str| -> anyhow::Error {
        UsageError(format!("{key} = {value}: {fix}")).into()
    };
    let name = cfg.text("dataset.format")?.unwrap_or_default();
    let format = Format::parse(&name).ok_or_else(|| {
        bad(
            "dataset.format",
            format!("'{name}'"),
            "ringload generates npz, jpeg, tfrecord or parquet; set one of them",
        )
    })?;
    let compression = cfg.text("dataset.compression")?.unwrap_or_default();
    if !matches!(
        compression.to_ascii_lowercase().as_str(),
        "" | "none" | "null"
    ) {
        return Err(bad(
            "dataset.compression",
            format!("'{compression}'"),
            "ringload writes uncompressed objects, as DLIO does by default; set dataset.compression=none",
        ));
    }
    if let Some(n) = cfg.count("dataset.num_subfolders_train", 0)?
        && n > 0
    {
        return Err(bad(
            "dataset.num_subfolders_train",
            n.to_string(),
            "ringload writes files directly under <data_folder>/train/; set it to 0",
        ));
    }
    let folder = cfg
        .text("dataset.data_folder")?
        .unwrap_or_else(|| DEFAULT_DATA_FOLDER.to_string());
    let trimmed = folder.trim_start_matches("./").trim_matches('/');
    if trimmed.split('/').any(|part| part == "..") {
        return Err(bad(
            "dataset.data_folder",
            format!("'{folder}'"),
            "must stay inside the dataset root; remove the '..'",
        ));
    }
    let train_prefix = if trimmed.is_empty() {
        "train/".to_string()
    } else {
        format!("{trimmed}/train/")
    };
    let record_length = one_of(
        cfg,
        "dataset.record_length_bytes",
        "dataset.record_length",
        f64::MIN_POSITIVE,
    )?
    .unwrap_or(DEFAULT_RECORD_LENGTH);
    let record_length_stdev = one_of(
        cfg,
        "dataset.record_length_bytes_stdev",
        "dataset.record_length_stdev",
        0.0,
    )?
    .unwrap_or(0.0);
    Ok(ObjectDataset {
        format,
        train_prefix,
        num_files: cfg
            .count("dataset.num_files_train", 1)?
            .unwrap_or(DEFAULT_NUM_FILES),
        samples_per_file: cfg
            .count("dataset.num_samples_per_file", 1)?
            .unwrap_or(DEFAULT_SAMPLES_PER_FILE),
        record_length,
        record_length_stdev,
        seed: DLIO_GENERATION_SEED,
        randomize: true,
    })
}

/// A number ≥ `min` under DLIO's current name or its older one; both set, they must agree.
fn one_of(cfg: &RawConfig, key: &str, old: &str, min: f64) -> anyhow::Result<Option<f64>> {
    let (a, b) = (
        cfg.number(key, min, f64::INFINITY)?,
        cfg.number(old, min, f64::INFINITY)?,
    );
    match (a, b) {
        (Some(a), Some(b)) if a != b => {
            Err(UsageError(format!("{old} = {b}: disagrees with {key} = {a}; keep one")).into())
        }
        (a, b) => Ok(a.or(b)),
    }
}

/// Writes objects `0..dataset.num_files` into `sink` with `jobs` threads, each streaming whole
/// objects through a buffer of [`OBJECT_CHUNK_BYTES`]. Shows a progress bar on a terminal. The
/// first failure stops the other threads; objects already committed stay, the one being
/// written is discarded.
pub fn generate_objects<S: ObjectSink>(
    dataset: &ObjectDataset,
    sink: &S,
    jobs: usize,
    show_progress: bool,
) -> Result<GenerateSummary, GenerateError> {
    let files = dataset.num_files;
    let total: u64 = (0..files).map(|i| dataset.object_bytes(i)).sum();
    if let Some(free) = sink.free_bytes()?
        && total > free
    {
        let mut fit = 0u64;
        let mut used = 0u64;
        while fit < files && used + dataset.object_bytes(fit) <= free {
            used += dataset.object_bytes(fit);
            fit += 1;
        }
        return Err(GenerateError::NoSpace {
            dest: sink.describe(),
            need: units::bytes(total),
            free: units::bytes(free),
            fit: fit as usize,
        });
    }
    let jobs = jobs.clamp(1, files.clamp(1, usize::MAX as u64) as usize);
    let progress = if show_progress {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("generating {files} {} files", dataset.format));
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    } else {
        ProgressBar::hidden()
    };
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<GenerateError>> = Mutex::new(None);
    let bytes_written = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                let mut buf = vec![0u8; OBJECT_CHUNK_BYTES];
                while !failed.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= files {
                        break;
                    }
                    let result = write_object(dataset, index, sink, &mut buf, |n| {
                        progress.inc(n);
                        bytes_written.fetch_add(n, Ordering::Relaxed);
                    });
                    if let Err(e) = result {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert(e);
                    }
                }
            });
        }
    });
    progress.finish_and_clear();
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(GenerateSummary {
        destination: format!("{}/{}", sink.describe(), dataset.train_prefix),
        files: files as usize,
        bytes_written: bytes_written.into_inner(),
        elapsed_s: started.elapsed().as_secs_f64(),
        jobs,
    })
}

/// Streams object `index` into `sink` through `buf`, calling `wrote` after each chunk.
fn write_object<S: ObjectSink>(
    dataset: &ObjectDataset,
    index: u64,
    sink: &S,
    buf: &mut [u8],
    wrote: impl Fn(u64),
) -> Result<(), GenerateError> {
    let key = dataset.key(index);
    let mut writer = sink.create(&key)?;
    let mut reader = dataset.reader(index);
    let size = reader.len();
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        reader.read_at(at, &mut buf[..n]);
        writer
            .write_all(&buf[..n])
            .map_err(|source| GenerateError::Write {
                key: key.clone(),
                source,
            })?;
        at += n as u64;
        wrote(n as u64);
    }
    sink.commit(&key, writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datagen::DirSink;

    fn cfg(yaml: &str, overrides: &[&str]) -> RawConfig {
        let mut cfg = RawConfig::parse("t", "t.yaml", yaml).unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        cfg
    }

    const UNET: &str = "dataset:\n  format: npz\n  data_folder: data/unet3d/\n  num_files_train: 4\n  \
                        record_length_bytes: 10000\n  record_length_bytes_stdev: 3000\n";

    #[test]
    fn the_dataset_comes_from_dlios_keys() {
        let d = object_dataset_of(&cfg(UNET, &[])).unwrap();
        assert_eq!(d.format, Format::Npz);
        assert_eq!(d.train_prefix, "data/unet3d/train/");
        assert_eq!((d.num_files, d.samples_per_file), (4, 1));
        assert_eq!(
            (d.record_length, d.record_length_stdev),
            (10_000.0, 3_000.0)
        );
        let d = object_dataset_of(&cfg(
            "dataset:\n  format: tfrecord\n  record_length: 114660.07\n  num_samples_per_file: 1251\n",
            &[],
        ))
        .unwrap();
        assert_eq!(d.train_prefix, "data/train/");
        assert_eq!((d.num_files, d.samples_per_file), (8, 1251));
        assert_eq!(d.record_length, 114_660.07);
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        for (over, want) in [
            (
                "dataset.format=hdf5",
                "dataset.format = 'hdf5': ringload generates npz, jpeg, tfrecord or parquet; set one of them",
            ),
            (
                "dataset.num_subfolders_train=2",
                "dataset.num_subfolders_train = 2: ringload writes files directly under <data_folder>/train/; set it to 0",
            ),
            (
                "dataset.data_folder=../x",
                "dataset.data_folder = '../x': must stay inside the dataset root; remove the '..'",
            ),
            (
                "dataset.record_length=7",
                "dataset.record_length = 7: disagrees with dataset.record_length_bytes = 10000; keep one",
            ),
            (
                "dataset.compression=zip",
                "dataset.compression = 'zip': ringload writes uncompressed objects, as DLIO does by default; set dataset.compression=none",
            ),
        ] {
            let err = object_dataset_of(&cfg(UNET, &[over])).unwrap_err();
            assert_eq!(err.to_string(), want);
            assert!(!err.to_string().contains('\n'));
        }
        let err = object_dataset_of(&cfg(UNET, &["dataset.record_length_bytes_stdev=-1"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("dataset.record_length_bytes_stdev"), "{err}");
    }

    #[test]
    fn written_objects_are_the_datasets_bytes() {
        let root = tempfile::tempdir().unwrap();
        let d = object_dataset_of(&cfg(UNET, &[])).unwrap();
        let summary = generate_objects(&d, &DirSink::new(root.path()), 2, false).unwrap();
        assert_eq!(summary.files, 4);
        let mut total = 0;
        for i in 0..4 {
            let bytes = std::fs::read(root.path().join(d.key(i))).unwrap();
            let mut want = vec![0u8; d.object_bytes(i) as usize];
            d.read_at(i, 0, &mut want);
            assert!(bytes == want, "object {i}");
            total += bytes.len() as u64;
        }
        assert_eq!(summary.bytes_written, total);
    }
}
