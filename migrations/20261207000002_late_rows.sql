-- A row the failover's hand-over wrote for a node without clean tokens is
-- closed: it takes no write of a node that stamps no token until the
-- balancer opens it, just before a clean of the node the session is on.
-- The failed node may have been slow, not dead: its clean's timer fired,
-- the hand-over archived what the replicas showed, and the clean may still
-- reach it and archive the same clicks; the next fold would add both.
-- A node's upsert sets `clicks` (and `archived_at`) only; one that stamps
-- no token leaves `generation` as it was. The balancer's own writes change
-- `base_clicks`, `generation` or `closed`, and pass.
ALTER TABLE session_archive ADD COLUMN IF NOT EXISTS closed BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS session_archive_closed ON session_archive (session_id) WHERE closed;

CREATE OR REPLACE FUNCTION session_archive_refuse_late_row() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL; -- the row's update is skipped, the statement goes on
END;
$$;

CREATE OR REPLACE TRIGGER session_archive_late_row
    BEFORE UPDATE ON session_archive FOR EACH ROW
    WHEN (OLD.closed AND NEW.closed AND NEW.base_clicks = OLD.base_clicks
          AND NEW.generation IS NOT DISTINCT FROM OLD.generation
          AND NEW.clicks IS DISTINCT FROM OLD.clicks)
    EXECUTE FUNCTION session_archive_refuse_late_row();
