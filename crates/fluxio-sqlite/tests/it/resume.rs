//! A durable pipeline on SQLite whose process is killed mid-stage is resumed
//! by another process on the same file: only the crashed stage and the ones
//! after it run again. (A failed run resumed through another store is a
//! conformance check.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fluxio::{Context, Error, PipelineBuilder, RunStatus, StageResult, ctx, pipeline, stage};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;

static CALLS: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];

/// Set for the child process of `a_crashed_process_is_resumed_by_another`:
/// the file of its store.
const CHILD_FILE: &str = "FLUXIO_SQLITE_TEST_CRASH_FILE";

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    CALLS[0].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn price(ctx: Context) -> StageResult {
    CALLS[1].fetch_add(1, Ordering::SeqCst);
    let items: Vec<u64> = ctx.get("items")?;
    Ok(ctx.set("total", items.iter().sum::<u64>())?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    CALLS[2].fetch_add(1, Ordering::SeqCst);
    if let Ok(file) = std::env::var(CHILD_FILE) {
        // The child process says it is in the stage and waits for the
        // parent to kill it (SIGKILL): no failure checkpoint, no lease
        // release, nothing.
        std::fs::write(format!("{file}.charging"), b"")?;
        tokio::time::sleep(Duration::from_secs(60)).await;
        panic!("the parent was to kill this process");
    }
    let total: u64 = ctx.get("total")?;
    Ok(ctx.set("receipt", format!("paid {total}"))?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    CALLS[3].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("shipped", true)?)
}

fn checkout() -> PipelineBuilder {
    pipeline![reserve, price, charge, ship].name("checkout")
}

fn calls() -> [u32; 4] {
    [0, 1, 2, 3].map(|i| CALLS[i].load(Ordering::SeqCst))
}

/// Not a test of its own: the body of the child process of
/// `a_crashed_process_is_resumed_by_another`, which is killed in `charge`
/// (it does nothing when run by the test harness).
#[tokio::test]
async fn helper_child_process_crashes_in_charge() -> anyhow::Result<()> {
    let Ok(file) = std::env::var(CHILD_FILE) else {
        return Ok(());
    };
    let pipeline = checkout()
        .store(SqliteStore::connect(&file).await?)
        .lease_ttl(Duration::from_millis(500))
        .build()?;
    pipeline
        .invoke("order-7", ctx! { "items" => vec![100u64, 23] }?)
        .await?
        .completed()?;
    unreachable!("the process is killed in `charge`");
}

#[tokio::test]
async fn a_crashed_process_is_resumed_by_another() -> anyhow::Result<()> {
    let dir = support::TempDir::new("crash");
    let file = dir.db("orders");
    let path = file.to_str().expect("a UTF-8 path");
    let mut child = support::child::spawn_test_process(
        &support::child::test_name(module_path!(), "helper_child_process_crashes_in_charge"),
        &[(CHILD_FILE, path)],
    );
    let charging = dir.path().join("orders.db.charging");
    let reached = reach_charge(&mut child, &charging).await;
    let _ = child.kill(); // kill -9, in the middle of `charge`
    let (status, output) = support::child::wait_for(child);
    if let Err(why) = reached {
        panic!("{why}\n{output}");
    }
    assert!(!status.success(), "{status}\n{output}");

    let store = SqliteStore::connect(&file).await?;
    let pipeline = checkout().store(store).build()?;
    let cp = pipeline
        .checkpoint("order-7")
        .await?
        .expect("the checkpoint saved before `charge`");
    assert_eq!(
        (cp.step.as_str(), cp.status, cp.is_failed()),
        ("charge", RunStatus::Running, false)
    );

    // The dead process's lease lapses after its time-to-live (500 ms).
    let started = Instant::now();
    let out = loop {
        match pipeline.resume("order-7").await {
            Err(Error::RunIdInUse { .. }) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other?.completed()?,
        }
    };
    assert_eq!(
        calls(),
        [0, 0, 1, 1],
        "this process ran only `charge` and `ship`"
    );
    assert_eq!(out.get::<String>("receipt")?, "paid 123");
    assert!(
        out.get::<bool>("reserved")?,
        "the crashed process's work is kept"
    );
    Ok(())
}

/// Waits until the child has created `marker` in `charge`.
async fn reach_charge(
    child: &mut std::process::Child,
    marker: &std::path::Path,
) -> Result<(), String> {
    let started = Instant::now();
    while !marker.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the child exited ({status}) before `charge`"));
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the child did not reach `charge` within 30 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
