//! Logging and metrics set-up: `RUST_LOG` filters, `LOG_FORMAT` picks pretty
//! or JSON; metrics go to one process-wide Prometheus recorder.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tower_http=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The Prometheus recorder, installed on first use. One per process: the
/// `metrics` macros write to a global recorder, so several applications in
/// one test process share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("duration_seconds".into()),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0,
                    ],
                )
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then ours
            // renders empty, which /metrics shows rather than crashing.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
