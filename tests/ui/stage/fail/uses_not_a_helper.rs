use fluxio::{Context, StageResult, helper, stage};

fn tax(cents: u64) -> u64 {
    cents / 5
}

#[helper]
fn rate() -> u64 {
    21
}

#[stage(uses = [tax, rate])]
async fn price(ctx: Context) -> StageResult {
    let net: u64 = ctx.get("net")?;
    Ok(ctx.set("total", net + tax(net) * rate())?)
}

fn main() {}
