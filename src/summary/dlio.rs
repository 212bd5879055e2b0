//! DLIO's `metric` object of a training run's summary.json, under DLIO's names and computed as
//! DLIO's `StatsCounter.end_run` computes it, so that tooling which reads DLIO's summaries
//! (mlpstorage's reportgen, `ringload compare`) reads ringload's the same way.
//!
//! Per epoch: AU is the mean over ranks of each rank's AU, throughput the sum over ranks of each
//! rank's samples/s (each rank's figures are [`crate::metrics::epoch_metrics`]). Over epochs:
//! numpy's `mean` and `std` (the population standard deviation). The I/O figure is nominal:
//! samples/s × the **configured** record length ÷ 2²⁰ — MiB/s despite the name, and not the
//! bytes read (the summary's `bytes_read` and `measured_mib_per_s` are those).

use serde::Serialize;

use crate::metrics::{self, EpochMetrics, mean_stdev};

/// DLIO's `train_au_meet_expectation`: whether the mean AU reached `metric.au`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expectation {
    Success,
    Fail,
}

/// DLIO's `metric` object of a training summary, its fields in DLIO's order.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[allow(non_snake_case)]
pub struct DlioTrainMetric {
    /// Per epoch, the mean over ranks.
    pub train_au_percentage: Vec<f64>,
    pub train_au_mean_percentage: f64,
    pub train_au_meet_expectation: Expectation,
    pub train_au_stdev_percentage: f64,
    /// Per epoch, the sum over ranks.
    pub train_throughput_samples_per_second: Vec<f64>,
    pub train_throughput_mean_samples_per_second: f64,
    pub train_throughput_stdev_samples_per_second: f64,
    /// The mean throughput × record length, in MiB/s.
    pub train_io_mean_MB_per_second: f64,
    pub train_io_stdev_MB_per_second: f64,
}

impl DlioTrainMetric {
    /// The metric from each rank's epochs (`ranks[r][e]`), `record_bytes` the configured record
    /// length and `au_target_percent` DLIO's `metric.au` × 100. `None` unless every rank has
    /// the same number of epochs, at least one (a rank's epoch of fewer than two steps has no
    /// figures).
    pub fn of_ranks(
        ranks: &[Vec<EpochMetrics>],
        record_bytes: u64,
        au_target_percent: f64,
    ) -> Option<DlioTrainMetric> {
        let epochs = ranks.first()?.len();
        if ranks.iter().any(|r| r.len() != epochs) {
            return None;
        }
        let au: Vec<f64> = (0..epochs)
            .map(|e| ranks.iter().map(|r| r[e].au_percent).sum::<f64>() / ranks.len() as f64)
            .collect();
        let throughput: Vec<f64> = (0..epochs)
            .map(|e| ranks.iter().map(|r| r[e].samples_per_s).sum())
            .collect();
        DlioTrainMetric::of_epochs(au, throughput, record_bytes, au_target_percent)
    }

