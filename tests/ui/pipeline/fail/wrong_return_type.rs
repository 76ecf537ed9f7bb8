// a stage whose return type is wrong: one error, at the stage, none at the
// pipeline that names it
use fluxio::{pipeline, stage, BoxError, Context, StageResult};

#[stage]
async fn returns_a_number(_ctx: Context) -> Result<u32, BoxError> {
    Ok(1)
}

#[stage]
async fn ok(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {
    let _ = pipeline![ok, returns_a_number];
    let _ = pipeline![returns_a_number => { "x" => ok }];
}
