//! Exit codes a script can rely on: usage (2), a bad or unreachable store
//! (3), each with one line on standard error that never shows a password.

use crate::common::{fluxio, fluxio_with};

#[test]
fn rule23_a_bad_or_unreachable_store_exits_3_without_its_password() {
    let secret = "hunter2-rule23";
    let missing_file = std::env::temp_dir().join("fluxio-cli-no-such-dir/runs.db");
    let cases = [
        format!("ftp://admin:{secret}@127.0.0.1/runs"),
        format!("mysql://root:{secret}@127.0.0.1/db"),
        format!("sqlite://{}", missing_file.display()),
        "sqlite:".to_owned(),
        // nothing listens on port 1
        format!("redis://:{secret}@127.0.0.1:1/0"),
        format!("postgres://postgres:{secret}@127.0.0.1:1/test"),
        format!("postgres//:{secret}@127.0.0.1:5432"),
    ];
    for url in &cases {
        let ran = fluxio(
            &["--store", url, "--timeout", "3s", "runs", "list"],
            Some(secret),
        )
        .code(3);
        assert_eq!(ran.stderr.lines().count(), 1, "{url}: {}", ran.all());
        assert!(ran.stderr.starts_with("fluxio: "), "{url}: {}", ran.all());
        assert!(ran.stdout.is_empty(), "{url}: {}", ran.all());
    }
}

#[tokio::test]
async fn rule23_a_redis_password_the_server_refuses_is_never_printed() {
    if fluxio_test_support::redis::raw().await.is_none() {
        return;
    }
    let url = fluxio_test_support::redis::url();
    let Some(rest) = url.strip_prefix("redis://") else {
        return;
    };
    let secret = "hunter2-rule23-redis";
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let url = format!("redis://nobody:{secret}@{host}");
    let ran = fluxio(&["--store", &url, "runs", "show", "a/b"], Some(secret)).code(3);
    assert!(ran.stderr.contains("nobody:***@"), "{}", ran.all());
}

#[test]
fn rule23_bad_arguments_exit_2() {
    let cases: [&[&str]; 6] = [
        &["runs", "show"],
        &["runs", "list", "--status", "resting"],
        &["runs", "list", "--limit", "0"],
        &["runs", "purge", "--status", "completed"],
        &[
            "runs",
            "purge",
            "--status",
            "completed",
            "--older-than",
            "soon",
        ],
        &["runs", "frobnicate"],
    ];
    for args in cases {
        let mut all = vec!["--store", "sqlite:unused.db"];
        all.extend_from_slice(args);
        let ran = fluxio(&all, None).code(2);
        assert!(
            ran.stderr.contains("try '--help'"),
            "{args:?}: {}",
            ran.all()
        );
    }
    let bad = fluxio(
        &[
            "--store",
            "sqlite:x.db",
            "runs",
            "list",
            "--status",
            "resting",
        ],
        None,
    );
    assert!(
        bad.stderr.contains("`resting` is not a run state"),
        "{}",
        bad.all()
    );
    let no_store = fluxio(&["runs", "list"], None).code(2).stderr.clone();
    assert!(no_store.contains("FLUXIO_STORE"), "{no_store}");
}

/// An empty `FLUXIO_STORE` (or `--store ""`) names no store: the same
/// usage error as none.
#[test]
fn rule23_an_empty_store_url_is_no_store() {
    for env in [[("FLUXIO_STORE", "")], [("FLUXIO_STORE", "  ")]] {
        let ran = fluxio_with(&["runs", "list"], None, &env).code(2);
        assert!(
            ran.stderr.starts_with("fluxio: no store: pass --store URL"),
            "{}",
            ran.all()
        );
    }
    let ran = fluxio(&["--store", "", "runs", "list"], None).code(2);
    assert!(ran.stderr.starts_with("fluxio: no store"), "{}", ran.all());
}

/// A Redis URL on a port where another server answers: one line naming the
/// URL with its password masked.
#[test]
fn rule23_a_redis_url_at_another_server_is_one_line_naming_it() {
    let secret = "hunter2-rule23-port";
    // PostgreSQL's and MariaDB's ports: not Redis
    for port in [5432, 3306] {
        let url = format!("redis://:{secret}@127.0.0.1:{port}/0");
        let ran = fluxio(
            &["--store", &url, "--timeout", "3s", "runs", "list"],
            Some(secret),
        )
        .code(3);
        assert!(
            ran.stderr
                .contains(&format!("redis://:***@127.0.0.1:{port}/0")),
            "{}",
            ran.all()
        );
    }
}

