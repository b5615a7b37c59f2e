//! PNG charts drawn with plotters: requests per node, and the latency
//! histogram. Text uses an embedded DejaVu font, so no system fonts needed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// Width and height of every chart, in pixels.
pub const PNG_SIZE: (u32, u32) = (900, 540);
/// Width and height of the comparison chart (two panels).
pub const COMPARE_PNG_SIZE: (u32, u32) = (1100, 760);
const FONT: &str = "sans-serif";

fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

fn draw_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

/// Bar chart of requests per node, counts written on the bars.
pub fn distribution(
    path: &Path,
    title: &str,
    counts: &BTreeMap<String, u64>,
) -> anyhow::Result<()> {
    let names: Vec<&String> = counts.keys().collect();
    let values: Vec<u64> = counts.values().copied().collect();
    bars(
        path,
        title,
        "node",
        "requests",
        &names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        &values,
    )
}

/// Histogram of latencies in ms on a log scale from the fastest to the
/// slowest answer, so neither a tight body nor a long tail hides the other
/// (and nothing is gathered into an overflow bar); p50, p99 and max marked.
pub fn latency(path: &Path, title: &str, samples_ms: &[f64]) -> anyhow::Result<()> {
    register_font();
    let mut sorted: Vec<f64> = samples_ms
        .iter()
        .copied()
        .filter(|s| s.is_finite())
        .collect();
    sorted.sort_by(f64::total_cmp);
    let root = BitMapBackend::new(path, PNG_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    if sorted.is_empty() {
        root.draw(&Text::new(
            "no data",
            (PNG_SIZE.0 as i32 / 2 - 30, PNG_SIZE.1 as i32 / 2),
            (FONT, 22),
        ))
        .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
        return Ok(());
    }
    let (edges, counts) = log_buckets(&sorted, LATENCY_BUCKETS);
    let (lo, hi) = (edges[0], edges[edges.len() - 1]);
    // Head room above the tallest bar and the marks, for their legend.
    let y_max = counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title} ({} answers)", sorted.len()), (FONT, 24))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            0f64..y_max,
        )
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("response time (ms, log scale)")
        .y_desc("answers")
        .x_label_formatter(&|x| short_ms(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(draw_error)?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &count)| {
            Rectangle::new(
                [(edges[i], 0.0), (edges[i + 1], count as f64)],
                BLUE.mix(0.7).filled(),
            )
        }))
        .map_err(draw_error)?;
    let marks = [
        (
            "p50",
            crate::stats::percentile(&sorted, 50.0),
            GREEN.mix(0.9),
        ),
        (
            "p99",
            crate::stats::percentile(&sorted, 99.0),
            RGBColor(230, 120, 0).mix(0.9),
        ),
        ("max", sorted[sorted.len() - 1], RED.mix(0.9)),
    ];
    // Named in a legend, not beside their lines: p99 and max are often a
    // few pixels apart, and labels beside them ran over each other.
    for (name, at, colour) in marks {
        let at = at.clamp(lo, hi);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(at, 0.0), (at, y_max * 0.75)],
                colour.stroke_width(2),
            )))
            .map_err(draw_error)?
            .label(format!("{name} {}", short_ms(at)))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

/// The series' names, boxed in a corner of the chart.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    corner: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(corner)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 15))
        .draw()
        .map_err(draw_error)
}

const LATENCY_BUCKETS: usize = 40;

/// `n` buckets with geometric edges from the smallest to the largest sample
/// (at least a microsecond, at least a factor 2 wide in all); every sample
/// falls in one.
fn log_buckets(sorted: &[f64], n: usize) -> (Vec<f64>, Vec<u64>) {
    let lo = sorted[0].max(0.001);
    let hi = sorted[sorted.len() - 1].max(lo * 2.0);
    let ratio = (hi / lo).powf(1.0 / n as f64);
    let edges: Vec<f64> = (0..=n).map(|i| lo * ratio.powi(i as i32)).collect();
    let mut counts = vec![0u64; n];
    for &s in sorted {
        let i = ((s.max(lo) / lo).ln() / ratio.ln()) as usize;
        counts[i.min(n - 1)] += 1;
    }
    (edges, counts)
}

/// Ticks for a log axis from `lo` to `hi`: the powers of ten in it, or,
/// when they are too few to read the axis by (plotters' own choice gives a
/// single tick for 50-157 ms), 1-2-5 steps, then 1-1.5-2-3-5-7 steps, then
/// five even steps for a range narrower than that.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    const ENOUGH: usize = 4;
    for steps in [
        &[1.0][..],
        &[1.0, 2.0, 5.0],
        &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
    ] {
        let mut ticks = Vec::new();
        for exponent in lo.log10().floor() as i32..=hi.log10().floor() as i32 {
            let decade = 10f64.powi(exponent);
            ticks.extend(
                steps
                    .iter()
                    .map(|s| s * decade)
                    .filter(|t| (lo..=hi).contains(t)),
            );
        }
        if ticks.len() >= ENOUGH {
            return ticks;
        }
    }
    (0..=ENOUGH)
        .map(|i| lo + (hi - lo) * i as f64 / ENOUGH as f64)
        .collect()
}

