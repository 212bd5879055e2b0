//! Where a training run's bytes are, set up before the clock ([`Source`]): an S3 store — the
//! target given, else the embedded server with the workload's virtual dataset — with its
//! client, or a mounted file system's directory (`--data-dir`, `storage.storage_type:
//! local_fs`); the catalog read from it (process 0 reads, under mpirun the others get it);
//! and, on a file system, what the page cache and the device did around the clock.

use std::path::PathBuf;

use anyhow::Context;

use super::request::RunRequest;
use crate::catalog::{Catalog, CatalogError};
use crate::cluster::Cluster;
use crate::engine::Reach;
use crate::exit::UsageError;
use crate::files::cache::{self, PageCacheSummary};
use crate::files::disk::{Disk, DiskReading, DiskSummary};
use crate::files::{DataDir, FilesSummary};
use crate::plan::{Loader, Plan};
use crate::s3::{self, Bucket, Client, Target};
use crate::server::{Server, ServerStats};
use crate::settings::Settings;
use crate::setup::store::{CheckpointWrites, Storage, catalog_from, catalog_from_dir};
use crate::summary::TargetSummary;

/// The tail DLIO's Parquet reader fetches to read a footer.
const DLIO_FOOTER_TAIL_BYTES: u64 = 4 << 20;

/// A training run's store. One per run: the S3 variant's size does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Source {
    S3 { storage: Storage, client: Client },
    Files(Files),
}

/// A run on a mounted file system.
#[derive(Debug)]
pub struct Files {
    pub dir: DataDir,
    policy: s3::RetryPolicy,
    drop_caches: bool,
    disk: Option<Disk>,
    /// At the clock's start: the device's counters, and the page cache (buffered runs).
    disk_before: Option<DiskReading>,
    cache_before: Option<PageCacheSummary>,
    /// The files this host's ranks read (buffered runs: their page cache is looked at).
    paths: Vec<PathBuf>,
}

impl Source {
    /// The store of a run asked by `request`: `dir` when the run is on a file system (the
    /// checkpoints written between the steps are files there too), else `resolved` (the
    /// target the flags, environment or workload name), else the embedded server (with a
    /// sink for `checkpoints`).
    pub fn open(
        request: &RunRequest,
        settings: &Settings,
        resolved: Option<Target>,
        dir: Option<DataDir>,
        checkpoints: Option<&CheckpointWrites>,
    ) -> anyhow::Result<Source> {
        let Some(dir) = dir else {
            let storage = Storage::open(
                resolved,
                settings,
                request.bucket.as_deref(),
                request.server_threads,
                checkpoints,
            )?;
            let client = Client::new(storage.target.clone(), request.retry)?;
            return Ok(Source::S3 { storage, client });
        };
        if request.plan.loader == Loader::Dlio {
            return Err(UsageError(
                "--loader dlio reproduces the DLIO fork's S3 readers (s3dlio's requests); on a \
                 file system run the default loader (drop --loader dlio)"
                    .into(),
            )
            .into());
        }
        Ok(Source::Files(Files {
            disk: Disk::of(&dir.root),
            dir,
            policy: request.retry,
            drop_caches: request.files.drop_caches,
            disk_before: None,
            cache_before: None,
            paths: Vec::new(),
        }))
    }

    /// Where the engine reaches the bytes.
    pub fn reach(&self) -> Reach<'_> {
        match self {
            Source::S3 { client, .. } => Reach::S3(client),
            Source::Files(files) => Reach::Dir {
                dir: &files.dir,
                policy: files.policy,
            },
        }
    }

    /// Whether an endpoint is `https://`.
    pub fn tls(&self) -> bool {
        matches!(self, Source::S3 { storage, .. } if storage.tls())
    }

    /// The embedded server, when the run has one.
    pub fn server(&self) -> Option<&Server> {
        match self {
            Source::S3 { storage, .. } => storage.server.as_ref(),
            Source::Files(_) => None,
        }
    }

    /// Stops the embedded server, if any, and returns its totals.
    pub fn stop_server(&mut self) -> Option<ServerStats> {
        match self {
            Source::S3 { storage, .. } => storage.server.take().map(|s| s.shutdown()),
            Source::Files(_) => None,
        }
    }

    /// The memory the embedded server holds (its share of the budget).
    pub fn server_bytes(&self) -> u64 {
        match self {
            Source::S3 { storage, .. } => storage.server_bytes,
            Source::Files(_) => 0,
        }
    }

    /// The run's file system, when it is on one.
    pub fn files(&mut self) -> Option<&mut Files> {
        match self {
            Source::Files(files) => Some(files),
            Source::S3 { .. } => None,
        }
    }

    /// The catalog of the workload's files (process 0 reads it; under mpirun the others get
    /// it), and with the dlio loader every rank's footer reads. On a file system, `O_DIRECT`
    /// is then probed on the first file.
    pub fn catalog(
        &mut self,
        request: &RunRequest,
        settings: &Settings,
        cluster: &Cluster,
        ranks: usize,
    ) -> anyhow::Result<(Catalog, Option<(u64, u64)>)> {
        let lead = cluster.process() == 0;
        let (catalog, footers) = match self {
            Source::S3 { storage, .. } => {
                let target = &storage.target;
                let (bucket, catalog) = if lead {
                    catalog_from(
                        target,
                        request.retry,
                        settings,
                        request.verify,
                        request.manifest.as_deref(),
                    )?
                } else {
                    let bucket = Bucket::new(target.clone(), request.retry)
                        .context("starting the S3 client")?;
                    (bucket, Catalog::empty())
                };
                let catalog = shared(cluster, catalog)?;
                let footers = dlio_footers(request.plan.loader, &bucket, &catalog, ranks)?;
                (catalog, footers)
            }
            Source::Files(files) => {
                let catalog = match lead {
                    true => files.read_catalog(request, settings)?,
                    false => Catalog::empty(),
                };
                let catalog = shared(cluster, catalog)?;
                if catalog.file_count() > 0 {
                    let first = files.dir.path(&catalog.key(0));
                    files.dir.probe_direct(&first).map_err(UsageError)?;
                }
                (catalog, None)
            }
        };
        Ok((catalog, footers))
    }

    /// The summary's target: the store's endpoints and bucket, or the file system with what
    /// its device and page cache did.
    pub fn target_summary(
        &self,
        server: Option<ServerStats>,
        server_cpu_s: f64,
        files: Option<FilesSummary>,
    ) -> TargetSummary {
        match (self, files) {
            (Source::S3 { storage, client }, _) => TargetSummary::of(
                &storage.target,
                client.tls_negotiated(),
                server,
                server_cpu_s,
            ),
            (Source::Files(f), summary) => {
                TargetSummary::of_files(summary.unwrap_or_else(|| f.dir.summary(None, None)))
            }
        }
    }

    /// The target's endpoints (a file run's directory as a `file://` URL).
    pub fn endpoint_urls(&self) -> Vec<String> {
        match self {
            Source::S3 { storage, .. } => storage
                .target
                .endpoints
                .iter()
                .map(|e| e.url.clone())
                .collect(),
            Source::Files(f) => vec![format!("file://{}", f.dir.root.display())],
        }
    }
}

