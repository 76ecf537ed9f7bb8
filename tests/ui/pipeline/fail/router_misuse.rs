use fluxio::{pipeline, stage, Context, StageResult};

#[stage]
async fn not_a_router(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn router(_ctx: Context) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x"))
}

fn main() {
    let _ = pipeline![not_a_router => { "x" => not_a_router }];
    let _ = pipeline![router, not_a_router];
}
