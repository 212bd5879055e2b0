//! The result of a run, as data: the fields of the brief's §3 (names kept for DLIO-minded
//! tooling), per-rank figures, and the context needed to read them. Built once from the plan and
//! the measurements with the definitions in [`crate::metrics`]; `report::run` renders it for
//! people, `--output` and `--json` write it as is.

pub mod checkpoint;
pub mod dlio;
pub mod limit;
pub mod train_checkpoint;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cluster::HostReport;
use crate::engine::EngineKind;
use crate::metrics::{self, Distribution, RequestStats};
use crate::plan::Plan;
use crate::rank::RankRecord;
use crate::rank::RunMeasurements;
use crate::s3::Target;
use crate::server::ServerStats;

/// Request latencies, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct RequestLatency {
    /// From sending a GET to its response head.
    pub first_byte: Distribution,
    /// From a GET's first attempt to its last body byte.
    pub total: Distribution,
}

/// One rank's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RankSummary {
    pub rank: usize,
    /// Mean over epochs; `None` with fewer than two steps.
    pub au_percent: Option<f64>,
    pub samples_per_s: Option<f64>,
    pub steps: u64,
    pub bytes_read: u64,
    pub requests: u64,
    pub retries: u64,
    /// Per step, the first step of each epoch left out (as AU leaves it out).
    pub io_wait_per_step_ms: Distribution,
    pub request_latency_ms: RequestLatency,
}

/// Where the run read from.
#[derive(Debug, Clone, Serialize)]
pub struct TargetSummary {
    /// The endpoints, comma-separated (see `endpoints` for each one's figures).
    pub endpoint: String,
    pub bucket: String,
    /// `path` or `virtual`.
    pub addressing: crate::s3::Addressing,
    /// The AWS profile read, when one was.
    pub profile: Option<String>,
    /// How TLS went, when an endpoint is `https://`.
    pub tls: Option<TlsSummary>,
    /// The in-process server with the workload's virtual dataset.
    pub embedded: bool,
    /// The in-process server's own totals over the run (its CPU is not in `client_cpu_s`).
    pub server: Option<ServerStats>,
    /// A run on a mounted file system (`--data-dir`): its type, `O_DIRECT` or not, the device
    /// and the page cache over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<crate::files::FilesSummary>,
}

/// TLS as the run used it.
#[derive(Debug, Clone, Serialize)]
pub struct TlsSummary {
    /// `false` with `--insecure`: certificates were not checked.
    pub verified: bool,
    /// The CA bundle trusted besides the system's, and where it was named.
    pub ca_bundle: Option<String>,
    /// The protocol version and cipher suite negotiated, e.g. `TLSv1_3 TLS13_AES_256_GCM_SHA384`.
    pub negotiated: Option<String>,
    /// Whether the kernel offers kTLS (`tls` in tcp_available_ulp); ringload does not use it.
    pub ktls_available: bool,
}

impl TargetSummary {
    /// Where a run read from: `target`, the TLS `negotiated` with it, and the embedded server's
    /// totals when there was one, with `server_cpu_s` (its CPU over the run, from the catalog
    /// on, as the client's is counted).
    pub fn of(
        target: &Target,
        negotiated: Option<&str>,
        server: Option<ServerStats>,
        server_cpu_s: f64,
    ) -> TargetSummary {
        TargetSummary {
            endpoint: target.endpoints_text(),
            bucket: target.bucket.clone(),
            addressing: target.addressing,
            profile: target.profile.clone(),
            tls: TlsSummary::of(target, negotiated),
            embedded: server.is_some(),
            server: server.map(|mut s| {
                s.cpu_s = server_cpu_s;
                s.cpu_s_per_gib = metrics::cpu_s_per_gib(server_cpu_s, s.bytes_sent);
                s.cpu_s_per_gib_received = metrics::cpu_s_per_gib(server_cpu_s, s.bytes_received);
                s
            }),
            files: None,
        }
    }

