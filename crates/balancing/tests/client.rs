//! The client-side Balancer over fake backends: one failing, one slow, one
//! healthy. Time is paused, so the run is exact and instant.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use balancing::{Backend, Balancer, BalancerConfig, BalancerError};

#[derive(Debug, thiserror::Error)]
#[error("backend {0} failed")]
struct Failed(&'static str);

struct Fake {
    name: &'static str,
    latency: Duration,
    failing: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Fake {
    fn new(name: &'static str, latency_ms: u64, failing: bool) -> Self {
        Self {
            name,
            latency: Duration::from_millis(latency_ms),
            failing: Arc::new(AtomicBool::new(failing)),
            calls: Arc::default(),
        }
    }
}

impl Backend for Fake {
    type Request = u32;
    type Response = &'static str;
    type Error = Failed;

    async fn invoke(&self, _request: u32) -> Result<&'static str, Failed> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        if self.failing.load(Ordering::SeqCst) {
            Err(Failed(self.name))
        } else {
            Ok(self.name)
        }
    }
}

fn config() -> BalancerConfig {
    BalancerConfig {
        attempt_timeout: Duration::from_millis(500),
        deadline: Duration::from_secs(2),
        base_ejection: Duration::from_millis(200),
        max_ejection: Duration::from_secs(5),
    }
}

/// Sends `n` requests, one every `gap`, each in its own task; returns the answers.
async fn load(
    balancer: &Arc<Balancer<Fake>>,
    n: usize,
    gap: Duration,
) -> Vec<Result<&'static str, String>> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let balancer = balancer.clone();
        tasks.push(tokio::spawn(async move {
            balancer.invoke(i as u32).await.map_err(|e| e.to_string())
        }));
        tokio::time::sleep(gap).await;
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(start_paused = true)]
async fn traffic_drains_from_failing_and_slow_instances_and_no_request_fails() {
    let (failing, slow, healthy) = (
        Fake::new("failing", 1, true),
        Fake::new("slow", 40, false),
        Fake::new("healthy", 2, false),
    );
    let calls = [
        failing.calls.clone(),
        slow.calls.clone(),
        healthy.calls.clone(),
    ];
    let balancer = Arc::new(Balancer::new(vec![failing, slow, healthy], config()));
    let answers = load(&balancer, 600, Duration::from_millis(1)).await;
    assert!(
        answers.iter().all(|a| a.is_ok()),
        "a request failed while a healthy instance existed"
    );
    let served = |name| answers.iter().filter(|a| a.as_deref() == Ok(name)).count();
    let calls: Vec<usize> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    // The failing instance is ejected with back-off: a few calls, not a third.
    assert!(calls[0] < 40, "failing instance got {} calls", calls[0]);
    assert_eq!(served("failing"), 0);
    // The slow one holds its requests longer, so least-loaded sends it less.
    assert!(
        served("slow") * 3 < served("healthy"),
        "slow {} vs healthy {}",
        served("slow"),
        served("healthy")
    );
    for i in 0..3 {
        assert_eq!(
            balancer.in_flight(i),
            0,
            "in-flight count leaked on instance {i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_recovered_instance_gets_traffic_again() {
    let (flaky, steady) = (Fake::new("flaky", 1, true), Fake::new("steady", 1, false));
    let (flaky_failing, flaky_calls) = (flaky.failing.clone(), flaky.calls.clone());
    let balancer = Arc::new(Balancer::new(vec![flaky, steady], config()));
    let first = load(&balancer, 100, Duration::from_millis(2)).await;
    assert!(first.iter().all(|a| a.as_deref() == Ok("steady")));
    assert!(balancer.is_ejected(0) || flaky_calls.load(Ordering::SeqCst) > 0);
    flaky_failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(6)).await; // past the longest ejection
    let second = load(&balancer, 100, Duration::from_millis(2)).await;
    let flaky_served = second
        .iter()
        .filter(|a| a.as_deref() == Ok("flaky"))
        .count();
    assert!(
        flaky_served >= 30,
        "recovered instance served only {flaky_served} of 100"
    );
    assert!(!balancer.is_ejected(0));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_retried_elsewhere_within_the_deadline() {
    let (hung, fine) = (
        Fake::new("hung", 10_000, false),
        Fake::new("fine", 5, false),
    );
    let balancer = Balancer::new(vec![hung, fine], config());
    // Whichever is tried first, the answer comes from `fine` within the deadline.
    for i in 0..4 {
        let started = tokio::time::Instant::now();
        assert_eq!(balancer.invoke(i).await.unwrap(), "fine");
        assert!(started.elapsed() <= Duration::from_millis(510));
    }
    assert!(
        balancer.is_ejected(0),
        "the hung instance is ejected after timing out"
    );
    assert_eq!(balancer.in_flight(0), 0);
}

#[tokio::test(start_paused = true)]
async fn every_instance_failing_is_an_error_and_the_deadline_is_kept() {
    let balancer = Balancer::new(
        vec![Fake::new("a", 1, true), Fake::new("b", 1, true)],
        config(),
    );
    match balancer.invoke(1).await {
        Err(BalancerError::AllFailed(Failed(_))) => {}
        other => panic!("expected AllFailed, got {other:?}"),
    }
    let slow = Balancer::new(
        vec![Fake::new("a", 10_000, false), Fake::new("b", 10_000, false)],
        config(),
    );
    let started = tokio::time::Instant::now();
    assert!(slow
        .invoke_within(1, Duration::from_millis(300))
        .await
        .is_err());
    assert!(started.elapsed() <= Duration::from_millis(300));
    let empty: Balancer<Fake> = Balancer::new(vec![], config());
    assert!(matches!(
        empty.invoke(1).await,
        Err(BalancerError::NoInstance)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_balancer_is_itself_a_backend() {
    let inner = Balancer::new(vec![Fake::new("x", 1, false)], config());
    let outer = Balancer::new(vec![inner], config());
    assert_eq!(outer.invoke(7).await.unwrap(), "x");
}
