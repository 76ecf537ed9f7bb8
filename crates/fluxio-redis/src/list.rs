//! [`RedisStore`]'s listing of runs (contract rule 21): pages read from the
//! run index by the `LIST` script, a bounded slice of the index per call.

use fluxio_core::context::Snapshot;
use fluxio_core::store::{Checkpoint, RunFilter, RunPage, RunState, RunSummary};
use fluxio_core::{Error, Result};

use crate::error::op;
use crate::index::{status_name, status_of};
use crate::scripts;
use crate::store::RedisStore;

/// The most index members one `LIST` script looks at: a filter that few
/// runs pass (a version, a time) is answered in several short scripts, so
/// no call holds the server for long.
const BUDGET: usize = 500;

/// The values of one run in `LIST`'s reply.
const ROW: usize = 10;

/// What to read of the index for a filter.
struct Query {
    /// The sorted set: `P.runs`, or `P.runs.S` for one status.
    set: String,
    /// The status its runs must have (`""`: any).
    status: &'static str,
    /// For running runs: `held`, `free` (abandoned) or `""` (either).
    lease: &'static str,
    /// The `ZRANGEBYLEX` bounds.
    min: String,
    max: String,
    /// Only runs with no pipeline (keys without `/`).
    bare: bool,
}

impl Query {
    /// The query of `filter` in the index of `prefix`; `None` when no run
    /// can pass it.
    fn of(filter: &RunFilter, prefix: &str) -> Result<Option<Query>> {
        let (status, lease) = match filter.state {
            None => ("", ""),
            Some(RunState::Running) => ("running", "held"),
            Some(RunState::Abandoned) => ("running", "free"),
            Some(RunState::Failed) => ("failed", ""),
            Some(RunState::Completed) => ("completed", ""),
            Some(RunState::Cancelled) => ("cancelled", ""),
            Some(RunState::NeedsAttention) => ("needs_attention", ""),
            Some(RunState::Sleeping) => ("sleeping", ""),
            Some(RunState::Waiting) => ("waiting", ""),
            Some(RunState::Paused) => ("paused", ""),
            // a state of a later core: this build does not index it
            Some(_) => {
                return Err(Error::Unsupported {
                    operation: "list runs in this state",
                    store: std::any::type_name::<RedisStore>(),
                });
            }
        };
        // A pipeline's runs are the keys `N/...`: the range [`N/`, `N0`)
        // (`0` follows `/`). A key's pipeline is the part before its first
        // `/`, so a pipeline with a `/` has no runs.
        let (first, max, bare) = match filter.pipeline.as_deref() {
            Some(p) if p.contains('/') => return Ok(None),
            Some("") => (None, "+".to_owned(), true),
            Some(p) => (Some(format!("{p}/")), format!("({p}0"), false),
            None => (None, "+".to_owned(), false),
        };
        let min = match (first, filter.after.as_deref()) {
            (Some(first), Some(after)) if after >= first.as_str() => format!("({after}"),
            (Some(first), _) => format!("[{first}"),
            (None, Some(after)) => format!("({after}"),
            (None, None) => "-".to_owned(),
        };
        let set = if status.is_empty() {
            format!("{prefix}.runs")
        } else {
            format!("{prefix}.runs.{status}")
        };
        Ok(Some(Query {
            set,
            status,
            lease,
            min,
            max,
            bare,
        }))
    }
}

