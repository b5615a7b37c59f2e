-- Session history: every placement of a session (new, restored from its
-- archive, moved off a failed node), kept for SESSION_HISTORY_SECS. Append
-- only and written at the rate of new sessions, so it carries as little as
-- it can: UNLOGGED (no WAL; a Postgres crash empties it, which a bounded,
-- best-effort history can afford), no row id, one btree for the lookup of a
-- session, and a BRIN index (a few pages) for the trimming by time.
CREATE UNLOGGED TABLE IF NOT EXISTS session_placements (
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
CREATE INDEX IF NOT EXISTS session_placements_at ON session_placements USING BRIN (at);
