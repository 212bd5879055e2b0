//! Where a checkpoint run's objects go ([`CheckpointStore`]): an S3 store — the target given,
//! else the embedded sink — with the client the phases use and the one the set-up requests
//! use (the clean-up, the LISTs), or a mounted file system's directory (`--data-dir`), where
//! each object is a file and the LISTs are directory listings.

use std::path::Path;

use super::checkpoint_hosts::agreed;
use super::checkpoint_list::Lister;
use super::session::RunFailed;
use crate::checkpoint::CheckpointPlan;
use crate::checkpoint::restore::{check_step, too_few};
use crate::cluster::Cluster;
use crate::engine::Reach;
use crate::exit::UsageError;
use crate::files::disk::{Disk, DiskReading, DiskSummary};
use crate::files::{DataDir, describe_io};
use crate::s3::{Client, RetryPolicy, Target};
use crate::server::{Server, ServerStats};
use crate::summary::TargetSummary;

/// A checkpoint run's store.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum CheckpointStore {
    S3(S3Store),
    Files(FileStore),
}

/// A data directory, and what its device did over the phases.
#[derive(Debug)]
pub struct FileStore {
    pub dir: DataDir,
    pub policy: RetryPolicy,
    disk: Option<Disk>,
    before: Option<DiskReading>,
    measured: Option<DiskSummary>,
}

impl FileStore {
    pub fn new(dir: DataDir, policy: RetryPolicy) -> FileStore {
        FileStore {
            disk: Disk::of(&dir.root),
            dir,
            policy,
            before: None,
            measured: None,
        }
    }
}

/// An S3 store and its clients.
#[derive(Debug)]
pub struct S3Store {
    /// The embedded sink, when no target was given.
    pub server: Option<Server>,
    pub target: Target,
    pub client: Client,
    /// Set-up requests (the LIST before the restores) on a small runtime and a client of
    /// their own: a connection pooled by one runtime hangs when another runtime picks it up.
    pub setup_client: Client,
    pub setup_runtime: tokio::runtime::Runtime,
}

impl CheckpointStore {
    /// Where the engine reaches the objects.
    pub fn reach(&self) -> Reach<'_> {
        match self {
            CheckpointStore::S3(s3) => Reach::S3(&s3.client),
            CheckpointStore::Files(f) => Reach::Dir {
                dir: &f.dir,
                policy: f.policy,
            },
        }
    }

    pub fn policy(&self) -> RetryPolicy {
        self.reach().policy()
    }

    pub fn server(&self) -> Option<&Server> {
        match self {
            CheckpointStore::S3(s3) => s3.server.as_ref(),
            CheckpointStore::Files(_) => None,
        }
    }

    /// Stops the embedded sink, if any, and returns its totals.
    pub fn stop_server(&mut self) -> Option<ServerStats> {
        match self {
            CheckpointStore::S3(s3) => s3.server.take().map(|s| s.shutdown()),
            CheckpointStore::Files(_) => None,
        }
    }

    /// The summary's target.
    pub fn target_summary(&self, server: Option<ServerStats>, server_cpu_s: f64) -> TargetSummary {
        match self {
            CheckpointStore::S3(s3) => {
                TargetSummary::of(&s3.target, s3.client.tls_negotiated(), server, server_cpu_s)
            }
            CheckpointStore::Files(f) => {
                TargetSummary::of_files(f.dir.summary(f.measured.clone(), None))
            }
        }
    }

    /// DLIO's count of the checkpoints before the restores (process 0's, shared): a LIST of
    /// the folder, or its directory's `global_epoch…` folders.
    pub fn checkpoints_listed(
        &self,
        cluster: &Cluster,
        plan: &CheckpointPlan,
    ) -> anyhow::Result<u32> {
        match self {
            CheckpointStore::S3(s3) => lister(s3, cluster, plan).checkpoints_listed(),
            CheckpointStore::Files(f) => {
                let found = (cluster.process() == 0).then(|| count_dirs(&f.dir, plan));
                cluster
                    .share(found)?
                    .map_err(|e| agreed(cluster, RunFailed(e)))
            }
        }
    }

    /// A read-only run's checkpoint, before the clock: every object it reads there, with its
    /// size (one line and exit 2 otherwise).
    pub fn restore_checked(&self, cluster: &Cluster, plan: &CheckpointPlan) -> anyhow::Result<()> {
        match self {
            CheckpointStore::S3(s3) => lister(s3, cluster, plan).restore_checked(),
            CheckpointStore::Files(f) => {
                let verdict = (cluster.process() == 0).then(|| check_files(&f.dir, plan));
                cluster
                    .share(verdict)?
                    .map_err(|e| agreed(cluster, UsageError(e)))
            }
        }
    }
}

impl CheckpointStore {
    /// Before the first phase: the device's counters (a file system on a block device).
    pub fn clock_started(&mut self) {
        if let CheckpointStore::Files(f) = self {
            f.before = f.disk.as_ref().and_then(Disk::read);
        }
    }

    /// After the last phase, `wall_s` later: the device's share of the time busy.
    pub fn clock_stopped(&mut self, wall_s: f64) {
        if let CheckpointStore::Files(f) = self
            && let (Some(disk), Some(before)) = (&f.disk, f.before)
        {
            f.measured = disk
                .read()
                .map(|after| DiskSummary::between(disk, before, after, wall_s));
        }
    }
}

fn lister<'a>(s3: &'a S3Store, cluster: &'a Cluster, plan: &'a CheckpointPlan) -> Lister<'a> {
    Lister {
        cluster,
        runtime: &s3.setup_runtime,
        client: &s3.setup_client,
        plan,
    }
}

/// The `global_epoch…` folders under the checkpoint folder.
fn count_dirs(dir: &DataDir, plan: &CheckpointPlan) -> Result<u32, String> {
    let folder = dir.path(&plan.prefix());
    let entries = match std::fs::read_dir(&folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(format!(
                "listing {} before the restores failed: {}",
                folder.display(),
                describe_io(&e)
            ));
        }
    };
    Ok(entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter(|e| e.file_name().to_string_lossy().starts_with("global_epoch"))
        .count() as u32)
}

/// DLIO's count, then each checkpoint read listed and compared with the plan.
fn check_files(dir: &DataDir, plan: &CheckpointPlan) -> Result<(), String> {
    let reads = plan.settings.num_checkpoints_read;
    let found = count_dirs(dir, plan)?;
    if found < reads {
        return Err(too_few(plan, reads, found));
    }
    let base = format!("{}/", dir.root.display());
    for step in 1..=reads {
        let prefix = plan.step_prefix(step);
        let listed = list_files(&dir.path(&prefix), &prefix);
        check_step(plan, &base, step, &listed)?;
    }
    Ok(())
}

/// The files directly in `folder`, as (`prefix` + name, size).
fn list_files(folder: &Path, prefix: &str) -> Vec<(String, u64)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some((
                format!("{prefix}{}", e.file_name().to_string_lossy()),
                meta.len(),
            ))
        })
        .collect()
}
