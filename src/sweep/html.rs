//! `DIR/report.html`: one self-contained page — the workload, when and by which ringload
//! (version and commit) it ran, the machine, the exact command line, the study's tables, the
//! spread over repeats, and the plots inline as SVG. No network, no JavaScript.

use std::fmt::Write;

use super::plots::Plot;
use super::{Machine, SweepFile};

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `code` and **bold** in an escaped line.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for (i, part) in escape(text).split('`').enumerate() {
        if i > 0 {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
        }
        let mut bold = false;
        for (k, piece) in part.split("**").enumerate() {
            if k > 0 && !code {
                out.push_str(if bold { "</strong>" } else { "<strong>" });
                bold = !bold;
            } else if k > 0 {
                out.push_str("**");
            }
            out.push_str(piece);
        }
        if bold {
            out.push_str("</strong>");
        }
    }
    if code {
        out.push_str("</code>");
    }
    out
}

fn cells(line: &str) -> Vec<&str> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split('|')
        .map(str::trim)
        .collect()
}

/// The study's markdown (as `table::markdown` writes it) as HTML: headings, paragraphs and
/// tables.
pub fn markdown_to_html(markdown: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(h) = line.strip_prefix("## ") {
            let _ = writeln!(out, "<h2>{}</h2>", inline(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = writeln!(out, "<h2>{}</h2>", inline(h));
        } else if line.starts_with('|') {
            out.push_str("<table>\n<thead><tr>");
            for c in cells(line) {
                let _ = write!(out, "<th>{}</th>", inline(c));
            }
            out.push_str("</tr></thead>\n<tbody>\n");
            i += 1;
            // The separator line.
            if lines
                .get(i)
                .is_some_and(|l| l.starts_with("|-") || l.starts_with("|:"))
            {
                i += 1;
            }
            while let Some(row) = lines.get(i).filter(|l| l.starts_with('|')) {
                out.push_str("<tr>");
                for c in cells(row) {
                    let _ = write!(out, "<td>{}</td>", inline(c));
                }
                out.push_str("</tr>\n");
                i += 1;
            }
            out.push_str("</tbody></table>\n");
            continue;
        } else if !line.trim().is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline(line));
        }
        i += 1;
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}\
th,td{border:1px solid #bbb;padding:3px 8px;text-align:right;font-size:14px}\
th{background:#eef}td:last-child{text-align:left}\
pre{background:#f4f4f4;padding:8px;white-space:pre-wrap}\
figure{margin:1em 0}figcaption{font-size:14px;color:#555}";

/// The whole page.
pub fn report(sweep: &SweepFile, markdown: &str, plots: &[Plot]) -> String {
    report_leading(sweep, "", markdown, plots)
}

/// The whole page, `answer` (markdown: `sweep --find-max-np`'s answer and evidence) first.
pub fn report_leading(sweep: &SweepFile, answer: &str, markdown: &str, plots: &[Plot]) -> String {
    let mut out = String::new();
    let title = format!("ringload sweep: {}", sweep.workload);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let answer = answer
        .lines()
        .filter(|l| !l.starts_with("# "))
        .collect::<Vec<_>>()
        .join("\n");
    out.push_str(&markdown_to_html(&answer));
    let Machine {
        cpu,
        cores,
        memory_bytes,
        kernel,
        hostname,
    } = &sweep.machine;
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "unknown".to_string()
        } else {
            escape(s)
        }
    };
    let _ = writeln!(
        out,
        "<table>\n<tr><th>workload</th><td>{}</td></tr>\n<tr><th>run</th><td>{}</td></tr>\n\
         <tr><th>ringload</th><td>{} (commit {})</td></tr>\n<tr><th>points</th><td>{} planned, \
         {} with a result</td></tr>\n<tr><th>machine</th><td>{} — {}, {} cores, {:.1} GiB, \
         Linux {}</td></tr>\n</table>",
        escape(&sweep.workload),
        or_unknown(&sweep.started),
        or_unknown(&sweep.ringload_version),
        or_unknown(&sweep.ringload_commit),
        sweep.planned.len(),
        sweep.points.len(),
        escape(hostname),
        escape(cpu),
        cores,
        *memory_bytes as f64 / (1u64 << 30) as f64,
        escape(kernel)
    );
    let _ = writeln!(
        out,
        "<h2>Command</h2>\n<pre>{}</pre>",
        escape(&sweep.command)
    );
    // The markdown's own title is the page's.
    let body = markdown
        .lines()
        .filter(|l| !l.starts_with("# ") && !l.starts_with('`'))
        .collect::<Vec<_>>()
        .join("\n");
    out.push_str(&markdown_to_html(&body));
    out.push_str(&spread(sweep));
    out.push_str("<h2>Plots</h2>\n");
    for plot in plots {
        let svg = plot
            .svg
            .trim_start_matches(|c: char| c != '<')
            .trim_start_matches("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
            .trim();
        let _ = writeln!(
            out,
            "<figure>\n{svg}\n<figcaption>{} ({})</figcaption>\n</figure>",
            escape(&plot.title),
            escape(&plot.file)
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Mean, standard deviation, min and max of `values`; `None` for fewer than two.
fn stdev(values: &[f64]) -> Option<(f64, f64, f64, f64)> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((mean, var.sqrt(), min, max))
}

/// A figure of a point's summary.json: its name and how to read it.
type Figure<'a> = (&'a str, &'a dyn Fn(&serde_json::Value) -> Option<f64>);

/// The spread over repeats (`--repeat` > 1): per point that ran more than once, each
/// figure's mean ± sample standard deviation and its min–max. Empty without repeats.
fn spread(sweep: &SweepFile) -> String {
    let figures: [Figure; 3] = [
        ("AU%", &|s| s["au_percent"].as_f64()),
        ("samples/s", &|s| s["samples_per_s"].as_f64()),
        ("MiB/s on the wire", &|s| s["measured_mib_per_s"].as_f64()),
    ];
    let mut keys: Vec<String> = Vec::new();
    for p in &sweep.points {
        if !keys.contains(&p.point.key()) {
            keys.push(p.point.key());
        }
    }
    let mut rows = String::new();
    for key in keys {
        let ran: Vec<&serde_json::Value> = sweep
            .points
            .iter()
            .filter(|p| p.point.key() == key)
            .filter_map(|p| p.summary.as_ref())
            .collect();
        if ran.len() < 2 {
            continue;
        }
        let _ = write!(rows, "<tr><td>{}</td><td>{}</td>", escape(&key), ran.len());
        for (_, get) in &figures {
            let values: Vec<f64> = ran.iter().filter_map(|s| get(s)).collect();
            let cell = stdev(&values).map_or("—".into(), |(mean, sd, min, max)| {
                format!("{mean:.1} ± {sd:.1} ({min:.1}–{max:.1})")
            });
            let _ = write!(rows, "<td>{cell}</td>");
        }
        rows.push_str("</tr>\n");
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Spread over repeats</h2>\n<p>Each point's rounds: mean ± standard deviation \
         (min–max).</p>\n<table>\n<thead><tr><th>point</th><th>rounds</th>",
    );
    for (name, _) in &figures {
        let _ = write!(out, "<th>{name}</th>");
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    out.push_str(&rows);
    out.push_str("</tbody></table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_inline_marks_become_html() {
        let html = markdown_to_html(
            "## uring\n\n| NP | RT |\n|---|---|\n| 1 | 2 |\n\n**NOTE**: `ct` <is> odd\n",
        );
        assert!(html.contains("<h2>uring</h2>"));
        assert!(html.contains("<th>NP</th><th>RT</th>"));
        assert!(html.contains("<td>1</td><td>2</td>"));
        assert!(html.contains("<strong>NOTE</strong>: <code>ct</code> &lt;is&gt; odd"));
    }
}
