//! `--plot FILE.svg`: a bounded run draws an SVG document whose series are the run's own
//! numbers (one rate point per per-second line, the percentile line's values on the latency
//! curve), in `--loopback` mode, with `--show-perfdata` lines, and on both sides of a two-process
//! run; a file name that cannot be written, or is not .svg, fails before the run (exit 1, no
//! output, nothing left behind). Each run uses its own 127.50.4x.0/24.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rds_stress::plot::{CURVE_NINES, MAX_MARKED_INTERVALS, RTT_RGB, RX_RGB, SIZE, TX_RGB};

/// Runs rds-stress to its end: (stdout, stderr, exit code).
fn run(args: &[&str]) -> (String, String, Option<i32>) {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(args);
    let out = wait_output(spawn(c), Duration::from_secs(40));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

/// The per-second lines of a run's output: those between the column header (or the
/// `--show-perfdata` header) and the dashes.
fn interval_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == HEADER || l.starts_with("::nr_tasks:count,"))
        .unwrap_or_else(|| panic!("no header in:\n{text}"));
    let dashes = lines
        .iter()
        .position(|l| *l == "---------------------------------------------")
        .unwrap_or_else(|| panic!("no dashes in:\n{text}"));
    lines[start + 1..dashes].to_vec()
}

/// (tx, rx) of a per-second line or a perfdata line (`::tasks,req,ack,rdma,tx,...`: the perfdata
/// lines carry no rx).
fn tx_rx(line: &str) -> (u64, Option<u64>) {
    if let Some(rest) = line.strip_prefix("::") {
        let tx = rest.split(',').nth(4).and_then(|v| v.parse().ok());
        return (tx.unwrap_or_else(|| panic!("{line:?}")), None);
    }
    assert!(interval_re().is_match(line), "bad interval line {line:?}");
    (field(line, 1) as u64, Some(field(line, 2) as u64))
}

/// p50, p90, p99, p99.9, max from the percentile line.
fn percentiles(text: &str) -> [u64; 5] {
    let l = text
        .lines()
        .find(|l| l.starts_with("rtt us percentiles: "))
        .unwrap_or_else(|| panic!("no percentile line in:\n{text}"));
    assert!(percentile_re().is_match(l), "{l:?}");
    let v: Vec<u64> = l
        .split_whitespace()
        .skip(4)
        .step_by(2)
        .map(|x| x.parse().unwrap())
        .collect();
    v.try_into().unwrap()
}

fn color(rgb: u32) -> String {
    format!("#{rgb:06X}")
}

/// The points of a `<polyline>`.
fn points(n: roxmltree::Node<'_, '_>) -> Vec<(f64, f64)> {
    n.attribute("points")
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').expect("x,y");
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// What the tests read from a plot.
struct Svg {
    /// The text elements, trimmed, in document order.
    texts: Vec<String>,
    /// The polylines of each series colour.
    lines: Vec<(String, Vec<(f64, f64)>)>,
    /// The fill colours of the circles, one entry per circle.
    circles: Vec<String>,
}

impl Svg {
    /// Parses the file as XML and checks that it is an SVG document of the plot's size.
    fn read(path: &Path) -> Svg {
        let text = std::fs::read_to_string(path).expect("the plot was written");
        let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        assert_eq!(root.attribute("width"), Some(SIZE.0.to_string().as_str()));
        assert_eq!(root.attribute("height"), Some(SIZE.1.to_string().as_str()));
        let mut svg = Svg {
            texts: Vec::new(),
            lines: Vec::new(),
            circles: Vec::new(),
        };
        for n in root.descendants().filter(|n| n.is_element()) {
            match n.tag_name().name() {
                "text" => svg
                    .texts
                    .push(n.text().unwrap_or_default().trim().to_string()),
                "polyline" => svg.lines.push((
                    n.attribute("stroke").unwrap_or_default().to_string(),
                    points(n),
                )),
                "circle" => svg
                    .circles
                    .push(n.attribute("fill").unwrap_or_default().to_string()),
                _ => {}
            }
        }
        svg
    }

    /// The one polyline drawn in `rgb`.
    fn series(&self, rgb: u32) -> &[(f64, f64)] {
        let c = color(rgb);
        let v: Vec<&(String, Vec<(f64, f64)>)> = self
            .lines
            .iter()
            .filter(|(s, _)| s.eq_ignore_ascii_case(&c))
            .collect();
        assert_eq!(v.len(), 1, "one {c} polyline");
        &v[0].1
    }

    fn circles(&self, rgb: u32) -> usize {
        let c = color(rgb);
        self.circles
            .iter()
            .filter(|f| f.eq_ignore_ascii_case(&c))
            .count()
    }

    fn has_text(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x == t)
    }
}