/// `0.25 ms`, `3.1 ms`, `120 ms`, `2.5 s`.
fn short_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// One chart of a comparison: requests per node for every strategy, side by
/// side (one colour per node), and each strategy's p50 and p99 below.
pub fn comparison(path: &Path, reports: &[crate::report::Report]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, COMPARE_PNG_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let (top, bottom) = root.split_vertically(480);
    let nodes: Vec<&String> = {
        let mut all: Vec<&String> = reports.iter().flat_map(|r| r.nodes.keys()).collect();
        all.sort();
        all.dedup();
        all
    };
    let groups = reports.len().max(1) as f64;
    let per_group = nodes.len().max(1) as f64;
    let y_max = reports
        .iter()
        .flat_map(|r| r.nodes.values())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.2;
    let labels: Vec<String> = reports.iter().map(|r| r.label.clone()).collect();
    let mut chart = ChartBuilder::on(&top)
        .caption("Requests per node, by strategy", (FONT, 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups, 0f64..y_max)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(reports.len() * 2 + 1)
        .x_label_formatter(&|x| group_label(&labels, *x))
        .y_desc("requests")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(draw_error)?;
    let width = 0.8 / per_group;
    for (j, node) in nodes.iter().enumerate() {
        let colour = Palette99::pick(j).mix(0.85);
        chart
            .draw_series(reports.iter().enumerate().map(|(i, r)| {
                let x = i as f64 + 0.1 + j as f64 * width;
                let v = r.nodes.get(*node).copied().unwrap_or(0) as f64;
                Rectangle::new([(x, 0.0), (x + width * 0.9, v)], colour.filled())
            }))
            .map_err(draw_error)?
            .label(node.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(draw_error)?;

    let l_max = reports
        .iter()
        .map(|r| r.p99_ms)
        .fold(0.0f64, f64::max)
        .max(0.001)
        * 1.5;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("Response times, by strategy", (FONT, 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups, 0f64..l_max)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(reports.len() * 2 + 1)
        .x_label_formatter(&|x| group_label(&labels, *x))
        .y_desc("ms")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(draw_error)?;
    let series: [(&str, PickMs, RGBColor); 2] = [
        ("p50", |r| r.p50_ms, RGBColor(60, 120, 200)),
        ("p99", |r| r.p99_ms, RGBColor(230, 120, 0)),
    ];
    for (j, (name, value, colour)) in series.into_iter().enumerate() {
        chart
            .draw_series(reports.iter().enumerate().map(|(i, r)| {
                let x = i as f64 + 0.15 + j as f64 * 0.35;
                Rectangle::new([(x, 0.0), (x + 0.32, value(r))], colour.filled())
            }))
            .map_err(draw_error)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(draw_error)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

/// One latency figure of a report.
type PickMs = fn(&crate::report::Report) -> f64;

/// The group's name under the middle of its group, nothing elsewhere.
fn group_label(labels: &[String], x: f64) -> String {
    let i = x.floor() as usize;
    if ((x - x.floor()) - 0.5).abs() < 1e-6 && i < labels.len() {
        labels[i].clone()
    } else {
        String::new()
    }
}

fn bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    labels: &[String],
    values: &[u64],
) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, PNG_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let y_max = values.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.15;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 26))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(draw_error)?;
    let every = (n / 15).max(1);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(n.min(30) * 2 + 1)
        .x_label_formatter(&|x| {
            let centre = x - x.floor();
            let i = x.floor() as usize;
            if (centre - 0.5).abs() < 1e-6 && i < labels.len() && i % every == 0 {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(draw_error)?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, &v)| {
            Rectangle::new(
                [(i as f64 + 0.12, 0.0), (i as f64 + 0.88, v as f64)],
                BLUE.mix(0.7).filled(),
            )
        }))
        .map_err(draw_error)?;
    if n <= 40 {
        chart
            .draw_series(
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, &v)| v > 0)
                    .map(|(i, &v)| {
                        Text::new(
                            v.to_string(),
                            (i as f64 + 0.5, v as f64 + y_max * 0.01),
                            (FONT, if n <= 12 { 16 } else { 10 })
                                .into_font()
                                .color(&BLACK)
                                .pos(plotters::style::text_anchor::Pos::new(
                                    plotters::style::text_anchor::HPos::Center,
                                    plotters::style::text_anchor::VPos::Bottom,
                                )),
                        )
                    }),
            )
            .map_err(draw_error)?;
    }
    if values.iter().all(|&v| v == 0) {
        root.draw(&Text::new(
            "no data",
            (PNG_SIZE.0 as i32 / 2 - 30, PNG_SIZE.1 as i32 / 2),
            (FONT, 22),
        ))
        .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

/// Dark enough to tell apart on white, one per balancer.
const CURVE_COLOURS: [RGBColor; 5] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 86, 86),
];

