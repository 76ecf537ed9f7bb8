use fluxio::{stage, Context, StageResult};

#[stage(nme = "x", timeout = "soon")]
async fn a(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {}
