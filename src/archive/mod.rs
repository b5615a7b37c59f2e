//! `Archive`: the balancer's side of Postgres. Nodes write `clicks` into
//! `session_archive`; the balancer only ever *folds* them into `base_clicks`
//! (design.md §4.6), issues and revokes the clean tokens that fence superseded
//! writes ([`tokens`]), and keeps the durable copy of the membership
//! ([`members`]).
//!
//! Every query runs under a deadline, and a Postgres that timed out is not
//! asked again for a moment ([`breaker`]): a silent partition costs a press
//! one fast 503, not seconds of waiting.

mod batch;
mod breaker;
pub mod events;
pub mod history;
pub mod members;
pub mod tokens;
mod writer;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use batch::FoldBatcher;
use breaker::Breaker;
pub use members::Member;

/// Why a Postgres call failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveFailure {
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    #[error("Postgres did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Postgres failed a moment ago; not asked again yet")]
    Open,
    /// The failure of a batch this call was part of.
    #[error("{0}")]
    Batch(String),
}

impl ArchiveFailure {
    /// The same failure, for each call of a batch.
    pub(crate) fn replicate(&self) -> Self {
        match self {
            ArchiveFailure::Timeout(after) => ArchiveFailure::Timeout(*after),
            ArchiveFailure::Open => ArchiveFailure::Open,
            other => ArchiveFailure::Batch(other.to_string()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct ArchiveError {
    pub context: &'static str,
    #[source]
    pub source: ArchiveFailure,
}

pub type ArchiveResult<T> = Result<T, ArchiveError>;

/// The fold (design.md §4.6) as one `SET` clause: what a revoked token wrote is
/// dropped instead of added (design.md §4.10), and the row forgets its token.
const FOLD_SET: &str = "SET base_clicks = a.base_clicks + CASE
        WHEN a.generation IS NOT NULL AND EXISTS (
            SELECT 1 FROM clean_tokens t WHERE t.generation = a.generation AND t.revoked)
        THEN 0 ELSE a.clicks END,
    clicks = 0, generation = NULL";

/// Handle on Postgres. Cheap to clone (a pool and two `Arc`s).
#[derive(Clone)]
pub struct Archive {
    pool: PgPool,
    /// The cluster this balancer belongs to (its Redis key prefix): tokens
    /// and members are kept per cluster, so clusters can share a database.
    cluster: Arc<str>,
    timeout: Duration,
    breaker: Arc<Breaker>,
    /// Started on the first fold of a placement (it needs a runtime).
    batcher: Arc<std::sync::OnceLock<FoldBatcher>>,
    /// The audit log's writer, started on the first event.
    events: Arc<std::sync::OnceLock<writer::BatchWriter<events::NodeEvent>>>,
    /// The session history's writer, started on the first placement.
    history: Arc<std::sync::OnceLock<writer::BatchWriter<history::Placed>>>,
    /// The replica events are attributed to (unset: events are not kept).
    replica: Arc<std::sync::OnceLock<Arc<str>>>,
}

impl Archive {
    /// A lazy pool: the balancer starts while Postgres is down, and every
    /// query fails within `timeout` (503) instead of hanging.
    pub fn connect_lazy(
        database_url: &str,
        cluster: &str,
        timeout: Duration,
    ) -> ArchiveResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(timeout)
            .connect_lazy(database_url)
            .map_err(|e| ArchiveError {
                context: "parsing DATABASE_URL",
                source: e.into(),
            })?;
        Ok(Self {
            pool,
            cluster: cluster.into(),
            timeout,
            breaker: Arc::default(),
            batcher: Arc::default(),
            events: Arc::default(),
            history: Arc::default(),
            replica: Arc::default(),
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Runs one Postgres call under the deadline and the breaker.
    async fn run<T>(
        &self,
        context: &'static str,
        call: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> ArchiveResult<T> {
        let fail = |source| ArchiveError { context, source };
        if self.breaker.is_open() {
            return Err(fail(ArchiveFailure::Open));
        }
        let started = std::time::Instant::now();
        let answered = tokio::time::timeout(self.timeout, call).await;
        metrics::histogram!("nodes_control_postgres_call_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        match answered {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if is_connection_error(&error) {
                    self.breaker.trip();
                }
                Err(fail(error.into()))
            }
            Err(_) => {
                self.breaker.trip();
                Err(fail(ArchiveFailure::Timeout(self.timeout)))
            }
        }
    }

    /// Makes sure the database `database_url` names exists, creating it
    /// (like `sqlx database create`) only when `create` says so: a typo in
    /// `DATABASE_URL` must not quietly start an empty archive. If Postgres
    /// does not answer, the migrations that follow say so.
    pub async fn prepare_database(database_url: &str, create: bool) -> Result<(), MissingDatabase> {
        use sqlx::migrate::MigrateDatabase;
        if sqlx::Postgres::database_exists(database_url)
            .await
            .unwrap_or(true)
        {
            return Ok(());
        }
        let name = url::Url::parse(database_url)
            .map(|url| url.path().trim_start_matches('/').to_owned())
            .unwrap_or_default();
        if !create {
            return Err(MissingDatabase { name, error: None });
        }
        sqlx::Postgres::create_database(database_url)
            .await
            .map_err(|error| MissingDatabase {
                name: name.clone(),
                error: Some(error.to_string()),
            })?;
        tracing::info!(database = %name, "created the database (CREATE_DATABASE=true)");
        Ok(())
    }

    /// Applies `migrations/` (the folder `sqlx migrate run` uses).
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        // Migrations only add: a replica of the release before (in a rolling
        // upgrade that keeps the storage layout) starts against a schema a
        // newer one migrated.
        let mut migrator = sqlx::migrate!("./migrations");
        migrator.set_ignore_missing(true);
        migrator.run(&self.pool).await
    }

    pub async fn ping(&self) -> ArchiveResult<()> {
        self.run("pinging Postgres", async {
            sqlx::query("SELECT 1").execute(&self.pool).await.map(drop)
        })
        .await
    }

    /// The fold: moves `clicks` into `base_clicks` for these sessions and
    /// returns each one's total. The total is unchanged (unless a revoked
    /// token wrote the clicks) and a repeated fold is a no-op, so it is safe
    /// to retry after a crash. Sessions with no archive row are absent from
    /// the result (their total is 0).
    pub async fn fold(&self, session_ids: &[String]) -> ArchiveResult<HashMap<String, i64>> {
        if session_ids.is_empty() {
            return Ok(HashMap::new());
        }
        // Rows are locked in one order (here and in `fold_generation`): two
        // folds of overlapping sets (a sweep, a rebuild, a batch of
        // placements) then queue instead of deadlocking.
        let sql = format!(
            "WITH locked AS (
                 SELECT session_id FROM session_archive WHERE session_id = ANY($1)
                 ORDER BY session_id FOR UPDATE)
             UPDATE session_archive a {FOLD_SET} FROM locked
             WHERE a.session_id = locked.session_id
             RETURNING a.session_id, a.base_clicks"
        );
        let rows: Vec<(String, i32)> = self
            .run("folding archived clicks in Postgres", async {
                sqlx::query_as(&sql)
                    .bind(session_ids)
                    .fetch_all(&self.pool)
                    .await
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, base)| (id, i64::from(base)))
            .collect())
    }

    /// Folds everything written under one clean token (a node that carried
    /// it archived sessions we may not know by name, as after Redis forgot).
    pub async fn fold_generation(&self, generation: i64) -> ArchiveResult<u64> {
        // In `session_id` order, as every multi-row fold locks its rows.
        let sql = format!(
            "WITH locked AS (
                 SELECT session_id FROM session_archive WHERE generation = $1
                 ORDER BY session_id FOR UPDATE)
             UPDATE session_archive a {FOLD_SET} FROM locked
             WHERE a.session_id = locked.session_id"
        );
        self.run("folding a clean's archive in Postgres", async {
            sqlx::query(&sql)
                .bind(generation)
                .execute(&self.pool)
                .await
                .map(|r| r.rows_affected())
        })
        .await
    }

    /// Folds one session and returns its archived total (0 if never
    /// archived); folds asked for together go to Postgres together.
    pub async fn fold_one(&self, session_id: &str) -> ArchiveResult<i64> {
        let batcher = self
            .batcher
            .get_or_init(|| FoldBatcher::start(self.without_batcher()));
        batcher.fold_one(session_id).await
    }

    /// A handle for the batching task: holding the batcher itself would
    /// keep the task alive forever.
    fn without_batcher(&self) -> Archive {
        self.without_writers()
    }

    /// A handle for a background writer (the fold batcher, the audit log):
    /// holding the writers themselves would keep their tasks alive forever.
    fn without_writers(&self) -> Archive {
        Archive {
            batcher: Arc::default(),
            events: Arc::default(),
            history: Arc::default(),
            ..self.clone()
        }
    }

    /// A session's archived total, `clicks + base_clicks`, if it has a row.
    pub async fn total(&self, session_id: &str) -> ArchiveResult<Option<i64>> {
        self.run("reading a session's archived total from Postgres", async {
            sqlx::query_scalar(
                "SELECT (clicks + base_clicks)::BIGINT FROM session_archive WHERE session_id = $1",
            )
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
        })
        .await
    }
}

/// `DATABASE_URL` names a database that does not exist (and was not, or
/// could not be, created).
#[derive(Debug, thiserror::Error)]
#[error("the database {name:?} of DATABASE_URL does not exist{}: create it (`createdb {name}` or `sqlx database create`), or set CREATE_DATABASE=true to let nodes-control create it", .error.as_ref().map(|e| format!(" and could not be created ({e})")).unwrap_or_default())]
pub struct MissingDatabase {
    pub name: String,
    pub error: Option<String>,
}

/// Errors that say Postgres is unreachable rather than that a query was wrong.
fn is_connection_error(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    )
}
