//! The first part of every `ringload run`, whatever its workload's kind: Ctrl-C and SIGTERM
//! watched, this process's share of the ranks under mpirun, the workload (resolved once, by
//! the caller: [`Workload`]) checked, `--output` and `--results-dir` checked writable, the target resolved (under
//! mpirun one must be given), the CPUs chosen. Then `commands::run` hands it to the session of its kind — the
//! training session ([`super::session`]) or the checkpoint session ([`super::checkpoint`]) —
//! which sets up its store, plan, budget and engine, and executes.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Instant, SystemTime};

use super::request::RunRequest;
use crate::affinity;
use crate::cluster::Cluster;
use crate::exit::UsageError;
use crate::files::DataDir;
use crate::s3::Target;
use crate::setup::store::{prepare_output, refuse_checkpoint_manifest, resolve_target};
use crate::signals::{exit_if_stopped_in_setup, raise_on_stop_signals};
use crate::workload::Workload;

/// A run's common set-up, before its kind's session takes over.
#[derive(Debug)]
pub struct Prepared<'a> {
    pub request: &'a RunRequest,
    pub cluster: &'a Cluster,
    pub started: Instant,
    pub started_wall: SystemTime,
    /// Raised by Ctrl-C or SIGTERM from the start of set-up.
    pub interrupt: Arc<AtomicBool>,
    /// Set when the ranks start: a stop signal before it ends the process at once.
    pub setup_done: Arc<AtomicBool>,
    /// The ranks of the job: `--np`, or the world size under mpirun when not given.
    pub np: u32,
    /// The plan's ranks this process runs.
    pub local: Range<usize>,
    pub workload: Workload,
    /// The target the flags, the environment or the workload name; `None`: the embedded
    /// server, or the data directory.
    pub target: Option<Target>,
    /// The mounted file system the run reads and writes (`--data-dir`, or
    /// `storage.storage_type: local_fs`), instead of an S3 store.
    pub dir: Option<DataDir>,
    /// The CPUs the local ranks are pinned to, and the warning when they share cores.
    pub cpus: Vec<usize>,
    pub shared_cores: Option<String>,
    /// [`crate::s3::client::lists_sent`] when set-up started: the run's LISTs are those since.
    pub lists_at_start: u64,
}

impl<'a> Prepared<'a> {
    /// Sets up what every run needs (see the module docs), for `workload` as the caller
    /// resolved it.
    pub fn start(
        request: &'a RunRequest,
        workload: Workload,
        cluster: &'a Cluster,
    ) -> anyhow::Result<Prepared<'a>> {
        let started = Instant::now();
        let started_wall = SystemTime::now();
        let lists_at_start = crate::s3::client::lists_sent();
        // Ctrl-C or SIGTERM during set-up: one line and exit 3, not a silent 130.
        let interrupt = Arc::new(AtomicBool::new(false));
        let setup_done = Arc::new(AtomicBool::new(false));
        raise_on_stop_signals(Arc::clone(&interrupt))?;
        exit_if_stopped_in_setup(Arc::clone(&interrupt), Arc::clone(&setup_done), "run")?;
        let hosts = !cluster.is_single();
        let np = match hosts && !request.np_given {
            // As DLIO under mpirun: one rank per process.
            true => cluster.processes() as u32,
            false => request.plan.np,
        };
        let local = Cluster::ranks_of(cluster.process(), cluster.processes(), np as usize);
        if hosts && local.is_empty() {
            return Err(UsageError(format!(
                "--np {np} is fewer than the {} processes mpirun started; pass --np {} or more",
                cluster.processes(),
                cluster.processes()
            ))
            .into());
        }
        let mut workload = workload;
        // A whole-object dataset's layout: what `generate` made with the same ratios, checked
        // by `--verify` and served so by the embedded server.
        if let crate::workload::Settled::Training(settings) = &mut workload.settled
            && let Some(objects) = &mut settings.objects
        {
            objects.content = request
                .checkpoint
                .io
                .reduction
                .shape()
                .map_err(UsageError)?;
        }
        if let Some(settings) = workload.checkpoint() {
            refuse_checkpoint_manifest(request.manifest.as_deref())?;
            // checkpoint.checkpoint_folder's s3://bucket/… against --bucket (against
            // storage.storage_root when the workload was resolved).
            settings
                .check_bucket(request.target.bucket.as_deref())
                .map_err(UsageError)?;
        }
        // Results are written where --output says: checked now, so a run never ends unable to
        // (by process 0, which reports for the job).
        if cluster.process() == 0 {
            if let Some(dir) = &request.output {
                prepare_output(dir)?;
            }
            // So is --results-dir: a leaf that cannot be written would lose the whole run.
            if let Some(root) = &request.results_dir {
                crate::results::check_root(root)?;
            }
        }
        let dir = data_dir(request, &workload)?;
        let target = match dir {
            Some(_) => None,
            None => resolve_target(&request.target, workload.storage())?,
        };
        if hosts && target.is_none() && dir.is_none() {
            return Err(UsageError(
                "under mpirun, pass --endpoint (or AWS_ENDPOINT_URL): the embedded server would \
                 be one per process; start one `ringload serve` for all of them (--dir DIR to \
                 keep what is written)"
                    .into(),
            )
            .into());
        }
        let (cpus, shared_cores) =
            affinity::choose_cpus(request.cpus.as_deref(), local.len() as u32)?;
        Ok(Prepared {
            request,
            cluster,
            started,
            started_wall,
            interrupt,
            setup_done,
            np,
            local,
            workload,
            target,
            dir,
            cpus,
            shared_cores,
            lists_at_start,
        })
    }

    /// Whether this run spans several processes (mpirun).
    pub fn hosts(&self) -> bool {
        !self.cluster.is_single()
    }

    /// Whether this is process 0, which cleans up, lists and reports for the job.
    pub fn lead(&self) -> bool {
        self.cluster.process() == 0
    }
}

/// The data directory of a run on a mounted file system: `--data-dir`, else the workload's
/// `storage.storage_root` (`./` when unset, as DLIO) when its `storage.storage_type` is
/// `local_fs` or `parallel_fs`; `None` for an S3 run. An endpoint given with it is refused:
/// one store per run.
pub fn data_dir(request: &RunRequest, workload: &Workload) -> Result<Option<DataDir>, UsageError> {
    let files = &request.files;
    let Some(root) = workload.data_root(files.data_dir.as_deref()) else {
        if files.drop_caches || !files.direct {
            return Err(UsageError(
                "--drop-caches and --direct are for a run on a file system; add --data-dir DIR \
                 (or storage.storage_type=local_fs)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if let Some(endpoint) = &request.target.endpoint {
        return Err(UsageError(format!(
            "--endpoint {endpoint} with a file system ({}): one store per run; drop --endpoint \
             to read the files, or --data-dir (and storage.storage_type=local_fs) to reach \
             the S3 store",
            root.display()
        )));
    }
    DataDir::open(&root, files.direct)
        .map(Some)
        .map_err(UsageError)
}
