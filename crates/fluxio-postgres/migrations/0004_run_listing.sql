-- fluxio-postgres, schema version 4: listing runs (contract rule 21,
-- `CheckpointStore::list_runs`) from the run rows, without reading a journal.
--
-- A template like version 1: `{checkpoints}` is replaced by the
-- schema-qualified, double-quoted name built from validated identifiers. It
-- runs in one transaction together with its row in
-- `"<schema>"._fluxio_migrations`.
--
-- The run's row already mirrors its latest checkpoint's status, step,
-- version, error and times; the attempt joins them. Adding a column with a
-- constant default rewrites nothing. Rows written before this migration
-- read 0 until their run's next write (the attempt is inside the journal's
-- payloads, which SQL cannot read); so do rows that builds older than this
-- one write during a rolling upgrade, which never name the column.

ALTER TABLE {checkpoints} ADD COLUMN attempt BIGINT NOT NULL DEFAULT 0;

COMMENT ON COLUMN {checkpoints}.attempt IS
    'the latest checkpoint''s attempt (0 for rows written before schema version 4)';

-- A listing is in key order: byte order of `run_id` (`COLLATE "C"`), as
-- Rust orders strings, whatever the database's collation. Each index makes
-- one filter a single range already in that order, so a page reads about as
-- many rows as it shows: every run, and a pipeline's runs in any state (a
-- range of keys, `<pipeline>/` to `<pipeline>0`); the runs in one state; a
-- pipeline's runs in one state. Built while the migration holds its lock
-- (writes to the table wait, a second or so per million runs).
CREATE INDEX ON {checkpoints} (run_id COLLATE "C");
CREATE INDEX ON {checkpoints} (status, run_id COLLATE "C");
CREATE INDEX ON {checkpoints} (pipeline, status, run_id COLLATE "C");
