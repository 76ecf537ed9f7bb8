//! Compile-time diagnostics of `#[stage]` and `pipeline!` (trybuild).
//!
//! The `.stderr` snapshots are compiler-version specific: they were recorded
//! with the toolchain named in `tests/ui/TOOLCHAIN`. On another toolchain
//! the test says `SKIPPED` and passes, so `cargo test` stays green for a
//! user on another stable; with `CI` set it fails instead, so CI never skips
//! it silently. After an intended change of a message, regenerate the
//! snapshots with `TRYBUILD=overwrite cargo test -p fluxio-ui-tests` and
//! review the diff (update `TOOLCHAIN` when re-recording on a new compiler).
//!
//! This is a package of its own so that trybuild builds only the facade
//! (no store backend, no sqlx or redis): it compiles every file below
//! against this package's dependencies.

use std::io::Write as _;
use std::process::Command;

/// `rustc 1.95.0`-style name of the toolchain that runs the tests.
fn toolchain() -> Option<String> {
    let out = Command::new("rustc").arg("--version").output().ok()?;
    let version = String::from_utf8(out.stdout).ok()?;
    let mut words = version.split_whitespace();
    Some(format!("{} {}", words.next()?, words.next()?))
}

#[test]
fn ui() {
    let recorded = include_str!("../TOOLCHAIN").trim();
    let running = toolchain().unwrap_or_else(|| "an unknown toolchain".to_owned());
    if running != recorded {
        assert!(
            std::env::var_os("CI").is_none(),
            "the UI snapshots were recorded with {recorded}, CI runs {running}: \
             re-record them (TRYBUILD=overwrite) and update tests/ui/TOOLCHAIN"
        );
        // straight to the process's stderr: the test harness captures
        // `eprintln!` of a passing test, and a skip must be seen
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: the UI snapshots were recorded with {recorded}; this is {running}"
        );
        return;
    }
    let t = trybuild::TestCases::new();
    t.pass("stage/pass/*.rs");
    t.compile_fail("stage/fail/*.rs");
    t.pass("pipeline/pass/*.rs");
    t.compile_fail("pipeline/fail/*.rs");
}