    /// A run on a mounted file system: its directory as a `file://` URL, no bucket.
    pub fn of_files(files: crate::files::FilesSummary) -> TargetSummary {
        TargetSummary {
            endpoint: format!("file://{}", files.root),
            bucket: String::new(),
            addressing: crate::s3::Addressing::default(),
            profile: None,
            tls: None,
            embedded: false,
            server: None,
            files: Some(files),
        }
    }
}

impl TlsSummary {
    /// TLS as a run against `target` used it; `None` when no endpoint is `https://`.
    pub fn of(target: &Target, negotiated: Option<&str>) -> Option<TlsSummary> {
        let tls = &target.tls;
        target
            .endpoints
            .iter()
            .any(|e| e.is_tls())
            .then(|| TlsSummary {
                verified: !tls.insecure,
                ca_bundle: tls.ca_bundle.as_ref().filter(|_| !tls.insecure).map(|p| {
                    format!(
                        "{} ({})",
                        p.display(),
                        tls.ca_bundle_from.as_deref().unwrap_or("--ca-bundle")
                    )
                }),
                negotiated: negotiated.map(str::to_string),
                ktls_available: crate::s3::tls::ktls_available(),
            })
    }
}

/// One endpoint's share of the GETs.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointSummary {
    pub url: String,
    pub requests: u64,
    pub bytes_read: u64,
    pub retries: u64,
    pub errors: u64,
    /// From the first attempt to the last body byte.
    pub latency_ms: Distribution,
}

/// One process's figures in the summary of a run under mpirun.
#[derive(Debug, Clone, Serialize)]
pub struct HostSummary {
    pub host: String,
    pub process: usize,
    pub ranks: Vec<usize>,
    pub client_cpu_s: f64,
    pub cpu_s_per_gib: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub memory_budget_bytes: u64,
    pub bytes_read: u64,
    pub requests: u64,
    pub retries: u64,
    pub errors: u64,
}

impl HostSummary {
    pub fn of(report: &HostReport) -> HostSummary {
        let stats: Vec<crate::metrics::RequestStats> = report
            .stats
            .iter()
            .cloned()
            .map(crate::metrics::RequestStats::from_wire)
            .collect();
        let bytes_read = stats.iter().map(|s| s.bytes_read).sum();
        HostSummary {
            host: report.host.clone(),
            process: report.process,
            ranks: report.ranks.clone().collect(),
            client_cpu_s: report.client_cpu_s,
            cpu_s_per_gib: metrics::cpu_s_per_gib(report.client_cpu_s, bytes_read),
            peak_rss_bytes: report.peak_rss_bytes,
            memory_budget_bytes: report.memory_budget_bytes,
            bytes_read,
            requests: stats.iter().map(|s| s.requests).sum(),
            retries: stats.iter().map(|s| s.retries).sum(),
            errors: stats.iter().map(|s| s.errors).sum(),
        }
    }
}

/// What the caller measured around the run.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub engine: EngineKind,
    pub target: TargetSummary,
    /// The target's endpoints, in its order.
    pub endpoint_urls: Vec<String>,
    /// Listing, footers, planning, server start: before the ranks started.
    pub setup_s: f64,
    /// The client's CPU before the clock started: listing, footers, the buffer pool.
    pub setup_cpu_s: f64,
    /// The client's CPU from every rank being ready to the end.
    pub client_cpu_s: f64,
    pub peak_rss_bytes: Option<u64>,
    /// Whether the peak RSS was reset after set-up (else it is the whole process's peak).
    pub peak_rss_since_setup: bool,
    /// Notes from choosing the engine and the cores, and from checking memory.
    pub notes: Vec<String>,
    /// Why the run failed, when it did; the figures are then up to the failure.
    pub failure: Option<String>,
    /// The failure was an interrupt (Ctrl-C or SIGTERM).
    pub interrupted: bool,
    /// With the dlio loader: the requests and bytes of every rank reading every footer.
    pub loader_footers: Option<(u64, u64)>,
    /// Listing pages the set-up sent (the dataset's listing, the bucket check).
    pub lists: u64,
    /// The workload parameters the run overrode (`crate::results::overrides`).
    pub overrides: Vec<(String, String)>,
    /// Under mpirun: each process's figures (empty for one process).
    pub hosts: Vec<HostSummary>,
    /// The checkpoints written between the steps (`workflow.checkpoint`), when any.
    pub checkpoints: Option<train_checkpoint::TrainCheckpointSummary>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every rank ran every step.
    Completed,
    /// A rank failed; the figures are up to the failure.
    Failed,
    /// Ctrl-C or SIGTERM stopped the run; the figures are up to then.
    Interrupted,
}

