//! Placing a new session: the press path's one write to Redis.
//!
//! Placements asked for at the same time on this replica go to Redis
//! together ([`GroupCommit`]): on a single Redis one `place.lua` decides a
//! batch, on a cluster one `reserve.lua` in the control slot chooses and
//! counts the nodes of a batch, then each session's own group claims its
//! mapping (`claim.lua`). The scripts decide the placements of a batch one
//! after another, each exactly as it would alone: batching changes what a
//! new session costs Redis (a script's own overhead is most of it), not
//! what is decided, so the placement argument of design.md ("Past one
//! Redis") is the same for one session or sixty-four.

use std::sync::OnceLock;

use super::groups::mapping_bucket;
use super::sessions::{Mapping, Placed, Placement};
use super::{Context, SessionStore, StoreError, StoreResult};
use crate::group_commit::GroupCommit;

/// Most placements in one script: it holds Redis for its whole run (a
/// placement inside a batch costs Redis a few microseconds more than its
/// own calls), so a batch stays around a millisecond at most.
const MAX_BATCH: usize = 64;
/// Scripts of one replica in Redis at once: while one runs, the next
/// batch gathers.
const IN_FLIGHT: usize = 2;

/// How often a placement starts over when the mapping that stood named a
/// node Redis no longer knows (it is dropped and the session placed anew).
const PLACE_ATTEMPTS: usize = 3;

/// One placement of a `place.lua` batch (single Redis).
struct PlaceRequest {
    id: String,
    base: i64,
    expires_at_ms: i64,
    stale: String,
    preferred: String,
    /// A node number the standing mapping named that Redis does not know:
    /// that mapping does not stand.
    unknown: String,
}

/// One choice of a `reserve.lua` batch (the control slot of a cluster).
struct ReserveRequest {
    stale: String,
    preferred: String,
}

/// `place.lua`'s answer for one placement: `None` when no node is up.
type PlaceAnswer = StoreResult<Option<Vec<i64>>>;
/// `reserve.lua`'s: `None` when no node is up, else (node, number, the
/// stale node's number or '', how the claim indexes the session: 0 as this
/// release reads it, 1 or 2 while a replica of an earlier release serves,
/// prelude.lua's `index_new_session`).
type ReserveAnswer = StoreResult<Option<(String, i64, String, i64)>>;

/// The batching tasks of one store, started on first use (on the runtime
/// that places the first session).
#[derive(Default)]
pub(super) struct Batchers {
    place: OnceLock<GroupCommit<PlaceRequest, PlaceAnswer>>,
    reserve: OnceLock<GroupCommit<ReserveRequest, ReserveAnswer>>,
}

/// What Redis decided for one session.
enum Decided {
    Mapped {
        number: u64,
        base: i64,
        expires_at_ms: i64,
        created: bool,
    },
    NoNode,
    NotReady,
}

impl SessionStore {
    /// Places a session on `preferred_node` if it is up, else on the up node
    /// with the fewest active sessions per unit of weight, unless it is
    /// mapped already; a mapping to `stale_node` is dropped and replaced.
    pub async fn place(
        &self,
        session_id: &str,
        base: i64,
        expires_at_ms: i64,
        stale_node: Option<&str>,
        preferred_node: Option<&str>,
    ) -> StoreResult<Placed> {
        self.check_identity().await?;
        // A number the standing mapping named that Redis does not know.
        let mut unknown: Option<u64> = None;
        for _ in 0..PLACE_ATTEMPTS {
            let request = PlaceRequest {
                id: session_id.to_owned(),
                base,
                expires_at_ms,
                stale: stale_node.unwrap_or_default().to_owned(),
                preferred: preferred_node.unwrap_or_default().to_owned(),
                unknown: unknown.map(|n| n.to_string()).unwrap_or_default(),
            };
            let decided = if self.cluster {
                self.reserve_and_claim(request).await?
            } else {
                self.place_at_once(request).await?
            };
            let (number, base, expires_at_ms, created) = match decided {
                Decided::Mapped {
                    number,
                    base,
                    expires_at_ms,
                    created,
                } => (number, base, expires_at_ms, created),
                Decided::NoNode => return Ok(Placed::NoNode),
                Decided::NotReady => return Ok(Placed::NotReady),
            };
            let Some(address) = self.node_address(number).await? else {
                unknown = Some(number);
                continue;
            };
            return Ok(Placed::Placed(Placement {
                mapping: Mapping {
                    node: address.to_string(),
                    base,
                    expires_at_ms,
                },
                created,
            }));
        }
        Err(mapped_to_unknown_node())
    }

