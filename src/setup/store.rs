//! What a run or a sweep reads from, set up before anything runs: the target the flags, the
//! environment or the workload name, else the embedded server with the workload's virtual
//! dataset; the bucket checked and its catalog read; `--output` checked writable.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;

use crate::catalog::{self, Catalog, CatalogError};
use crate::checkpoint::CheckpointPlan;
use crate::checkpoint::training::TrainCheckpointSettings;
use crate::exit::UsageError;
use crate::s3::target::valid_bucket_name;
use crate::s3::{self, Bucket, Target};
use crate::server::faults::Faults;
use crate::server::virtual_dataset::VirtualDataset;
use crate::server::{self, Server, ServerConfig, Store};
use crate::settings::Settings;
use crate::{affinity, metrics};

/// The process environment, as [`s3::target::resolve`] reads it.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The target the flags, the environment or the workload name; `None` when none does.
pub fn resolve_target(
    flags: &s3::TargetFlags,
    storage: &s3::target::StorageSettings,
) -> anyhow::Result<Option<Target>> {
    Ok(s3::target::resolve(flags, storage, env)?)
}

/// `name`, when it is a valid bucket name.
pub fn checked_bucket(name: &str) -> anyhow::Result<&str> {
    if valid_bucket_name(name) {
        Ok(name)
    } else {
        Err(UsageError(format!(
            "'{name}' is not a valid bucket name: use 3-63 characters of a-z, 0-9, '.' and '-', \
             starting and ending with a letter or digit"
        ))
        .into())
    }
}

/// The virtual Parquet dataset of a workload's `settings` in `bucket` (else the workload's,
/// else [`server::DEFAULT_BUCKET`]): `serve WORKLOAD` and a run's embedded server.
pub fn virtual_store(
    settings: &Settings,
    bucket: Option<&str>,
    show_progress: bool,
) -> anyhow::Result<VirtualDataset> {
    settings.check_generatable()?;
    let bucket = bucket
        .or(settings.storage.bucket.as_deref())
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = checked_bucket(bucket)?;
    if show_progress {
        eprintln!(
            "ringload: laying out the virtual {} ({} file{}; encoding one file and a row-group \
             template)…",
            settings.workload.name,
            settings.num_files,
            if settings.num_files == 1 { "" } else { "s" }
        );
    }
    Ok(VirtualDataset::build(
        bucket,
        &settings.workload.name,
        &settings.dataset,
        settings.num_files,
    )?)
}

/// The store of `serve WORKLOAD` and of a run's embedded server: the whole objects of an npz,
/// jpeg or tfrecord workload ([`Store::virtual_objects`]), else the workload's virtual Parquet
/// dataset; with its bucket and the bytes it holds (the Parquet templates; a whole-object
/// store holds nothing per object).
pub fn virtual_any(
    settings: &Settings,
    bucket: Option<&str>,
    show_progress: bool,
) -> anyhow::Result<(Store, String, u64)> {
    if let Some(dataset) = settings.objects.clone() {
        let bucket = bucket
            .or(settings.storage.bucket.as_deref())
            .unwrap_or(server::DEFAULT_BUCKET);
        let bucket = checked_bucket(bucket)?;
        if show_progress {
            eprintln!(
                "ringload: serving the virtual {} ({} {} object{}, each made from its index \
                 when asked; nothing held per object)",
                settings.workload.name,
                dataset.num_files,
                dataset.format,
                if dataset.num_files == 1 { "" } else { "s" }
            );
        }
        let store = Store::virtual_objects(bucket, dataset, settings.workload.name.clone());
        return Ok((store, bucket.to_string(), 0));
    }
    let store = virtual_store(settings, bucket, show_progress)?;
    let (bucket, resident) = (store.bucket.clone(), store.resident_bytes);
    Ok((Store::Virtual(store), bucket, resident))
}

/// The store a run or sweep reads.
#[derive(Debug)]
pub struct Storage {
    /// The embedded server, when no target was given.
    pub server: Option<Server>,
    pub target: Target,
    /// The memory the embedded server holds (0 without one): its share of the budget.
    pub server_bytes: u64,
}

/// Where the embedded server takes a training run's checkpoints (`workflow.checkpoint`):
/// the keys under `<checkpoint_folder>/` (`global_epoch` at the bucket's root), to a sink of
/// the checkpoints' content.
#[derive(Debug, Clone)]
pub struct CheckpointWrites {
    pub prefix: String,
    pub randomize: bool,
}

impl CheckpointWrites {
    /// The writes of a training workload's checkpoints, if it has any.
    pub fn of(checkpoint: Option<&TrainCheckpointSettings>) -> Option<CheckpointWrites> {
        checkpoint.map(|c| {
            let folder = &c.objects.folder;
            CheckpointWrites {
                // The folder (`<folder>/`, what a LIST of the checkpoints names), or the
                // saves' own prefix when the folder is the bucket's root.
                prefix: if folder.is_empty() {
                    "global_epoch".to_string()
                } else {
                    format!("{folder}/")
                },
                randomize: c.objects.randomize_tensor,
            }
        })
    }
}

