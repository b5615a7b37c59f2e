//! Session history (`session_placements`): every placement of a session,
//! with its node, the base it started from and why it was placed: `new`
//! (nothing archived), `restored` (its previous life ended, by expiry, a
//! removal or a rebuild, and it continues from its archive) or `failed_over`
//! (its node failed). Written off the request path ([`super::writer`]) and
//! kept for `SESSION_HISTORY_SECS`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::writer::BatchWriter;
use super::{Archive, ArchiveResult};

/// Why a session was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    New,
    Restored,
    FailedOver,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::New => "new",
            Cause::Restored => "restored",
            Cause::FailedOver => "failed_over",
        }
    }
}

/// One placement, as recorded.
#[derive(Debug, Clone)]
pub struct Placed {
    pub session_id: String,
    pub node: String,
    pub base: i64,
    pub cause: Cause,
    /// When it happened (not when the writer got to it).
    pub at: DateTime<Utc>,
}

/// A placement as `GET /sessions/{id}` shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PlacementRecord {
    pub at: DateTime<Utc>,
    pub node: String,
    pub base: i64,
    pub cause: String,
    pub replica: String,
}

impl Archive {
    /// Records a placement without waiting.
    pub fn record_placement(&self, session_id: &str, node: &str, base: i64, cause: Cause) {
        let Some(replica) = self.replica.get() else {
            return;
        };
        let writer = self.history.get_or_init(|| {
            let (archive, replica) = (self.without_writers(), replica.clone());
            BatchWriter::start("session placements to the history", move |rows| {
                let (archive, replica) = (archive.clone(), replica.clone());
                async move { archive.insert_placements(&replica, &rows).await }
            })
        });
        writer.send(Placed {
            session_id: session_id.to_owned(),
            node: node.to_owned(),
            base,
            cause,
            at: Utc::now(),
        });
    }

    async fn insert_placements(&self, replica: &str, rows: &[Placed]) -> ArchiveResult<()> {
        let ids: Vec<&str> = rows.iter().map(|r| r.session_id.as_str()).collect();
        let nodes: Vec<&str> = rows.iter().map(|r| r.node.as_str()).collect();
        let bases: Vec<i64> = rows.iter().map(|r| r.base).collect();
        let causes: Vec<&str> = rows.iter().map(|r| r.cause.as_str()).collect();
        let ats: Vec<DateTime<Utc>> = rows.iter().map(|r| r.at).collect();
        self.run("writing session placements to Postgres", async {
            sqlx::query(
                "INSERT INTO session_placements (cluster, replica, session_id, node, base, cause, at)
                 SELECT $1, $2, s, n, b, c, a
                 FROM UNNEST($3::varchar[], $4::text[], $5::bigint[], $6::text[], $7::timestamptz[])
                   AS t(s, n, b, c, a)",
            )
            .bind(self.cluster())
            .bind(replica)
            .bind(&ids)
            .bind(&nodes)
            .bind(&bases)
            .bind(&causes)
            .bind(&ats)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// A session's placements, newest first.
    pub async fn placements(
        &self,
        session_id: &str,
        limit: i64,
    ) -> ArchiveResult<Vec<PlacementRecord>> {
        self.run("reading a session's history from Postgres", async {
            sqlx::query_as(
                "SELECT at, node, base, cause, replica FROM session_placements
                 WHERE cluster = $1 AND session_id = $2
                 ORDER BY at DESC LIMIT $3",
            )
            .bind(self.cluster())
            .bind(session_id)
            .bind(limit)
            .fetch_all(self.pool())
            .await
        })
        .await
    }

    /// Drops this cluster's history older than `before`. Returns the rows
    /// dropped.
    pub async fn forget_placements_before(&self, before: DateTime<Utc>) -> ArchiveResult<u64> {
        self.run("trimming the session history in Postgres", async {
            sqlx::query("DELETE FROM session_placements WHERE cluster = $1 AND at < $2")
                .bind(self.cluster())
                .bind(before)
                .execute(self.pool())
                .await
                .map(|r| r.rows_affected())
        })
        .await
    }
}
