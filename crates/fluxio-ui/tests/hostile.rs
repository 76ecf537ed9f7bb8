//! The console under hostile input (contract rule 38): many runs, a huge
//! value, a store that goes away while a page loads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use fluxio::store::{CheckpointStore, InMemoryStore, RunFilter, RunPage};
use fluxio::{Checkpoint, Context};
use fluxio_ui::Console;

mod support;

async fn get(store: &Arc<dyn CheckpointStore>, uri: &str) -> (StatusCode, String) {
    let reply = support::get(&Console::new(Arc::clone(store)).router(), uri, None).await;
    (reply.status, reply.body)
}

/// The run ids a runs page lists, and its next page's link.
fn listed(page: &str) -> (Vec<String>, Option<String>) {
    let ids = page
        .split("href=\"runs/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    let next = page
        .split("class=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"));
    (ids, next)
}

#[tokio::test]
async fn rule38_ten_thousand_runs_are_paged_fifty_at_a_time_each_once() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    for i in 0..10_000 {
        let cp = Checkpoint::new(
            format!("r-{i:05}"),
            "v1",
            0,
            "take",
            Context::new().snapshot(),
        )
        .in_pipeline("bulk");
        store.save(cp).await.expect("saved");
    }
    let mut seen = Vec::new();
    let mut uri = "/?pipeline=bulk".to_owned();
    loop {
        let (status, page) = get(&store, &uri).await;
        assert_eq!(status, StatusCode::OK);
        let (ids, next) = listed(&page);
        assert!(ids.len() <= 50, "{} on one page", ids.len());
        seen.extend(ids);
        match next {
            Some(next) => uri = format!("/{next}"),
            None => break,
        }
    }
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique.len(), 10_000, "each run once");
    assert_eq!(seen.first().map(String::as_str), Some("bulk/r-00000"));
    assert_eq!(seen.last().map(String::as_str), Some("bulk/r-09999"));
}

#[tokio::test]
async fn rule38_a_fifty_megabyte_value_is_cut_on_its_page() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let huge = Context::new()
        .set("blob", "<".repeat(50 << 20))
        .and_then(|c| c.set("small", 7_u8))
        .expect("set");
    let cp = Checkpoint::new("big-1", "v1", 0, "take", huge.snapshot()).in_pipeline("bulk");
    store.save(cp).await.expect("saved");
    let (status, page) = get(&store, "/runs/bulk/big-1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.len() < 100 * 1024, "{} bytes", page.len());
    assert!(page.contains("&lt;&lt;&lt;"), "escaped");
    assert!(page.contains("show it whole"));
    let (status, whole) = get(&store, "/runs/bulk/big-1?key=blob").await;
    assert_eq!(status, StatusCode::OK);
    // a million characters at most, each `<` escaped as `&lt;`
    assert!(whole.len() < 4_200_000, "{} bytes", whole.len());
    assert!(whole.contains("cut at 1000000 characters"));
}

/// A store that answers its first call and then is gone: every later call
/// fails as a lost connection does.
#[derive(Debug, Default)]
struct Vanishing {
    inner: InMemoryStore,
    gone: AtomicBool,
}

impl Vanishing {
    fn check(&self) -> fluxio::Result<()> {
        if self.gone.swap(true, Ordering::SeqCst) {
            return Err(fluxio::Error::store(
                "vanishing",
                std::io::Error::new(std::io::ErrorKind::ConnectionReset, "the server went away"),
            ));
        }
        Ok(())
    }
}

#[fluxio::async_trait]
impl CheckpointStore for Vanishing {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.inner.save(checkpoint).await
    }
    async fn load(&self, key: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.check()?;
        self.inner.load(key).await
    }
    async fn delete(&self, key: &str) -> fluxio::Result<()> {
        self.inner.delete(key).await
    }
    async fn exists(&self, key: &str) -> fluxio::Result<bool> {
        self.inner.exists(key).await
    }
    async fn history(&self, key: &str) -> fluxio::Result<Vec<Checkpoint>> {
        self.check()?;
        self.inner.history(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> fluxio::Result<RunPage> {
        self.check()?;
        self.inner.list_runs(filter).await
    }
}

#[tokio::test]
async fn rule38_a_store_that_goes_away_while_a_page_loads_gives_an_error_page() {
    let vanishing = Arc::new(Vanishing::default());
    let cp = Checkpoint::new("v-1", "v1", 0, "take", Context::new().snapshot()).in_pipeline("p");
    vanishing.save(cp).await.expect("saved");
    let store: Arc<dyn CheckpointStore> = vanishing.clone();
    // the run's journal is read, then the store is gone for its listing
    let (status, page) = get(&store, "/runs/p/v-1").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{page}");
    assert!(page.contains("the server went away"), "{page}");
    assert!(page.contains("vanishing"), "names the store: {page}");
    // and stays gone for the runs page
    let (status, page) = get(&store, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{page}");
}
