use fluxio::{stage, Context, StageResult};

// A repeated option is an error, not "the last one wins".
#[stage(name = "first", name = "second")]
async fn twice(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {}
