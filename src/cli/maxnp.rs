//! The flags of `sweep --find-max-np` (the largest NP that holds AU, as MLPerf counts runs) and
//! the sweep's shared embedded server's bandwidth limit.

use clap::Args;

use super::values::{parse_memory, parse_rate};
use crate::mlperf::training_rules::RUNS;

/// `sweep --find-max-np` and its rules.
#[derive(Debug, Clone, Args)]
pub struct FindMaxNpArgs {
    /// Search for the largest NP whose every timed run meets the AU target: from the smallest
    /// --np, doubling while NP passes, then bisecting between the last pass and the first
    /// miss, up to the largest --np given (or 1024 when --np is one value)
    #[arg(long, help_heading = "Find max NP")]
    pub find_max_np: bool,

    /// The AU target of --find-max-np, in percent [default: the workload's metric.au]
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent, requires = "find_max_np", help_heading = "Find max NP")]
    pub au_target: Option<f64>,

    /// Runs per NP, back to back: the first is the warm-up (excluded), the others timed
    /// (MLPerf counts 6) [default: 6]
    #[arg(long, value_name = "N", value_parser = parse_runs, requires = "find_max_np", help_heading = "Find max NP")]
    pub runs: Option<u32>,

    /// Exit 1 when a rule line fails
    #[arg(long, requires = "find_max_np", help_heading = "Find max NP")]
    pub strict: bool,

    /// Memory per client host, for the dataset-size rule [default: this machine's MemTotal]
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, requires = "find_max_np", help_heading = "Find max NP")]
    pub client_memory: Option<u64>,

    /// Client hosts, for the dataset-size rule
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), requires = "find_max_np", help_heading = "Find max NP")]
    pub hosts: u32,

    /// Limit the shared embedded server (no endpoint given) to this many MiB/s, all
    /// connections together: a store of fixed bandwidth
    #[arg(long, value_name = "MIB_PER_S", value_parser = parse_rate, allow_negative_numbers = true)]
    pub server_bandwidth_mib_per_s: Option<f64>,
}

/// An AU target: a percentage above 0 and at most 100.
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!(
            "'{text}' is not an AU target; write a percentage above 0 and at most 100, e.g. 90"
        )),
    }
}

/// Runs per NP: at least 2 (one warm-up and one timed run).
fn parse_runs(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if (2..=100).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{text}' is not a number of runs; write 2 to 100 (one warm-up, then timed runs; \
             MLPerf counts {RUNS})"
        )),
    }
}