/// The result of `ringload run`.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub outcome: Outcome,
    /// Why the run failed (the one line exit 3 prints), when it did.
    pub failure: Option<String>,
    pub engine: EngineKind,
    /// Whose loader the run reproduced: `ringload` or `dlio`.
    pub loader: crate::plan::Loader,
    pub workload: String,
    pub np: u32,
    pub read_threads: u32,
    pub prefetch: u32,
    pub coalesce_rgs: u32,
    /// The dataset's format: `parquet` (ranged GETs of row groups, coalesced) or `npz`, `jpeg`,
    /// `tfrecord` (one whole-object GET per object; `coalesce_rgs` does not apply).
    pub format: String,
    pub computation_time_s: f64,
    /// The workload file's own computation_time.
    pub workload_computation_time_s: f64,
    pub epochs: u32,
    pub sharding: crate::plan::Sharding,
    pub batch_size: u64,
    pub record_bytes: u64,
    pub steps_per_rank: u64,
    /// With fewer than 50 steps per rank (the AU is not stable): the files that would give 50
    /// (`metrics::files_for_stable_au`).
    pub files_for_stable_au: Option<u64>,
    /// Mean over ranks; `None` when a rank has fewer than two steps.
    pub au_percent: Option<f64>,
    pub au_percent_per_rank: Vec<Option<f64>>,
    pub au_target_percent: f64,
    pub au_target_met: bool,
    /// Sum over ranks.
    pub samples_per_s: Option<f64>,
    pub samples_per_s_per_rank: Vec<Option<f64>>,
    /// DLIO's nominal "MB/s": samples/s × record_length, in MiB/s.
    pub io_mib_per_s: Option<f64>,
    /// DLIO's own `metric` object, its names and per-epoch lists (`dlio::DlioTrainMetric`):
    /// the same AU, samples/s and nominal MiB/s as above, averaged per epoch first. Absent when
    /// AU is not defined or the ranks ran different numbers of epochs (a failed run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<dlio::DlioTrainMetric>,
    /// Row-group bytes received by the ranks' last steps (`bytes_read_by_last_step`) over
    /// `wall_s`: the GETs past the last step that a rank takes in after its own last step (the
    /// dlio loader's overshoot) are not in it, those it took in before are.
    pub measured_mib_per_s: f64,
    /// Row-group bytes received (footers apart), the overshoot's included.
    pub bytes_read: u64,
    /// Of `bytes_read`, what each rank's thread had taken in (completions it had handled) by
    /// the end of its own last step, summed over ranks.
    pub bytes_read_by_last_step: u64,
    /// Row-group bytes the plan asks for (equal to `bytes_read` in a complete run).
    pub bytes_planned: u64,
    /// Footer bytes fetched once, before the run.
    pub footer_bytes: u64,
    /// With the dlio loader: requests and bytes of every rank reading every file's footer
    /// itself (a HEAD and a 4 MiB tail each), before the clock.
    pub dlio_footer_requests: Option<u64>,
    pub dlio_footer_bytes: Option<u64>,
    /// GETs per epoch read past the ranks' last steps, that no step used (the dlio loader's
    /// read-ahead); their bytes are in `bytes_read` and `bytes_planned` (the storage was asked
    /// for them), not in AU, samples/s or the clock: those still in flight at the last step
    /// land during `drain_s`.
    pub overshoot_gets: usize,
    /// Their bytes per epoch, all ranks.
    pub overshoot_bytes: u64,
    /// With the dlio loader: finished GETs queued per reader beyond `prefetch` (DLIO's
    /// `⌈reader.prefetch_size ÷ read_threads⌉`, or `--prefetch-factor`).
    pub prefetch_factor: Option<u32>,
    /// The workload parameters the run set apart from its workload file (overrides and flags),
    /// key and value as `--results-dir`'s overrides.yaml records them: what mlpstorage judges
    /// CLOSED, OPEN or INVALID.
    pub overrides: Vec<(String, String)>,
    /// GETs completed: objects (whole-object workloads) or row-group ranges (Parquet).
    pub requests: u64,
    /// The requests they sent, by kind, as the store sees them (the dlio loader's footer
    /// reads before the clock are `dlio_footer_requests`).
    pub requests_by_kind: crate::metrics::RequestKinds,
    pub retries: u64,
    pub errors: u64,
    /// Retries by the cause of the failed attempt: `503`, `500`, `429`, `timeout`,
    /// `connection`, … (they add up to `retries`).
    pub retries_by_cause: BTreeMap<String, u64>,
    /// GETs that failed past their retries, by the cause of the last attempt.
    pub errors_by_cause: BTreeMap<String, u64>,
    /// Kept-alive connections dropped because bytes followed a body (more than its
    /// Content-Length); a note names the GET the first followed.
    pub stray_connections: u64,
    /// From every rank being ready (I/O set up) to the end of the last rank's last step: the
    /// clock, as DLIO's, which does not wait for GETs past the last step.
    pub wall_s: f64,
    /// The longest a rank waited, after an epoch's last step, for its GETs still in flight to
    /// land (the dlio loader's overshoot; every epoch's, summed): outside every epoch's window
    /// (AU, samples/s); the last epoch's is after `wall_s`, an earlier one's inside it.
    pub drain_s: f64,
    /// Listing, footers, planning, server start, the ranks' I/O set-up: before the clock.
    pub setup_s: f64,
    /// The client's CPU during set-up (the buffer pool's pre-faulting among it).
    pub setup_cpu_s: f64,
    /// Per step over all ranks, each epoch's first step left out.
    pub io_wait_per_step_ms: Distribution,
    /// Waiting at the step barrier for slower ranks.
    pub barrier_wait_per_step_ms: Distribution,
    /// The study's `ct × (100/AU − 1)`.
    pub implied_io_wait_per_step_ms: Option<f64>,
    pub request_latency_ms: RequestLatency,
    /// Whole-process CPU over the run (from every rank ready to the end), less the in-process
    /// server's threads.
    pub client_cpu_s: f64,
    /// `client_cpu_s` per GiB of row groups received.
    pub cpu_s_per_gib: Option<f64>,
    pub server_cpu_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_rss_since_setup: bool,
    pub memory_budget_bytes: u64,
    /// AU at other computation times, from the implied wait, keyed by seconds.
    pub projected_au_percent: BTreeMap<String, f64>,
    /// What `--verify` checked (absent without it).
    pub verify: Option<VerifySummary>,
    pub target: TargetSummary,
    /// DLIO's: client hosts (distinct host names of the processes; 1 without mpirun) and
    /// simulated accelerators (NP).
    pub num_hosts: usize,
    pub num_accelerators: usize,
    /// Under mpirun: each process's figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostSummary>,
    /// Each endpoint's GETs, in the target's order.
    pub endpoints: Vec<EndpointSummary>,
    pub per_rank: Vec<RankSummary>,
    /// The checkpoints written between the steps (`workflow.checkpoint: True`): per save its
    /// epoch, step, keys, bytes and rank 0's duration and GiB/s, and DLIO's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<train_checkpoint::TrainCheckpointSummary>,
    pub notes: Vec<String>,
    /// What limited the run ([`limit::run_limit`]): the report's last line.
    pub limit: limit::RunLimit,
    /// One sample per `interval_s` from the clock's start to the ranks' end (timeseries.csv;
    /// under mpirun every host's, summed on process 0's clock).
    pub timeseries: crate::timeseries::Series,
}

