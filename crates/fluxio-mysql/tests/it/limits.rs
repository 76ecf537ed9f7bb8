//! A checkpoint larger than the server takes in one statement
//! (`max_allowed_packet`) is refused before it is sent, naming the run,
//! and the run's stored checkpoint stays (the server would otherwise drop
//! the connection, and the store would report a connection failure).

use fluxio::{Context, Error, StageResult, ctx, pipeline, stage};
use fluxio_core::CheckpointStore as _;
use fluxio_mysql::MySqlStore;
use fluxio_test_support as support;

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
    let Some(url) = support::mysql::server().await else {
        return;
    };
    let db = support::namespace("packet");
    let store = MySqlStore::builder(url.as_str())
        .database(&db)
        .connect()
        .await
        .expect("connect");
    let packet: u64 = sqlx::query_scalar("SELECT @@max_allowed_packet")
        .fetch_one(store.pool())
        .await
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
    let stored = store
        .load("limits/r1")
        .await
        .expect("load")
        .expect("the run's checkpoint before the huge one stays");
    assert_eq!(
        stored.step, "huge",
        "the run stops before the stage that failed to save"
    );
    drop(store);
    support::mysql::drop_database(&url, &db).await;
}
