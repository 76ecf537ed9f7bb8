//! The run index (contract rule 21): what every write script is given to
//! keep it, and [`RedisStore::reindex`] for the runs of builds before it.
//!
//! The index itself is kept by the Lua scripts (`scripts::index_fns`), in
//! the script of each write, so it never disagrees with the journals: a run's
//! summary lives in its journal hash's meta fields, and the sorted sets
//! `P.runs` and `P.runs.S` name the runs in key order (see the crate docs).

use fluxio_core::store::{Checkpoint, MAX_UNTIL_MS, RunStatus};
use fluxio_core::{Error, Result};
use redis::ScriptInvocation;

use crate::error::op;
use crate::scripts;
use crate::store::RedisStore;

/// How many keys one `SCAN` of [`RedisStore::reindex`] asks for.
const SCAN_COUNT: usize = 1000;

/// The name of `status` in a run's `status` field and in the index's key
/// `P.runs.{name}` (the scripts' `STATUSES` lists them all).
///
/// # Errors
/// [`Error::Unsupported`] for a status this build does not know how to
/// index (`RunStatus` may grow).
pub(crate) fn status_name(status: RunStatus) -> Result<&'static str> {
    Ok(match status {
        RunStatus::Running => "running",
        RunStatus::Failed => "failed",
        RunStatus::Completed => "completed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::NeedsAttention => "needs_attention",
        RunStatus::Sleeping => "sleeping",
        RunStatus::Waiting => "waiting",
        RunStatus::Paused => "paused",
        // a status of a later core: this build cannot index it
        _ => {
            return Err(Error::Unsupported {
                operation: "index a run in this status",
                store: std::any::type_name::<RedisStore>(),
            });
        }
    })
}

/// The status named `name` in a `status` field; `None` for a name this
/// build does not know.
pub(crate) fn status_of(name: &str) -> Option<RunStatus> {
    Some(match name {
        "running" => RunStatus::Running,
        "failed" => RunStatus::Failed,
        "completed" => RunStatus::Completed,
        "cancelled" => RunStatus::Cancelled,
        "needs_attention" => RunStatus::NeedsAttention,
        "sleeping" => RunStatus::Sleeping,
        "waiting" => RunStatus::Waiting,
        "paused" => RunStatus::Paused,
        _ => return None,
    })
}

