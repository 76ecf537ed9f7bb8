use fluxio::{pipeline, Context};

fn main() {
    let _ = pipeline![|ctx: Context| ctx];
    let _ = pipeline![async |ctx: Context| ctx];
    let _ = pipeline![move |ctx: Context| ctx];
}
