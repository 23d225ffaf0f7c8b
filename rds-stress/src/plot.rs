//! `--plot FILE.svg`: the run drawn as one SVG image, from the numbers the text output prints.
//!
//! The upper chart has the requests sent and received in each report interval (the `tx/s` and
//! `rx/s` columns of the per-second lines, one point per line, each with a dot up to
//! [`MAX_MARKED_INTERVALS`]); the lower one the round-trip
//! time by percentile, p0 to p99.99 on a "nines" axis, read from the same histogram as the
//! percentile line ([`RttDistribution`]), with p50, p90, p99 and p99.9 marked and labelled
//! with the line's values. The file name is checked before the run ([`Target::check`]), so
//! that a long run never ends in a file that cannot be written.
//!
//! Drawn with `plotters` and its SVG backend only: the SVG names its font (`sans-serif`) and
//! the viewer lays the text out, so no font library is needed. PNG would need one (a bitmap
//! has to rasterise the glyphs), so a `.png` name is refused with a pointer to a converter.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use rds_core::errno::strerror;

use crate::control::WireOptions;
use crate::stats::RttDistribution;

/// The image's size in pixels.
pub const SIZE: (u32, u32) = (1000, 900);

/// Colour of the requests-sent series (`tx/s`), as `0xRRGGBB`.
pub const TX_RGB: u32 = 0x1f77b4;
/// Colour of the requests-received series (`rx/s`).
pub const RX_RGB: u32 = 0xff7f0e;
/// Colour of the round-trip-time curve and its marks.
pub const RTT_RGB: u32 = 0x2ca02c;

/// The most report intervals whose points get a marker (a dot) on the rate lines: past that the
/// dots would merge into a thick line (an hour has 3600 intervals).
pub const MAX_MARKED_INTERVALS: usize = 120;

/// The percentiles marked on the latency curve: (name, quantile), as the percentile line.
pub const MARKS: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

/// How far the latency curve goes, in nines: 4 is p99.99.
pub const CURVE_NINES: f64 = 4.0;
/// Points of the latency curve per nine.
const CURVE_STEPS_PER_NINE: u32 = 20;

/// The font family named in the SVG.
const FONT: &str = "sans-serif";

const fn rgb(c: u32) -> RGBColor {
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// One report interval as its per-second line shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Seconds from the start of the measurement to the end of this interval.
    pub end_secs: f64,
    /// Requests sent in the interval (the `tx/s` column).
    pub tx: u64,
    /// Requests received in the interval (the `rx/s` column).
    pub rx: u64,
}

/// What one plot shows.
#[derive(Debug)]
pub struct Run<'a> {
    /// The image's title in two lines ([`title`]).
    pub title: [String; 2],
    /// The report intervals, in order.
    pub intervals: &'a [Interval],
    /// The round-trip times of the run (the percentile line's source).
    pub rtt: &'a RttDistribution,
}

/// Where `--plot` writes, checked before the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    arg: String,
    path: PathBuf,
}

fn os_text(e: &std::io::Error) -> String {
    e.raw_os_error().map_or_else(|| e.to_string(), strerror)
}

