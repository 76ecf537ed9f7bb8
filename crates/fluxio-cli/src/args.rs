//! The command line, as clap parses it.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fluxio_core::store::RunState;

const EXIT_CODES: &str = "\
Store URLs (--store or FLUXIO_STORE):
  sqlite://PATH, sqlite:PATH    SQLite (the file must exist); --table
  redis://..., rediss://...     Redis; --prefix
  postgres://..., postgresql:// PostgreSQL; --schema, --table
  mysql://..., mariadb://...    MySQL or MariaDB; --schema (the database), --table
RUN is a run's store key, pipeline/run_id.

Exit codes:
  0  done
  1  the operation failed (no such run, a run in the wrong state, a store that cannot list)
  2  usage: bad arguments (a malformed RUN too), no store, or a deletion that needs --yes without a terminal
  3  the store: a bad or unsupported URL, no fluxio tables there, or it cannot be reached or does not answer

list, show and diff never create or migrate anything in the store.";

/// Inspect and manage the runs of fluxio's durable pipelines in a store.
#[derive(Debug, Parser)]
#[command(name = "fluxio", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print one JSON document instead of tables (for scripts).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the runs are.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The store's URL: sqlite://PATH, redis://..., rediss://..., postgres://...
    #[arg(long, env = "FLUXIO_STORE", global = true, hide_env_values = true)]
    pub(crate) store: Option<String>,
    /// SQLite, Postgres and MySQL: the checkpoint table [default: fluxio_checkpoints]
    #[arg(long, global = true)]
    pub(crate) table: Option<String>,
    /// Postgres: the schema [default: public]; MySQL: the database [default: the URL's]
    #[arg(long, global = true)]
    pub(crate) schema: Option<String>,
    /// Redis: the key prefix [default: fluxio:checkpoint]
    #[arg(long, global = true)]
    pub(crate) prefix: Option<String>,
    /// The most one store call may take (10s, 500ms, 1m...)
    #[arg(long, global = true, default_value = "10s", value_parser = duration)]
    pub(crate) timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The runs in the store.
    #[command(subcommand)]
    Runs(Runs),
    /// The schedules in the store (SCHEDULE is pipeline/name).
    #[command(subcommand)]
    Schedules(Schedules),
    /// The unfinished runs of each queue, by key: queued, running, waiting
    /// (a table, or --json: {"queues": [...], "read": N}).
    Queues(QueuesArgs),
    /// Serve the web console over the store until Ctrl-C (read-only unless
    /// --allow-actions).
    Ui(UiArgs),
}

