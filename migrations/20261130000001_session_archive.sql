-- The archive third-party nodes write into (original three columns), plus the
-- balancer's own `base_clicks`: clicks already folded into a session's total.
-- A session's archived total is always `clicks + base_clicks` (DESIGN §4.6).
CREATE TABLE IF NOT EXISTS session_archive (
    session_id  VARCHAR(255) PRIMARY KEY,
    clicks      INT NOT NULL DEFAULT 0,
    archived_at TIMESTAMP,
    base_clicks INT NOT NULL DEFAULT 0
);
