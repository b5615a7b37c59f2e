//! The `rate` scenario: presses sent open-loop at a fixed rate, whatever
//! the answers do, as wrk2 does. Request `i` is due at `start + i / rate`;
//! its latency is counted from when it was due, so a balancer that stalls
//! is charged for every press that queued behind the stall (coordinated
//! omission corrected), not only for the one that waited. A closed-loop
//! client (wrk, `sessions`) slows down with the server and hides exactly
//! that.
//!
//! Written with hyper's connection-level client rather than reqwest: one
//! keep-alive connection per task, no pool between them, so the generator
//! costs little beside the balancer it measures on the same two cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Latencies are kept from 1 µs to this, at 3 significant digits.
const HIGHEST_US: u64 = 60_000_000;

#[derive(Debug, Clone)]
pub struct RateOptions {
    /// `host:port` of the balancer.
    pub addr: String,
    /// Presses per second offered.
    pub rate: f64,
    pub duration: Duration,
    /// Keep-alive connections the presses share.
    pub connections: usize,
    /// Session ids pressed, drawn in turn: `{prefix}{0..sessions}`.
    pub sessions: usize,
    pub prefix: String,
    /// A press not answered in this time counts as an error.
    pub timeout: Duration,
    /// Names the balancer in the report.
    pub label: String,
}

/// One point of a latency-versus-rate curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatePoint {
    pub label: String,
    pub offered_rps: f64,
    /// Presses answered (any status) or failed, per second of the time
    /// they were sent in.
    pub achieved_rps: f64,
    /// Presses offered: those sent and those left unsent at the stop.
    pub sent: u64,
    /// 2xx answers.
    pub ok: u64,
    /// Other statuses, connection errors and timeouts.
    pub errors: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl RatePoint {
    /// The offered rate was not carried: fewer than 95 % of it answered,
    /// or one press in a hundred failed.
    pub fn saturated(&self) -> bool {
        self.achieved_rps < 0.95 * self.offered_rps || self.errors * 100 > self.sent
    }
}

