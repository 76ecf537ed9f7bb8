use fluxio::{Context, StageResult, stage};

#[stage(reads = [42], writes = [total()])]
fn numbers(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn main() {}
