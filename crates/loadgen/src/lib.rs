//! `loadgen`: reproducible load experiments against nodes-control. The
//! scenarios (`agents`, `sessions`, `compare`) measure, then every run writes
//! `<label>.json`, `<label>.md`, `distribution_<label>.png` and
//! `latency_<label>.png` into its output folder.
//! `rate` presses open-loop at a fixed rate and prints one point of a
//! latency-versus-rate curve, which `rate-curve` draws.

pub mod agents;
pub mod compare;
pub mod plot;
pub mod rate;
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

/// A 2xx answer: who served it, what it said, how long it took.
pub(crate) struct Answered {
    pub served_by: Option<String>,
    pub body: String,
    pub latency_ms: f64,
}

/// Sends one request; anything but a 2xx answer becomes a failed sample.
pub(crate) async fn exchange(
    request: reqwest::RequestBuilder,
    key: &str,
) -> Result<Answered, Sample> {
    let started = Instant::now();
    let failed = |error: String| Sample {
        key: key.to_owned(),
        node: None,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        error: Some(error),
    };
    let response = request.send().await.map_err(|e| failed(describe(&e)))?;
    let status = response.status();
    let served_by = response
        .headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(failed(format!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        )));
    }
    Ok(Answered {
        served_by,
        body,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
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

/// A progress bar on the terminal (hidden when stderr is not one): the
/// run's mode and label (once when they are the same word), requests done,
/// their rate in whole requests per second.
pub(crate) fn progress(total: u64, mode: &str, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {rate} eta {eta}")
    {
        let style = style.with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        );
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(progress_message(mode, label));
    bar
}

fn progress_message(mode: &str, label: &str) -> String {
    if label.is_empty() || label == mode {
        mode.to_owned()
    } else {
        format!("{mode} {label}")
    }
}

#[cfg(test)]
mod progress_tests {
    #[test]
    fn the_progress_line_names_the_mode_once_when_the_label_repeats_it() {
        assert_eq!(super::progress_message("sessions", "sessions"), "sessions");
        assert_eq!(super::progress_message("agents", "rr"), "agents rr");
        assert_eq!(super::progress_message("agents", ""), "agents");
    }
}