/// The rate series: one point per per-second line, left to right, heights in the order of the
/// lines' values (tx and rx share the axis: a larger count is never drawn lower).
fn check_rates(svg: &Svg, lines: &[&str]) {
    let values: Vec<(u64, Option<u64>)> = lines.iter().map(|l| tx_rx(l)).collect();
    let tx = svg.series(TX_RGB);
    let rx = svg.series(RX_RGB);
    assert_eq!(tx.len(), lines.len(), "one tx point per line: {lines:?}");
    assert_eq!(rx.len(), lines.len(), "one rx point per line");
    assert!(lines.len() <= MAX_MARKED_INTERVALS);
    assert_eq!(svg.circles(TX_RGB), lines.len());
    assert_eq!(svg.circles(RX_RGB), lines.len());
    assert!(tx.windows(2).all(|w| w[0].0 < w[1].0), "{tx:?}");
    let mut drawn: Vec<(u64, f64)> = Vec::new();
    for (i, (t, r)) in values.iter().enumerate() {
        drawn.push((*t, tx[i].1));
        if let Some(r) = r {
            drawn.push((*r, rx[i].1));
        }
    }
    for a in &drawn {
        for b in &drawn {
            if a.0 > b.0 {
                assert!(a.1 <= b.1, "{} drawn below {}: {drawn:?}", a.0, b.0);
            }
        }
    }
    let n = lines.len();
    let caption = format!(
        "requests per second: {n} report interval{} (the tx/s and rx/s columns)",
        if n == 1 { "" } else { "s" }
    );
    assert!(svg.has_text(&caption), "{:?}", svg.texts);
    assert!(svg.has_text("tx/s") && svg.has_text("rx/s"), "legend");
}

/// The latency curve from p0 to p99.99, rising, with the percentile line's values marked.
fn check_latency(svg: &Svg, pct: [u64; 5]) {
    let curve = svg.series(RTT_RGB);
    assert_eq!(curve.len(), CURVE_NINES as usize * 20 + 1);
    assert!(
        curve
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 >= w[1].1),
        "{curve:?}"
    );
    for (name, v) in ["p50", "p90", "p99", "p99.9"].iter().zip(pct) {
        let label = format!("{name} {v} us");
        assert!(svg.has_text(&label), "no {label:?} in {:?}", svg.texts);
    }
    assert_eq!(svg.circles(RTT_RGB), 4, "the four marks");
    for tick in ["p0", "p90", "p99", "p99.9", "p99.99"] {
        assert!(svg.has_text(tick), "no tick {tick} in {:?}", svg.texts);
    }
    let max = format!("max {} us", pct[4]);
    assert!(
        svg.texts
            .iter()
            .any(|t| t.starts_with("round-trip time by percentile") && t.ends_with(&max)),
        "no {max:?} in {:?}",
        svg.texts
    );
}

#[test]
fn loopback_run_draws_its_intervals_and_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.svg");
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.41.1",
        "-s",
        "127.50.41.2",
        "-T",
        "2",
        "-d",
        "2",
        "--plot",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(err, "");
    let lines = interval_lines(&out);
    assert!((2..=3).contains(&lines.len()), "{out}");
    let svg = Svg::read(&file);
    assert!(
        svg.has_text("rds-stress --loopback 127.50.41.1 -> 127.50.41.2"),
        "{:?}",
        svg.texts
    );
    assert!(
        svg.has_text("1 task, depth 2, req 1024 B, ack 63 B, two-way"),
        "{:?}",
        svg.texts
    );
    check_rates(&svg, &lines);
    check_latency(&svg, percentiles(&out));
}

#[test]
fn perfdata_lines_are_plotted_too() {
    let dir = tempfile::tempdir().unwrap();
    // Any case of the extension.
    let file = dir.path().join("perf.SVG");
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.42.1",
        "-s",
        "127.50.42.2",
        "-T",
        "1",
        "-o",
        "-q",
        "4k",
        "--show-perfdata",
        "--plot",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines = interval_lines(&out);
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.starts_with("::")),
        "{out}"
    );
    let svg = Svg::read(&file);
    assert!(
        svg.has_text("1 task, depth 1, req 4096 B, ack 63 B, one-way"),
        "{:?}",
        svg.texts
    );
    check_rates(&svg, &lines);
    // One-way: nothing comes back as requests.
    let rx = svg.series(RX_RGB);
    let zero = rx[0].1;
    assert!(rx.iter().all(|p| p.1 == zero));
    check_latency(&svg, percentiles(&out));
}

