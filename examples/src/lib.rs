//! The example pipelines, shared by the runnable examples and by the pinned
//! version table (`pipeline-versions.txt`, checked by `cargo xtask codegen --check`
//! and by this package's tests).

pub mod checkout;
pub mod pricing;
pub mod two_process;

/// Every example pipeline, by name, built with its default options.
///
/// # Errors
/// A build error of one of them (none is expected).
pub fn pipelines() -> fluxio::Result<Vec<(&'static str, fluxio::Pipeline)>> {
    Ok(vec![
        ("checkout", checkout::pipeline().build()?),
        ("pricing", pricing::pipeline().build()?),
        ("two_process", two_process::demo_pipeline().build()?),
    ])
}

/// The lines of `pipeline-versions.txt` after its header: `<name> <version>`.
///
/// # Errors
/// A build error of one of the pipelines.
pub fn version_table() -> fluxio::Result<String> {
    let mut out = String::new();
    for (name, p) in pipelines()? {
        out.push_str(&format!("{name} {}\n", p.version()));
    }
    Ok(out)
}
