use fluxio::{pipeline, Context, StageResult};

async fn plain(ctx: Context) -> StageResult {
    Ok(ctx)
}

struct NotAStage;

fn main() {
    let _ = pipeline![plain];
    let _ = pipeline![NotAStage];
}
