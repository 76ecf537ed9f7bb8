//! Identifier validation, quoting and the SQL of the store.

use fluxio_sql::{
    COMPLETED, LeaseFree, Listing, Notify, RunStatements, ServerSql, Statements, WaitNames,
    WaitStatements,
};

use crate::dialect::Postgres;

use crate::error::PostgresStoreError;

/// Longest identifier PostgreSQL keeps without truncating it (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER: usize = fluxio_sql::MAX_IDENTIFIER;
/// Suffix of the lease table's name.
const LEASES_SUFFIX: &str = "_leases";
/// Suffix of the mailbox table's name: the longest of the tables'.
const SIGNALS_SUFFIX: &str = "_signals";

/// The validated names of one store's schema and tables.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) table: String,
}

impl fluxio_sql::server::Tables for Names {
    const NAMESPACE: &'static str = "schema";

    fn namespace(&self) -> Option<&str> {
        Some(&self.schema)
    }

    fn table(&self) -> &str {
        &self.table
    }
}

impl Names {
    /// Validates the schema and table names.
    pub(crate) fn new(schema: &str, table: &str) -> Result<Self, PostgresStoreError> {
        PostgresStoreError::check_identifier("schema", schema)?;
        PostgresStoreError::check_identifier("table", table)?;
        if schema.starts_with("pg_") || schema == "information_schema" {
            return Err(PostgresStoreError::InvalidSetting {
                setting: "schema",
                value: schema.to_owned(),
                reason: "`information_schema` and schema names starting with `pg_` are reserved \
                         by PostgreSQL for its system catalogs"
                    .to_owned(),
            });
        }
        if table.len() + SIGNALS_SUFFIX.len() > MAX_IDENTIFIER {
            return Err(PostgresStoreError::InvalidSetting {
                setting: "table",
                value: table.to_owned(),
                reason: format!(
                    "at most {} characters, so that the mailbox table `<table>{SIGNALS_SUFFIX}` \
                     fits in 63",
                    MAX_IDENTIFIER - SIGNALS_SUFFIX.len()
                ),
            });
        }
        Ok(Names {
            schema: schema.to_owned(),
            table: table.to_owned(),
        })
    }

    pub(crate) fn leases_table(&self) -> String {
        format!("{}{LEASES_SUFFIX}", self.table)
    }

    pub(crate) fn schema_quoted(&self) -> String {
        quote(&self.schema)
    }

    /// `"schema"."table"`.
    pub(crate) fn checkpoints_qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    /// `"schema"."table_leases"`.
    pub(crate) fn leases_qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.leases_table()))
    }

    /// `"<schema>"."<table>_steps"`: the runs' journals, a row per checkpoint.
    pub(crate) fn steps_qualified(&self) -> String {
        format!(
            "{}.{}",
            quote(&self.schema),
            quote(&format!("{}_steps", self.table))
        )
    }

    /// `"<schema>"."<table>_signals"`: the runs' mailboxes (rule 26).
    pub(crate) fn signals_qualified(&self) -> String {
        format!(
            "{}.{}",
            quote(&self.schema),
            quote(&format!("{}{SIGNALS_SUFFIX}", self.table))
        )
    }

    /// The `LISTEN`/`NOTIFY` channel of the store's tables: `fluxio_`
    /// and 16 hexadecimal digits of the 64-bit FNV-1a hash of
    /// `<schema>.<table>` (a channel name is an identifier of at most 63
    /// bytes; schema and table together may be longer).
    pub(crate) fn channel(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in format!("{}.{}", self.schema, self.table).bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("fluxio_{hash:016x}")
    }

    /// `"schema"."_fluxio_migrations"`.
    pub(crate) fn migrations_qualified(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote("_fluxio_migrations"))
    }
}

/// A double-quoted SQL identifier. The names are validated before they get
/// here; doubling quotes keeps this safe on its own too.
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// `$1..$10` as the values of [`ROW_COLUMNS`](fluxio_sql::ROW_COLUMNS): `$7` is the run's start in seconds
/// since the epoch, `$8` the retention in seconds (NULL: never expires), `$9`
/// the attempt (schema version 4), `$10` when the run is due, in
/// milliseconds (schema version 5; NULL: not due).
const VALUES: &str = "$1::text, ''::bytea, $2::text, $3::bigint, $4::text, $5::text, $6::text, \
     to_timestamp($7::float8), clock_timestamp(), \
     clock_timestamp() + make_interval(secs => $8::float8), $9::bigint, $10::bigint";
