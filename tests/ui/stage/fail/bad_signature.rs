use fluxio::{stage, Context, StageResult};

#[stage]
async fn two_args(ctx: Context, extra: u8) -> StageResult {
    let _ = extra;
    Ok(ctx)
}

#[stage]
async fn no_args() -> StageResult {
    Ok(Context::new())
}

#[stage]
async fn no_return(ctx: Context) {
    let _ = ctx;
}

#[stage]
async fn generic<T>(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
fn sync_stream(ctx: Context, out: fluxio::Emitter) -> StageResult {
    let _ = out;
    Ok(ctx)
}

#[stage]
async fn three_args(ctx: Context, out: fluxio::Emitter, extra: u8) -> StageResult {
    let _ = (out, extra);
    Ok(ctx)
}

fn main() {}
