//! `sweep`'s flags as the sweep's own values: [`SweepArgs::request`] converts them into a
//! [`SweepRequest`], and [`SweepArgs`] writes each point's `ringload run` command line
//! ([`PointCommandLine`]) from the flags every point shares.

use super::{RunArgs, ShapeArgs, SweepArgs};
use crate::sweep::request::{
    FindMaxNpRequest, GridRequest, PointCommandLine, PointRun, SweepRequest,
};

impl SweepArgs {
    /// The sweep these flags ask for.
    pub fn request(&self) -> SweepRequest {
        let options = &self.options;
        let find = &self.find;
        SweepRequest {
            output: self.output.clone(),
            json: self.json,
            resume: self.resume,
            force: self.force,
            gate: self.gate,
            repeat: self.repeat,
            grid: GridRequest {
                np: self.np.clone(),
                read_threads: self.read_threads.clone(),
                engine: self.engine.clone(),
                prefetch: self.prefetch.clone(),
                coalesce_rgs: self.coalesce_rgs.clone(),
                computation_time: self.computation_time.clone(),
                loader: self.loader.clone(),
            },
            latency_point: self.latency_point,
            find: FindMaxNpRequest {
                find_max_np: find.find_max_np,
                au_target: find.au_target,
                runs: find.runs,
                strict: find.strict,
                client_memory_bytes: find.client_memory,
                hosts: find.hosts,
                server_bandwidth_mib_per_s: find.server_bandwidth_mib_per_s,
            },
            server_threads: self.server_threads,
            sharding: options.shape.sharding,
            memory_budget_bytes: options.shape.memory_budget,
            prefetch_factor: options.shape.prefetch_factor,
            target: options.s3.target_flags(),
            bucket: options.s3.bucket.clone(),
            retry: options.s3.retry_policy(),
            manifest: options.manifest.clone(),
            data_dir: options.files.data_dir.clone(),
            checkpoint_io: options.checkpoint.io_options(options.verify),
            results_dir: options.results.results_dir.clone(),
            secret_env: options.s3.secret_env(),
            command: crate::redact::redacted_command_line(std::env::args()),
        }
    }
}

impl PointCommandLine for SweepArgs {
    /// The `ringload run` of a point: the workload and the run options as given to the sweep,
    /// the point's shape and engine, the shared embedded server's address in place of the
    /// target flags, and the point's folder as `--output`.
    fn args(&self, run: &PointRun<'_>) -> Vec<String> {
        let mut options = self.options.clone();
        if let Some(store) = run.store {
            options.s3.endpoint = Some(store.endpoint.clone());
            options.s3.bucket = Some(store.bucket.clone());
        }
        if let Some(dir) = run.results_dir {
            options.results.results_dir = Some(dir.to_path_buf());
        }
        RunArgs {
            workload: self.workload.clone(),
            shape: ShapeArgs {
                np: run.np,
                read_threads: run.read_threads,
                prefetch: run.prefetch,
                coalesce_rgs: run.coalesce_rgs,
                computation_time: run.computation_time,
                loader: run.loader,
            },
            engine: clap::ValueEnum::from_str(run.engine, false).ok(),
            options,
            output: Some(run.output.to_path_buf()),
            json: false,
            server_threads: None,
        }
        .to_args()
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use clap::Parser;

    use super::super::{Cli, Command};
    use super::*;
    use crate::engine::EngineKind;
    use crate::plan::Loader;
    use crate::sweep::request::PointStore;

    fn parse(sub: &str, args: &[&str]) -> Command {
        Cli::try_parse_from(["ringload", sub].iter().chain(args))
            .unwrap()
            .command
    }

    fn sweep_args(args: &[&str]) -> SweepArgs {
        let Command::Sweep(sweep) = parse("sweep", args) else {
            panic!("not sweep")
        };
        sweep
    }

    fn run_args(args: &[String]) -> RunArgs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Command::Run(run) = parse("run", &args) else {
            panic!("not run")
        };
        run
    }

    const SWEEP: &[&str] = &[
        "flux_small",
        "train.epochs=2",
        "--files",
        "7",
        "--np",
        "1,2",
        "--read-threads",
        "1,4",
        "--engine",
        "uring,baseline",
        "--output",
        "/tmp/sweep",
        "--json",
        "--server-threads",
        "3",
        "--sharding",
        "dlio",
        "--memory-budget",
        "16GiB",
        "--endpoint",
        "http://a:9000",
        "--bucket",
        "data",
        "--access-key",
        "AK",
        "--secret-key",
        "SK",
        "--retries",
        "9",
        "--verify",
        "--results-dir",
        "/tmp/results",
        "--find-max-np",
        "--runs",
        "3",
        "--client-memory",
        "1GiB",
    ];

