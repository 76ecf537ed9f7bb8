use std::rc::Rc;

use fluxio::{stage, Context, Resource, StageResult};

struct Pool;

#[stage]
async fn by_value(ctx: Context, pool: Pool) -> StageResult {
    let _ = pool;
    Ok(ctx)
}

#[stage]
async fn by_reference(ctx: Context, pool: &'static Pool) -> StageResult {
    let _ = pool;
    Ok(ctx)
}

#[stage]
fn not_shareable(ctx: Context, pool: Resource<Rc<u8>>) -> StageResult {
    let _ = pool;
    Ok(ctx)
}

fn main() {}
