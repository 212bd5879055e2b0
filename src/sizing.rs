//! `ringload datasize`: the training dataset MLPerf Storage's rules ask for ([`training_files`]
//! over the workload's batch, samples per file and record length), the bytes on the store, the
//! commands that make and serve it, and whether the store (`--dir`) or this machine (the
//! virtual server and a run's catalog) can hold it.

use std::path::Path;

use serde::Serialize;

use crate::catalog::{self, FileLayout, RowGroupSpan};
use crate::exit::UsageError;
use crate::mlperf::datasize::{Clients, TrainingSize, training_files};
use crate::settings::Settings;
use crate::units::{bytes, count};
use crate::workload::{Settled, Workload};
use crate::{budget, datagen};

/// mlpstorage warns above this many files in one folder (it sets no subfolders).
pub const FILES_PER_FOLDER_WARNING: u64 = 10_000;

/// What `datasize` found, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Datasize {
    pub workload: String,
    pub hosts: u32,
    pub client_memory_per_host_bytes: u64,
    pub np: u64,
    pub batch_size: u64,
    pub samples_per_file: u64,
    pub record_length_bytes: u64,
    #[serde(flatten)]
    pub size: TrainingSize,
    /// The commands that write, serve and run the dataset.
    pub commands: Vec<String>,
    pub warnings: Vec<String>,
    /// What a run's catalog holds for these files (the virtual server holds nothing per file).
    pub catalog_bytes: u64,
    pub mem_available_bytes: Option<u64>,
    /// With `--dir`: its free space, and whether it holds the dataset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir_free_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir_holds_it: Option<bool>,
}

/// What `datasize` is asked: the clients and, with `--dir`, the folder that will hold the
/// dataset; the overrides the workload was loaded with (its commands carry them).
#[derive(Debug, Clone)]
pub struct DatasizeRequest {
    pub hosts: u32,
    pub client_memory_bytes: u64,
    pub np: u64,
    pub dir: Option<std::path::PathBuf>,
    pub overrides: Vec<String>,
}

/// Sizes `workload`'s dataset for `request` (its figures, the commands that make and serve
/// it, and whether this machine and `--dir` can hold it); a checkpoint workload is refused.
pub fn size(request: &DatasizeRequest, workload: &Workload) -> anyhow::Result<Datasize> {
    let Settled::Training(settings) = &workload.settled else {
        return Err(UsageError(format!(
            "datasize sizes training datasets; {} is a checkpoint workload (its size is the \
             checkpoint's: `ringload plan {}`)",
            workload.config.source.name, workload.config.source.name
        ))
        .into());
    };
    let size = training_files(
        Clients {
            hosts: request.hosts,
            memory_per_host_bytes: request.client_memory_bytes,
            processes: request.np,
        },
        settings.batch_size,
        settings.samples_per_file,
        settings.record_bytes,
    );
    let name = &settings.workload.name;
    let dir = request
        .dir
        .as_ref()
        .map_or("DIR".to_string(), |d| d.display().to_string());
    let files = size.files;
    // The overrides the figures were sized with make the same files (a record length changed
    // by an override changes every file).
    let overrides: String = request
        .overrides
        .iter()
        .map(|o| format!(" {}", shell_word(o)))
        .collect();
    let mut commands = vec![
        format!("ringload generate {name}{overrides} --files {files} --output {dir}"),
        format!("ringload serve {name}{overrides} --files {files}"),
        format!(
            "ringload run {name}{overrides} --files {files} --np {}",
            request.np
        ),
    ];
    if request.hosts > 1 {
        commands.push(format!(
            "(--hosts {}: run it under mpirun, one process per host, the {} ranks shared among \
             them: see the README's mpirun section)",
            request.hosts, request.np
        ));
    }
    let mut warnings = Vec::new();
    if files > FILES_PER_FOLDER_WARNING {
        warnings.push(format!(
            "{} files in one folder (more than {}): mlpstorage warns of this; ringload and the \
             DLIO fork list them under one prefix (dataset.num_subfolders_train is not \
             supported)",
            count(files),
            count(FILES_PER_FOLDER_WARNING)
        ));
    }
    let catalog_bytes = catalog_bytes(settings, files)?;
    let mem_available_bytes = budget::probe().mem_available_bytes;
    if let Some(avail) = mem_available_bytes.filter(|&a| catalog_bytes > a) {
        warnings.push(format!(
            "this machine cannot run it: a run's catalog of {} files takes {}, more than \
             MemAvailable {}",
            count(files),
            bytes(catalog_bytes),
            bytes(avail)
        ));
    }
    let dir_free_bytes = match &request.dir {
        Some(dir) => Some(free_bytes(dir)?),
        None => None,
    };
    let dir_holds_it = dir_free_bytes.map(|free| u128::from(free) >= size.total_bytes);
    Ok(Datasize {
        workload: name.clone(),
        hosts: request.hosts,
        client_memory_per_host_bytes: request.client_memory_bytes,
        np: request.np,
        batch_size: settings.batch_size,
        samples_per_file: settings.samples_per_file,
        record_length_bytes: settings.record_bytes,
        size,
        commands,
        warnings,
        catalog_bytes,
        mem_available_bytes,
        dir_free_bytes,
        dir_holds_it,
    })
}

