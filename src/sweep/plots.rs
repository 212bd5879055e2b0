//! The sweep's plots, as SVG (plotters, no system libraries), each readable on its own: a title,
//! axis names with units, a legend.
//!
//! - AU% against NP, one line per RT (and other varying parameters), per engine, with the AU
//!   target drawn;
//! - samples/s per rank against NP, the same lines;
//! - client CPU-s per GiB of every point, the engines side by side;
//! - MiB/s of every point: DLIO's nominal figure beside the bytes on the wire;
//! - peak RSS against the memory each point planned (what its plan said it needs, the figure
//!   `--memory-budget` is checked against; not a limit the point ran under);
//! - the CDF of GET latency at one point, every engine that ran it.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::table::{Row, Stat};

const SIZE: (u32, u32) = (760, 440);
const FONT: &str = "sans-serif";

/// One plot: a file name and its SVG.
#[derive(Debug, Clone)]
pub struct Plot {
    pub file: String,
    pub title: String,
    pub svg: String,
}

/// The time series of point `name` (its summary.json's `timeseries`, recorded every
/// `--sample-interval`): throughput and requests in flight, then latency and retries, titled
/// with `label`. Empty when the point wrote no series (it did not run, or an older ringload).
pub fn timeseries(dir: &std::path::Path, name: &str, label: &str) -> Result<Vec<Plot>, String> {
    let path = dir.join("points").join(name).join("summary.json");
    let Some(series) = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|mut s: serde_json::Value| {
            serde_json::from_value::<crate::timeseries::Series>(s["timeseries"].take()).ok()
        })
        .filter(|s| !s.samples.is_empty())
    else {
        return Ok(Vec::new());
    };
    let plots = crate::report::timeseries::plots(&series)?;
    Ok(plots
        .into_iter()
        .enumerate()
        .map(|(i, (title, svg))| Plot {
            file: format!("timeseries-{name}-{}.svg", i + 1),
            title: format!("{title}: {label}"),
            svg,
        })
        .collect())
}

