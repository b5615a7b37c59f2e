//! Cleans: a node archives and forgets sessions under the fence, with a
//! token, and the balancer folds and unmaps what it archived (design.md
//! §4.6, §4.7); expiry and removal are cleans, and a clean whose cleaner
//! died is finished from its journal.

use std::collections::HashSet;
use std::time::Duration;

use tracing::{info, warn};

use super::fenced::Fenced;
use super::{CleanError, CleanReport, NodeCleaner};
use crate::nodes::{CleanOutcome, NodeCallError};
use crate::store::{FenceReason, Journal, NodeState, StoreError};
use crate::store::{NodeLock, LOCK_WAIT};

impl NodeCleaner {
    /// Archives the expired sessions `ids` of a node and unmaps them; the
    /// node's other sessions stay on it (with a new base if the node cleaned
    /// them too). Sessions no longer mapped to the node are skipped.
    pub async fn expire(
        &self,
        addr: &str,
        ids: &[String],
        expired_by_ms: i64,
    ) -> Result<CleanReport, CleanError> {
        let ids = ids.to_vec();
        self.locked(addr, LOCK_WAIT, move |this, lock| async move {
            let addr = lock.node();
            // Re-read under the lock: another replica (or a press of ours)
            // may have done it, and the session may have been placed anew
            // since, on this very node; a live session is not archived.
            let placements = this.store.sessions.placements_of(&ids).await?;
            let leaving: Vec<String> = ids
                .iter()
                .zip(placements)
                .filter(|(_, placed)| {
                    placed
                        .as_ref()
                        .is_some_and(|(node, exp)| *node == addr && *exp <= expired_by_ms)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if leaving.is_empty() {
                return Ok(CleanReport::default());
            }
            let expired = leaving.len();
            let report = match this.store.nodes.get_node(addr).await?.map(|n| n.state) {
                Some(NodeState::Up | NodeState::Draining) => {
                    this.fenced_clean(&lock, leaving, Some(expired_by_ms))
                        .await?
                }
                // Failed: its sessions leave under its fence, after its
                // archive writes are revoked; their last archive stands.
                Some(NodeState::Down) => CleanReport {
                    unmapped: this.fail_over_locked(&lock).await?,
                    ..CleanReport::default()
                },
                // Gone: nobody can press it any more.
                None => CleanReport {
                    unmapped: this
                        .store
                        .sessions
                        .apply_clean(lock.lock(), addr, &leaving, Some(expired_by_ms), &[])
                        .await?,
                    ..CleanReport::default()
                },
            };
            Ok(CleanReport { expired, ..report })
        })
        .await
    }

    /// Removal: archive every session of the node (unless it is down),
    /// unmap them all, delete the node.
    pub async fn remove(
        &self,
        lock: &NodeLock,
        state: NodeState,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        let report = if state == NodeState::Down {
            // Its counts are stale and some sessions live elsewhere already:
            // archiving would overwrite newer totals. Move what is left.
            CleanReport {
                unmapped: self.fail_over_locked(lock).await?,
                ..CleanReport::default()
            }
        } else {
            // Before its indexes are read: a replica's view may offer it
            // still (a failover closes it itself).
            self.store.sessions.close_to_new_sessions(addr).await?;
            let leaving = self.store.sessions.node_sessions(addr).await?;
            match self.fenced_clean(lock, leaving, None).await {
                Err(CleanError::Node { source, .. }) if source.is_unreachable() => {
                    // The node failed and was failed over under the fence.
                    warn!(node = %addr, error = %source, "node did not archive on removal; what the replicas showed of its sessions was archived on its behalf");
                    CleanReport::default()
                }
                // A node that refused to archive still holds its counts:
                // it stays (draining) until a removal succeeds.
                other => other?,
            }
        };
        self.store.nodes.delete_node(addr).await?;
        Ok(report)
    }

    /// The clean proper, under the fence: `/clean archive=true`, asking the
    /// node to clean only `leaving` when they `expired_by` a moment (a node
    /// may clean all anyway). `leaving` are unmapped afterwards.
    async fn fenced_clean(
        &self,
        lock: &NodeLock,
        leaving: Vec<String>,
        expired_by: Option<i64>,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        // A clean left unsettled (its journal and fence stay up) is
        // finished by the sweep first: a new fence or journal over it
        // would orphan what the node archived under its token.
        if self.store.fences.journal(addr).await?.is_some() {
            return Err(CleanError::Busy {
                node: addr.to_owned(),
            });
        }
        let fence = self.raise_and_wait(lock, FenceReason::Clean).await?;
        let result = self.clean_under_fence(&fence, leaving, expired_by).await;
        fence.lower().await;
        result
    }

    async fn clean_under_fence(
        &self,
        fence: &Fenced<'_>,
        leaving: Vec<String>,
        expired_by: Option<i64>,
    ) -> Result<CleanReport, CleanError> {
        let (lock, addr) = (fence.lock(), fence.node());
        let record = self.store.nodes.get_node(addr).await?;
        // The node may have failed while we waited for the acks: a failed
        // node is never asked to archive (its counts are stale).
        if record.as_ref().map(|n| n.state) == Some(NodeState::Down) {
            return Ok(CleanReport {
                unmapped: self.hand_over_and_move(lock).await?,
                ..CleanReport::default()
            });
        }
        if !record.is_some_and(|n| n.offers.clean_tokens) {
            // What this node archives of its sessions now is theirs, also
            // where a hand-over for a node before it closed their rows
            // (`Archive::open_rows`; model.md: `late_rows_refused`). It
            // archives all it holds: every session mapped to it.
            let holds = self.store.sessions.node_sessions(addr).await?;
            self.archive.open_rows(Some(&holds)).await?;
        }
        let generation = self.archive.issue_token(addr).await?;
        let journal = Journal {
            seq: fence.seq(),
            generation,
            leaving,
            expired_by,
        };
        if !self
            .store
            .fences
            .put_journal(lock.lock(), addr, &journal)
            .await?
        {
            self.archive.revoke_token(generation).await?;
            return Err(CleanError::Busy {
                node: addr.to_owned(),
            });
        }
        lock.lock().check()?;
        let only = journal.selective().then_some(journal.leaving.as_slice());
        let call = self.client.clean(addr, true, only, Some(generation));
        let outcome = match self.unless_declared_down(addr, call).await {
            Ok(outcome) => outcome,
            Err(source) => return Err(self.clean_failed(fence, &journal, source).await),
        };
        // From here on the node has forgotten sessions. If Postgres or
        // Redis fails before the clean is settled, the journal stays and
        // with it the fence: the sweep finishes the clean once they answer
        // ([`finish_stale`](Self::finish_stale)), and not one session is
        // unmapped before its token is recorded completed (a token left
        // neither completed nor revoked would be revoked by a later
        // failover, and what the node archived with it lost).
        self.settle(fence, &journal, generation, outcome).await
    }

    /// `call` to the node, given up when the node is declared down meanwhile
    /// (a press's timer found it silent): the clean then fails it over at
    /// once, under its fence, instead of waiting out its own timeout. A
    /// stopped node stalls its own sessions for one node timeout, and a
    /// failover never waits behind a clean of a node that does not answer.
    async fn unless_declared_down<T>(
        &self,
        addr: &str,
        call: impl std::future::Future<Output = Result<T, NodeCallError>>,
    ) -> Result<T, NodeCallError> {
        let Some(entry) = self.table.get(addr) else {
            return call.await;
        };
        let down = entry.declared_down();
        if !entry.serves_presses() {
            return Err(NodeCallError::Abandoned);
        }
        tokio::select! {
            biased;
            answer = call => answer,
            _ = down => Err(NodeCallError::Abandoned),
        }
    }

    /// The end of a clean the node did: fold and apply it, record its
    /// token as the node's fencing epoch (before the fence comes down, so
    /// presses read after it carry the epoch) and delete the journal.
    async fn settle(
        &self,
        fence: &Fenced<'_>,
        journal: &Journal,
        generation: i64,
        outcome: CleanOutcome,
    ) -> Result<CleanReport, CleanError> {
        let (lock, addr) = (fence.lock(), fence.node());
        let report = self.fold_and_apply(fence, journal, outcome).await?;
        self.store
            .fences
            .end_journal(lock.lock(), addr, journal.seq, Some(generation as u64))
            .await?;
        info!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, generation, "node cleaned");
        Ok(report)
    }

    /// A `/clean` that did not end in OK: its token is revoked (whatever the
    /// node wrote with it is never folded). A node that did not answer at
    /// all failed: it is declared down and its sessions move off it now,
    /// under the fence this clean holds. A node that answered an error
    /// forgot nothing and keeps its sessions. The journal is ended last: a
    /// cleaner that pauses anywhere in here leaves it, and its fence, to the
    /// sweep, which finds the token revoked and fails the node over
    /// ([`finish_stale`](Self::finish_stale)). An operation that lost the
    /// node's lock meanwhile stops where it finds out.
    async fn clean_failed(
        &self,
        fence: &Fenced<'_>,
        journal: &Journal,
        source: NodeCallError,
    ) -> CleanError {
        let (lock, addr) = (fence.lock(), fence.node());
        let handled = async {
            lock.lock().check_held(&self.store.locks).await?;
            self.archive.revoke_token(journal.generation).await?;
            if source.is_unreachable() {
                warn!(node = %addr, error = %source, "node did not answer its clean; declaring it down");
                let reason = format!("did not answer a clean: {source}");
                // Sent, and maybe on its way still (what may have counted a
                // press may have reached the node).
                self.declare_down(lock, &reason, source.may_have_counted())
                    .await?;
                self.hand_over_and_move(lock).await?;
            }
            self.store
                .fences
                .end_journal(lock.lock(), addr, journal.seq, None)
                .await?;
            Ok::<_, CleanError>(())
        };
        match handled.await {
            Ok(()) => CleanError::Node {
                node: addr.to_owned(),
                source,
            },
            Err(error) => error,
        }
    }

    /// Settle what the node archived, then unmap the leaving sessions and
    /// re-base the live ones the node forgot too.
    ///
    /// A node that archived only the leaving sessions needs no fold now:
    /// their rows stand as written, under a token marked completed (one row
    /// updated), and each is folded when its session comes back, since
    /// placement folds first. A node that forgot everything is folded at
    /// once: its live sessions are re-based on their totals, and the node
    /// will archive them again from zero.
    async fn fold_and_apply(
        &self,
        fence: &Fenced<'_>,
        journal: &Journal,
        outcome: CleanOutcome,
    ) -> Result<CleanReport, CleanError> {
        let (lock, addr) = (fence.lock(), fence.node());
        if let CleanOutcome::Only(_) = &outcome {
            if !self.archive.complete_token(journal.generation).await? {
                // Revoked: another operation took the node over (this one
                // paused) and failed it; the journal is its to finish.
                return Err(StoreError::lock_lost().into());
            }
            let unmapped = self
                .store
                .sessions
                .apply_clean(lock.lock(), addr, &journal.leaving, journal.expired_by, &[])
                .await?;
            return Ok(CleanReport {
                unmapped,
                archived: true,
                ..CleanReport::default()
            });
        }
        let (folded_ids, cleaned_all) = match outcome {
            CleanOutcome::Only(_) => (journal.leaving.clone(), false),
            CleanOutcome::All => (self.store.sessions.node_sessions(addr).await?, true),
        };
        let totals = self.archive.fold(&folded_ids).await?;
        let leaving: HashSet<&String> = journal.leaving.iter().collect();
        // A live session without an archive row had no clicks on the node:
        // its base is unchanged and stays as it is.
        let rebased: Vec<(String, i64)> = if cleaned_all {
            totals
                .into_iter()
                .filter(|(id, _)| !leaving.contains(id))
                .collect()
        } else {
            Vec::new()
        };
        let unmapped = self
            .store
            .sessions
            .apply_clean(
                lock.lock(),
                addr,
                &journal.leaving,
                journal.expired_by,
                &rebased,
            )
            .await?;
        Ok(CleanReport {
            unmapped,
            rebased: rebased.len(),
            archived: true,
            ..CleanReport::default()
        })
    }

    /// Finishes a clean whose cleaner died (or lost Postgres or Redis)
    /// after writing its journal: the stale fence stays up until then.
    /// Finished only when the node finished it: the clean is sent again,
    /// with its token and its sessions. A node that did it already holds
    /// nothing of those sessions (no press reached it since: the fence is
    /// up, and a fencing node refuses presses from before the clean), so
    /// it archives nothing and forgets nothing new; one that never got it
    /// does it now. Then it is settled as any clean. A node that does not
    /// answer failed (its token is revoked and its sessions move, as for
    /// any clean it does not answer); one that answers an error keeps the
    /// journal for the next sweep, since the first `/clean` may have been
    /// done. Skipped while another operation holds the node.
    pub async fn finish_stale(&self, addr: &str, seq: u64) -> Result<bool, CleanError> {
        self.locked(addr, Duration::ZERO, move |this, lock| async move {
            let addr = lock.node().to_owned();
            // Which Redis holds the journal's fence: read first (Fenced).
            let server = this.store.replicas.server_id().await.ok();
            let Some(journal) = this.store.fences.journal(&addr).await? else {
                // None, or one that does not parse (deleted here, or the
                // fence it keeps would never come down).
                this.store.fences.end_journal(lock.lock(), &addr, seq, None).await?;
                this.store.fences.lower_fence(&addr, seq).await?;
                return Ok(false);
            };
            // The journal's fence, up since its cleaner stopped: this
            // operation's now.
            let fence = Fenced::adopt(&this, &lock, journal.seq, server);
            let state = this.store.nodes.get_node(&addr).await?.map(|n| n.state);
            let report = match journal.generation {
                // Failed (or gone) since: it is never asked to archive, and
                // what it wrote under the token is revoked with its others.
                _ if state != Some(NodeState::Up) && state != Some(NodeState::Draining) => {
                    let unmapped = match state {
                        Some(_) => this.hand_over_and_move(&lock).await?,
                        None => 0,
                    };
                    this.store.fences.end_journal(lock.lock(), &addr, journal.seq, None).await?;
                    CleanReport {
                        unmapped,
                        ..CleanReport::default()
                    }
                }
                // Its cleaner gave up on the clean (or a failover raised
                // over it did), and whether the node did it is unknown:
                // the node is failed over, so nothing it forgot is counted
                // from zero.
                generation if this.archive.token_revoked(generation).await? => {
                    this.declare_down(&lock, "an interrupted clean was given up", true)
                        .await?;
                    let unmapped = this.hand_over_and_move(&lock).await?;
                    this.store.fences.end_journal(lock.lock(), &addr, journal.seq, None).await?;
                    CleanReport {
                        unmapped,
                        ..CleanReport::default()
                    }
                }
                generation => {
                    lock.lock().check_held(&this.store.locks).await?;
                    let only = journal.selective().then_some(journal.leaving.as_slice());
                    match this.client.clean(&addr, true, only, Some(generation)).await {
                        Ok(outcome) => this.settle(&fence, &journal, generation, outcome).await?,
                        Err(source) if source.is_unreachable() => {
                            let error = this.clean_failed(&fence, &journal, source).await;
                            fence.lower().await;
                            return Err(error);
                        }
                        Err(source) => {
                            return Err(CleanError::Node {
                                node: addr.clone(),
                                source,
                            })
                        }
                    }
                }
            };
            fence.lower().await;
            if journal.seq != seq {
                this.store.fences.lower_fence(&addr, seq).await?;
            }
            warn!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, "finished an interrupted clean");
            Ok(true)
        })
        .await
    }
}
