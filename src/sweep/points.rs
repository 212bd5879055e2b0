//! A sweep's points as child runs: each point's `ringload run` command line, and its plan
//! against the store's files (shared by the grid in [`super::session`] and the search in
//! [`super::maxnp_search`]).

use std::path::Path;

use anyhow::Context;

use super::{Planned, Point};
use crate::budget;
use crate::cli::{RunArgs, RunOptions, ShapeArgs, SweepArgs};
use crate::config::RawConfig;
use crate::config::shape::ShapeKeys;
use crate::plan::{Plan, PlanOptions};
use crate::settings::Settings;
use crate::setup::store::{Storage, catalog_from};

/// The child `ringload run` of a point, writing into a folder: every point reads the same
/// store (with the embedded server, its address); a secret key reaches the points through
/// their environment, never their command line.
pub fn point_command<'a>(
    args: &'a SweepArgs,
    storage: &Storage,
) -> anyhow::Result<impl Fn(&Point, &Path) -> std::process::Command + 'a> {
    let exe = std::env::current_exe().context("finding the ringload binary for the points")?;
    let mut point_options = args.options.clone();
    if storage.server.is_some() {
        point_options.s3.endpoint = Some(storage.target.endpoints_text());
        point_options.s3.bucket = Some(storage.target.bucket.clone());
    }
    let secret_env = point_options.s3.secret_env();
    // The search's runs write their MLPerf leaves beside their points; the answer's are
    // gathered into --results-dir at the end (sweep::maxnp_results).
    let staged = args.find.find_max_np && point_options.results.results_dir.is_some();
    Ok(move |point: &Point, folder: &Path| {
        let mut options = point_options.clone();
        if staged {
            options.results.results_dir = Some(super::maxnp_results::staging(folder));
        }
        let mut c = std::process::Command::new(&exe);
        c.arg("run")
            .args(point_args(args, &options, point, folder).to_args());
        if let Some((name, value)) = &secret_env {
            c.env(name, value);
        }
        c
    })
}

/// A point's shape flags.
pub fn point_shape(point: &Point) -> ShapeArgs {
    ShapeArgs {
        np: point.np,
        read_threads: Some(point.read_threads),
        prefetch: point.prefetch,
        coalesce_rgs: point.coalesce_rgs,
        computation_time: point.computation_time,
        loader: point.loader,
    }
}

/// The `ringload run` of a point, writing into `folder`.
pub fn point_args(args: &SweepArgs, options: &RunOptions, point: &Point, folder: &Path) -> RunArgs {
    RunArgs {
        workload: args.workload.clone(),
        shape: point_shape(point),
        engine: clap::ValueEnum::from_str(&point.engine, false).ok(),
        options: options.clone(),
        output: Some(folder.to_path_buf()),
        json: false,
        server_threads: None,
    }
}

/// Plans points against the store's files, one at a time (`--find-max-np` plans each NP as
/// the search reaches it).
pub struct Planner<'a> {
    args: &'a SweepArgs,
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
            .field("files", &self.catalog.files.len())
            .finish()
    }
}

impl<'a> Planner<'a> {
    /// Lists the store's files once.
    pub fn new(
        args: &'a SweepArgs,
        storage: &Storage,
        config: &RawConfig,
        settings: &Settings,
    ) -> anyhow::Result<Planner<'a>> {
        let (_, catalog) = catalog_from(
            &storage.target,
            args.options.s3.retry_policy(),
            settings,
            false,
            args.options.manifest.as_deref(),
        )?;
        let limits = budget::MemoryLimits {
            memlock_bytes: None,
            ..budget::probe()
        };
        Ok(Planner {
            args,
            config: config.clone(),
            tls: storage.tls(),
            catalog,
            limits,
        })
    }

    /// The files the store holds.
    pub fn files(&self) -> usize {
        self.catalog.files.len()
    }

    /// `point`'s plan: skipped with the plan's reason when over the memory budget or not
    /// plannable.
    pub fn plan(&self, point: Point) -> anyhow::Result<Planned> {
        let shape = point_shape(&point);
        let mut config = self.config.clone();
        config.apply_shape(&ShapeKeys {
            read_threads: shape.read_threads,
            prefetch: shape.prefetch,
            coalesce_rgs: shape.coalesce_rgs,
            computation_time: shape.computation_time,
        })?;
        let settings = Settings::resolve(&config)?;
        let options = PlanOptions {
            tls: self.tls,
            ..shape.plan_options(&self.args.options.shape, 0)
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
