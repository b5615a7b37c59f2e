//! Each Lua script beside its decision in `protocol::placement`: the
//! script runs on real Redis from every state of the model's small domain
//! (a mapping on either node or none, a press naming either node stale or
//! none, a fold before or after the group's last unmap, either node down
//! or closed to new sessions;
//! a clean's unmap and its re-base of either node), and its outcome must
//! be the function's.
//! `scripts/test-cluster.sh` runs the same on a cluster, where placement
//! is `claim.lua`.

use crate::common;

use std::time::Duration;

use common::{now_ms, spawn_app_with, start_nodes, test_config, unique};
use nodes_control::store::{NodeState, Placed, StateChange};
use protocol::placement::{self, Placed as Model};
use redis::AsyncCommands;

/// The model's mapping of `id` as Redis holds it: node 0 or 1, and base.
async fn mapping_of(app: &common::TestApp, id: &str, nodes: &[String]) -> placement::Mapping {
    let mapping = app.ctx.store.sessions.lookup(id).await.unwrap()?;
    let node = nodes.iter().position(|n| *n == mapping.node).unwrap() as u8;
    Some((node, mapping.base as u8))
}

/// An unmap in the session's group by another operation: what makes a
/// base folded before it stale.
async fn unmap_in_group(app: &common::TestApp, id: &str) {
    let group = &sha1_smol::Sha1::from(id).digest().to_string()[..2];
    let key = app.ctx.store.sessions.group_key(group, &["unmaps"]);
    let url = &app.config.redis_url;
    if url.starts_with("redis+cluster") {
        let client = redis::cluster::ClusterClient::new(vec![cluster_seed(url)]).unwrap();
        let mut conn = client.get_async_connection().await.unwrap();
        let _: i64 = conn.incr(&key, 1).await.unwrap();
    } else {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: i64 = conn.incr(&key, 1).await.unwrap();
    }
}

fn cluster_seed(url: &str) -> String {
    let first = url.trim_start_matches("redis+cluster://").split(',').next();
    format!("redis://{}", first.unwrap())
}

/// The test sets the nodes' states itself: no health check brings a node
/// it took down back up meanwhile.
async fn without_health_checks() -> common::TestApp {
    let mut config = test_config();
    config.health_check_interval_ms = 3_600_000;
    spawn_app_with(config).await
}

