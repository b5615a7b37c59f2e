//! Consistent hashing (ring, bounded loads), Maglev, rendezvous, key/IP hash.

use std::collections::HashMap;

use balancing::{
    ConsistentHash, IpHash, KeyHash, LoadTracker, Maglev, Node, Rendezvous, Strategy,
    MAX_POINTS_PER_NODE, MAX_WEIGHT,
};
use proptest::prelude::*;

fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::unweighted(&format!("node-{i}")))
        .collect()
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user-{i}")).collect()
}

fn assign(s: &dyn Strategy, keys: &[String]) -> HashMap<String, String> {
    keys.iter()
        .map(|k| (k.clone(), s.pick(k.as_bytes()).unwrap().node().to_string()))
        .collect()
}

#[test]
fn the_ring_maps_a_key_to_the_same_node_every_time() {
    let ring = ConsistentHash::new(150);
    ring.set_nodes(&nodes(5));
    let first = assign(&ring, &keys(200));
    for _ in 0..3 {
        assert_eq!(assign(&ring, &keys(200)), first);
    }
    // And in another instance (another process, another replica).
    let other = ConsistentHash::new(150);
    other.set_nodes(&nodes(5));
    assert_eq!(assign(&other, &keys(200)), first);
}

#[test]
fn removing_a_node_from_the_ring_moves_only_its_keys() {
    let ring = ConsistentHash::new(150);
    let all = nodes(5);
    ring.set_nodes(&all);
    let before = assign(&ring, &keys(200));
    ring.set_nodes(&all[..4]); // node-4 leaves
    let after = assign(&ring, &keys(200));
    let mut moved = 0;
    for (key, node) in &before {
        if node == "node-4" {
            moved += 1;
            assert_ne!(after[key], "node-4");
        } else {
            assert_eq!(&after[key], node, "{key} moved though its node stayed");
        }
    }
    assert!(moved > 0);
}

#[test]
fn adding_a_node_to_the_ring_moves_only_keys_to_it_about_one_in_n() {
    let ring = ConsistentHash::new(150);
    let all = nodes(5);
    ring.set_nodes(&all[..4]);
    let keys = keys(2000);
    let before = assign(&ring, &keys);
    ring.set_nodes(&all);
    let after = assign(&ring, &keys);
    let moved: Vec<&String> = keys.iter().filter(|k| before[*k] != after[*k]).collect();
    for key in &moved {
        assert_eq!(after[*key], "node-4", "{key} moved to an old node");
    }
    let share = moved.len() as f64 / keys.len() as f64;
    assert!(
        (0.12..0.28).contains(&share),
        "moved {share:.3} of keys, expected about 1/5"
    );
}

#[test]
fn bounded_loads_keep_every_node_under_c_times_the_average() {
    let c = 1.25;
    let ring = ConsistentHash::bounded(150, c, LoadTracker::new());
    ring.set_nodes(&nodes(4));
    // Skewed keys: a plain ring would put many on few nodes.
    let held: Vec<_> = (0..200)
        .map(|i| ring.pick(format!("hot-{}", i % 7).as_bytes()).unwrap())
        .collect();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for pick in &held {
        *counts.entry(pick.node().to_string()).or_default() += 1;
    }
    let cap = (c * 200.0 / 4.0).ceil() as usize;
    for (node, count) in &counts {
        assert!(*count <= cap, "{node} holds {count} > {cap}: {counts:?}");
        assert_eq!(ring.tracker().load(&node.as_str().into()), *count);
    }
    drop(held);
    for node in nodes(4) {
        assert_eq!(
            ring.tracker().load(node.id()),
            0,
            "a dropped pick kept its slot"
        );
    }
}

#[test]
fn maglev_shares_stay_within_one_percent_of_weight_shares_from_3_to_100_nodes() {
    let maglev = Maglev::default();
    for n in [3, 5, 10, 33, 64, 100] {
        maglev.set_nodes(&nodes(n));
        let shares = maglev.shares();
        let total: usize = shares.iter().map(|(_, s)| s).sum();
        let expected = total as f64 / n as f64;
        for (node, share) in &shares {
            let error = (*share as f64 - expected).abs() / expected;
            assert!(
                error < 0.01,
                "{n} nodes: {node} has {share}, expected {expected:.1}"
            );
        }
    }
    let weighted: Vec<Node> = (0..6)
        .map(|i| Node::new(&format!("w{i}"), i + 1).unwrap())
        .collect();
    maglev.set_nodes(&weighted);
    let total_weight: u32 = weighted.iter().map(|n| n.weight()).sum();
    for ((_, share), node) in maglev.shares().iter().zip(&weighted) {
        let expected = 65_537.0 * f64::from(node.weight()) / f64::from(total_weight);
        assert!(
            (*share as f64 - expected).abs() / expected < 0.01,
            "{node:?}: {share} vs {expected:.0}"
        );
    }
}

