-- fluxio-mysql, schema version 1: the run rows, the run journals, the leases,
-- the fencing tokens, and the pipelines' trim locks.
--
-- This file is a template. Before it runs, `{checkpoints}`, `{steps}`,
-- `{leases}`, `{tokens}` and `{pipelines}` are replaced by the
-- backquoted, database-qualified names of the tables, built from
-- identifiers validated as `^[a-z_][a-z0-9_]*$`.
--
-- MySQL and MariaDB commit each `CREATE TABLE` on its own (no DDL runs in a
-- transaction there), so every statement here can run again after a crash
-- half-way: the runner records the migration only after the last one.
--
-- Times are milliseconds since the Unix epoch (BIGINT), on the database's
-- clock (`UNIX_TIMESTAMP(SYSDATE(3))`) except a run's start (the client's).
-- Keys are bytes (VARBINARY): they sort in byte order, as Rust orders
-- strings, whatever the server's collation, and a composite index of a
-- pipeline and a key fits InnoDB's 3072-byte limit.

CREATE TABLE IF NOT EXISTS {checkpoints} (
    -- the run's key (`<pipeline>/<run id>`, at most 512 bytes)
    run_id        VARBINARY(512) NOT NULL PRIMARY KEY,
    -- empty: the checkpoints are the rows of the steps table
    payload       LONGBLOB       NOT NULL,
    -- copies of the latest checkpoint's fields, for operators and listings
    version       TEXT           NOT NULL,
    ip            BIGINT         NOT NULL,
    step          TEXT           NOT NULL,
    -- running | failed | completed | cancelled | needs_attention
    status        VARCHAR(32) CHARACTER SET ascii NOT NULL,
    error_message TEXT           NULL,
    created_at    BIGINT         NOT NULL,
    updated_at    BIGINT         NOT NULL,
    -- completed runs only: when the row stops being visible and may be purged
    expires_at    BIGINT         NULL,
    attempt       BIGINT         NOT NULL DEFAULT 0,
    -- the part of run_id before its first `/`, empty for a bare run id
    pipeline      VARBINARY(512) AS
        (IF(LOCATE('/', run_id) > 0, SUBSTRING_INDEX(run_id, '/', 1), '')) STORED,
    KEY fluxio_expiry (expires_at),
    -- a pipeline's completed runs, newest first (keep_completed)
    KEY fluxio_completion (pipeline, status, updated_at),
    -- listing: the runs in one state, and a pipeline's runs in one state,
    -- each one range in key order (the primary key serves the others)
    KEY fluxio_state (status, run_id),
    KEY fluxio_pipeline_state (pipeline, status, run_id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {steps} (
    run_id  VARBINARY(512) NOT NULL,
    -- the checkpoint's number in the run's journal
    seq     BIGINT         NOT NULL,
    -- 1: the whole context (a load starts at the run's last such row);
    -- 0: the keys changed since checkpoint `seq - 1`
    whole   BOOLEAN        NOT NULL,
    -- exactly `Checkpoint::entry_bytes()`
    payload LONGBLOB       NOT NULL,
    PRIMARY KEY (run_id, seq),
    KEY fluxio_whole (run_id, whole, seq),
    -- a run is deleted in one piece, by every statement that deletes its row
    FOREIGN KEY (run_id) REFERENCES {checkpoints} (run_id) ON DELETE CASCADE
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {leases} (
    run_id     VARBINARY(512) NOT NULL PRIMARY KEY,
    -- the fencing token, drawn from {tokens} on every acquisition: it grows
    -- per run id even across purged rows
    token      BIGINT         NOT NULL,
    -- NULL once released; held while in the future (database clock)
    expires_at BIGINT         NULL
) ENGINE = InnoDB;

-- one row per token drawn (purge_expired keeps only the newest)
CREATE TABLE IF NOT EXISTS {tokens} (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;

-- a row per pipeline, locked by a completion before it trims the
-- pipeline's completed runs (keep_completed): the trims take turns
CREATE TABLE IF NOT EXISTS {pipelines} (
    pipeline VARBINARY(512) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
