//! The store's names (validated, backquoted) and the text of its
//! statements: every value a bind parameter, each written once, in the
//! order `fluxio-sql` binds it (MySQL's parameters are anonymous `?`; a
//! statement that needs a value twice reads it from a one-row derived
//! table `p`).

use fluxio_sql::{
    COMPLETED, DrawnTokens, LeaseFree, Listing, RunStatements, ServerSql, Statements, WaitNames,
    WaitStatements,
};

use crate::dialect::MySql;
use crate::error::MySqlStoreError;

/// The longest identifier MySQL and MariaDB take.
const MAX_IDENTIFIER: usize = 64;
/// The suffixes of the other tables' names.
const SUFFIXES: [&str; 5] = ["_steps", "_leases", "_tokens", "_pipelines", "_signals"];

/// The validated names of one store's database and tables.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// `None`: the connection's database (the URL's).
    pub(crate) database: Option<String>,
    pub(crate) table: String,
}

impl fluxio_sql::server::Tables for Names {
    const NAMESPACE: &'static str = "database";

    fn namespace(&self) -> Option<&str> {
        self.database.as_deref()
    }

    fn table(&self) -> &str {
        &self.table
    }
}

impl Names {
    /// Validates the database and table names.
    pub(crate) fn new(database: Option<&str>, table: &str) -> Result<Self, MySqlStoreError> {
        if let Some(database) = database {
            MySqlStoreError::check_identifier("database", database)?;
            if matches!(
                database,
                "mysql" | "information_schema" | "performance_schema" | "sys"
            ) {
                return Err(MySqlStoreError::InvalidSetting {
                    setting: "database",
                    value: database.to_owned(),
                    reason: "it is a system database of the server".to_owned(),
                });
            }
        }
        MySqlStoreError::check_identifier("table", table)?;
        let longest = SUFFIXES.iter().map(|s| s.len()).max().unwrap_or(0);
        if table.len() + longest > MAX_IDENTIFIER {
            return Err(MySqlStoreError::InvalidSetting {
                setting: "table",
                value: table.to_owned(),
                reason: format!(
                    "at most {} characters, so that `<table>_pipelines` fits in {MAX_IDENTIFIER}",
                    MAX_IDENTIFIER - longest
                ),
            });
        }
        Ok(Names {
            database: database.map(str::to_owned),
            table: table.to_owned(),
        })
    }

    /// The database as messages name it.
    pub(crate) fn shown_database(&self) -> &str {
        self.database.as_deref().unwrap_or("<the URL's>")
    }

    /// `` `database`.`name` ``, or `` `name` `` in the connection's
    /// database.
    pub(crate) fn qualified(&self, name: &str) -> String {
        match &self.database {
            Some(database) => format!("{}.{}", quote(database), quote(name)),
            None => quote(name),
        }
    }

    /// The checkpoint table (a row per run).
    pub(crate) fn checkpoints(&self) -> String {
        self.qualified(&self.table)
    }

    /// `<table><suffix>`, qualified.
    pub(crate) fn derived(&self, suffix: &str) -> String {
        self.qualified(&format!("{}{suffix}", self.table))
    }

    /// The migrations' bookkeeping table.
    pub(crate) fn migrations(&self) -> String {
        self.qualified("_fluxio_migrations")
    }

    /// The store's database as an SQL expression of its name: a literal
    /// (the name is a validated identifier), or `DATABASE()`, the
    /// connection's.
    pub(crate) fn database_literal(&self) -> String {
        self.database
            .as_ref()
            .map_or_else(|| "DATABASE()".to_owned(), |d| format!("'{d}'"))
    }
}

/// A backquoted identifier. The names are validated before they get here;
/// doubling backquotes keeps this safe on its own too.
pub(crate) fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

/// The database's clock in milliseconds since the Unix epoch, read when
/// the expression is evaluated (`SYSDATE`, not the statement's start
/// `NOW`: a locking read that waited compares with the time it got the
/// lock). The session's time zone is UTC (sqlx sets it), so
/// `UNIX_TIMESTAMP` converts nothing.
pub(crate) const NOW: &str = "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)";