impl RedisStore {
    /// The sorted set of every run in the index: `{prefix}.runs`, each
    /// run's key a member, scored 0, so in key order. See the
    /// [crate documentation](crate) for the index. On a cluster each
    /// bucket has its own, `{{prefix}#b}.runs` (see the
    /// [crate documentation](crate#redis-cluster)); this names the one of a
    /// single server.
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use fluxio_redis::RedisStore;
    ///
    /// let store = RedisStore::builder("redis://127.0.0.1:6379")
    ///     .key_prefix("billing")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(store.runs_key(), "billing.runs");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn runs_key(&self) -> String {
        format!("{}.runs", self.inner.key_prefix)
    }

    /// The sorted set of the runs whose latest checkpoint has `status`:
    /// `{prefix}.runs.{status}` (`running`, `failed`, `completed`,
    /// `cancelled`, `needs_attention`, `sleeping`, `waiting`, `paused`); a running
    /// run is abandoned when its lease key does not exist.
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use fluxio_core::RunStatus;
    /// use fluxio_redis::RedisStore;
    ///
    /// let store = RedisStore::builder("redis://127.0.0.1:6379")
    ///     .key_prefix("billing")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(store.runs_in_status_key(RunStatus::Failed)?, "billing.runs.failed");
    /// # Ok(()) }
    /// ```
    ///
    /// On a cluster each bucket has its own, `{{prefix}#b}.runs.{status}`;
    /// this names the one of a single server.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a status this build does not index.
    pub fn runs_in_status_key(&self, status: fluxio_core::store::RunStatus) -> Result<String> {
        Ok(format!(
            "{}.runs.{}",
            self.inner.key_prefix,
            status_name(status)?
        ))
    }

    /// A page of the runs that pass `filter` (see
    /// [`list_runs`](fluxio_core::store::CheckpointStore::list_runs)).
    ///
    /// On a cluster, the runs of one pipeline are in one bucket (and the
    /// bare ids' pipeline `""` is one too), read as on one server; without
    /// a pipeline, each bucket gives its first `limit + 1` runs after the
    /// cursor (the buckets read at once, each on its node) and the page is
    /// the first `limit + 1` of their merge in key
    /// order: a bucket's runs are in key order and no run is in two
    /// buckets, so these are the first of all.
    pub(crate) async fn list(&self, filter: &RunFilter) -> Result<RunPage> {
        let limit = filter.page_size()?;
        let deadline = self.deadline();
        let mut runs = match (self.is_cluster(), filter.pipeline.as_deref()) {
            (true, None) => {
                let prefixes: Vec<String> = (0..crate::CLUSTER_BUCKETS)
                    .map(|bucket| self.bucket_prefix(bucket))
                    .collect();
                let buckets = futures::future::try_join_all(
                    prefixes
                        .iter()
                        .map(|prefix| self.list_in(prefix, filter, limit, deadline)),
                )
                .await?;
                let mut runs: Vec<RunSummary> = buckets.into_iter().flatten().collect();
                runs.sort_by(|a, b| a.key.cmp(&b.key));
                runs
            }
            (_, pipeline) => {
                let prefix = self.pipeline_prefix(pipeline.unwrap_or_default());
                self.list_in(&prefix, filter, limit, deadline).await?
            }
        };
        let next = if runs.len() > limit {
            runs.truncate(limit);
            runs.last().map(|r| r.key.clone())
        } else {
            None
        };
        let mut page = RunPage::default();
        page.runs = runs;
        page.next = next;
        Ok(page)
    }

    /// The first `limit + 1` runs that pass `filter` in the index of the
    /// key prefix `prefix` (one bucket on a cluster), in key order.
    async fn list_in(
        &self,
        prefix: &str,
        filter: &RunFilter,
        limit: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<RunSummary>> {
        let Some(mut query) = Query::of(filter, prefix)? else {
            return Ok(Vec::new());
        };
        let empty = Snapshot::default();
        let mut runs = Vec::new();
        // one run more than the page: whether there is a next page
        while runs.len() <= limit {
            let mut script = scripts::LIST_SCRIPT.prepare_invoke();
            script
                .key(&query.set)
                .arg(prefix)
                .arg(&query.min)
                .arg(&query.max)
                .arg(limit + 1 - runs.len())
                .arg(BUDGET)
                .arg(query.status)
                .arg(query.lease)
                .arg(u8::from(filter.version.is_some()))
                .arg(filter.version.as_deref().unwrap_or_default())
                .arg(
                    filter
                        .created_after_ms
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                )
                .arg(
                    filter
                        .updated_before_ms
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                )
                .arg(u8::from(query.bare))
                .arg(filter.id_prefix.as_deref().unwrap_or_default());
            let reply: Vec<Option<String>> =
                self.invoke(op::LIST, &query.set, deadline, &script).await?;
            let mut reply = reply.into_iter();
            let more = reply.next().flatten();
            let last = reply.next().flatten().unwrap_or_default();
            let rest: Vec<Option<String>> = reply.collect();
            for row in rest.chunks(ROW) {
                runs.push(summary(row, &empty)?);
            }
            if more.as_deref() != Some("1") {
                break;
            }
            query.min = format!("({last}");
        }
        Ok(runs)
    }
}

/// The summary of one row of `LIST`'s reply.
fn summary(row: &[Option<String>], empty: &Snapshot) -> Result<RunSummary> {
    let [
        Some(key),
        Some(pipeline),
        Some(status),
        Some(step),
        Some(attempt),
        Some(version),
        error,
        Some(created),
        Some(updated),
        expires,
    ] = row
    else {
        return Err(Error::Internal {
            message: format!("the listing script returned a short or empty row: {row:?}"),
        });
    };
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: key.clone(),
        reason,
        source: None,
    };
    let number = |field: &str, value: &str| {
        value
            .parse::<u64>()
            .map_err(|_| corrupt(format!("its `{field}` field is {value:?}, not a number")))
    };
    let status = status_of(status).ok_or_else(|| {
        corrupt(format!(
            "its `status` field is {status:?}, which this build does not know \
             (written by a later build?)"
        ))
    })?;
    let run_id = if pipeline.is_empty() {
        key.as_str()
    } else {
        key.strip_prefix(pipeline.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(key)
    };
    let mut cp = Checkpoint::new(run_id, version.as_str(), 0, step.as_str(), empty.clone())
        .in_pipeline(pipeline.as_str());
    cp.status = status;
    cp.error_message.clone_from(error);
    cp.attempt = u32::try_from(number("attempt", attempt)?)
        .map_err(|_| corrupt(format!("its `attempt` field {attempt} is out of range")))?;
    cp.created_at_ms = number("created", created)?;
    cp.updated_at_ms = number("updated", updated)?;
    let lease = expires
        .as_deref()
        .map(|e| number("lease expiry", e))
        .transpose()?;
    Ok(RunSummary::of(key, &cp, lease))
}
