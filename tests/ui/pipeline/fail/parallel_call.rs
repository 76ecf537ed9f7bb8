use fluxio::{Context, StageResult, pipeline, stage};

#[stage]
async fn a(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn b(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {
    let _ = pipeline![parallel(a, b)];
    let _ = pipeline![a, fire_and_forget(b)];
}