    /// On a single Redis: both steps in one script (`place.lua`), shared
    /// with the placements asked for at the same time.
    async fn place_at_once(&self, request: PlaceRequest) -> StoreResult<Decided> {
        let batcher = self.batchers.place.get_or_init(|| {
            let store = self.without_batchers();
            GroupCommit::start(MAX_BATCH, IN_FLIGHT, move |batch| {
                let store = store.clone();
                async move { store.place_batch(batch).await }
            })
        });
        let Some(reply) = batcher
            .submit(request)
            .await
            .unwrap_or_else(|| Err(gone()))?
        else {
            return Ok(Decided::NoNode);
        };
        match *reply.as_slice() {
            [-2] => Err(unnumbered_node()),
            [created, number, base, expires_at_ms] => Ok(Decided::Mapped {
                number: number as u64,
                base,
                expires_at_ms,
                created: created == 1,
            }),
            _ => Ok(Decided::NotReady), // the registry or the group forgot
        }
    }

    /// The control keys both placement scripts start with: placeable,
    /// registry epoch, counts, node numbers, weights, and the marks of an
    /// earlier release's replica serving (store/fences.rs, heartbeat).
    fn placement_keys(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        for key in [
            "placeable",
            "registry",
            "counts",
            "node_numbers",
            "weights",
            "earlier_release",
            "plain_entries",
        ] {
            invocation.key(self.key(&[key]));
        }
    }

    async fn place_batch(&self, batch: Vec<PlaceRequest>) -> Vec<PlaceAnswer> {
        let mut invocation = self.scripts.place.prepare_invoke();
        self.placement_keys(&mut invocation);
        for request in &batch {
            let bucket = mapping_bucket(&request.id);
            let group = &bucket[..2];
            invocation
                .key(self.group_key(group, &["mappings", &bucket]))
                .key(self.group_key(group, &["epoch"]))
                .arg(self.group_prefix(group))
                .arg(&request.id)
                .arg(request.base)
                .arg(request.expires_at_ms)
                .arg(&request.stale)
                .arg(&request.preferred)
                .arg(&request.unknown);
        }
        let replies = invocation
            .invoke_async::<Vec<Option<Vec<i64>>>>(&mut self.conn())
            .await
            .context("placing sessions in Redis");
        answer_each(batch.len(), replies)
    }

    /// On a cluster: the control slot chooses and counts the node (a
    /// `reserve.lua` batch), the session's group creates the mapping if the
    /// session has none (`claim.lua`). If it had one, the count goes back.
    async fn reserve_and_claim(&self, request: PlaceRequest) -> StoreResult<Decided> {
        let batcher = self.batchers.reserve.get_or_init(|| {
            let store = self.without_batchers();
            GroupCommit::start(MAX_BATCH, IN_FLIGHT, move |batch| {
                let store = store.clone();
                async move { store.reserve_batch(batch).await }
            })
        });
        let reserved = batcher
            .submit(ReserveRequest {
                stale: request.stale.clone(),
                preferred: request.preferred.clone(),
            })
            .await
            .unwrap_or_else(|| Err(gone()))?;
        let (node, number, stale_number, mode) = match reserved {
            None => return Ok(Decided::NoNode),
            Some((_, -1, _, _)) => return Ok(Decided::NotReady),
            Some((_, -2, _, _)) => return Err(unnumbered_node()),
            Some((node, number, stale, mode)) => {
                (node, number as u64, stale.parse::<u64>().ok(), mode)
            }
        };
        let stale_number = request.unknown.parse::<u64>().ok().or(stale_number);
        let bucket = mapping_bucket(&request.id);
        let group = &bucket[..2];
        let chosen_index = self.index_key(group, number);
        let (stale_index, stale_earlier_index) = stale_number.map_or_else(
            || (chosen_index.clone(), chosen_index.clone()),
            |stale| {
                (
                    self.index_key(group, stale),
                    self.earlier_index_key(group, stale),
                )
            },
        );
        let claimed: Vec<i64> = self
            .scripts
            .claim
            .key(self.group_key(group, &["mappings", &bucket]))
            .key(self.group_key(group, &["epoch"]))
            .key(chosen_index)
            .key(stale_index)
            .key(stale_earlier_index)
            .key(self.earlier_index_key(group, number))
            .arg(self.group_prefix(group))
            .arg(&request.id)
            .arg(number)
            .arg(request.base)
            .arg(request.expires_at_ms)
            .arg(stale_number.map(|n| n.to_string()).unwrap_or_default())
            .arg(mode)
            .invoke_async(&mut self.conn())
            .await
            .context("creating a session mapping in Redis")?;
        let created = claimed.first() == Some(&1);
        if !created {
            // The count reserve.lua took is not this session's.
            self.set_counts(true, &[(&node, -1, None)]).await?;
        }
        let &[_, standing, base, expires_at_ms, replaced] = claimed.as_slice() else {
            return Ok(Decided::NotReady); // the group forgot: being rebuilt
        };
        if let Some(stale) = stale_number.filter(|_| replaced == 1) {
            // The session's mapping to the stale node was dropped.
            if let Some(stale_node) = self.node_address(stale).await? {
                self.set_counts(true, &[(&stale_node, -1, None)]).await?;
            }
        }
        Ok(Decided::Mapped {
            number: standing as u64,
            base,
            expires_at_ms,
            created,
        })
    }

