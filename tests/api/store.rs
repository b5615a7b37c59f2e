//! The Redis layout (store/mod.rs): session groups holding mappings in
//! hashed buckets and each node's index, node numbers. What it must never
//! do: leave keys behind, let an old index entry end a session placed
//! anew, or give a number to a second address.

use std::time::Duration;

use crate::common;

use common::{now_ms, spawn_app, start_nodes, unique};
use nodes_control::store::{NodeState, Placed};

/// Every session-group key of this test's prefix that starts with `kind`,
/// from every server (a cluster spreads the groups over its primaries).
async fn keys(prefix: &str, kind: &str) -> Vec<String> {
    let mut found = Vec::new();
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}{{s:*}}{kind}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        found.extend(keys);
    }
    found
}

#[tokio::test]
async fn the_placement_script_and_the_plain_read_agree_on_every_bucket() {
    let app = spawn_app().await;
    let _nodes = start_nodes(&app, 1, false).await;
    let tag = unique("bucket");
    // Ids that land in many buckets: Lua's SHA-1 and ours must agree on all.
    for i in 0..200 {
        let id = format!("{tag}-{i}-é");
        app.ctx
            .store
            .sessions
            .place(&id, i, now_ms() + 60_000, None, None, None)
            .await
            .unwrap();
        let mapping = app.ctx.store.sessions.lookup(&id).await.unwrap();
        assert_eq!(mapping.map(|m| m.base), Some(i), "{id}");
    }
    let buckets = keys(app.ctx.store.core().prefix(), "mappings:").await;
    assert!(buckets.len() > 150, "200 ids in {} buckets", buckets.len());
}

/// Placements asked for at once go to Redis in batches (store/sessions/placement.rs);
/// each must still be decided as if it ran alone, one after another.
#[tokio::test]
async fn placements_asked_for_at_once_are_decided_one_after_another() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 3, false).await;
    let tag = unique("at-once");
    let store = std::sync::Arc::new(app.ctx.store.clone());
    let place_all = |ids: Vec<String>| {
        let placements = ids.into_iter().map(|id| {
            let store = store.clone();
            async move {
                let placed = store
                    .sessions
                    .place(&id, 0, now_ms() + 60_000, None, None, None)
                    .await;
                match placed.unwrap() {
                    Placed::Placed(placement) => placement,
                    other => panic!("{id}: {other:?}"),
                }
            }
        });
        futures::future::join_all(placements)
    };
    let counts = || async {
        let listed = app.nodes().await;
        let mut counts = Vec::new();
        for node in &nodes {
            let indexed = store
                .sessions
                .node_sessions(&node.address)
                .await
                .unwrap()
                .len();
            let counted = listed
                .iter()
                .find(|n| n["address"] == node.address.as_str())
                .and_then(|n| n["active_sessions"].as_u64());
            assert_eq!(counted, Some(indexed as u64), "{}", node.address);
            counts.push(indexed);
        }
        counts.sort();
        counts
    };

    // 300 new sessions at once: least sessions, each choice seeing the
    // ones before it, puts exactly 100 on each of three nodes of weight 1.
    let placed = place_all((0..300).map(|i| format!("{tag}-{i}")).collect()).await;
    assert!(placed.iter().all(|p| p.created));
    assert_eq!(counts().await, [100, 100, 100]);

    // 30 first presses of one more, at once: one mapping, created once,
    // and every press was told the same node; it is counted once.
    let raced = place_all(vec![format!("{tag}-raced"); 30]).await;
    assert_eq!(raced.iter().filter(|p| p.created).count(), 1);
    assert!(raced.iter().all(|p| p.mapping == raced[0].mapping));
    assert_eq!(counts().await, [100, 100, 101]);
}

#[tokio::test]
async fn a_sweep_leaves_no_mapping_or_index_behind() {
    let app = spawn_app().await;
    let _nodes = start_nodes(&app, 2, false).await;
    let tag = unique("swept");
    for i in 0..50 {
        let id = format!("{tag}-{i}");
        app.ctx
            .store
            .sessions
            .place(&id, 0, 1, None, None, None)
            .await
            .unwrap();
    }
    let prefix = app.ctx.store.core().prefix().to_owned();
    assert!(!keys(&prefix, "due:").await.is_empty());
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.unmapped, 50, "{report:?}");
    assert_eq!(keys(&prefix, "due:").await, Vec::<String>::new());
    assert_eq!(keys(&prefix, "mappings:").await, Vec::<String>::new());
}

