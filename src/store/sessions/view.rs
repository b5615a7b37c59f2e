//! A replica's view of the up nodes, from which it places new sessions on a
//! Redis Cluster (docs/cluster.md).
//!
//! The control slot no longer hears of every new session: each replica
//! reads the up nodes with their scores (`view.lua`) at most every
//! [`VIEW_TTL`], chooses among them itself, counting its own choices on
//! top, and hands the count moves it made in between to the next read,
//! which applies them first. The session's mapping is still created only
//! by `claim.lua`, in the session's own slot, so one mapping stands
//! however many replicas place one id at once; only the choice of node
//! rests on a view that may be [`VIEW_TTL`] old. The counts it goes by
//! are a hint, as they were: each sweep's tally sets them to the groups'
//! exact sizes, and moves other replicas send after it (for sessions it
//! counted already) leave them off by a few until the next.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Context, Sessions, StoreResult};
use crate::store::StoreError;

/// How long a view serves before it is read again. Within it, replicas
/// placing at once may each send a few sessions to the node that was
/// least loaded when they read it: a skew of the choice, never of a count.
pub(super) const VIEW_TTL: Duration = Duration::from_millis(50);

/// This replica's view, shared by every handle of one store.
pub(in crate::store) struct PlacementView {
    pub(super) state: tokio::sync::Mutex<ViewState>,
    /// How long a view serves ([`VIEW_TTL`]).
    ttl: Duration,
    /// Set when this replica added, removed, re-weighted a node or changed
    /// its state: the next choice reads the view again first.
    outdated: AtomicBool,
}

impl Default for PlacementView {
    fn default() -> Self {
        Self::with_ttl(VIEW_TTL)
    }
}

impl PlacementView {
    pub(in crate::store) fn with_ttl(ttl: Duration) -> Self {
        Self {
            state: Default::default(),
            ttl,
            outdated: AtomicBool::new(false),
        }
    }

    /// The view no longer says what this replica just changed.
    pub(super) fn invalidate(&self) {
        self.outdated.store(true, Ordering::Release);
    }

    /// Whether the view must be read before choosing, clearing the mark (a
    /// change made while it is read marks it again).
    pub(super) fn take_outdated(&self) -> bool {
        self.outdated.swap(false, Ordering::AcqRel)
    }
}

/// The view as last read, and what this replica did since.
#[derive(Default)]
pub(super) struct ViewState {
    read_at: Option<Instant>,
    complete: bool,
    /// The up nodes, as `placeable` held them when read.
    nodes: Vec<ViewNode>,
    /// Count moves made here and not yet in Redis, by node address.
    pending: HashMap<String, i64>,
    /// Nodes a claim found closed since the view was read: the view is
    /// older than their state, and they are not chosen until it is read
    /// again (without reading it at once: a node up but still closed, as
    /// a failed opening leaves it, would cost a read per placement).
    refused: HashSet<String>,
}

struct ViewNode {
    address: String,
    /// Active sessions per unit of weight when read (its `placeable` score).
    score: f64,
    weight: f64,
    number: u64,
    /// Sessions this replica placed on it since.
    placed: i64,
}

impl ViewNode {
    fn load(&self) -> f64 {
        self.score + self.placed as f64 / self.weight
    }
}

/// Where a new session goes, by the view.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Choice {
    /// The registry is being rebuilt: nothing is placed.
    NotReady,
    NoNode,
    Chosen {
        address: String,
        number: u64,
    },
}

impl ViewState {
    /// Whether the view may still serve at `now`, read `ttl` ago at most.
    pub(super) fn fresh(&self, now: Instant, ttl: Duration) -> bool {
        self.read_at
            .is_some_and(|read| now.saturating_duration_since(read) < ttl)
    }

