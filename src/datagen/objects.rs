//! `ringload generate` for whole-object datasets (npz, jpeg, tfrecord): every object of an
//! [`ObjectDataset`] written through an [`ObjectSink`] (a directory or a bucket) under DLIO's
//! names, with the bytes [`ObjectDataset::read_at`] defines, so a generated store and the
//! embedded server's virtual one hold the same objects.
//!
//! Each job streams one object at a time through a buffer of [`OBJECT_CHUNK_BYTES`]: never a
//! whole object (unet3d's reach 382 MB) in memory. An npz object costs two passes over its
//! payload (its CRC precedes it in the zip; see `dataset::npz`), a TFRecord one.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::{GenerateError, GenerateSummary, ObjectSink, on_jobs, progress_bar};
use crate::dataset::ObjectDataset;
use crate::units;

/// The most bytes of one object a job holds at once.
pub const OBJECT_CHUNK_BYTES: usize = 4 << 20;

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
    let progress = progress_bar(
        show_progress,
        total,
        format!("generating {files} {} files", dataset.format),
    );
    let bytes_written = AtomicU64::new(0);
    let started = Instant::now();
    on_jobs(
        files,
        jobs,
        || vec![0u8; OBJECT_CHUNK_BYTES],
        |buf, index| {
            write_object(dataset, index, sink, buf, |n| {
                progress.inc(n);
                bytes_written.fetch_add(n, Ordering::Relaxed);
            })
        },
    )
    .inspect_err(|_| progress.finish_and_clear())?;
    progress.finish_and_clear();
    Ok(GenerateSummary {
        destination: format!("{}/{}", sink.describe(), dataset.train_prefix),
        files: files as usize,
        bytes_written: bytes_written.into_inner(),
        elapsed_s: started.elapsed().as_secs_f64(),
        jobs,
        content: dataset.content,
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
    use crate::dataset::Format;

    fn unet() -> ObjectDataset {
        ObjectDataset {
            format: Format::Npz,
            train_prefix: "data/unet3d/train/".into(),
            num_files: 4,
            samples_per_file: 1,
            record_length: 10_000.0,
            record_length_stdev: 3_000.0,
            seed: crate::dataset::DLIO_GENERATION_SEED,
            randomize: true,
            content: crate::content::Shape::default(),
        }
    }

    #[test]
    fn written_objects_are_the_datasets_bytes() {
        let root = tempfile::tempdir().unwrap();
        let d = unet();
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
