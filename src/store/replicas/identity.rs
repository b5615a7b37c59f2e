//! Redis may come back with older data (design.md §4.16): restarted from
//! an older RDB or AOF, or a failover to a replica that had not received
//! the last writes. Its keys then look complete, so the registry epoch
//! alone cannot tell; its identity can. Every Redis process has a random
//! `run_id`; the one that held the registry when it was declared complete
//! is kept under `P{ctl}identity`. A Redis that restarted, however much it
//! kept, or a replica promoted in its place, reports another `run_id`
//! beside the old value, and the registry counts as forgotten: it is
//! rebuilt (every node archives and is cleaned under a fresh token before
//! anything is placed), as after amnesia. A restart that kept everything
//! costs that rebuild too; telling it apart would need a write counter
//! that Postgres also knows, on every placement.
//!
//! Between the moment Redis comes back and the once-a-second registry
//! check, a replica must not serve from it: any call that lost its
//! connection marks the identity unverified, and the next session read or
//! placement checks it first (one `INFO`), so no press is placed from, or
//! forwarded under, a mapping of the older data.
//!
//! On a Redis Cluster each primary has its own `run_id`, and any one of
//! them may come back on an older snapshot alone: each session group keeps
//! the identity of the primary that held it beside its epoch (a snapshot
//! holds the epochs, so they alone cannot tell). A group whose kept
//! identity is another live primary's was moved there (a reshard): it is
//! recorded again, not rebuilt. One that names no live primary is on a
//! server that restarted or failed over (`judge`). `INFO` runs in a script
//! (identity.lua), so each reading comes from the server that holds its
//! key, without this replica knowing the slot map.

use redis::AsyncCommands;

use super::{Context, Replicas, StoreResult};
use crate::store::fanout::all_groups;
use crate::store::StoreError;

/// What the identity check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The Redis that holds the registry is the one that completed it.
    Same,
    /// Another process answers (restarted or failed over): its data may be
    /// older than what was served.
    Changed,
    /// No registry yet (or no identity kept: written now).
    Unknown,
}

/// Each kept identity beside its server's own, as identity.lua reads them.
type Readings = Vec<(String, String)>;

/// What the readings say; `registry`: a registry was declared complete.
/// The decision alone, without I/O, so that it is tested on its own.
fn judge(readings: &[(String, String)], registry: bool) -> (Identity, Vec<usize>) {
    let live: std::collections::HashSet<&str> = readings
        .iter()
        .map(|(_, current)| current.as_str())
        .collect();
    let mut moved = Vec::new();
    let mut missing = false;
    for (i, (kept, current)) in readings.iter().enumerate() {
        if kept.is_empty() {
            missing = true;
        } else if live.contains(kept.as_str()) {
            if kept != current {
                moved.push(i);
            }
        } else {
            return (Identity::Changed, Vec::new());
        }
    }
    match (missing, registry) {
        // A registry (or a group) that keeps no identity cannot be vouched for.
        (true, true) => (Identity::Changed, Vec::new()),
        (true, false) => (Identity::Unknown, Vec::new()),
        (false, _) => (Identity::Same, moved),
    }
}

impl Replicas {
    /// The identity keys: the control slot's, and on a cluster each
    /// group's (on one Redis they share its server).
    fn identity_keys(&self) -> Vec<String> {
        let mut keys = vec![self.key(&["identity"])];
        if self.cluster {
            keys.extend(all_groups().map(|group| self.group_key(&group, &["identity"])));
        }
        keys
    }

    /// identity.lua on `keys`, all at once; `mode` 'keep' records them.
    async fn read_identities(&self, keys: &[String], mode: &str) -> StoreResult<Readings> {
        let calls = keys.iter().map(|key| async move {
            let mut invocation = self.scripts.identity.key(key);
            invocation.arg(mode);
            invocation
                .invoke_async::<(String, String)>(&mut self.conn())
                .await
        });
        futures::future::try_join_all(calls)
            .await
            .context("reading the identity of the Redis servers")
    }