    /// The metric from the per-epoch AU (mean over ranks) and throughput (sum over ranks).
    /// `None` without epochs.
    pub fn of_epochs(
        au: Vec<f64>,
        throughput: Vec<f64>,
        record_bytes: u64,
        au_target_percent: f64,
    ) -> Option<DlioTrainMetric> {
        let (au_mean, au_stdev) = mean_stdev(&au)?;
        let (tp_mean, tp_stdev) = mean_stdev(&throughput)?;
        Some(DlioTrainMetric {
            train_au_percentage: au,
            train_au_mean_percentage: au_mean,
            train_au_meet_expectation: if au_mean >= au_target_percent {
                Expectation::Success
            } else {
                Expectation::Fail
            },
            train_au_stdev_percentage: au_stdev,
            train_throughput_samples_per_second: throughput,
            train_throughput_mean_samples_per_second: tp_mean,
            train_throughput_stdev_samples_per_second: tp_stdev,
            train_io_mean_MB_per_second: metrics::nominal_mib_per_s(tp_mean, record_bytes),
            train_io_stdev_MB_per_second: metrics::nominal_mib_per_s(tp_stdev, record_bytes),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn epoch(au_percent: f64, samples_per_s: f64) -> EpochMetrics {
        EpochMetrics {
            au_percent,
            samples_per_s,
            measured_s: 1.0,
        }
    }

    /// The reference's real example (R3 Alluxio unet3d, B3): 319.75 samples/s (rounded to two
    /// decimals) × record_length 146,600,628 B → train_io_mean_MB_per_second 44,703.8.
    #[test]
    fn io_figure_is_samples_per_second_times_the_configured_record_length_in_mib() {
        let record = 146_600_628;
        // 44,703.8 MiB/s is 319.7485 samples/s, which the example prints as 319.75.
        let m = DlioTrainMetric::of_epochs(vec![95.0], vec![319.7485], record, 90.0).unwrap();
        assert_eq!(format!("{:.1}", m.train_io_mean_MB_per_second), "44703.8");
        let samples = 44_703.8 * 1_048_576.0 / record as f64;
        assert_eq!(format!("{samples:.2}"), "319.75");
        // MiB, not MB (10⁶ B), which would give 46,875.6.
        let m = DlioTrainMetric::of_epochs(vec![95.0], vec![319.75], record, 90.0).unwrap();
        assert!((m.train_io_mean_MB_per_second - 44_704.0).abs() < 0.1);
        assert_eq!(m.train_io_stdev_MB_per_second, 0.0);
    }

    #[test]
    fn ranks_are_averaged_for_au_and_summed_for_throughput_then_epochs_averaged() {
        let ranks = vec![
            vec![epoch(80.0, 10.0), epoch(90.0, 20.0)],
            vec![epoch(100.0, 30.0), epoch(70.0, 40.0)],
        ];
        let m = DlioTrainMetric::of_ranks(&ranks, 1 << 20, 85.0).unwrap();
        assert_eq!(m.train_au_percentage, vec![90.0, 80.0]);
        assert_eq!(m.train_au_mean_percentage, 85.0);
        // numpy's std: the population standard deviation.
        assert_eq!(m.train_au_stdev_percentage, 5.0);
        assert_eq!(m.train_au_meet_expectation, Expectation::Success);
        assert_eq!(m.train_throughput_samples_per_second, vec![40.0, 60.0]);
        assert_eq!(m.train_throughput_mean_samples_per_second, 50.0);
        assert_eq!(m.train_throughput_stdev_samples_per_second, 10.0);
        assert_eq!(m.train_io_mean_MB_per_second, 50.0);
        assert_eq!(m.train_io_stdev_MB_per_second, 10.0);
        let missed = DlioTrainMetric::of_ranks(&ranks, 1 << 20, 85.000_001).unwrap();
        assert_eq!(missed.train_au_meet_expectation, Expectation::Fail);
        // Ranks with different epoch counts (a failed run), or none: no metric.
        assert!(DlioTrainMetric::of_ranks(&[vec![epoch(1.0, 1.0)], vec![]], 1, 0.0).is_none());
        assert!(DlioTrainMetric::of_ranks(&[vec![], vec![]], 1, 0.0).is_none());
        assert!(DlioTrainMetric::of_ranks(&[], 1, 0.0).is_none());
    }

    fn fixture_text(path: &str) -> String {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio-output");
        std::fs::read_to_string(dir.join(path)).unwrap()
    }

    fn fixture(path: &str) -> Value {
        serde_json::from_str(&fixture_text(path)).unwrap()
    }

    /// Real DLIO output (tests/fixtures/dlio-output/np2rt2): each rank's AU and throughput of
    /// the epoch (`N_output.json`), record_length 2,164,832 and metric.au 0.9 (its config)
    /// give its summary.json's `metric`, field for field, in DLIO's order.
    #[test]
    fn reproduces_a_real_dlio_summary_from_its_ranks_figures() {
        let ranks: Vec<Vec<EpochMetrics>> = (0..2)
            .map(|r| {
                let out = fixture(&format!("np2rt2/{r}_output.json"));
                let e = &out["1"];
                vec![epoch(
                    e["au"]["block1"].as_f64().unwrap(),
                    e["throughput"]["block1"].as_f64().unwrap(),
                )]
            })
            .collect();
        let ours = DlioTrainMetric::of_ranks(&ranks, 2_164_832, 0.9 * 100.0).unwrap();
        let text = serde_json::to_string(&ours).unwrap();
        let ours = serde_json::to_value(&ours).unwrap();
        let theirs = &fixture("np2rt2/summary.json")["metric"];
        let names = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&ours), names(theirs));
        // The order as written: the fields' places in each text.
        let raw = fixture_text("np2rt2/summary.json");
        let in_order = |text: &str| {
            let mut named = names(theirs);
            named.sort_by_key(|n| text.find(&format!("\"{n}\"")).unwrap());
            named
        };
        assert_eq!(in_order(&text), in_order(&raw));
        for (name, want) in theirs.as_object().unwrap() {
            let got = &ours[name];
            match (want.as_f64(), want.as_array()) {
                (Some(w), _) => {
                    let g = got.as_f64().unwrap();
                    assert!(
                        (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                        "{name}: {g} vs {w}"
                    );
                }
                (None, Some(w)) => {
                    let g = got.as_array().unwrap();
                    assert_eq!(g.len(), w.len(), "{name}");
                    for (g, w) in g.iter().zip(w) {
                        let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
                        assert!((g - w).abs() <= 1e-9 * w.abs(), "{name}: {g} vs {w}");
                    }
                }
                _ => assert_eq!(got, want, "{name}"),
            }
        }
    }
}