/// Writes each plot as `DIR/plots/FILE`.
pub fn write_all(dir: &std::path::Path, plots: &[Plot]) -> Result<(), crate::exit::UsageError> {
    let plot_dir = dir.join("plots");
    let failed = |path: &std::path::Path, e: std::io::Error| {
        crate::exit::UsageError(format!("cannot write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(&plot_dir).map_err(|e| failed(&plot_dir, e))?;
    for plot in plots {
        let path = plot_dir.join(&plot.file);
        std::fs::write(&path, &plot.svg).map_err(|e| failed(&path, e))?;
    }
    Ok(())
}

fn engine_color(engine: &str) -> RGBColor {
    match engine {
        "uring" => RGBColor(31, 119, 180),
        "baseline" => RGBColor(214, 39, 40),
        _ => RGBColor(44, 160, 44),
    }
}

fn failed<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("drawing {what}: {e:?}")
}

/// The label of a row's line: RT and whichever other parameters vary.
fn series_label(row: &Row, rows: &[Row]) -> String {
    let mut label = format!("RT={}", row.read_threads);
    let varies = |f: &dyn Fn(&Row) -> String| {
        rows.iter()
            .map(f)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
    };
    if varies(&|r| format!("{:?}", r.prefetch)) {
        label.push_str(&format!(
            " pf={}",
            row.prefetch.map_or("-".into(), |v| v.to_string())
        ));
    }
    if varies(&|r| format!("{:?}", r.coalesce_rgs)) {
        label.push_str(&format!(
            " cr={}",
            row.coalesce_rgs.map_or("-".into(), |v| v.to_string())
        ));
    }
    if varies(&|r| format!("{:?}", r.computation_time)) {
        label.push_str(&format!(
            " ct={}",
            row.computation_time.map_or("-".into(), |v| v.to_string())
        ));
    }
    label
}

/// A figure against NP for one engine: one line per series, `value` of each row.
fn against_np(
    rows: &[Row],
    engine: &str,
    title: &str,
    y_desc: &str,
    value: &dyn Fn(&Row) -> Option<f64>,
    target: Option<f64>,
) -> Result<String, String> {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.profile() == engine).collect();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in &mine {
        let label = series_label(r, rows);
        let Some(v) = value(r) else { continue };
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, points)) => points.push((f64::from(r.np), v)),
            None => series.push((label, vec![(f64::from(r.np), v)])),
        }
    }
    for (_, points) in &mut series {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let max_np = mine.iter().map(|r| r.np).max().unwrap_or(1) as f64;
    let max_y = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .chain(target)
        .fold(0.0f64, f64::max);
    let y_top = if target.is_some() {
        105.0f64.max(max_y * 1.05)
    } else {
        (max_y * 1.15).max(1.0)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..max_np + 0.5, 0.0f64..y_top)
            .map_err(failed(title))?;
        chart
            .configure_mesh()
            .x_desc("NP (ranks)")
            .y_desc(y_desc)
            .x_labels((max_np as usize).clamp(2, 16))
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-9 && *x >= 1.0 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(failed(title))?;
        if let Some(t) = target {
            chart
                .draw_series(LineSeries::new(
                    [(0.5, t), (max_np + 0.5, t)],
                    ShapeStyle::from(&BLACK).stroke_width(1),
                ))
                .map_err(failed(title))?
                .label(format!("AU target {t}%"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        }
        for (i, (label, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(failed(title))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(failed(title))?;
        }
        finish(&mut chart, SeriesLabelPosition::LowerRight, title)?;
        root.present().map_err(failed(title))?;
    }
    Ok(svg)
}

/// Every chart here: two f64 axes on an SVG.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws the legend at `position`.
fn finish<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
    title: &str,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(failed(title))
}

/// One bar: its legend, colour and height.
type Bar = (String, RGBColor, Option<f64>);

/// Bars of every point: `bars` per point.
fn bars(
    rows: &[Row],
    title: &str,
    y_desc: &str,
    bars: &dyn Fn(&Row) -> Vec<Bar>,
) -> Result<String, String> {
    let cells: Vec<String> = {
        let mut c: Vec<String> = Vec::new();
        for r in rows {
            let label = format!("np{} rt{}", r.np, r.read_threads);
            if !c.contains(&label) {
                c.push(label);
            }
        }
        c
    };
    let per_cell: Vec<Vec<Bar>> = cells
        .iter()
        .map(|cell| {
            rows.iter()
                .filter(|r| &format!("np{} rt{}", r.np, r.read_threads) == cell)
                .flat_map(bars)
                .collect()
        })
        .collect();
    let width = per_cell.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let max_y = per_cell
        .iter()
        .flatten()
        .filter_map(|(_, _, v)| *v)
        .fold(0.0f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                -0.5f64..cells.len() as f64 - 0.5,
                0.0f64..(max_y * 1.2).max(1e-6),
            )
            .map_err(failed(title))?;
        chart
            .configure_mesh()
            .x_desc("point (NP ranks, RT read threads)")
            .y_desc(y_desc)
            .x_labels(cells.len().max(2))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-9 && i >= 0.0 {
                    cells.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(failed(title))?;
        let slot = 0.8 / width as f64;
        let mut legends: Vec<(String, RGBColor)> = Vec::new();
        for (i, cell) in per_cell.iter().enumerate() {
            for (k, (legend, color, value)) in cell.iter().enumerate() {
                let Some(v) = value else { continue };
                let x0 = i as f64 - 0.4 + k as f64 * slot;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, 0.0), (x0 + slot * 0.9, *v)],
                        color.filled(),
                    )))
                    .map_err(failed(title))?;
                if !legends.iter().any(|(l, _)| l == legend) {
                    legends.push((legend.clone(), *color));
                }
            }
        }
        for (legend, color) in legends {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(failed(title))?
                .label(legend)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        finish(&mut chart, SeriesLabelPosition::UpperLeft, title)?;
        root.present().map_err(failed(title))?;
    }
    Ok(svg)
}

/// A latency CDF: `(legend, sorted latencies in ms)` per line.
pub fn latency_cdf(title: &str, lines: &[super::LatencyLine]) -> Result<String, String> {
    let max_x = lines
        .iter()
        .filter_map(|(_, v)| v.last().copied())
        .fold(0.0f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0f64..(max_x * 1.05).max(1e-3), 0.0f64..1.0f64)
            .map_err(failed(title))?;
        chart
            .configure_mesh()
            .x_desc("GET latency, first attempt to last body byte (ms)")
            .y_desc("fraction of GETs")
            .draw()
            .map_err(failed(title))?;
        for (legend, values) in lines {
            let color = engine_color(legend.split_whitespace().next().unwrap_or(""));
            let n = values.len().max(1) as f64;
            let points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, (i + 1) as f64 / n))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(failed(title))?
                .label(legend.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        finish(&mut chart, SeriesLabelPosition::LowerRight, title)?;
        root.present().map_err(failed(title))?;
    }
    Ok(svg)
}