/// Presses every id once, closed-loop, so that the measured run presses
/// existing sessions only; returns how many failed.
pub async fn warm_up(opts: &RateOptions) -> anyhow::Result<u64> {
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..opts.connections.max(1))
        .map(|_| {
            let (opts, next, failed) = (opts.clone(), next.clone(), failed.clone());
            tokio::spawn(async move {
                let mut conn = None;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= opts.sessions as u64 {
                        return;
                    }
                    if !matches!(press(&opts, &mut conn, i).await, Ok(status) if status < 300) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    Ok(failed.load(Ordering::Relaxed))
}

/// Offers `rate` presses a second for `duration` over `connections`
/// connections. A press waits for a free connection when all are busy, and
/// that wait is in its latency. Presses still unsent at twice the duration
/// (the balancer carries less than half the rate) are not sent and count
/// as errors, so that a run past saturation still ends.
pub async fn run(opts: &RateOptions) -> anyhow::Result<RatePoint> {
    anyhow::ensure!(
        opts.rate.is_finite() && opts.rate >= 1.0,
        "the rate must be at least 1 press a second"
    );
    anyhow::ensure!(opts.sessions > 0, "at least one session is pressed");
    let total = (opts.rate * opts.duration.as_secs_f64()).round() as u64;
    anyhow::ensure!(
        total > 0,
        "a run of {:?} at that rate sends nothing",
        opts.duration
    );
    let interval = Duration::from_secs_f64(1.0 / opts.rate);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_millis(10);
    let schedule = Schedule {
        total,
        start,
        interval,
        stop: start + opts.duration * 2,
    };
    let tasks: Vec<_> = (0..opts.connections.max(1))
        .map(|_| {
            let (opts, next) = (opts.clone(), next.clone());
            tokio::spawn(async move { send_due(&opts, &next, schedule).await })
        })
        .collect();
    let mut latency = new_histogram()?;
    let (mut ok, mut errors, mut last_sent) = (0, 0, start);
    for task in tasks {
        let part = task.await??;
        latency.add(&part.latency)?;
        ok += part.ok;
        errors += part.errors;
        last_sent = last_sent.max(part.last_sent);
    }
    // Over the time the presses were sent in, not until the last answer:
    // one press that hangs to its timeout at the end is not a lower rate.
    let elapsed = (last_sent - start).max(opts.duration).as_secs_f64();
    let unsent = total - latency.len();
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    Ok(RatePoint {
        label: opts.label.clone(),
        offered_rps: opts.rate,
        achieved_rps: latency.len() as f64 / elapsed,
        sent: total,
        ok,
        errors: errors + unsent,
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: latency.max() as f64 / 1000.0,
    })
}

#[derive(Clone, Copy)]
struct Schedule {
    total: u64,
    start: Instant,
    interval: Duration,
    /// No press is sent after it.
    stop: Instant,
}

struct Part {
    latency: Histogram<u64>,
    ok: u64,
    errors: u64,
    last_sent: Instant,
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, HIGHEST_US, 3).context("a latency histogram")
}

/// One connection's share: takes the next press due, waits for its time,
/// sends it. Tokio's timers round a deadline up to the next millisecond
/// and may wake up to a millisecond after it, so a press is woken two
/// milliseconds early and sent up to that early rather than late, and its
/// latency then counts from when it was sent: the generator's timer is not
/// the balancer's delay.
async fn send_due(
    opts: &RateOptions,
    next: &AtomicU64,
    schedule: Schedule,
) -> anyhow::Result<Part> {
    let mut part = Part {
        latency: new_histogram()?,
        ok: 0,
        errors: 0,
        last_sent: schedule.start,
    };
    let mut conn = None;
    loop {
        if Instant::now() >= schedule.stop {
            return Ok(part);
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= schedule.total {
            return Ok(part);
        }
        let due = schedule.start + schedule.interval.mul_f64(i as f64);
        let early = due.checked_sub(Duration::from_millis(2)).unwrap_or(due);
        tokio::time::sleep_until(early).await;
        let sent = Instant::now();
        part.last_sent = part.last_sent.max(sent);
        let outcome = press(opts, &mut conn, i % opts.sessions.max(1) as u64).await;
        let waited = Instant::now() - sent.min(due);
        match outcome {
            Ok(status) => {
                part.latency.saturating_record(waited.as_micros() as u64);
                if status < 300 {
                    part.ok += 1;
                } else {
                    part.errors += 1;
                }
            }
            Err(_) => {
                // A connection error or a timeout: its latency is at least
                // what it waited, and the press failed.
                part.latency.saturating_record(waited.as_micros() as u64);
                part.errors += 1;
            }
        }
    }
}

/// One press of session `i` on this task's connection (opened again after
/// an error); its status.
async fn press(
    opts: &RateOptions,
    conn: &mut Option<SendRequest<Full<Bytes>>>,
    i: u64,
) -> anyhow::Result<u16> {
    let id = format!("{}{i}", opts.prefix);
    let request = hyper::Request::post("/press")
        .header(hyper::header::HOST, opts.addr.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header("x-session-id", id.as_str())
        .body(Full::new(Bytes::from(format!(
            r#"{{"session_id":"{id}"}}"#
        ))))?;
    let exchange = async {
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            *conn = Some(connect(&opts.addr).await?);
        }
        let sender = conn.as_mut().context("connected")?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        response.into_body().collect().await?;
        anyhow::Ok(status)
    };
    match tokio::time::timeout(opts.timeout, exchange).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(e)) => {
            *conn = None;
            Err(e)
        }
        Err(_) => {
            *conn = None;
            anyhow::bail!("no answer in {:?}", opts.timeout)
        }
    }
}

async fn connect(addr: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}: is the balancer running?"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One point per balancer and rate from several rounds of each: every
/// figure the median of its rounds (the upper one of an even count), so
/// that one round the machine stalled in does not bend the curve.
pub fn medians(points: &[RatePoint]) -> Vec<RatePoint> {
    let mut groups: Vec<Vec<&RatePoint>> = Vec::new();
    for p in points {
        match groups
            .iter_mut()
            .find(|g| g[0].label == p.label && g[0].offered_rps == p.offered_rps)
        {
            Some(group) => group.push(p),
            None => groups.push(vec![p]),
        }
    }
    groups
        .into_iter()
        .map(|group| {
            let median = |field: fn(&RatePoint) -> f64| {
                let mut values: Vec<f64> = group.iter().map(|p| field(p)).collect();
                values.sort_by(f64::total_cmp);
                values[values.len() / 2]
            };
            RatePoint {
                label: group[0].label.clone(),
                offered_rps: group[0].offered_rps,
                achieved_rps: median(|p| p.achieved_rps),
                sent: median(|p| p.sent as f64) as u64,
                ok: median(|p| p.ok as f64) as u64,
                errors: median(|p| p.errors as f64) as u64,
                p50_ms: median(|p| p.p50_ms),
                p90_ms: median(|p| p.p90_ms),
                p99_ms: median(|p| p.p99_ms),
                p999_ms: median(|p| p.p999_ms),
                max_ms: median(|p| p.max_ms),
            }
        })
        .collect()
}

/// The curve's table in Markdown: one row per balancer and rate, by
/// balancer, then rate.
pub fn table(points: &[RatePoint]) -> String {
    let mut points: Vec<&RatePoint> = points.iter().collect();
    points.sort_by(|a, b| {
        (a.label.as_str(), a.offered_rps)
            .partial_cmp(&(b.label.as_str(), b.offered_rps))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut out = String::from(
        "| balancer | offered/s | answered/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for p in points {
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {}{} |\n",
            p.label,
            p.offered_rps,
            p.achieved_rps,
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.p999_ms,
            p.max_ms,
            p.errors,
            if p.saturated() { " (saturated)" } else { "" },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(offered: f64, achieved: f64, sent: u64, errors: u64) -> RatePoint {
        RatePoint {
            label: "x".into(),
            offered_rps: offered,
            achieved_rps: achieved,
            sent,
            ok: sent - errors,
            errors,
            p50_ms: 1.0,
            p90_ms: 1.0,
            p99_ms: 1.0,
            p999_ms: 1.0,
            max_ms: 1.0,
        }
    }

    #[test]
    fn each_balancer_and_rate_is_the_median_of_its_rounds() {
        let mut stalled = point(1000.0, 1000.0, 5000, 0);
        stalled.p99_ms = 120.0;
        let mut other = point(1000.0, 990.0, 5000, 0);
        other.label = "y".into();
        let rounds = [
            point(1000.0, 1000.0, 5000, 0),
            stalled,
            point(1000.0, 980.0, 5000, 0),
            other,
        ];
        let medians = medians(&rounds);
        assert_eq!(medians.len(), 2);
        assert_eq!((medians[0].p99_ms, medians[0].achieved_rps), (1.0, 1000.0));
        assert_eq!(medians[1].label, "y");
    }

    #[test]
    fn a_rate_is_saturated_when_it_is_not_carried_or_presses_fail() {
        assert!(!point(1000.0, 990.0, 5000, 0).saturated());
        assert!(point(1000.0, 900.0, 5000, 0).saturated());
        assert!(point(1000.0, 1000.0, 5000, 51).saturated());
        assert!(!point(1000.0, 1000.0, 5000, 50).saturated());
    }
}
