-- The audit log: every change of membership or of a node's state, with who
-- made it (an admin, the health checker, a press that failed, a clean, the
-- sweep, the rebuild after Redis amnesia), from which replica, and why.
CREATE TABLE IF NOT EXISTS node_events (
    id           BIGSERIAL PRIMARY KEY,
    cluster      TEXT NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    replica      TEXT NOT NULL,
    actor        TEXT NOT NULL,
    node         TEXT NOT NULL,
    action       TEXT NOT NULL,
    state_before TEXT,
    state_after  TEXT,
    sessions     BIGINT,
    reason       TEXT
);
CREATE INDEX IF NOT EXISTS node_events_recent ON node_events (cluster, at DESC);
CREATE INDEX IF NOT EXISTS node_events_node ON node_events (cluster, node, at DESC);
