use fluxio::{Context, Key, StageResult, stage};

const ORDER_ID: Key<u64> = Key::new("order_id");

#[stage(reads = [ORDR_ID])]
fn typo(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
fn wrong_type(ctx: Context) -> StageResult {
    let id: String = ctx.get(ORDER_ID)?;
    Ok(ctx.set(ORDER_ID, id)?)
}

fn main() {}