async fn set_up(app: &common::TestApp, nodes: &[String], up: [bool; 2]) {
    for (node, up) in nodes.iter().zip(up) {
        let state = if up { NodeState::Up } else { NodeState::Down };
        app.ctx
            .store
            .nodes
            .set_node_state(node, state, &[])
            .await
            .unwrap();
        if up {
            app.ctx
                .store
                .sessions
                .open_to_new_sessions(node)
                .await
                .unwrap();
        }
    }
    // A cluster places from a view at most 50 ms old.
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn place_lua_decides_as_the_model_s_place_action_in_every_state() {
    let app = without_health_checks().await;
    let started = start_nodes(&app, 2, false).await;
    let nodes: Vec<String> = started.iter().map(|n| n.address.clone()).collect();
    let expires = now_ms() + 60_000;
    let mut checked = 0;
    for standing in [None, Some(0u8), Some(1)] {
        for stale_node in [None, Some(0u8), Some(1)] {
            for folded_before_unmap in [false, true] {
                for up in [[true, true], [true, false], [false, true], [false, false]] {
                    // Node 0 closed to new sessions (a removal or failover
                    // of it under way), where it is up.
                    for closed in [false, true].into_iter().filter(|c| !c || up[0]) {
                        let case = format!(
                            "mapping on {standing:?}, stale node {stale_node:?}, \
                             folded before an unmap {folded_before_unmap}, up {up:?}, \
                             node 0 closed {closed}"
                        );
                        let state = (standing, stale_node, folded_before_unmap, up, closed);
                        let (script, model) = place_both_ways(&app, &nodes, state, expires).await;
                        assert_eq!(script, model, "{case}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 108);
}

/// A new session, mapped to `standing` (if any) with `base`, both nodes up.
async fn session_on(
    app: &common::TestApp,
    nodes: &[String],
    tag: &str,
    standing: Option<u8>,
    base: i64,
) -> String {
    set_up(app, nodes, [true, true]).await;
    let id = unique(tag);
    if let Some(node) = standing {
        let expires = now_ms() + 60_000;
        let preferred = Some(nodes[node as usize].as_str());
        let first = app
            .ctx
            .store
            .sessions
            .place(&id, base, expires, None, preferred, None);
        assert!(matches!(first.await.unwrap(), Placed::Placed(p) if p.created));
    }
    id
}

/// One placement by the script and by `protocol::placement::place`, from
/// a mapping on `standing`, with the press naming `stale_node` stale, a
/// base folded before the group's last unmap or not, the nodes `up`, node
/// 0 `closed` to new sessions or not. It is closed after the nodes' states
/// were read: on a cluster the replica's view still offers it, and
/// `claim.lua` refuses it in the session's group (its closed set).
async fn place_both_ways(
    app: &common::TestApp,
    nodes: &[String],
    (standing, stale_node, folded_before_unmap, up, closed): (
        Option<u8>,
        Option<u8>,
        bool,
        [bool; 2],
        bool,
    ),
    expires: i64,
) -> (Option<Model>, Option<Model>) {
    let store = &app.ctx.store;
    let id = session_on(app, nodes, "model-place", standing, 7).await;
    let mapping = mapping_of(app, &id, nodes).await;
    assert_eq!(mapping.map(|m| m.0), standing);
    let seen = store.sessions.unmaps_seen(&id).await.unwrap();
    if folded_before_unmap {
        unmap_in_group(app, &id).await;
    }
    set_up(app, nodes, up).await;
    if closed {
        // As a removal closes it before it reads the node's sessions. On a
        // cluster: closed in every group (claim.lua reads that), still up
        // in the registry, so the replica's view offers it. On a single
        // Redis: draining, out of `placeable` (place.lua reads that).
        if app.config.redis_url.starts_with("redis+cluster") {
            store
                .sessions
                .close_to_new_sessions(&nodes[0])
                .await
                .unwrap();
        } else {
            let draining = store
                .nodes
                .set_node_state(&nodes[0], NodeState::Draining, &[]);
            draining.await.unwrap();
        }
    }
    let stale = stale_node.map(|n| nodes[n as usize].as_str());
    // Asked for the closed node: the script must refuse it.
    let preferred = closed.then_some(nodes[0].as_str());
    let placed = store
        .sessions
        .place(&id, 3, expires, stale, preferred, Some(&seen));
    let script = match placed.await.unwrap() {
        Placed::Placed(p) => {
            let node = nodes.iter().position(|n| *n == p.mapping.node).unwrap() as u8;
            let base = p.mapping.base as u8;
            if p.created {
                assert!(up[node as usize], "placed on a down node");
                assert!(!(closed && node == 0), "placed on a closed node");
                Some(Model::Created { node, base })
            } else {
                Some(Model::Standing { node, base })
            }
        }
        Placed::Stale => Some(Model::Stale),
        Placed::NoNode => None,
        other => panic!("{other:?}"),
    };
    // The model chooses any node up and open; the script one of them.
    let open = |n: usize| up[n] && !(closed && n == 0);
    let chosen = match script {
        Some(Model::Created { node, .. }) => Some(node),
        _ => (0..2).find(|n| open(*n)).map(|n| n as u8),
    };
    let unmapped_at = u8::from(folded_before_unmap);
    let model = placement::place(mapping, stale_node, 0, unmapped_at, chosen, 3, true);
    (script, model)
}

/// `unmap.lua`'s re-based pairs beside `protocol::placement::rebase`: a
/// session still on the cleaned node takes its new base, one elsewhere is
/// left alone, and neither counts as an unmap.
#[tokio::test]
async fn a_clean_s_rebase_decides_as_the_model_s_rebase_in_every_state() {
    let app = without_health_checks().await;
    let started = start_nodes(&app, 2, false).await;
    let nodes: Vec<String> = started.iter().map(|n| n.address.clone()).collect();
    let store = &app.ctx.store;
    for standing in [None, Some(0u8), Some(1)] {
        for target in [0u8, 1] {
            let id = session_on(&app, &nodes, "model-rebase", standing, 5).await;
            let before = mapping_of(&app, &id, &nodes).await;
            let seen = store.sessions.unmaps_seen(&id).await.unwrap();
            let node = nodes[target as usize].clone();
            let rebased = vec![(id.clone(), 9)];
            common::under_node_lock(store, &node, |lock| async move {
                store
                    .sessions
                    .apply_clean(lock.lock(), lock.node(), &[], None, &rebased)
                    .await
                    .unwrap()
            })
            .await;
            let after = mapping_of(&app, &id, &nodes).await;
            let counted = store.sessions.unmaps_seen(&id).await.unwrap() != seen;
            let case = format!("mapping {before:?}, re-based on node {target}");
            assert_eq!(after, placement::rebase(before, target, 9), "{case}");
            assert!(!counted, "{case}: a re-base counted as an unmap");
        }
    }
}

#[tokio::test]
async fn unmap_lua_decides_as_the_model_s_unmap_in_every_state() {
    let app = without_health_checks().await;
    let started = start_nodes(&app, 2, false).await;
    let nodes: Vec<String> = started.iter().map(|n| n.address.clone()).collect();
    let store = &app.ctx.store;
    for standing in [None, Some(0u8), Some(1)] {
        for target in [0u8, 1] {
            let id = session_on(&app, &nodes, "model-unmap", standing, 5).await;
            let before = mapping_of(&app, &id, &nodes).await;
            let seen = store.sessions.unmaps_seen(&id).await.unwrap();
            let node = nodes[target as usize].clone();
            common::under_node_lock(store, &node, |lock| async move {
                store
                    .sessions
                    .unmap_node(lock.lock(), lock.node())
                    .await
                    .unwrap()
            })
            .await;
            let after = mapping_of(&app, &id, &nodes).await;
            let counted = store.sessions.unmaps_seen(&id).await.unwrap() != seen;
            assert_eq!(
                (after, counted),
                placement::unmap(before, target),
                "mapping {before:?}, unmap of node {target}"
            );
        }
    }
}

/// `set_node_state.lua`'s keep-last flag beside `protocol::press::spare`:
/// a verdict on timeouts alone (inconclusive, no sign of life) takes an up
/// node down only while another node is up; Redis decides it atomically
/// across replicas, after the replica's view. The view counts a draining
/// node as serving too, so it spares more than Redis does; Redis does not
/// spare a draining node, which only the view spares (design.md, Known
/// gaps).
#[tokio::test]
async fn the_keep_last_script_decides_as_the_spare_rule_in_every_state() {
    let app = without_health_checks().await;
    let started = start_nodes(&app, 2, false).await;
    let nodes: Vec<String> = started.iter().map(|n| n.address.clone()).collect();
    let store = &app.ctx.store;
    for other in [NodeState::Up, NodeState::Down, NodeState::Draining] {
        for (node, state) in nodes.iter().zip([NodeState::Up, other]) {
            store.nodes.set_node_state(node, state, &[]).await.unwrap();
        }
        let change = store.nodes.mark_down_unless_last(&nodes[0]).await.unwrap();
        let spared = protocol::press::spare(true, false, other == NodeState::Up);
        let case = format!("node 1 {other:?}: {change:?}");
        match spared {
            None => assert_eq!(change, StateChange::Changed(NodeState::Up), "{case}"),
            Some(_) => assert_eq!(change, StateChange::LastUp, "{case}"),
        }
    }
}
