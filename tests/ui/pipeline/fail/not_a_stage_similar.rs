use fluxio::{pipeline, stage, Context, StageResult};

// a stage with a similar name: rustc used to suggest its hidden struct
#[stage]
async fn charge(ctx: Context) -> StageResult {
    Ok(ctx)
}

async fn charges(ctx: Context) -> StageResult {
    Ok(ctx)
}

mod inner {
    pub async fn refund(ctx: fluxio::Context) -> fluxio::StageResult {
        Ok(ctx)
    }
}

fn main() {
    let _ = pipeline![charge, charges];
    let _ = pipeline![inner::refund];
}
