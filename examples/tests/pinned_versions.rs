//! The versions of the example pipelines are pinned in `pipeline-versions.txt`:
//! a change that would strand in-flight checkpoints must be a reviewed diff.

#[test]
fn pipeline_versions_match_the_pinned_table() {
    let pinned = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/pipeline-versions.txt"
    ))
    .expect("pipeline-versions.txt exists: run `cargo xtask codegen`");
    let pinned: String = pinned
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let current = fluxio_examples::version_table().expect("the example pipelines build");
    assert_eq!(
        current, pinned,
        "an example pipeline's version changed: run `cargo xtask codegen`, review and commit pipeline-versions.txt"
    );
}
