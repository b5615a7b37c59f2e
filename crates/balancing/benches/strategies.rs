//! Strategy benchmarks (issue 4). First a report of load spread and keys
//! moved (not timings, printed once), then criterion timings of one pick per
//! strategy at 3, 100 and 1,000 nodes and of table/ring builds.
//!
//!     cargo bench -p balancing --bench strategies

use std::collections::HashMap;
use std::hint::black_box;

use balancing::{
    build, ConsistentHash, LoadTracker, Maglev, Node, Rendezvous, SmoothWeighted, Strategy,
    StrategyKind, MAX_WEIGHT,
};
use criterion::{BenchmarkId, Criterion};

fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::unweighted(&format!("10.0.{}.{}:8080", i / 250, i % 250)))
        .collect()
}

const KEYS: usize = 100_000;

fn key(i: usize) -> Vec<u8> {
    format!("user-{i}").into_bytes()
}

/// Coefficient of variation and max/mean of per-node key counts.
fn spread(s: &dyn Strategy, n: usize) -> (f64, f64) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for i in 0..KEYS {
        *counts
            .entry(s.pick(&key(i)).unwrap().node().to_string())
            .or_default() += 1;
    }
    let mean = KEYS as f64 / n as f64;
    let var = (0..n)
        .map(|i| {
            let c = counts
                .get(&nodes(n)[i].id().to_string())
                .copied()
                .unwrap_or(0) as f64;
            (c - mean).powi(2)
        })
        .sum::<f64>()
        / n as f64;
    let max = *counts.values().max().unwrap() as f64;
    (var.sqrt() / mean, max / mean)
}

/// Share of keys that change node when one of `n` nodes leaves, and the
/// share of the *other* nodes' keys among them.
fn moved(s: &dyn Strategy, n: usize) -> (f64, f64) {
    let all = nodes(n);
    s.set_nodes(&all);
    let before: Vec<String> = (0..KEYS)
        .map(|i| s.pick(&key(i)).unwrap().node().to_string())
        .collect();
    s.set_nodes(&all[..n - 1]);
    let leaving = all[n - 1].id().to_string();
    let (mut moved, mut others_moved, mut others) = (0, 0, 0);
    for (i, was) in before.iter().enumerate() {
        let now = s.pick(&key(i)).unwrap().node().to_string();
        if *was != leaving {
            others += 1;
            if now != *was {
                others_moved += 1;
            }
        }
        if now != *was {
            moved += 1;
        }
    }
    (
        moved as f64 / KEYS as f64,
        others_moved as f64 / others as f64,
    )
}

/// Builds a fresh strategy of one configuration.
type MakeStrategy = Box<dyn Fn() -> Box<dyn Strategy>>;

fn report() {
    println!("\nload spread over {KEYS} keys and keys moved when 1 of 10 nodes leaves");
    println!("| strategy | nodes | CV | max/mean | moved (all) | moved (others') |");
    println!("|---|---|---|---|---|---|");
    let mut rows: Vec<(String, MakeStrategy)> = Vec::new();
    for v in [10u32, 100, 150, 1000] {
        rows.push((
            format!("ring, {v} vnodes"),
            Box::new(move || Box::new(ConsistentHash::new(v))),
        ));
    }
    rows.push((
        "maglev, 65537".into(),
        Box::new(|| Box::new(Maglev::default())),
    ));
    rows.push((
        "rendezvous".into(),
        Box::new(|| Box::new(Rendezvous::new())),
    ));
    for (name, make) in rows {
        for n in [10, 100] {
            let s = make();
            s.set_nodes(&nodes(n));
            let (cv, max_mean) = spread(s.as_ref(), n);
            let (all, others) = if n == 10 {
                moved(make().as_ref(), 10)
            } else {
                (f64::NAN, f64::NAN)
            };
            let fmt = |x: f64| {
                if x.is_nan() {
                    "".to_string()
                } else {
                    format!("{:.2} %", x * 100.0)
                }
            };
            println!(
                "| {name} | {n} | {cv:.3} | {max_mean:.3} | {} | {} |",
                fmt(all),
                fmt(others)
            );
        }
    }
    println!();
}

fn bench_picks(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    for n in [3usize, 100, 1000] {
        for kind in StrategyKind::ALL {
            let s = build(kind, 150, None, LoadTracker::new(), 1);
            s.set_nodes(&nodes(n));
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(kind.as_str(), n), &n, |b, _| {
                b.iter(|| {
                    i = i.wrapping_add(1);
                    black_box(s.pick(black_box(&i.to_le_bytes())))
                })
            });
        }
        let bounded = build(
            StrategyKind::ConsistentHash,
            150,
            Some(1.25),
            LoadTracker::new(),
            1,
        );
        bounded.set_nodes(&nodes(n));
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new("ch-bounded", n), &n, |b, _| {
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(bounded.pick(black_box(&i.to_le_bytes())))
            })
        });
    }
    group.finish();
}

fn bench_builds(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    group.sample_size(10);
    for n in [10usize, 100, 1000] {
        let set = nodes(n);
        group.bench_with_input(BenchmarkId::new("maglev-65537", n), &set, |b, set| {
            b.iter(|| Maglev::default().set_nodes(black_box(set)))
        });
        group.bench_with_input(BenchmarkId::new("ring-150", n), &set, |b, set| {
            b.iter(|| ConsistentHash::new(150).set_nodes(black_box(set)))
        });
        // The worst cycle: weights that share no divisor, sum capped at
        // MAX_CYCLE turns, each turn a pass over the nodes.
        let heavy: Vec<Node> = (0..n)
            .map(|i| Node::new(&format!("n{i}"), MAX_WEIGHT - i as u32 % 7).unwrap())
            .collect();
        group.bench_with_input(BenchmarkId::new("wrr-heaviest", n), &heavy, |b, set| {
            b.iter(|| SmoothWeighted::new().set_nodes(black_box(set)))
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    if !std::env::args().any(|a| a == "--list" || a == "--test") {
        report();
    }
    bench_picks(&mut c);
    bench_builds(&mut c);
    c.final_summary();
}
