//! Metrics: fluxio reports runs and checkpoint writes through the `metrics`
//! facade (the `metrics` feature), so the exporter a service installs
//! publishes them. Here, the Prometheus exporter renders them as text.
//!
//! ```text
//! cargo run --example metrics
//! ```

use fluxio::{Context, InMemoryStore, StageResult, pipeline, stage};
use metrics_exporter_prometheus::PrometheusBuilder;

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    let cents: u64 = ctx.get("cents")?;
    if cents > 10_000 {
        return Err(format!("{cents} cents is over the card's limit").into());
    }
    Ok(ctx.set("charged", cents)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // a service installs its exporter once, at start (an HTTP endpoint in production)
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let orders = pipeline![reserve, charge]
        .name("orders")
        .store(InMemoryStore::new())
        .build()?;
    for (i, cents) in [1_200u64, 4_990, 25_000, 700].into_iter().enumerate() {
        let input = Context::new().set("cents", cents)?;
        let outcome = orders.invoke(&format!("order-{i}"), input).await;
        println!(
            "order-{i}: {}",
            if outcome.is_ok() {
                "completed"
            } else {
                "failed"
            }
        );
    }

    let text = prometheus.render();
    println!("\nwhat /metrics would serve:\n");
    for line in text
        .lines()
        .filter(|l| l.starts_with("fluxio_") && !l.contains("quantile"))
    {
        println!("  {line}");
    }
    anyhow::ensure!(
        text.contains("fluxio_runs_completed_total{pipeline=\"orders\"} 3")
            && text.contains("fluxio_runs_failed_total{pipeline=\"orders\"} 1"),
        "the counters are not as expected:\n{text}"
    );
    Ok(())
}
