//! A saga (contract rule 35): book a flight, a hotel and a car; the car
//! cannot be booked, so the hotel and the flight are cancelled.
//!
//! Each booking names the stage that undoes it
//! (`#[stage(compensate = cancel_hotel)]`). When the car rental refuses for
//! good (a `TerminalError`: no retry would help), the run undoes what it
//! completed, last first: each cancel is a durable step with its own
//! idempotency key and the context its booking produced, so a crash in the
//! middle of it goes on where it stopped and never cancels a booking twice.
//!
//! A second trip shows the operator's side: the hotel's cancel fails (its
//! API is down), the run is left needing attention at it, and an operator's
//! retry goes on with the hotel and then the flight. The example checks
//! each claim and exits with an error if one fails.
//!
//! ```text
//! cargo run --example saga
//! ```

use std::sync::Mutex;

use anyhow::{Context as _, bail, ensure};
use fluxio::store::retry_run;
use fluxio::{
    Context, Error, Pipeline, RunStatus, SqliteStore, StageInfo, StageResult, TerminalError,
    pipeline, stage,
};

/// The bookings the "suppliers" hold: what a compensator must undo.
static BOOKED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The cancels the hotel's API refuses before it answers (trip 2).
static HOTEL_DOWN: Mutex<u32> = Mutex::new(0);

fn booked() -> std::sync::MutexGuard<'static, Vec<String>> {
    BOOKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn key() -> String {
    StageInfo::current().map_or_else(String::new, |i| i.idempotency_key())
}

#[stage(compensate = cancel_flight)]
async fn book_flight(ctx: Context) -> StageResult {
    let trip: String = ctx.get("trip")?;
    let booking = format!("{trip}: flight LH-400");
    println!("    booked {booking} (key {})", key());
    booked().push(booking.clone());
    Ok(ctx.set("flight", booking)?)
}

#[stage]
async fn cancel_flight(ctx: Context) -> StageResult {
    let booking: String = ctx.get("flight")?;
    println!("    cancelled {booking} (key {})", key());
    booked().retain(|b| *b != booking);
    Ok(ctx)
}

#[stage(compensate = cancel_hotel)]
async fn book_hotel(ctx: Context) -> StageResult {
    let trip: String = ctx.get("trip")?;
    let booking = format!("{trip}: hotel Adlon");
    println!("    booked {booking} (key {})", key());
    booked().push(booking.clone());
    Ok(ctx.set("hotel", booking)?)
}

#[stage]
async fn cancel_hotel(ctx: Context) -> StageResult {
    let booking: String = ctx.get("hotel")?;
    {
        let mut down = HOTEL_DOWN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *down > 0 {
            *down -= 1;
            println!("    the hotel's API is down: {booking} is not cancelled yet");
            return Err("the hotel's API answered 503".into());
        }
    }
    println!("    cancelled {booking} (key {})", key());
    booked().retain(|b| *b != booking);
    Ok(ctx)
}

#[derive(Debug, thiserror::Error)]
#[error("no car is free in {0}")]
struct NoCar(String);

#[stage]
async fn book_car(ctx: Context) -> StageResult {
    let city: String = ctx.get("city")?;
    println!("    the car rental has no car in {city}");
    Err(TerminalError::new(NoCar(city)).into())
}

#[stage]
async fn confirm(ctx: Context) -> StageResult {
    Ok(ctx.set("confirmed", true)?)
}

fn trip(id: &str) -> anyhow::Result<Context> {
    Ok(Context::new().set("trip", id)?.set("city", "Berlin")?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("fluxio-saga-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::connect(dir.join("trips.db")).await?;
    let p: Pipeline = pipeline![book_flight, book_hotel, book_car, confirm]
        .name("trips")
        .store(store)
        .build()?;

    println!("trip-1: the car cannot be booked");
    let err = p
        .invoke("trip-1", trip("trip-1")?)
        .await
        .err()
        .context("trip-1 fails")?;
    println!("  -> {err}");
    ensure!(
        err.stage_error::<NoCar>().is_some(),
        "the caller sees the rental's error"
    );
    ensure!(
        booked().is_empty(),
        "the hotel and flight are cancelled: {:?}",
        booked()
    );
    let history = p.history("trip-1").await?;
    println!("{history}");
    let cp = p.checkpoint("trip-1").await?.context("kept")?;
    ensure!(cp.is_failed_for_good(), "trip-1 failed for good");
    // a client's retry of the request runs nothing again
    match p.start("trip-1", trip("trip-1")?).await {
        Err(Error::FailedForGood { .. }) => {
            println!("  a retried request: failed for good, nothing ran")
        }
        other => bail!("a retried request should be refused, got {other:?}"),
    }

    println!("\ntrip-2: the car cannot be booked, and the hotel's API is down");
    *HOTEL_DOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = 1;
    match p.invoke("trip-2", trip("trip-2")?).await {
        Err(Error::CompensationFailed { compensator, .. }) if compensator == "cancel_hotel" => {}
        other => bail!("cancel_hotel should fail, got {other:?}"),
    }
    let cp = p.checkpoint("trip-2").await?.context("kept")?;
    ensure!(
        cp.status == RunStatus::NeedsAttention,
        "trip-2 needs attention"
    );
    println!(
        "  -> needs attention: {}",
        cp.error_message.unwrap_or_default()
    );
    ensure!(booked().len() == 2, "nothing of trip-2 is cancelled yet");
    println!("  the operator retries it once the hotel's API is back");
    retry_run(p.store().context("durable")?.as_ref(), "trips/trip-2").await?;
    let again = p.resume("trip-2").await;
    ensure!(
        matches!(again, Err(Error::FailedForGood { .. })),
        "trip-2 ends failed for good: {again:?}"
    );
    ensure!(
        booked().is_empty(),
        "trip-2's hotel and flight are cancelled: {:?}",
        booked()
    );
    println!("{}", p.history("trip-2").await?);
    std::fs::remove_dir_all(&dir)?;
    println!("every booking was undone");
    Ok(())
}
