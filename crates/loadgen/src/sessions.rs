//! The `sessions` scenario: N sessions x M presses against `POST /press`,
//! checking from the answers that every session counted 1, 2, 3, ... and
//! stayed on one node (`X-Served-By`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::report::{Report, Sample, SessionCheck};
use crate::{progress, Outputs};

#[derive(Debug, Clone)]
pub struct SessionsOptions {
    pub url: String,
    pub sessions: usize,
    pub presses: usize,
    pub concurrency: usize,
    pub label: String,
    pub out_dir: PathBuf,
    pub timeout: Duration,
}

/// What one session saw: (count, node) per answered press, in order.
type Seen = Vec<(Option<i64>, Option<String>)>;
/// Every session's samples and what it saw, gathered from the workers.
type Gathered = Arc<Mutex<Vec<(Vec<Sample>, Seen)>>>;

pub async fn run(opts: &SessionsOptions) -> anyhow::Result<Outputs> {
    let client = reqwest::Client::builder().timeout(opts.timeout).build()?;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let next = Arc::new(AtomicUsize::new(0));
    let results: Gathered = Arc::default();
    let bar = progress(
        (opts.sessions * opts.presses) as u64,
        "sessions",
        &opts.label,
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..opts.concurrency.max(1))
        .map(|_| {
            let (client, next, results, bar) =
                (client.clone(), next.clone(), results.clone(), bar.clone());
            let (url, tag, sessions, presses) = (
                opts.url.trim_end_matches('/').to_owned(),
                tag.clone(),
                opts.sessions,
                opts.presses,
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= sessions {
                        break;
                    }
                    let id = format!("lg-{tag}-{i}");
                    let mut samples = Vec::with_capacity(presses);
                    let mut seen = Vec::with_capacity(presses);
                    for _ in 0..presses {
                        let (sample, clicks) = press(&client, &url, &id).await;
                        seen.push((clicks, sample.node.clone()));
                        samples.push(sample);
                        bar.inc(1);
                    }
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((samples, seen));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let results = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    let samples: Vec<Sample> = results
        .iter()
        .flat_map(|(s, _)| s.iter().cloned())
        .collect();
    let mut report = Report::from_samples(&opts.label, "sessions", &opts.url, &samples, elapsed);
    let seen: Vec<&Seen> = results.iter().map(|(_, seen)| seen).collect();
    report.session_check = Some(check(&seen, opts.presses));
    let mut first_nodes: BTreeMap<String, u64> = BTreeMap::new();
    for s in &seen {
        if let Some(node) = s.iter().find_map(|(_, n)| n.clone()) {
            *first_nodes.entry(node).or_default() += 1;
        }
    }
    for (node, stats) in report.node_stats.iter_mut() {
        stats.sessions = Some(first_nodes.get(node).copied().unwrap_or(0));
    }
    crate::write_outputs(report, &samples, &opts.out_dir)
}

/// Sessions whose answers were exactly 1..=presses on one node, with a gap
/// or repeat, and served by more than one node.
pub fn check(seen: &[&Seen], presses: usize) -> SessionCheck {
    let mut check = SessionCheck {
        sessions: seen.len() as u64,
        presses_per_session: presses as u64,
        ..SessionCheck::default()
    };
    for s in seen {
        let counts: Vec<i64> = s.iter().filter_map(|(c, _)| *c).collect();
        let exact = counts.iter().enumerate().all(|(i, &c)| c == i as i64 + 1);
        let mut nodes: Vec<&String> = s.iter().filter_map(|(_, n)| n.as_ref()).collect();
        nodes.dedup();
        let moved = {
            let mut distinct = nodes.clone();
            distinct.sort();
            distinct.dedup();
            distinct.len() > 1
        };
        if !exact {
            check.broken_sequences += 1;
        }
        if moved {
            check.moved_sessions += 1;
        }
        if exact && !moved && counts.len() == presses {
            check.sessions_ok += 1;
        }
    }
    check
}

async fn press(client: &reqwest::Client, url: &str, id: &str) -> (Sample, Option<i64>) {
    let request = client
        .post(format!("{url}/press"))
        .json(&serde_json::json!({ "session_id": id }));
    let answered = match crate::exchange(request, id).await {
        Ok(answered) => answered,
        Err(failed) => return (failed, None),
    };
    let clicks = answered
        .body
        .trim()
        .strip_prefix("You clicked ")
        .and_then(|r| r.strip_suffix(" times"))
        .and_then(|n| n.parse().ok());
    let sample = Sample {
        key: id.to_owned(),
        node: Some(answered.served_by.unwrap_or_else(|| "unknown".into())),
        latency_ms: answered.latency_ms,
        error: clicks
            .is_none()
            .then(|| format!("unexpected answer: {}", answered.body)),
    };
    (sample, clicks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(counts: &[i64], nodes: &[&str]) -> Seen {
        counts
            .iter()
            .zip(nodes)
            .map(|(c, n)| (Some(*c), Some(n.to_string())))
            .collect()
    }

    #[test]
    fn a_session_is_ok_only_with_exact_counts_on_one_node() {
        let good = seen(&[1, 2, 3], &["a", "a", "a"]);
        let gap = seen(&[1, 3, 4], &["a", "a", "a"]);
        let moved = seen(&[1, 2, 3], &["a", "b", "b"]);
        let check = check(&[&good, &gap, &moved], 3);
        assert_eq!(check.sessions_ok, 1);
        assert_eq!(check.broken_sequences, 1);
        assert_eq!(check.moved_sessions, 1);
    }
}