/// The latency-versus-rate curve of an open-loop run: p50 (dashed) and p99
/// (solid) of each balancer against the rate offered, latency on a log
/// scale; a saturated point (the rate not carried) is drawn as a cross,
/// and a balancer's lines stop at its first.
pub fn latency_vs_rate(path: &Path, points: &[crate::rate::RatePoint]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, PNG_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut labels: Vec<&str> = points.iter().map(|p| p.label.as_str()).collect();
    labels.dedup();
    labels.sort();
    labels.dedup();
    let x_max = points.iter().map(|p| p.offered_rps).fold(1.0, f64::max) * 1.05;
    let lo = points
        .iter()
        .map(|p| p.p50_ms)
        .fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.p99_ms).fold(0.0, f64::max);
    let (lo, hi) = ((lo * 0.7).max(0.01), (hi * 1.5).max(lo * 10.0).max(0.1));
    let mut chart = ChartBuilder::on(&root)
        .caption("Latency under a fixed offered rate (open loop)", (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0f64..x_max,
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
        )
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("presses offered per second")
        .y_desc("latency from the intended send (ms, log scale)")
        .x_label_formatter(&|x| format!("{:.0}k", x / 1000.0))
        .y_label_formatter(&|y| short_ms(*y))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(draw_error)?;
    for (i, label) in labels.iter().enumerate() {
        let colour = CURVE_COLOURS[i % CURVE_COLOURS.len()];
        let mut mine: Vec<&crate::rate::RatePoint> =
            points.iter().filter(|p| p.label == *label).collect();
        mine.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
        let carried = mine.iter().take_while(|p| !p.saturated()).count();
        let line = &mine[..(carried + 1).min(mine.len())];
        let p99: Vec<(f64, f64)> = line
            .iter()
            .map(|p| (p.offered_rps, p.p99_ms.clamp(lo, hi)))
            .collect();
        let p50: Vec<(f64, f64)> = line
            .iter()
            .map(|p| (p.offered_rps, p.p50_ms.clamp(lo, hi)))
            .collect();
        chart
            .draw_series(LineSeries::new(p99.clone(), colour.stroke_width(3)))
            .map_err(draw_error)?
            .label(format!("{label} p99 (dashed: p50)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(3))
            });
        chart
            .draw_series(DashedLineSeries::new(p50, 6, 4, colour.stroke_width(2)))
            .map_err(draw_error)?;
        chart
            .draw_series(line.iter().zip(&p99).map(|(p, &at)| {
                if p.saturated() {
                    Cross::new(at, 7, colour.stroke_width(3)).into_dyn()
                } else {
                    Circle::new(at, 3, colour.filled()).into_dyn()
                }
            }))
            .map_err(draw_error)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_buckets_hold_every_sample_from_the_fastest_to_the_slowest() {
        // A tight body and a tail a thousand times slower (the linear chart
        // put it all in one bar and an unlabelled overflow).
        let mut samples: Vec<f64> = (0..10_000).map(|i| 0.4 + (i % 100) as f64 * 0.01).collect();
        samples.extend([120.0, 397.0]);
        samples.sort_by(f64::total_cmp);
        let (edges, counts) = log_buckets(&samples, 40);
        assert_eq!(counts.iter().sum::<u64>(), samples.len() as u64);
        assert_eq!(edges.len(), 41);
        assert!(edges.windows(2).all(|w| w[0] < w[1]));
        assert!((edges[0] - 0.4).abs() < 1e-9);
        assert!(edges[40] >= 397.0 * (1.0 - 1e-9));
        assert_eq!(
            counts[39], 1,
            "the slowest answer has its own bar at the right"
        );
        assert!(
            counts[..20].iter().sum::<u64>() >= 10_000,
            "the body sits left"
        );
    }

    #[test]
    fn one_sample_or_equal_samples_still_make_buckets() {
        let (edges, counts) = log_buckets(&[2.0, 2.0], 10);
        assert_eq!(counts.iter().sum::<u64>(), 2);
        assert!(edges[10] > edges[0]);
        let (_, counts) = log_buckets(&[0.0], 10);
        assert_eq!(counts.iter().sum::<u64>(), 1);
    }

    #[test]
    fn a_log_axis_gets_enough_ticks_whatever_its_range() {
        // The agents chart of a 50-157 ms run had one tick, at 100 ms.
        assert_eq!(log_ticks(50.0, 157.0), vec![50.0, 70.0, 100.0, 150.0]);
        assert_eq!(log_ticks(0.2, 900.0).len(), 11, "1-2-5 steps: 0.2 to 500");
        assert_eq!(
            log_ticks(0.01, 1e4),
            vec![0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4]
        );
        let narrow = log_ticks(101.0, 104.0);
        assert_eq!((narrow.len(), narrow[0], narrow[4]), (5, 101.0, 104.0));
    }

    #[test]
    fn the_latency_chart_is_drawn_for_a_long_tail() {
        let path = std::env::temp_dir().join(format!("latency-{}.png", std::process::id()));
        let samples: Vec<f64> = (1..2000).map(|i| 0.5 + (i as f64).powi(3) / 2e7).collect();
        latency(&path, "test", &samples).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        let _ = std::fs::remove_file(&path);
    }
}
