//! Clean tokens: the generations that fence superseded archive writes
//! (design.md §4.10). Each `/clean archive=true` gets a fresh token from a
//! Postgres sequence (durable and increasing, also across a Redis that
//! forgot). A node that carries the token stamps its rows with it and never
//! overwrites a row stamped with a newer one; the fold drops whatever a
//! revoked token wrote. A token is revoked when its clean did not end in OK,
//! and every token of a node that did not complete is revoked before its
//! sessions leave it after a failure: whatever the node archives late can no
//! longer be counted. A completed token (its clean ended in OK) is never
//! revoked: what it wrote is folded when each session comes back.

use super::{Archive, ArchiveResult};

impl Archive {
    /// A new token for a clean of `node`.
    pub async fn issue_token(&self, node: &str) -> ArchiveResult<i64> {
        self.run("issuing a clean token in Postgres", async {
            sqlx::query_scalar(
                "INSERT INTO clean_tokens (cluster, node) VALUES ($1, $2) RETURNING generation",
            )
            .bind(self.cluster())
            .bind(node)
            .fetch_one(self.pool())
            .await
        })
        .await
    }

    /// A token for a wipe (`/clean archive=false`): from the same sequence,
    /// so it orders with every clean token, but with no row, since a wipe
    /// archives nothing. A fencing node takes it as its new floor.
    pub async fn wipe_token(&self) -> ArchiveResult<i64> {
        self.run("taking a wipe token from Postgres", async {
            sqlx::query_scalar(
                "SELECT nextval(pg_get_serial_sequence('clean_tokens', 'generation'))",
            )
            .fetch_one(self.pool())
            .await
        })
        .await
    }

    /// Revokes one token: its clean did not end in OK, so nothing it wrote
    /// may be folded.
    pub async fn revoke_token(&self, generation: i64) -> ArchiveResult<()> {
        self.run("revoking a clean token in Postgres", async {
            sqlx::query(
                "UPDATE clean_tokens SET revoked = true WHERE generation = $1 AND NOT completed",
            )
            .bind(generation)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// A clean ended in OK: what its token wrote stands for good (one row
    /// updated, however many sessions the clean archived). False if the
    /// token was revoked meanwhile (another operation took the node over
    /// and failed it): then nothing of the clean may be applied.
    pub async fn complete_token(&self, generation: i64) -> ArchiveResult<bool> {
        self.run("completing a clean token in Postgres", async {
            sqlx::query(
                "UPDATE clean_tokens SET completed = true WHERE generation = $1 AND NOT revoked",
            )
            .bind(generation)
            .execute(self.pool())
            .await
            .map(|done| done.rows_affected() == 1)
        })
        .await
    }

    /// A failover archives on its failed node's behalf what the replicas
    /// showed (design.md, Failover): each session's `total` becomes the
    /// row's clicks beyond its base, under a token of its own, issued
    /// completed in the same transaction (so no failover revokes it in
    /// between, and the fold takes it as a clean's). A row whose base holds
    /// as much already is left alone: the archive never goes down. Returns
    /// the rows written. `close`: the node stamps no token, so its late
    /// `/clean` could archive the same clicks again; the rows written are
    /// closed to such writes until [`open_rows`](Self::open_rows)
    /// (migrations/20261207000002_late_rows.sql).
    pub async fn archive_shown(
        &self,
        node: &str,
        totals: &[(String, i64)],
        close: bool,
    ) -> ArchiveResult<u64> {
        let mut totals = totals.to_vec();
        // In `session_id` order, as every multi-row write locks its rows.
        totals.sort();
        let (ids, clicks): (Vec<String>, Vec<i32>) = totals
            .into_iter()
            .map(|(id, total)| (id, i32::try_from(total).unwrap_or(i32::MAX)))
            .unzip();
        self.run(
            "archiving a failed node's shown totals in Postgres",
            async {
                let mut tx = self.pool().begin().await?;
                let token: i64 = sqlx::query_scalar(
                    "INSERT INTO clean_tokens (cluster, node, completed) VALUES ($1, $2, true)
                 RETURNING generation",
                )
                .bind(self.cluster())
                .bind(node)
                .fetch_one(&mut *tx)
                .await?;
                let written = sqlx::query(
                    "INSERT INTO session_archive AS a (session_id, clicks, generation, archived_at, closed)
                 SELECT id, total, $3, now(), $4 FROM UNNEST($1::varchar[], $2::int[]) AS h(id, total)
                 ON CONFLICT (session_id) DO UPDATE
                 SET clicks = EXCLUDED.clicks - a.base_clicks, generation = EXCLUDED.generation,
                     archived_at = EXCLUDED.archived_at, closed = a.closed OR EXCLUDED.closed
                 WHERE a.base_clicks < EXCLUDED.clicks",
                )
                .bind(&ids)
                .bind(&clicks)
                .bind(token)
                .bind(close)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                Ok(written)
            },
        )
        .await
    }

    /// Opens the rows of `sessions` the hand-over closed (`archive_shown`),
    /// just before a clean of the node they are on: what that node archives
    /// for them now is theirs. `None`: every closed row, for the rebuild's
    /// cleans, which know no session by name.
    pub async fn open_rows(&self, sessions: Option<&[String]>) -> ArchiveResult<u64> {
        self.run("opening archive rows in Postgres", async {
            sqlx::query(
                "UPDATE session_archive SET closed = false
                 WHERE closed AND ($1::varchar[] IS NULL OR session_id = ANY($1))",
            )
            .bind(sessions)
            .execute(self.pool())
            .await
            .map(|done| done.rows_affected())
        })
        .await
    }

    /// Whether a token was revoked (a journal's clean that a failover, or
    /// its own cleaner, gave up on).
    pub async fn token_revoked(&self, generation: i64) -> ArchiveResult<bool> {
        self.run("reading a clean token from Postgres", async {
            sqlx::query_scalar::<_, bool>(
                "SELECT COALESCE((SELECT revoked FROM clean_tokens WHERE generation = $1), false)",
            )
            .bind(generation)
            .fetch_one(self.pool())
            .await
        })
        .await
    }

    /// A node failed: revokes every token it was given below `below` whose
    /// clean did not complete, and records it down, in one transaction.
    /// Only after this may its sessions move. `below` is a number the
    /// operation took from the sequence once it held the node: a token
    /// issued after it belongs to a later operation (this one paused and
    /// lost the node meanwhile) and is not this one's to revoke.
    pub async fn fence_failed_node(&self, node: &str, below: i64) -> ArchiveResult<u64> {
        self.run(
            "fencing a failed node's archive writes in Postgres",
            async {
                let mut tx = self.pool().begin().await?;
                let revoked = sqlx::query(
                    "UPDATE clean_tokens SET revoked = true
                 WHERE cluster = $1 AND node = $2 AND generation < $3
                   AND NOT revoked AND NOT completed",
                )
                .bind(self.cluster())
                .bind(node)
                .bind(below)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                sqlx::query(
                    "UPDATE nodes SET state = 'down', updated_at = now()
                 WHERE cluster = $1 AND address = $2",
                )
                .bind(self.cluster())
                .bind(node)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(revoked)
            },
        )
        .await
    }
}
