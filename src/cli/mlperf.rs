//! The flags of MLPerf Storage's side of ringload: `datasize`, and where a run writes its leaf
//! of MLPerf's results tree (`--results-dir`, `--system`, flattened into `run` and `sweep`).

use std::path::PathBuf;

use clap::Args;

use super::values::parse_memory;
use super::workload::WorkloadArgs;

#[derive(Debug, Args)]
pub struct DatasizeArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Memory of one client host (e.g. 512GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub client_memory: u64,

    /// Client hosts
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub hosts: u32,

    /// Accelerators (DLIO processes) of all hosts together
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub np: u64,

    /// The folder the dataset will be written to (`generate --output DIR`): its free space is
    /// checked
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ResultsArgs {
    /// Also write the run, at its end, where MLPerf Storage's tools look for it:
    /// DIR/<system>/training/<model>/run/<YYYYMMDD_HHmmss>/ (checkpoints:
    /// DIR/<system>/checkpointing/<model>/<ts>/), with DLIO's files (summary.json,
    /// <rank>_output.json, dlio_config/, a *_metadata.json, logs, provenance.json)
    #[arg(long, value_name = "DIR", help_heading = "MLPerf results")]
    pub results_dir: Option<PathBuf>,

    /// The system's name in --results-dir's tree [default: this host's name]
    #[arg(long, value_name = "NAME", requires = "results_dir", value_parser = parse_folder_name, help_heading = "MLPerf results")]
    pub system: Option<String>,
}

impl ResultsArgs {
    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(dir) = &self.results_dir {
            args.extend(["--results-dir".to_string(), dir.display().to_string()]);
        }
        if let Some(name) = &self.system {
            args.extend(["--system".to_string(), name.clone()]);
        }
        args
    }
}

/// A name that is one folder: not empty, no `/`, not `.` or `..`.
fn parse_folder_name(text: &str) -> Result<String, String> {
    if text.is_empty() || text == "." || text == ".." || text.contains(['/', '\\', '\0']) {
        return Err(format!(
            "'{text}' is not a folder name; pass a name without '/'"
        ));
    }
    Ok(text.to_string())
}
