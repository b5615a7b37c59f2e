-- Session history: every placement of a session (new, restored from its
-- archive, moved off a failed node), kept for SESSION_HISTORY_SECS.
CREATE TABLE IF NOT EXISTS session_placements (
    id         BIGSERIAL PRIMARY KEY,
    cluster    TEXT NOT NULL,
    session_id VARCHAR(255) NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    replica    TEXT NOT NULL,
    node       TEXT NOT NULL,
    base       BIGINT NOT NULL,
    cause      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS session_placements_session
    ON session_placements (cluster, session_id, at DESC);
CREATE INDEX IF NOT EXISTS session_placements_at ON session_placements (at);
