-- A clean that ended in OK marks its token completed. The rows it wrote are
-- then the sessions' archive for good: they are folded when each session
-- comes back (placement folds first) instead of all at once at the clean,
-- and a later failure of the node revokes only tokens that never completed.
ALTER TABLE clean_tokens ADD COLUMN IF NOT EXISTS completed BOOLEAN NOT NULL DEFAULT false;
DROP INDEX IF EXISTS clean_tokens_live;
CREATE INDEX IF NOT EXISTS clean_tokens_open
    ON clean_tokens (cluster, node) WHERE NOT revoked AND NOT completed;
