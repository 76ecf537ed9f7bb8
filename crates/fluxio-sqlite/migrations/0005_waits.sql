-- fluxio-sqlite, schema version 5: runs that wait (contract rules 25-27):
-- when a sleeping or waiting run is due, and the runs' mailboxes.
--
-- A template like version 1: `{checkpoints}`, `{checkpoints_due}`,
-- `{signals}` and `{signals_cascade}` are replaced by double-quoted names
-- built from the validated table name. It runs in one `BEGIN IMMEDIATE`
-- transaction together with its row in `_fluxio_migrations`.
--
-- `due_at` is written with every write of the run's row, in the transaction
-- of its checkpoint (rule 27): a sleeping run's wake time, a waiting run's
-- deadline, or 0 once a signal it waits for is delivered (milliseconds since
-- the Unix epoch); NULL for every other run, for a wait without a deadline,
-- and for the rows written before this migration (none of them waits).

ALTER TABLE {checkpoints} ADD COLUMN due_at INTEGER;

-- The due runs, earliest first and then in key order, in one range of this
-- index; only the runs that wait are in it.
CREATE INDEX {checkpoints_due} ON {checkpoints} (due_at, run_id) WHERE due_at IS NOT NULL;

CREATE TABLE {signals} (
    run_id  TEXT    NOT NULL,
    -- the wait name the signal is for
    name    TEXT    NOT NULL,
    -- the payload in fluxio's value wire format (a closed entry: unit)
    payload BLOB    NOT NULL,
    -- when it was sent (or its name closed), in milliseconds since the Unix epoch
    sent_at INTEGER NOT NULL,
    -- who sent it, as the sender said
    sender  TEXT    NOT NULL,
    -- delivered | consumed | closed
    state   TEXT    NOT NULL,
    PRIMARY KEY (run_id, name)
) STRICT;

-- A run's mailbox goes with its row, by every statement that deletes it
-- (delete, delete_fenced, purge_expired, keep_completed, a run replaced).
CREATE TRIGGER {signals_cascade} AFTER DELETE ON {checkpoints}
BEGIN
    DELETE FROM {signals} WHERE run_id = old.run_id;
END;
