//! The node registry shared by every replica.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::{now_ms, Context, SessionStore, StoreResult};
use crate::nodes::record::{NodeRecord, NodeState, Offers};

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

impl SessionStore {
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
        self.view.invalidate();
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
        lock: &super::lock::Lock,
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
        guard: Option<&super::lock::Lock>,
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
        self.view.invalidate();
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
            if let Err(error) = self.open_to_new_sessions(address).await {
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
        self.view.invalidate();
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
        if let Some(number) = self.node_number(address).await? {
            self.delete_indexes(number).await?;
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
        self.view.invalidate();
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
        self.settle_placed().await?;
        let (fields, sessions): (Vec<(String, String)>, Option<i64>) = redis::pipe()
            .hgetall(self.key(&["node", address]))
            .hget(self.key(&["counts"]), address)
            .query_async(&mut self.conn())
            .await
            .context("reading a node from Redis")?;
        Ok(record_from_fields(address, fields, sessions))
    }

    /// Every registered node, in registration order. O(nodes): admin and
    /// the periodic refresh of each replica's view only.
    pub async fn list_nodes(&self) -> StoreResult<Vec<NodeRecord>> {
        self.settle_placed().await?;
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
                record_from_fields(address, fields, counts.get(address).copied())
            })
            .collect())
    }

    /// Takes a short lock named `name`; returns its token if taken.
    pub async fn try_lock(&self, name: &str, ttl_ms: u64) -> StoreResult<Option<String>> {
        let token = uuid::Uuid::new_v4().to_string();
        let taken: Option<String> = redis::cmd("SET")
            .arg(self.key(&["lock", name]))
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut self.conn())
            .await
            .context("taking a lock in Redis")?;
        Ok(taken.map(|_| token))
    }

    /// Extends a lock's life if it is still ours; false if it is not.
    pub async fn renew_lock(&self, name: &str, token: &str, ttl_ms: u64) -> StoreResult<bool> {
        let renewed: i64 = self
            .scripts
            .renew_lock
            .key(self.key(&["lock", name]))
            .arg(token)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn())
            .await
            .context("renewing a lock in Redis")?;
        Ok(renewed == 1)
    }

    /// Fails unless the lock under `key` holds `token`.
    pub(crate) async fn check_lock(&self, key: &str, token: &str) -> StoreResult<()> {
        let held: Option<String> = self
            .conn()
            .get(key)
            .await
            .context("reading a node lock from Redis")?;
        match held.as_deref() == Some(token) {
            true => Ok(()),
            false => Err(super::StoreError::lock_lost()),
        }
    }

    /// Releases a lock if it is still ours.
    pub async fn unlock(&self, name: &str, token: &str) -> StoreResult<()> {
        self.scripts
            .unlock
            .key(self.key(&["lock", name]))
            .arg(token)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("releasing a lock in Redis")?;
        Ok(())
    }
}

fn record_from_fields(
    address: &str,
    fields: Vec<(String, String)>,
    sessions: Option<i64>,
) -> Option<NodeRecord> {
    if fields.is_empty() {
        return None;
    }
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    Some(NodeRecord {
        address: address.to_owned(),
        name: get("name").unwrap_or(address).to_owned(),
        weight: get("weight").and_then(|w| w.parse().ok()).unwrap_or(1),
        state: get("state")
            .and_then(|s| s.parse().ok())
            .unwrap_or(NodeState::Down),
        active_sessions: sessions.unwrap_or(0),
        instance: get("instance").filter(|i| !i.is_empty()).map(str::to_owned),
        reason: get("reason").filter(|r| !r.is_empty()).map(str::to_owned),
        number: get("number").and_then(|n| n.parse().ok()).unwrap_or(0),
        offers: Offers::decode(get("offers").unwrap_or("")),
        epoch: get("epoch").and_then(|e| e.parse().ok()).unwrap_or(0),
    })
}
