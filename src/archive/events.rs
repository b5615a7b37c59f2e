//! The audit log (`node_events`): every change of membership or of a node's
//! state, with its actor, replica, states before and after, sessions
//! affected and reason. Recording never waits for Postgres: events go to a
//! task that writes them in batches ([`super::writer`]), so a press that
//! marks its node down is not slowed by the log. If Postgres is away the
//! events of that moment are logged as a warning and dropped: the audit log
//! is best effort, the registry itself is not.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::writer::BatchWriter;
use super::{Archive, ArchiveResult};

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    Admin,
    /// The `NODES` of the configuration, registered at start-up.
    Startup,
    HealthCheck,
    PressFailure,
    Clean,
    /// A drain that finished (its last session left, or its deadline passed).
    Drain,
    Rebuild,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Admin => "admin",
            Actor::Startup => "startup",
            Actor::HealthCheck => "health_check",
            Actor::PressFailure => "press_failure",
            Actor::Clean => "clean",
            Actor::Drain => "drain",
            Actor::Rebuild => "rebuild",
        }
    }
}

/// One change, as recorded.
#[derive(Debug, Clone)]
pub struct NodeEvent {
    pub actor: Actor,
    pub node: String,
    /// `added`, `reweighted`, `draining`, `removed`, `marked_down`,
    /// `recovered`, `rebuilt`.
    pub action: &'static str,
    pub before: Option<String>,
    pub after: Option<String>,
    pub sessions: Option<i64>,
    pub reason: Option<String>,
}

impl NodeEvent {
    pub fn new(actor: Actor, node: &str, action: &'static str) -> Self {
        Self {
            actor,
            node: node.to_owned(),
            action,
            before: None,
            after: None,
            sessions: None,
            reason: None,
        }
    }

    pub fn states(mut self, before: Option<&str>, after: Option<&str>) -> Self {
        self.before = before.map(str::to_owned);
        self.after = after.map(str::to_owned);
        self
    }

    pub fn sessions(mut self, sessions: i64) -> Self {
        self.sessions = Some(sessions);
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// An event as `GET /events` shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct EventRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub replica: String,
    pub actor: String,
    pub node: String,
    pub action: String,
    pub state_before: Option<String>,
    pub state_after: Option<String>,
    pub sessions: Option<i64>,
    pub reason: Option<String>,
}

/// What `GET /events` asks for.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub node: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub limit: i64,
}

impl Archive {
    /// Records a change without waiting (see the module docs).
    pub fn record(&self, event: NodeEvent) {
        let Some(replica) = self.replica.get() else {
            return; // a handle made for a one-off job: nothing to attribute to
        };
        let writer = self.events.get_or_init(|| {
            let (archive, replica) = (self.without_writers(), replica.clone());
            BatchWriter::start("node events to the audit log", move |rows| {
                let (archive, replica) = (archive.clone(), replica.clone());
                async move { archive.insert_events(&replica, &rows).await }
            })
        });
        writer.send(event);
    }

    /// Names the replica this archive's events come from (once, at start-up).
    pub fn set_replica(&self, replica: &str) {
        let _ = self.replica.set(replica.into());
    }

    async fn insert_events(&self, replica: &str, events: &[NodeEvent]) -> ArchiveResult<()> {
        let column = |f: fn(&NodeEvent) -> Option<String>| events.iter().map(f).collect::<Vec<_>>();
        let actors = column(|e| Some(e.actor.as_str().to_owned()));
        let nodes = column(|e| Some(e.node.clone()));
        let actions = column(|e| Some(e.action.to_owned()));
        let befores = column(|e| e.before.clone());
        let afters = column(|e| e.after.clone());
        let reasons = column(|e| e.reason.clone());
        let sessions: Vec<Option<i64>> = events.iter().map(|e| e.sessions).collect();
        self.run("writing node events to Postgres", async {
            sqlx::query(
                "INSERT INTO node_events
                   (cluster, replica, actor, node, action, state_before, state_after, sessions, reason)
                 SELECT $1, $2, a, n, ac, b, af, s, r
                 FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                             $8::bigint[], $9::text[]) AS t(a, n, ac, b, af, s, r)",
            )
            .bind(self.cluster())
            .bind(replica)
            .bind(&actors)
            .bind(&nodes)
            .bind(&actions)
            .bind(&befores)
            .bind(&afters)
            .bind(&sessions)
            .bind(&reasons)
            .execute(self.pool())
            .await
            .map(drop)
        })
        .await
    }

    /// The most recent events first (newest `limit`), of one node or all.
    pub async fn events(&self, query: &EventQuery) -> ArchiveResult<Vec<EventRecord>> {
        self.run("reading node events from Postgres", async {
            sqlx::query_as(
                "SELECT id, at, replica, actor, node, action, state_before, state_after, sessions, reason
                 FROM node_events
                 WHERE cluster = $1 AND ($2::text IS NULL OR node = $2)
                   AND ($3::timestamptz IS NULL OR at >= $3)
                 ORDER BY at DESC, id DESC LIMIT $4",
            )
            .bind(self.cluster())
            .bind(&query.node)
            .bind(query.since)
            .bind(query.limit)
            .fetch_all(self.pool())
            .await
        })
        .await
    }
}
