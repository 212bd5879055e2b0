//! `ringload serve`: the embedded S3-compatible server on its own — a workload's virtual
//! dataset, a directory, or a sink for checkpoints — with TLS, signatures, throttles, faults and
//! a request log as the flags say, until Ctrl-C or SIGTERM; its totals at exit.

use std::io::Write;
use std::sync::Arc;

use crate::checkpoint::{self, CheckpointOptions, CheckpointPlan};
use crate::cli::{ServeArgs, ShapeArgs, WorkloadArgs, load_config};
use crate::exit::{self, UsageError};
use crate::server::dir::DirStore;
use crate::server::faults::Faults;
use crate::server::virtual_dataset::VirtualDataset;
use crate::server::{self, Credentials, Server, ServerConfig, Store};
use crate::setup::store::{checked_bucket, checkpoint_sink_objects, env, virtual_any};
use crate::signals::StopSignals;
use crate::workload::{Settled, Workload};
use crate::{affinity, budget, report, units};

/// The training settings of `workload`; a checkpoint workload is refused, naming the fix.
fn training_settings(workload: &WorkloadArgs) -> anyhow::Result<crate::settings::Settings> {
    let resolved = Workload::resolve(load_config(workload, None)?)?;
    match resolved.settled {
        Settled::Training(settings) => Ok(*settings),
        Settled::Checkpoint(_) => Err(UsageError(format!(
            "{}: a checkpoint workload has no dataset to serve; serve its objects with \
             `ringload serve --sink {}`",
            resolved.name(),
            resolved.name()
        ))
        .into()),
    }
}

/// The virtual Parquet dataset of `workload` (its overrides applied) in `bucket`.
pub fn virtual_store(
    workload: &WorkloadArgs,
    bucket: Option<&str>,
    show_progress: bool,
) -> anyhow::Result<VirtualDataset> {
    crate::setup::store::virtual_store(&training_settings(workload)?, bucket, show_progress)
}

/// The store of `serve WORKLOAD`: its whole objects (npz, jpeg, tfrecord), else its virtual
/// Parquet dataset; with `workflow.checkpoint: True`, the checkpoint folder's keys and every
/// write to a sink beside it ([`Store::with_sink`]), as a run's embedded server has them.
pub fn serve_store(
    workload: &WorkloadArgs,
    bucket: Option<&str>,
    show_progress: bool,
) -> anyhow::Result<Store> {
    let resolved = Workload::resolve(load_config(workload, None)?)?;
    let writes = crate::setup::store::CheckpointWrites::of(resolved.train_checkpoint.as_deref());
    let store = virtual_any(&training_settings(workload)?, bucket, show_progress)?.0;
    Ok(match writes {
        Some(c) => Store::with_sink(store, &c.prefix, c.randomize, Default::default())
            .map_err(|e| anyhow::anyhow!("the checkpoint sink: {e:?}"))?,
        None => store,
    })
}

