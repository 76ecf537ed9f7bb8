//! docs/CONTRACT.md rule 34 as a user meets it: a crate of its own that
//! depends on the facade, built three times. Editing a helper's comments and
//! layout keeps the pipeline's version; editing its code changes it.
//!
//! The crate is written under the target directory and built with
//! `--offline` against this workspace's `Cargo.lock`, in a target directory of
//! its own (so only the first run compiles the facade's dependencies).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this package is `tests/ui`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("tests/scratch-helpers")
}

/// `src/main.rs` of the scratch crate with `tax` written as given.
fn main_rs(tax: &str) -> String {
    format!(
        r#"use fluxio::{{Context, StageResult, helper, pipeline, stage}};

{tax}

#[stage(uses = [tax])]
async fn price(ctx: Context) -> StageResult {{
    let net: u64 = ctx.get("net")?;
    Ok(ctx.set("total", net + tax(net))?)
}}

fn main() {{
    let p = pipeline![price].name("priced").build().expect("builds");
    println!("{{}}", p.version());
}}
"#
    )
}

/// Builds and runs the scratch crate with `tax` as given; its version.
fn version_with(dir: &Path, tax: &str) -> String {
    std::fs::write(dir.join("src/main.rs"), main_rs(tax)).expect("write main.rs");
    let out = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--offline"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir().join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "the scratch crate builds and runs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    assert_eq!(version.len(), 12, "a version: {version:?}");
    version
}

#[test]
fn rule34_a_helper_edit_changes_the_version_a_comment_edit_does_not() {
    let root = workspace();
    let dir = target_dir().join("crate");
    std::fs::create_dir_all(dir.join("src")).expect("scratch dir");
    let fluxio = root.join("crates/fluxio");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"helper-scratch\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nfluxio = {{ path = {:?} }}\n\n[workspace]\n",
            fluxio.display().to_string()
        ),
    )
    .expect("write Cargo.toml");
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");

    let base = version_with(
        &dir,
        "#[helper]\nfn tax(cents: u64) -> u64 {\n    cents * 21 / 100\n}",
    );
    let comments = version_with(
        &dir,
        "/// VAT in cents.\n#[helper]\nfn tax(\n    cents: u64, // net\n) -> u64 {\n    // 21%, rounded down\n    cents * 21 / 100\n}",
    );
    let code = version_with(
        &dir,
        "#[helper]\nfn tax(cents: u64) -> u64 {\n    cents * 20 / 100\n}",
    );
    assert_eq!(
        base, comments,
        "a comment and layout edit keeps the version"
    );
    assert_ne!(base, code, "a code edit of the helper changes the version");
}
