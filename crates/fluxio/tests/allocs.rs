//! What a stage call allocates (issue 13): an `async fn` stage whose body
//! has no `.await` is run in place by `#[stage]`, so calling it allocates
//! nothing; one that awaits has its future boxed, one allocation a call.
//!
//! Allocations are counted per thread by a counting global allocator, and
//! the runs use a current-thread runtime, so other tests' threads do not
//! count. A stage's own cost is the difference between a pipeline of ten
//! stages and one of a single stage, divided by nine: what a run costs
//! once (its key, its run id) cancels out.
#![allow(unsafe_code)] // the counting allocator: `GlobalAlloc` is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use fluxio::{Context, Outcome, Pipeline, StageResult, pipeline, stage};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; the counting only touches
// a const thread-local `Cell` (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded as is (see above).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[stage]
async fn keep(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn keep_after_a_wait(ctx: Context) -> StageResult {
    std::future::ready(()).await;
    Ok(ctx)
}

/// Macros `#[stage]` knows to expand to no `.await`.
#[stage]
async fn keep_and_check(ctx: Context) -> StageResult {
    assert!(ctx.len() < 1_000, "{} keys", ctx.len());
    debug_assert_eq!(ctx.len(), 0);
    Ok(ctx)
}

const RUNS: u64 = 50;

/// Allocations of `RUNS` invokes of `p`.
fn allocs(rt: &tokio::runtime::Runtime, p: &Pipeline) -> u64 {
    let before = ALLOCS.with(Cell::get);
    for _ in 0..RUNS {
        rt.block_on(p.invoke("allocs", Context::new()))
            .and_then(Outcome::completed)
            .expect("the run completes");
    }
    ALLOCS.with(Cell::get) - before
}

/// A pipeline of ten calls of `stage`.
macro_rules! ten_of {
    ($stage:ident) => {
        pipeline![
            $stage, $stage, $stage, $stage, $stage, $stage, $stage, $stage, $stage, $stage
        ]
    };
}

/// Allocations a stage call makes: (ten stages - one stage) / 9, a run.
fn per_stage(rt: &tokio::runtime::Runtime, ten: &Pipeline, one: &Pipeline) -> f64 {
    // once first: whatever is allocated once per process is not counted
    allocs(rt, ten);
    allocs(rt, one);
    let (ten, one) = (allocs(rt, ten), allocs(rt, one));
    (ten as f64 - one as f64) / 9.0 / RUNS as f64
}

#[test]
fn a_stage_without_await_is_called_without_an_allocation_and_one_that_awaits_with_one() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let per_stage_of = |ten: fluxio::PipelineBuilder, one: fluxio::PipelineBuilder| {
        per_stage(
            &rt,
            &ten.build().expect("valid"),
            &one.build().expect("valid"),
        )
    };
    let never_waits = per_stage_of(ten_of!(keep), pipeline![keep]);
    let logs = per_stage_of(ten_of!(keep_and_check), pipeline![keep_and_check]);
    let awaits = per_stage_of(ten_of!(keep_after_a_wait), pipeline![keep_after_a_wait]);
    assert!(
        never_waits == 0.0 && logs == 0.0,
        "a stage that never waits allocated {never_waits} (with assertions {logs}) a call"
    );
    assert!(
        (awaits - 1.0).abs() < f64::EPSILON,
        "a stage that awaits allocated {awaits} a call, not its one boxed future"
    );
}
