use fluxio::{stage, Context, Emitter, Resource, StageResult};

#[stage]
async fn borrowed(ctx: &Context) -> StageResult {
    Ok(ctx.clone())
}

#[stage]
fn borrowed_mut(ctx: &mut Context) -> StageResult {
    Ok(ctx.clone())
}

#[stage]
async fn emitter_first(out: Emitter, ctx: Context) -> StageResult {
    let _ = out;
    Ok(ctx)
}

#[stage]
async fn emitter_last(ctx: Context, db: Resource<String>, out: Emitter) -> StageResult {
    let _ = (db, out);
    Ok(ctx)
}

fn main() {}