    /// Takes `view.lua`'s reply, asked for at `now`, as the view (the
    /// moves it was sent are the caller's to clear).
    pub(super) fn install(&mut self, reply: Vec<String>, now: Instant) -> Result<(), String> {
        let (head, nodes) = reply.split_first().ok_or("a reply without its head")?;
        if nodes.len() % 4 != 0 {
            return Err(format!("{} fields for the up nodes", nodes.len()));
        }
        let nodes = nodes
            .chunks(4)
            .map(|node| {
                let number = |text: &str| text.parse::<f64>().map_err(|_| format!("{text:?}"));
                Ok(ViewNode {
                    address: node[0].clone(),
                    score: number(&node[1])?,
                    number: node[2]
                        .parse()
                        .map_err(|_| format!("node number {:?}", node[2]))?,
                    weight: number(&node[3])?.max(f64::MIN_POSITIVE),
                    placed: 0,
                })
            })
            .collect::<Result<_, String>>()?;
        *self = ViewState {
            read_at: Some(now),
            complete: head == "1",
            nodes,
            pending: std::mem::take(&mut self.pending),
            refused: HashSet::new(),
        };
        Ok(())
    }

    /// Chooses the node of one new session as `choose_node` (prelude.lua)
    /// would from `placeable`: `preferred` if it is up and not `stale`,
    /// else the least loaded up node (ties by name), and counts it there.
    /// Nodes in `avoid` (a claim of this placement found them closed) and
    /// nodes refused since the view was read are never chosen.
    pub(super) fn choose(&mut self, stale: &str, preferred: &str, avoid: &[String]) -> Choice {
        if !self.complete {
            return Choice::NotReady;
        }
        let preferred = (!preferred.is_empty() && preferred != stale)
            .then(|| self.nodes.iter().position(|n| n.address == preferred))
            .flatten()
            .filter(|&at| self.open(at, avoid));
        let least = || {
            let open = (0..self.nodes.len()).filter(|&at| self.open(at, avoid));
            open.min_by(|&a, &b| {
                let (a, b) = (&self.nodes[a], &self.nodes[b]);
                a.load()
                    .total_cmp(&b.load())
                    .then_with(|| a.address.as_bytes().cmp(b.address.as_bytes()))
            })
        };
        let Some(at) = preferred.or_else(least) else {
            return Choice::NoNode;
        };
        let node = &mut self.nodes[at];
        node.placed += 1;
        *self.pending.entry(node.address.clone()).or_default() += 1;
        Choice::Chosen {
            address: node.address.clone(),
            number: node.number,
        }
    }

    fn open(&self, at: usize, avoid: &[String]) -> bool {
        let address = &self.nodes[at].address;
        !avoid.contains(address) && !self.refused.contains(address)
    }

    /// A claim found `address` closed: its choice is undone, and it is not
    /// chosen again until the view is read.
    pub(super) fn refuse(&mut self, address: &str) {
        self.count(address, -1);
        self.refused.insert(address.to_owned());
    }

    /// Moves a node's count by `delta` here, for Redis at the next read.
    pub(super) fn count(&mut self, address: &str, delta: i64) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.address == address) {
            node.placed += delta;
        }
        *self.pending.entry(address.to_owned()).or_default() += delta;
    }

    /// The count moves not yet in Redis.
    pub(super) fn pending(&self) -> Vec<(&str, i64)> {
        self.pending
            .iter()
            .filter(|(_, delta)| **delta != 0)
            .map(|(address, delta)| (address.as_str(), *delta))
            .collect()
    }
}

impl Sessions {
    /// Chooses the node of a new session from this replica's view (read
    /// again first when it is old, or this replica changed a node).
    pub(super) async fn choose(
        &self,
        stale: &str,
        preferred: &str,
        avoid: &[String],
    ) -> StoreResult<Choice> {
        let mut state = self.view.state.lock().await;
        let outdated = self.view.take_outdated();
        if outdated || !state.fresh(Instant::now(), self.view.ttl) {
            if let Err(error) = self.read_view(&mut state).await {
                if outdated {
                    self.view.invalidate(); // still to be read
                }
                return Err(error);
            }
        }
        Ok(state.choose(stale, preferred, avoid))
    }

