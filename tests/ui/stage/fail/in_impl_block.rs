use fluxio::{Context, StageResult, stage};

struct Orders;

impl Orders {
    #[stage]
    async fn reserve(ctx: Context) -> StageResult {
        Ok(ctx)
    }

    #[stage]
    async fn charge(&self, ctx: Context) -> StageResult {
        Ok(ctx)
    }
}

fn main() {}
