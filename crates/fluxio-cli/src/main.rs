//! The `fluxio` binary: see the `fluxio_cli` crate docs.

fn main() -> std::process::ExitCode {
    fluxio_cli::run(std::env::args_os()).into()
}
