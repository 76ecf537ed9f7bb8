//! The `runs` commands, one file each, and what they share: the runtime,
//! the opened store, the output, and asking before deleting.

mod cancel;
mod delete;
mod diff;
mod list;
mod purge;
mod queues;
mod retry;
mod schedules;
mod show;
mod signal;
mod ui;

use std::io::{IsTerminal as _, Write};
use std::sync::Arc;

use fluxio_core::CheckpointStore;
use fluxio_core::store::RedactedUrl;

use crate::args::{Cli, Command, Runs, Schedules};
use crate::exit::{Exit, Failure};
use crate::store::Access;

/// What a command writes to, and how.
pub(crate) struct Out<'w> {
    /// Standard output.
    pub(crate) out: &'w mut dyn Write,
    /// One JSON document instead of tables.
    pub(crate) json: bool,
    /// ANSI colours in tables.
    pub(crate) colour: bool,
}

impl Out<'_> {
    /// Writes `value` as one pretty JSON document and a newline.
    pub(crate) fn json(&mut self, value: &impl serde::Serialize) -> Result<(), Failure> {
        serde_json::to_writer_pretty(&mut *self.out, value)?;
        writeln!(self.out)?;
        Ok(())
    }
}

/// A note for the person at the terminal, on standard error (never mixed
/// into the output a script parses).
pub(crate) fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Runs the parsed command line: opens the store, runs the command, prints
/// a failure as one line on standard error.
pub(crate) fn run(cli: Cli) -> Exit {
    let url = cli.store.store.as_deref().map(RedactedUrl::new);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            note(&format!("fluxio: cannot start the async runtime: {e}"));
            return Exit::Failed;
        }
    };
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let mut out = Out {
        out: &mut lock,
        json: cli.json,
        colour: !cli.json && crate::render::colour(),
    };
    let done = runtime.block_on(async {
        let command = match cli.command {
            Command::Runs(command) => command,
            Command::Ui(args) => {
                // the console writes only when it may act on runs
                let access = if args.allow_actions {
                    Access::Write
                } else {
                    Access::Read
                };
                let store = crate::store::open(&cli.store, access).await?;
                return ui::serve(&mut out, store, &args).await;
            }
            Command::Queues(args) => {
                let store = crate::store::open(&cli.store, Access::Read).await?;
                queues::queues(&mut out, &*store, &args).await?;
                out.out.flush()?;
                return Ok(());
            }
            Command::Schedules(command) => {
                let access = match command {
                    Schedules::List(_) | Schedules::Show(_) => Access::Read,
                    _ => Access::Write,
                };
                let store = crate::store::open(&cli.store, access).await?;
                schedules::dispatch(&mut out, &*store, command).await?;
                out.out.flush()?;
                return Ok(());
            }
        };
        let access = match command {
            Runs::List(_) | Runs::Show(_) | Runs::Diff(_) => Access::Read,
            Runs::Retry(_)
            | Runs::Cancel(_)
            | Runs::Delete(_)
            | Runs::Purge(_)
            | Runs::Signal(_)
            | Runs::Wake(_)
            | Runs::Pause(_)
            | Runs::Unpause(_) => Access::Write,
        };
        let store = crate::store::open(&cli.store, access).await?;
        dispatch(&mut out, &store, command).await?;
        out.out.flush()?;
        Ok::<(), Failure>(())
    });
    match done {
        Ok(()) => Exit::Ok,
        Err(failure) => {
            if !failure.message.is_empty() {
                note(&failure.line(url.as_ref()));
            }
            failure.exit
        }
    }
}

async fn dispatch(
    out: &mut Out<'_>,
    store: &Arc<dyn CheckpointStore>,
    command: Runs,
) -> Result<(), Failure> {
    let store = &**store;
    if let Some(key) = command.run() {
        check_key(key)?;
    }
    match command {
        Runs::List(args) => list::list(out, store, &args).await,
        Runs::Show(args) => show::show(out, store, &args).await,
        Runs::Diff(args) => diff::diff(out, store, &args).await,
        Runs::Retry(args) => retry::retry(out, store, &args.run).await,
        Runs::Cancel(args) => cancel::cancel(out, store, &args.run).await,
        Runs::Delete(args) => delete::delete(out, store, &args).await,
        Runs::Purge(args) => purge::purge(out, store, &args).await,
        Runs::Signal(args) => signal::signal(out, store, &args).await,
        Runs::Wake(args) => signal::wake(out, store, &args.run).await,
        Runs::Pause(args) => cancel::pause(out, store, &args.run).await,
        Runs::Unpause(args) => cancel::unpause(out, store, &args.run).await,
    }
}

/// The time now on `store`'s clock (the server's), or the machine's for a
/// store without one: what `wake` and `unpause` make a run due at.
pub(crate) async fn store_now(store: &dyn CheckpointStore) -> Result<u64, Failure> {
    Ok(match store.clock_ms().await? {
        Some(ms) => ms,
        None => crate::render::ms_since_epoch(std::time::SystemTime::now()),
    })
}

/// Asks `question [y/N]` on the terminal: `Ok(true)` on `y` or `yes`.
/// Without a terminal on standard input it refuses ([`Exit::Usage`]),
/// telling the caller to pass `--yes`.
pub(crate) fn confirm(question: &str) -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(format_args!(
            "{question}: standard input is not a terminal to ask on; pass --yes to go ahead"
        )));
    }
    let mut stderr = std::io::stderr();
    write!(stderr, "{question} [y/N] ")?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// The run `key`'s store key checked as every store checks it: a malformed
/// one is a usage error naming it, before the store is asked (for every
/// command on one run, by [`dispatch`]).
fn check_key(key: &str) -> Result<(), Failure> {
    fluxio_core::store::check_run_id(key).map_err(|e| Failure::usage(e.message_with_causes()))
}

/// The failure of a command on run `key`, which is not stored.
pub(crate) fn not_found(key: &str) -> Failure {
    Failure::of(&fluxio_core::Error::CheckpointNotFound {
        run_id: key.to_owned(),
    })
}
