//! A run's time series drawn (SVG, plotters): throughput read and written with the requests
//! in flight against time, and the p50/p99 latency of the requests completed in each interval
//! with the retries against time. A stall shows as throughput at zero with requests in flight,
//! a slow start as a ramp, a retry storm as retry bars under a latency spike. `run` writes them
//! into `timeseries.html`; a sweep's report can embed the same plots ([`plots`]).

use plotters::prelude::*;

use crate::timeseries::Series;

const SIZE: (u32, u32) = (860, 420);
const FONT: &str = "sans-serif";
const READ: RGBColor = RGBColor(31, 119, 180);
const WRITE: RGBColor = RGBColor(44, 160, 44);
const IN_FLIGHT: RGBColor = RGBColor(255, 127, 14);
const P50: RGBColor = RGBColor(148, 103, 189);
const P99: RGBColor = RGBColor(214, 39, 40);
const RETRIES: RGBColor = RGBColor(127, 127, 127);

/// A value of each sample (`None`: nothing to draw there).
type PerSample<'a> = &'a dyn Fn(usize) -> Option<f64>;

fn failed<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("drawing {what}: {e:?}")
}

/// The series' plots: (title, SVG), throughput and in flight first, then latency and retries.
pub fn plots(series: &Series) -> Result<Vec<(String, String)>, String> {
    Ok(vec![
        (
            "Throughput and requests in flight".to_string(),
            throughput(series, "Throughput and requests in flight")?,
        ),
        (
            "Request latency and retries".to_string(),
            latency(series, "Request latency and retries")?,
        ),
    ])
}

/// Each sample as (start, end, value) of its interval: the step drawn over it.
fn steps(series: &Series, value: PerSample<'_>) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut open = false;
    let mut start = 0.0;
    for (i, s) in series.samples.iter().enumerate() {
        match value(i) {
            Some(v) => {
                if !open {
                    runs.push(Vec::new());
                    open = true;
                }
                if let Some(run) = runs.last_mut() {
                    run.push((start, v));
                    run.push((s.t_s, v));
                }
            }
            None => open = false,
        }
        start = s.t_s;
    }
    runs
}

/// The length of each sample's own interval (the last may be shorter).
fn lengths(series: &Series) -> Vec<f64> {
    let mut start = 0.0;
    series
        .samples
        .iter()
        .map(|s| {
            let d = (s.t_s - start).max(1e-9);
            start = s.t_s;
            d
        })
        .collect()
}

fn x_end(series: &Series) -> f64 {
    series
        .samples
        .last()
        .map_or(1.0, |s| s.t_s)
        .max(series.interval_s)
        .max(1e-3)
}

fn throughput(series: &Series, title: &str) -> Result<String, String> {
    let len = lengths(series);
    let mib = |b: u64, i: usize| b as f64 / crate::units::MIB / len[i];
    let read = |i: usize| Some(mib(series.samples[i].bytes_read, i));
    let written = |i: usize| Some(mib(series.samples[i].bytes_written, i));
    let writes = series.samples.iter().any(|s| s.bytes_written > 0);
    let reads = series.samples.iter().any(|s| s.bytes_read > 0) || !writes;
    let top = (0..series.samples.len())
        .flat_map(|i| [read(i), written(i)])
        .flatten()
        .fold(0.0f64, f64::max);
    let in_flight_top = series
        .samples
        .iter()
        .map(|s| s.in_flight)
        .max()
        .unwrap_or(0);
    let x_end = x_end(series);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .right_y_label_area_size(60)
            .build_cartesian_2d(0.0f64..x_end, 0.0f64..(top * 1.15).max(1.0))
            .map_err(failed(title))?
            .set_secondary_coord(
                0.0f64..x_end,
                0.0f64..(in_flight_top as f64 * 1.15).max(1.0),
            );
        chart
            .configure_mesh()
            .x_desc("time since the clock started (s)")
            .y_desc("MiB/s")
            .draw()
            .map_err(failed(title))?;
        chart
            .configure_secondary_axes()
            .y_desc("requests in flight")
            .draw()
            .map_err(failed(title))?;
        let lines: [(&str, RGBColor, PerSample<'_>, bool); 2] = [
            ("read MiB/s", READ, &read, reads),
            ("written MiB/s", WRITE, &written, writes),
        ];
        for (label, color, value, shown) in lines {
            if !shown {
                continue;
            }
            for (k, run) in steps(series, value).into_iter().enumerate() {
                let drawn = chart
                    .draw_series(LineSeries::new(run, color.stroke_width(2)))
                    .map_err(failed(title))?;
                if k == 0 {
                    drawn
                        .label(label)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
                }
            }
        }
        let points: Vec<(f64, f64)> = series
            .samples
            .iter()
            .map(|s| (s.t_s, s.in_flight as f64))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(points.clone(), IN_FLIGHT.stroke_width(1)))
            .map_err(failed(title))?
            .label("in flight (right axis)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], IN_FLIGHT));
        chart
            .draw_secondary_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 2, IN_FLIGHT.filled())),
            )
            .map_err(failed(title))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(failed(title))?;
        root.present().map_err(failed(title))?;
    }
    Ok(svg)
}

