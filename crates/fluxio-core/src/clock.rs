//! The one clock wake times and deadlines come from (contract rule 28).
//!
//! A [`Clock`] is what a pipeline reads when a run reaches a sleep or a
//! wait (its wake time, its deadline), and what a worker compares due runs
//! against. Three sources:
//!
//! - [`Clock::store`] (the default): the store's own clock where it has one
//!   (SQLite's, Postgres's, MySQL's, Redis's `TIME`), so that workers on
//!   several machines agree on what is due whatever their clocks say; the
//!   process's wall clock for a store without one (in memory, a store with
//!   the four required methods).
//! - [`Clock::system`]: the process's wall clock.
//! - [`Clock::manual`]: a clock that stands still until a test moves it
//!   ([`advance`](Clock::advance)); the testing kit's
//!   [`TestClock`](crate::testing::TestClock) hands one out. A worker on it
//!   wakes what an advance made due, deterministically.
//!
//! Times are milliseconds since the Unix epoch, as every checkpoint's.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::store::CheckpointStore;

/// Where wake times and deadlines come from: see the [module docs](self).
/// Cheap to clone; clones of a manual clock move together.
#[derive(Clone)]
pub struct Clock(Arc<Source>);

enum Source {
    System,
    Store,
    Manual {
        now_ms: AtomicU64,
        /// Told every advance, so that a worker on the clock looks again.
        moved: watch::Sender<u64>,
    },
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Source::System => f.write_str("Clock::system()"),
            Source::Store => f.write_str("Clock::store()"),
            Source::Manual { now_ms, .. } => f
                .debug_struct("Clock::manual")
                .field("now_ms", &now_ms.load(Ordering::Acquire))
                .finish(),
        }
    }
}

impl Default for Clock {
    /// [`Clock::store`].
    fn default() -> Self {
        Clock::store()
    }
}

impl Clock {
    /// The process's wall clock.
    #[must_use]
    pub fn system() -> Clock {
        Clock(Arc::new(Source::System))
    }

    /// The store's clock where the store has one
    /// ([`CheckpointStore::clock_ms`]), else the process's wall clock: the
    /// default, and the one to use when workers run on several machines.
    #[must_use]
    pub fn store() -> Clock {
        Clock(Arc::new(Source::Store))
    }

    /// A clock that reads `start_ms` (milliseconds since the Unix epoch)
    /// until [advanced](Clock::advance).
    #[must_use]
    pub fn manual(start_ms: u64) -> Clock {
        let (moved, _) = watch::channel(start_ms);
        Clock(Arc::new(Source::Manual {
            now_ms: AtomicU64::new(start_ms),
            moved,
        }))
    }

    /// Whether this is a [manual](Clock::manual) clock.
    #[must_use]
    pub fn is_manual(&self) -> bool {
        matches!(&*self.0, Source::Manual { .. })
    }

    /// Moves a [manual](Clock::manual) clock `by` forward, and tells every
    /// worker on it to look for what became due. Returns the new time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fluxio_core::clock::Clock;
    /// let clock = Clock::manual(1_000);
    /// assert_eq!(clock.advance(Duration::from_secs(2))?, 3_000);
    /// assert!(Clock::system().advance(Duration::from_secs(1)).is_err());
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `clock` for a clock that is not
    /// manual (the wall clock cannot be moved), or an advance past the
    /// range of `u64` milliseconds.
    pub fn advance(&self, by: Duration) -> Result<u64> {
        let Source::Manual { now_ms, moved } = &*self.0 else {
            return Err(Error::InvalidSetting {
                setting: "clock",
                message: "only a manual clock (`Clock::manual`, the testing kit's \
                          `TestClock`) can be advanced"
                    .to_owned(),
            });
        };
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut now = now_ms.load(Ordering::Acquire);
        loop {
            let next = now.checked_add(by).ok_or_else(|| Error::InvalidSetting {
                setting: "clock",
                message: format!("advancing {by} ms from {now} ms passes the clock's range"),
            })?;
            match now_ms.compare_exchange(now, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    moved.send_replace(next);
                    return Ok(next);
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// The time now, in milliseconds since the Unix epoch: the manual
    /// clock's, the store's (asked once per call), or the wall clock's.
    ///
    /// # Errors
    /// The store's, when it is asked and fails.
    pub async fn now_ms(&self, store: Option<&dyn CheckpointStore>) -> Result<u64> {
        match (&*self.0, store) {
            (Source::Manual { now_ms, .. }, _) => Ok(now_ms.load(Ordering::Acquire)),
            (Source::Store, Some(store)) => match store.clock_ms().await? {
                Some(ms) => Ok(ms),
                None => Ok(crate::store::now_ms()),
            },
            _ => Ok(crate::store::now_ms()),
        }
    }

    /// A manual clock's time; `None` for the others.
    pub(crate) fn manual_now(&self) -> Option<u64> {
        match &*self.0 {
            Source::Manual { now_ms, .. } => Some(now_ms.load(Ordering::Acquire)),
            _ => None,
        }
    }

    /// A receiver told of every advance of a manual clock (so a worker
    /// on it looks again for what became due); `None` for the others,
    /// whose time moves by itself (a worker on them polls and listens to
    /// its store).
    pub(crate) fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        match &*self.0 {
            Source::Manual { moved, .. } => Some(moved.subscribe()),
            _ => None,
        }
    }
}

/// `start_ms` plus `by`, saturating at the end of the range: what a sleep
/// of `by` or a deadline `by` away reads as, from `start_ms`.
#[must_use]
pub fn after(start_ms: u64, by: Duration) -> u64 {
    start_ms.saturating_add(u64::try_from(by.as_millis()).unwrap_or(u64::MAX))
}

/// Reads a duration written for people: `"24h"`, `"1h 30m"`, `"250ms"`
/// (humantime's syntax), for the APIs that take one as text.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::clock::parse_duration;
/// assert_eq!(parse_duration("1h 30m")?, Duration::from_secs(5400));
/// assert!(parse_duration("soon").is_err());
/// # Ok::<(), fluxio_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidSetting`] naming `duration` and what was wrong.
pub fn parse_duration(text: &str) -> Result<Duration> {
    humantime::parse_duration(text.trim()).map_err(|e| Error::InvalidSetting {
        setting: "duration",
        message: format!(
            "{:?} is not a duration ({e}); write one like \"24h\", \"1h 30m\" or \"250ms\"",
            text.chars().take(64).collect::<String>()
        ),
    })
}
