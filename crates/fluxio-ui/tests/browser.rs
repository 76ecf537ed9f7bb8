//! The console in a real browser (contract rule 38): headless Chromium,
//! driven through chromedriver (Debian's `chromium` and `chromium-driver`),
//! over a SQLite store seeded by real pipelines, with a recovery worker
//! running. An operator opens the runs page, filters the failed runs, opens
//! one, looks at the context before the step that failed, presses retry,
//! and sees the run complete. The test saves a screenshot of each page in
//! `target/tmp/fluxio-ui-screenshots/` (the README shows two of them).
//!
//! Without chromedriver and Chromium it skips loudly, and fails under `CI`.
//! `FLUXIO_CHROMEDRIVER` and `FLUXIO_CHROMIUM` name other binaries.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use fluxio::recovery::RecoveryWorker;
use fluxio::store::CheckpointStore;
use fluxio::{Context, Outcome, SqliteStore, StageResult, pipeline, stage};
use fluxio_test_support::{TempDir, skip_unless_ci};
use fluxio_ui::Console;

/// Whether the payment provider declines cards: the failure the operator
/// fixes before pressing retry.
static DECLINED: AtomicBool = AtomicBool::new(true);

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    let items: u32 = ctx.get("items")?;
    Ok(ctx.set("reserved", items)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    let amount: f64 = ctx.get("amount")?;
    if DECLINED.load(Ordering::SeqCst) && amount > 100.0 {
        return Err(format!("card declined for {amount:.2} EUR").into());
    }
    Ok(ctx.set("charged", amount)?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    Ok(ctx.set("tracking", "TRK-4411")?)
}

/// What the test needs outside Rust: the driver and the browser.
fn binaries() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| {
        let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
        path.is_file().then_some(path)
    };
    let driver = find("FLUXIO_CHROMEDRIVER", "/usr/bin/chromedriver");
    let browser = find("FLUXIO_CHROMIUM", "/usr/bin/chromium");
    match (driver, browser) {
        (Some(d), Some(b)) => Some((d, b)),
        (d, b) => skip_unless_ci(
            "chromedriver and chromium (Debian's chromium-driver and chromium)",
            &format_args!(
                "chromedriver {}, chromium {}",
                if d.is_some() { "found" } else { "missing" },
                if b.is_some() { "found" } else { "missing" }
            ),
        ),
    }
}

/// chromedriver on a free port, killed when dropped.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_driver(path: &Path) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child, port);
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < until,
            "chromedriver did not listen on {port} in 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

async fn browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,860",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.1))
        .await
        .expect("a browser session")
}

/// Saves the page as `name.png` in the screenshots' folder.
async fn screenshot(client: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fluxio-ui-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshots' folder");
    let png = client.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).expect("the screenshot saved");
    eprintln!("screenshot: {}", path.display());
}

/// The text of `css` once it satisfies `ok`, looked at again and again for
/// up to 30 s: the page may still be loading, or reloading itself (a
/// running run's page does every few seconds).
async fn text_when(client: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = match client.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.ok(),
            Err(_) => None,
        };
        match seen {
            Some(text) if ok(&text) => return text,
            seen => assert!(
                Instant::now() < until,
                "`{css}` did not come right in 30 s; last seen: {seen:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no `{css}` on the page: {e}"))
        .text()
        .await
        .expect("its text")
}

#[test]
fn rule38_an_operator_finds_a_failed_run_looks_at_it_retries_it_and_sees_it_complete() {
    let Some((chromedriver, chromium)) = binaries() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(scenario(&chromedriver, &chromium));
}

