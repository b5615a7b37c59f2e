//! A client-side balancer over unreliable backends: each call goes to the
//! least-loaded healthy instance; an instance that fails or times out is
//! ejected with exponential back-off and re-admitted after; a failed call is
//! retried on another instance within the caller's deadline. In-flight
//! counts are RAII guards, so a cancelled call never leaks a slot.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::load::InFlight;

/// Something that serves requests: an HTTP endpoint, a database replica,
/// a [`Balancer`] of them.
pub trait Backend: Send + Sync {
    /// What a call sends; cloned for a retry on another instance.
    type Request: Clone + Send;
    /// What a successful call returns.
    type Response: Send;
    /// Why a call failed (the instance is then ejected for a while).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Serves one request.
    fn invoke(
        &self,
        request: Self::Request,
    ) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send;
}

/// Timeouts and ejection back-off of a [`Balancer`].
#[derive(Debug, Clone)]
pub struct BalancerConfig {
    /// Longest one attempt may take before it counts as a failure.
    pub attempt_timeout: Duration,
    /// Budget of a whole call through [`Backend::invoke`] (all attempts).
    pub deadline: Duration,
    /// Ejection after a first failure; doubles with each failure in a row.
    pub base_ejection: Duration,
    /// The longest an instance stays ejected, however often it failed.
    pub max_ejection: Duration,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(1),
            deadline: Duration::from_secs(5),
            base_ejection: Duration::from_millis(100),
            max_ejection: Duration::from_secs(30),
        }
    }
}

/// Why a call through the balancer failed.
#[derive(Debug, thiserror::Error)]
pub enum BalancerError<E: std::error::Error + 'static> {
    /// Built with no backend at all.
    #[error("the balancer has no instance")]
    NoInstance,
    /// Every instance tried answered an error; the last one's.
    #[error("every instance tried failed; the last with: {0}")]
    AllFailed(#[source] E),
    /// Every instance tried outlasted the attempt timeout.
    #[error("every instance tried timed out")]
    AllTimedOut,
    /// The call's deadline passed first.
    #[error("the deadline passed before any instance answered")]
    DeadlineExceeded,
}

struct Instance<B> {
    backend: B,
    in_flight: Arc<AtomicUsize>,
    /// A std mutex: a few fields, never held across an await.
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    failures: u32,
    ejected_until: Option<Instant>,
}

/// Spreads calls over `B`s: the least-loaded instance that is not ejected,
/// retrying a failed call on another one within the deadline.
pub struct Balancer<B> {
    instances: Vec<Instance<B>>,
    config: BalancerConfig,
    /// Tie-break rotation, so equal loads spread.
    rotation: AtomicUsize,
}

enum Outcome<E> {
    Failed(E),
    TimedOut,
}

impl<B: Backend> Balancer<B> {
    /// A balancer over `backends`, all admitted.
    pub fn new(backends: Vec<B>, config: BalancerConfig) -> Self {
        Self {
            instances: backends
                .into_iter()
                .map(|backend| Instance {
                    backend,
                    in_flight: Arc::default(),
                    health: Mutex::default(),
                })
                .collect(),
            config,
            rotation: AtomicUsize::new(0),
        }
    }

    /// Calls in flight on instance `i`.
    pub fn in_flight(&self, i: usize) -> usize {
        self.instances[i].in_flight.load(Ordering::Acquire)
    }

    /// Whether instance `i` is ejected right now.
    pub fn is_ejected(&self, i: usize) -> bool {
        let health = self.instances[i]
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        health
            .ejected_until
            .is_some_and(|until| until > Instant::now())
    }

    /// One call with its own budget: attempts on instances not tried yet,
    /// least loaded first, until one answers or the budget is spent.
    pub async fn invoke_within(
        &self,
        request: B::Request,
        budget: Duration,
    ) -> Result<B::Response, BalancerError<B::Error>> {
        let deadline = Instant::now() + budget;
        let mut tried = vec![false; self.instances.len()];
        let mut last: Option<Outcome<B::Error>> = None;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(BalancerError::DeadlineExceeded);
            }
            let Some(i) = self.choose(&tried, now) else {
                return Err(match last {
                    None => BalancerError::NoInstance,
                    Some(Outcome::Failed(e)) => BalancerError::AllFailed(e),
                    Some(Outcome::TimedOut) => BalancerError::AllTimedOut,
                });
            };
            tried[i] = true;
            let instance = &self.instances[i];
            let _in_flight = InFlight::new(instance.in_flight.clone());
            let timeout = self.config.attempt_timeout.min(deadline - now);
            match tokio::time::timeout(timeout, instance.backend.invoke(request.clone())).await {
                Ok(Ok(response)) => {
                    self.record(i, true);
                    return Ok(response);
                }
                Ok(Err(error)) => {
                    self.record(i, false);
                    last = Some(Outcome::Failed(error));
                }
                Err(_) => {
                    self.record(i, false);
                    last = Some(Outcome::TimedOut);
                }
            }
        }
    }

    /// The least-loaded instance not tried yet among the healthy ones; if
    /// every healthy one was tried, the untried ejected one whose ejection
    /// ends first (better a likely failure than a certain one).
    fn choose(&self, tried: &[bool], now: Instant) -> Option<usize> {
        let n = self.instances.len();
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % n.max(1);
        let order = (0..n).map(|k| (start + k) % n).filter(|&i| !tried[i]);
        let ejected_until = |i: usize| {
            self.instances[i]
                .health
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .ejected_until
                .filter(|until| *until > now)
        };
        let healthy = order
            .clone()
            .filter(|&i| ejected_until(i).is_none())
            .min_by_key(|&i| self.in_flight(i));
        healthy.or_else(|| order.min_by_key(|&i| ejected_until(i)))
    }

    fn record(&self, i: usize, ok: bool) {
        let mut health = self.instances[i]
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if ok {
            *health = Health::default();
            return;
        }
        health.failures = health.failures.saturating_add(1);
        let factor = 2u32.saturating_pow(health.failures.saturating_sub(1).min(16));
        let ejection = self
            .config
            .base_ejection
            .saturating_mul(factor)
            .min(self.config.max_ejection);
        health.ejected_until = Some(Instant::now() + ejection);
    }
}

impl<B: Backend> Backend for Balancer<B> {
    type Request = B::Request;
    type Response = B::Response;
    type Error = BalancerError<B::Error>;

    fn invoke(
        &self,
        request: Self::Request,
    ) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send {
        self.invoke_within(request, self.config.deadline)
    }
}
