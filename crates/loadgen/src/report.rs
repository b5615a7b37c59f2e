//! What a run measured, written as `<label>.json` and `<label>.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stats::{self, Latency};

/// One node's share of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeStats {
    pub requests: u64,
    /// Percentage of all answered requests.
    pub share: f64,
    /// Mean response time of the requests this node served, ms.
    pub mean_ms: f64,
    /// Sessions first placed on this node (`sessions` scenario).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sessions: Option<u64>,
}

/// The `sessions` scenario's checks of the counts users saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionCheck {
    pub sessions: u64,
    pub presses_per_session: u64,
    /// Sessions whose answers were exactly 1, 2, 3, ... on one node.
    pub sessions_ok: u64,
    /// Sessions that saw a gap or a repeat in their counts.
    pub broken_sequences: u64,
    /// Sessions served by more than one node.
    pub moved_sessions: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub label: String,
    pub scenario: String,
    pub url: String,
    pub started_at: String,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    /// The first few errors, as seen.
    pub error_samples: Vec<String>,
    pub duration_secs: f64,
    pub throughput_rps: f64,
    /// Node name -> requests (presses in the `sessions` scenario) it served.
    pub nodes: BTreeMap<String, u64>,
    pub node_stats: BTreeMap<String, NodeStats>,
    /// Mean, population variance, standard deviation in % of the mean and
    /// max - min of the per-node counts.
    pub mean: f64,
    pub variance: f64,
    pub std_pct: f64,
    pub spread: f64,
    /// Share of users (sessions) always served by the same node.
    pub stickiness: f64,
    pub latency_ms: Latency,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub session_check: Option<SessionCheck>,
}

/// One answered or failed request, as the scenarios record it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The user or session the request was for.
    pub key: String,
    /// Serving node, when the request was answered.
    pub node: Option<String>,
    pub latency_ms: f64,
    pub error: Option<String>,
}

impl Report {
    /// Summarises samples: per-node counts and means, spread, stickiness,
    /// latency over the answered requests.
    pub fn from_samples(
        label: &str,
        scenario: &str,
        url: &str,
        samples: &[Sample],
        duration_secs: f64,
    ) -> Self {
        let answered: Vec<&Sample> = samples.iter().filter(|s| s.node.is_some()).collect();
        let nodes = stats::per_node(answered.iter().filter_map(|s| s.node.as_deref()));
        let counts: Vec<f64> = nodes.values().map(|&c| c as f64).collect();
        let node_stats = nodes
            .iter()
            .map(|(name, &requests)| {
                let latencies: Vec<f64> = answered
                    .iter()
                    .filter(|s| s.node.as_deref() == Some(name))
                    .map(|s| s.latency_ms)
                    .collect();
                let stats = NodeStats {
                    requests,
                    share: requests as f64 * 100.0 / answered.len().max(1) as f64,
                    mean_ms: stats::mean(&latencies),
                    sessions: None,
                };
                (name.clone(), stats)
            })
            .collect();
        let served: Vec<(&str, &str)> = answered
            .iter()
            .map(|s| (s.key.as_str(), s.node.as_deref().unwrap_or_default()))
            .collect();
        let latency = Latency::of(&answered.iter().map(|s| s.latency_ms).collect::<Vec<_>>());
        let errors: Vec<&Sample> = samples.iter().filter(|s| s.error.is_some()).collect();
        Self {
            label: label.to_owned(),
            scenario: scenario.to_owned(),
            url: url.to_owned(),
            started_at: chrono::Utc::now().to_rfc3339(),
            requests: samples.len() as u64,
            ok: answered.len() as u64,
            errors: errors.len() as u64,
            error_samples: errors
                .iter()
                .take(5)
                .filter_map(|s| s.error.clone())
                .collect(),
            duration_secs,
            throughput_rps: if duration_secs > 0.0 {
                answered.len() as f64 / duration_secs
            } else {
                0.0
            },
            mean: stats::mean(&counts),
            variance: stats::variance(&counts),
            std_pct: stats::std_pct(&counts),
            spread: stats::spread(&counts),
            stickiness: stats::stickiness(&served),
            nodes,
            node_stats,
            latency_ms: latency,
            p50_ms: latency.p50,
            p95_ms: latency.p95,
            p99_ms: latency.p99,
            max_ms: latency.max,
            session_check: None,
        }
    }

    /// Writes `<label>.json` and `<label>.md` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join(format!("{}.json", self.label));
        std::fs::write(&json, serde_json::to_string_pretty(self)?)?;
        let md = dir.join(format!("{}.md", self.label));
        std::fs::write(&md, self.markdown())?;
        Ok(vec![json, md])
    }

    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# {} ({} scenario)\n\n{} requests to {} at {}: {} answered, {} errors, {:.1} s, {:.0} req/s.\n\n",
            self.label, self.scenario, self.requests, self.url, self.started_at, self.ok, self.errors, self.duration_secs, self.throughput_rps
        );
        md.push_str("| node | requests | share | mean response |\n|---|---|---|---|\n");
        for (name, s) in &self.node_stats {
            md.push_str(&format!(
                "| {name} | {} | {:.1} % | {:.2} ms |\n",
                s.requests, s.share, s.mean_ms
            ));
        }
        md.push_str(&format!(
            "\n| mean | variance | std % of mean | max - min | stickiness | p50 | p95 | p99 | max |\n|---|---|---|---|---|---|---|---|---|\n\
             | {:.1} | {:.1} | {:.2} % | {} | {:.1} % | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            self.mean,
            self.variance,
            self.std_pct,
            self.spread,
            self.stickiness * 100.0,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.max_ms
        ));
        if let Some(check) = &self.session_check {
            md.push_str(&format!(
                "\nSessions: {} x {} presses; {} counted exactly 1, 2, 3, ... on one node; {} broken sequences; {} moved.\n",
                check.sessions, check.presses_per_session, check.sessions_ok, check.broken_sequences, check.moved_sessions
            ));
        }
        if !self.error_samples.is_empty() {
            md.push_str("\nFirst errors:\n\n");
            for e in &self.error_samples {
                md.push_str(&format!("- {e}\n"));
            }
        }
        md.push_str(&format!(
            "\n![distribution](distribution_{0}.png)\n![latency](latency_{0}.png)\n",
            self.label
        ));
        md
    }

    /// A few lines for the terminal.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{}: {} requests, {} ok, {} errors in {:.1} s ({:.0} req/s)\n",
            self.label,
            self.requests,
            self.ok,
            self.errors,
            self.duration_secs,
            self.throughput_rps
        );
        for (name, s) in &self.node_stats {
            text.push_str(&format!(
                "  {name:<24} {:>7} {:>6.1} %  {:>8.2} ms\n",
                s.requests, s.share, s.mean_ms
            ));
        }
        text.push_str(&format!(
            "  std {:.2} % of mean, spread {}, stickiness {:.1} %, p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms\n",
            self.std_pct,
            self.spread,
            self.stickiness * 100.0,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.max_ms
        ));
        text
    }
}
