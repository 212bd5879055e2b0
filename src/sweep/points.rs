//! A sweep's points as child runs: each point's `ringload run` process (its command line
//! written by the Face, [`PointCommandLine`]), and its plan against the store's files (shared by the grid in [`super::session`] and the search in
//! [`super::maxnp_search`]).

use std::path::Path;

use anyhow::Context;

use super::request::{PointCommandLine, PointRun, PointStore, SweepRequest};
use super::{Planned, Point};
use crate::budget;
use crate::config::RawConfig;
use crate::config::shape::ShapeKeys;
use crate::plan::{Plan, PlanOptions};
use crate::settings::Settings;
use crate::setup::store::SweepStore;

/// The child `ringload run` of a point, writing into a folder: every point reads the same
/// store (with the embedded server, its address); a secret key reaches the points through
/// their environment, never their command line. The command line's words are the Face's
/// (`line`); the sweep spawns the process.
pub fn point_command<'a>(
    request: &'a SweepRequest,
    line: &'a dyn PointCommandLine,
    storage: &SweepStore,
) -> anyhow::Result<impl Fn(&Point, &Path) -> std::process::Command + 'a> {
    let exe = std::env::current_exe().context("finding the ringload binary for the points")?;
    let store = storage
        .embedded()
        .map(|(endpoint, bucket)| PointStore { endpoint, bucket });
    // The search's runs write their MLPerf leaves beside their points; the answer's are
    // gathered into --results-dir at the end (sweep::maxnp_results).
    let staged = request.find.find_max_np && request.results_dir.is_some();
    Ok(move |point: &Point, folder: &Path| {
        let results_dir = staged.then(|| super::maxnp_results::staging(folder));
        let run = PointRun {
            store: store.as_ref(),
            results_dir: results_dir.as_deref(),
            ..point_run(point, folder)
        };
        point_process(&exe, request, &line.args(&run))
    })
}

/// The process of a point's `ringload run` with `args`, the secret key in its environment.
pub fn point_process(exe: &Path, request: &SweepRequest, args: &[String]) -> std::process::Command {
    let mut c = std::process::Command::new(exe);
    c.arg("run").args(args);
    if let Some((name, value)) = &request.secret_env {
        c.env(name, value);
    }
    c
}

/// What a point's `ringload run` is asked, writing into `folder`: its shape, and the flags
/// every point shares as given.
pub fn point_run<'a>(point: &'a Point, folder: &'a Path) -> PointRun<'a> {
    PointRun {
        np: point.np,
        read_threads: Some(point.read_threads),
        prefetch: point.prefetch,
        coalesce_rgs: point.coalesce_rgs,
        computation_time: point.computation_time,
        loader: point.loader,
        engine: &point.engine,
        output: folder,
        store: None,
        results_dir: None,
    }
}

/// Plans points against the store's files, one at a time (`--find-max-np` plans each NP as
/// the search reaches it).
pub struct Planner<'a> {
    request: &'a SweepRequest,
    /// The sweep's configuration (the workload, its overrides, `--files`): each point applies
    /// its shape to a copy.
    config: RawConfig,
    tls: bool,
    catalog: crate::catalog::Catalog,
    limits: budget::MemoryLimits,
}

impl std::fmt::Debug for Planner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("files", &self.catalog.file_count())
            .finish()
    }
}

impl<'a> Planner<'a> {
    /// Lists the store's files once.
    pub fn new(
        request: &'a SweepRequest,
        storage: &SweepStore,
        config: &RawConfig,
        settings: &Settings,
    ) -> anyhow::Result<Planner<'a>> {
        let catalog = storage.catalog(request.retry, settings, request.manifest.as_deref())?;
        let limits = budget::MemoryLimits {
            memlock_bytes: None,
            ..budget::probe()
        };
        Ok(Planner {
            request,
            config: config.clone(),
            tls: storage.tls(),
            catalog,
            limits,
        })
    }

    /// The files the store holds.
    pub fn files(&self) -> usize {
        self.catalog.file_count()
    }

    /// `point`'s plan: skipped with the plan's reason when over the memory budget or not
    /// plannable.
    pub fn plan(&self, point: Point) -> anyhow::Result<Planned> {
        let mut config = self.config.clone();
        config.apply_shape(&ShapeKeys {
            read_threads: Some(point.read_threads),
            prefetch: point.prefetch,
            coalesce_rgs: point.coalesce_rgs,
            computation_time: point.computation_time,
        })?;
        let settings = Settings::resolve(&config)?;
        let options = PlanOptions {
            np: point.np,
            sharding: self.request.sharding,
            memory_cap_bytes: self.request.memory_budget_bytes,
            server_bytes: 0,
            checkpoint_bytes: 0,
            loader: point.loader,
            prefetch_factor: self.request.prefetch_factor,
            tls: self.tls,
        };
        let (skip, estimate_s) =
            match Plan::resolve(&settings, &self.catalog, &options, &self.limits) {
                Ok(plan) => (
                    None,
                    plan.steps_per_rank as f64
                        * f64::from(settings.epochs)
                        * settings.computation_time_s,
                ),
                Err(e) => (Some(e.to_string()), 0.0),
            };
        Ok(Planned {
            point,
            skip,
            estimate_s,
        })
    }
}