/// The statements of one store, built once from its validated names.
pub(crate) fn statements(names: &Names) -> ServerSql {
    let cp = names.checkpoints();
    let steps = names.derived("_steps");
    let leases = names.derived("_leases");
    let tokens = names.derived("_tokens");
    let pipelines = names.derived("_pipelines");
    let visible = |c: &str| format!("({c}expires_at IS NULL OR {c}expires_at > {NOW})");
    let visible_run = format!(
        "EXISTS (SELECT 1 FROM {cp} WHERE run_id = p.k AND {})",
        visible("")
    );
    // The pipeline's row, locked until the transaction ends: the
    // completions of one pipeline trim one after the other, each
    // (READ COMMITTED: a new snapshot per statement) seeing the
    // runs the ones before it completed.
    let keep_lock = format!(
        "INSERT INTO {pipelines} (pipeline) VALUES (?) \
             ON DUPLICATE KEY UPDATE pipeline = pipeline"
    );
    // The completed runs of pipeline `?` but the `?` newest visible
    // ones (expired ones go too: they are purgeable), ranked in one
    // range of the completion index; the steps and mailboxes go with the rows.
    let keep_completed = format!(
        "DELETE c FROM {cp} AS c JOIN (SELECT run_id FROM (SELECT run_id, {live} AS live, \
             ROW_NUMBER() OVER (PARTITION BY {live} ORDER BY updated_at DESC, run_id DESC) \
             AS r FROM {cp} WHERE pipeline = ? AND status = '{COMPLETED}') AS ranked \
             WHERE NOT ranked.live OR ranked.r > ?) AS gone ON c.run_id = gone.run_id",
        live = visible("")
    );
    ServerSql {
        journal: Statements::new::<MySql>(
            (&cp, &steps),
            &format!("?, '', ?, ?, ?, ?, ?, ?, {NOW}, {NOW} + ?, ?, ?"),
            (keep_completed, Some(keep_lock)),
            wait_statements(names),
        ),
        run: RunStatements {
            // Takes the lease with the token `drawn.draw` drew, when no
            // unexpired lease holds it (the row locked by the upsert); the
            // token is checked after (`drawn.held`), since the server
            // counts an unchanged row as affected. Binds (key, token, ttl).
            acquire: format!(
                "INSERT INTO {leases} (run_id, token, expires_at) VALUES (?, ?, {NOW} + ?) \
                 ON DUPLICATE KEY UPDATE \
                 token = IF(expires_at IS NULL OR expires_at <= {NOW}, VALUES(token), token), \
                 expires_at = IF(token = VALUES(token), VALUES(expires_at), expires_at)"
            ),
            drawn: Some(DrawnTokens {
                // an AUTO_INCREMENT row
                draw: format!("INSERT INTO {tokens} () VALUES ()"),
                // LAST_INSERT_ID() is unsigned: as the signed token column
                drawn: "SELECT CAST(LAST_INSERT_ID() AS SIGNED)".to_owned(),
                held: format!("SELECT token FROM {leases} WHERE run_id = ?"),
            }),
            // Whether the lease (key, token) is current, locking its row
            // (false when there is none): the fenced writes of a run take
            // turns, and a takeover (which updates the row) waits for the
            // fenced write to commit.
            held: format!(
                "SELECT COALESCE(l.token = p.t AND l.expires_at > {NOW}, 0) \
                 FROM (SELECT ? AS k, ? AS t) AS p \
                 LEFT JOIN {leases} AS l ON l.run_id = p.k FOR UPDATE"
            ),
            exists: format!(
                "SELECT EXISTS (SELECT 1 FROM {cp} WHERE run_id = ? AND {})",
                visible("")
            ),
            // The steps and the mailbox go with the row (the foreign key's cascade).
            delete: format!("DELETE FROM {cp} WHERE run_id = ?"),
            release: format!(
                "UPDATE {leases} SET expires_at = NULL WHERE run_id = ? AND token = ?"
            ),
        },
        // The run rows with their lease where it is held, in key order
        // (the keys are bytes).
        list: Listing {
            select: format!(
                "SELECT CONVERT(c.run_id USING utf8mb4), c.version, c.status, c.step, c.attempt, \
                 c.error_message, c.created_at, c.updated_at, l.expires_at \
                 FROM {cp} AS c LEFT JOIN {leases} AS l \
                 ON l.run_id = c.run_id AND l.expires_at > {NOW}"
            ),
            visible: visible("c."),
            key: "c.run_id".to_owned(),
            held: "l.expires_at".to_owned(),
            id: "SUBSTRING(c.run_id, LOCATE('/', c.run_id) + 1)".to_owned(),
            pipeline: "CONVERT(c.pipeline USING utf8mb4)".to_owned(),
        },
        // From the last whole checkpoint on, in one statement.
        load: format!(
            "SELECT s.payload FROM (SELECT ? AS k) AS p JOIN {steps} AS s ON s.run_id = p.k \
             WHERE s.seq >= (SELECT COALESCE(MAX(w.seq), 0) FROM {steps} AS w \
             WHERE w.run_id = p.k AND w.whole) AND {visible_run} ORDER BY s.seq"
        ),
        history: format!(
            "SELECT s.payload FROM (SELECT ? AS k) AS p JOIN {steps} AS s ON s.run_id = p.k \
             WHERE {visible_run} ORDER BY s.seq"
        ),
        renew: format!(
            "UPDATE {leases} AS l JOIN (SELECT ? AS k, ? AS t, ? AS ttl) AS p \
             ON l.run_id = p.k AND l.token = p.t \
             SET l.expires_at = {NOW} + p.ttl WHERE l.expires_at > {NOW}"
        ),
        purge: vec![
            format!("DELETE FROM {leases} WHERE expires_at IS NULL OR expires_at <= {NOW}"),
            // The newest token stays: the next one is drawn after it even
            // on a server that forgets its AUTO_INCREMENT counter.
            format!(
                "DELETE t FROM {tokens} AS t JOIN (SELECT MAX(id) AS newest FROM {tokens}) AS n \
                 ON t.id < n.newest"
            ),
            format!("DELETE FROM {cp} WHERE expires_at <= {NOW}"),
        ],
    }
}

