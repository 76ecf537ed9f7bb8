use fluxio::{pipeline, stage, Context, StageResult};

#[stage]
async fn a(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
fn b(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn r(_ctx: Context) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x"))
}

mod nested {
    use fluxio::{stage, Context, StageResult};

    #[stage]
    pub async fn c(ctx: Context) -> StageResult {
        Ok(ctx)
    }
}

fn main() {
    let _ = pipeline![a];
    let _ = pipeline![a, b,];
    let _ = pipeline![a, parallel![b, [a, b], parallel![a, b]], fire_and_forget![nested::c]];
    let _ = pipeline![r => { "x" => a, "y" => [a, b], "z" => pipeline![b, r => { "x" => a }] }, nested::c];
    let _ = pipeline![parallel![r => { "x" => a }, b]];
    // an empty pipeline returns its input unchanged
    let _ = pipeline![];
}
