-- fluxio-postgres, schema version 2: a run's journal (contract rules 18 and 20).
--
-- A template like version 1: `{steps}` and `{checkpoints}` are replaced by
-- schema-qualified, double-quoted names built from validated identifiers.
-- It runs in one transaction together with its row in
-- `"<schema>"._fluxio_migrations`.
--
-- Each checkpoint of a run becomes a row of `{steps}`, numbered by its
-- `seq`: `Checkpoint::entry_bytes()`, the whole context (`whole`) or only
-- the keys changed since checkpoint `seq - 1`. The run's row in
-- `{checkpoints}` stays: status (fenced saves check and lock it),
-- retention, and the copies of the latest checkpoint's fields for
-- operators. Its `payload` is empty from now on.

CREATE TABLE {steps} (
    -- a run is deleted in one piece, by every statement that deletes its
    -- row (delete, delete_fenced, purge_expired)
    run_id  TEXT    NOT NULL REFERENCES {checkpoints} (run_id) ON DELETE CASCADE,
    -- the checkpoint's number in the run's journal
    seq     BIGINT  NOT NULL,
    -- true: the whole context (a load starts at the run's last such row);
    -- false: the keys changed since checkpoint `seq - 1`
    whole   BOOLEAN NOT NULL,
    -- exactly `Checkpoint::entry_bytes()`
    payload BYTEA   NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- the run's last whole checkpoint, max(seq), in one index lookup
CREATE INDEX ON {steps} (run_id, seq) WHERE whole;

COMMENT ON TABLE {steps} IS
    'fluxio run journals: one row per checkpoint, whole or the keys changed since the one before';

-- Runs written by earlier builds: their one blob (format 1 to 3) becomes
-- checkpoint 0 of the journal, as it is; `Checkpoint::from_entries` reads a
-- format 3 blob as a whole checkpoint numbered 0.
INSERT INTO {steps} (run_id, seq, whole, payload)
    SELECT run_id, 0, true, payload FROM {checkpoints};

UPDATE {checkpoints} SET payload = ''::bytea;

COMMENT ON COLUMN {checkpoints}.payload IS
    'empty since schema version 2: the checkpoints are the rows of the steps table';
