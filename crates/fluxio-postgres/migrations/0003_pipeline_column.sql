-- fluxio-postgres, schema version 3: the pipeline of each run, indexed, for
-- keeping the newest N completed runs of a pipeline (contract rule 20,
-- `PostgresStoreBuilder::keep_completed`).
--
-- A template like version 1: `{checkpoints}` is replaced by the
-- schema-qualified, double-quoted name built from validated identifiers. It
-- runs in one transaction together with its row in
-- `"<schema>"._fluxio_migrations`.
--
-- The pipeline of a run is the part of its key before the first `/` (empty
-- for a bare run id). It is a generated column, computed from `run_id` by
-- PostgreSQL itself: adding it fills it for the existing rows (one rewrite
-- of the table, under the migration's lock), and builds that predate this
-- migration, which never name the column, still write rows whose pipeline
-- is right (a rolling upgrade runs old and new workers side by side).

ALTER TABLE {checkpoints} ADD COLUMN pipeline TEXT NOT NULL GENERATED ALWAYS AS (
    CASE WHEN strpos(run_id, '/') > 0 THEN split_part(run_id, '/', 1) ELSE '' END
) STORED;

-- a pipeline's completed runs, newest first, in one index range
CREATE INDEX ON {checkpoints} (pipeline, status, updated_at);

COMMENT ON COLUMN {checkpoints}.pipeline IS
    'the part of run_id before its first /, empty for a bare run id (keep_completed trims per pipeline)';