/// A `--timeout` PostgreSQL cannot take is refused before connecting, as
/// an invalid setting naming `timeout` (nothing listens on port 1: a
/// connection would exit 3).
#[test]
fn rule23_a_timeout_postgres_cannot_take_is_refused_before_connecting() {
    let ran = fluxio(
        &[
            "--store",
            "postgres://someone@127.0.0.1:1/db",
            "--timeout",
            "30d",
            "runs",
            "list",
        ],
        None,
    )
    .code(2);
    assert!(
        ran.stderr.contains("invalid setting `timeout`"),
        "{}",
        ran.all()
    );
    assert!(ran.stderr.contains("30days"), "{}", ran.all());
    // the longest it takes is still taken (and then cannot connect)
    fluxio(
        &[
            "--store",
            "postgres://someone@127.0.0.1:1/db",
            "--timeout",
            "24d",
            "runs",
            "list",
        ],
        None,
    )
    .code(3);
}

#[test]
fn rule23_help_documents_the_commands_and_exit_codes() {
    let help = fluxio(&["--help"], None).code(0);
    for want in [
        "runs",
        "--store",
        "FLUXIO_STORE",
        "Exit codes",
        "0  done",
        "3  the store",
    ] {
        assert!(help.stdout.contains(want), "{want} missing: {}", help.all());
    }
    let runs = fluxio(&["runs", "--help"], None).code(0);
    for command in ["list", "show", "diff", "retry", "cancel", "delete", "purge"] {
        assert!(runs.stdout.contains(command), "{command}: {}", runs.all());
    }
    let version = fluxio(&["--version"], None).code(0);
    assert!(version.stdout.starts_with("fluxio "), "{}", version.all());
}

/// The store's URL from the environment is used, and `--help` never shows
/// its value (it may hold a password).
#[test]
fn rule23_the_environment_names_the_store_and_help_hides_it() {
    let secret = "hunter2-rule23-env";
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fluxio"))
        .args(["runs", "list", "--help"])
        .env(
            "FLUXIO_STORE",
            format!("postgres://u:{secret}@127.0.0.1:1/db"),
        )
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FLUXIO_STORE"), "{text}");
    assert!(!text.contains(secret), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fluxio"))
        .args(["runs", "list"])
        .env("FLUXIO_STORE", format!("ftp://u:{secret}@h"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ftp://u:***@h"), "{err}");
    assert!(!err.contains(secret), "{err}");
}

/// On a terminal (`script` gives the command one) a state is coloured,
/// unless `NO_COLOR` is set or `TERM` is `dumb`; through a pipe never
/// (every other test).
#[tokio::test(flavor = "multi_thread")]
async fn rule23_colour_only_on_a_terminal_and_never_with_no_color_or_a_dumb_terminal() {
    let script = std::path::Path::new("/usr/bin/script");
    if !script.exists() {
        fluxio_test_support::skip(
            &"no /usr/bin/script (util-linux) to give the command a terminal",
        );
        return;
    }
    let target = crate::common::sqlite("rule23_colour").await;
    let p = crate::common::orders(&target.store, "orders");
    p.invoke("r-1", crate::common::input(true))
        .await
        .expect_err("declined");
    let mut command = vec![env!("CARGO_BIN_EXE_fluxio").to_owned()];
    command.extend(target.with(&["runs", "show", "orders/r-1"]));
    let line = command.join(" ");
    let on_terminal = |env: &[(&str, &str)]| {
        let mut script = std::process::Command::new(script);
        script
            .args(["-qec", &line, "/dev/null"])
            .env_remove("NO_COLOR")
            .env("TERM", "xterm")
            .envs(env.iter().copied());
        let out = script.output().expect("script runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = on_terminal(&[]);
    assert!(coloured.contains("\x1b[31mfailed\x1b[0m"), "{coloured:?}");
    for env in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let plain = on_terminal(&[env]);
        assert!(
            plain.contains("failed") && !plain.contains('\x1b'),
            "{env:?}: {plain:?}"
        );
    }
}
