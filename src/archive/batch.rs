//! Folds of sessions being placed, gathered into one query. Every new
//! session costs a fold (design.md §4.6) before it is placed; one statement per
//! session made Postgres round trips the cost of a new session. Here, the
//! folds asked for while one batch is in Postgres go together in the next
//! ([`GroupCommit`]): under load a batch holds as many sessions as arrived
//! during one round trip, and a lone placement waits for nothing.

use std::collections::HashMap;

use crate::group_commit::GroupCommit;

use super::{Archive, ArchiveError, ArchiveResult};

/// Most sessions in one batch.
const MAX_BATCH: usize = 512;
/// Batches in Postgres at once.
const IN_FLIGHT: usize = 4;

/// The sending side; the batching task ends when the last one is dropped.
pub struct FoldBatcher {
    batches: GroupCommit<String, ArchiveResult<i64>>,
}

impl FoldBatcher {
    /// Starts the batching task on the current runtime.
    pub fn start(archive: Archive) -> Self {
        let batches = GroupCommit::start(MAX_BATCH, IN_FLIGHT, move |ids: Vec<String>| {
            let archive = archive.clone();
            async move {
                let result = archive.fold(&ids).await;
                answer(&ids, result)
            }
        });
        Self { batches }
    }

    /// The session's archived total after the fold (0 if never archived).
    pub async fn fold_one(&self, session_id: &str) -> ArchiveResult<i64> {
        self.batches
            .submit(session_id.to_owned())
            .await
            .unwrap_or_else(|| Err(gone()))
    }
}

/// One answer per id, in order: its total, or the batch's error.
fn answer(ids: &[String], result: ArchiveResult<HashMap<String, i64>>) -> Vec<ArchiveResult<i64>> {
    match result {
        Ok(totals) => ids
            .iter()
            .map(|id| Ok(totals.get(id).copied().unwrap_or(0)))
            .collect(),
        Err(error) => ids
            .iter()
            .map(|_| {
                Err(ArchiveError {
                    context: error.context,
                    source: error.source.replicate(),
                })
            })
            .collect(),
    }
}

fn gone() -> ArchiveError {
    ArchiveError {
        context: "folding a session's archived clicks in Postgres",
        source: super::ArchiveFailure::Open,
    }
}
