-- Fencing of superseded state (design: "Generations"). Every /clean that
-- archives gets a token from `clean_tokens`; a node that carries it writes it
-- into `session_archive.generation`, and a write never replaces a row written
-- under a newer token. A clean that did not end in OK, and every token of a
-- node declared down, is revoked: the fold then drops what that token wrote.
ALTER TABLE session_archive ADD COLUMN IF NOT EXISTS generation BIGINT;
CREATE INDEX IF NOT EXISTS session_archive_generation
    ON session_archive (generation) WHERE generation IS NOT NULL;

CREATE TABLE IF NOT EXISTS clean_tokens (
    generation BIGSERIAL PRIMARY KEY,
    cluster    TEXT NOT NULL,
    node       TEXT NOT NULL,
    issued_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked    BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS clean_tokens_live
    ON clean_tokens (cluster, node) WHERE NOT revoked;

-- Durable membership, so that a Redis that forgot everything can be rebuilt.
-- `cluster` is the Redis key prefix: replicas sharing a prefix share nodes.
CREATE TABLE IF NOT EXISTS nodes (
    cluster    TEXT NOT NULL,
    address    TEXT NOT NULL,
    name       TEXT NOT NULL,
    weight     INT NOT NULL DEFAULT 1,
    state      TEXT NOT NULL,
    instance   TEXT,
    generation BIGINT NOT NULL DEFAULT 0,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, address)
);