/// What `run --verify` checked, over all ranks.
#[derive(Debug, Clone, Serialize)]
pub struct VerifySummary {
    /// `xxh3` (the footer's chunk hashes), `page headers` (files without them), both,
    /// `generated bytes` (whole objects compared with what `ringload generate` writes), or
    /// `none` (nothing arrived).
    pub check: &'static str,
    /// GETs whose bytes were checked, all of them unless the run failed.
    pub gets: u64,
    /// Bytes whose XXH3-64 matched the footer's.
    pub hashed_bytes: u64,
    /// Bytes of chunks whose page headers parsed and whose pages filled the chunk exactly.
    pub page_checked_bytes: u64,
    pub pages: u64,
    /// Bytes of GETs that lie in no column chunk (e.g. a bloom filter between chunks).
    pub unchecked_bytes: u64,
    /// Whole objects (npz, jpeg, tfrecord) compared byte for byte with what `ringload
    /// generate` writes for each: all the GETs of a whole-object run, unless it failed.
    pub objects: u64,
    /// Their bytes.
    pub object_bytes: u64,
    /// The rank threads' CPU time spent checking (part of `client_cpu_s`).
    pub cpu_s: f64,
    /// `cpu_s` per GiB checked.
    pub cpu_s_per_gib: Option<f64>,
}

