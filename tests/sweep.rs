//! `ringload sweep` end to end: every point a real `ringload run` child against the embedded
//! server (one for the whole sweep) or a `ringload serve` with faults; the study's tables read
//! back against each point's summary.json.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

fn sweep_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap()
}

fn engines() -> &'static str {
    if ringload::engine::uring::unavailable_cause().is_none() {
        "uring,baseline"
    } else {
        "baseline"
    }
}

#[test]
fn a_grid_runs_every_point_once_and_the_tables_are_its_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, stdout, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "--np",
        "1,2",
        "--read-threads",
        "1,2",
        "--engine",
        engines(),
        "--computation-time",
        "0.01",
        "--output",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let engines: Vec<&str> = engines().split(',').collect();
    let sweep = sweep_json(&out);
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 4 * engines.len());
    assert_eq!(sweep["planned"].as_array().unwrap().len(), points.len());
    // One embedded server for every point: each point's run read from the same endpoint.
    let endpoints: std::collections::BTreeSet<String> = points
        .iter()
        .map(|p| {
            p["summary"]["target"]["endpoint"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), points.len());
    for p in points {
        let name = p["name"].as_str().unwrap();
        let folder = out.join("points").join(name);
        let own: Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("summary.json")).unwrap())
                .unwrap();
        assert!(folder.join("steps.csv").exists() && folder.join("run.log").exists());
        assert_eq!(own["np"], p["np"], "{name}");
        assert_eq!(own["read_threads"], p["read_threads"], "{name}");
        assert_eq!(own["engine"], p["engine"], "{name}");
        assert!(p["server_cpu_s"].as_f64().unwrap() > 0.0, "{name}");
        // The table's numbers are the point's own.
        let row = rows
            .iter()
            .find(|r| {
                r["engine"] == p["engine"]
                    && r["np"] == p["np"]
                    && r["read_threads"] == p["read_threads"]
            })
            .unwrap();
        for (column, field) in [
            ("au_percent", "au_percent"),
            ("samples_per_s", "samples_per_s"),
            ("cpu_s_per_gib", "cpu_s_per_gib"),
            ("measured_mib_per_s", "measured_mib_per_s"),
        ] {
            assert_eq!(row[column]["median"], own[field], "{name} {column}");
        }
        assert_eq!(row["steps_per_rank"], own["steps_per_rank"], "{name}");
    }
    // The same tables as markdown and CSV beside it.
    let md = std::fs::read_to_string(out.join("study.md")).unwrap();
    assert!(md.contains(
        "| NP | RT | AU% | samples/s | samp/s/GPU | nominal MiB/s | Wall (s) | Steps | Notes |"
    ));
    assert!(md.contains("implied I/O wait"));
    // The I/O-stress banner comes before the tables it qualifies; both MiB/s are named.
    let banner = md.find("NOTE**: computation_time is 0.01 s").unwrap();
    assert!(banner < md.find("| NP |").unwrap(), "{md}");
    assert!(md.contains("| MiB/s on the wire |") && md.contains("nominal MiB/s is DLIO's"));
    if engines.len() == 2 {
        assert!(md.contains("## uring against baseline"), "{md}");
    }
    let csv = std::fs::read_to_string(out.join("study.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + points.len());
}

#[test]
fn points_over_the_memory_budget_are_planned_skipped_and_never_started() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "--np",
        "1,4",
        "--read-threads",
        "1,4",
        "--engine",
        "baseline",
        "--memory-budget",
        "100MiB",
        "--computation-time",
        "0.01",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "a skipped point is not a complete sweep: {stderr}");
    let sweep = sweep_json(&out);
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    let skipped: Vec<&Value> = points.iter().filter(|p| p["status"] == "skipped").collect();
    assert!(!skipped.is_empty(), "{sweep}");
    for p in &skipped {
        assert!(p["reason"].as_str().unwrap().contains("100"), "{p}");
        assert!(p["summary"].is_null());
        assert!(
            !out.join("points")
                .join(p["name"].as_str().unwrap())
                .exists()
        );
    }
    let small = points
        .iter()
        .find(|p| p["np"] == 1 && p["read_threads"] == 1)
        .unwrap();
    assert!(
        small["status"] == "met" || small["status"] == "missed",
        "{small}"
    );
    assert!(stderr.contains("skipped"), "{stderr}");
}