#[tokio::test]
async fn an_old_index_entry_does_not_end_a_session_placed_anew() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let id = unique("anew");
    let store = &app.ctx.store;
    store
        .sessions
        .place(&id, 0, 1, None, None, None)
        .await
        .unwrap();
    // Its node failed (as a press saw it): placed anew, to live an hour.
    store
        .sessions
        .place(
            &id,
            7,
            now_ms() + 3_600_000,
            Some(&nodes[0].address),
            None,
            None,
        )
        .await
        .unwrap();
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.unmapped, 0, "{report:?}");
    let mapping = store
        .sessions
        .lookup(&id)
        .await
        .unwrap()
        .expect("still mapped");
    assert_eq!(mapping.base, 7);
    // The stale entry was replaced by the live one: one index, one entry.
    let indexes = keys(store.core().prefix(), "due:").await;
    assert_eq!(
        indexes.len(),
        1,
        "the node's index in one group: {indexes:?}"
    );
    assert_eq!(
        store
            .sessions
            .node_sessions(&nodes[0].address)
            .await
            .unwrap(),
        [id]
    );
}

#[tokio::test]
async fn removing_a_node_takes_its_mappings_and_indexes_along() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let tag = unique("removed");
    for i in 0..20 {
        assert_eq!(app.press(&format!("{tag}-{i}")).await.status, 200);
    }
    let prefix = app.ctx.store.core().prefix().to_owned();
    assert!(!keys(&prefix, "mappings:").await.is_empty());
    app.remove_node(&nodes[0].address).await;
    assert_eq!(keys(&prefix, "due:").await, Vec::<String>::new());
    assert_eq!(keys(&prefix, "mappings:").await, Vec::<String>::new());
}

#[tokio::test]
async fn a_node_number_is_never_given_to_another_address() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 2, false).await;
    let number = |address: String| {
        let store = app.ctx.store.clone();
        async move {
            store
                .nodes
                .get_node(&address)
                .await
                .unwrap()
                .unwrap()
                .number
        }
    };
    let first = number(nodes[0].address.clone()).await;
    let second = number(nodes[1].address.clone()).await;
    assert_ne!(first, second);
    // Removed and added again: a new number, so a replica that remembers
    // the old one can never send a session of the new life to the old.
    app.remove_node(&nodes[0].address).await;
    app.add_node(&nodes[0].address, &nodes[0].name).await;
    let again = number(nodes[0].address.clone()).await;
    assert!(
        again != first && again != second,
        "{first} {second} {again}"
    );
}

/// Runs `cmd` on the server that owns its key (the others, on a cluster,
/// answer MOVED and are skipped).
async fn on_owner<T: redis::FromRedisValue>(cmd: &redis::Cmd) -> T {
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        if let Ok(value) = cmd.query_async(&mut conn).await {
            return value;
        }
    }
    panic!("no Redis server took {cmd:?}");
}

/// The group (first two hex digits of SHA-1) and bucket (first four) of an
/// id, as the scripts compute them.
fn bucket_of(id: &str) -> String {
    sha1_smol::Sha1::from(id).digest().to_string()[..4].to_owned()
}

/// `n` ids of one session group (so in one list of a node).
fn ids_of_one_group(tag: &str, n: usize) -> Vec<String> {
    let first = format!("{tag}-0");
    let group = bucket_of(&first)[..2].to_owned();
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .filter(|id| bucket_of(id)[..2] == group)
        .take(n)
        .collect()
}

/// The count `GET /nodes` shows for the node at `address` (after a sweep,
/// its tally of the indexes).
async fn active_sessions(app: &common::TestApp, address: &str) -> Option<u64> {
    app.nodes()
        .await
        .iter()
        .find(|n| n["address"] == address)
        .and_then(|n| n["active_sessions"].as_u64())
}

