//! `fluxio`: the command line for the runs of fluxio's durable pipelines
//! (contract rule 23). It reads and changes runs in any built-in store,
//! shows their values without the pipeline's Rust types, prints tables for
//! people and JSON for scripts, and never prints a password.
//!
//! # Install
//!
//! ```text
//! cargo install --path crates/fluxio-cli     # from a checkout of fluxio
//! fluxio --help
//! ```
//!
//! # Commands
//!
//! ```text
//! fluxio runs list   [--pipeline P] [--status S] [--version V] [--since 1h|RFC3339]
//!                    [--limit N] [--after CURSOR] [--all]
//! fluxio runs show   RUN [--full]
//! fluxio runs diff   A B                  # RUN or RUN@STEP (a step number or a stage name)
//! fluxio runs retry  RUN                  # a failed or needs-attention run, for the recovery workers
//! fluxio runs cancel RUN
//! fluxio runs delete RUN [--force] [--yes]
//! fluxio runs purge  --status S --older-than 7d [--pipeline P] [--dry-run] [--yes]
//! fluxio runs signal RUN WAIT '{"approved": true}' [--sender NAME]   # or --file PATH (- for stdin)
//! fluxio runs wake   RUN                  # a sleeping or waiting run, due now
//! ```
//!
//! `signal` stores a signal for a run's wait (contract rule 26) with a JSON
//! payload, read without the pipeline's types: the run checks it against
//! the wait's type when it takes it, and refuses a payload of another
//! shape (its wait stays open, and says why). The wait's name is checked
//! against the run's recorded pipeline shape first. `wake` is an
//! operator's "now" (rule 25): a sleep ends, a wait takes its timeout
//! outcome, on the next worker that claims the run.
//!
//! `RUN` is the run's store key, `pipeline/run_id`. `S` is one of
//! `running`, `abandoned` (running, but no worker holds its lease),
//! `failed`, `completed`, `cancelled`, `needs-attention`, `sleeping`,
//! `waiting`. Every command
//! takes `--json`: one JSON document on standard output (`list`:
//! `{"runs": [...], "next": CURSOR}`, the page's
//! [`RunSummary`](fluxio_core::store::RunSummary)s and the cursor of the
//! next page, `null` on the last; states and statuses by their serde
//! names, `"Failed"`, `"NeedsAttention"`). Tables are plain text; states are
//! coloured only when standard output is a terminal, `NO_COLOR` is not set
//! and `TERM` is not `dumb`.
//!
//! Every context key, run key, run id, stage name and version is printed as
//! it is when each of its characters is visible and tells itself apart;
//! otherwise it is quoted and escaped as string values are (Rust's `{:?}`):
//! `"a\nb"`, `"a b"`, `""`, `"orders/evil\u{202e}gpj.exe"`, so no two
//! runs or keys look alike. The history marks each key written `+key` and
//! each key removed `-key` (`+-coupon` wrote `-coupon`). `show` of a run
//! whose history the store cannot read prints what the listing knows of it
//! (state, step, attempt, error, times, lease), then fails with the error.
//!
//! `delete` takes the run's lease before it deletes, so it never races a
//! worker: a run whose lease a worker holds is refused unless `--force`.
//! `delete` and `purge` ask `[y/N]` on a terminal; without one they need
//! `--yes`.
//!
//! # The store
//!
//! `--store URL`, or the environment variable `FLUXIO_STORE`:
//!
//! | URL | store | its options (defaults as the store builders') |
//! |---|---|---|
//! | `sqlite://PATH`, `sqlite:PATH` (`sqlite:///abs/path`) | SQLite; the file must exist | `--table` (`fluxio_checkpoints`) |
//! | `redis://…`, `rediss://…` | Redis | `--prefix` (`fluxio:checkpoint`) |
//! | `postgres://…`, `postgresql://…` | PostgreSQL | `--schema` (`public`), `--table` (`fluxio_checkpoints`) |
//!
//! and `--timeout` (10 s) for every store call (at most about 24.8 days on
//! PostgreSQL, whose `statement_timeout` takes no more: a longer one is a
//! usage error naming `timeout`). An empty `FLUXIO_STORE` is no store.
//!
//! The reading commands (`list`, `show`, `diff`) open the SQL stores
//! read-only ([`SqliteStoreBuilder::read_only`](fluxio_sqlite::SqliteStoreBuilder::read_only),
//! [`PostgresStoreBuilder::read_only`](fluxio_postgres::PostgresStoreBuilder::read_only)):
//! they never create a file, a schema or a table, nor migrate one; a store
//! without fluxio's tables is `no fluxio tables here (...)` (exit 3). The
//! writing commands (`retry`, `cancel`, `delete`, `purge`) check the same
//! way first, then open the store as a worker opens it, applying its
//! pending migrations: only a store that already holds fluxio's tables is
//! ever migrated. On Redis no command that reads writes a key. A URL is
//! shown only with its password masked, and a message is scrubbed of it.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | the operation failed: no such run, a run in the wrong state, a store that cannot list |
//! | 2 | usage: bad arguments (a malformed `RUN` or a setting out of range too), no store URL, or a deletion needing `--yes` without a terminal |
//! | 3 | the store: a bad or unsupported URL, a store without fluxio's tables (or with older ones than a read takes), or a store that cannot be reached or does not answer |
//!
//! Every failure is one line on standard error, starting `fluxio: `; a bad
//! argument's line ends `try '--help'`.
//!
//! # Examples
//!
//! The binary is [`run`] with the process's arguments:
//!
//! ```
//! use fluxio_cli::{Exit, run};
//!
//! assert_eq!(run(["fluxio", "--version"]), Exit::Ok);
//! assert_eq!(run(["fluxio", "runs", "frobnicate"]), Exit::Usage);
//! assert_eq!(
//!     run(["fluxio", "--store", "ftp://user:secret@host", "runs", "list"]),
//!     Exit::Store
//! );
//! ```

mod args;
mod commands;
mod exit;
mod render;
mod store;

use std::ffi::OsString;

use clap::Parser as _;

pub use exit::Exit;

/// Runs the `fluxio` command with `args` (the program name first), printing
/// to standard output and standard error, and says how it ended: what the
/// binary exits with.
///
/// ```
/// use fluxio_cli::{Exit, run};
///
/// assert_eq!(run(["fluxio", "runs", "show"]), Exit::Usage, "RUN is missing");
/// assert_eq!(run(["fluxio", "--store", "sqlite:///no/such/file.db", "runs", "show", "a/b"]), Exit::Store);
/// ```
pub fn run<I, T>(args: I) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // help and version are "errors" that print to stdout and exit 0
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return Exit::Ok;
        }
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{}", usage_line(&e));
            return Exit::Usage;
        }
    };
    commands::run(cli)
}

/// A parser error as one line, as every failure is: clap's message (its
/// lines joined, without the usage, which `--help` shows) and the hint to
/// try `--help`.
fn usage_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more information")
        {
            continue;
        }
        let line = line.strip_prefix("error: ").unwrap_or(line);
        match parts.last_mut() {
            // a list under a heading ("were not provided:") stays with it
            Some(last) if last.ends_with(':') || last.ends_with(',') => {
                last.push(' ');
                last.push_str(line);
            }
            _ => parts.push(line.to_owned()),
        }
    }
    exit::one_line(&format!("fluxio: {}; try '--help'", parts.join("; ")))
}
