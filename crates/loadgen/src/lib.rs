//! `loadgen`: reproducible load experiments against nodes-control. The
//! scenarios (`agents`, `sessions`, `compare`) measure, then every run writes
//! `<label>.json`, `<label>.md`, `distribution_<label>.png` and
//! `latency_<label>.png` into its output folder.

pub mod agents;
pub mod compare;
pub mod plot;
pub mod report;
pub mod sessions;
pub mod stats;

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use report::{Report, Sample};

/// A run's report and the files written for it.
#[derive(Debug)]
pub struct Outputs {
    pub report: Report,
    pub files: Vec<PathBuf>,
}

/// Writes the report and both charts; the run's measurements are kept even
/// if every request failed.
pub(crate) fn write_outputs(
    report: Report,
    samples: &[Sample],
    dir: &Path,
) -> anyhow::Result<Outputs> {
    let mut files = report.write(dir)?;
    let distribution = dir.join(format!("distribution_{}.png", report.label));
    plot::distribution(
        &distribution,
        &format!("Requests per node: {}", report.label),
        &report.nodes,
    )?;
    let latency = dir.join(format!("latency_{}.png", report.label));
    let answered: Vec<f64> = samples
        .iter()
        .filter(|s| s.node.is_some())
        .map(|s| s.latency_ms)
        .collect();
    plot::latency(
        &latency,
        &format!("Response times: {}", report.label),
        &answered,
    )?;
    files.extend([distribution, latency]);
    Ok(Outputs { report, files })
}

pub(crate) fn failed(key: String, started: Instant, error: String) -> Sample {
    Sample {
        key,
        node: None,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        error: Some(error),
    }
}

/// A request error in words an operator can act on.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    if e.is_connect() {
        format!(
            "cannot connect to the balancer ({}): is it running?",
            e.url().map(|u| u.as_str()).unwrap_or("?")
        )
    } else if e.is_timeout() {
        "the balancer did not answer in time".into()
    } else {
        e.to_string()
    }
}

/// A progress bar on the terminal (hidden when stderr is not one).
pub(crate) fn progress(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}