/// Writes `id`'s mapping to node `number`, base 0, ending at `exp`, as
/// every release writes it; returns its group.
async fn write_mapping(
    store: &nodes_control::store::Store,
    id: &str,
    number: u64,
    exp: i64,
) -> String {
    let bucket = bucket_of(id);
    let group = bucket[..2].to_owned();
    let _: i64 = on_owner(
        redis::cmd("HSET")
            .arg(store.core().group_key(&group, &["mappings", &bucket]))
            .arg(id)
            .arg(format!("{number}:0:{exp}")),
    )
    .await;
    group
}

#[tokio::test]
async fn an_entry_whose_mapping_is_gone_is_dropped_and_not_counted() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let address = &nodes[0].address;
    let ids = ids_of_one_group(&unique("left"), 3);
    for (i, id) in ids.iter().enumerate() {
        let exp = if i < 2 {
            now_ms() - 1_000
        } else {
            now_ms() + 60_000
        };
        store
            .sessions
            .place(id, 0, exp, None, None, None)
            .await
            .unwrap();
    }
    // The first two lose their mappings behind their list entries (as a
    // session moved off a failed node leaves its entry there, a stray).
    for id in &ids[..2] {
        let bucket = bucket_of(id);
        let _: i64 = on_owner(
            redis::cmd("HDEL")
                .arg(store.core().group_key(&bucket[..2], &["mappings", &bucket]))
                .arg(id),
        )
        .await;
    }
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.unmapped, 0, "{report:?}");
    assert_eq!(
        store.sessions.node_sessions(address).await.unwrap(),
        [ids[2].clone()]
    );
    assert_eq!(active_sessions(&app, address).await, Some(1));
}

#[tokio::test]
async fn a_session_that_ended_behind_longer_lived_ones_is_swept() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    // Placed in this order, in one list: two that live an hour, then one
    // placed with a shorter life (a replica whose SESSION_TTL_SECS was
    // lowered, or whose clock is behind) that has already ended.
    let ids = ids_of_one_group(&unique("behind"), 3);
    store
        .sessions
        .place(&ids[0], 0, now_ms() + 3_600_000, None, None, None)
        .await
        .unwrap();
    store
        .sessions
        .place(&ids[1], 0, now_ms() + 3_600_000, None, None, None)
        .await
        .unwrap();
    store
        .sessions
        .place(&ids[2], 0, now_ms() - 1, None, None, None)
        .await
        .unwrap();

    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.unmapped, 1, "{report:?}");
    assert_eq!(store.sessions.lookup(&ids[2]).await.unwrap(), None);
    let mut listed = store
        .sessions
        .node_sessions(&nodes[0].address)
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, [ids[0].clone(), ids[1].clone()]);
}

/// The entries of a node's list in the group of `id`, as Redis holds them.
async fn list_entries(store: &nodes_control::store::Store, id: &str, number: u64) -> Vec<String> {
    let bucket = bucket_of(id);
    on_owner(
        redis::cmd("LRANGE")
            .arg(
                store
                    .core()
                    .group_key(&bucket[..2], &["due", &number.to_string()]),
            )
            .arg(0)
            .arg(-1),
    )
    .await
}

#[tokio::test]
async fn each_list_entry_carries_its_sessions_end_so_the_walk_reads_the_list_alone() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let number = store
        .nodes
        .get_node(&nodes[0].address)
        .await
        .unwrap()
        .unwrap()
        .number;
    let ids = ids_of_one_group(&unique("dated"), 2);
    let exp = now_ms() + 60_000;
    for id in &ids {
        store
            .sessions
            .place(id, 0, exp, None, None, None)
            .await
            .unwrap();
    }
    let expected: Vec<String> = ids.iter().map(|id| format!("{exp}\t{id}")).collect();
    assert_eq!(list_entries(store, &ids[0], number).await, expected);
    // The walk trusts the end in the entry: a mapping whose end was moved
    // behind the list's back (no release does that) is not swept before
    // the entry's end.
    write_mapping(store, &ids[0], number, now_ms() - 1_000).await;
    assert_eq!(
        store
            .sessions
            .expiring(&nodes[0].address, now_ms(), 100)
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}

