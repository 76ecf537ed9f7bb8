-- fluxio-sqlite, schema version 2: a run's journal (contract rules 18 and 20).
--
-- A template like version 1: `{steps}`, `{steps_whole}`, `{steps_cascade}`
-- and `{checkpoints}` are replaced by double-quoted names built from the
-- validated table name. It runs in one `BEGIN IMMEDIATE` transaction
-- together with its row in `_fluxio_migrations`.
--
-- Each checkpoint of a run becomes a row of `{steps}`, numbered by its
-- `seq`: `Checkpoint::entry_bytes()`, the whole context (`whole = 1`) or only
-- the keys changed since checkpoint `seq - 1`. The run's row in
-- `{checkpoints}` stays: status (fenced saves check it), retention, and the
-- copies of the latest checkpoint's fields for operators. Its `payload` is
-- empty from now on.

CREATE TABLE {steps} (
    run_id  TEXT    NOT NULL,
    -- the checkpoint's number in the run's journal
    seq     INTEGER NOT NULL,
    -- 1: the whole context (a load starts at the run's last such row);
    -- 0: the keys changed since checkpoint `seq - 1`
    whole   INTEGER NOT NULL,
    -- exactly `Checkpoint::entry_bytes()`
    payload BLOB    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

-- the run's last whole checkpoint, max(seq), in one index lookup
CREATE INDEX {steps_whole} ON {steps} (run_id, seq) WHERE whole = 1;

-- A run is deleted in one piece, by every statement that deletes its row
-- (delete, delete_fenced, purge_expired): a trigger, not a foreign key,
-- because SQLite checks foreign keys only on connections that ask for it.
CREATE TRIGGER {steps_cascade} AFTER DELETE ON {checkpoints}
BEGIN
    DELETE FROM {steps} WHERE run_id = old.run_id;
END;

-- Runs written by earlier builds: their one blob (format 1 to 3) becomes
-- checkpoint 0 of the journal, as it is; `Checkpoint::from_entries`
-- reads a format 3 blob as a whole checkpoint numbered 0.
INSERT INTO {steps} (run_id, seq, whole, payload)
    SELECT run_id, 0, 1, payload FROM {checkpoints};

UPDATE {checkpoints} SET payload = X'';