fn latency(series: &Series, title: &str) -> Result<String, String> {
    let p50 = |i: usize| series.samples[i].latency_p50_ms;
    let p99 = |i: usize| series.samples[i].latency_p99_ms;
    let top = series
        .samples
        .iter()
        .filter_map(|s| s.latency_p99_ms)
        .fold(0.0f64, f64::max);
    let retries_top = series.samples.iter().map(|s| s.retries).max().unwrap_or(0);
    let x_end = x_end(series);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .right_y_label_area_size(60)
            .build_cartesian_2d(0.0f64..x_end, 0.0f64..(top * 1.15).max(1e-3))
            .map_err(failed(title))?
            .set_secondary_coord(0.0f64..x_end, 0.0f64..(retries_top as f64 * 1.15).max(1.0));
        chart
            .configure_mesh()
            .x_desc("time since the clock started (s)")
            .y_desc("latency of the requests completed (ms)")
            .draw()
            .map_err(failed(title))?;
        chart
            .configure_secondary_axes()
            .y_desc("retries per interval")
            .draw()
            .map_err(failed(title))?;
        let mut start = 0.0;
        let bars: Vec<Rectangle<(f64, f64)>> = series
            .samples
            .iter()
            .filter_map(|s| {
                let bar = (s.retries > 0).then(|| {
                    Rectangle::new(
                        [(start, 0.0), (s.t_s, s.retries as f64)],
                        RETRIES.mix(0.5).filled(),
                    )
                });
                start = s.t_s;
                bar
            })
            .collect();
        chart
            .draw_secondary_series(bars)
            .map_err(failed(title))?
            .label("retries (right axis)")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 20, y + 5)], RETRIES.mix(0.5).filled())
            });
        let lines: [(&str, RGBColor, PerSample<'_>); 2] = [("p50", P50, &p50), ("p99", P99, &p99)];
        for (label, color, value) in lines {
            for (k, run) in steps(series, value).into_iter().enumerate() {
                let drawn = chart
                    .draw_series(LineSeries::new(run, color.stroke_width(2)))
                    .map_err(failed(title))?;
                if k == 0 {
                    drawn
                        .label(label)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(failed(title))?;
        root.present().map_err(failed(title))?;
    }
    Ok(svg)
}

/// `timeseries.html`: the plots of [`plots`] in one self-contained page, under `heading`.
pub fn html(heading: &str, series: &Series) -> Result<String, String> {
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}} figure{{margin:1em 0}}</style>\n\
         </head><body>\n<h1>{0}</h1>\n<p>One sample every {1} s ({2} samples): bytes per \
         interval as MiB/s, requests in flight at each sample's end, and the latency of the \
         requests completed in each interval (first attempt to last byte). The figures are in \
         timeseries.csv.</p>\n",
        escape(heading),
        series.interval_s,
        series.samples.len()
    );
    for (title, svg) in plots(series)? {
        out.push_str(&format!(
            "<figure>\n{svg}\n<figcaption>{}</figcaption>\n</figure>\n",
            escape(&title)
        ));
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeseries::Sample;

    fn sample(t_s: f64, bytes_read: u64, in_flight: u64, p99: Option<f64>) -> Sample {
        Sample {
            t_s,
            bytes_read,
            bytes_written: 0,
            requests_completed: u64::from(p99.is_some()),
            in_flight,
            retries: u64::from(t_s == 3.0),
            latency_p50_ms: p99.map(|p| p / 2.0),
            latency_p99_ms: p99,
            io_wait_s: 0.0,
        }
    }

    #[test]
    fn plots_and_page_draw_a_stall_and_an_empty_series() {
        let series = Series {
            interval_s: 1.0,
            samples: vec![
                sample(1.0, 1 << 20, 1, Some(2.0)),
                sample(2.0, 0, 1, None),
                sample(3.0, 0, 1, None),
                sample(3.5, 1 << 20, 0, Some(3000.0)),
            ],
            latency: Vec::new(),
        };
        let plots = plots(&series).unwrap();
        assert_eq!(plots.len(), 2);
        for (title, svg) in &plots {
            assert!(svg.starts_with("<svg"), "{title}");
            assert!(svg.contains(title.as_str()), "{title}");
        }
        assert!(plots[1].1.contains("p99") && plots[1].1.contains("retries"));
        let page = html("run <x>", &series).unwrap();
        assert!(page.contains("run &lt;x&gt;") && page.matches("<svg").count() == 2);
        // An empty series still draws.
        assert_eq!(super::plots(&Series::default()).unwrap().len(), 2);
    }
}