/// A clean of more sessions than one unmapping script names (512: a script
/// holds Redis while it runs) goes in several: every session still leaves
/// or takes its new base, the node's count and lists agree, and doing it
/// again changes nothing.
#[tokio::test]
async fn a_clean_of_more_sessions_than_one_script_names_unmaps_and_rebases_every_one() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let address = nodes[0].address.as_str();
    let tag = unique("slices");
    let ids: Vec<String> = (0..1_300).map(|i| format!("{tag}-{i}")).collect();
    let exp = now_ms() + 60_000;
    futures::future::join_all(
        ids.iter()
            .map(|id| store.sessions.place(id, 0, exp, None, None, None)),
    )
    .await
    .into_iter()
    .for_each(|placed| assert!(matches!(placed.unwrap(), Placed::Placed(_))));
    let (leaving, staying) = ids.split_at(700);
    let rebased: Vec<(String, i64)> = staying.iter().map(|id| (id.clone(), 5)).collect();
    let (leaving, rebased) = (&leaving, &rebased);
    let (first, again) = common::under_node_lock(store, address, |lock| async move {
        let first = store
            .sessions
            .apply_clean(lock.lock(), address, leaving, None, rebased)
            .await
            .unwrap();
        let again = store
            .sessions
            .apply_clean(lock.lock(), address, leaving, None, rebased)
            .await
            .unwrap();
        (first, again)
    })
    .await;
    assert_eq!((first, again), (700, 0));
    for id in leaving.iter() {
        assert_eq!(store.sessions.lookup(id).await.unwrap(), None, "{id}");
    }
    for id in staying {
        assert_eq!(
            store.sessions.lookup(id).await.unwrap().map(|m| m.base),
            Some(5),
            "{id}"
        );
    }
    let node = store.nodes.get_node(address).await.unwrap().unwrap();
    assert_eq!(node.active_sessions, 600);
    let mut listed = Vec::new();
    for key in keys(store.core().prefix(), "due:").await {
        let entries: Vec<String> = on_owner(redis::cmd("LRANGE").arg(&key).arg(0).arg(-1)).await;
        listed.extend(entries);
    }
    listed.sort();
    let mut expected: Vec<String> = staying.iter().map(|id| format!("{exp}\t{id}")).collect();
    expected.sort();
    assert_eq!(listed, expected);
}

/// The walk reads on only in the lists that need it: on a cluster its
/// later rounds send nothing to a primary none of whose groups has a
/// command, and the slot map it learned stays known (an empty pipeline,
/// refused by the client, once read as a stale map: every walk then went
/// group by group and asked for the map again).
#[tokio::test]
async fn a_walk_that_reads_on_in_one_group_keeps_the_cluster_slot_map() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let address = nodes[0].address.as_str();
    // More ended entries in one list than the walk's first read.
    let ids = ids_of_one_group(&unique("reads-on"), 80);
    let ended = now_ms() - 1_000;
    for id in &ids {
        store
            .sessions
            .place(id, 0, ended, None, None, None)
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let mut found = store
            .sessions
            .expiring(address, now_ms(), 1_000)
            .await
            .unwrap();
        found.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(found, expected);
        if testkit::redis_servers().len() > 1 {
            assert!(
                store.core().knows_slot_map(),
                "the walk forgot the slot map"
            );
        }
    }
}

/// A node that cleans everything gives back every live session to re-base:
/// at 300,000 that is over a second of Redis in one script, past the
/// second the client waits for a reply, so the clean failed and was
/// repeated for ever. In slices of 512, a few in flight, it settles.
#[tokio::test]
async fn a_clean_all_node_with_300_000_live_sessions_is_rebased_in_slices_that_each_answer_in_time()
{
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let address = nodes[0].address.as_str();
    let number = store.nodes.get_node(address).await.unwrap().unwrap().number;
    let tag = unique("rebase-all");
    let ids: Vec<String> = (0..300_000).map(|i| format!("{tag}-{i}")).collect();
    // Their mappings, written group by group (a script stays in one slot).
    let exp = now_ms() + 600_000;
    let mut by_group: std::collections::HashMap<String, Vec<&String>> = Default::default();
    for id in &ids {
        by_group
            .entry(bucket_of(id)[..2].to_owned())
            .or_default()
            .push(id);
    }
    for (group, members) in &by_group {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(
            "for i = 2, #ARGV do
               local d = redis.sha1hex(ARGV[i])
               redis.call('HSET', KEYS[1] .. string.sub(d, 1, 4), ARGV[i], ARGV[1])
             end
             return 1",
        )
        .arg(1)
        .arg(store.core().group_key(group, &["mappings", ""]))
        .arg(format!("{number}:0:{exp}"));
        for id in members {
            cmd.arg(id.as_str());
        }
        let _: i64 = on_owner(&cmd).await;
    }
    let rebased: Vec<(String, i64)> = ids.iter().map(|id| (id.clone(), 3)).collect();
    let rebased = &rebased;
    let outcome = common::under_node_lock(store, address, |lock| async move {
        store
            .sessions
            .apply_clean(lock.lock(), address, &[], None, rebased)
            .await
    })
    .await;
    assert_eq!(outcome.unwrap(), 0, "nothing leaves, everything re-based");
    for id in ids.iter().step_by(997) {
        assert_eq!(
            store.sessions.lookup(id).await.unwrap().map(|m| m.base),
            Some(3),
            "{id}"
        );
    }
}

