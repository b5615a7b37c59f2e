//! The node's one write to Postgres: the original upsert third-party nodes
//! perform. It sets `clicks` and never touches `base_clicks`, which belongs to
//! the balancer (DESIGN §1).

use sqlx::PgPool;

pub(crate) async fn upsert(pool: &PgPool, counts: &[(String, i32)]) -> Result<(), sqlx::Error> {
    if counts.is_empty() {
        return Ok(());
    }
    let (ids, clicks): (Vec<&str>, Vec<i32>) =
        counts.iter().map(|(id, n)| (id.as_str(), *n)).unzip();
    sqlx::query(
        "INSERT INTO session_archive (session_id, clicks, archived_at)
         SELECT id, n, now() FROM UNNEST($1::varchar[], $2::int[]) AS t(id, n)
         ON CONFLICT (session_id) DO UPDATE SET clicks = EXCLUDED.clicks, archived_at = now()",
    )
    .bind(&ids)
    .bind(&clicks)
    .execute(pool)
    .await?;
    Ok(())
}
