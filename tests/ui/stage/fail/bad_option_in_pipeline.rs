// A stage with a bad option is still a stage to `pipeline!`: one error, at
// the option, none where the stage is named (even with a renamed crate, and
// as a router).
extern crate fluxio as renamed;

use fluxio::{pipeline, stage, Context, StageResult};

#[stage(nme = "x")]
async fn misspelt(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[renamed::stage(crate = "renamed", timeout = "soon")]
async fn route(_ctx: Context) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x"))
}

fn main() {
    let _ = pipeline![misspelt, route => { "x" => misspelt }];
    let _ = renamed::pipeline![crate = renamed; route => { "x" => misspelt }];
}