#[test]
fn both_sides_of_a_two_process_run_plot() {
    let rt = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (pfile, afile) = (
        dir.path().join("passive.svg"),
        dir.path().join("active.svg"),
    );
    let mut p = cmd(rt.path());
    p.args(["-r", "127.50.43.2", "-p", "4430", "--plot"]);
    p.arg(&pfile);
    let passive = spawn(p);
    let mut a = cmd(rt.path());
    a.args([
        "-r",
        "127.50.43.1",
        "-s",
        "127.50.43.2",
        "-p",
        "4430",
        "-T",
        "2",
        "-o",
        "--json",
        "--connect-retries",
        "10",
        "--plot",
    ]);
    a.arg(&afile);
    let active = spawn(a);
    let a = wait_output(active, Duration::from_secs(40));
    let p = wait_output(passive, Duration::from_secs(40));
    let (ao, ae, po) = (
        String::from_utf8_lossy(&a.stdout).into_owned(),
        String::from_utf8_lossy(&a.stderr).into_owned(),
        String::from_utf8_lossy(&p.stdout).into_owned(),
    );
    assert_eq!(a.status.code(), Some(0), "{ao}{ae}");
    assert_eq!(
        p.status.code(),
        Some(0),
        "{po}{}",
        String::from_utf8_lossy(&p.stderr)
    );
    // --json: the human lines go to stderr, the JSON document's intervals are the same.
    let lines = interval_lines(&ae);
    let v: serde_json::Value = serde_json::from_str(&ao).expect("one JSON document");
    assert_eq!(v["intervals"].as_array().unwrap().len(), lines.len());
    let svg = Svg::read(&afile);
    assert!(
        svg.has_text("rds-stress active 127.50.43.1 -> 127.50.43.2"),
        "{:?}",
        svg.texts
    );
    check_rates(&svg, &lines);
    check_latency(&svg, percentiles(&ae));

    // The passive side of a one-way run receives and sends no request: no round trips.
    let plines = interval_lines(&po);
    let svg = Svg::read(&pfile);
    assert!(
        svg.has_text("rds-stress passive 127.50.43.2 -> 127.50.43.1"),
        "{:?}",
        svg.texts
    );
    check_rates(&svg, &plines);
    assert_eq!(percentiles(&po), [0; 5]);
    assert!(svg.has_text(
        "no round-trip times were measured (this side sent no request, or none was answered)"
    ));
    assert!(!svg
        .lines
        .iter()
        .any(|(c, _)| c.eq_ignore_ascii_case(&color(RTT_RGB))));
}

/// A `--plot` argument refused before the run: exit 1 with `msg`, nothing on stdout, within
/// a second or two (a run takes at least 6 s), no file left.
fn refused(plot: &Path, msg: &str) {
    let t0 = Instant::now();
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.44.1",
        "-s",
        "127.50.44.2",
        "-T",
        "60",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(out, "");
    assert_eq!(err, format!("--plot {}: {msg}\n", plot.display()));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn bad_names_and_paths_fail_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        &d.join("run.png"),
        "PNG is not supported (drawing text into a bitmap needs a font library); name an .svg \
         file and convert it if needed, for example with rsvg-convert",
    );
    for name in ["run.jpg", "run", "run.svg.txt", ".svg"] {
        refused(
            &d.join(name),
            "unknown image format (the file name must end in .svg)",
        );
    }
    refused(
        &d.join("missing/run.svg"),
        "cannot write the file: No such file or directory",
    );
    std::fs::write(d.join("file"), "x").unwrap();
    refused(
        &d.join("file/run.svg"),
        "cannot write the file: Not a directory",
    );
    std::fs::create_dir(d.join("dir.svg")).unwrap();
    refused(
        &d.join("dir.svg"),
        "cannot write the file: it is a directory",
    );
    let mut left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["dir.svg", "file"]);
}

#[test]
fn a_run_that_fails_to_start_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.svg");
    let old = dir.path().join("old.svg");
    std::fs::write(&old, "an earlier plot").unwrap();
    for f in [&new, &old] {
        // The same address twice: the run stops after the plot's check.
        let (out, err, code) = run(&[
            "--loopback",
            "-r",
            "127.50.44.1",
            "-s",
            "127.50.44.1",
            "--plot",
            f.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(1), "{out}{err}");
        assert_eq!(
            err,
            "--loopback needs two different addresses of one family (-r and -s)\n"
        );
    }
    assert!(!new.exists(), "the writability check leaves no file");
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "an earlier plot");
}