/// The statements of runs that wait (rules 25-27) on the store's tables.
fn wait_statements(names: &Names) -> WaitStatements {
    let (cp, leases, signals) = (
        names.checkpoints(),
        names.derived("_leases"),
        names.derived("_signals"),
    );
    // no wake-ups: the workers poll
    WaitStatements::new::<MySql>(WaitNames {
        lease_free: LeaseFree::AntiJoin,
        // MariaDB 10.6 and later, MySQL 8
        claim_lock: " FOR UPDATE SKIP LOCKED",
        ..WaitNames::millis((&cp, &leases, &signals), NOW)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(Names::new(Some("app"), &"t".repeat(54)).is_ok());
        let err = Names::new(None, &"t".repeat(55)).expect_err("too long");
        assert!(err.to_string().contains("invalid table"), "{err}");
        let err = Names::new(Some("mysql"), "t").expect_err("reserved");
        assert!(err.to_string().contains("invalid database"), "{err}");
        for bad in ["", "a`b", "A", "drop table", "é"] {
            let err = Names::new(Some(bad), "t").expect_err(bad);
            assert!(err.to_string().starts_with("invalid database "), "{err}");
        }
    }

    #[test]
    fn statements_name_the_tables() {
        let sql = statements(&Names::new(Some("d1"), "t1").expect("valid"));
        assert!(sql.journal.save.starts_with("INSERT INTO `d1`.`t1` ("));
        assert!(sql.journal.steps.insert.contains("`d1`.`t1_steps`"));
        assert!(sql.run.acquire.contains("`d1`.`t1_leases`"));
        assert!(sql.journal.waits.insert.contains("`d1`.`t1_signals`"));
        let plain = statements(&Names::new(None, "t1").expect("valid"));
        assert!(plain.journal.save.starts_with("INSERT INTO `t1` ("));
    }
}