/// A replica places new sessions by a view of the up nodes that may be a
/// moment old (on a cluster; a single Redis checks them in the placement
/// itself). A node taken out of placement and closed to new sessions, as
/// a removal or a failover does before it reads the node's sessions,
/// gets none of them even from a replica whose view still offers it, and
/// once it is up again it takes new sessions.
#[tokio::test]
async fn a_node_closed_to_new_sessions_gets_none_even_from_a_view_that_still_offers_it() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 2, false).await;
    let (closed, open) = (nodes[0].address.as_str(), nodes[1].address.as_str());
    let store = &app.ctx.store;
    // Another replica, whose view, once read, serves for the whole test.
    let other = nodes_control::store::Store::connect(&common::redis_url(), store.core().prefix())
        .unwrap()
        .with_view_ttl(Duration::from_secs(600));
    let tag = unique("closed");
    let exp = now_ms() + 60_000;
    let place = |store: &nodes_control::store::Store, id: String| {
        let store = store.clone();
        async move {
            match store
                .sessions
                .place(&id, 0, exp, None, None, None)
                .await
                .unwrap()
            {
                Placed::Placed(placement) => placement.mapping.node,
                other => panic!("{id}: {other:?}"),
            }
        }
    };
    // Read the other replica's view: both nodes up, neither loaded.
    place(&other, format!("{tag}-first")).await;

    store
        .nodes
        .set_node_state(closed, NodeState::Draining, &[])
        .await
        .unwrap();
    store.sessions.close_to_new_sessions(closed).await.unwrap();
    let placed =
        futures::future::join_all((0..20).map(|i| place(&other, format!("{tag}-a{i}")))).await;
    assert!(placed.iter().all(|node| node == open), "{placed:?}");

    store
        .nodes
        .set_node_state(closed, NodeState::Up, &[])
        .await
        .unwrap();
    let placed =
        futures::future::join_all((0..20).map(|i| place(store, format!("{tag}-b{i}")))).await;
    assert!(placed.iter().any(|node| node == closed), "{placed:?}");
}

/// A node left up but closed to new sessions (an opening that failed, or
/// a closing that landed after its operation lost the node's lock) gets
/// no new session on a cluster, where the closing is kept; the next sweep
/// opens it, and it takes new sessions again.
#[tokio::test]
async fn a_node_up_but_closed_to_new_sessions_is_opened_by_the_next_sweep() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 2, false).await;
    let stuck = nodes[0].address.as_str();
    let store = &app.ctx.store;
    let number = store.nodes.get_node(stuck).await.unwrap().unwrap().number;
    store.sessions.close_to_new_sessions(stuck).await.unwrap();
    // A single Redis keeps no closing: its placement reads `placeable`.
    let cluster = store
        .sessions
        .closed_numbers()
        .await
        .unwrap()
        .contains(&number);
    let tag = unique("reopen");
    let exp = now_ms() + 60_000;
    let tag = &tag;
    let place_some = |round: &'static str| {
        futures::future::join_all((0..20).map(move |i| {
            let id = format!("{tag}-{round}{i}");
            async move {
                match store
                    .sessions
                    .place(&id, 0, exp, None, None, None)
                    .await
                    .unwrap()
                {
                    Placed::Placed(placement) => placement.mapping.node,
                    other => panic!("{id}: {other:?}"),
                }
            }
        }))
    };
    let before = place_some("a").await;
    if cluster {
        assert!(before.iter().all(|node| node != stuck), "{before:?}");
    }

    // The app's own sweeps run too: one of them may hold the node's lock
    // when this one tries (it then leaves the node to the next sweep).
    for _ in 0..10 {
        app.sweeper.sweep_once(now_ms()).await.unwrap();
        if !store
            .sessions
            .closed_numbers()
            .await
            .unwrap()
            .contains(&number)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!store
        .sessions
        .closed_numbers()
        .await
        .unwrap()
        .contains(&number));
    // The view is read again (at most 50 ms old) and the node is the
    // least loaded: it takes sessions.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let after = place_some("b").await;
    assert!(after.iter().any(|node| node == stuck), "{after:?}");
}

