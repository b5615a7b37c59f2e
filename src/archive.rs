//! `Archive`: the balancer's side of `session_archive` in Postgres. Nodes
//! write `clicks`; the balancer only ever *folds* (DESIGN §4.6).

use std::collections::HashMap;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct ArchiveError {
    pub context: &'static str,
    #[source]
    pub source: sqlx::Error,
}

type ArchiveResult<T> = Result<T, ArchiveError>;

fn context(context: &'static str) -> impl FnOnce(sqlx::Error) -> ArchiveError {
    move |source| ArchiveError { context, source }
}

/// Handle on the archive table. Cheap to clone (a pool).
#[derive(Clone)]
pub struct Archive {
    pool: PgPool,
}

impl Archive {
    /// A lazy pool: the balancer starts while Postgres is down, and a query
    /// waits at most a few seconds for a connection before failing (503).
    pub fn connect_lazy(database_url: &str) -> ArchiveResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy(database_url)
            .map_err(context("parsing DATABASE_URL"))?;
        Ok(Self { pool })
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates the database if it does not exist (like `sqlx database
    /// create`), then applies `migrations/` (the folder `sqlx migrate run` uses).
    pub async fn migrate(&self, database_url: &str) -> Result<(), sqlx::migrate::MigrateError> {
        use sqlx::migrate::MigrateDatabase;
        if !sqlx::Postgres::database_exists(database_url)
            .await
            .unwrap_or(true)
        {
            if let Err(error) = sqlx::Postgres::create_database(database_url).await {
                tracing::warn!(%error, "could not create the database; migrations will say why");
            }
        }
        sqlx::migrate!("./migrations").run(&self.pool).await
    }

    pub async fn ping(&self) -> ArchiveResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(context("pinging Postgres"))?;
        Ok(())
    }

    /// The fold: moves `clicks` into `base_clicks` for these sessions and
    /// returns each one's total. The total is unchanged and a repeated fold
    /// is a no-op, so it is safe to retry after a crash. Sessions with no
    /// archive row are absent from the result (their total is 0).
    pub async fn fold(&self, session_ids: &[String]) -> ArchiveResult<HashMap<String, i64>> {
        if session_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(String, i32)> = sqlx::query_as(
            "UPDATE session_archive SET base_clicks = base_clicks + clicks, clicks = 0
             WHERE session_id = ANY($1) RETURNING session_id, base_clicks",
        )
        .bind(session_ids)
        .fetch_all(&self.pool)
        .await
        .map_err(context("folding archived clicks in Postgres"))?;
        Ok(rows
            .into_iter()
            .map(|(id, base)| (id, i64::from(base)))
            .collect())
    }

    /// Folds one session and returns its archived total (0 if never archived).
    pub async fn fold_one(&self, session_id: &str) -> ArchiveResult<i64> {
        let base: Option<i32> = sqlx::query_scalar(
            "UPDATE session_archive SET base_clicks = base_clicks + clicks, clicks = 0
             WHERE session_id = $1 RETURNING base_clicks",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(context("folding a session's archived clicks in Postgres"))?;
        Ok(base.map(i64::from).unwrap_or(0))
    }

    /// A session's archived total, `clicks + base_clicks`, if it has a row.
    pub async fn total(&self, session_id: &str) -> ArchiveResult<Option<i64>> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT (clicks + base_clicks)::BIGINT FROM session_archive WHERE session_id = $1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(context("reading a session's archived total from Postgres"))?;
        Ok(total)
    }
}
