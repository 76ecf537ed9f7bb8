// Generated code must not depend on names the user can shadow.
#![allow(dead_code)]

extern crate fluxio as renamed;

type Result<T> = std::result::Result<T, MyError>;
struct Option;
struct Vec;
struct Box;
mod core {}
mod std_like {}

#[derive(Debug)]
struct MyError;
impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}
impl std::error::Error for MyError {}

#[renamed::stage(crate = "renamed", name = "first", reads = ["a"], writes = ["b"], timeout = "5s")]
async fn first(ctx: renamed::Context) -> Result<renamed::Context> {
    Ok(ctx)
}

#[renamed::stage(crate = "renamed")]
fn second(ctx: renamed::Context) -> Result<renamed::Context> {
    Ok(ctx)
}

#[renamed::stage(crate = "renamed")]
async fn route(_ctx: renamed::Context) -> Result<renamed::Route> {
    Ok(renamed::Route::to("x"))
}

fn main() {
    let p = renamed::pipeline![crate = renamed; first, parallel![second], route => { "x" => [first, second] }];
    let p = p.build().expect("valid");
    assert_eq!(p.program().stage_names(), ["first", "second", "route"]);
    // the function is still a plain function
    let _ = second(renamed::Context::new());
}