/// `ringload serve`; `Ok` carries the exit code.
pub fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    refuse_idle_ratios(args)?;
    let store = match &args.dir {
        None if args.sink => sink_store(args)?,
        Some(dir) => {
            if args.workload.is_some() || !args.overrides.is_empty() || args.files.is_some() {
                return Err(UsageError(
                    "a workload, its overrides and --files apply to the virtual dataset; --dir \
                     serves the directory as it is"
                        .into(),
                )
                .into());
            }
            let store = DirStore::new(dir).map_err(|e| {
                UsageError(format!(
                    "cannot serve --dir {}: {e}; create it or point --dir at an existing \
                     directory",
                    dir.display()
                ))
            })?;
            if let Some(bucket) = &args.bucket {
                let bucket = checked_bucket(bucket)?;
                if store.bucket_path(bucket).is_err() {
                    store.create_bucket(bucket).map_err(|e| {
                        UsageError(format!("cannot create bucket '{bucket}' in --dir: {e}"))
                    })?;
                }
            }
            for folder in store.unserved_folders() {
                eprintln!(
                    "ringload serve: warning: folder '{folder}' in --dir is not served: a bucket \
                     name has 3-63 characters of a-z, 0-9, '.' and '-'; rename it to serve it"
                );
            }
            Store::Dir(store)
        }
        None => {
            // `--virtual W` (the older spelling) takes every positional as an override.
            let mut positional: Vec<String> = args.workload.iter().cloned().collect();
            positional.extend(args.overrides.iter().cloned());
            let workload = match &args.virtual_workload {
                Some(w) => WorkloadArgs {
                    workload: Some(w.clone()),
                    overrides: positional,
                    files: args.files,
                },
                None => WorkloadArgs {
                    workload: positional.first().cloned(),
                    overrides: positional.into_iter().skip(1).collect(),
                    files: args.files,
                },
            };
            serve_store(&workload, args.bucket.as_deref(), true)?
        }
    };
    let credentials = match (&args.access_key, &args.secret_key) {
        (Some(access_key_id), Some(secret_access_key)) => Some(Credentials {
            access_key_id: access_key_id.clone(),
            secret_access_key: secret_access_key.clone(),
        }),
        _ => None,
    };
    let signed = credentials.is_some();
    let faults = match &args.faults {
        Some(spec) => Faults::parse(spec, args.faults_seed)
            .map_err(|e| UsageError(format!("--faults: {e}")))?,
        None => Faults::default(),
    };
    let injecting = args.faults.clone();
    let (tls, self_signed, remove_tls_dir) = serve_tls(args)?;
    let signals = StopSignals::install()?;
    let server = Server::start(ServerConfig {
        tls,
        listen: args.listen,
        store,
        credentials,
        region: args.region.clone(),
        worker_threads: args.threads.unwrap_or_else(affinity::cores),
        throttle_bytes_per_s: args.throttle_mib_per_s.map(|r| (r * units::MIB) as u64),
        faults,
        max_connections: args.max_connections,
    })?;
    server.limit_bandwidth(args.bandwidth_mib_per_s.map(|r| (r * units::MIB) as u64));
    if let Some(file) = &args.request_log {
        server.log_requests(file).map_err(UsageError)?;
    }
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", server.endpoint_url())?;
        stdout.flush()?;
    }
    if !signed && !args.listen.ip().is_loopback() {
        eprintln!(
            "ringload serve: warning: listening on {} without --access-key: anyone who can \
             reach it can read{} its objects",
            server.addr(),
            if args.dir.is_some() || args.sink {
                ", write and delete"
            } else {
                ""
            }
        );
    }
    let throttle = args
        .throttle_mib_per_s
        .map(|r| format!("; each body sent at most {r} MiB/s"))
        .unwrap_or_default()
        + &args
            .bandwidth_mib_per_s
            .map(|r| format!("; all bodies together at most {r} MiB/s"))
            .unwrap_or_default()
        + &injecting
            .map(|spec| format!("; INJECTING FAULTS: {spec}"))
            .unwrap_or_default();
    eprintln!(
        "ringload serve: {} at {} ({}{throttle}); Ctrl-C stops",
        server.describe(),
        server.endpoint_url(),
        if signed {
            "SigV4 signatures required"
        } else {
            "no credentials set: any request is accepted"
        }
    );
    if let Some(files) = &self_signed {
        eprintln!(
            "ringload serve: TLS with a self-signed CA for {}: clients pass --ca-bundle {} (boto3: \
             verify='{}')",
            args.listen.ip(),
            files.ca_pem.display(),
            files.ca_pem.display()
        );
    }
    signals.wait();
    let stats = server.shutdown();
    if let (Some(files), true) = (&self_signed, remove_tls_dir)
        && let Some(dir) = files.ca_pem.parent()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
    if args.json {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, &stats)?;
        writeln!(stdout)?;
    } else {
        eprintln!("ringload serve: {}", report::server_stats(&stats));
    }
    Ok(exit::OK)
}

