//! The node registry shared by every replica.

use std::collections::HashMap;
use std::sync::Arc;

use redis::AsyncCommands;

use super::{now_ms, with_prelude, Context, Core, Lock, Sessions, StoreResult};
use crate::nodes::record::{NodeRecord, NodeState, Offers};

/// The node registry: what every replica knows of the nodes.
#[derive(Clone)]
pub struct Nodes {
    core: Arc<Core>,
    scripts: Arc<Scripts>,
    /// A node's state, weight and removal move where new sessions go.
    sessions: Sessions,
}

struct Scripts {
    register_node: redis::Script,
    set_node_state: redis::Script,
    delete_node: redis::Script,
    set_node_weight: redis::Script,
    set_node_notes: redis::Script,
    set_node_epoch: redis::Script,
    set_node_field: redis::Script,
}

impl Nodes {
    pub(super) fn new(core: Arc<Core>, sessions: Sessions) -> Self {
        let scripts = Scripts {
            register_node: redis::Script::new(include_str!("register_node.lua")),
            set_node_state: with_prelude(include_str!("set_node_state.lua")),
            delete_node: redis::Script::new(include_str!("delete_node.lua")),
            set_node_weight: with_prelude(include_str!("set_node_weight.lua")),
            set_node_notes: redis::Script::new(include_str!("set_node_notes.lua")),
            set_node_epoch: redis::Script::new(include_str!("set_node_epoch.lua")),
            set_node_field: redis::Script::new(include_str!("set_node_field.lua")),
        };
        Self {
            core,
            scripts: Arc::new(scripts),
            sessions,
        }
    }

    pub(super) fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// A handle is the core with its own scripts: the core's keys and
/// connection are its own.
impl std::ops::Deref for Nodes {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// What a change of a node's state did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateChange {
    /// Done; the state it had.
    Changed(NodeState),
    /// Unknown node, or not in an expected state: nothing changed.
    Unexpected,
    /// Refused: it is the last up node.
    LastUp,
}

impl Nodes {
    /// Registers a node; `Some(false)` if it was registered already, `None`
    /// while the registry is being rebuilt (unless `rebuilding`: the rebuild
    /// itself registers the nodes it restores).
    pub async fn register_node(
        &self,
        node: &NodeRecord,
        rebuilding: bool,
    ) -> StoreResult<Option<bool>> {
        let added = self
            .scripts
            .register_node
            .key(self.key(&["node", &node.address]))
            .key(self.key(&["nodes"]))
            .key(self.key(&["placeable"]))
            .key(self.key(&["registry"]))
            .key(self.key(&["node_numbers"]))
            .key(self.key(&["node_addresses"]))
            .key(self.key(&["counts"]))
            .key(self.key(&["weights"]))
            .arg(&node.address)
            .arg(&node.name)
            .arg(node.weight)
            .arg(node.state.as_str())
            .arg(now_ms())
            .arg(if rebuilding { "1" } else { "0" })
            .arg(node.instance.as_deref().unwrap_or(""))
            .arg(node.reason.as_deref().unwrap_or(""))
            .arg(node.number)
            .arg(node.epoch)
            .invoke_async(&mut self.conn())
            .await;
        self.sessions.invalidate_view();
        let added: i64 = added.context("registering a node in Redis")?;
        Ok((added >= 0).then_some(added == 1))
    }

    /// Moves a node to `state` if it is currently in one of `expected`
    /// (any state when empty). Returns the previous state, or `None` when the
    /// node is unknown or in an unexpected state.
    pub async fn set_node_state(
        &self,
        address: &str,
        state: NodeState,
        expected: &[NodeState],
    ) -> StoreResult<Option<NodeState>> {
        match self
            .change_node_state(address, state, expected, false, None)
            .await?
        {
            StateChange::Changed(old) => Ok(Some(old)),
            StateChange::Unexpected | StateChange::LastUp => Ok(None),
        }
    }

    /// [`set_node_state`](Self::set_node_state) by an operation under the
    /// node's lock, which lands only while the lock is still its holder's
    /// (a recovery that resumed after another operation failed the node
    /// again must not bring it back up).
    pub async fn set_node_state_locked(
        &self,
        lock: &Lock,
        address: &str,
        state: NodeState,
        expected: &[NodeState],
    ) -> StoreResult<Option<NodeState>> {
        match self
            .change_node_state(address, state, expected, false, Some(lock))
            .await?
        {
            StateChange::Changed(old) => Ok(Some(old)),
            StateChange::Unexpected | StateChange::LastUp => Ok(None),
        }
    }

    /// Takes an up or draining node down unless it is the last up node
    /// (decided in Redis, atomically across replicas): a verdict on
    /// timeouts alone never takes every node down (design.md §4.15).
    pub async fn mark_down_unless_last(&self, address: &str) -> StoreResult<StateChange> {
        self.change_node_state(
            address,
            NodeState::Down,
            &[NodeState::Up, NodeState::Draining],
            true,
            None,
        )
        .await
    }