    async fn reserve_batch(&self, batch: Vec<ReserveRequest>) -> Vec<ReserveAnswer> {
        let mut invocation = self.scripts.reserve.prepare_invoke();
        self.placement_keys(&mut invocation);
        for request in &batch {
            invocation.arg(&request.stale).arg(&request.preferred);
        }
        let replies = invocation
            .invoke_async::<Vec<Option<(String, i64, String, i64)>>>(&mut self.conn())
            .await
            .context("choosing nodes for sessions in Redis");
        answer_each(batch.len(), replies)
    }
}

/// One answer per placement of a batch: each its own reply, or each the
/// error of the whole script (a connection lost is lost for all of them). A reply that does not have one answer per
/// placement is an error for all of them.
fn answer_each<T: Clone>(len: usize, replies: StoreResult<Vec<T>>) -> Vec<StoreResult<T>> {
    match replies {
        Ok(replies) if replies.len() == len => replies.into_iter().map(Ok).collect(),
        Ok(replies) => {
            let error = StoreError {
                context: "placing sessions in Redis",
                source: redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a placement script answered the wrong number of placements",
                    format!("{} answers for {len} placements", replies.len()),
                )),
            };
            vec![Err(error); len]
        }
        Err(error) => vec![Err(error); len],
    }
}

/// The batching task ended: its runtime is shutting down.
fn gone() -> StoreError {
    client_error(
        "placing a session in Redis",
        "the placement batch gave no answer (shutting down, or its run failed)",
    )
}

/// The node chosen was registered by a release that gave it no number.
fn unnumbered_node() -> StoreError {
    client_error(
        "choosing a node for a session in Redis",
        "the node chosen has no number (registered by an older version)",
    )
}

/// A placement that kept finding the session mapped to a node number Redis
/// has no address for.
fn mapped_to_unknown_node() -> StoreError {
    client_error(
        "placing a session in Redis",
        "the session stays mapped to a node Redis does not know",
    )
}

