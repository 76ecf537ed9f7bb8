//! Cleaning up from `Drop`, which runs inside a test's runtime and cannot
//! block on it.

/// Runs the future `cleanup` makes to its end on a thread with a runtime
/// of its own, and waits for it (a panic in it is not passed on: a test
/// that failed stays the failure shown).
pub fn on_own_runtime<F, Fut>(cleanup: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the cleanup");
        rt.block_on(cleanup());
    });
    let _ = thread.join();
}