    /// Moves nodes' counts on a cluster: with the moves this replica's
    /// placements made since its view was read, in one call, which reads
    /// the view again. With no move, it only settles what is pending.
    pub(super) async fn settle_counts(&self, moves: &[(&str, i64)]) -> StoreResult<()> {
        let mut state = self.view.state.lock().await;
        for (address, delta) in moves {
            state.count(address, *delta);
        }
        if state.pending().is_empty() {
            return Ok(());
        }
        self.read_view(&mut state).await
    }

    /// Settles, on a cluster, the count moves this replica made and has
    /// not sent: before the counts are read, so that they show its own
    /// placements.
    pub(in crate::store) async fn settle_placed(&self) -> StoreResult<()> {
        if self.cluster {
            self.settle_counts(&[]).await?;
        }
        Ok(())
    }

    /// Sends the pending count moves and reads the view. A call that fails
    /// leaves them pending; one cut off after Redis applied them may send
    /// them again, a count too high until the next tally.
    async fn read_view(&self, state: &mut ViewState) -> StoreResult<()> {
        // The view is as old as the call, not as its answer.
        let asked = Instant::now();
        let mut invocation = self.scripts.view.prepare_invoke();
        self.placement_keys(&mut invocation);
        for (address, delta) in state.pending() {
            invocation.arg(address).arg(delta);
        }
        let reply: Vec<String> = invocation
            .invoke_async(&mut self.conn())
            .await
            .context("reading the up nodes from Redis")?;
        // Applied: whatever the reply, these moves are not sent again.
        state.pending.clear();
        state.install(reply, asked).map_err(|what| StoreError {
            context: "reading the up nodes from Redis",
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "view.lua answered something else than a view",
                what,
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view as `view.lua` sends it.
    fn reply(complete: bool, nodes: &[(&str, &str, &str, &str)]) -> Vec<String> {
        let mut reply = vec![if complete { "1" } else { "0" }.to_owned()];
        for (address, score, number, weight) in nodes {
            reply.extend([address, score, number, weight].map(|s| s.to_string()));
        }
        reply
    }

    fn view(nodes: &[(&str, &str, &str, &str)]) -> ViewState {
        let mut state = ViewState::default();
        state.install(reply(true, nodes), Instant::now()).unwrap();
        state
    }

    fn chosen(choice: Choice) -> String {
        match choice {
            Choice::Chosen { address, .. } => address,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_choice_sees_the_ones_before_it_and_ties_go_by_name() {
        let mut state = view(&[
            ("b", "0", "2", "1"),
            ("a", "0", "1", "1"),
            ("c", "1", "3", "1"),
        ]);
        let picks: Vec<String> = (0..6).map(|_| chosen(state.choose("", "", &[]))).collect();
        assert_eq!(picks, ["a", "b", "a", "b", "c", "a"]);
        assert_eq!(state.pending.get("a"), Some(&3));
        assert_eq!(state.pending.get("c"), Some(&1));
    }

    #[test]
    fn a_heavier_node_takes_more_sessions_in_proportion() {
        let mut state = view(&[("light", "0", "1", "1"), ("heavy", "0", "2", "3")]);
        let heavy = (0..400)
            .filter(|_| chosen(state.choose("", "", &[])) == "heavy")
            .count();
        assert_eq!(heavy, 300);
    }

    #[test]
    fn the_preferred_node_wins_while_it_is_up_and_not_the_stale_one() {
        let mut state = view(&[("a", "0", "1", "1"), ("b", "5", "2", "1")]);
        assert_eq!(chosen(state.choose("", "b", &[])), "b");
        assert_eq!(chosen(state.choose("b", "b", &[])), "a");
        assert_eq!(chosen(state.choose("", "gone", &[])), "a");
    }

    #[test]
    fn a_node_a_claim_found_closed_is_not_chosen_again_even_if_preferred() {
        let mut state = view(&[("a", "0", "1", "1"), ("b", "5", "2", "1")]);
        assert_eq!(chosen(state.choose("", "a", &["a".into()])), "b");
        assert_eq!(chosen(state.choose("", "", &["a".into()])), "b");
        assert_eq!(
            view(&[("a", "0", "1", "1")]).choose("", "", &["a".into()]),
            Choice::NoNode
        );
    }

    #[test]
    fn a_node_refused_since_the_view_was_read_waits_for_the_next_read() {
        let mut state = view(&[("a", "0", "1", "1"), ("b", "5", "2", "1")]);
        assert_eq!(chosen(state.choose("", "", &[])), "a");
        state.refuse("a");
        assert_eq!(chosen(state.choose("", "a", &[])), "b");
        assert_eq!(state.pending(), [("b", 1)]);
        state
            .install(reply(true, &[("a", "0", "1", "1")]), Instant::now())
            .unwrap();
        assert_eq!(chosen(state.choose("", "", &[])), "a");
    }

    #[test]
    fn the_stale_node_is_still_the_least_loaded_choice_as_in_the_script() {
        // choose_node falls back to ZRANGE 0 0, which does not skip it.
        let mut state = view(&[("a", "0", "1", "1"), ("b", "5", "2", "1")]);
        assert_eq!(chosen(state.choose("a", "", &[])), "a");
    }

    #[test]
    fn nothing_is_placed_while_the_registry_is_incomplete_or_no_node_is_up() {
        let mut state = ViewState::default();
        state
            .install(reply(false, &[("a", "0", "1", "1")]), Instant::now())
            .unwrap();
        assert_eq!(state.choose("", "", &[]), Choice::NotReady);
        assert_eq!(view(&[]).choose("", "", &[]), Choice::NoNode);
        assert!(state.pending().is_empty());
    }

    #[test]
    fn a_count_given_back_undoes_the_choice() {
        let mut state = view(&[("a", "0", "1", "1"), ("b", "0", "2", "1")]);
        assert_eq!(chosen(state.choose("", "", &[])), "a");
        state.count("a", -1);
        assert_eq!(chosen(state.choose("", "", &[])), "a");
        state.count("gone", -1);
        let mut pending = state.pending();
        pending.sort();
        assert_eq!(pending, [("a", 1), ("gone", -1)]);
    }

    #[test]
    fn a_view_serves_for_its_ttl_and_a_new_one_starts_with_nothing_pending() {
        let read = Instant::now();
        let mut state = view(&[("a", "0", "1", "1")]);
        state.read_at = Some(read);
        assert!(state.fresh(read + VIEW_TTL / 2, VIEW_TTL));
        assert!(!state.fresh(read + VIEW_TTL, VIEW_TTL));
        state.choose("", "", &[]);
        assert_eq!(state.pending(), [("a", 1)]);
        // What was pending went with the read (read_view clears it).
        state.pending.clear();
        state
            .install(reply(true, &[("a", "1", "1", "1")]), read)
            .unwrap();
        assert!(state.pending().is_empty());
        assert_eq!(
            state.choose("", "", &[]),
            Choice::Chosen {
                address: "a".into(),
                number: 1,
            }
        );
    }

    #[test]
    fn a_reply_that_is_not_a_view_is_refused() {
        let mut state = ViewState::default();
        assert!(state.install(vec![], Instant::now()).is_err());
        assert!(state
            .install(vec!["1".into(), "a".into()], Instant::now())
            .is_err());
        assert!(state
            .install(reply(true, &[("a", "x", "1", "1")]), Instant::now())
            .is_err());
        assert!(state
            .install(reply(true, &[("a", "0", "", "1")]), Instant::now())
            .is_err());
    }
}
