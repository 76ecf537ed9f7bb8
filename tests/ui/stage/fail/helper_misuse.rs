use fluxio::{Context, StageResult, helper, stage};

struct Prices;

impl Prices {
    #[helper]
    fn tax(&self, cents: u64) -> u64 {
        cents / 5
    }
}

#[helper(uses = rate, cache = true)]
fn vat(cents: u64) -> u64 {
    cents / 5
}

#[stage(uses = [vat()])]
async fn call(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {
    let _ = (Prices.tax(1), vat(1));
}