    fn run<'a>(output: &'a Path, engine: &'a str) -> PointRun<'a> {
        PointRun {
            np: 2,
            read_threads: Some(4),
            prefetch: Some(3),
            coalesce_rgs: None,
            computation_time: Some(0.25),
            loader: Loader::Dlio,
            engine,
            output,
            store: None,
            results_dir: None,
        }
    }

    #[test]
    fn a_point_runs_with_the_sweeps_options_and_its_own_shape() {
        let sweep = sweep_args(SWEEP);
        let folder = PathBuf::from("/tmp/sweep/points/p");
        let args = sweep.args(&run(&folder, "baseline"));
        // The secret key never travels on a command line: the request's environment has it.
        assert!(!args.iter().any(|a| a.contains("SK")), "{args:?}");
        assert_eq!(
            sweep.request().secret_env,
            Some(("AWS_SECRET_ACCESS_KEY", "SK".to_string()))
        );
        let point = run_args(&args);
        assert_eq!(point.workload, sweep.workload);
        assert_eq!(
            point.shape,
            ShapeArgs {
                np: 2,
                read_threads: Some(4),
                prefetch: Some(3),
                coalesce_rgs: None,
                computation_time: Some(0.25),
                loader: Loader::Dlio,
            }
        );
        assert_eq!(point.engine, Some(EngineKind::Baseline));
        assert_eq!(point.output, Some(folder.clone()));
        assert!(!point.json);
        assert_eq!(point.server_threads, None);
        let mut expected = sweep.options.clone();
        expected.s3.secret_key = None;
        assert_eq!(point.options, expected);

        // The shared embedded server in place of the target flags, the staged results folder
        // in place of --results-dir, and a checkpoint point's read threads left to the
        // workload.
        let store = PointStore {
            endpoint: "http://127.0.0.1:1234".into(),
            bucket: "virtual".into(),
        };
        let staged = folder.join("staged");
        let args = sweep.args(&PointRun {
            read_threads: None,
            store: Some(&store),
            results_dir: Some(&staged),
            ..run(&folder, "uring")
        });
        let point = run_args(&args);
        assert_eq!(point.shape.read_threads, None);
        assert_eq!(point.engine, Some(EngineKind::Uring));
        assert_eq!(
            point.options.s3.endpoint.as_deref(),
            Some(store.endpoint.as_str())
        );
        assert_eq!(point.options.s3.bucket.as_deref(), Some("virtual"));
        assert_eq!(point.options.results.results_dir, Some(staged));
        assert_eq!(point.options.s3.access_key.as_deref(), Some("AK"));
    }

    #[test]
    fn the_request_carries_every_flag_the_sweep_reads() {
        let request = sweep_args(SWEEP).request();
        assert_eq!(request.output, PathBuf::from("/tmp/sweep"));
        assert!(request.json && !request.resume && !request.force && !request.gate);
        assert_eq!(request.repeat, 1);
        assert_eq!(request.grid.np, [1, 2]);
        assert_eq!(request.grid.read_threads, [1, 4]);
        assert_eq!(
            request.grid.engine,
            [EngineKind::Uring, EngineKind::Baseline]
        );
        assert_eq!(request.grid.loader, [Loader::Ringload]);
        assert!(request.grid.prefetch.is_empty());
        assert_eq!(request.server_threads, Some(3));
        assert_eq!(request.sharding, crate::plan::Sharding::Dlio);
        assert_eq!(request.memory_budget_bytes, Some(16 << 30));
        assert_eq!(request.target.endpoint.as_deref(), Some("http://a:9000"));
        assert_eq!(request.bucket.as_deref(), Some("data"));
        assert_eq!(request.retry.retries, 9);
        assert!(request.checkpoint_io.verify);
        assert_eq!(request.results_dir, Some(PathBuf::from("/tmp/results")));
        assert!(request.find.find_max_np);
        assert_eq!(request.find.runs, Some(3));
        assert_eq!(request.find.client_memory_bytes, Some(1 << 30));
        assert_eq!(request.find.hosts, 1);
    }
}