impl Storage {
    /// `resolved` (the target the flags, environment or workload name), else the embedded
    /// server with the workload's virtual dataset in `bucket` (and a sink for `checkpoints`).
    pub fn open(
        resolved: Option<Target>,
        settings: &Settings,
        bucket: Option<&str>,
        server_threads: Option<usize>,
        checkpoints: Option<&CheckpointWrites>,
    ) -> anyhow::Result<Storage> {
        match resolved {
            Some(target) => Ok(Storage {
                server: None,
                target,
                server_bytes: 0,
            }),
            None => start_embedded(settings, bucket, server_threads, checkpoints),
        }
    }

    /// Whether an endpoint is `https://`.
    pub fn tls(&self) -> bool {
        self.target.endpoints.iter().any(|e| e.is_tls())
    }
}

/// The embedded server of a run with no endpoint: the workload's virtual dataset, on a free
/// loopback port.
fn start_embedded(
    settings: &Settings,
    bucket: Option<&str>,
    server_threads: Option<usize>,
    checkpoints: Option<&CheckpointWrites>,
) -> anyhow::Result<Storage> {
    let show = std::io::stderr().is_terminal();
    let (store, bucket, template_bytes) = virtual_any(settings, bucket, show)?;
    let store = match checkpoints {
        Some(c) => Store::with_sink(store, &c.prefix, c.randomize, Default::default())
            .map_err(|e| anyhow::anyhow!("the embedded server's checkpoint sink: {e:?}"))?,
        None => store,
    };
    let (server, target) = start_loopback(store, &bucket, server_threads)?;
    // What the process holds now — templates, and what laying them out left behind — is the
    // server's share of the memory budget.
    let server_bytes = metrics::rss_bytes().unwrap_or(0).max(template_bytes);
    Ok(Storage {
        server: Some(server),
        target,
        server_bytes,
    })
}

/// The embedded server of a checkpoint run with no endpoint: a sink (`serve --sink`) in
/// `bucket` that discards what is written (checking it against the content generator with
/// `verify`) and serves `objects` (key, size) by generating them, on a free loopback port.
pub fn start_sink_server(
    bucket: &str,
    objects: Vec<(String, u64)>,
    randomize: bool,
    verify: bool,
    shape: crate::content::Shape,
    server_threads: Option<usize>,
) -> anyhow::Result<(Server, s3::Target)> {
    let store = Store::sink(bucket, objects, randomize, verify, shape);
    start_loopback(store, bucket, server_threads)
}

/// The embedded server with `store` on a free loopback port, and the target that reaches it
/// (its bucket `bucket`, unsigned requests).
fn start_loopback(
    store: Store,
    bucket: &str,
    server_threads: Option<usize>,
) -> anyhow::Result<(Server, s3::Target)> {
    let server = Server::start(ServerConfig {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        store,
        credentials: None,
        region: server::DEFAULT_REGION.to_string(),
        worker_threads: server_threads.unwrap_or_else(affinity::cores),
        throttle_bytes_per_s: None,
        faults: Faults::default(),
        max_connections: server::DEFAULT_MAX_CONNECTIONS,
        tls: None,
    })?;
    let endpoint = s3::Endpoint::parse(&server.endpoint_url()).map_err(UsageError)?;
    let target = Target {
        credentials_from: "nowhere (the embedded server takes unsigned requests)".into(),
        ..Target::simple(endpoint, bucket, None)
    };
    Ok((server, target))
}

/// The objects a sink serves for a checkpoint plan before anything is written to it: every
/// rank's objects of checkpoints 1..=max(num_checkpoints_write, num_checkpoints_read), as
/// (bucket-relative key, size), so a read-only run finds them (the embedded sink of `run`
/// and `serve --sink WORKLOAD`).
pub fn checkpoint_sink_objects(plan: &CheckpointPlan) -> Vec<(String, u64)> {
    let s = &plan.settings;
    (1..=s.num_checkpoints_write.max(s.num_checkpoints_read))
        .flat_map(|step| {
            plan.ranks
                .iter()
                .flatten()
                .map(move |o| (plan.key(step, o), o.bytes))
        })
        .collect()
}

/// `--manifest` with a checkpoint workload: refused in one line.
pub fn refuse_checkpoint_manifest(manifest: Option<&Path>) -> Result<(), UsageError> {
    match manifest {
        None => Ok(()),
        Some(file) => Err(UsageError(format!(
            "--manifest {}: a checkpoint workload writes its own objects and lists nothing; \
             drop --manifest (it is for npz, jpeg and tfrecord workloads)",
            file.display()
        ))),
    }
}

