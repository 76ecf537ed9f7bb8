use fluxio::helper;

#[helper(uses = [ping])]
fn pong() -> u64 {
    1
}

#[helper(uses = [pong])]
fn ping() -> u64 {
    2
}

fn main() {
    let _ = (ping(), pong());
}
