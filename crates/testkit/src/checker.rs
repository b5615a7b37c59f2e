//! The judge of the fault suite (and of any load that must count right):
//! clients that know every session's true count (presses sent) and check
//! every answer of a balancer against it.
//!
//! Each session belongs to one worker, so its presses are sequential and
//! every answer can be judged: above the truth (never allowed), a repeat or
//! a gap (allowed only with a fault), an error (by code). A final press per
//! session after the load measures the clicks lost.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// Per session: (presses sent, final count), after the settling press.
pub type Finals = HashMap<String, (i64, i64)>;

/// One answer, as the checker saw it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub at: Duration,
    pub session: String,
    /// The press's number for its session (its true count if counted).
    pub truth: i64,
    pub status: u16,
    /// `code` of an error answer, or "transport" when there was no answer.
    pub code: Option<String>,
    pub clicks: Option<i64>,
    pub served_by: Option<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub presses: usize,
    pub ok: usize,
    pub errors: BTreeMap<String, usize>,
    pub above_truth: Vec<Answer>,
    pub repeats: usize,
    pub gaps: usize,
    /// Sum over sessions of (presses sent - final count), after one more
    /// press each once the load stopped.
    pub lost: i64,
    pub answers: Vec<Answer>,
    pub sessions: usize,
    pub duration: Duration,
}

impl Report {
    /// The fewest successful answers in one second, of those not served by
    /// `excluded` (the faulty node), over whole seconds, and the median.
    pub fn worst_second(&self, excluded: Option<&str>) -> (usize, usize) {
        let buckets = self.seconds(excluded);
        let mut sorted = buckets.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        (*sorted.first().unwrap_or(&0), median)
    }

    /// For the seconds in `window`: the fewest successful answers not served
    /// by `excluded`, and the median of the same count over the seconds
    /// before the window (the normal pace).
    pub fn worst_second_during(
        &self,
        excluded: Option<&str>,
        window: std::ops::Range<usize>,
    ) -> (usize, usize) {
        let buckets = self.seconds(excluded);
        let mut before: Vec<usize> = buckets[..window.start.min(buckets.len())].to_vec();
        before.sort_unstable();
        let normal = before.get(before.len() / 2).copied().unwrap_or(0);
        let worst = buckets
            .get(window.start..window.end.min(buckets.len()))
            .and_then(|w| w.iter().min().copied())
            .unwrap_or(0);
        (worst, normal)
    }

    /// Successful answers per whole second, except those served by `excluded`.
    pub fn seconds(&self, excluded: Option<&str>) -> Vec<usize> {
        let seconds = self.duration.as_secs() as usize;
        let mut buckets = vec![0usize; seconds.max(1)];
        for answer in &self.answers {
            let second = answer.at.as_secs() as usize;
            if answer.clicks.is_some()
                && second < seconds
                && (excluded.is_none() || answer.served_by.as_deref() != excluded)
            {
                buckets[second] += 1;
            }
        }
        buckets
    }

    /// Per session: clicks lost beyond what a fault may cost, i.e. beyond
    /// its presses served by `faulty` plus its presses that got no answer
    /// or an error. Returns the offenders.
    pub fn loss_beyond(&self, faulty: Option<&str>, finals: &Finals) -> Vec<String> {
        let mut allowed: HashMap<&str, i64> = HashMap::new();
        for answer in &self.answers {
            let on_faulty = faulty.is_some() && answer.served_by.as_deref() == faulty;
            if on_faulty || answer.clicks.is_none() {
                *allowed.entry(answer.session.as_str()).or_default() += 1;
            }
        }
        lost_beyond(finals, &allowed)
    }

    /// Sessions that lost more clicks than their presses whose outcome
    /// nobody saw (answered neither 200 nor 503: a 504, an error after the
    /// press went out, a connection cut). Returns the offenders.
    pub fn loss_beyond_unshown(&self, finals: &Finals) -> Vec<String> {
        let mut unshown: HashMap<&str, i64> = HashMap::new();
        for answer in &self.answers {
            if answer.clicks.is_none() && answer.status != 503 {
                *unshown.entry(answer.session.as_str()).or_default() += 1;
            }
        }
        lost_beyond(finals, &unshown)
    }

    /// One line for the log and the README.
    pub fn summary(&self, scenario: &str, faulty: Option<&str>) -> String {
        let (worst, median) = self.worst_second(faulty);
        format!(
            "FIGURES scenario={scenario} presses={} ok={} rps={:.0} errors={:?} above_truth={} repeats={} gaps={} lost={} worst_second={worst} median_second={median} seconds={:?}",
            self.presses,
            self.ok,
            self.ok as f64 / self.duration.as_secs_f64(),
            self.errors,
            self.above_truth.len(),
            self.repeats,
            self.gaps,
            self.lost,
            self.seconds(faulty),
        )
    }
}