/// A failure found by this side, not reported by Redis.
fn client_error(context: &'static str, what: &'static str) -> StoreError {
    StoreError {
        context,
        source: redis::RedisError::from((redis::ErrorKind::Client, what)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// How placements were chosen before the batch's view of `placeable`
    /// (prelude.lua's `batch_counter`): the zset asked for its lowest
    /// member, and told of each move, one placement at a time. ARGV: one
    /// preferred node ('' for none) a placement.
    const ONE_AT_A_TIME: &str = r"
        local chosen = {}
        for i = 1, #ARGV do
          local node
          if ARGV[i] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[i]) then
            node = ARGV[i]
          else
            node = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
          end
          chosen[i] = node or ''
          if node then
            local count = redis.call('HINCRBY', KEYS[2], node, 1)
            local weight = tonumber(redis.call('HGET', KEYS[3], node)) or 1
            redis.call('ZADD', KEYS[1], count / weight, node)
          end
        end
        return chosen";

    /// The same placements decided from one batch's view.
    fn batched() -> redis::Script {
        redis::Script::new(&format!(
            "{}\n{}",
            include_str!("prelude.lua"),
            r"
            local counter = batch_counter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], #ARGV)
            local chosen = {}
            for i = 1, #ARGV do
              local node = choose_node(counter, '', ARGV[i])
              chosen[i] = node or ''
              if node then
                counter.one_more(node)
              end
            end
            counter.settle()
            return chosen"
        ))
    }

    /// Names whose order as bytes and in a locale's collation differ.
    const NAMES: [&str; 10] = [
        "http://a:1",
        "http://B:1",
        "http://b:1",
        "http://a-b:1",
        "http://ab:1",
        "http://a.b:1",
        "http://A:1",
        "http://aa:1",
        "http://a:10",
        "http://a:2",
    ];

    /// A node: its name, its count, its weight (none recorded: 1), and
    /// whether it is up (in `placeable`).
    type Node = (usize, u32, Option<u32>, bool);

    fn nodes() -> impl Strategy<Value = Vec<Node>> {
        proptest::sample::subsequence((0..NAMES.len()).collect::<Vec<_>>(), 1..=NAMES.len())
            .prop_flat_map(|names| {
                let n = names.len();
                (
                    Just(names),
                    proptest::collection::vec(
                        (
                            0u32..6,
                            proptest::option::of(1u32..4),
                            proptest::bool::weighted(0.8),
                        ),
                        n,
                    ),
                )
            })
            .prop_map(|(names, rest)| {
                names
                    .into_iter()
                    .zip(rest)
                    .map(|(name, (count, weight, up))| (name, count, weight, up))
                    .collect()
            })
    }

    /// One preferred node a placement ('' mostly: least sessions).
    fn preferred() -> impl Strategy<Value = Vec<String>> {
        let one = prop_oneof![
            7 => Just(String::new()),
            3 => (0..NAMES.len()).prop_map(|i| NAMES[i].to_owned()),
        ];
        proptest::collection::vec(one, 1..=12)
    }

    /// Writes the nodes under `prefix`; returns placeable, counts, weights,
    /// numbers (the keys both scripts are given).
    fn write_nodes(conn: &mut redis::Connection, prefix: &str, nodes: &[Node]) -> [String; 4] {
        let keys = ["placeable", "counts", "weights", "numbers"].map(|k| format!("{prefix}{k}"));
        for &(name, count, weight, up) in nodes {
            let name = NAMES[name];
            let mut pipe = redis::pipe();
            pipe.hset(&keys[1], name, count);
            if let Some(weight) = weight {
                pipe.hset(&keys[2], name, weight);
            }
            if up {
                pipe.zadd(
                    &keys[0],
                    name,
                    f64::from(count) / f64::from(weight.unwrap_or(1)),
                );
            }
            pipe.exec(conn).unwrap();
        }
        keys
    }

    /// `placeable` by score, then the counts by node.
    type State = (Vec<(String, f64)>, Vec<(String, u32)>);

    fn state(conn: &mut redis::Connection, keys: &[String; 4]) -> State {
        let placeable: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&keys[0])
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(conn)
            .unwrap();
        let mut counts: Vec<(String, u32)> =
            redis::cmd("HGETALL").arg(&keys[1]).query(conn).unwrap();
        counts.sort();
        (placeable, counts)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// A batch decides each placement exactly as the zset did one
        /// placement at a time: the same nodes in the same order (ties by
        /// the names' bytes, whatever the server's locale), the same
        /// scores and counts after, with more nodes up than the batch can
        /// reach and with fewer.
        #[test]
        fn a_batch_chooses_as_the_zset_did_one_placement_at_a_time(nodes in nodes(), preferred in preferred()) {
            let client = redis::Client::open(format!("redis://{}", testkit::single_redis_addr())).unwrap();
            let mut conn = client.get_connection().unwrap();
            let tag = format!("batch-view:{}:{}", std::process::id(), uuid::Uuid::new_v4());
            let before = write_nodes(&mut conn, &format!("{tag}:before:"), &nodes);
            let now = write_nodes(&mut conn, &format!("{tag}:now:"), &nodes);
            let (one_script, batch_script) = (redis::Script::new(ONE_AT_A_TIME), batched());
            let mut one = one_script.prepare_invoke();
            let mut batch = batch_script.prepare_invoke();
            for key in &before[..3] {
                one.key(key);
            }
            for key in &now {
                batch.key(key);
            }
            for p in &preferred {
                one.arg(p);
                batch.arg(p);
            }
            let expected: Vec<String> = one.invoke(&mut conn).unwrap();
            let chosen: Vec<String> = batch.invoke(&mut conn).unwrap();
            let (expected_state, state_now) = (state(&mut conn, &before), state(&mut conn, &now));
            let _: () = redis::cmd("DEL").arg(&before).arg(&now).query(&mut conn).unwrap();
            prop_assert_eq!(chosen, expected);
            prop_assert_eq!(state_now, expected_state);
        }
    }
}
