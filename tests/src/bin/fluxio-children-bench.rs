//! Measures a parent with many child runs (contract rule 29) on each
//! store, beside a baseline taken in the same run: the figures of
//! docs/performance.md, "Child runs".
//!
//! ```text
//! cargo run --release -p fluxio-tests --bin fluxio-children-bench -- <store> [children]
//! ```
//!
//! `<store>`: `sqlite`, `postgres`, `mysql` or `redis` (the tests' servers);
//! `children`: 1,000 by default. In a namespace of its own:
//!
//! - the baseline: as many runs of the child pipeline, started directly
//!   (`invoke`, 16 at once) in this process;
//! - the fan-out: a parent `child!("kid", output = ["done"], each = "items", into = "out")`
//!   over as many items. *Fan out* is the parent's call until it parks
//!   (every child stored, due); *join* is a `RecoveryWorker` of both
//!   pipelines (concurrency 16, `due_poll` 20 ms) from its start until
//!   the parent completed, the children's results in its context.
//! - bytes: the encoded journals (`Checkpoint::to_bytes`) of the parent and
//!   its children, beside those of the baseline's runs.
//!
//! It prints one summary line starting with `==`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fluxio::recovery::RecoveryWorker;
use fluxio::store::{CheckpointStore, RunFilter};
use fluxio::{Context, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};
use fluxio_tests::StoreKind;

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[stage]
async fn work(ctx: Context) -> StageResult {
    let item: u64 = ctx.get("item")?;
    Ok(ctx.set("done", item * 2)?)
}

fn kid(store: &Arc<dyn CheckpointStore>) -> fluxio::Result<Pipeline> {
    pipeline![work]
        .name("kid")
        .store_arc(Arc::clone(store))
        .build()
}

/// The encoded bytes of the journals of `keys`.
async fn bytes(store: &Arc<dyn CheckpointStore>, keys: &[String]) -> BenchResult<u64> {
    let mut total = 0u64;
    for key in keys {
        for cp in store.history(key).await? {
            total += cp.to_bytes()?.len() as u64;
        }
    }
    Ok(total)
}

async fn keys_of(store: &Arc<dyn CheckpointStore>, filter: RunFilter) -> BenchResult<Vec<String>> {
    let mut filter = filter.limit(10_000);
    let mut keys = Vec::new();
    loop {
        let page = store.list_runs(&filter).await?;
        keys.extend(page.runs.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => filter = filter.after(next),
            None => return Ok(keys),
        }
    }
}

#[tokio::main]
async fn main() -> BenchResult {
    let args: Vec<String> = std::env::args().collect();
    let kind = args
        .get(1)
        .and_then(|k| StoreKind::parse(k))
        .ok_or("usage: fluxio-children-bench <sqlite|postgres|mysql|redis> [children]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000), |n| n.parse())?;
    let ns = format!("children_bench_{}", std::process::id());
    let url = kind.url();
    let store = kind.open(&url, &ns).await?;

    // the baseline: the same children, started directly
    let child = kid(&store)?;
    let started = Instant::now();
    let runs = (0..n).map(|i| {
        let child = child.clone();
        async move {
            let input = Context::new().set("item", i)?;
            child.invoke(&format!("direct-{i}"), input).await.map(drop)
        }
    });
    futures::stream::iter(runs)
        .buffer_unordered(16)
        .collect::<Vec<fluxio::Result<()>>>()
        .await
        .into_iter()
        .collect::<fluxio::Result<Vec<()>>>()?;
    let direct = started.elapsed();
    let direct_keys = keys_of(&store, RunFilter::new().id_prefix("direct-")).await?;
    let direct_bytes = bytes(&store, &direct_keys).await?;

    // the fan-out
    let parent = pipeline![child!(
        "kid",
        output = ["done"],
        each = "items",
        into = "out"
    )]
    .name("parent")
    .store_arc(Arc::clone(&store))
    .child(child.clone())
    .build()?;
    let items: Vec<u64> = (0..n).collect();
    let started = Instant::now();
    let out = parent
        .invoke("p", Context::new().set("items", items)?)
        .await?;
    let fan_out = started.elapsed();
    if !matches!(out, Outcome::Waiting { .. }) {
        return Err(format!("the parent did not wait: {out:?}").into());
    }
    let started = Instant::now();
    let worker = RecoveryWorker::builder()
        .pipeline(parent.clone())
        .pipeline(child)
        .concurrency(16)
        .due_poll(Duration::from_millis(20))
        .build()?
        .spawn()?;
    let ended = parent.wait_for("p", Duration::from_secs(600)).await?;
    let join = started.elapsed();
    worker.shutdown(Duration::from_secs(10)).await?;
    let done = ended.ok_or("the parent did not end in 600 s")?;
    if done.status != RunStatus::Completed {
        return Err(format!(
            "the parent ended {:?}: {:?}",
            done.status, done.error_message
        )
        .into());
    }
    let results: Vec<std::collections::BTreeMap<String, u64>> =
        done.context.to_context().get("out")?;
    if results.len() as u64 != n
        || results
            .iter()
            .enumerate()
            .any(|(i, r)| r.get("done") != Some(&(2 * i as u64)))
    {
        return Err("the results are not the children's, in order".into());
    }
    let mut family = keys_of(&store, RunFilter::new().children_of("parent/p")).await?;
    family.push("parent/p".to_owned());
    let family_bytes = bytes(&store, &family).await?;
    let parent_bytes = bytes(&store, &["parent/p".to_owned()]).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "== {} children on {}: fan out {:.0} ms, join {:.0} ms (total {:.2}x the {:.0} ms of {} \
         direct runs); bytes {} ({:.2}x the direct runs' {}; the parent's journal {})",
        n,
        kind.name(),
        ms(fan_out),
        ms(join),
        (ms(fan_out) + ms(join)) / ms(direct).max(0.001),
        ms(direct),
        n,
        family_bytes,
        family_bytes as f64 / direct_bytes.max(1) as f64,
        direct_bytes,
        parent_bytes
    );
    if kind == StoreKind::Sqlite {
        let _ = std::fs::remove_file(std::path::Path::new(&url).join(format!("{ns}.db")));
    }
    Ok(())
}

use futures::StreamExt as _;
