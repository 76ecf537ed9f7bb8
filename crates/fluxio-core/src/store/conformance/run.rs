//! Checks that run a pipeline on the store under test.
//!
//! The pipeline is built by hand from [`Stage::new`] (core cannot use the
//! `#[stage]` and `pipeline!` macros, which expand to the facade's paths).
//! Its stages count their calls in a [`Probe`], a resource of the pipeline,
//! so checks running in parallel never share counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use super::{Harness, namespace, suite_pipeline, suite_stage};
use crate::compile::Node;
use crate::context::Context;
use crate::pipeline::{Pipeline, PipelineBuilder};
use crate::stage::{CallFn, Output, ResourceReq, Resources, StageFuture};
use crate::store::{Checkpoint, CheckpointStore, RunStatus, run_key};
use crate::{BoxError, StageResult};

/// The stages of [`checkout`], in order.
const STAGES: [&str; 4] = ["reserve", "price", "charge", "ship"];

/// Call counts of the stages of [`checkout`], and whether `charge` fails.
/// Clones share them, so two pipelines (two "processes") can share one.
#[derive(Debug, Clone, Default)]
struct Probe {
    calls: Arc<[AtomicU32; 4]>,
    gateway_down: Arc<AtomicBool>,
}

impl Probe {
    /// A probe whose payment gateway is down, until told otherwise.
    fn gateway_down() -> Self {
        let probe = Probe::default();
        probe.gateway_down.store(true, Ordering::SeqCst);
        probe
    }

    fn calls(&self) -> [u32; 4] {
        [0, 1, 2, 3].map(|i| self.calls[i].load(Ordering::SeqCst))
    }
}

/// What `charge` fails with while the gateway is down.
#[derive(Debug, thiserror::Error)]
#[error("the payment gateway is down")]
struct GatewayDown;

/// Runs `body` as stage `index` of [`checkout`], counting the call.
fn step(
    index: usize,
    ctx: Context,
    resources: &Resources,
    body: fn(Context, &Probe) -> StageResult,
) -> StageFuture {
    let probe = resources.get::<Probe>();
    StageFuture::new(async move {
        let probe = probe.ok_or("the probe is registered")?;
        probe.calls[index].fetch_add(1, Ordering::SeqCst);
        body(ctx, &probe).map(Output::Context)
    })
}

fn reserve(ctx: Context, resources: &Resources) -> StageFuture {
    step(0, ctx, resources, |ctx, _| Ok(ctx.set("reserved", true)?))
}

fn price(ctx: Context, resources: &Resources) -> StageFuture {
    step(1, ctx, resources, |ctx, _| {
        let items: Vec<u64> = ctx.get("items")?;
        Ok(ctx.set("total", items.iter().sum::<u64>())?)
    })
}

fn charge(ctx: Context, resources: &Resources) -> StageFuture {
    step(2, ctx, resources, |ctx, probe| {
        if probe.gateway_down.load(Ordering::SeqCst) {
            return Err(Box::new(GatewayDown) as BoxError);
        }
        let total: u64 = ctx.get("total")?;
        Ok(ctx.set("receipt", format!("paid {total}"))?)
    })
}

fn ship(ctx: Context, resources: &Resources) -> StageFuture {
    step(3, ctx, resources, |ctx, _| Ok(ctx.set("shipped", true)?))
}

/// `reserve, price, charge, ship`, each counting its calls in `probe`. Every
/// call builds the same pipeline, version included.
fn checkout(probe: &Probe) -> PipelineBuilder {
    let calls: [CallFn; 4] = [reserve, price, charge, ship];
    let nodes = STAGES
        .iter()
        .zip(calls)
        .zip(1u8..)
        .map(|((&name, call), n)| probe_stage(name, n, call))
        .collect();
    suite_pipeline(
        nodes,
        *b"fluxio/conformance/checkout/v1\0\0",
        CHECKOUT,
        probe,
    )
}

/// The stage `name` of [`checkout`]: async, taking the [`Probe`], with a
/// code hash of `n`s.
fn probe_stage(name: &'static str, n: u8, call: CallFn) -> Node {
    const TAKES_PROBE: &[fn() -> ResourceReq] = &[ResourceReq::of::<Probe>];
    suite_stage(name, n, TAKES_PROBE, call)
}

/// The name of [`checkout`]: the store keeps its runs under `checkout/<run id>`.
const CHECKOUT: &str = "checkout";

/// `parallel![reserve, charge]` of [`checkout`]'s stages, under the same
/// name (`charge` reads `total` from the input).
fn reserve_and_charge(probe: &Probe) -> PipelineBuilder {
    let block = Node::Parallel {
        branches: vec![
            vec![probe_stage("reserve", 1, reserve)],
            vec![probe_stage("charge", 3, charge)],
        ],
        detached: false,
    };
    suite_pipeline(
        vec![block],
        *b"fluxio/conformance/parallel/v1\0\0",
        CHECKOUT,
        probe,
    )
}

/// `builder` built on a new handle of the store of namespace `ns`.
async fn on_store<H: Harness>(h: &H, ns: &str, builder: PipelineBuilder) -> Pipeline {
    builder
        .store(h.store(ns).await)
        .build()
        .expect("the pipeline builds")
}