impl Target {
    /// Checks `--plot FILE`: the name ends in `.svg` (any case) and the file can be written (an
    /// existing file is opened for writing and left as it is; a new one is created and removed
    /// again).
    ///
    /// # Errors
    /// A `.png` name (not supported), another or no extension, a directory, or a file that
    /// cannot be written (exit 1).
    pub fn check(arg: &str) -> Result<Target, String> {
        let path = PathBuf::from(arg);
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => {}
            Some("png") => {
                return Err(format!(
                    "--plot {arg}: PNG is not supported (drawing text into a bitmap needs a font \
                     library); name an .svg file and convert it if needed, for example with \
                     rsvg-convert\n"
                ))
            }
            _ => {
                return Err(format!(
                    "--plot {arg}: unknown image format (the file name must end in .svg)\n"
                ))
            }
        }
        let cannot = |why: String| format!("--plot {arg}: cannot write the file: {why}\n");
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return Err(cannot("it is a directory".into())),
            Ok(_) => {
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| cannot(os_text(&e)))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| cannot(os_text(&e)))?;
                std::fs::remove_file(&path).map_err(|e| cannot(os_text(&e)))?;
            }
            Err(e) => return Err(cannot(os_text(&e))),
        }
        Ok(Target {
            arg: arg.to_string(),
            path,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Draws `run` and writes it to the file.
    ///
    /// # Errors
    /// Drawing or writing failed (exit 1).
    pub fn write(&self, run: &Run<'_>) -> Result<(), String> {
        let svg =
            render(run).map_err(|e| format!("--plot {}: cannot draw the plot: {e}\n", self.arg))?;
        std::fs::write(&self.path, svg).map_err(|e| {
            format!(
                "--plot {}: cannot write the file: {}\n",
                self.arg,
                os_text(&e)
            )
        })
    }
}

fn addr(v4: u32, v6: [u8; 16]) -> IpAddr {
    if v6 == [0; 16] {
        IpAddr::V4(Ipv4Addr::from(v4))
    } else {
        IpAddr::V6(Ipv6Addr::from(v6))
    }
}

/// The plot's title: the role (`--loopback`, `active`, `passive`) with this side's and the
/// peer's addresses, then the run's parameters, e.g. `rds-stress --loopback 127.0.0.1 ->
/// 127.0.0.2` and `1 task, depth 2, req 1024 B, ack 63 B, two-way`.
pub fn title(role: &str, w: &WireOptions) -> [String; 2] {
    let local = addr(w.receive_addr, w.receive_addr6);
    let peer = addr(w.send_addr, w.send_addr6);
    let tasks = w.nr_tasks;
    let mut t = format!(
        "{tasks} task{}, depth {}, req {} B, ack {} B",
        if tasks == 1 { "" } else { "s" },
        w.req_depth,
        w.req_size,
        w.ack_size
    );
    if w.rdma_size != 0 {
        t += &format!(", RDMA {} B", w.rdma_size);
    }
    t += if w.simplex != 0 {
        ", one-way"
    } else {
        ", two-way"
    };
    [format!("rds-stress {role} {local} -> {peer}"), t]
}

/// The name of the percentile `nines` nines out (0 = p0, 1 = p90, 2 = p99, 3 = p99.9, ...).
pub fn percentile_name(nines: f64) -> String {
    let pct = 100.0 * (1.0 - 10f64.powf(-nines));
    let decimals = (nines.ceil() as usize).saturating_sub(2);
    let s = format!("{pct:.decimals$}");
    format!("p{s}")
}

/// Quantile `q` on the nines axis: -log10(1 - q).
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

/// The latency curve: (nines, µs) from p0 to p99.99, each value at least 1 (log axis).
pub fn rtt_curve(rtt: &RttDistribution) -> Vec<(f64, f64)> {
    let steps = (CURVE_NINES as u32) * CURVE_STEPS_PER_NINE;
    (0..=steps)
        .map(|i| {
            let n = f64::from(i) / f64::from(CURVE_STEPS_PER_NINE);
            let q = 1.0 - 10f64.powf(-n);
            (n, rtt.quantile(q).max(1) as f64)
        })
        .collect()
}

type DrawResult<T> = Result<T, String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draws `run` as an SVG document.
///
/// # Errors
/// A drawing error from plotters (none expected with the SVG backend).
pub fn render(run: &Run<'_>) -> DrawResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&run.title[0], (FONT, 24)).map_err(err)?;
        let root = root.titled(&run.title[1], (FONT, 20)).map_err(err)?;
        let areas = root.split_evenly((2, 1));
        draw_rates(&areas[0], run.intervals)?;
        draw_rtt(&areas[1], run.rtt)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

fn draw_rates(area: &Area<'_>, intervals: &[Interval]) -> DrawResult<()> {
    let x_max = intervals
        .iter()
        .map(|i| i.end_secs * 1.03)
        .fold(1.0, f64::max);
    let top = intervals.iter().map(|i| i.tx.max(i.rx)).max().unwrap_or(0);
    let y_max = (top as f64 * 1.15).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "requests per second: {} report interval{} (the tx/s and rx/s columns)",
                intervals.len(),
                if intervals.len() == 1 { "" } else { "s" }
            ),
            (FONT, 19),
        )
        .margin(12)
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 15))
        .x_desc("seconds since the start of the measurement")
        .y_desc("requests/s")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    type Column = fn(&Interval) -> u64;
    let series: [(&str, u32, Column); 2] = [("tx/s", TX_RGB, |i| i.tx), ("rx/s", RX_RGB, |i| i.rx)];
    for (name, c, column) in series {
        let color = rgb(c);
        let points: Vec<(f64, f64)> = intervals
            .iter()
            .map(|i| (i.end_secs, column(i) as f64))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], color.filled()));
        if points.len() <= MAX_MARKED_INTERVALS {
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 16))
        .draw()
        .map_err(err)?;
    Ok(())
}

