//! `fluxio ui` (contract rule 38): the console served over a store the
//! test seeded, read over a plain HTTP/1.1 connection.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;

use fluxio::{Context, StageResult, pipeline, stage};

use crate::common::sqlite;

#[stage]
async fn greet(ctx: Context) -> StageResult {
    Ok(ctx.set("greeting", "hello")?)
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
    let args = t.with(&["ui", "--bind", "127.0.0.1:0"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fluxio"))
        .args(&args)
        .env_remove("FLUXIO_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fluxio ui starts");
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
    let (status, body) = get(&addr, "/");
    let (run_status, run) = get(&addr, "/runs/greetings/g-1");
    let _ = child.kill();
    let _ = child.wait();
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