    /// Which server answers: its `run_id`, new at every start and on every
    /// failover (a Redis that may hold older data). On a Redis Cluster,
    /// where each primary has its own, one fixed word (the groups carry
    /// theirs: `identity`).
    pub async fn server_id(&self) -> StoreResult<String> {
        if self.cluster {
            return Ok("cluster".to_owned());
        }
        let keys = [self.key(&["identity"])];
        let mut readings = self.read_identities(&keys, "read").await?;
        Ok(readings
            .pop()
            .map(|(_, current)| current)
            .unwrap_or_default())
    }

    /// Compares the servers that answer with those that completed the
    /// registry (kept before the registry: a registry without one cannot
    /// be vouched for, and is rebuilt). Groups moved to another live
    /// primary are recorded there.
    pub async fn identity(&self) -> StoreResult<Identity> {
        let begun = self.verified.begin();
        let keys = self.identity_keys();
        let readings = self.read_identities(&keys, "read").await?;
        let registry: bool = self
            .conn()
            .exists(self.key(&["registry"]))
            .await
            .context("reading the registry's identity from Redis")?;
        let (found, moved) = judge(&readings, registry);
        let moved: Vec<String> = moved.into_iter().map(|i| keys[i].clone()).collect();
        self.read_identities(&moved, "keep").await?;
        if found != Identity::Changed {
            self.verified.set(begun);
        }
        Ok(found)
    }

    /// Records the answering servers as the registry's (before the
    /// registry is declared complete).
    pub async fn keep_identity(&self) -> StoreResult<()> {
        self.read_identities(&self.identity_keys(), "keep").await?;
        Ok(())
    }

    /// Before a session of `group` is read or placed: nothing is served
    /// from a Redis whose identity changed since the registry was
    /// complete. On a cluster, after a lost connection, the control slot
    /// and the session's own group are checked (two keys, not every
    /// group's), until the registry check vouches for them all.
    pub(in crate::store) async fn check_identity(&self, group: &str) -> StoreResult<()> {
        if self.verified.is_set() {
            return Ok(());
        }
        if !self.cluster {
            return self.confirm_identity().await;
        }
        let keys = [
            self.key(&["identity"]),
            self.group_key(group, &["identity"]),
        ];
        // A reading that fails (a slot moving under it) says nothing of the
        // primary: the press goes on, the next read checks again, and the
        // once-a-second registry check reads every group.
        let Ok(readings) = self.read_identities(&keys, "read").await else {
            return Ok(());
        };
        match judge(&readings, true).0 {
            Identity::Changed => Err(StoreError::identity_changed()),
            Identity::Same | Identity::Unknown => Ok(()),
        }
    }

    /// Checks the identity now, whatever the calls since: before trusting
    /// a node's word over what Redis holds (a node that refuses an epoch
    /// newer than any Redis recorded may be talking to a rolled-back Redis).
    pub async fn confirm_identity(&self) -> StoreResult<()> {
        match self.identity().await? {
            Identity::Changed => Err(StoreError::identity_changed()),
            Identity::Same | Identity::Unknown => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{judge, Identity};

    fn readings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(kept, current)| (kept.to_string(), current.to_string()))
            .collect()
    }

    #[test]
    fn the_servers_that_completed_the_registry_are_the_same() {
        let found = judge(&readings(&[("a", "a"), ("b", "b"), ("a", "a")]), true);
        assert_eq!(found, (Identity::Same, vec![]));
    }

    #[test]
    fn a_group_that_names_a_server_no_longer_live_is_on_a_restarted_one() {
        let found = judge(&readings(&[("a", "a"), ("b", "c"), ("b", "c")]), true);
        assert_eq!(found.0, Identity::Changed);
    }

    #[test]
    fn a_group_moved_to_another_live_primary_is_recorded_there() {
        let found = judge(&readings(&[("a", "a"), ("b", "b"), ("a", "b")]), true);
        assert_eq!(found, (Identity::Same, vec![2]));
    }

    #[test]
    fn a_registry_or_group_without_an_identity_cannot_be_vouched_for() {
        assert_eq!(
            judge(&readings(&[("a", "a"), ("", "a")]), true).0,
            Identity::Changed
        );
        assert_eq!(
            judge(&readings(&[("", "a"), ("", "a")]), false).0,
            Identity::Unknown
        );
    }
}
