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
