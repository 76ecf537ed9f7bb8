//! `fluxio queues` (contract rule 31): the unfinished runs of each queue
//! in a store, by key, read without the pipelines' code.

use fluxio_core::CheckpointStore;
use fluxio_core::queue::queue_counts;
use serde_json::json;

use super::Out;
use crate::args::QueuesArgs;
use crate::exit::Failure;
use crate::render::{Table, shown};

pub(crate) async fn queues(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &QueuesArgs,
) -> Result<(), Failure> {
    if args.most == 0 {
        return Err(Failure::usage("--most must be at least 1"));
    }
    let (counts, read) = queue_counts(store, args.pipeline.as_deref(), args.most).await?;
    if out.json {
        return out.json(&json!({ "queues": counts, "read": read }));
    }
    if counts.is_empty() {
        writeln!(out.out, "no queued, running or waiting run of a queue")?;
    } else {
        let mut table = Table::new(["QUEUE", "KEY", "QUEUED", "RUNNING", "WAITING"]);
        for c in &counts {
            table.row(vec![
                shown(&c.queue).into_owned(),
                c.key
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |k| shown(k).into_owned()),
                c.queued.to_string(),
                c.running.to_string(),
                c.waiting.to_string(),
            ]);
        }
        write!(out.out, "{}", table.render(out.colour))?;
    }
    if read >= args.most {
        writeln!(
            out.out,
            "(read the first {read} unfinished runs; --most reads more)"
        )?;
    }
    Ok(())
}