impl Files {
    /// The workload's catalog under the directory (`setup::store::catalog_from_dir`).
    fn read_catalog(&self, request: &RunRequest, settings: &Settings) -> anyhow::Result<Catalog> {
        catalog_from_dir(
            &self.dir.root,
            settings,
            request.verify,
            request.manifest.as_deref(),
        )
    }

    /// Before the clock, with the plan known: on a buffered run, the cache rule's note (the
    /// bytes this host reads against its memory), `--drop-caches`, and the page cache over
    /// the files read; the device's counters. Returns the notes to print and keep.
    pub fn before_clock(&mut self, plan: &Plan, local: std::ops::Range<usize>) -> Vec<String> {
        let mut notes: Vec<String> = self.dir.memory_note().into_iter().collect();
        let mut file_bytes = 0;
        if !self.dir.direct {
            let mut keys: Vec<String> = local
                .flat_map(|r| plan.ranged_gets(&plan.ranks[r]))
                .flatten()
                .map(|g| g.key)
                .collect();
            keys.sort_unstable();
            keys.dedup();
            self.paths = keys.iter().map(|k| self.dir.path(k)).collect();
            file_bytes = self
                .paths
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            // The distinct bytes this host reads: what its page cache would have to hold.
            if let Some(memory) = cache::meminfo("MemTotal") {
                notes.push(cache::cache_rule_note(file_bytes, memory));
            }
        }
        if self.drop_caches
            && let Err(line) = cache::drop_caches()
        {
            notes.push(line);
        }
        if !self.dir.direct {
            self.cache_before = Some(PageCacheSummary {
                files: self.paths.len() as u64,
                file_bytes,
                resident_before_bytes: cache::resident_of(self.paths.iter().map(PathBuf::as_path)),
                resident_after_bytes: 0,
                cached_before_bytes: cache::meminfo("Cached").unwrap_or(0),
                cached_after_bytes: 0,
                dropped: self.drop_caches,
            });
        }
        self.disk_before = self.disk.as_ref().and_then(Disk::read);
        notes
    }

    /// After the clock (`wall_s` long): the file system's summary, the device's share of the
    /// time busy and the page cache now.
    pub fn after_clock(&self, wall_s: f64) -> FilesSummary {
        let disk = match (&self.disk, self.disk_before) {
            (Some(disk), Some(before)) => disk
                .read()
                .map(|after| DiskSummary::between(disk, before, after, wall_s)),
            _ => None,
        };
        let page_cache = self.cache_before.map(|before| PageCacheSummary {
            resident_after_bytes: cache::resident_of(self.paths.iter().map(PathBuf::as_path)),
            cached_after_bytes: cache::meminfo("Cached").unwrap_or(0),
            ..before
        });
        self.dir.summary(disk, page_cache)
    }
}

/// Process 0's catalog, on every process under mpirun.
fn shared(cluster: &Cluster, catalog: Catalog) -> anyhow::Result<Catalog> {
    if cluster.is_single() {
        return Ok(catalog);
    }
    Ok(Catalog::from_wire(&cluster.broadcast(catalog.to_wire())).map_err(UsageError)?)
}

/// The dlio loader: every rank reads every file's footer itself (a HEAD and a 4 MiB tail),
/// before the clock as DLIO's ranks do while their datasets open.
fn dlio_footers(
    loader: Loader,
    bucket: &Bucket,
    catalog: &Catalog,
    ranks: usize,
) -> anyhow::Result<Option<(u64, u64)>> {
    // Whole objects have no footer: the dlio loader reads each one whole, nothing before.
    if loader == Loader::Ringload || catalog.objects.is_some() {
        return Ok(None);
    }
    let objects: Vec<s3::ObjectMeta> = catalog
        .files
        .iter()
        .map(|f| s3::ObjectMeta {
            key: f.key.clone(),
            size_bytes: f.size_bytes,
        })
        .collect();
    let read = bucket
        .read_footers_each(&objects, ranks, DLIO_FOOTER_TAIL_BYTES)
        .map_err(CatalogError::Request)?;
    Ok(Some(read))
}
