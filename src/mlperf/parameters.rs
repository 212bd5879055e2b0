//! Which workload parameters a training run may change, as MLPerf's own report generator judges
//! them: mlpstorage v3.0 (russfellows/mlc-storage at 64165f7, `mlpstorage_py/rules/
//! run_checkers/training.py`) reads each `++workload.KEY=VALUE` of a run's
//! `dlio_config/overrides.yaml` and judges it CLOSED when KEY is one CLOSED allows (lines
//! 19-31), OPEN when OPEN allows it (34-39), INVALID otherwise (`check_allowed_params`,
//! 105-143; keys under `workflow` are skipped, 114). So overriding the batch, the computation
//! time, the epochs, the record length or any storage option makes the run INVALID there,
//! whatever its AU.

use super::{Rule, Verdict};

/// What CLOSED lets a run change (`CLOSED_ALLOWED_PARAMS`).
pub const CLOSED_ALLOWED: [&str; 11] = [
    "dataset.num_files_train",
    "dataset.num_subfolders_train",
    "dataset.data_folder",
    "reader.read_threads",
    "reader.computation_threads",
    "reader.transfer_size",
    "reader.odirect",
    "reader.prefetch_size",
    "checkpoint.checkpoint_folder",
    "storage.storage_type",
    "storage.storage_root",
];

/// What OPEN lets a run change besides (`OPEN_ALLOWED_PARAMS`).
pub const OPEN_ALLOWED: [&str; 4] = [
    "framework",
    "dataset.format",
    "dataset.num_samples_per_file",
    "reader.data_loader",
];

/// A run's division by its overrides: the worst of its keys'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Division {
    Closed,
    Open,
    Invalid,
}

impl Division {
    /// As mlpstorage's submission checker writes it in `verification`.
    pub fn word(self) -> &'static str {
        match self {
            Division::Closed => "closed",
            Division::Open => "open",
            Division::Invalid => "invalid",
        }
    }

    /// The division one override key puts a run in.
    pub fn of_key(key: &str) -> Division {
        if key.starts_with("workflow") || CLOSED_ALLOWED.contains(&key) {
            Division::Closed
        } else if OPEN_ALLOWED.contains(&key) {
            Division::Open
        } else {
            Division::Invalid
        }
    }

    /// The division of a run whose overrides are `keys`.
    pub fn of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Division {
        keys.into_iter()
            .map(Division::of_key)
            .max()
            .unwrap_or(Division::Closed)
    }
}

/// The rule line: PASS when every override is one CLOSED allows, else FAIL naming each key that
/// is not and the division mlpstorage gives the run.
pub fn rule(overrides: &[(String, String)]) -> Rule {
    let name = "parameters (CLOSED)";
    let division = Division::of(overrides.iter().map(|(k, _)| k.as_str()));
    let list = |d: Division| -> Vec<String> {
        overrides
            .iter()
            .filter(|(k, _)| Division::of_key(k) == d)
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    };
    match division {
        Division::Closed if overrides.is_empty() => Rule::new(
            name,
            Verdict::Pass,
            "no workload parameter overridden: mlpstorage judges the parameters CLOSED",
        ),
        Division::Closed => Rule::new(
            name,
            Verdict::Pass,
            format!(
                "{} overridden, each one CLOSED allows: mlpstorage judges the parameters CLOSED",
                list(Division::Closed).join(", ")
            ),
        ),
        Division::Open => Rule::new(
            name,
            Verdict::Fail,
            format!(
                "{} overridden, allowed in OPEN only: mlpstorage judges the run OPEN; run \
                 without {} for CLOSED",
                list(Division::Open).join(", "),
                if list(Division::Open).len() == 1 {
                    "it"
                } else {
                    "them"
                }
            ),
        ),
        Division::Invalid => Rule::new(
            name,
            Verdict::Fail,
            format!(
                "{} overridden: MLPerf fixes {} in CLOSED and OPEN, so mlpstorage judges the \
                 run INVALID; run with the workload's own value (CLOSED may change only {})",
                list(Division::Invalid).join(", "),
                if list(Division::Invalid).len() == 1 {
                    "it"
                } else {
                    "them"
                },
                CLOSED_ALLOWED.join(", ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The keys the issue names (prefetch_workers, coalesce_rgs, computation_time) are INVALID,
    /// as in mlpstorage; the dataset's size and the reader's threads are CLOSED; the format is
    /// OPEN; workflow keys are not judged.
    #[test]
    fn overrides_are_judged_as_mlpstorage_judges_them() {
        assert_eq!(Division::of([]), Division::Closed);
        let closed = kv(&[
            ("dataset.num_files_train", "14000"),
            ("reader.read_threads", "8"),
            ("workflow.checkpoint", "False"),
        ]);
        let line = rule(&closed);
        assert_eq!(line.verdict, Verdict::Pass, "{line}");
        assert_eq!(
            Division::of(closed.iter().map(|(k, _)| k.as_str())),
            Division::Closed
        );
        let open = kv(&[
            ("dataset.num_files_train", "14000"),
            ("dataset.format", "npz"),
        ]);
        let line = rule(&open);
        assert_eq!(line.verdict, Verdict::Fail);
        assert!(line.detail.contains("dataset.format=npz"), "{line}");
        assert!(line.detail.contains("OPEN"), "{line}");
        for key in [
            "storage.storage_options.prefetch_workers",
            "storage.storage_options.coalesce_rgs",
            "train.computation_time",
            "reader.batch_size",
        ] {
            let line = rule(&kv(&[("dataset.format", "npz"), (key, "2")]));
            assert_eq!(line.verdict, Verdict::Fail, "{key}");
            assert!(
                line.detail.contains(&format!("{key}=2")) && line.detail.contains("INVALID"),
                "{line}"
            );
            assert!(!line.detail.contains("dataset.format"), "{line}");
        }
    }
}