fn median(s: &Option<Stat>) -> Option<f64> {
    s.map(|s| s.median)
}

/// Every plot of the tables' rows (the latency CDF apart: it needs the points' traces).
pub fn plots(rows: &[Row], au_target: Option<f64>) -> Result<Vec<Plot>, String> {
    let mut engines: Vec<String> = Vec::new();
    for r in rows {
        if !engines.contains(&r.profile()) {
            engines.push(r.profile());
        }
    }
    let mut out = Vec::new();
    for engine in &engines {
        let slug: String = engine
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == ' ')
            .collect::<String>()
            .replace(' ', "-");
        let title = format!("AU against NP, {engine} engine");
        out.push(Plot {
            file: format!("au-{slug}.svg"),
            svg: against_np(
                rows,
                engine,
                &title,
                "AU (%)",
                &|r| median(&r.au_percent),
                au_target,
            )?,
            title,
        });
        let title = format!("Samples/s per rank against NP, {engine} engine");
        out.push(Plot {
            file: format!("samples-{slug}.svg"),
            svg: against_np(
                rows,
                engine,
                &title,
                "samples/s per rank",
                &|r| median(&r.samples_per_s_per_gpu),
                None,
            )?,
            title,
        });
    }
    let title = "Client CPU per GiB read, every point".to_string();
    out.push(Plot {
        file: "cpu-per-gib.svg".into(),
        svg: bars(rows, &title, "client CPU-s per GiB", &|r| {
            vec![(
                r.engine.clone(),
                engine_color(&r.engine),
                median(&r.cpu_s_per_gib),
            )]
        })?,
        title,
    });
    let title = "MiB/s of every point: nominal (DLIO) and on the wire".to_string();
    out.push(Plot {
        file: "mib-per-s.svg".into(),
        svg: bars(rows, &title, "MiB/s", &|r| {
            let light = |c: RGBColor| RGBColor(c.0 / 2 + 127, c.1 / 2 + 127, c.2 / 2 + 127);
            vec![
                (
                    format!("{} nominal", r.profile()),
                    light(engine_color(&r.engine)),
                    median(&r.io_mib_per_s),
                ),
                (
                    format!("{} on the wire", r.profile()),
                    engine_color(&r.engine),
                    median(&r.measured_mib_per_s),
                ),
            ]
        })?,
        title,
    });
    let title = "Peak RSS against the memory each point planned".to_string();
    out.push(Plot {
        file: "memory.svg".into(),
        svg: bars(rows, &title, "MiB", &|r| {
            let mib = |b: Option<f64>| b.map(|b| b / 1048576.0);
            let light = |c: RGBColor| RGBColor(c.0 / 2 + 127, c.1 / 2 + 127, c.2 / 2 + 127);
            vec![
                (
                    format!("{} peak RSS", r.profile()),
                    engine_color(&r.engine),
                    mib(median(&r.peak_rss_bytes)),
                ),
                (
                    format!("{} planned (needed, not a limit)", r.profile()),
                    light(engine_color(&r.engine)),
                    mib(r.memory_budget_bytes.map(|b| b as f64)),
                ),
            ]
        })?,
        title,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn stat(v: f64) -> Option<Stat> {
        Some(Stat {
            median: v,
            min: v,
            max: v,
            n: 1,
        })
    }

    fn row(engine: &str, np: u32, rt: u64, au: f64) -> Row {
        Row {
            engine: engine.into(),
            loader: "ringload".into(),
            np,
            read_threads: rt,
            prefetch: None,
            coalesce_rgs: None,
            computation_time: None,
            runs: 1,
            status: "met".into(),
            notes: Vec::new(),
            au_percent: stat(au),
            samples_per_s: None,
            samples_per_s_per_gpu: stat(au * 10.0),
            io_mib_per_s: None,
            wall_s: None,
            steps_per_rank: None,
            implied_io_wait_per_step_ms: None,
            projected_au_percent: BTreeMap::new(),
            measured_mib_per_s: None,
            cpu_s_per_gib: stat(0.5),
            peak_rss_bytes: stat(64.0 * 1048576.0),
            memory_budget_bytes: Some(128 << 20),
            latency_p50_ms: None,
            latency_p99_ms: None,
            server_cpu_s: None,
        }
    }

    /// The value of attribute `name` in one SVG element's text.
    fn attr<'a>(element: &'a str, name: &str) -> Option<&'a str> {
        let at = element.find(&format!(" {name}=\""))? + name.len() + 3;
        element[at..].split('"').next()
    }

    fn num(element: &str, name: &str) -> f64 {
        attr(element, name).unwrap().parse().unwrap()
    }

    /// Every `<tag …>` element of `svg`, from the space before its first attribute to its `>`.
    fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
        svg.split(&format!("<{tag}"))
            .skip(1)
            .filter(|e| e.starts_with(' '))
            .map(|e| e.split('>').next().unwrap())
            .collect()
    }

    /// `(text-anchor, y, content)` of every text.
    fn texts(svg: &str) -> Vec<(String, f64, String)> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let (head, rest) = t.split_once('>').unwrap();
                let content = rest.split("</text>").next().unwrap().trim().to_string();
                (
                    attr(head, "text-anchor").unwrap().to_string(),
                    num(head, "y"),
                    content,
                )
            })
            .collect()
    }

    /// The y-axis tick labels, as `(pixel y, value)`, bottom first.
    fn y_ticks(svg: &str) -> Vec<(f64, f64)> {
        texts(svg)
            .into_iter()
            .filter(|(anchor, _, _)| anchor == "end")
            .map(|(_, y, t)| (y, t.parse().unwrap()))
            .collect()
    }

    /// The pixel centres of the points drawn.
    fn circles(svg: &str) -> Vec<(f64, f64)> {
        elements(svg, "circle")
            .iter()
            .map(|c| (num(c, "cx"), num(c, "cy")))
            .collect()
    }

    /// The points of each line drawn in `color` with stroke width 2 (data, not axes or legends).
    fn lines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
        elements(svg, "polyline")
            .iter()
            .filter(|l| attr(l, "stroke") == Some(color) && attr(l, "stroke-width") == Some("2"))
            .map(|l| {
                attr(l, "points")
                    .unwrap()
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    /// The heights of the bars filled with `color`.
    fn bar_heights(svg: &str, color: &str) -> Vec<f64> {
        elements(svg, "rect")
            .iter()
            .filter(|r| attr(r, "fill") == Some(color) && attr(r, "opacity") == Some("1"))
            .map(|r| num(r, "height"))
            .filter(|h| *h > 10.0)
            .collect()
    }

    fn plot<'a>(plots: &'a [Plot], file: &str) -> &'a str {
        &plots.iter().find(|p| p.file == file).unwrap().svg
    }

    #[test]
    fn every_engine_gets_its_lines_and_every_point_its_bars() {
        let mut dlio = row("baseline", 1, 1, 70.0);
        dlio.loader = "dlio".into();
        let rows = vec![row("uring", 1, 1, 90.0), row("baseline", 1, 1, 80.0), dlio];
        let plots = plots(&rows, Some(85.0)).unwrap();
        let files: Vec<&str> = plots.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "au-uring.svg",
                "samples-uring.svg",
                "au-baseline.svg",
                "samples-baseline.svg",
                "au-baseline-dlio-loader.svg",
                "samples-baseline-dlio-loader.svg",
                "cpu-per-gib.svg",
                "mib-per-s.svg",
                "memory.svg"
            ]
        );
        for p in &plots {
            assert!(p.svg.starts_with("<svg ") && p.svg.trim_end().ends_with("</svg>"));
            assert!(!p.svg.contains("NaN"), "{}", p.file);
            let texts = texts(&p.svg);
            assert!(texts.iter().any(|(_, _, t)| *t == p.title), "{}", p.file);
        }
        // Each AU plot holds its own engine's point only.
        assert_eq!(circles(plot(&plots, "au-uring.svg")).len(), 1);
        assert_eq!(
            circles(plot(&plots, "au-baseline-dlio-loader.svg")).len(),
            1
        );
    }

    #[test]
    fn au_lines_one_per_read_thread_count_a_point_per_np_and_the_target() {
        // Out of order, and with another engine's row that must not appear.
        let rows = vec![
            row("uring", 4, 1, 60.0),
            row("uring", 1, 1, 95.0),
            row("uring", 2, 1, 80.0),
            row("uring", 1, 4, 99.0),
            row("uring", 4, 4, 90.0),
            row("baseline", 2, 1, 10.0),
        ];
        let svg = against_np(
            &rows,
            "uring",
            "t",
            "AU (%)",
            &|r| median(&r.au_percent),
            Some(80.0),
        )
        .unwrap();
        let labels: Vec<String> = texts(&svg).into_iter().map(|(_, _, t)| t).collect();
        for label in [
            "RT=1",
            "RT=4",
            "AU target 80%",
            "NP (ranks)",
            "AU (%)",
            "1",
            "2",
            "4",
        ] {
            assert!(
                labels.iter().any(|l| l == label),
                "{label} missing: {labels:?}"
            );
        }
        assert_eq!(circles(&svg).len(), 5);
        // Palette99's first colour.
        let lines = lines(&svg, "#E6194B");
        assert_eq!(lines.len(), 1);
        let rt1 = &lines[0];
        // NP 1, 2, 4 left to right; a lower AU is drawn lower (a larger pixel y).
        assert_eq!(rt1.len(), 3);
        assert!(rt1[0].0 < rt1[1].0 && rt1[1].0 < rt1[2].0, "{rt1:?}");
        assert!(rt1[0].1 < rt1[1].1 && rt1[1].1 < rt1[2].1, "{rt1:?}");
        // With a target, the axis goes past 100% whatever the data.
        let low = vec![row("uring", 1, 1, 20.0)];
        let svg = against_np(
            &low,
            "uring",
            "t",
            "AU (%)",
            &|r| median(&r.au_percent),
            Some(80.0),
        )
        .unwrap();
        let top = y_ticks(&svg).iter().map(|&(_, v)| v).fold(0.0, f64::max);
        assert!(top >= 100.0, "{top}");
    }

    #[test]
    fn the_y_axis_scales_with_the_data() {
        let draw = |scale: f64| {
            let rows: Vec<Row> = [(1, 3.0), (2, 5.0), (4, 8.0)]
                .iter()
                .map(|&(np, v)| {
                    let mut r = row("uring", np, 1, 50.0);
                    r.samples_per_s_per_gpu = stat(v * scale);
                    r
                })
                .collect();
            against_np(
                &rows,
                "uring",
                "t",
                "samples/s",
                &|r| median(&r.samples_per_s_per_gpu),
                None,
            )
            .unwrap()
        };
        let (small, large) = (draw(1.0), draw(1000.0));
        // The same picture: the points sit where they sat, relative to the axis.
        assert_eq!(circles(&small), circles(&large));
        for (svg, max) in [(&small, 8.0), (&large, 8000.0)] {
            let ticks = y_ticks(svg);
            let (bottom, top) = (ticks[0], ticks[ticks.len() - 1]);
            assert_eq!(bottom.1, 0.0);
            // The axis tops out above the largest value, by less than a fifth.
            assert!(top.1 <= max * 1.15 && top.1 >= max * 0.7, "{ticks:?}");
            // The largest value is drawn where its tick scale puts it.
            let highest = circles(svg).iter().map(|c| c.1).fold(f64::MAX, f64::min);
            let expected = bottom.0 - (bottom.0 - top.0) * max / top.1;
            assert!((highest - expected).abs() <= 2.0, "{highest} vs {expected}");
        }
    }

    #[test]
    fn empty_and_single_point_inputs_draw() {
        let none = plots(&[], Some(80.0)).unwrap();
        let files: Vec<&str> = none.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(files, ["cpu-per-gib.svg", "mib-per-s.svg", "memory.svg"]);
        assert!(bar_heights(&none[0].svg, "#1F77B4").is_empty());
        let one = plots(&[row("uring", 1, 1, 50.0)], None).unwrap();
        assert_eq!(circles(plot(&one, "au-uring.svg")).len(), 1);
        assert_eq!(
            bar_heights(plot(&one, "cpu-per-gib.svg"), "#1F77B4").len(),
            1
        );
        // A row without the value: no point, and the plot still draws.
        let mut missing = row("uring", 1, 1, 50.0);
        missing.au_percent = None;
        let svg = plot(&plots(&[missing], None).unwrap(), "au-uring.svg").to_string();
        assert!(circles(&svg).is_empty());
        for svg in [
            latency_cdf("empty", &[]).unwrap(),
            latency_cdf("one", &[("uring np1".into(), vec![2.5])]).unwrap(),
            latency_cdf("nothing", &[("uring np1".into(), Vec::new())]).unwrap(),
        ] {
            assert!(svg.trim_end().ends_with("</svg>") && !svg.contains("NaN"));
        }
    }

    #[test]
    fn series_labels_name_only_the_parameters_that_vary() {
        let mut a = row("uring", 1, 2, 50.0);
        let mut b = row("uring", 1, 2, 50.0);
        a.prefetch = Some(2);
        b.prefetch = Some(8);
        a.computation_time = Some(0.1);
        b.computation_time = Some(0.1);
        let rows = vec![a.clone(), b.clone()];
        assert_eq!(series_label(&a, &rows), "RT=2 pf=2");
        assert_eq!(series_label(&b, &rows), "RT=2 pf=8");
        b.coalesce_rgs = Some(4);
        let rows = vec![a.clone(), b.clone()];
        assert_eq!(series_label(&a, &rows), "RT=2 pf=2 cr=-");
        assert_eq!(series_label(&b, &rows), "RT=2 pf=8 cr=4");
        assert_eq!(series_label(&a, std::slice::from_ref(&a)), "RT=2");
    }

    #[test]
    fn memory_bars_put_the_budget_beside_the_peak_and_skip_what_is_missing() {
        let mut no_cpu = row("uring", 2, 1, 50.0);
        no_cpu.cpu_s_per_gib = None;
        let rows = vec![row("uring", 1, 1, 50.0), no_cpu];
        let plots = plots(&rows, None).unwrap();
        // One CPU bar: the second point has no figure.
        assert_eq!(
            bar_heights(plot(&plots, "cpu-per-gib.svg"), "#1F77B4").len(),
            1
        );
        let memory = plot(&plots, "memory.svg");
        let peaks = bar_heights(memory, "#1F77B4");
        // The budget's colour is the engine's, lighter.
        let budgets = bar_heights(memory, "#8EBAD9");
        assert_eq!((peaks.len(), budgets.len()), (2, 2), "{memory}");
        // 64 MiB of RSS against a 128 MiB budget: half as tall.
        assert!(
            (budgets[0] / peaks[0] - 2.0).abs() < 0.05,
            "{peaks:?} {budgets:?}"
        );
        let labels: Vec<String> = texts(memory).into_iter().map(|(_, _, t)| t).collect();
        for label in [
            "uring peak RSS",
            "uring planned (needed, not a limit)",
            "np1 rt1",
            "np2 rt1",
            "MiB",
        ] {
            assert!(
                labels.iter().any(|l| l == label),
                "{label} missing: {labels:?}"
            );
        }
    }

    #[test]
    fn latency_cdf_climbs_to_one_in_each_engines_colour() {
        let svg = latency_cdf(
            "latency",
            &[
                ("uring np1".into(), vec![1.0, 2.0, 3.0, 4.0]),
                ("baseline np1".into(), vec![2.0, 4.0, 6.0, 8.0]),
            ],
        )
        .unwrap();
        let uring = lines(&svg, "#1F77B4");
        let baseline = lines(&svg, "#D62728");
        assert_eq!((uring.len(), baseline.len()), (1, 1));
        let (uring, baseline) = (&uring[0], &baseline[0]);
        assert_eq!((uring.len(), baseline.len()), (4, 4));
        let ticks = y_ticks(&svg);
        let one = ticks.iter().find(|(_, v)| *v == 1.0).unwrap().0;
        // Each line ends at fraction 1; the slower engine's ends further right.
        assert!((uring[3].1 - one).abs() <= 1.0 && (baseline[3].1 - one).abs() <= 1.0);
        assert!(baseline[3].0 > uring[3].0);
        // Half the GETs at 2 ms for uring: half-way up.
        let zero = ticks[0].0;
        assert!((uring[1].1 - (zero + one) / 2.0).abs() <= 1.0, "{uring:?}");
        let labels: Vec<String> = texts(&svg).into_iter().map(|(_, _, t)| t).collect();
        assert!(labels.iter().any(|l| l == "uring np1"));
        assert!(labels.iter().any(|l| l == "baseline np1"));
    }
}