#[test]
fn removing_a_maglev_node_moves_few_keys_of_the_others() {
    let maglev = Maglev::default();
    let all = nodes(10);
    maglev.set_nodes(&all);
    let keys = keys(100_000);
    let before = assign(&maglev, &keys);
    maglev.set_nodes(&all[..9]);
    let after = assign(&maglev, &keys);
    let others: Vec<&String> = keys.iter().filter(|k| before[*k] != "node-9").collect();
    let disturbed = others.iter().filter(|k| before[**k] != after[**k]).count();
    let share = disturbed as f64 / others.len() as f64;
    // Measured: 0.29 % of the other nodes' keys move (benches/strategies.rs).
    assert!(
        share < 0.01,
        "{:.2} % of the others' keys moved",
        share * 100.0
    );
    for key in keys.iter().filter(|k| before[*k] == "node-9") {
        assert_ne!(after[key], "node-9");
    }
}

#[test]
fn rendezvous_moves_only_the_departed_nodes_keys_and_follows_weights() {
    let hrw = Rendezvous::new();
    let all = nodes(6);
    hrw.set_nodes(&all);
    let keys = keys(20_000);
    let before = assign(&hrw, &keys);
    hrw.set_nodes(&all[1..]);
    let after = assign(&hrw, &keys);
    for key in &keys {
        if before[key] != "node-0" {
            assert_eq!(before[key], after[key]);
        }
    }
    hrw.set_nodes(&[Node::new("heavy", 3).unwrap(), Node::unweighted("light")]);
    let heavy = keys
        .iter()
        .filter(|k| hrw.pick(k.as_bytes()).unwrap().node().as_ref() == "heavy")
        .count();
    let share = heavy as f64 / keys.len() as f64;
    assert!(
        (0.72..0.78).contains(&share),
        "heavy got {share:.3}, expected 0.75"
    );
}

#[test]
fn key_hash_is_stable_and_ip_hash_keeps_a_slash_24_together() {
    let kh = KeyHash::new();
    kh.set_nodes(&nodes(7));
    assert_eq!(assign(&kh, &keys(100)), assign(&kh, &keys(100)));
    let ip = IpHash::new();
    ip.set_nodes(&nodes(7));
    let home = ip.pick(b"192.0.2.1").unwrap().node().clone();
    for host in 2..255 {
        assert_eq!(
            ip.pick(format!("192.0.2.{host}").as_bytes())
                .unwrap()
                .node(),
            &home
        );
    }
    let spread: std::collections::HashSet<_> = (0..50)
        .map(|n| {
            ip.pick(format!("10.{n}.0.1").as_bytes())
                .unwrap()
                .node()
                .clone()
        })
        .collect();
    assert!(spread.len() > 3, "different /24s spread over nodes");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// For any set and any departing node, only that node's keys move.
    #[test]
    fn the_ring_moves_only_the_departed_nodes_keys(n in 2usize..12, gone in 0usize..12, vnodes in 1u32..200) {
        let gone = gone % n;
        let all = nodes(n);
        let ring = ConsistentHash::new(vnodes);
        ring.set_nodes(&all);
        let keys = keys(300);
        let before = assign(&ring, &keys);
        let rest: Vec<Node> = all.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, n)| n.clone()).collect();
        ring.set_nodes(&rest);
        let after = assign(&ring, &keys);
        let gone_id = format!("node-{gone}");
        for key in &keys {
            if before[key] != gone_id {
                prop_assert_eq!(&before[key], &after[key]);
            } else {
                prop_assert_ne!(&after[key], &gone_id);
            }
        }
    }

    /// Every hashing strategy answers the same node for the same key.
    #[test]
    fn hashing_strategies_are_deterministic(n in 1usize..30, key in ".{0,40}") {
        let set = nodes(n);
        let strategies: Vec<Box<dyn Strategy>> = vec![
            Box::new(ConsistentHash::new(50)),
            Box::new(Maglev::new(4099)),
            Box::new(Rendezvous::new()),
            Box::new(KeyHash::new()),
        ];
        for s in &strategies {
            s.set_nodes(&set);
            let a = s.pick(key.as_bytes()).unwrap().into_node();
            let b = s.pick(key.as_bytes()).unwrap().into_node();
            prop_assert_eq!(a, b);
        }
    }
}

#[test]
fn the_heaviest_node_puts_a_bounded_number_of_points_on_the_ring() {
    // u32::MAX virtual nodes times the heaviest weight would overflow u32.
    let ring = ConsistentHash::new(u32::MAX);
    ring.set_nodes(&[Node::new("heavy", MAX_WEIGHT).unwrap()]);
    assert_eq!(ring.points(), MAX_POINTS_PER_NODE as usize);
    let ring = ConsistentHash::new(150);
    ring.set_nodes(&[Node::new("a", 3).unwrap(), Node::unweighted("b")]);
    assert_eq!(ring.points(), 150 * 4, "below the cap, weight still counts");
}
