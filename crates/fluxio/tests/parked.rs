//! Contract rule 24: what a durable run costs while it waits inside a
//! stage. Ten thousand runs parked at once in a stage: no run has a task of
//! its own for its lease (one task per pipeline renews them all), and each
//! holds at most 4 KB besides its context (issue 13; 3.7 KB in this debug
//! build), everything the process allocated for it counted: the task that
//! runs it and its future (1.9 KB of nested `async fn` states, inline in
//! the task), the stage's boxed future, its lease's entries and renewal,
//! its journal in the in-memory store (the first checkpoint and the one
//! before the stage), and the run's own bookkeeping.
//!
//! The bytes are counted by a counting global allocator (bytes requested,
//! not timed), so the figure is deterministic up to the runtime's own
//! bookkeeping.
#![allow(unsafe_code)] // the counting allocator: `GlobalAlloc` is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fluxio::{Context, InMemoryStore, Outcome, StageResult, pipeline, stage};
use tokio::sync::Semaphore;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; the counting only touches
// an atomic (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see above).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
            LIVE.fetch_add(new_size, Ordering::SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const RUNS: usize = if option_env!("FX_FEW").is_some() {
    2
} else {
    10_000
};

static GATE: Semaphore = Semaphore::const_new(0);
static PARKED: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn first(ctx: Context) -> StageResult {
    Ok(ctx.set("n", 1u64)?)
}

#[stage]
async fn park(ctx: Context) -> StageResult {
    PARKED.fetch_add(1, Ordering::SeqCst);
    let permit = GATE.acquire().await?;
    drop(permit);
    Ok(ctx.set("parked", true)?)
}

#[stage]
async fn last(ctx: Context) -> StageResult {
    Ok(ctx.set("done", true)?)
}

#[test]
fn rule24_ten_thousand_parked_durable_runs_have_no_task_of_their_own_and_hold_under_4_kb_each() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let p = pipeline![first, park, last]
            .name("parked")
            .store(InMemoryStore::new())
            .lease_ttl(Duration::from_secs(60))
            .build()
            .expect("valid");
        let fut = p.invoke("size", Context::new());
        println!(
            "the future of invoke: {} bytes",
            std::mem::size_of_val(&fut)
        );
        drop(fut);
        let ids: Vec<String> = (0..RUNS).map(|i| format!("run-{i:05}")).collect();
        let metrics = tokio::runtime::Handle::current().metrics();
        let tasks_before = metrics.num_alive_tasks();
        let before = LIVE.load(Ordering::SeqCst);
        let runs: Vec<_> = ids
            .iter()
            .map(|id| {
                let (p, id) = (p.clone(), id.clone());
                tokio::spawn(async move { p.invoke(&id, Context::new()).await })
            })
            .collect();
        while PARKED.load(Ordering::SeqCst) < RUNS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let held = LIVE.load(Ordering::SeqCst).saturating_sub(before);
        // what the same contexts cost on their own: the issue counts a
        // run's memory besides its context
        let alone = LIVE.load(Ordering::SeqCst);
        let contexts: Vec<Context> = (0..RUNS)
            .map(|_| Context::new().set("n", 1u64).expect("a number"))
            .collect();
        let context = LIVE.load(Ordering::SeqCst).saturating_sub(alone) / RUNS;
        drop(contexts);
        let tasks = metrics.num_alive_tasks() - tasks_before;
        let per_run = held / RUNS;
        let besides = per_run.saturating_sub(context);
        println!(
            "{RUNS} durable runs parked in a stage: {held} bytes ({per_run} bytes a run, of which \
             {context} its context's, {besides} besides), {tasks} tasks alive besides the \
             runtime's (the runs' own: {RUNS})"
        );
        assert!(
            tasks <= RUNS + 2,
            "a run has no task of its own besides the one that runs it: {tasks} tasks"
        );
        assert!(
            besides <= 4 * 1024,
            "a parked durable run holds {besides} bytes besides its context (at most 4 KB)"
        );
        GATE.add_permits(RUNS);
        for run in runs {
            let done = run
                .await
                .expect("no panic")
                .and_then(Outcome::completed)
                .expect("completes");
            assert!(done.get::<bool>("done").expect("set"));
        }
    });
}
