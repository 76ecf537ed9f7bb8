-- fluxio-sqlite, schema version 4: listing runs (contract rule 21,
-- `CheckpointStore::list_runs`) from the run rows, without reading a journal.
--
-- A template like version 1: `{checkpoints}`, `{checkpoints_state}` and
-- `{checkpoints_pipeline_state}` are replaced by double-quoted names built
-- from the validated table name. It runs in one `BEGIN IMMEDIATE`
-- transaction together with its row in `_fluxio_migrations`.
--
-- The run's row already mirrors its latest checkpoint's status, step,
-- version, error and times; the attempt joins them. Rows written before
-- this migration read 0 until their run's next write (the attempt is inside
-- the journal's payloads, which SQL cannot read); so do rows that builds
-- older than this one write during a rolling upgrade, which never name the
-- column.

ALTER TABLE {checkpoints} ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;

-- A listing is in key order (`run_id`, BINARY: byte order). Each of these
-- makes one filter a single range of an index, already in that order, so a
-- page reads about as many rows as it shows: the runs in one state, and a
-- pipeline's runs in one state. Every run in key order, and a pipeline's
-- runs in any state (a range of keys, `<pipeline>/` to `<pipeline>0`), are
-- ranges of the primary key.
CREATE INDEX {checkpoints_state} ON {checkpoints} (status, run_id);
CREATE INDEX {checkpoints_pipeline_state} ON {checkpoints} (pipeline, status, run_id);
