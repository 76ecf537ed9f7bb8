//! `fluxio schedules list | show | pause | resume | delete` (contract rule
//! 32): the schedules stored in a store, read and changed without the
//! pipeline's code.

use fluxio_core::CheckpointStore;
use fluxio_core::schedule::{ScheduleInfo, schedule_key, stored_schedules};
use fluxio_core::store::Mark;
use serde_json::json;

use super::Out;
use crate::args::Schedules;
use crate::exit::Failure;
use crate::render::{Table, shown, when};

pub(crate) async fn dispatch(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    command: Schedules,
) -> Result<(), Failure> {
    match command {
        Schedules::List(args) => list(out, store, args.pipeline.as_deref()).await,
        Schedules::Show(args) => show(out, store, &key_of(&args.schedule)?).await,
        Schedules::Pause(args) => {
            let key = key_of(&args.schedule)?;
            one(store, &key).await?;
            store.mark(&key, Mark::Pause).await?;
            done(
                out,
                &args.schedule,
                "paused: it starts nothing until resumed",
            )
        }
        Schedules::Resume(args) => {
            let key = key_of(&args.schedule)?;
            one(store, &key).await?;
            let now = super::store_now(store).await?;
            store.mark(&key, Mark::Unpause { now_ms: now }).await?;
            done(
                out,
                &args.schedule,
                "resumed: missed ticks run as its catch-up policy says",
            )
        }
        Schedules::Delete(args) => {
            let key = key_of(&args.schedule)?;
            one(store, &key).await?;
            if !args.yes && !super::confirm(&format!("delete schedule {}?", shown(&args.schedule)))?
            {
                return Err(Failure::failed(format_args!(
                    "schedule {} was not deleted",
                    shown(&args.schedule)
                )));
            }
            fluxio_core::schedule::delete_schedule(store, &key).await?;
            done(out, &args.schedule, "deleted (the runs it started stay)")
        }
    }
}

/// The store key of `pipeline/name`.
fn key_of(schedule: &str) -> Result<String, Failure> {
    match schedule.split_once('/') {
        Some((pipeline, name))
            if !pipeline.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            let key = schedule_key(pipeline, name);
            fluxio_core::store::check_run_id(&key)
                .map_err(|e| Failure::usage(e.message_with_causes()))?;
            Ok(key)
        }
        _ => Err(Failure::usage(format_args!(
            "schedule {} is not pipeline/name",
            shown(schedule)
        ))),
    }
}

/// The schedule stored under `key`, which must be one.
async fn one(store: &dyn CheckpointStore, key: &str) -> Result<ScheduleInfo, Failure> {
    let Some(cp) = store.load(key).await? else {
        return Err(super::not_found(key));
    };
    Ok(ScheduleInfo::of(key, &cp)?)
}

fn done(out: &mut Out<'_>, schedule: &str, what: &str) -> Result<(), Failure> {
    if out.json {
        return out.json(&json!({ "schedule": schedule, "done": what }));
    }
    writeln!(out.out, "schedule {} {what}", shown(schedule))?;
    Ok(())
}

/// `text` on one line, control characters as spaces: fluxio's own
/// description of a schedule (its cron pattern was parsed).
fn plain(text: &str) -> String {
    text.replace(char::is_control, " ")
}

fn opt_when(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_owned(), when)
}

async fn list(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    pipeline: Option<&str>,
) -> Result<(), Failure> {
    let schedules = stored_schedules(store, pipeline).await?;
    if out.json {
        return out.json(&json!({ "schedules": schedules }));
    }
    if schedules.is_empty() {
        writeln!(out.out, "no schedules")?;
        return Ok(());
    }
    let mut table = Table::new([
        "SCHEDULE", "EVERY", "STATE", "NEXT", "LAST RUN", "FIRED", "SKIPPED",
    ]);
    for s in &schedules {
        table.row(vec![
            format!("{}/{}", shown(&s.pipeline), shown(&s.name)),
            plain(&s.every),
            if s.paused { "paused" } else { "active" }.to_owned(),
            opt_when(s.next_ms),
            s.last_run
                .as_deref()
                .map_or_else(|| "-".to_owned(), |r| shown(r).into_owned()),
            s.fired.to_string(),
            s.skipped.to_string(),
        ]);
    }
    write!(out.out, "{}", table.render(out.colour))?;
    Ok(())
}

async fn show(out: &mut Out<'_>, store: &dyn CheckpointStore, key: &str) -> Result<(), Failure> {
    let s = one(store, key).await?;
    if out.json {
        return out.json(&s);
    }
    let mut table = Table::new(["", ""]);
    let mut field = |name: &str, value: String| table.row(vec![name.to_owned(), value]);
    field(
        "schedule",
        format!("{}/{}", shown(&s.pipeline), shown(&s.name)),
    );
    field("every", plain(&s.every));
    field(
        "state",
        if s.paused { "paused" } else { "active" }.to_owned(),
    );
    field("overlap", format!("{:?}", s.overlap));
    field("catch-up", format!("{:?}", s.catch_up));
    field("next tick", opt_when(s.next_ms));
    field("last tick", opt_when(s.last_tick_ms));
    field(
        "last run",
        s.last_run.as_deref().map_or_else(
            || "-".to_owned(),
            |r| format!("{}/{}", shown(&s.pipeline), shown(r)),
        ),
    );
    field("runs started", s.fired.to_string());
    field("ticks skipped", s.skipped.to_string());
    let rendered = table.render(false);
    write!(
        out.out,
        "{}",
        rendered.split_once('\n').map_or("", |(_, rows)| rows)
    )?;
    Ok(())
}
