//! Prints `<name> <version>` for every example pipeline; `cargo xtask codegen`
//! pins the output in `pipeline-versions.txt`.

fn main() -> anyhow::Result<()> {
    print!("{}", fluxio_examples::version_table()?);
    Ok(())
}
