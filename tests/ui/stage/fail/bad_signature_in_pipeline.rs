// A stage with a bad signature is still a stage to `pipeline!`: one error,
// at the signature, none where the stage is named (in a sequence or as a
// router).
use fluxio::{pipeline, stage, Context, StageResult};

#[stage]
async fn by_ref(ctx: &Context) -> StageResult {
    Ok(ctx.clone())
}

fn main() {
    let _ = pipeline![by_ref, by_ref => { "x" => by_ref }];
}