impl VerifySummary {
    fn of(stats: &metrics::VerifyStats) -> VerifySummary {
        let v = &stats.verified;
        let cpu_s = stats.cpu.as_secs_f64();
        VerifySummary {
            check: v.method(),
            gets: stats.gets,
            hashed_bytes: v.hashed_bytes,
            page_checked_bytes: v.paged_bytes,
            pages: v.pages,
            unchecked_bytes: v.unchecked_bytes,
            objects: v.objects,
            object_bytes: v.object_bytes,
            cpu_s,
            cpu_s_per_gib: metrics::cpu_s_per_gib(cpu_s, v.checked_bytes()),
        }
    }
}

/// The computation times AU is projected to: 0.5 s and the workload's own.
fn projection_times(plan: &Plan) -> Vec<f64> {
    let mut times = vec![0.5, plan.settings.workload_computation_time_s];
    times.retain(|t| *t > 0.0);
    times.sort_by(f64::total_cmp);
    times.dedup();
    times
}

/// A computation time as a JSON key: `0.5`, `1.35`, `2.025`.
pub fn seconds_key(s: f64) -> String {
    let text = format!("{s:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Per-step values over all epochs but their first step.
fn steady_steps(record: &RankRecord) -> impl Iterator<Item = &metrics::StepTimes> {
    record.steps.iter().flat_map(|epoch| epoch.iter().skip(1))
}

impl RunSummary {
    pub fn build(plan: &Plan, measured: &RunMeasurements, context: RunContext) -> RunSummary {
        let settings = &plan.settings;
        let (per_rank, rank_epochs) = rank_summaries(plan, measured);
        let au_per_rank: Vec<Option<f64>> = per_rank.iter().map(|r| r.au_percent).collect();
        let sps_per_rank: Vec<Option<f64>> = per_rank.iter().map(|r| r.samples_per_s).collect();
        let au_percent = au_per_rank
            .iter()
            .copied()
            .collect::<Option<Vec<f64>>>()
            .and_then(|v| mean(&v));
        let samples_per_s = sps_per_rank
            .iter()
            .copied()
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.iter().sum());
        let mut all = RequestStats::default();
        for stats in &measured.stats {
            all.merge_counts(stats);
        }
        let (mut waits, mut barriers) = steady_waits_ns(measured);
        let ct = settings.computation_time_s;
        let implied = au_percent.and_then(|au| metrics::implied_io_wait_s(ct, au));
        let projected_au_percent = implied
            .map(|t_io| {
                projection_times(plan)
                    .into_iter()
                    .map(|t| (seconds_key(t), metrics::projected_au_percent(t, t_io)))
                    .collect()
            })
            .unwrap_or_default();
        let footer_bytes = plan.catalog.footer_fetch_bytes();
        let bytes_read_by_last_step = measured
            .records
            .iter()
            .map(|r| r.bytes_by_last_step)
            .sum::<u64>();
        let notes = run_notes(plan, &context, au_percent, &all);
        let au_target_percent = settings.au_target_percent;
        let outcome = match (&context.failure, context.interrupted) {
            (None, _) => Outcome::Completed,
            (Some(_), true) => Outcome::Interrupted,
            (Some(_), false) => Outcome::Failed,
        };
        let metric = train_metric(rank_epochs, settings, outcome);
        let limit = limit::run_limit(&limit::LimitFacts {
            wall_s: measured.wall_s,
            // Under mpirun the client's CPU is every host's: against every host's cores.
            cores: crate::affinity::cores() * context.hosts.len().max(1),
            ranks: measured.stats.len(),
            client_cpu_s: context.client_cpu_s,
            server_cpu_s: context.target.server.as_ref().map(|s| s.cpu_s),
            peak_rss_bytes: context.peak_rss_bytes,
            budget_bytes: plan.memory.total_bytes,
            au_percent,
            au_target_percent: settings.au_target_percent,
        });
        RunSummary {
            outcome,
            failure: context.failure,
            engine: context.engine,
            loader: plan.options.loader,
            workload: settings.workload.name.clone(),
            format: settings
                .objects
                .as_ref()
                .map_or("parquet", |o| o.format.extension())
                .to_string(),
            np: plan.options.np,
            read_threads: settings.read_threads,
            prefetch: settings.prefetch,
            coalesce_rgs: settings.coalesce_rgs,
            computation_time_s: ct,
            workload_computation_time_s: settings.workload_computation_time_s,
            epochs: settings.epochs,
            sharding: plan.options.sharding,
            batch_size: settings.batch_size,
            record_bytes: settings.record_bytes,
            steps_per_rank: plan.steps_per_rank,
            files_for_stable_au: metrics::files_for_stable_au(
                plan.steps_per_rank,
                settings.samples_per_file,
                settings.batch_size,
                plan.ranks.len() as u64,
            ),
            au_percent,
            au_percent_per_rank: au_per_rank,
            au_target_percent,
            au_target_met: outcome == Outcome::Completed
                && au_percent.is_some_and(|au| au >= au_target_percent),
            samples_per_s,
            samples_per_s_per_rank: sps_per_rank,
            io_mib_per_s: samples_per_s
                .map(|s| metrics::nominal_mib_per_s(s, settings.record_bytes)),
            metric,
            measured_mib_per_s: bytes_read_by_last_step as f64
                / crate::units::MIB
                / measured.wall_s.max(1e-9),
            bytes_read: all.bytes_read,
            bytes_read_by_last_step,
            bytes_planned: plan.bytes_planned(),
            footer_bytes,
            dlio_footer_requests: context.loader_footers.map(|(r, _)| r),
            dlio_footer_bytes: context.loader_footers.map(|(_, b)| b),
            overshoot_gets: plan.ranks.iter().map(|r| r.overshoot_gets).sum(),
            overshoot_bytes: plan.ranks.iter().map(|r| r.overshoot_bytes).sum(),
            prefetch_factor: plan.prefetch_factor,
            overrides: context.overrides.clone(),
            requests: all.requests,
            requests_by_kind: crate::metrics::RequestKinds {
                list: context.lists,
                ..all.by_kind
            },
            retries: all.retries,
            errors: all.errors,
            retries_by_cause: by_cause(&all.retries_by_cause),
            errors_by_cause: by_cause(&all.errors_by_cause),
            stray_connections: all.stray_connections,
            wall_s: measured.wall_s,
            drain_s: drain_s(measured),
            setup_s: context.setup_s,
            setup_cpu_s: context.setup_cpu_s,
            io_wait_per_step_ms: Distribution::of_ns(&mut waits),
            barrier_wait_per_step_ms: Distribution::of_ns(&mut barriers),
            implied_io_wait_per_step_ms: implied.map(|s| s * 1e3),
            request_latency_ms: RequestLatency {
                first_byte: all.first_byte.summary(),
                total: all.total.summary(),
            },
            client_cpu_s: context.client_cpu_s,
            cpu_s_per_gib: metrics::cpu_s_per_gib(context.client_cpu_s, all.bytes_read),
            server_cpu_s: context.target.server.as_ref().map(|s| s.cpu_s),
            peak_rss_bytes: context.peak_rss_bytes,
            peak_rss_since_setup: context.peak_rss_since_setup,
            memory_budget_bytes: plan.memory.total_bytes,
            projected_au_percent,
            verify: (plan.catalog.files.iter().any(|f| f.chunks.is_some())
                || plan.verify_objects.is_some())
            .then(|| VerifySummary::of(&all.verify)),
            endpoints: endpoint_summaries(&context.endpoint_urls, &all),
            target: context.target,
            num_hosts: num_hosts(&context.hosts),
            num_accelerators: plan.ranks.len(),
            hosts: context.hosts,
            per_rank,
            checkpoints: context.checkpoints,
            notes,
            limit,
            timeseries: measured.timeseries.clone().without_histograms(),
        }
    }
}

/// Each rank's summary, and each rank's epochs for DLIO's metric (`None` once a rank has an
/// epoch without figures).
fn rank_summaries(
    plan: &Plan,
    measured: &RunMeasurements,
) -> (Vec<RankSummary>, Option<Vec<Vec<metrics::EpochMetrics>>>) {
    let settings = &plan.settings;
    let mut per_rank = Vec::with_capacity(measured.records.len());
    // Each rank's epochs, for DLIO's metric; `None` once a rank has an epoch without figures.
    let mut rank_epochs: Option<Vec<Vec<metrics::EpochMetrics>>> = Some(Vec::new());
    for (rank, (record, stats)) in measured.records.iter().zip(&measured.stats).enumerate() {
        let epochs: Vec<metrics::EpochMetrics> = (0..record.steps.len())
            .filter_map(|e| record.epoch_metrics(e, settings.batch_size))
            .collect();
        let complete = epochs.len() == record.steps.len();
        let au: Vec<f64> = epochs.iter().map(|e| e.au_percent).collect();
        let sps: Vec<f64> = epochs.iter().map(|e| e.samples_per_s).collect();
        let mut waits: Vec<u64> = steady_steps(record).map(|s| s.wait_ns).collect();
        rank_epochs = rank_epochs.filter(|_| complete).map(|mut all| {
            all.push(epochs);
            all
        });
        per_rank.push(RankSummary {
            rank,
            au_percent: mean(&au).filter(|_| complete),
            samples_per_s: mean(&sps).filter(|_| complete),
            steps: record.steps.iter().map(|e| e.len() as u64).sum(),
            bytes_read: stats.bytes_read,
            requests: stats.requests,
            retries: stats.retries,
            io_wait_per_step_ms: Distribution::of_ns(&mut waits),
            request_latency_ms: RequestLatency {
                first_byte: stats.first_byte.summary(),
                total: stats.total.summary(),
            },
        });
    }
    (per_rank, rank_epochs)
}

/// The I/O wait and the barrier wait of every rank's steady steps, in ns.
fn steady_waits_ns(measured: &RunMeasurements) -> (Vec<u64>, Vec<u64>) {
    let waits: Vec<u64> = measured
        .records
        .iter()
        .flat_map(steady_steps)
        .map(|s| s.wait_ns)
        .collect();
    let barriers: Vec<u64> = measured
        .records
        .iter()
        .flat_map(steady_steps)
        .map(|s| s.barrier_ns)
        .collect();
    (waits, barriers)
}

/// The run's notes: the plan's and the session's, then an undefined AU, a whole-process peak
/// RSS, stray bytes on kept-alive connections, a run that did not finish.
fn run_notes(
    plan: &Plan,
    context: &RunContext,
    au_percent: Option<f64>,
    all: &RequestStats,
) -> Vec<String> {
    let mut notes = plan.notes.clone();
    notes.extend(context.notes.iter().cloned());
    if au_percent.is_none() {
        notes.push(
            "AU is not defined: a rank has fewer than two steps per epoch (the first step \
             is not measured); add files or lower --np"
                .into(),
        );
    }
    if !context.peak_rss_since_setup {
        notes.push(
            "peak_rss_bytes is the whole process's peak (the kernel refused to reset it \
             after set-up)"
                .into(),
        );
    }
    if all.stray_connections > 0 {
        notes.push(format!(
            "{} kept-alive connection{} carried bytes after a body (the server sent more than \
             its Content-Length) and {} dropped; the first followed {}",
            all.stray_connections,
            if all.stray_connections == 1 { "" } else { "s" },
            if all.stray_connections == 1 {
                "was"
            } else {
                "were"
            },
            all.stray_after.as_deref().unwrap_or("an unknown GET")
        ));
    }
    if let Some(failure) = &context.failure {
        notes.push(format!(
            "the run did not finish ({failure}); every figure is up to then"
        ));
    }
    notes
}

/// DLIO's training metric from every rank's epochs; a run that did not finish fails it.
fn train_metric(
    rank_epochs: Option<Vec<Vec<metrics::EpochMetrics>>>,
    settings: &crate::settings::Settings,
    outcome: Outcome,
) -> Option<dlio::DlioTrainMetric> {
    // DLIO writes no summary for a run that did not finish: none meets the expectation.
    rank_epochs
        .and_then(|r| {
            dlio::DlioTrainMetric::of_ranks(&r, settings.record_bytes, settings.au_target_percent)
        })
        .map(|mut m| {
            if outcome != Outcome::Completed {
                m.train_au_meet_expectation = dlio::Expectation::Fail;
            }
            m
        })
}

/// Retries or errors by cause, the cause as text.
fn by_cause(counts: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
    counts.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// The longest drain of any rank, in seconds.
fn drain_s(measured: &RunMeasurements) -> f64 {
    measured
        .records
        .iter()
        .map(|r| r.drain_ns.iter().sum::<u64>())
        .max()
        .unwrap_or(0) as f64
        / 1e9
}

/// Each endpoint's requests, bytes, retries, errors and latency.
fn endpoint_summaries(urls: &[String], all: &RequestStats) -> Vec<EndpointSummary> {
    urls.iter()
        .enumerate()
        .map(|(i, url)| {
            let e = all.by_endpoint.get(i).cloned().unwrap_or_default();
            EndpointSummary {
                url: url.clone(),
                requests: e.requests,
                bytes_read: e.bytes_read,
                retries: e.retries,
                errors: e.errors,
                latency_ms: e.total.summary(),
            }
        })
        .collect()
}

/// The hosts of the run, counted by name (1 without any).
fn num_hosts(hosts: &[HostSummary]) -> usize {
    let mut names: Vec<&str> = hosts.iter().map(|h| h.host.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.len().max(1)
}