/// `serve --sink [WORKLOAD]`: without a workload an empty sink, listing what is written to
/// it; with a checkpoint workload, its plan's objects at `--np` ranks listed and served from the
/// start (as the embedded sink of `run`), so a read-only run finds them.
fn sink_store(args: &ServeArgs) -> anyhow::Result<Store> {
    if args.files.is_some() {
        return Err(UsageError(
            "--files sizes a training workload's virtual dataset; serve --sink takes a \
             checkpoint workload and --np: drop --files"
                .into(),
        )
        .into());
    }
    let Some(name) = &args.workload else {
        let bucket = checked_bucket(args.bucket.as_deref().unwrap_or(server::DEFAULT_BUCKET))?;
        return Ok(Store::sink(
            bucket,
            Vec::new(),
            !args.sink_zeros,
            args.sink_verify,
            content_shape(args)?,
        ));
    };
    let workload = WorkloadArgs {
        workload: Some(name.clone()),
        overrides: args.overrides.clone(),
        files: None,
    };
    let shape = ShapeArgs {
        np: args.np,
        read_threads: None,
        prefetch: None,
        coalesce_rgs: None,
        computation_time: None,
        loader: crate::plan::Loader::Ringload,
    };
    let resolved = Workload::resolve(load_config(&workload, Some(&shape))?)?;
    let Settled::Checkpoint(settings) = resolved.settled else {
        return Err(UsageError(format!(
            "serve --sink {name}: not a checkpoint workload (workflow.checkpoint True and \
             workflow.train False); serve its training files with `ringload serve {name}`, or \
             give --sink a checkpoint workload such as llama3_8b"
        ))
        .into());
    };
    let options = CheckpointOptions {
        np: args.np,
        hosts: 1,
        io: checkpoint::IoOptions::default(),
        memory_cap_bytes: None,
        server_bytes: 0,
    };
    let plan = CheckpointPlan::resolve(&settings, &options, &budget::probe(), &env)?;
    settings
        .check_bucket(args.bucket.as_deref())
        .map_err(UsageError)?;
    let bucket = args
        .bucket
        .as_deref()
        .or(settings.storage.bucket.as_deref())
        .unwrap_or(server::DEFAULT_BUCKET);
    let bucket = checked_bucket(bucket)?;
    Ok(Store::sink(
        bucket,
        checkpoint_sink_objects(&plan),
        settings.randomize_tensor && !args.sink_zeros,
        args.sink_verify,
        content_shape(args)?,
    ))
}

/// `--dedupe-ratio` and its kin where no random content is made (a directory, a virtual
/// dataset, a sink of zeros): refused rather than ignored.
fn refuse_idle_ratios(args: &ServeArgs) -> Result<(), UsageError> {
    match args.content.given().next() {
        Some(flag) if !args.sink || args.sink_zeros => Err(UsageError(format!(
            "{flag} lays out the random content a sink makes and checks; {} serves none: use \
             it with --sink (without --zeros), or drop it",
            if args.sink { "--zeros" } else { "this server" }
        ))),
        _ => Ok(()),
    }
}

/// The sink's content layout from `--dedupe-ratio`, `--dedupe-block`, `--compress-ratio`.
fn content_shape(args: &ServeArgs) -> anyhow::Result<crate::content::Shape> {
    Ok(args.content.reduction().shape().map_err(UsageError)?)
}

/// `serve`'s TLS: from --tls-cert/--tls-key, or made by --tls-self-signed (the files, and
/// whether their folder is a temporary one to remove at exit).
type ServeTls = (
    Option<Arc<rustls::ServerConfig>>,
    Option<server::tls::SelfSigned>,
    bool,
);

fn serve_tls(args: &ServeArgs) -> anyhow::Result<ServeTls> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let config = server::tls::from_files(cert, key).map_err(UsageError)?;
        return Ok((Some(config), None, false));
    }
    let Some(dir) = &args.tls_self_signed else {
        return Ok((None, None, false));
    };
    let (dir, temporary) = if dir.as_os_str().is_empty() {
        let dir = server::tls::private_temp_dir()
            .map_err(|e| UsageError(format!("--tls-self-signed: {e}")))?;
        (dir, true)
    } else {
        (dir.clone(), false)
    };
    let (config, files) = server::tls::self_signed(args.listen, &dir)
        .map_err(|e| UsageError(format!("--tls-self-signed: {e}")))?;
    Ok((Some(config), Some(files), temporary))
}
