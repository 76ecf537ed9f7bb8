use fluxio::{Context, Route, StageResult, stage};

/// Not a stage: `compensate` names a function without `#[stage]`.
async fn refund(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage(compensate = refund)]
async fn charge(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn pick(_ctx: Context) -> Result<Route, fluxio::Error> {
    Ok(Route::to("a"))
}

/// A router cannot compensate.
#[stage(compensate = pick)]
async fn reserve(ctx: Context) -> StageResult {
    Ok(ctx)
}

/// `compensate` takes a stage's path, `pivot` is a flag.
#[stage(compensate = "refund", pivot = "yes")]
async fn hold(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {}
