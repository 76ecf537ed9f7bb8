-- fluxio-sqlite, schema version 1: the checkpoint table and the lease table.
--
-- This file is a template. Before it runs, `{checkpoints}`, `{leases}`,
-- `{checkpoints_expires_at}` and `{leases_token}` are replaced by
-- double-quoted names built from the table name, which is validated as
-- `^[a-z_][a-z0-9_]*$`. It runs in one `BEGIN IMMEDIATE` transaction together
-- with its row in `_fluxio_migrations`.
--
-- Times are INTEGER milliseconds since the Unix epoch. STRICT tables: SQLite
-- refuses a value of the wrong type instead of storing it.

CREATE TABLE {checkpoints} (
    -- the run id
    run_id        TEXT    NOT NULL PRIMARY KEY,
    -- exactly `Checkpoint::to_bytes()`: the versioned, checksummed encoding
    payload       BLOB    NOT NULL,
    -- copies of the payload's fields, for operators (never read back)
    version       TEXT    NOT NULL,
    ip            INTEGER NOT NULL,
    step          TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    error_message TEXT,
    -- the run's start (the writer's clock)
    created_at    INTEGER NOT NULL,
    -- SQLite's clock when the row was last written
    updated_at    INTEGER NOT NULL,
    -- completed runs only: when the row stops being visible and may be purged
    expires_at    INTEGER
) STRICT;

CREATE INDEX {checkpoints_expires_at} ON {checkpoints} (expires_at)
    WHERE expires_at IS NOT NULL;

CREATE TABLE {leases} (
    run_id     TEXT    NOT NULL PRIMARY KEY,
    -- the fencing token: one more than the greatest token in the table at
    -- the time of the acquisition; the row holding the greatest token is
    -- never purged, so tokens only grow, for every run id
    token      INTEGER NOT NULL,
    -- NULL once released; held while in the future (SQLite's clock)
    expires_at INTEGER
) STRICT;

-- max(token) in one index lookup; unique, as every acquisition draws a new one
CREATE UNIQUE INDEX {leases_token} ON {leases} (token);