/// A `timestamptz` column as whole milliseconds since the Unix epoch.
fn millis(column: &str) -> String {
    format!("round(extract(epoch FROM {column}) * 1000)::int8")
}
/// The first key of the transaction-level advisory lock a completion takes
/// before trimming its pipeline (`"keep"`); the second is the hash of the
/// table and the pipeline.
const KEEP_LOCK_CLASS: i32 = 0x6b65_6570;
/// A row that is not expired (database clock).
const VISIBLE: &str = "(expires_at IS NULL OR expires_at > clock_timestamp())";

/// The statements of one store, built once from its validated, quoted
/// names; values are always bind parameters.
pub(crate) fn statements(names: &Names) -> ServerSql {
    let cp = names.checkpoints_qualified();
    let leases = names.leases_qualified();
    let steps = names.steps_qualified();
    let visible_run = format!("EXISTS (SELECT 1 FROM {cp} WHERE run_id = $1 AND {VISIBLE})");
    // Held until the transaction ends: the completions of pipeline
    // `$1` in this table trim one after the other, each (a new
    // statement, a new snapshot under READ COMMITTED) seeing the
    // runs the ones before it completed. The names are validated
    // identifiers (no quote can occur in them).
    let keep_lock = format!(
        "SELECT pg_advisory_xact_lock({KEEP_LOCK_CLASS}, \
             hashtext('{}.{}/' || $1::text))",
        names.schema, names.table
    );
    // The completed runs of pipeline `$1` but the `$2` newest
    // visible ones (expired ones go too: they are purgeable). Both
    // scans are one range of the `(pipeline, status, updated_at)`
    // index of schema version 3; the steps and mailboxes go with the rows
    // (`ON DELETE CASCADE`).
    let keep_completed = format!(
        "DELETE FROM {cp} WHERE pipeline = $1 AND status = '{COMPLETED}' \
             AND run_id NOT IN (SELECT run_id FROM {cp} \
             WHERE pipeline = $1 AND status = '{COMPLETED}' AND {VISIBLE} \
             ORDER BY updated_at DESC, run_id DESC LIMIT $2)"
    );
    ServerSql {
        journal: Statements::new::<Postgres>(
            (&cp, &steps),
            VALUES,
            (keep_completed, Some(keep_lock)),
            wait_statements(names),
        ),
        // The run rows with their lease where it is held (database
        // clock), in key order: byte order, `COLLATE "C"`, whatever the
        // database's collation; schema version 4's indexes make each
        // filter one range of keys in that order.
        list: Listing {
            select: format!(
                "SELECT c.run_id, c.version, c.status, c.step, c.attempt, \
                     c.error_message, {}, {}, {} \
                     FROM {cp} AS c LEFT JOIN {leases} AS l \
                     ON l.run_id = c.run_id AND l.expires_at > clock_timestamp()",
                millis("c.created_at"),
                millis("c.updated_at"),
                millis("l.expires_at")
            ),
            visible: "(c.expires_at IS NULL OR c.expires_at > clock_timestamp())".to_owned(),
            key: "c.run_id COLLATE \"C\"".to_owned(),
            held: "l.expires_at".to_owned(),
            id: "substr(c.run_id, strpos(c.run_id, '/') + 1) COLLATE \"C\"".to_owned(),
            pipeline: "c.pipeline".to_owned(),
        },
        // From the last whole checkpoint on (the partial index finds
        // it), in one statement: one snapshot.
        load: format!(
            "SELECT payload FROM {steps} WHERE run_id = $1 AND seq >= \
                 (SELECT coalesce(max(seq), 0) FROM {steps} WHERE run_id = $1 AND whole) \
                 AND {visible_run} ORDER BY seq"
        ),
        history: format!(
            "SELECT payload FROM {steps} WHERE run_id = $1 AND {visible_run} ORDER BY seq"
        ),
        renew: format!(
            "UPDATE {leases} SET expires_at = clock_timestamp() + make_interval(secs => $3::float8) \
                 WHERE run_id = $1 AND token = $2 AND expires_at > clock_timestamp()"
        ),
        run: RunStatements {
            acquire: format!(
                "INSERT INTO {leases} AS l (run_id, expires_at) \
                 VALUES ($1::text, clock_timestamp() + make_interval(secs => $2::float8)) \
                 ON CONFLICT (run_id) DO UPDATE \
                 SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at IS NULL OR l.expires_at <= clock_timestamp() \
                 RETURNING l.token"
            ),
            drawn: None,
            // Whether the lease with token `$2` is current, locking the
            // lease row (false when there is none): the fenced writes of
            // a run take turns (a fresh run has no row of its own to
            // lock yet), a takeover (which updates the row) waits for
            // the fenced write to commit, and a fenced write that waited
            // reads the new token.
            held: format!(
                "SELECT coalesce((SELECT token = $2 AND expires_at > clock_timestamp() \
                     FROM {leases} WHERE run_id = $1 FOR UPDATE), false)"
            ),
            exists: format!("SELECT EXISTS (SELECT 1 FROM {cp} WHERE run_id = $1 AND {VISIBLE})"),
            // The steps and the mailbox go with the row (`ON DELETE CASCADE`).
            delete: format!("DELETE FROM {cp} WHERE run_id = $1"),
            release: format!(
                "UPDATE {leases} SET expires_at = NULL WHERE run_id = $1 AND token = $2"
            ),
        },
        // Lease rows that are released or expired go too: tokens come
        // from a sequence, so a re-created row still gets a greater token.
        purge: vec![
            format!(
                "DELETE FROM {leases} \
                     WHERE expires_at IS NULL OR expires_at <= clock_timestamp()"
            ),
            format!("DELETE FROM {cp} WHERE expires_at <= clock_timestamp()"),
        ],
    }
}

