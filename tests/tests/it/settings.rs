//! Settings that make no sense are refused when built, with
//! `Error::InvalidSetting` naming the setting (docs/CONTRACT.md, "Limits and
//! settings"), and the ends of each range are accepted.

use std::time::Duration;

use crate::common::{a, input};
use fluxio::middleware::{CircuitBreaker, Middleware, RateLimit};
use fluxio::recovery::{MAX_CONCURRENCY, RecoveryPolicy, RecoveryWorker};
use fluxio::store::MIN_LEASE_TTL;
use fluxio::testing::StageTest;
use fluxio::{Context, Error, Outcome, Pipeline, StageResult, pipeline, stage};

/// The setting `err` names, when it is an `InvalidSetting`.
fn setting(err: &Error) -> Option<&'static str> {
    match err {
        Error::InvalidSetting { setting, .. } => Some(setting),
        _ => None,
    }
}

#[tokio::test]
async fn middleware_that_lets_nothing_through_is_refused_at_build() {
    type Make = fn() -> Box<dyn Middleware>;
    let cases: [(Make, &str); 4] = [
        (
            || Box::new(RateLimit::new(0, Duration::from_secs(1))),
            "calls",
        ),
        (|| Box::new(RateLimit::per_second(0)), "calls"),
        (|| Box::new(RateLimit::per_minute(0)), "calls"),
        (|| Box::new(CircuitBreaker::new(0)), "failures"),
    ];
    for (make, name) in cases {
        let wide = pipeline![a].middleware(Boxed(make())).build();
        let own = pipeline![a].stage_middleware("a", Boxed(make())).build();
        for built in [wide.map(drop), own.map(drop)] {
            let err = built.expect_err("refused");
            assert_eq!(setting(&err), Some(name), "{err}");
            assert!(err.to_string().contains(&format!("`{name}`")), "{err}");
        }
        let tested = StageTest::of::<a>()
            .middleware(Boxed(make()))
            .run(input("t"))
            .await
            .expect_err("refused");
        assert_eq!(setting(&tested), Some(name), "{tested}");
    }
    pipeline![a]
        .middleware(RateLimit::new(1, Duration::from_secs(1)))
        .middleware(CircuitBreaker::new(1))
        .build()
        .expect("one call, one failure");
}

/// A boxed middleware, as a middleware.
#[derive(Debug)]
struct Boxed(Box<dyn Middleware>);

#[async_trait::async_trait]
impl Middleware for Boxed {
    async fn call(
        &self,
        stage: &fluxio::Stage,
        ctx: Context,
        next: fluxio::middleware::Next<'_>,
    ) -> fluxio::Result<fluxio::stage::Output> {
        self.0.call(stage, ctx, next).await
    }
    fn check(&self) -> fluxio::Result<()> {
        self.0.check()
    }
}

fn durable() -> Pipeline {
    pipeline![a]
        .name("settings")
        .durable(true)
        .build()
        .expect("valid")
}

#[test]
fn a_recovery_worker_that_resumes_nothing_is_refused_at_build() {
    for (runs, name) in [(0, "concurrency"), (MAX_CONCURRENCY + 1, "concurrency")] {
        let err = RecoveryWorker::builder()
            .pipeline(durable())
            .concurrency(runs)
            .build()
            .expect_err("refused");
        assert_eq!(setting(&err), Some(name), "{runs}: {err}");
    }
    let err = RecoveryWorker::builder()
        .pipeline(durable())
        .policy(RecoveryPolicy::new().max_attempts(0))
        .build()
        .expect_err("refused");
    assert_eq!(setting(&err), Some("max_attempts"), "{err}");
    for runs in [1, MAX_CONCURRENCY] {
        RecoveryWorker::builder()
            .pipeline(durable())
            .concurrency(runs)
            .policy(RecoveryPolicy::new().max_attempts(1))
            .build()
            .expect("in range");
    }
}

#[stage]
async fn slow(ctx: Context) -> StageResult {
    tokio::time::sleep(Duration::from_millis(60)).await;
    Ok(ctx.set("slow", true)?)
}

/// The shortest lease a run can renew (every third of it, on a 1 ms timer)
/// is 3 ms: shorter ones are refused at build, and a run with the shortest
/// keeps its lease through a stage twenty times as long.
#[tokio::test(start_paused = true)]
async fn a_lease_too_short_to_renew_is_refused_and_the_shortest_is_renewed() {
    assert_eq!(MIN_LEASE_TTL, Duration::from_millis(3));
    for ttl in [
        Duration::from_millis(1),
        Duration::from_millis(2),
        MIN_LEASE_TTL - Duration::from_nanos(1),
    ] {
        let err = pipeline![slow]
            .name("settings")
            .durable(true)
            .lease_ttl(ttl)
            .build()
            .expect_err("too short to renew");
        assert_eq!(setting(&err), Some("lease_ttl"), "{ttl:?}: {err}");
        assert!(err.to_string().contains("renew"), "{err}");
    }
    let p = pipeline![slow, a]
        .name("settings")
        .durable(true)
        .lease_ttl(MIN_LEASE_TTL)
        .build()
        .expect("the shortest lease");
    let out = p
        .invoke("short-lease", input("short-lease"))
        .await
        .and_then(Outcome::completed);
    assert!(
        out.as_ref().is_ok_and(|c| c.get::<bool>("slow").is_ok()),
        "{out:?}"
    );
}