/// Invokes `run` on `p` with `input` while the gateway is down: the run
/// fails with [`GatewayDown`].
async fn fails_at_the_gateway(p: &Pipeline, run: &str, input: Context) {
    let err = p.invoke(run, input).await.expect_err("the gateway is down");
    assert!(err.stage_error::<GatewayDown>().is_some(), "{err}");
}

/// What `run` comes to when it is resumed on `p` with the gateway back up:
/// its end.
async fn resumed_with_the_gateway_up(p: &Pipeline, probe: &Probe, run: &str) -> Context {
    probe.gateway_down.store(false, Ordering::SeqCst);
    p.resume(run)
        .await
        .and_then(crate::Outcome::completed)
        .expect("the resume completes")
}

/// The checkpoint the failure of `run` left.
async fn failure_checkpoint(p: &Pipeline, run: &str) -> Checkpoint {
    p.checkpoint(run)
        .await
        .expect("load")
        .expect("a failure leaves a checkpoint")
}

/// Rule 19 through the store: a parallel block fails in one branch after
/// the other finished; the failure checkpoint, read back through a second
/// store handle, carries the finished branch's record, and the resume there
/// runs only the failed branch, then merges both.
pub async fn rule19_a_finished_branch_is_kept_by_the_store_and_not_run_again<H: Harness>(h: &H) {
    let ns = namespace("branches");
    let run = "order-19";
    let probe = Probe::gateway_down();
    let first = on_store(h, &ns, reserve_and_charge(&probe)).await;
    let input = Context::new().set("total", 4200u64).expect("serializes");
    fails_at_the_gateway(&first, run, input).await;
    assert_eq!(probe.calls(), [1, 0, 1, 0]);
    drop(first);

    let second = on_store(h, &ns, reserve_and_charge(&probe)).await;
    let cp = failure_checkpoint(&second, run).await;
    assert_eq!(cp.status, RunStatus::Failed);
    let recorded: Vec<(u32, &str)> = cp
        .branches
        .iter()
        .map(|r| (r.branch, r.name.as_str()))
        .collect();
    assert_eq!(
        recorded,
        [(0, "reserve")],
        "the store kept the branch record"
    );
    let out = resumed_with_the_gateway_up(&second, &probe, run).await;
    assert_eq!(probe.calls(), [1, 0, 2, 0], "only `charge` ran again");
    assert!(out.get::<bool>("reserved").expect("merged from the record"));
    assert_eq!(out.get::<String>("receipt").expect("receipt"), "paid 4200");
}

/// A durable pipeline fails at a stage; a second store handle on the same
/// namespace (another process, as far as the store can tell) sees the
/// failure checkpoint, and resumes the run: only the failed stage and the
/// ones after it run again, the work before the failure is kept, the lease
/// is released after each run, and resuming the completed run runs nothing.
pub async fn a_failed_run_resumes_from_the_failed_stage_on_another_store<H: Harness>(h: &H) {
    let ns = namespace("resume");
    let run = "order-42";
    let probe = Probe::gateway_down();

    let first = on_store(h, &ns, checkout(&probe)).await;
    let input = Context::new()
        .set("items", vec![1999u64, 2201])
        .expect("serializes");
    fails_at_the_gateway(&first, run, input).await;
    assert_eq!(probe.calls(), [1, 1, 1, 0]);
    drop(first);
    lease_released(h, &ns, &run_key(CHECKOUT, run), "after the failed run").await;

    let second = on_store(h, &ns, checkout(&probe)).await;
    let cp = failure_checkpoint(&second, run).await;
    assert_eq!(
        (cp.step.as_str(), cp.status, cp.is_failed()),
        ("charge", RunStatus::Failed, true)
    );

    let out = resumed_with_the_gateway_up(&second, &probe, run).await;
    assert_eq!(
        probe.calls(),
        [1, 1, 2, 1],
        "only `charge` and `ship` ran again"
    );
    let receipt: String = out.get("receipt").expect("receipt");
    assert_eq!(receipt, "paid 4200");
    assert!(out.get::<bool>("shipped").expect("shipped"));
    assert!(
        out.get::<bool>("reserved").expect("reserved"),
        "the first run's work is kept"
    );
    let cp = second
        .checkpoint(run)
        .await
        .expect("load")
        .expect("a completed run leaves a checkpoint");
    assert_eq!(cp.status, RunStatus::Completed);
    lease_released(h, &ns, &run_key(CHECKOUT, run), "after the resume").await;

    // Resuming a completed run runs nothing.
    assert_eq!(
        second
            .resume(run)
            .await
            .and_then(crate::Outcome::completed)
            .expect("resume again"),
        out
    );
    assert_eq!(probe.calls(), [1, 1, 2, 1]);
}

/// The run's lease was released: no held lease record, and another handle
/// takes the lease at once.
async fn lease_released<H: Harness>(h: &H, ns: &str, run: &str, when: &str) {
    if let Some(records) = h.records(ns).await {
        assert!(
            records.checkpoints.contains(run),
            "{when}: the checkpoint is stored: {records:?}"
        );
        assert_ne!(
            records.leases.get(run),
            Some(&true),
            "{when}: the lease was released: {records:?}"
        );
    }
    let other = h.store(ns).await;
    let lease = other
        .acquire_lease(run, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{when}: the lease is free: {e}"));
    other.release_lease(lease).await.expect("release");
}