/// Appends the eleven arguments of the scripts' `summarize` for the run
/// whose latest checkpoint is `cp`: status, step, attempt, version, `1` and
/// the error message (`0` and nothing when there is none), created, updated
/// (ms, decimal), the pipeline, and what a sleeping or waiting run waits
/// for (the due-index's input, `Pending::due_ms`'s): the names it waits
/// for, separated by `\n` (no wait name has a control character), and its
/// wake time or deadline in ms, at most [`MAX_UNTIL_MS`] (`""` for none).
///
/// # Errors
/// As [`status_name`].
pub(crate) fn summary_args(script: &mut ScriptInvocation<'static>, cp: &Checkpoint) -> Result<()> {
    let (waits, until) = match &cp.pending {
        Some(pending) if cp.status.is_pending() => (
            pending
                .waits
                .iter()
                .map(|w| w.name.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            pending
                .until_ms
                .map(|ms| ms.min(MAX_UNTIL_MS).to_string())
                .unwrap_or_default(),
        ),
        _ => (String::new(), String::new()),
    };
    script
        .arg(status_name(cp.status)?)
        .arg(&cp.step)
        .arg(cp.attempt)
        .arg(&cp.version)
        .arg(u8::from(cp.error_message.is_some()))
        .arg(cp.error_message.as_deref().unwrap_or_default())
        .arg(cp.created_at_ms)
        .arg(cp.updated_at_ms)
        .arg(&cp.pipeline)
        .arg(waits)
        .arg(until);
    Ok(())
}

/// `s` as a `SCAN MATCH` pattern that matches exactly `s`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedisStore {
    /// Indexes the runs that builds before the index wrote (contract rule
    /// 21), so [`list_runs`](fluxio_core::store::CheckpointStore::list_runs)
    /// shows them; returns how many it indexed.
    ///
    /// Every write of this build indexes its run in the write's own script,
    /// so a store whose runs were all written by this build (or later) is
    /// indexed already, and this finds nothing to do. Run it once after
    /// upgrading, when no process of an earlier build writes to the key
    /// prefix any more (a run such a process writes afterwards is not indexed
    /// until it is written again by this build, or this runs again).
    ///
    /// It walks the database with `SCAN` (`MATCH {prefix}:*`, 1,000 keys a
    /// call), asks one script per batch which runs lack their summary, and
    /// for each of those loads the run (decoding its latest checkpoint) and
    /// indexes it with a script that is a compare-and-set on the journal's
    /// `born:ver`, like `cancel`'s: a run written in between is indexed by
    /// that write (or retried, twice). A run of a build before the journal
    /// (one string) is migrated to the journal hash on the way, its expiry
    /// kept. Safe to run while the store is in use, and more than once.
    /// On a cluster store ([`RedisStore::cluster_builder`]) it finds
    /// nothing: only builds with the cluster's key layout wrote there, and
    /// each of them indexes its runs.
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use fluxio_redis::RedisStore;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let indexed = store.reindex().await?;
    /// println!("{indexed} runs of earlier builds indexed");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`] when Redis fails; [`Error::CorruptCheckpoint`] for a
    /// run that does not decode (the runs before it are indexed, the ones
    /// after it are not: fix or delete it and run this again).
    pub async fn reindex(&self) -> Result<u64> {
        if self.is_cluster() {
            // the cluster's key layout is this build's: no earlier build
            // wrote a run there unindexed
            return Ok(0);
        }
        let prefix = format!("{}:", self.inner.key_prefix);
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut cursor = 0u64;
        let mut indexed = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .query(op::REINDEX, &pattern, self.deadline(), &scan)
                .await?;
            // a run's key is text; anything else under the prefix is not a run
            let keys: Vec<String> = keys
                .into_iter()
                .filter_map(|key| String::from_utf8(key).ok())
                .collect();
            if !keys.is_empty() {
                let mut check = scripts::INDEXED_SCRIPT.prepare_invoke();
                for key in &keys {
                    check.key(key);
                }
                let states: Vec<i8> = self
                    .invoke(op::REINDEX, &pattern, self.deadline(), &check)
                    .await?;
                for (key, state) in keys.iter().zip(states) {
                    if state != 0 {
                        continue;
                    }
                    if let Some(run) = key.strip_prefix(&prefix) {
                        indexed += u64::from(self.reindex_run(run).await?);
                    }
                }
            }
            if next == 0 {
                return Ok(indexed);
            }
            cursor = next;
        }
    }

    /// Indexes the run `run`, unless it is indexed or gone; whether it did.
    pub(crate) async fn reindex_run(&self, run: &str) -> Result<bool> {
        let key = self.checkpoint_key(run);
        for _ in 0..3 {
            let deadline = self.deadline();
            let Some(read) = self.read_within(op::REINDEX, run, false, deadline).await? else {
                return Ok(false);
            };
            let latest = Checkpoint::from_entries(run, read.parts)?;
            let mut script = scripts::REINDEX_SCRIPT.prepare_invoke();
            script
                .key(&key)
                .arg(read.version)
                .arg(&self.inner.key_prefix)
                .arg(run);
            summary_args(&mut script, &latest)?;
            let done: u8 = self.invoke(op::REINDEX, &key, deadline, &script).await?;
            if done == 1 {
                return Ok(true);
            }
            let mut check = scripts::INDEXED_SCRIPT.prepare_invoke();
            check.key(&key);
            let state: Vec<i8> = self.invoke(op::REINDEX, &key, deadline, &check).await?;
            if state != [0] {
                return Ok(false);
            }
        }
        tracing::warn!(
            run,
            "a run kept changing while it was indexed; a process of an earlier build may be \
             writing it: run `reindex` again once those processes have stopped"
        );
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_this_build_knows_has_a_name_the_scripts_know() {
        for status in [
            RunStatus::Running,
            RunStatus::Failed,
            RunStatus::Completed,
            RunStatus::Cancelled,
            RunStatus::NeedsAttention,
            RunStatus::Sleeping,
            RunStatus::Waiting,
            RunStatus::Paused,
        ] {
            let name = status_name(status).expect("a name");
            assert_eq!(status_of(name), Some(status));
            assert!(
                scripts::LIST.contains(&format!("'{name}'")),
                "the scripts' STATUSES lists {name}"
            );
        }
        assert_eq!(status_of("resting"), None);
    }

    #[test]
    fn glob_patterns_match_the_prefix_literally() {
        assert_eq!(glob_escape("app:*?[x]\\"), "app:\\*\\?\\[x\\]\\\\");
        assert_eq!(glob_escape("fluxio:checkpoint"), "fluxio:checkpoint");
    }
}
