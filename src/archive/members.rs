//! The durable copy of the membership (design.md §4.12): Redis holds the live
//! registry, Postgres what survives Redis forgetting it. Written before
//! Redis on every change that matters for a rebuild (add, remove, down, up).

use super::{Archive, ArchiveResult};

/// A node as Postgres remembers it. (The table's `generation` column was
/// never given anything but 0 and is no longer read or written; it stays
/// while releases that still write it may run beside this one.)
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Member {
    pub address: String,
    pub name: String,
    pub weight: i32,
    /// `up`, `down` or `draining`.
    pub state: String,
    /// An admin drained it: it stays drained through a down spell (its
    /// state is then `down`). Read only: set by [`Archive::set_member_draining`].
    pub draining: bool,
    /// Down until an admin adds it again (`NodeRecord::held_down`). Read
    /// only: set by [`Archive::set_member_held_down`]; a new registration
    /// clears it.
    pub held_down: bool,
    /// The instance id the node reported when it was last wiped, if any.
    pub instance: Option<String>,
    /// The node's number (see the `node_numbers` migration): assigned by
    /// Postgres on the first upsert, never changed, never reused. Read
    /// only: [`Archive::upsert_member`] ignores it and returns the real one.
    pub number: i64,
}

impl Archive {
    /// Records a node; returns its number (kept from an earlier upsert of
    /// the same address, else new).
    pub async fn upsert_member(&self, member: &Member) -> ArchiveResult<u64> {
        self.run("recording a node in Postgres", async {
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO nodes (cluster, address, name, weight, state, instance)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (cluster, address) DO UPDATE SET name = EXCLUDED.name,
                   weight = EXCLUDED.weight, state = EXCLUDED.state,
                   instance = EXCLUDED.instance, held_down = false,
                   updated_at = now()
                 RETURNING number",
            )
            .bind(self.cluster())
            .bind(&member.address)
            .bind(&member.name)
            .bind(member.weight)
            .bind(&member.state)
            .bind(&member.instance)
            .fetch_one(self.pool())
            .await
            .map(|number| number as u64)
        })
        .await
    }

    pub async fn set_member_state(&self, address: &str, state: &str) -> ArchiveResult<()> {
        self.run("recording a node's state in Postgres", async {
            sqlx::query(
                "UPDATE nodes SET state = $3, updated_at = now() WHERE cluster = $1 AND address = $2",
            )
            .bind(self.cluster())
            .bind(address)
            .bind(state)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// Records a node that answered again and was wiped: its state and the
    /// instance id it reports now (none: cleared), so that a registry
    /// rebuilt from here never takes the node for restarted.
    pub async fn set_member_recovered(
        &self,
        address: &str,
        state: &str,
        instance: Option<&str>,
    ) -> ArchiveResult<()> {
        self.run("recording a recovered node in Postgres", async {
            sqlx::query(
                "UPDATE nodes SET state = $3, instance = $4, updated_at = now()
                 WHERE cluster = $1 AND address = $2",
            )
            .bind(self.cluster())
            .bind(address)
            .bind(state)
            .bind(instance)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// Records an admin's drain: state `draining`, and the mark that
    /// outlives a later `down`.
    pub async fn set_member_draining(&self, address: &str) -> ArchiveResult<()> {
        self.run("recording a node's drain in Postgres", async {
            sqlx::query(
                "UPDATE nodes SET state = 'draining', draining = true, updated_at = now()
                 WHERE cluster = $1 AND address = $2",
            )
            .bind(self.cluster())
            .bind(address)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// Records that the node is held down until an admin adds it again,
    /// or (`false`) that an admin did.
    pub async fn set_member_held_down(&self, address: &str, held: bool) -> ArchiveResult<()> {
        self.run("recording a node's hold in Postgres", async {
            sqlx::query(
                "UPDATE nodes SET held_down = $3, updated_at = now()
                 WHERE cluster = $1 AND address = $2",
            )
            .bind(self.cluster())
            .bind(address)
            .bind(held)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    pub async fn set_member_weight(&self, address: &str, weight: u32) -> ArchiveResult<()> {
        self.run("recording a node's weight in Postgres", async {
            sqlx::query(
                "UPDATE nodes SET weight = $3, updated_at = now() WHERE cluster = $1 AND address = $2",
            )
            .bind(self.cluster())
            .bind(address)
            .bind(weight as i32)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    pub async fn delete_member(&self, address: &str) -> ArchiveResult<()> {
        self.run("forgetting a node in Postgres", async {
            sqlx::query("DELETE FROM nodes WHERE cluster = $1 AND address = $2")
                .bind(self.cluster())
                .bind(address)
                .execute(self.pool())
                .await
                .map(drop)
        })
        .await
    }

    /// Every node of this cluster, in address order.
    pub async fn members(&self) -> ArchiveResult<Vec<Member>> {
        self.run("listing nodes in Postgres", async {
            sqlx::query_as(
                "SELECT address, name, weight, state, draining, held_down, instance, number
                 FROM nodes WHERE cluster = $1 ORDER BY address",
            )
            .bind(self.cluster())
            .fetch_all(self.pool())
            .await
        })
        .await
    }
}
