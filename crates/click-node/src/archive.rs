//! The node's one write to Postgres. Without a token it is the original
//! upsert third-party nodes perform (it sets `clicks`, never `base_clicks`,
//! which belongs to the balancer). With the balancer's clean token
//! (`generation`) it stamps the rows, and never replaces a row stamped by a
//! newer token: a late archive of a node the balancer gave up on cannot
//! overwrite what the session's next node archived.

use sqlx::PgPool;

pub(crate) async fn upsert(
    pool: &PgPool,
    counts: &[(String, i32)],
    generation: Option<i64>,
) -> Result<(), sqlx::Error> {
    if counts.is_empty() {
        return Ok(());
    }
    let (ids, clicks): (Vec<&str>, Vec<i32>) =
        counts.iter().map(|(id, n)| (id.as_str(), *n)).unzip();
    sqlx::query(
        "INSERT INTO session_archive (session_id, clicks, archived_at, generation)
         SELECT id, n, now(), $3 FROM UNNEST($1::varchar[], $2::int[]) AS t(id, n)
         ON CONFLICT (session_id) DO UPDATE
           SET clicks = EXCLUDED.clicks, archived_at = now(), generation = EXCLUDED.generation
           WHERE $3::BIGINT IS NULL OR session_archive.generation IS NULL
              OR session_archive.generation <= $3::BIGINT",
    )
    .bind(&ids)
    .bind(&clicks)
    .bind(generation)
    .execute(pool)
    .await?;
    Ok(())
}