#[derive(Debug, Args)]
pub(crate) struct UiArgs {
    /// The address to listen on; port 0 picks a free one. Anything but a
    /// loopback address shows every run to whoever reaches it: put it
    /// behind your own authentication.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) bind: std::net::SocketAddr,
    /// Let the console's forms retry, cancel, pause, unpause, wake, signal,
    /// delete and purge runs.
    #[arg(long)]
    pub(crate) allow_actions: bool,
    /// Actions need this token: an operator signs in with it on the page
    /// `login`. Prefer the environment variable to the flag (a flag shows
    /// in the process list).
    #[arg(long, env = "FLUXIO_UI_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct QueuesArgs {
    /// Only the runs of this pipeline.
    #[arg(long)]
    pub(crate) pipeline: Option<String>,
    /// Read at most this many unfinished runs.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) most: usize,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Schedules {
    /// List schedules (a table, or --json: {"schedules": [...]}).
    List(ScheduleListArgs),
    /// One schedule: when it ticks, its policies, next and last tick, counts.
    Show(ScheduleArg),
    /// Pause a schedule: it starts nothing until resumed.
    Pause(ScheduleArg),
    /// Resume a paused schedule: missed ticks run as its catch-up policy says.
    Resume(ScheduleArg),
    /// Delete a schedule (the runs it started stay).
    Delete(ScheduleDeleteArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleListArgs {
    /// Only the schedules of this pipeline.
    #[arg(long)]
    pub(crate) pipeline: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleArg {
    /// The schedule: pipeline/name.
    pub(crate) schedule: String,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleDeleteArgs {
    /// The schedule: pipeline/name.
    pub(crate) schedule: String,
    /// Do not ask.
    #[arg(long, short)]
    pub(crate) yes: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Runs {
    /// List runs (a table, or --json: {"runs": [run summaries], "next": cursor or null}).
    List(ListArgs),
    /// One run: status, step, attempt, error, times, lease, context and history.
    Show(ShowArgs),
    /// The context keys that differ between two points: RUN or RUN@STEP.
    Diff(DiffArgs),
    /// Hand a failed or needs-attention run back to the recovery workers.
    Retry(RunArg),
    /// Cancel a run: its worker stops before its next stage.
    Cancel(RunArg),
    /// Delete a run and its history.
    Delete(DeleteArgs),
    /// Delete the runs in a state that were last written before a time.
    Purge(PurgeArgs),
    /// Signal a run's wait with a JSON payload (stored with the run; the run takes it at its wait).
    Signal(SignalArgs),
    /// Make a sleeping or waiting run due now: a sleep ends, a wait takes its timeout outcome.
    Wake(RunArg),
    /// Pause a run: its worker stops before its next stage; no worker continues it until unpaused.
    Pause(RunArg),
    /// Unpause a paused run: it goes back to its sleep or wait, or is due at once at its step.
    Unpause(RunArg),
}

impl Runs {
    /// The run a command on one run names (`pipeline/run_id`); `None` for
    /// the commands on many, or on points of runs (`diff`).
    pub(crate) fn run(&self) -> Option<&str> {
        match self {
            Runs::Show(ShowArgs { run, .. })
            | Runs::Delete(DeleteArgs { run, .. })
            | Runs::Signal(SignalArgs { run, .. })
            | Runs::Retry(RunArg { run })
            | Runs::Cancel(RunArg { run })
            | Runs::Wake(RunArg { run })
            | Runs::Pause(RunArg { run })
            | Runs::Unpause(RunArg { run }) => Some(run),
            Runs::List(_) | Runs::Diff(_) | Runs::Purge(_) => None,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only runs of this pipeline.
    #[arg(long)]
    pub(crate) pipeline: Option<String>,
    /// Only runs in this state: running, abandoned, failed, completed, cancelled, needs-attention, sleeping, waiting, paused.
    #[arg(long, value_parser = state)]
    pub(crate) status: Option<RunState>,
    /// Only runs whose latest checkpoint this pipeline version wrote.
    #[arg(long)]
    pub(crate) version: Option<String>,
    /// Only the child runs of this run (pipeline/run_id), of every pipeline.
    #[arg(long)]
    pub(crate) parent: Option<String>,
    /// Only runs started since: a duration ago (1h, 30m, 7d) or an RFC 3339 time.
    #[arg(long, value_parser = since)]
    pub(crate) since: Option<u64>,
    /// Runs per page (1 to 10000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub(crate) limit: u16,
    /// Start after this cursor (printed when there are more runs).
    #[arg(long, conflicts_with = "all")]
    pub(crate) after: Option<String>,
    /// Every page, following the cursors.
    #[arg(long)]
    pub(crate) all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The run: pipeline/run_id.
    pub(crate) run: String,
    /// Show every value whole (by default, values past 200 characters are cut).
    #[arg(long)]
    pub(crate) full: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// A run (its latest context) or RUN@STEP (the context before a step: its number or stage name).
    pub(crate) a: String,
    /// The point to compare with, in the same form.
    pub(crate) b: String,
}

#[derive(Debug, Args)]
pub(crate) struct RunArg {
    /// The run: pipeline/run_id.
    pub(crate) run: String,
}

#[derive(Debug, Args)]
pub(crate) struct SignalArgs {
    /// The run: pipeline/run_id.
    pub(crate) run: String,
    /// The wait's name.
    pub(crate) wait: String,
    /// The payload, as JSON (`--json` is every command's flag for JSON output).
    #[arg(conflicts_with = "file")]
    pub(crate) payload: Option<String>,
    /// A file holding the payload as JSON (`-`: standard input).
    #[arg(long)]
    pub(crate) file: Option<String>,
    /// Who sends it, for the run's history [default: fluxio CLI].
    #[arg(long)]
    pub(crate) sender: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The run: pipeline/run_id.
    pub(crate) run: String,
    /// Delete it even while a worker holds its lease.
    #[arg(long)]
    pub(crate) force: bool,
    /// Do not ask.
    #[arg(long, short)]
    pub(crate) yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// The state of the runs to delete: running, abandoned, failed, completed, cancelled, needs-attention, sleeping, waiting, paused.
    #[arg(long, value_parser = state)]
    pub(crate) status: RunState,
    /// Only runs last written longer ago than this (7d, 12h...).
    #[arg(long, value_parser = duration)]
    pub(crate) older_than: Duration,
    /// Only runs of this pipeline.
    #[arg(long)]
    pub(crate) pipeline: Option<String>,
    /// List what would be deleted, delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Do not ask.
    #[arg(long, short)]
    pub(crate) yes: bool,
}

/// A state by the name [`RunState::as_str`] gives it.
fn state(text: &str) -> Result<RunState, String> {
    text.parse().map_err(|_: fluxio_core::Error| {
        let names: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
        format!(
            "`{text}` is not a run state; the states are {}",
            names.join(", ")
        )
    })
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration such as 30s, 10m, 1h or 7d ({e})"))
}

/// `--since`: a duration ago, or a time; in ms since the Unix epoch.
fn since(text: &str) -> Result<u64, String> {
    let at = match humantime::parse_duration(text) {
        Ok(ago) => std::time::SystemTime::now()
            .checked_sub(ago)
            .unwrap_or(std::time::UNIX_EPOCH),
        Err(_) => humantime::parse_rfc3339_weak(text).map_err(|_| {
            format!(
                "`{text}` is neither a duration (1h, 7d) nor an RFC 3339 time (2024-05-01T12:00:00Z)"
            )
        })?,
    };
    Ok(crate::render::ms_since_epoch(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_duration_or_a_time() {
        assert_eq!(since("2024-05-01T00:00:00Z"), Ok(1_714_521_600_000));
        let hour_ago = since("1h").expect("a duration");
        let now = crate::render::ms_since_epoch(std::time::SystemTime::now());
        assert!((now - 3_600_000 - 1_000..=now - 3_600_000).contains(&hour_ago));
        let err = since("yesterday").expect_err("neither");
        assert!(err.contains("`yesterday`"), "{err}");
    }

    #[test]
    fn durations_name_the_bad_text() {
        assert_eq!(duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(duration("soon").expect_err("bad").contains("`soon`"));
    }

    #[test]
    fn states_are_read_by_their_names() {
        for s in RunState::ALL {
            assert_eq!(state(s.as_str()), Ok(s));
        }
        assert!(
            state("resting")
                .expect_err("no such state")
                .contains("resting")
        );
    }

    #[test]
    fn the_help_shows_the_builders_defaults() {
        assert_eq!(fluxio_sqlite::DEFAULT_TABLE, "fluxio_checkpoints");
        assert_eq!(fluxio_postgres::DEFAULT_TABLE, "fluxio_checkpoints");
        assert_eq!(fluxio_postgres::DEFAULT_SCHEMA, "public");
        assert_eq!(fluxio_redis::DEFAULT_KEY_PREFIX, "fluxio:checkpoint");
        assert_eq!(
            fluxio_redis::DEFAULT_COMMAND_TIMEOUT,
            Duration::from_secs(10)
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