/// A placement whose base was folded before its session's group unmapped a
/// session is refused: a clean may have archived clicks the base lacks (the
/// model's base_guard, design.md). Folded again after the unmap, it stands.
#[tokio::test]
async fn a_placement_folded_before_an_unmap_in_its_group_is_refused() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let id = unique("stale-base");
    let expires = now_ms() + 60_000;
    // A replica reads what its fold is against, folds, and pauses.
    let seen = store.sessions.unmaps_seen(&id).await.unwrap();
    // Meanwhile another places the session, and an operation unmaps it.
    let placed = store
        .sessions
        .place(&id, 0, expires, None, None, Some(&seen));
    assert!(matches!(placed.await.unwrap(), Placed::Placed(p) if p.created));
    let unmapped = common::under_node_lock(store, &nodes[0].address, |lock| async move {
        store
            .sessions
            .unmap_node(lock.lock(), lock.node())
            .await
            .unwrap()
    })
    .await;
    assert_eq!(unmapped, std::slice::from_ref(&id));
    // The unmap closed the node to new sessions (on a cluster); a recovery
    // opens it again.
    store
        .sessions
        .open_to_new_sessions(&nodes[0].address)
        .await
        .unwrap();
    // The paused replica's placement, on the base it folded before.
    let late = store
        .sessions
        .place(&id, 0, expires, None, None, Some(&seen));
    assert_eq!(late.await.unwrap(), Placed::Stale);
    assert!(store.sessions.lookup(&id).await.unwrap().is_none());
    let again = store.sessions.unmaps_seen(&id).await.unwrap();
    assert_ne!(again, seen);
    let placed = store
        .sessions
        .place(&id, 0, expires, None, None, Some(&again));
    assert!(matches!(placed.await.unwrap(), Placed::Placed(p) if p.created));
}

/// An expiry's unmap that runs again (on a Redis Cluster a script whose
/// reply was lost is sent again) after its session was placed anew on
/// the same node leaves the new placement alone: it ends after the
/// clean's moment (the model's unmap_takes_its_own, whose trace without
/// it repeats an answer).
#[tokio::test]
async fn an_expirys_unmap_run_again_leaves_the_session_placed_anew_on_its_node() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let (id, address) = (unique("unmap-again"), nodes[0].address.as_str());
    let ended = now_ms() - 1_000;
    let placed = store.sessions.place(&id, 0, ended, None, None, None);
    assert!(matches!(placed.await.unwrap(), Placed::Placed(p) if p.created));
    let expired_by = now_ms();
    let leaving = std::slice::from_ref(&id);
    let unmap = || {
        common::under_node_lock(store, address, |lock| async move {
            store
                .sessions
                .apply_clean(lock.lock(), lock.node(), leaving, Some(expired_by), &[])
                .await
                .unwrap()
        })
    };
    assert_eq!(unmap().await, 1);
    // The session comes back and is placed on the node again.
    let live = now_ms() + 60_000;
    let placed = store.sessions.place(&id, 7, live, None, None, None);
    assert!(matches!(placed.await.unwrap(), Placed::Placed(p) if p.created));
    assert_eq!(unmap().await, 0, "the new placement is not the clean's");
    let mapping = store.sessions.lookup(&id).await.unwrap();
    assert_eq!(
        mapping.map(|m| (m.node, m.base)),
        Some((address.to_owned(), 7))
    );
}