async fn scenario(chromedriver: &Path, chromium: &Path) {
    let dir = TempDir::new("ui_browser");
    let store: Arc<dyn CheckpointStore> = Arc::new(
        SqliteStore::connect(dir.db("console"))
            .await
            .expect("a SQLite store"),
    );
    let orders = pipeline![reserve, charge, ship]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let nightly = pipeline![reserve, sleep!("6h"), ship]
        .name("nightly")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    for (id, items, amount) in [
        ("o-1001", 2, 39.5),
        ("o-1002", 5, 412.0),
        ("o-1003", 1, 12.0),
        ("o-1004", 3, 74.9),
    ] {
        let ctx = Context::new()
            .set("items", items)
            .and_then(|c| c.set("amount", amount))
            .and_then(|c| c.set("customer", format!("customer-{id}")))
            .expect("set");
        let _ = orders.invoke(id, ctx).await;
    }
    let slept = nightly
        .invoke("n-7", Context::new().set("items", 9_u32).expect("set"))
        .await
        .expect("sleeps");
    assert!(matches!(slept, Outcome::Sleeping { .. }), "{slept:?}");
    let failed = store
        .load("orders/o-1002")
        .await
        .expect("loads")
        .expect("kept");
    assert_eq!(failed.status, fluxio::RunStatus::Failed);

    // the console, and a worker that resumes what is handed back
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr: SocketAddr = listener.local_addr().expect("an address");
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let worker = RecoveryWorker::builder()
        .pipeline(orders.clone())
        .interval(Duration::from_millis(200))
        .build()
        .expect("a worker")
        .spawn()
        .expect("spawned");

    let driver = start_driver(chromedriver);
    let profile = TempDir::new("ui_browser_profile");
    let client = browser(&driver, chromium, profile.path()).await;
    let base = format!("http://{addr}/");

    // the runs
    client.goto(&base).await.expect("the runs page");
    let all = text(&client, "table.runs").await;
    for id in ["o-1001", "o-1002", "n-7"] {
        assert!(all.contains(id), "{id} listed: {all}");
    }
    screenshot(&client, "runs").await;

    // the pipelines page: each pipeline's runs per state, a link to them
    client
        .find(Locator::LinkText("pipelines"))
        .await
        .expect("the pipelines link")
        .click()
        .await
        .expect("the pipelines page");
    let overview = text_when(&client, "table.pipelines", |t| t.contains("nightly")).await;
    assert!(overview.contains("orders"), "{overview}");
    screenshot(&client, "pipelines").await;
    client.goto(&base).await.expect("the runs page again");

    // filter the failed ones
    client
        .find(Locator::Css("select[name=state]"))
        .await
        .expect("the state filter")
        .select_by_value("failed")
        .await
        .expect("failed chosen");
    client
        .find(Locator::Css("form.filters button"))
        .await
        .expect("the filter button")
        .click()
        .await
        .expect("filtered");
    let failed = text_when(&client, "table.runs", |t| !t.contains("o-1001")).await;
    assert!(
        failed.contains("o-1002") && failed.contains("card declined"),
        "{failed}"
    );
    assert!(
        !failed.contains("o-1001") && !failed.contains("n-7"),
        "{failed}"
    );
    assert!(
        client
            .current_url()
            .await
            .expect("a URL")
            .as_str()
            .contains("state=failed")
    );

    // open it, and look at the context before the step that failed
    client
        .find(Locator::LinkText("o-1002"))
        .await
        .expect("the run's link")
        .click()
        .await
        .expect("opened");
    let summary = text_when(&client, "dl.summary", |t| t.contains("card declined")).await;
    assert!(
        summary.contains("card declined for 412.00 EUR"),
        "{summary}"
    );
    client
        .find(Locator::Css("table.history a[href='?step=1']"))
        .await
        .expect("the failed step's link")
        .click()
        .await
        .expect("the step");
    let heading = text_when(&client, "main h2:last-of-type", |t| t.contains("step 1")).await;
    assert!(
        heading.contains("context before step 1 (charge)"),
        "{heading}"
    );
    let context = text(&client, "table.context").await;
    assert!(
        context.contains("amount") && context.contains("412.0"),
        "{context}"
    );
    assert!(
        context.contains("reserved"),
        "reserve's write is there: {context}"
    );
    assert!(
        !context.contains("charged"),
        "charge never wrote: {context}"
    );
    screenshot(&client, "run").await;

    // the operator fixes the cause, then presses retry
    DECLINED.store(false, Ordering::SeqCst);
    client
        .find(Locator::Css("button[value=retry]"))
        .await
        .expect("the retry button")
        .click()
        .await
        .expect("retried");
    text_when(&client, "p.notice", |t| t.contains("Marked for retry")).await;

    // the worker resumes it: the page, reloading itself while the run
    // runs, shows it completed
    text_when(&client, "dl.summary", |t| t.contains("Completed")).await;
    text_when(&client, "table.history", |t| t.contains("ship")).await;
    text_when(&client, "main h2:last-of-type", |t| {
        t.contains("context at the end")
    })
    .await;
    screenshot(&client, "completed").await;
    let done = store
        .load("orders/o-1002")
        .await
        .expect("loads")
        .expect("kept");
    assert_eq!(done.status, fluxio::RunStatus::Completed);
    assert_eq!(
        done.context.get("charged").as_deref(),
        Some(&fluxio::Value::F64(412.0))
    );

    client.close().await.expect("the browser closed");
    drop(driver);
    let _ = worker.shutdown(Duration::from_secs(5)).await;
    server.abort();
}
