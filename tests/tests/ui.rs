//! Compile-time diagnostics of `#[stage]` and `pipeline!` (trybuild).
//!
//! The `.stderr` snapshots are compiler-version specific: they are checked on
//! the stable toolchain this repository pins in CI. After an intended change
//! of a message, regenerate them with `TRYBUILD=overwrite cargo test -p
//! fluxio-tests --test ui` and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/stage/pass/*.rs");
    t.compile_fail("ui/stage/fail/*.rs");
    t.pass("ui/pipeline/pass/*.rs");
    t.compile_fail("ui/pipeline/fail/*.rs");
}
