// the same name twice, and in two pipelines: each error quotes the path as written
use fluxio::{pipeline, Context, StageResult};

async fn plain(ctx: Context) -> StageResult {
    Ok(ctx)
}

mod other {
    pub async fn plain(ctx: fluxio::Context) -> fluxio::StageResult {
        Ok(ctx)
    }
}

fn main() {
    let _ = pipeline![plain, parallel![plain, other::plain]];
    let _ = pipeline![plain];
}