fn draw_rtt(area: &Area<'_>, rtt: &RttDistribution) -> DrawResult<()> {
    let p = rtt.percentiles();
    if p.count == 0 {
        let (w, h) = area.dim_in_pixel();
        let style =
            TextStyle::from((FONT, 19).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw(&Text::new(
            "no round-trip times were measured (this side sent no request, or none was answered)",
            (w as i32 / 2, h as i32 / 2),
            style,
        ))
        .map_err(err)?;
        return Ok(());
    }
    let curve = rtt_curve(rtt);
    let lo = curve.first().map_or(1.0, |c| c.1);
    let hi = curve.last().map_or(1.0, |c| c.1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "round-trip time by percentile (us, log scale): {} sample{}, max {} us",
                p.count,
                if p.count == 1 { "" } else { "s" },
                p.max
            ),
            (FONT, 19),
        )
        .margin(12)
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..CURVE_NINES, ((lo / 1.5)..(hi * 1.5)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(CURVE_NINES as usize + 1)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 15))
        .x_desc("percentile")
        .y_desc("round-trip time (us)")
        .x_label_formatter(&|v| percentile_name(*v))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    let color = rgb(RTT_RGB);
    chart
        .draw_series(LineSeries::new(curve, color.stroke_width(2)))
        .map_err(err)?;
    let marks = [p.p50, p.p90, p.p99, p.p99_9];
    for ((name, q), us) in MARKS.into_iter().zip(marks) {
        let at = (nines(q), us.max(1) as f64);
        chart
            .draw_series(std::iter::once(
                EmptyElement::at(at)
                    + Circle::new((0, 0), 4, color.filled())
                    + Text::new(format!("{name} {us} us"), (-8, -22), (FONT, 17).into_font()),
            ))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_names() {
        assert_eq!(percentile_name(0.0), "p0");
        assert_eq!(percentile_name(1.0), "p90");
        assert_eq!(percentile_name(2.0), "p99");
        assert_eq!(percentile_name(3.0), "p99.9");
        assert_eq!(percentile_name(4.0), "p99.99");
        for (name, q) in MARKS {
            let n = nines(q);
            if name != "p50" {
                assert_eq!(percentile_name(n), name);
            }
        }
    }

    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    #[test]
    fn edge_runs_render() {
        // No interval and no round trip (a run stopped in its start-up).
        let empty = RttDistribution::of(&[]);
        let title = ["a".to_string(), "b".to_string()];
        let svg = render(&Run {
            title: title.clone(),
            intervals: &[],
            rtt: &empty,
        })
        .unwrap();
        assert!(svg.contains("requests per second: 0 report intervals"));
        assert!(svg.contains("no round-trip times were measured"));
        // A long run: every point on the line, no dots; one sample: a flat curve.
        let t = std::sync::Arc::new(crate::stats::TaskStats::default());
        t.inc(crate::stats::Stat::RttUsecs, 40);
        t.rtt(40);
        let one = RttDistribution::of(&[t]);
        let long: Vec<Interval> = (1..=MAX_MARKED_INTERVALS as u64 + 1)
            .map(|i| Interval {
                end_secs: i as f64,
                tx: 1000 + i,
                rx: 0,
            })
            .collect();
        let svg = render(&Run {
            title,
            intervals: &long,
            rtt: &one,
        })
        .unwrap();
        let tx = format!("#{TX_RGB:06X}");
        assert_eq!(count(&svg, &format!("stroke=\"{tx}\"")), 1);
        assert_eq!(
            count(&svg, &format!("fill=\"{tx}\"")),
            1,
            "the legend's box only"
        );
        assert!(svg.contains("1 sample, max 40 us"));
        assert!(svg.contains("p99.9 40 us"));
    }

    #[test]
    fn titles_name_the_parameters() {
        let mut w = WireOptions::defaults();
        crate::opts::set_addr(&mut w, "127.0.0.1".parse().unwrap(), false);
        crate::opts::set_addr(&mut w, "127.0.0.2".parse().unwrap(), true);
        w.nr_tasks = 2;
        w.req_depth = 4;
        w.req_size = 1024;
        w.ack_size = 63;
        assert_eq!(
            title("--loopback", &w),
            [
                "rds-stress --loopback 127.0.0.1 -> 127.0.0.2",
                "2 tasks, depth 4, req 1024 B, ack 63 B, two-way"
            ]
        );
        w.simplex = 1;
        w.rdma_size = 4096;
        w.nr_tasks = 1;
        crate::opts::set_addr(&mut w, "::1".parse().unwrap(), false);
        crate::opts::set_addr(&mut w, "fd00::2".parse().unwrap(), true);
        assert_eq!(
            title("active", &w),
            [
                "rds-stress active ::1 -> fd00::2",
                "1 task, depth 4, req 1024 B, ack 63 B, RDMA 4096 B, one-way"
            ]
        );
    }
}
