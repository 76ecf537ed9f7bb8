//! Output that reads one way only (contract rule 23): keys, run ids and
//! stage names escaped as values are, a history that tells a key written
//! from a key removed, and `show` of a run whose history cannot be read.

use std::sync::Arc;

use fluxio::{Context, Outcome, StageResult, pipeline, stage};
use serde_json::json;
use sqlx::Connection as _;

use crate::common::{input, orders, sqlite};

/// Writes the key `-coupon` and removes the key `coupon`.
#[stage]
async fn odd(ctx: Context) -> StageResult {
    Ok(ctx.set("-coupon", 5u64)?.remove("coupon"))
}

#[tokio::test(flavor = "multi_thread")]
async fn rule23_keys_and_ids_are_escaped_and_the_history_tells_written_from_removed() {
    let target = sqlite("rule23_escaped").await;
    let p = pipeline![odd]
        .name("orders")
        .store_arc(Arc::clone(&target.store))
        .build()
        .expect("a pipeline");
    let ctx = Context::new()
        .set("coupon", "SAVE5")
        .and_then(|c| c.set("a\nb", 1u64))
        .and_then(|c| c.set("a b", 2u64))
        .and_then(|c| c.set("", 3u64))
        .and_then(|c| c.set("\0", 4u64))
        .expect("input");
    // one run id disguised as another: a right-to-left override, a
    // zero-width space
    for id in ["r-1", "r\u{200b}-1", "evil\u{202e}gpj.exe"] {
        p.invoke(id, ctx.clone())
            .await
            .and_then(Outcome::completed)
            .expect("completes");
    }
    let run = |args: &[&str]| target.run(args, None);

    let shown = run(&["runs", "show", "orders/r-1"]).code(0);
    shown.shows(&[r#""a\nb""#, r#""a b""#, r#""\0""#, "\n  \"\"  "]);
    let tokens: Vec<&str> = shown.stdout.split_whitespace().collect();
    assert!(
        tokens.contains(&"+-coupon"),
        "wrote `-coupon`: {}",
        shown.all()
    );
    assert!(
        tokens.contains(&"-coupon"),
        "removed `coupon`: {}",
        shown.all()
    );

    let listed = run(&["runs", "list"]).code(0);
    listed.shows(&[
        "orders/r-1 ",
        r#""orders/r\u{200b}-1""#,
        r#""orders/evil\u{202e}gpj.exe""#,
    ]);
    let evil = run(&["runs", "show", "orders/evil\u{202e}gpj.exe"]).code(0);
    for out in [&listed.stdout, &evil.stdout] {
        assert!(
            !out.contains(['\u{202e}', '\u{200b}']),
            "an invisible character was printed: {out:?}"
        );
    }
    let missing = run(&["runs", "show", "orders/nope\u{202e}"]).code(1);
    assert!(
        missing.stderr.contains(r"nope\u{202e}"),
        "{}",
        missing.all()
    );
    // JSON keeps the text as it is (its own escaping is unambiguous)
    let json = run(&["runs", "list", "--json"]).code(0).json();
    assert_eq!(
        json["runs"][0]["key"],
        json!("orders/evil\u{202e}gpj.exe"),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rule23_show_of_a_run_with_a_corrupted_history_row_shows_what_list_knows() {
    let target = sqlite("rule23_corrupt").await;
    let p = orders(&target.store, "orders");
    p.invoke("bad-1", input(true)).await.expect_err("declined");
    let file = target.args[1].trim_start_matches("sqlite://").to_owned();
    let mut conn = fluxio_test_support::sqlite::raw_connection(std::path::Path::new(&file)).await;
    sqlx::query(
        "UPDATE cli_runs_steps SET payload = x'00ff00ff' \
         WHERE run_id = 'orders/bad-1' AND seq = (SELECT min(seq) FROM cli_runs_steps)",
    )
    .execute(&mut conn)
    .await
    .expect("corrupt one row");
    conn.close().await.expect("close");
    let run = |args: &[&str]| target.run(args, None);
    let shown = run(&["runs", "show", "orders/bad-1"]).code(1);
    shown.shows(&[
        "failed",
        "charge (attempt 1)",
        "card declined",
        "cannot be read",
    ]);
    assert!(shown.stderr.contains("orders/bad-1"), "{}", shown.all());
    let shown = run(&["runs", "show", "orders/bad-1", "--json"]).code(1);
    let doc = shown.json();
    assert_eq!(doc["state"], json!("Failed"), "{doc}");
    assert_eq!(doc["step"], json!("charge"), "{doc}");
    assert!(doc["unreadable"].is_string(), "{doc}");
}
