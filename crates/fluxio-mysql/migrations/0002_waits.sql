-- fluxio-mysql, schema version 2: runs that wait (contract rules 25-27): when
-- a sleeping or waiting run is due, and the runs' mailboxes.
--
-- A template like version 1; `{database}` is the store's database as an
-- expression (a quoted name, or `DATABASE()`) and `{table_name}` the quoted
-- name of `{checkpoints}`, both from validated identifiers. Every statement
-- can run again after a crash half-way (the server commits each DDL on its
-- own): the column and its index are added in one `ALTER TABLE`, only when
-- the column is missing (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`).
--
-- `due_at` is written with every write of the run's row, in the transaction
-- of its checkpoint (rule 27): a sleeping run's wake time, a waiting run's
-- deadline, or 0 once a signal it waits for is delivered; NULL for every
-- other run, for a wait without a deadline, and for the rows written before
-- this migration (none of them waits). The index holds the due runs,
-- earliest first and then in key order.

SET @fluxio_due_at = (SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = {database} AND table_name = {table_name} AND column_name = 'due_at');
SET @fluxio_alter = IF(@fluxio_due_at = 0,
    'ALTER TABLE {checkpoints} ADD COLUMN due_at BIGINT NULL, ADD KEY fluxio_due (due_at, run_id)',
    'DO 0');
PREPARE fluxio_alter FROM @fluxio_alter;
EXECUTE fluxio_alter;
DEALLOCATE PREPARE fluxio_alter;

CREATE TABLE IF NOT EXISTS {signals} (
    run_id  VARBINARY(512) NOT NULL,
    -- the wait name the signal is for (at most 128 bytes, compared as bytes)
    name    VARBINARY(255) NOT NULL,
    -- the payload in fluxio's value wire format (a closed entry: unit)
    payload LONGBLOB       NOT NULL,
    -- when it was sent (or its name closed), in milliseconds since the Unix epoch
    sent_at BIGINT         NOT NULL,
    -- who sent it, as the sender said
    sender  TEXT           NOT NULL,
    -- delivered | consumed | closed
    state   VARCHAR(16) CHARACTER SET ascii NOT NULL,
    PRIMARY KEY (run_id, name),
    -- a run's mailbox goes with it, by every statement that deletes its row
    FOREIGN KEY (run_id) REFERENCES {checkpoints} (run_id) ON DELETE CASCADE
) ENGINE = InnoDB;