    async fn change_node_state(
        &self,
        address: &str,
        state: NodeState,
        expected: &[NodeState],
        keep_last: bool,
        guard: Option<&Lock>,
    ) -> StoreResult<StateChange> {
        let expected = expected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let mut invocation = self.scripts.set_node_state.prepare_invoke();
        invocation
            .key(self.key(&["node", address]))
            .key(self.key(&["placeable"]))
            .key(self.key(&["counts"]))
            .key(self.key(&["weights"]))
            .arg(address)
            .arg(state.as_str())
            .arg(expected)
            .arg(if keep_last { "1" } else { "0" });
        if let Some(lock) = guard {
            let (key, token) = lock.key_and_token(self);
            invocation.key(key).arg(token);
        }
        let old = invocation.invoke_async(&mut self.conn()).await;
        self.sessions.invalidate_view();
        let old: Option<String> = old.context("changing a node's state in Redis")?;
        let change = match old.as_deref() {
            Some("last") => StateChange::LastUp,
            Some(old) => old
                .parse()
                .map(StateChange::Changed)
                .unwrap_or(StateChange::Unexpected),
            None => StateChange::Unexpected,
        };
        if state == NodeState::Up && matches!(change, StateChange::Changed(_)) {
            // The state stands either way: a node left closed is opened by
            // the next sweep (`Sweeper::reopen_closed`).
            if let Err(error) = self.sessions.open_to_new_sessions(address).await {
                tracing::warn!(node = %address, %error, "node up but not opened to new sessions; the next sweep opens it");
            }
        }
        Ok(change)
    }

    /// Records why a node is down ("" clears it) and, when given, the
    /// instance id it reports; only for a registered node.
    pub async fn set_node_notes(
        &self,
        address: &str,
        reason: &str,
        instance: Option<&str>,
    ) -> StoreResult<()> {
        self.scripts
            .set_node_notes
            .key(self.key(&["node", address]))
            .arg(reason)
            .arg(instance.unwrap_or(""))
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("recording a node's state notes in Redis")?;
        Ok(())
    }

    /// Records that a registered node is held down until an admin adds it
    /// again (`NodeRecord::held_down`), or that an admin did.
    pub async fn set_node_held_down(&self, address: &str, held: bool) -> StoreResult<()> {
        self.set_node_field(
            address,
            "held",
            if held { "1" } else { "0" },
            "recording a node's hold in Redis",
        )
        .await
    }

    /// Records what a registered node offers beyond the task's API.
    pub async fn set_node_offers(&self, address: &str, offers: Offers) -> StoreResult<()> {
        self.set_node_field(
            address,
            "offers",
            offers.encode(),
            "recording what a node offers in Redis",
        )
        .await
    }

    /// Changes a node's weight; its next placement already weighs it.
    pub async fn set_node_weight(&self, address: &str, weight: u32) -> StoreResult<()> {
        let changed = self
            .scripts
            .set_node_weight
            .key(self.key(&["node", address]))
            .key(self.key(&["placeable"]))
            .key(self.key(&["counts"]))
            .key(self.key(&["weights"]))
            .arg(address)
            .arg(weight)
            .invoke_async::<i64>(&mut self.conn())
            .await;
        self.sessions.invalidate_view();
        changed.context("changing a node's weight in Redis")?;
        Ok(())
    }

    /// Records the token of a clean the node has done, the fencing epoch
    /// presses to it carry from now on, unless a newer one is recorded
    /// (tokens only grow: a late writer cannot move it back).
    pub async fn set_node_epoch(&self, address: &str, epoch: u64) -> StoreResult<()> {
        self.scripts
            .set_node_epoch
            .key(self.key(&["node", address]))
            .arg(epoch)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("recording a node's fencing epoch in Redis")?;
        Ok(())
    }

    /// The fencing epoch the registry holds for a node (0: none yet).
    pub async fn node_epoch(&self, address: &str) -> StoreResult<u64> {
        let epoch: Option<u64> = self
            .conn()
            .hget(self.key(&["node", address]), "epoch")
            .await
            .context("reading a node's fencing epoch from Redis")?;
        Ok(epoch.unwrap_or(0))
    }

    /// Marks a registered node as draining until `until_ms` (the drain's
    /// deadline): the mark of a drain an admin asked for, which a removal's
    /// own brief draining does not carry.
    pub async fn set_drain_until(&self, address: &str, until_ms: i64) -> StoreResult<()> {
        self.set_node_field(
            address,
            "drain_until",
            until_ms,
            "recording a node's drain in Redis",
        )
        .await
    }

    /// Sets one field of a node's hash, only if the node is registered
    /// (HSET XX semantics: a removed node is not brought back half-made).
    async fn set_node_field(
        &self,
        address: &str,
        field: &str,
        value: impl redis::ToRedisArgs,
        context: &'static str,
    ) -> StoreResult<()> {
        self.scripts
            .set_node_field
            .key(self.key(&["node", address]))
            .arg(field)
            .arg(value)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context(context)?;
        Ok(())
    }

