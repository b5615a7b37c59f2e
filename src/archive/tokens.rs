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
    /// updated, however many sessions the clean archived).
    pub async fn complete_token(&self, generation: i64) -> ArchiveResult<()> {
        self.run("completing a clean token in Postgres", async {
            sqlx::query(
                "UPDATE clean_tokens SET completed = true WHERE generation = $1 AND NOT revoked",
            )
            .bind(generation)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// A node failed: revokes every token it was given whose clean did not
    /// complete, and records it down, in one transaction. Only after this
    /// may its sessions move.
    pub async fn fence_failed_node(&self, node: &str) -> ArchiveResult<u64> {
        self.run(
            "fencing a failed node's archive writes in Postgres",
            async {
                let mut tx = self.pool().begin().await?;
                let revoked = sqlx::query(
                    "UPDATE clean_tokens SET revoked = true
                 WHERE cluster = $1 AND node = $2 AND NOT revoked AND NOT completed",
                )
                .bind(self.cluster())
                .bind(node)
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
