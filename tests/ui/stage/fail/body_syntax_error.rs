// A syntax error in a stage's body is rustc's own error, in the body, and
// nothing else: not at `#[stage]`, not where the stage is named.
use fluxio::{pipeline, stage, Context, StageResult};

#[stage]
async fn broken(ctx: Context) -> StageResult {
    let n: u32 = ;
    Ok(ctx.set("n", n)?)
}

fn main() {
    let _ = pipeline![broken];
}
