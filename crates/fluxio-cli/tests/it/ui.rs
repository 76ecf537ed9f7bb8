//! `fluxio ui` (contract rule 38): the console served over a store the
//! test seeded, read over a plain HTTP/1.1 connection.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use fluxio::{Context, StageResult, pipeline, stage};

use crate::common::sqlite;

#[stage]
async fn greet(ctx: Context) -> StageResult {
    Ok(ctx.set("greeting", "hello")?)
}

#[stage]
async fn grumble(_ctx: Context) -> StageResult {
    Err("not today".into())
}

/// `POST path` to `addr` with a form body and the token as a bearer: the
/// status line.
fn post_bearer(addr: &str, path: &str, form: &str, token: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("the console listens");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    )
    .expect("a request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("an answer");
    text.lines().next().unwrap_or_default().to_owned()
}

/// `GET path` from `addr`: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("the console listens");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("a request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("an answer");
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `fluxio ARGS` started, with `FLUXIO_UI_TOKEN` set to `token`: the
/// process, its first line, and the address it serves on.
fn serve(args: &[String], token: Option<&str>) -> (Child, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fluxio"));
    command
        .args(args)
        .env_remove("FLUXIO_STORE")
        .env_remove("FLUXIO_UI_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("FLUXIO_UI_TOKEN", token);
    }
    let mut child = command.spawn().expect("fluxio ui starts");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a first line");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    (child, first, addr)
}

/// What the process wrote to standard error, once it is stopped.
fn stop(mut child: Child) -> String {
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    err
}

#[tokio::test]
async fn rule38_fluxio_ui_serves_the_console_over_the_store() {
    let t = sqlite("cli_ui").await;
    let p = pipeline![greet]
        .name("greetings")
        .store_arc(Arc::clone(&t.store))
        .build()
        .expect("a valid pipeline");
    let done = p.invoke("g-1", Context::new()).await.expect("runs");
    assert!(done.is_completed());
    let (child, first, addr) = serve(&t.with(&["ui", "--bind", "127.0.0.1:0"]), None);
    assert!(first.contains("read-only"), "{first}");
    let (status, body) = get(&addr, "/");
    let (run_status, run) = get(&addr, "/runs/greetings/g-1");
    stop(child);
    assert!(status.contains("200"), "{status}");
    assert!(body.contains(">g-1<"), "{body}");
    assert!(run_status.contains("200"), "{run_status}");
    assert!(run.contains("greeting") && run.contains("hello"), "{run}");
}

#[test]
fn rule38_fluxio_ui_refuses_an_address_it_cannot_listen_on() {
    let ran = crate::common::fluxio(
        &[
            "--store",
            "sqlite:///no/such/file.db",
            "ui",
            "--bind",
            "nowhere",
        ],
        None,
    );
    assert_eq!(ran.code, 2, "{}", ran.all());
    assert!(ran.stderr.contains("--bind"), "{}", ran.all());
}

#[tokio::test]
async fn rule38_fluxio_ui_allows_actions_only_when_asked_and_never_shows_its_token() {
    const TOKEN: &str = "cli-test-token-7d1f";
    let t = sqlite("cli_ui_actions").await;
    // anywhere but loopback without a token: a warning that anyone may act
    let (child, first, addr) = serve(
        &t.with(&["ui", "--bind", "0.0.0.0:0", "--allow-actions"]),
        None,
    );
    let port = addr.rsplit(':').next().expect("a port").to_owned();
    let (_, login) = get(&format!("127.0.0.1:{port}"), "/login");
    let err = stop(child);
    assert!(first.contains("actions allowed"), "{first}");
    assert!(
        err.contains("warning") && err.contains("may act on it"),
        "{err}"
    );
    assert!(!login.contains("password"), "no token, no sign-in: {login}");
    // the token from the environment: a sign-in page, the token nowhere,
    // and an action that writes to the store
    let p = pipeline![grumble]
        .name("moody")
        .store_arc(Arc::clone(&t.store))
        .build()
        .expect("a valid pipeline");
    p.invoke("m-1", Context::new()).await.expect_err("fails");
    let (child, first, addr) = serve(
        &t.with(&["ui", "--bind", "127.0.0.1:0", "--allow-actions"]),
        Some(TOKEN),
    );
    let (status, login) = get(&addr, "/login");
    let retried = post_bearer(&addr, "/runs/moody/m-1", "action=retry", TOKEN);
    let refused = post_bearer(&addr, "/runs/moody/m-1", "action=cancel", "guess");
    let err = stop(child);
    assert!(retried.contains("303"), "{retried}");
    assert!(refused.contains("403"), "{refused}");
    let latest = t
        .store
        .load("moody/m-1")
        .await
        .expect("loads")
        .expect("kept");
    assert_eq!(
        latest.status,
        fluxio::RunStatus::Running,
        "retried, not cancelled"
    );
    assert!(first.contains("signs in with the token"), "{first}");
    assert!(
        status.contains("200") && login.contains("type=\"password\""),
        "{status} {login}"
    );
    for text in [&first, &err, &login] {
        assert!(!text.contains(TOKEN), "{text}");
    }
    // an empty token is refused before anything listens
    let ran = crate::common::fluxio(
        &t.with(&[
            "ui",
            "--bind",
            "127.0.0.1:0",
            "--allow-actions",
            "--token",
            "",
        ])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
        None,
    );
    assert_eq!(ran.code, 2, "{}", ran.all());
    assert!(ran.stderr.contains("token"), "{}", ran.all());
}
