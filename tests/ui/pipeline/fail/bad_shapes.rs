use fluxio::{pipeline, stage, Context, StageResult};

#[stage]
async fn a(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn r(_ctx: Context) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x"))
}

fn main() {
    let _ = pipeline![r => { "x" => [] }];
    let _ = pipeline![parallel![a, a] => { "x" => a }];
    let _ = pipeline![r => { "x" => a, "x" => a }];
    let _ = pipeline![a()];
    let _ = pipeline![a, 42];
}