    /// The deadline of a drain an admin asked for, if the node has one.
    pub async fn drain_until(&self, address: &str) -> StoreResult<Option<i64>> {
        self.conn()
            .hget(self.key(&["node", address]), "drain_until")
            .await
            .context("reading a node's drain from Redis")
    }

    /// Deletes a node from the registry (after its sessions were unmapped).
    pub async fn delete_node(&self, address: &str) -> StoreResult<()> {
        if let Some(number) = self.sessions.node_number(address).await? {
            self.sessions.delete_indexes(number).await?;
        }
        let deleted = self
            .scripts
            .delete_node
            .key(self.key(&["node", address]))
            .key(self.key(&["nodes"]))
            .key(self.key(&["placeable"]))
            .key(self.key(&["counts"]))
            .key(self.key(&["weights"]))
            .arg(address)
            .invoke_async::<i64>(&mut self.conn())
            .await;
        self.sessions.invalidate_view();
        deleted.context("deleting a node from Redis")?;
        Ok(())
    }

    /// Gives a registered node its number: for a registry an older version
    /// wrote, which named nodes by address only.
    pub async fn set_node_number(&self, address: &str, number: u64) -> StoreResult<()> {
        redis::pipe()
            .atomic()
            .hset(self.key(&["node", address]), "number", number)
            .hset(self.key(&["node_numbers"]), address, number)
            .hset(self.key(&["node_addresses"]), number, address)
            .query_async::<()>(&mut self.conn())
            .await
            .context("numbering a node in Redis")
    }

    pub async fn get_node(&self, address: &str) -> StoreResult<Option<NodeRecord>> {
        self.sessions.settle_placed().await?;
        let (fields, sessions): (Vec<(String, String)>, Option<i64>) = redis::pipe()
            .hgetall(self.key(&["node", address]))
            .hget(self.key(&["counts"]), address)
            .query_async(&mut self.conn())
            .await
            .context("reading a node from Redis")?;
        Ok(NodeRecord::from_fields(address, &fields, sessions))
    }

    /// The node as recorded and whether a fence is up on it, read in one
    /// step (`MULTI` on the control slot): what a count read after this
    /// replica's silence is judged on (`protocol::press::count_shown`).
    pub async fn node_now(&self, address: &str) -> StoreResult<Option<(NodeRecord, bool)>> {
        let (fields, fenced): (Vec<(String, String)>, bool) = redis::pipe()
            .atomic()
            .hgetall(self.key(&["node", address]))
            .hexists(self.key(&["fences"]), address)
            .query_async(&mut self.conn())
            .await
            .context("reading a node and its fence from Redis")?;
        Ok(NodeRecord::from_fields(address, &fields, None).map(|record| (record, fenced)))
    }

    /// Every registered node, in registration order. O(nodes): admin and
    /// the periodic refresh of each replica's view only.
    pub async fn list_nodes(&self) -> StoreResult<Vec<NodeRecord>> {
        self.sessions.settle_placed().await?;
        let mut conn = self.conn();
        let addresses: Vec<String> = conn
            .zrange(self.key(&["nodes"]), 0, -1)
            .await
            .context("listing nodes in Redis")?;
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for address in &addresses {
            pipe.hgetall(self.key(&["node", address]));
        }
        pipe.hgetall(self.key(&["counts"]));
        // The last reply is the counts hash, as pairs like the others.
        let mut all: Vec<Vec<(String, String)>> = pipe
            .query_async(&mut conn)
            .await
            .context("reading nodes from Redis")?;
        let counts: HashMap<String, i64> = all
            .pop()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(address, count)| Some((address, count.parse().ok()?)))
            .collect();
        Ok(addresses
            .iter()
            .zip(all)
            .filter_map(|(address, fields)| {
                NodeRecord::from_fields(address, &fields, counts.get(address).copied())
            })
            .collect())
    }

    /// The registry's epoch, if Redis has one (see the module docs).
    pub async fn registry_epoch(&self) -> StoreResult<Option<String>> {
        self.conn()
            .get(self.key(&["registry"]))
            .await
            .context("reading the registry epoch from Redis")
    }

    /// Stops every placement until the registry is rebuilt: a group forgot.
    pub async fn clear_registry_epoch(&self) -> StoreResult<()> {
        self.conn()
            .del::<_, ()>(self.key(&["registry"]))
            .await
            .context("clearing the registry epoch in Redis")
    }

    /// Declares the registry complete (fresh, or rebuilt after amnesia),
    /// once the Redis's identity and the layout are kept beside it
    /// (`Rebuilder::declare_complete`).
    pub async fn set_registry_epoch(&self, epoch: &str) -> StoreResult<()> {
        self.conn()
            .set::<_, _, ()>(self.key(&["registry"]), epoch)
            .await
            .context("writing the registry epoch to Redis")
    }
}
