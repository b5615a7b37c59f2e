//! PNG charts drawn with plotters: requests per node, and the latency
//! histogram. Text uses an embedded DejaVu font, so no system fonts needed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// Width and height of every chart, in pixels.
pub const PNG_SIZE: (u32, u32) = (900, 540);
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

/// Histogram of latencies in ms: 30 buckets up to the 99th percentile, the
/// slower tail gathered in the last bucket.
pub fn latency(path: &Path, title: &str, samples_ms: &[f64]) -> anyhow::Result<()> {
    const BUCKETS: usize = 30;
    let mut sorted = samples_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let top = crate::stats::percentile(&sorted, 99.0).max(0.001);
    let width = top / (BUCKETS - 1) as f64;
    let mut counts = vec![0u64; BUCKETS];
    for s in &sorted {
        counts[((s / width) as usize).min(BUCKETS - 1)] += 1;
    }
    let labels: Vec<String> = (0..BUCKETS)
        .map(|i| {
            if i == BUCKETS - 1 {
                format!(">{:.1}", i as f64 * width)
            } else {
                format!("{:.1}", i as f64 * width)
            }
        })
        .collect();
    bars(
        path,
        title,
        "response time (ms, bucket start)",
        "requests",
        &labels,
        &counts,
    )
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