#[test]
fn a_gated_point_waits_for_a_smaller_one_that_passed() {
    // metric.au=1: a 100% target, which no run meets; every point above the first is gated.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, stdout, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "metric.au=1",
        "--np",
        "1,2",
        "--read-threads",
        "1,2",
        "--engine",
        "baseline",
        "--computation-time",
        "0.01",
        "--gate",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    let points = sweep_json(&out)["points"].as_array().unwrap().clone();
    let status: Vec<(u64, u64, String)> = points
        .iter()
        .map(|p| {
            (
                p["np"].as_u64().unwrap(),
                p["read_threads"].as_u64().unwrap(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(status[0], (1, 1, "missed".to_string()), "{status:?}");
    for (p, s) in points.iter().zip(&status).skip(1) {
        assert_eq!(s.2, "gated", "{status:?}");
        assert_eq!(p["reason"], "gated by NP=1,RT=1 (missed)");
    }
    assert!(stdout.contains("gated by NP=1,RT=1"), "{stdout}");
}

#[test]
fn a_failing_point_is_recorded_and_the_sweep_goes_on() {
    // The first row-group GET of the whole sweep is refused (403, not retried): that point
    // fails; the next ones run.
    let mut server = common::ringload()
        .args([
            "serve",
            "--virtual",
            "flux_small",
            "--listen",
            "127.0.0.1:0",
            "--faults",
            "403@rg/nth=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.as_mut().unwrap()),
        &mut url,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "--np",
        "1",
        "--read-threads",
        "1,2",
        "--engine",
        "baseline",
        "--computation-time",
        "0.01",
        "--endpoint",
        url.trim(),
        "--bucket",
        "ringload",
        "--output",
        out.to_str().unwrap(),
    ]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(code, 3, "{stderr}");
    let points = sweep_json(&out)["points"].as_array().unwrap().clone();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["status"], "failed");
    assert_eq!(points[0]["exit_code"], 3);
    assert!(
        points[0]["reason"].as_str().unwrap().contains("403"),
        "{}",
        points[0]
    );
    assert_eq!(points[0]["summary"]["outcome"], "failed");
    assert!(points[1]["status"] == "met" || points[1]["status"] == "missed");
}

#[test]
fn an_interrupted_sweep_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let args = [
        "sweep",
        "flux_small",
        "--np",
        "1",
        "--read-threads",
        "1,2,3",
        "--engine",
        "baseline",
        "--computation-time",
        "0.1",
        "--output",
        out.to_str().unwrap(),
    ];
    let child = common::ringload()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Stop it once the first point's result is written and the second is running.
    let started = Instant::now();
    loop {
        let done = std::fs::read_to_string(out.join("sweep.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map_or(0, |s| s["points"].as_array().map_or(0, Vec::len));
        if done >= 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never wrote a point"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let partial = sweep_json(&out);
    let kept = partial["points"].as_array().unwrap().clone();
    assert!(!kept.is_empty() && kept.len() < 3, "{partial}");

    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let (code, _, stderr) = common::run(&resumed);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stderr.contains("resuming"), "{stderr}");
    let full = sweep_json(&out);
    let points = full["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    // What finished before the interrupt is kept as it was, not run again.
    for (before, after) in kept.iter().zip(points) {
        assert_eq!(before, after);
    }
    // Another grid in the same folder is refused.
    let mut other = resumed.clone();
    other[5] = "1,2";
    let (code, _, stderr) = common::run(&other);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("other points"), "{stderr}");
}

#[test]
fn a_used_output_is_refused_unless_resume_or_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let sweep = |rt: &str, flags: &[&str]| {
        let mut args = vec![
            "sweep",
            "flux_small",
            "--np",
            "1",
            "--read-threads",
            rt,
            "--engine",
            "baseline",
            "--computation-time",
            "0.01",
            "--output",
            out.to_str().unwrap(),
        ];
        args.extend(flags);
        common::run(&args)
    };
    let names = |out: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(out.join("points"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let (code, _, stderr) = sweep("1,2", &[]);
    assert!(code == 0 || code == 1, "{stderr}");
    let first = sweep_json(&out);

    // Into the same folder with no flag: refused in one line, nothing touched.
    let (code, _, stderr) = sweep("3", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(out.to_str().unwrap())
            && stderr.contains("another sweep (2 points)")
            && stderr.contains("--resume")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(sweep_json(&out), first);
    assert_eq!(
        names(&out),
        ["baseline-np1-rt1-ct0.01-r1", "baseline-np1-rt2-ct0.01-r1"]
    );

    // --resume with another grid: refused, naming what differs.
    let (code, _, stderr) = sweep("1,3", &["--resume"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("only there: baseline-np1-rt2-ct0.01-r1")
            && stderr.contains("only now: baseline-np1-rt3-ct0.01-r1"),
        "{stderr}"
    );

    // --resume with the same grid: a point whose summary.json is not whole runs again, the
    // other is kept as it was.
    let rt2 = out.join("points/baseline-np1-rt2-ct0.01-r1/summary.json");
    let text = std::fs::read_to_string(&rt2).unwrap();
    std::fs::write(&rt2, &text[..text.len() / 2]).unwrap();
    let (code, _, stderr) = sweep("1,2", &["--resume"]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(
        stderr.contains("results kept for 1 of 2 points; 1 to run"),
        "{stderr}"
    );
    let resumed = sweep_json(&out);
    let points = resumed["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0], first["points"][0]);
    assert_eq!(points[1]["name"], "baseline-np1-rt2-ct0.01-r1");
    assert_ne!(points[1], first["points"][1]);
    let again: Value = serde_json::from_str(&std::fs::read_to_string(&rt2).unwrap()).unwrap();
    assert!(again["outcome"].is_string());

    // --force: the old sweep's files go, an unrelated file stays, only the new grid remains.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let (code, _, stderr) = sweep("3", &["--force", "--repeat", "2"]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(stderr.contains("sweep: 2 points ("), "{stderr}");
    assert_eq!(
        names(&out),
        ["baseline-np1-rt3-ct0.01-r1", "baseline-np1-rt3-ct0.01-r2"]
    );
    assert_eq!(sweep_json(&out)["planned"].as_array().unwrap().len(), 2);
    // Two rounds: report.html gives their spread.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let spread = html.split("<h2>Spread over repeats</h2>").nth(1).unwrap();
    assert!(
        spread.contains("<tr><td>baseline-np1-rt3-ct0.01</td><td>2</td><td>")
            && spread.contains(" ± "),
        "{spread}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn a_bad_grid_is_refused_before_any_point_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "train.no_such_key=1",
        "--np",
        "1,2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out.join("points").exists());
}

/// Every text of an SVG, parsed as XML (a parse error fails the test).
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut texts = Vec::new();
    let mut in_text = false;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(e)) => {
                in_text = e.local_name().as_ref() == "text";
            }
            Ok(quick_xml::events::Event::Text(t)) if in_text => {
                let t = t.xml10_content().trim().to_string();
                if !t.is_empty() {
                    texts.push(t);
                }
            }
            Ok(quick_xml::events::Event::End(_)) => in_text = false,
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("{}: not XML: {e}", path.display()),
        }
    }
    texts
}

/// A headless Chromium, or why there is none.
fn chromium() -> Result<std::path::PathBuf, String> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            && out.status.success()
        {
            return Ok(String::from_utf8_lossy(&out.stdout).trim().into());
        }
    }
    Err("no chromium on PATH (scripts/install-test-deps installs Debian's with apt-get)".into())
}

#[test]
fn the_plots_and_the_report_render_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "flux_small",
        "--np",
        "1,2",
        "--read-threads",
        "1,2",
        "--engine",
        engines(),
        "--computation-time",
        "0.01",
        "--latency-point",
        "2,1",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let mut expected = vec![
        (
            "cpu-per-gib.svg",
            "Client CPU per GiB read, every point",
            "client CPU-s per GiB",
        ),
        (
            "memory.svg",
            "Peak RSS against the memory each point planned",
            "MiB",
        ),
        (
            "mib-per-s.svg",
            "MiB/s of every point: nominal (DLIO) and on the wire",
            "MiB/s",
        ),
        (
            "latency-cdf.svg",
            "GET latency CDF at NP=2, RT=1",
            "fraction of GETs",
        ),
    ];
    let engine_plots: Vec<(String, String)> = engines()
        .split(',')
        .flat_map(|e| {
            [
                (format!("au-{e}.svg"), format!("AU against NP, {e} engine")),
                (
                    format!("samples-{e}.svg"),
                    format!("Samples/s per rank against NP, {e} engine"),
                ),
            ]
        })
        .collect();
    for (file, title) in &engine_plots {
        expected.push((file, title, "NP (ranks)"));
    }
    for (file, title, axis) in expected {
        let texts = svg_texts(&out.join("plots").join(file));
        assert!(texts.iter().any(|t| t == title), "{file}: {texts:?}");
        assert!(texts.iter().any(|t| t == axis), "{file}: {texts:?}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The latency point's time series, one run per engine.
    for e in engines().split(',') {
        assert!(
            html.contains("Throughput and requests in flight: ")
                && html.contains(&format!("{e}-np2-rt1")),
            "no time series of the {e} engine's NP=2, RT=1 point"
        );
    }
    assert!(
        html.contains("<svg")
            && !html.contains("<script")
            && !html.contains("http://www.w3.org/1999/xlink\" href=\"http")
    );
    assert!(html.contains("<th>NP</th>") && html.contains("flux_small"));
    // When, by which ringload, and the plots people ask for, labelled for what they show.
    let sweep = sweep_json(&out);
    let started = sweep["started"].as_str().unwrap();
    assert!(started.ends_with(" GMT"), "{started}");
    assert!(html.contains(&format!("<tr><th>run</th><td>{started}</td></tr>")));
    let commit = sweep["ringload_commit"].as_str().unwrap();
    assert!(!commit.is_empty());
    assert!(
        html.contains(&format!(
            "<tr><th>ringload</th><td>{} (commit {commit})</td></tr>",
            env!("CARGO_PKG_VERSION")
        )),
        "{html}"
    );
    assert!(html.contains("<figcaption>MiB/s of every point: nominal (DLIO) and on the wire"));
    assert!(html.contains("planned (needed, not a limit)"));
    // One round: no spread to show.
    assert!(!html.contains("Spread over repeats"));

    let browser = match chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipping the browser check: {why}");
            return;
        }
    };
    let shot = dir.path().join("report.png");
    let mut child = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1100,1400",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", out.join("report.html").display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish its screenshot in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let bpp = info.color_type.samples();
    let px: Vec<&[u8]> = pixels[..info.buffer_size()].chunks(bpp).collect();
    let non_white = px
        .iter()
        .filter(|p| p[..3].iter().any(|&c| c < 200))
        .count();
    let colors: std::collections::BTreeSet<&[u8]> = px.iter().map(|p| &p[..3]).collect();
    // A rendered page of tables and charts: text and lines in many shades, on white.
    assert!(
        non_white > px.len() / 200 && colors.len() > 20,
        "the screenshot looks blank: {non_white} of {} pixels not white, {} colours",
        px.len(),
        colors.len()
    );
}

/// A checkpoint workload's sweep over NP: each point a child `ringload run` against its own
/// embedded sink, the table DLIO's save and load figures per NP from the points' summaries;
/// no plots. The sweep folder reads back in `compare` as checkpoint results.
#[test]
fn a_checkpoint_sweep_runs_each_np_and_tables_dlios_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, stdout, stderr) = common::run(&[
        "sweep",
        "llama3_tiny",
        "--np",
        "1,2",
        "--engine",
        "baseline",
        "--part-size",
        "16MiB",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let sweep = sweep_json(&out);
    let points = sweep["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{sweep}");
    let study: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("study.json")).unwrap()).unwrap();
    for (p, np) in points.iter().zip([1u64, 2]) {
        assert_eq!(p["name"], format!("baseline-np{np}-r1"));
        assert_eq!(p["status"], "met", "{p}");
        let s = &p["summary"];
        assert_eq!(
            (s["kind"].as_str(), s["np"].as_u64()),
            (Some("checkpoint"), Some(np))
        );
        // The checkpoint flags reached the point's run.
        assert_eq!(s["io_shape"]["part_bytes"], 16 << 20, "{s}");
        let row = study
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["np"] == np)
            .unwrap();
        let m = &s["metric"];
        assert_eq!(
            row["save_gib_per_s"]["median"],
            m["save_checkpoint_io_mean_GB_per_second"]
        );
        assert_eq!(
            row["load_duration_s"]["median"],
            m["load_checkpoint_duration_mean_seconds"]
        );
        assert_eq!(row["checkpoint_size_gib"], m["checkpoint_size_GB"]);
        assert!(
            stdout.contains(&format!("| baseline | {np} | 1 | met | ")),
            "{stdout}"
        );
    }
    assert!(stdout.contains("| save GiB/s | save s |"), "{stdout}");
    assert!(stdout.contains("the plots and report.html are the training study's"));
    assert!(!out.join("plots").exists() && !out.join("report.html").exists());
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio-checkpoint/llama3-1t");
    let (code, cmp, stderr) = common::run(&[
        "compare",
        fixture.to_str().unwrap(),
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let cmp: Value = serde_json::from_str(&cmp).unwrap();
    assert_eq!(cmp["lines"].as_array().unwrap().len(), 3, "{cmp}");
}

/// NP values that are not multiples of tensor × pipeline parallelism are refused before any
/// point runs, naming them and the multiple.
#[test]
fn a_checkpoint_sweep_refuses_np_values_off_the_parallelism_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "llama3_tiny",
        "model.parallelism.tensor=2",
        "--np",
        "1,2,3,4",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--np 1,3:") && stderr.contains("(2 × 1 = 2)"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing was started or written");
    let (code, _, stderr) = common::run(&[
        "sweep",
        "llama3_tiny",
        "--read-threads",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--read-threads is a training sweep's axis"),
        "{stderr}"
    );
}
