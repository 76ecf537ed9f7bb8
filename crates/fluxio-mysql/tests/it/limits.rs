//! A checkpoint larger than the server takes in one statement
//! (`max_allowed_packet`) is refused before it is sent, naming the run,
//! and the run's stored checkpoint stays (the server would otherwise drop
//! the connection, and the store would report a connection failure).

use fluxio::{Context, Error, StageResult, ctx, pipeline, stage};
use fluxio_core::CheckpointStore as _;
use fluxio_test_support as support;
use support::sql::SqlHarness as _;

use crate::sql::MySql;

#[stage]
async fn small(ctx: Context) -> StageResult {
    Ok(ctx.set("small", 1u8)?)
}

#[stage]
async fn huge(ctx: Context) -> StageResult {
    let size: u64 = ctx.get("size")?;
    let size = usize::try_from(size).map_err(|e| e.to_string())?;
    Ok(ctx.set("huge", vec![7u8; size])?)
}

#[tokio::test]
async fn a_checkpoint_past_the_servers_packet_limit_is_refused_by_name_and_the_run_stays() {
    support::sql::run::<MySql, _, _>("packet", |h| async move {
        let store = support::sql::open(&*h).await;
        let packet = u64::try_from(h.scalar_sql("SELECT @@max_allowed_packet").await)
            .expect("the packet limit");
        if packet > 256 << 20 {
            support::skip(&format!("mysql: max_allowed_packet is {packet} bytes"));
            return;
        }
        let pipeline = pipeline![small, huge]
            .name("limits")
            .store(store.clone())
            .build()
            .expect("build");
        let err = pipeline
            .invoke("r1", ctx! { "size" => packet }.expect("ctx"))
            .await
            .expect_err("too large for one statement");
        match &err {
            Error::CheckpointTooLarge {
                run_id,
                size,
                limit,
            } => {
                assert_eq!(run_id, "limits/r1");
                assert!(size > limit && *limit < packet, "{err}");
            }
            other => panic!("{other:?}"),
        }
        // the run's checkpoint before the huge one stays
        let stored = store.load("limits/r1").await.expect("load");
        assert_eq!(
            stored.map(|cp| cp.step).as_deref(),
            Some("huge"),
            "the run stops before the stage that failed to save"
        );
    })
    .await;
}
