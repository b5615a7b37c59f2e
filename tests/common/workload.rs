//! Concurrent users pressing their sessions for a while, through one or
//! several balancer replicas, recording every answer in order.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::TestApp;

/// Every answer a session got, in order: (count, node name); a 504 (the
/// node took the press, its outcome unknown) as [`UNKNOWN`].
pub type Answers = HashMap<String, Vec<(i64, String)>>;

/// How [`press_through_faults`] records a 504.
pub const UNKNOWN: i64 = -1;

/// `workers` tasks share `sessions` (each session belongs to one worker, so
/// its presses are sequential) and press them in turn for `duration`,
/// alternating replicas. Any non-200 answer fails the test.
pub async fn press_for(
    apps: &[Arc<TestApp>],
    sessions: &[String],
    workers: usize,
    duration: Duration,
) -> Answers {
    press(apps, sessions, workers, duration, false).await
}

/// [`press_for`] under a fault: a 504 (a press at a node that died under
/// it) is recorded as [`UNKNOWN`]; any other answer but 200 fails the test.
pub async fn press_through_faults(
    apps: &[Arc<TestApp>],
    sessions: &[String],
    workers: usize,
    duration: Duration,
) -> Answers {
    press(apps, sessions, workers, duration, true).await
}

async fn press(
    apps: &[Arc<TestApp>],
    sessions: &[String],
    workers: usize,
    duration: Duration,
    unknown_allowed: bool,
) -> Answers {
    let deadline = tokio::time::Instant::now() + duration;
    let chunks = super::deal(sessions, workers);
    let tasks: Vec<_> = chunks
        .into_iter()
        .enumerate()
        .map(|(w, chunk)| {
            let apps = apps.to_vec();
            tokio::spawn(async move {
                let mut seen: Answers = HashMap::new();
                let mut turn = w;
                while tokio::time::Instant::now() < deadline {
                    for session in &chunk {
                        let app = &apps[turn % apps.len()];
                        turn += 1;
                        let answer = app.press(session).await;
                        if unknown_allowed && answer.status == 504 {
                            seen.entry(session.clone())
                                .or_default()
                                .push((UNKNOWN, String::new()));
                            continue;
                        }
                        assert_eq!(answer.status, 200, "{session}: {answer:?}");
                        seen.entry(session.clone())
                            .or_default()
                            .push((answer.clicks(), answer.served_by.unwrap_or_default()));
                    }
                }
                seen
            })
        })
        .collect();
    let mut all = Answers::new();
    for task in tasks {
        all.extend(task.await.expect("worker panicked"));
    }
    all
}

/// Asserts every session saw exactly 1, 2, 3, ... with no gap or repeat.
pub fn assert_counts_exact(answers: &Answers) {
    for (session, seen) in answers {
        for (i, (clicks, node)) in seen.iter().enumerate() {
            assert_eq!(
                *clicks,
                i as i64 + 1,
                "{session}: press {} answered {clicks} on {node}; all: {:?}",
                i + 1,
                seen.iter().map(|(c, _)| *c).collect::<Vec<_>>()
            );
        }
    }
}

/// Session time during a workload: session time runs `step / tick` times
/// faster than real time (presses, health checks and fences keep real
/// time), and a replica (each in turn) sweeps every `tick` or as soon as
/// its last sweep is done, until `until`. Session time follows the real
/// time that passed, not the number of sweeps, so the sessions live as
/// many lives on a slow machine as on a fast one. Returns how many sweeps
/// ran; a sweep that fails fails the test.
pub fn expire_on_the_way(
    apps: &[Arc<TestApp>],
    tick: Duration,
    step: Duration,
    until: Duration,
) -> tokio::task::JoinHandle<usize> {
    let apps = apps.to_vec();
    tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let deadline = started + until;
        let mut sweeps = 0;
        let mut advanced = Duration::ZERO;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(tick).await;
            let due = started
                .elapsed()
                .mul_f64(step.as_secs_f64() / tick.as_secs_f64());
            // One hand moves every replica's clock (they share it).
            apps[0].time.advance(due.saturating_sub(advanced));
            advanced = due;
            let app = &apps[sweeps % apps.len()];
            let now = app.sweeper.clock().now_ms();
            app.sweeper.sweep_once(now).await.expect("a sweep failed");
            sweeps += 1;
        }
        sweeps
    })
}
