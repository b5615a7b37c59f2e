//! Least-connections and power of two choices: load follows in-flight picks.

use balancing::{LeastConnections, Node, PowerOfTwoChoices, Random, Strategy};

fn set(s: &dyn Strategy, n: usize) {
    s.set_nodes(
        &(0..n)
            .map(|i| Node::unweighted(&format!("n{i}")))
            .collect::<Vec<_>>(),
    );
}

#[test]
fn least_connections_picks_the_node_with_fewer_in_flight() {
    let lc = LeastConnections::new();
    set(&lc, 3);
    let a = lc.pick(b"").unwrap();
    let b = lc.pick(b"").unwrap();
    assert_ne!(a.node(), b.node());
    let c = lc.pick(b"").unwrap();
    // Three nodes, three picks held: one each.
    let mut held = vec![a.node().clone(), b.node().clone(), c.node().clone()];
    held.sort();
    held.dedup();
    assert_eq!(held.len(), 3);
    // Release b's slot: b's node is now the least loaded.
    let freed = b.node().clone();
    drop(b);
    assert_eq!(lc.pick(b"").unwrap().node(), &freed);
}

#[test]
fn dropped_and_panicked_requests_release_their_slot() {
    let lc = std::sync::Arc::new(LeastConnections::new());
    set(lc.as_ref(), 2);
    let node = {
        let pick = lc.pick(b"").unwrap();
        assert_eq!(lc.tracker().load(pick.node()), 1);
        pick.node().clone()
    };
    assert_eq!(lc.tracker().load(&node), 0);
    let lc2 = lc.clone();
    let result = std::thread::spawn(move || {
        let _pick = lc2.pick(b"").unwrap();
        panic!("request handler panicked");
    })
    .join();
    assert!(result.is_err());
    for i in 0..2 {
        assert_eq!(lc.tracker().load(&format!("n{i}").as_str().into()), 0);
    }
}

#[tokio::test]
async fn a_cancelled_request_future_releases_its_slot() {
    let lc = std::sync::Arc::new(LeastConnections::new());
    set(lc.as_ref(), 2);
    let task = tokio::spawn({
        let lc = lc.clone();
        async move {
            let _pick = lc.pick(b"").unwrap();
            std::future::pending::<()>().await;
        }
    });
    tokio::task::yield_now().await;
    let loaded: usize = (0..2)
        .map(|i| lc.tracker().load(&format!("n{i}").as_str().into()))
        .sum();
    assert_eq!(loaded, 1);
    task.abort();
    let _ = task.await;
    let loaded: usize = (0..2)
        .map(|i| lc.tracker().load(&format!("n{i}").as_str().into()))
        .sum();
    assert_eq!(loaded, 0);
}

#[test]
fn p2c_prefers_the_less_loaded_of_two() {
    let p2c = PowerOfTwoChoices::new(7);
    set(&p2c, 2);
    // Load n0 heavily; with two nodes both are always the candidates.
    let n0 = "n0".into();
    let _held: Vec<_> = (0..5).map(|_| p2c.tracker().start(&n0)).collect();
    for _ in 0..50 {
        assert_eq!(p2c.pick(b"").unwrap().node().as_ref(), "n1");
    }
}

#[test]
fn p2c_spreads_held_load_evenly() {
    let p2c = PowerOfTwoChoices::new(42);
    set(&p2c, 10);
    let held: Vec<_> = (0..1000).map(|_| p2c.pick(b"").unwrap()).collect();
    let loads: Vec<usize> = (0..10)
        .map(|i| p2c.tracker().load(&format!("n{i}").as_str().into()))
        .collect();
    let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
    assert!(max - min <= 3, "{loads:?}");
    drop(held);
}

#[test]
fn random_is_reproducible_with_a_seed_and_follows_weights() {
    let run = |seed| {
        let r = Random::new(seed);
        r.set_nodes(&[Node::new("a", 3).unwrap(), Node::unweighted("b")]);
        (0..4000)
            .map(|_| r.pick(b"").unwrap().into_node())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    let a = run(3).iter().filter(|n| n.as_ref() == "a").count() as f64 / 4000.0;
    assert!(
        (0.72..0.78).contains(&a),
        "a got {a:.3} of picks, expected 0.75"
    );
}
