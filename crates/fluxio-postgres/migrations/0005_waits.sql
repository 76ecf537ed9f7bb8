-- fluxio-postgres, schema version 5: runs that wait (contract rules 25-27):
-- when a sleeping or waiting run is due, and the runs' mailboxes.
--
-- A template like version 1: `{checkpoints}` and `{signals}` are replaced by
-- schema-qualified, double-quoted names built from validated identifiers. It
-- runs in one transaction together with its row in
-- `"<schema>"._fluxio_migrations`.
--
-- `due_at` is written with every write of the run's row, in the transaction
-- of its checkpoint (rule 27): a sleeping run's wake time, a waiting run's
-- deadline, or 0 once a signal it waits for is delivered; NULL for every
-- other run, for a wait without a deadline, and for the rows written before
-- this migration (none of them waits). Adding a nullable column rewrites
-- nothing.

ALTER TABLE {checkpoints} ADD COLUMN due_at BIGINT;

COMMENT ON COLUMN {checkpoints}.due_at IS
    'sleeping and waiting runs: when they are due, in milliseconds since the Unix epoch (0: signalled)';

-- The due runs, earliest first and then in key order, in one range of this
-- index; only the runs that wait are in it.
CREATE INDEX ON {checkpoints} (due_at, run_id COLLATE "C") WHERE due_at IS NOT NULL;

CREATE TABLE {signals} (
    -- a run's mailbox goes with it, by every statement that deletes its row
    run_id  TEXT   NOT NULL REFERENCES {checkpoints} (run_id) ON DELETE CASCADE,
    -- the wait name the signal is for
    name    TEXT   NOT NULL,
    -- the payload in fluxio's value wire format (a closed entry: unit)
    payload BYTEA  NOT NULL,
    -- when it was sent (or its name closed), in milliseconds since the Unix epoch
    sent_at BIGINT NOT NULL,
    -- who sent it, as the sender said
    sender  TEXT   NOT NULL,
    -- delivered | consumed | closed
    state   TEXT   NOT NULL,
    PRIMARY KEY (run_id, name)
);

COMMENT ON TABLE {signals} IS
    'fluxio run mailboxes: one row per wait name signalled or closed';