/// The statements of runs that wait (rules 25-27) on the store's tables.
fn wait_statements(names: &Names) -> WaitStatements {
    let (cp, leases, signals) = (
        names.checkpoints_qualified(),
        names.leases_qualified(),
        names.signals_qualified(),
    );
    WaitStatements::new::<Postgres>(WaitNames {
        checkpoints: &cp,
        leases: &leases,
        signals: &signals,
        key_order: "c.run_id COLLATE \"C\"",
        lease_now: "clock_timestamp()",
        now_ms: &millis("clock_timestamp()"),
        lease_free: LeaseFree::SubPlan,
        due_hint: "",
        claim_lock: " FOR UPDATE OF c, l SKIP LOCKED",
        // sent when the transaction commits, to every listener
        notify: Some(Notify {
            sql: "SELECT pg_notify($1, $2)".to_owned(),
            channel: names.channel(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grammar is `fluxio_sql::check_identifier`'s, tested there: here,
    /// that the schema goes through it.
    #[test]
    fn identifiers() {
        for ok in ["public", "_x", "fluxio_checkpoints", &"a".repeat(63)] {
            assert!(
                PostgresStoreError::check_identifier("schema", ok).is_ok(),
                "{ok}"
            );
        }
        for bad in ["", "drop table", "A", "a\"b", &"a".repeat(64)] {
            let err = PostgresStoreError::check_identifier("schema", bad).expect_err(bad);
            assert!(err.to_string().starts_with("invalid schema "), "{err}");
        }
    }

    #[test]
    fn derived_names_fit() {
        assert!(Names::new("public", &"t".repeat(55)).is_ok());
        let err = Names::new("public", &"t".repeat(56)).expect_err("too long");
        assert!(err.to_string().contains("invalid table"), "{err}");
        let err = Names::new("pg_temp", "t").expect_err("reserved");
        assert!(err.to_string().contains("invalid schema"), "{err}");
    }

    #[test]
    fn statements_quote_the_names() {
        let sql = statements(&Names::new("s1", "t1").expect("valid"));
        assert!(sql.journal.save.starts_with("INSERT INTO \"s1\".\"t1\" ("));
        assert!(
            sql.journal
                .steps
                .insert
                .starts_with("INSERT INTO \"s1\".\"t1_steps\" (")
        );
        assert!(sql.run.acquire.contains("\"s1\".\"t1_leases\""));
        assert!(sql.journal.waits.insert.contains("\"s1\".\"t1_signals\""));
    }

    #[test]
    fn each_schema_and_table_has_a_channel_of_its_own() {
        let channel =
            |schema: &str, table: &str| Names::new(schema, table).expect("valid").channel();
        let long = channel(&"s".repeat(63), &"t".repeat(55));
        assert_eq!(long.len(), "fluxio_".len() + 16, "{long}");
        assert_ne!(channel("a", "b_c"), channel("a_b", "c"));
        assert_eq!(
            channel("public", "t"),
            channel("public", "t"),
            "the same in every process"
        );
    }
}