/// The error when `--dir` cannot hold the dataset (exit 2, after the figures).
pub fn dir_too_small(dir: &Path, d: &Datasize) -> Option<UsageError> {
    let (Some(free), Some(false)) = (d.dir_free_bytes, d.dir_holds_it) else {
        return None;
    };
    Some(UsageError(format!(
        "--dir {}: {} free, the dataset needs {}; choose a larger store or fewer \
         --client-memory/--np",
        dir.display(),
        bytes(free),
        bytes(u64::try_from(d.size.total_bytes).unwrap_or(u64::MAX))
    )))
}

/// The report of `datasize`.
pub fn render(d: &Datasize) -> String {
    let s = &d.size;
    let mut out = format!(
        "{}: {} host{} × {} of memory, {} accelerators, batch {}, {} sample{} per file of {} B \
         (record_length_bytes, as mlpstorage sizes it)\n",
        d.workload,
        d.hosts,
        if d.hosts == 1 { "" } else { "s" },
        bytes(d.client_memory_per_host_bytes),
        count(d.np),
        d.batch_size,
        count(d.samples_per_file),
        if d.samples_per_file == 1 { "" } else { "s" },
        count(d.record_length_bytes)
    );
    out += &format!(
        "  5 × client memory ÷ file size:         ⌊5 × {} ÷ {} B⌋ = {} files\n",
        bytes(u64::try_from(s.client_memory_bytes).unwrap_or(u64::MAX)),
        count(s.file_bytes),
        count(s.files_for_memory)
    );
    out += &format!(
        "  500 × NP × batch ÷ samples per file:   ⌊500 × {} × {} ÷ {}⌋ = {} files\n",
        d.np,
        d.batch_size,
        d.samples_per_file,
        count(s.files_for_steps)
    );
    let total = u64::try_from(s.total_bytes).unwrap_or(u64::MAX);
    out += &format!(
        "  files: {} (the larger), {} on the store (files × {} B)\n",
        count(s.files),
        bytes(total),
        count(s.file_bytes)
    );
    out += "\n  make it, serve it, run it:\n";
    for c in &d.commands {
        out += &format!("    {c}\n");
    }
    out += &format!(
        "\n  the virtual server (`serve`, or `run` with no endpoint) holds nothing per file; a \
         run's catalog holds {}{}\n",
        bytes(d.catalog_bytes),
        d.mem_available_bytes
            .map_or(String::new(), |a| format!(" (MemAvailable {})", bytes(a)))
    );
    if let (Some(free), Some(holds)) = (d.dir_free_bytes, d.dir_holds_it) {
        out += &format!(
            "  --dir: {} free: {}\n",
            bytes(free),
            if holds {
                "it holds the dataset"
            } else {
                "it CANNOT hold the dataset"
            }
        );
    }
    for w in &d.warnings {
        out += &format!("  WARNING: {w}\n");
    }
    out
}

/// What a run's catalog holds for `files` files: 8 B per whole object (DLIO's names, only the
/// size kept); for Parquet, each file's layout (its key and row-group spans), from one file of
/// the workload's schema laid out as the generator writes it.
fn catalog_bytes(settings: &Settings, files: u64) -> anyhow::Result<u64> {
    if settings.objects.is_some() {
        return Ok(files.saturating_mul(8));
    }
    let probe = datagen::probe_file(&settings.dataset)
        .map_err(|e| anyhow::anyhow!("laying out a file of the workload's schema: {e}"))?;
    let one = catalog::computed(
        &settings.dataset,
        &probe,
        1,
        settings.columns_read.as_deref(),
        false,
    )?;
    let per_file = one.files.first().map_or(0, |f| {
        std::mem::size_of::<FileLayout>()
            + f.key.len()
            + f.row_groups.len() * std::mem::size_of::<RowGroupSpan>()
    }) as u64;
    Ok(files.saturating_mul(per_file))
}

/// Free bytes for an unprivileged writer under `dir` (statvfs: available blocks × fragment
/// size).
fn free_bytes(dir: &Path) -> Result<u64, UsageError> {
    let stat = rustix::fs::statvfs(dir).map_err(|e| {
        UsageError(format!(
            "--dir {}: cannot read its free space ({e}); pass an existing folder",
            dir.display()
        ))
    })?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// `word` as one shell word: as it is when it has no character a shell would treat specially,
/// else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-=/:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
