use fluxio::{pipeline, stage, Context, Emitter, Resource, StageResult};

struct Pool(u32);
struct Client;

#[stage]
async fn a(ctx: Context, pool: Resource<Pool>) -> StageResult {
    Ok(ctx.set("n", pool.0)?)
}

#[stage]
fn b(ctx: Context, _client: fluxio::Resource<Client>, pool: Resource<Pool>) -> StageResult {
    Ok(ctx.set("m", pool.0)?)
}

#[stage]
async fn r(_ctx: Context, _pool: Resource<Pool>) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x"))
}

#[stage]
async fn s(ctx: Context, out: Emitter, pool: Resource<Pool>) -> StageResult {
    out.emit(pool.0).await?;
    Ok(ctx)
}

#[stage]
async fn boxed_error_stage(ctx: Context) -> Result<Context, Box<dyn std::error::Error + Send + Sync>> {
    Ok(ctx)
}

fn main() {
    let p = pipeline![a, b, r => { "x" => s }, boxed_error_stage]
        .resource(Pool(1))
        .resource(Client)
        .build();
    assert!(p.is_ok());
}