/// Sessions that lost more clicks than `allowed` says they may.
fn lost_beyond(finals: &Finals, allowed: &HashMap<&str, i64>) -> Vec<String> {
    finals
        .iter()
        .filter(|(session, (truth, count))| {
            truth - count > allowed.get(session.as_str()).copied().unwrap_or(0)
        })
        .map(|(session, (truth, count))| format!("{session}: truth {truth}, final {count}"))
        .collect()
}

/// One press through the balancer at `url`.
async fn press(
    http: &reqwest::Client,
    url: &str,
    session: &str,
) -> (u16, Option<String>, Option<i64>, Option<String>) {
    let response = http
        .post(format!("{url}/press"))
        .json(&serde_json::json!({ "session_id": session }))
        .send()
        .await;
    let Ok(response) = response else {
        return (0, Some("transport".into()), None, None);
    };
    let status = response.status().as_u16();
    let served_by = response
        .headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.unwrap_or_default();
    if status == 200 {
        let clicks = crate::parse_clicks(&body);
        (status, None, clicks, served_by)
    } else {
        let code = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("http_{status}"));
        (status, Some(code), None, served_by)
    }
}

/// `workers` clients press `sessions` for `duration`, alternating between
/// the balancer replicas at `urls`; then one settling press per session
/// (retried until it answers) measures what was lost.
pub async fn run(
    urls: &[String],
    sessions: &[String],
    workers: usize,
    duration: Duration,
) -> (Report, Finals) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(workers)
        .build()
        .unwrap();
    let started = Instant::now();
    let deadline = started + duration;
    let chunks = crate::deal(sessions, workers);
    let tasks: Vec<_> = chunks
        .into_iter()
        .enumerate()
        .map(|(w, chunk)| {
            let (http, urls) = (http.clone(), urls.to_vec());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut truth: HashMap<String, i64> = HashMap::new();
                let mut turn = w;
                'outer: loop {
                    for session in &chunk {
                        if Instant::now() >= deadline {
                            break 'outer;
                        }
                        let url = &urls[turn % urls.len()];
                        turn += 1;
                        let sent = truth.entry(session.clone()).or_default();
                        *sent += 1;
                        let n = *sent;
                        let (status, code, clicks, served_by) = press(&http, url, session).await;
                        if status == 503 {
                            // Nothing was counted: were it, a later answer
                            // would show it above the truth.
                            *truth.get_mut(session).expect("entered above") -= 1;
                        }
                        answers.push(Answer {
                            at: started.elapsed(),
                            session: session.clone(),
                            truth: n,
                            status,
                            code,
                            clicks,
                            served_by,
                        });
                        if clicks.is_none() {
                            // Do not hammer a balancer that is answering errors.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                (answers, truth)
            })
        })
        .collect();
    let mut answers = Vec::new();
    let mut truth: HashMap<String, i64> = HashMap::new();
    for task in tasks {
        let (a, t) = task.await.expect("worker panicked");
        answers.extend(a);
        truth.extend(t);
    }
    let run_for = started.elapsed();
    // Settle: one more press per session, until it is answered.
    let mut finals = HashMap::new();
    for session in sessions {
        let sent = truth.entry(session.clone()).or_default();
        *sent += 1;
        let settle_by = Instant::now() + Duration::from_secs(15);
        let count = loop {
            let (status, code, clicks, _) = press(&http, &urls[0], session).await;
            if let Some(clicks) = clicks {
                break clicks;
            }
            assert!(
                Instant::now() < settle_by,
                "{session} never answered after the run: {status} {code:?}"
            );
            // An unanswered settling press may or may not have counted
            // (a 503 did not): count it as sent and try again.
            if status != 503 {
                *sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(
            count <= *sent,
            "{session}: final count {count} above the truth {sent}"
        );
        finals.insert(session.clone(), (*sent, count));
    }
    let report = judge(answers, &finals, run_for);
    (report, finals)
}

fn judge(mut answers: Vec<Answer>, finals: &Finals, duration: Duration) -> Report {
    answers.sort_by_key(|a| a.at);
    let mut report = Report {
        presses: answers.len(),
        sessions: finals.len(),
        duration,
        ..Report::default()
    };
    let mut last: HashMap<&str, i64> = HashMap::new();
    for answer in &answers {
        match (answer.clicks, &answer.code) {
            (Some(clicks), _) => {
                report.ok += 1;
                if clicks > answer.truth {
                    report.above_truth.push(answer.clone());
                }
                let previous = last.insert(answer.session.as_str(), clicks).unwrap_or(0);
                if clicks <= previous {
                    report.repeats += 1;
                } else if clicks > previous + 1 {
                    report.gaps += 1;
                }
            }
            (None, code) => {
                *report
                    .errors
                    .entry(code.clone().unwrap_or_else(|| "unknown".into()))
                    .or_default() += 1;
            }
        }
    }
    report.lost = finals.values().map(|(truth, count)| truth - count).sum();
    report.answers = answers;
    report
}
