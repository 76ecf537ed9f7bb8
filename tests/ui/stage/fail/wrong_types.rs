use fluxio::{stage, BoxError, Context, StageResult};

#[stage]
async fn returns_a_number(_ctx: Context) -> Result<u32, BoxError> {
    Ok(1)
}

#[stage]
async fn takes_a_number(ctx: u32) -> StageResult {
    let _ = ctx;
    Ok(Context::new())
}

fn main() {}
