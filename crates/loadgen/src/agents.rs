//! The `agents` scenario: stateless `GET /process/{req_id}?user_id=N`
//! requests, every user the same number of times in shuffled order, from a
//! fixed number of concurrent workers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::report::{Report, Sample};
use crate::{progress, Outputs};

#[derive(Debug, Clone)]
pub struct AgentsOptions {
    pub url: String,
    pub requests: usize,
    pub users: usize,
    pub concurrency: usize,
    pub label: String,
    pub out_dir: PathBuf,
    pub seed: u64,
    pub timeout: Duration,
}

/// Request `i` is for user `plan[i]`: users 1..=users, each `requests /
/// users` times (the remainder spread over the first users), shuffled.
pub fn plan(requests: usize, users: usize, seed: u64) -> Vec<usize> {
    let users = users.max(1);
    let mut plan: Vec<usize> = (0..requests).map(|i| i % users + 1).collect();
    plan.shuffle(&mut StdRng::seed_from_u64(seed));
    plan
}

pub async fn run(opts: &AgentsOptions) -> anyhow::Result<Outputs> {
    let plan = Arc::new(plan(opts.requests, opts.users, opts.seed));
    let client = reqwest::Client::builder().timeout(opts.timeout).build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(Mutex::new(Vec::with_capacity(opts.requests)));
    let bar = progress(opts.requests as u64, "agents", &opts.label);
    let started = Instant::now();
    let workers: Vec<_> = (0..opts.concurrency.max(1))
        .map(|_| {
            let (plan, client, next, samples, bar) = (
                plan.clone(),
                client.clone(),
                next.clone(),
                samples.clone(),
                bar.clone(),
            );
            let url = opts.url.trim_end_matches('/').to_owned();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&user) = plan.get(i) else { break };
                    let sample = one(&client, &url, i + 1, user).await;
                    samples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sample);
                    bar.inc(1);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    let report = Report::from_samples(&opts.label, "agents", &opts.url, &samples, elapsed);
    crate::write_outputs(report, &samples, &opts.out_dir)
}

async fn one(client: &reqwest::Client, url: &str, req_id: usize, user: usize) -> Sample {
    let key = user.to_string();
    let request = client.get(format!("{url}/process/{req_id}?user_id={user}"));
    let answered = match crate::exchange(request, &key).await {
        Ok(answered) => answered,
        Err(failed) => return failed,
    };
    // Nodes name themselves in `agent_id`; the balancer's header wins.
    let node = answered.served_by.or_else(|| {
        serde_json::from_str::<serde_json::Value>(&answered.body)
            .ok()
            .and_then(|v| {
                v.get("agent_id")
                    .and_then(|a| a.as_str())
                    .map(str::to_owned)
            })
    });
    Sample {
        key,
        node: Some(node.unwrap_or_else(|| "unknown".into())),
        latency_ms: answered.latency_ms,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_user_gets_the_same_number_of_requests_in_shuffled_order() {
        let p = plan(2000, 200, 1);
        assert_eq!(p.len(), 2000);
        for user in 1..=200 {
            assert_eq!(p.iter().filter(|&&u| u == user).count(), 10);
        }
        assert_ne!(p[..200], (1..=200).collect::<Vec<_>>()[..], "not shuffled");
        assert_eq!(p, plan(2000, 200, 1), "the seed reproduces the order");
    }
}
