-- fluxio-sqlite, schema version 3: the pipeline of each run, indexed, for
-- keeping the newest N completed runs of a pipeline (contract rule 20,
-- `SqliteStoreBuilder::keep_completed`).
--
-- A template like version 1: `{checkpoints}` and `{checkpoints_pipeline}`
-- are replaced by double-quoted names built from the validated table name.
-- It runs in one `BEGIN IMMEDIATE` transaction together with its row in
-- `_fluxio_migrations`.
--
-- The pipeline of a run is the part of its key before the first `/` (empty
-- for a bare run id). It is a generated column, computed from `run_id` by
-- SQLite itself: existing rows need no backfill (a VIRTUAL column costs no
-- rewrite of the table, only the index below is built), and builds that
-- predate this migration, which never name the column, still write rows
-- whose pipeline is right (a rolling upgrade shares the file).

ALTER TABLE {checkpoints} ADD COLUMN pipeline TEXT GENERATED ALWAYS AS (
    CASE WHEN instr(run_id, '/') > 0 THEN substr(run_id, 1, instr(run_id, '/') - 1)
         ELSE '' END
) VIRTUAL;

-- a pipeline's completed runs, newest first, in one index range
CREATE INDEX {checkpoints_pipeline} ON {checkpoints} (pipeline, status, updated_at);
