//! Reading a store's errors in a test: the source of an `Error::Store`,
//! the store's own error behind it, its kind, the whole chain as text.

use std::error::Error as StdError;
use std::time::{Duration, Instant};

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// The source of `err`, an `Error::Store` of `backend`.
///
/// # Panics
/// When `err` is no `Error::Store` of `backend`.
pub fn source<'e>(err: &'e Error, backend: &str) -> &'e (dyn StdError + Send + Sync + 'static) {
    match err {
        Error::Store {
            backend: b, source, ..
        } if *b == backend => &**source,
        other => panic!("expected a {backend} Error::Store, got {other:?}"),
    }
}

/// The store's own error `E` behind `err`, an `Error::Store` of `backend`.
///
/// # Panics
/// When `err` is no `Error::Store` of `backend`, or its source no `E`.
pub fn own<'e, E: StdError + 'static>(err: &'e Error, backend: &str) -> &'e E {
    let source = source(err, backend);
    source
        .downcast_ref::<E>()
        .unwrap_or_else(|| panic!("expected a {}, got {source:?}", std::any::type_name::<E>()))
}

/// Asserts that `err` is a failure of `kind`, as
/// [`Error::store_error_kind`] answers.
///
/// # Panics
/// When it is not.
#[track_caller]
pub fn assert_kind(err: &Error, kind: StoreErrorKind) {
    assert_eq!(err.store_error_kind(), Some(kind), "{err:?}");
}

/// The text of `err` and of each of its sources, joined by `separator`.
pub fn chain(err: &dyn StdError, separator: &str) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(separator);
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What `call` answered (its value dropped) and how long it took to.
pub async fn timed<T>(
    call: impl Future<Output = fluxio_core::Result<T>>,
) -> (fluxio_core::Result<()>, Duration) {
    let started = Instant::now();
    let answer = call.await.map(drop);
    (answer, started.elapsed())
}