/// `--manifest` with a Parquet workload: refused in one line.
pub fn parquet_manifest(file: &Path) -> UsageError {
    UsageError(format!(
        "--manifest {}: a Parquet workload reads each file's footer for its row groups, which \
         a key and a size do not give; drop --manifest (it is for npz, jpeg and tfrecord \
         workloads)",
        file.display()
    ))
}

/// The catalog of the workload's files in `target`'s bucket (with chunk hashes for
/// `--verify` when `with_chunks`), and the bucket handle that read it; a whole-object
/// workload's from `manifest` when given, with no LIST at all (not even the bucket check's:
/// the first GET finds a wrong bucket or endpoint). Set-up: a failure here is exit 2, as the
/// catalog's are.
pub fn catalog_from(
    target: &Target,
    policy: s3::RetryPolicy,
    settings: &Settings,
    with_chunks: bool,
    manifest: Option<&Path>,
) -> anyhow::Result<(Bucket, Catalog)> {
    let bucket = Bucket::new(target.clone(), policy).context("starting the S3 client")?;
    let catalog = match (&settings.objects, manifest) {
        (Some(dataset), Some(file)) => {
            catalog::manifest::manifest_objects(file, dataset, settings.num_files)?
        }
        (None, Some(file)) => return Err(parquet_manifest(file).into()),
        _ => {
            bucket.check().map_err(CatalogError::Request)?;
            listed_catalog(&bucket, settings, with_chunks)?
        }
    };
    Ok((bucket, catalog))
}

/// The catalog of the workload's files under the data directory `root` (a run on a file
/// system): Parquet footers read with `pread`, or the whole objects listed (or named by
/// `--manifest`); chunk hashes for `--verify` when `with_chunks`.
pub fn catalog_from_dir(
    root: &Path,
    settings: &Settings,
    with_chunks: bool,
    manifest: Option<&Path>,
) -> anyhow::Result<Catalog> {
    let source = catalog::DirSource::new(root);
    Ok(match (&settings.objects, manifest) {
        (Some(dataset), Some(file)) => {
            catalog::manifest::manifest_objects(file, dataset, settings.num_files)?
        }
        (None, Some(file)) => return Err(parquet_manifest(file).into()),
        (Some(dataset), None) => catalog::discover_objects(&source, dataset, settings.num_files)?,
        (None, None) => catalog::discover(
            &source,
            &settings.dataset.train_prefix,
            settings.num_files,
            settings.columns_read.as_deref(),
            with_chunks,
        )?,
    })
}

/// What a sweep's points read: an S3 store (the target given, else one embedded server for
/// every point), or the data directory of a run on a file system, which each point reads
/// itself (`--data-dir` travels on its command line).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per sweep
pub enum SweepStore {
    S3(Storage),
    Files(std::path::PathBuf),
}

impl SweepStore {
    /// The embedded server, when the sweep started one.
    pub fn server(&self) -> Option<&Server> {
        match self {
            SweepStore::S3(storage) => storage.server.as_ref(),
            SweepStore::Files(_) => None,
        }
    }

    /// Stops the embedded server, if any.
    pub fn shutdown(self) {
        if let SweepStore::S3(Storage {
            server: Some(server),
            ..
        }) = self
        {
            server.shutdown();
        }
    }

    pub fn tls(&self) -> bool {
        matches!(self, SweepStore::S3(storage) if storage.tls())
    }

    /// The embedded server's endpoint and bucket, for every point's command line.
    pub fn embedded(&self) -> Option<(String, String)> {
        match self {
            SweepStore::S3(storage) if storage.server.is_some() => Some((
                storage.target.endpoints_text(),
                storage.target.bucket.clone(),
            )),
            _ => None,
        }
    }

    /// The workload's catalog, for planning the points.
    pub fn catalog(
        &self,
        policy: s3::RetryPolicy,
        settings: &Settings,
        manifest: Option<&Path>,
    ) -> anyhow::Result<Catalog> {
        match self {
            SweepStore::S3(storage) => {
                Ok(catalog_from(&storage.target, policy, settings, false, manifest)?.1)
            }
            SweepStore::Files(root) => catalog_from_dir(root, settings, false, manifest),
        }
    }
}

/// The workload's catalog listed in `bucket`.
fn listed_catalog(
    bucket: &Bucket,
    settings: &Settings,
    with_chunks: bool,
) -> Result<Catalog, CatalogError> {
    Ok(match &settings.objects {
        // Whole objects: a LIST, nothing read from inside them.
        Some(dataset) => catalog::discover_objects(bucket, dataset, settings.num_files)?,
        None => catalog::discover(
            bucket,
            &settings.dataset.train_prefix,
            settings.num_files,
            settings.columns_read.as_deref(),
            with_chunks,
        )?,
    })
}

/// Creates `--output DIR` and checks that files can be written in it, before anything runs.
pub fn prepare_output(dir: &std::path::Path) -> Result<(), UsageError> {
    let fail = |e: std::io::Error| {
        UsageError(format!(
            "cannot write results into --output {}: {e}; choose a directory you can write",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".ringload-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}
