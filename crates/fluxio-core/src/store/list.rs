//! Listing runs (contract rule 21): what an operator asks a store after a
//! crash or a redeploy, such as which runs failed and which ones a dead
//! worker left behind.

use serde::{Deserialize, Serialize};

use super::{Checkpoint, CheckpointStore, RunStatus};
use crate::error::Result;

/// Where a run stands, as a listing sees it: its latest checkpoint's
/// status, with a running run whose lease is not held (its worker died, or
/// it was dropped) told apart as abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RunState {
    /// Running, its lease held by a worker.
    Running,
    /// Running, but no worker holds its lease: any worker may resume it.
    Abandoned,
    /// Its stage failed; a resume retries it.
    Failed,
    /// Finished.
    Completed,
    /// Cancelled (contract rule 14).
    Cancelled,
    /// Recovery gave up on it (contract rule 22); it waits for an operator.
    NeedsAttention,
    /// Asleep until its wake time (contract rule 25); no worker holds it.
    Sleeping,
    /// Waiting for a signal or its deadline (contract rule 26); no worker
    /// holds it.
    Waiting,
    /// Paused (contract rule 30): no worker continues it until it is
    /// unpaused.
    Paused,
}

impl RunState {
    /// Every state, in the order a listing documents them.
    pub const ALL: [RunState; 9] = [
        RunState::Running,
        RunState::Abandoned,
        RunState::Failed,
        RunState::Completed,
        RunState::Cancelled,
        RunState::NeedsAttention,
        RunState::Sleeping,
        RunState::Waiting,
        RunState::Paused,
    ];

    /// The state of a run whose latest checkpoint says `status`, its
    /// lease `held` or not: running and not held is abandoned.
    #[must_use]
    pub fn of(status: RunStatus, held: bool) -> RunState {
        match status {
            RunStatus::Running if held => RunState::Running,
            RunStatus::Running => RunState::Abandoned,
            RunStatus::Failed => RunState::Failed,
            RunStatus::Completed => RunState::Completed,
            RunStatus::Cancelled => RunState::Cancelled,
            RunStatus::NeedsAttention => RunState::NeedsAttention,
            RunStatus::Sleeping => RunState::Sleeping,
            RunStatus::Waiting => RunState::Waiting,
            RunStatus::Paused => RunState::Paused,
        }
    }

    /// The state's name, as the CLI and logs spell it: `running`,
    /// `abandoned`, `failed`, `completed`, `cancelled`, `needs-attention`,
    /// `sleeping`, `waiting`, `paused`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Abandoned => "abandoned",
            RunState::Failed => "failed",
            RunState::Completed => "completed",
            RunState::Cancelled => "cancelled",
            RunState::NeedsAttention => "needs-attention",
            RunState::Sleeping => "sleeping",
            RunState::Waiting => "waiting",
            RunState::Paused => "paused",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunState {
    type Err = crate::Error;

    /// Reads a state by the name [`RunState::as_str`] gives it
    /// (`needs_attention` is accepted too).
    ///
    /// ```
    /// use fluxio_core::store::RunState;
    /// assert_eq!("failed".parse::<RunState>().unwrap(), RunState::Failed);
    /// assert!("broken".parse::<RunState>().unwrap_err().to_string().contains("broken"));
    /// ```
    fn from_str(s: &str) -> crate::Result<RunState> {
        let wanted = s.trim().replace('_', "-").to_ascii_lowercase();
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == wanted)
            .ok_or_else(|| crate::Error::InvalidSetting {
                setting: "run state",
                message: format!(
                    "{s:?} is not a run state; the states are running, abandoned, failed, \
                     completed, cancelled, needs-attention, sleeping, waiting and paused"
                ),
            })
    }
}

/// The most runs a page of [`list_runs`](super::CheckpointStore::list_runs)
/// holds ([`RunFilter::limit`]).
pub const MAX_LIST_LIMIT: usize = 10_000;

/// Which runs to list, a page at a time. Every filter is optional; a page
/// holds at most [`limit`](RunFilter::limit) runs, in key order, and
/// [`RunPage::next`] is the cursor of the next page.
///
/// ```
/// use fluxio_core::store::{RunFilter, RunState};
/// let failed = RunFilter::new().pipeline("orders").state(RunState::Failed).limit(50);
/// assert_eq!(failed.limit, 50);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only runs of this pipeline (`""`: runs of unnamed pipelines).
    pub pipeline: Option<String>,
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs whose latest checkpoint this version wrote.
    pub version: Option<String>,
    /// Only runs created at or after this time (ms since the Unix epoch).
    pub created_after_ms: Option<u64>,
    /// Only runs last written before this time (ms since the Unix epoch).
    pub updated_before_ms: Option<u64>,
    /// At most this many runs per page: 1 to [`MAX_LIST_LIMIT`]; the
    /// built-in stores refuse anything else ([`page_size`](Self::page_size)).
    pub limit: usize,
    /// The cursor a previous page returned: list the runs after it.
    pub after: Option<String>,
    /// Only runs whose run id (the key without its pipeline) starts with
    /// this: [`children_of`](Self::children_of) lists a parent's child
    /// runs (contract rule 29) with it.
    #[serde(default)]
    pub id_prefix: Option<String>,
}

impl Default for RunFilter {
    fn default() -> Self {
        RunFilter {
            pipeline: None,
            state: None,
            version: None,
            created_after_ms: None,
            updated_before_ms: None,
            limit: 100,
            after: None,
            id_prefix: None,
        }
    }
}

impl RunFilter {
    /// Every run, 100 a page.
    #[must_use]
    pub fn new() -> Self {
        RunFilter::default()
    }

    /// Only runs of `pipeline`.
    #[must_use]
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipeline = Some(pipeline.into());
        self
    }

    /// Only runs in `state`.
    #[must_use]
    pub fn state(mut self, state: RunState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only runs whose latest checkpoint `version` wrote.
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// At most `runs` a page: 1 to [`MAX_LIST_LIMIT`]. A listing with any
    /// other limit is refused ([`page_size`](Self::page_size)).
    #[must_use]
    pub fn limit(mut self, runs: usize) -> Self {
        self.limit = runs;
        self
    }

    /// The page's size, [`limit`](Self::limit), checked: what a store's
    /// [`list_runs`](super::CheckpointStore::list_runs) calls first.
    ///
    /// ```
    /// use fluxio_core::store::RunFilter;
    /// assert_eq!(RunFilter::new().limit(50).page_size().ok(), Some(50));
    /// assert!(RunFilter::new().limit(0).page_size().is_err());
    /// assert!(RunFilter::new().limit(usize::MAX).page_size().is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming `limit`
    /// when it is not in 1..=[`MAX_LIST_LIMIT`].
    pub fn page_size(&self) -> crate::Result<usize> {
        if (1..=MAX_LIST_LIMIT).contains(&self.limit) {
            return Ok(self.limit);
        }
        Err(crate::Error::InvalidSetting {
            setting: "limit",
            message: format!(
                "a page of {} runs is out of range: a page lists 1 to {MAX_LIST_LIMIT} runs",
                self.limit
            ),
        })
    }

    /// Only runs whose run id starts with `prefix`.
    #[must_use]
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    /// Only the child runs (contract rule 29) of the run stored under
    /// `parent_key`, of every pipeline: the runs whose id starts with
    /// `{parent_key}#` ([`child_run_id`](crate::child::child_run_id)).
    /// Without a [`pipeline`](Self::pipeline) a store reads its whole index
    /// for it.
    ///
    /// ```
    /// use fluxio_core::store::RunFilter;
    /// let children = RunFilter::new().children_of("orders/42");
    /// assert_eq!(children.id_prefix.as_deref(), Some("orders/42#"));
    /// ```
    #[must_use]
    pub fn children_of(self, parent_key: &str) -> Self {
        self.id_prefix(format!("{parent_key}#"))
    }

    /// The page after the cursor `next` of a previous page.
    #[must_use]
    pub fn after(mut self, next: impl Into<String>) -> Self {
        self.after = Some(next.into());
        self
    }

    /// Whether the run stored under `key`, whose latest checkpoint is `cp`
    /// and which is in `state`, passes the filter (the cursor aside).
    #[must_use]
    pub fn matches(&self, key: &str, cp: &Checkpoint, state: RunState) -> bool {
        let pipeline = key.split_once('/').map_or("", |(p, _)| p);
        self.pipeline.as_deref().is_none_or(|p| p == pipeline)
            && self.state.is_none_or(|s| s == state)
            && self.version.as_deref().is_none_or(|v| v == cp.version)
            && self.created_after_ms.is_none_or(|t| cp.created_at_ms >= t)
            && self.updated_before_ms.is_none_or(|t| cp.updated_at_ms < t)
            && (self.id_prefix.as_deref()).is_none_or(|p| run_id_of(key).starts_with(p))
    }
}

/// One run, as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunSummary {
    /// The run's store key (`pipeline/run_id`).
    pub key: String,
    /// Its pipeline's name (empty when unnamed).
    pub pipeline: String,
    /// Its run id.
    pub run_id: String,
    /// The version that wrote its latest checkpoint.
    pub version: String,
    /// Where it stands.
    pub state: RunState,
    /// The stage it is at (empty once completed).
    pub step: String,
    /// The attempt of that stage.
    pub attempt: u32,
    /// How that stage failed, when it did.
    pub error_message: Option<String>,
    /// When the run started and when it was last written (ms since the
    /// Unix epoch).
    pub created_at_ms: u64,
    /// See `created_at_ms`.
    pub updated_at_ms: u64,
    /// When its lease runs out (ms since the Unix epoch), while one is held.
    pub lease_expires_at_ms: Option<u64>,
}

impl RunSummary {
    /// The summary of the run stored under `key` whose latest checkpoint is
    /// `cp`, with its lease held until `lease_expires_at_ms` (`None`: not
    /// held).
    #[must_use]
    pub fn of(key: &str, cp: &Checkpoint, lease_expires_at_ms: Option<u64>) -> RunSummary {
        let state = RunState::of(cp.status, lease_expires_at_ms.is_some());
        RunSummary {
            key: key.to_owned(),
            pipeline: cp.pipeline.clone(),
            run_id: cp.run_id.clone(),
            version: cp.version.clone(),
            state,
            step: cp.step.clone(),
            attempt: cp.attempt,
            error_message: cp.error_message.clone(),
            created_at_ms: cp.created_at_ms,
            updated_at_ms: cp.updated_at_ms,
            lease_expires_at_ms,
        }
    }
}

/// A page of runs: [`CheckpointStore::list_runs`](super::CheckpointStore::list_runs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunPage {
    /// The runs, in key order.
    pub runs: Vec<RunSummary>,
    /// The cursor of the next page ([`RunFilter::after`]); `None` on the last.
    pub next: Option<String>,
}

/// The run id of the key `key`: what follows its pipeline's name and `/`
/// (the whole key when it has no `/`).
#[must_use]
pub fn run_id_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, id)| id)
}

/// The first string after every string that starts with `prefix`, in byte
/// order (its last character replaced by the next one), or `None` when
/// there is none: what a store bounds a prefix's range of keys with.
///
/// ```
/// use fluxio_core::store::prefix_end;
/// assert_eq!(prefix_end("orders/42#").as_deref(), Some("orders/42$"));
/// assert_eq!(prefix_end(""), None);
/// ```
#[must_use]
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = u32::from(last) + 1;
        while next <= u32::from(char::MAX) {
            if let Some(c) = char::from_u32(next) {
                chars.push(c);
                return Some(chars.into_iter().collect());
            }
            next += 1;
        }
    }
    None
}

/// The parent's store key of a child's run id ([`child_run_id`](crate::child::child_run_id)): the part
/// before its last `#`, when a position follows it and it is a key with a
/// pipeline (`name/run_id`).
#[must_use]
pub fn parent_of(run_id: &str) -> Option<&str> {
    let (parent, position) = run_id.rsplit_once('#')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // `5`, or a fan-out's `5.17`
    let numeric = match position.split_once('.') {
        Some((at, i)) => digits(at) && digits(i),
        None => digits(position),
    };
    (numeric && parent.contains('/') && !parent.starts_with('/')).then_some(parent)
}

/// How many runs of one pipeline are in one state: a row of
/// [`CheckpointStore::count_runs`] (contract rule 21).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunCount {
    /// The pipeline's name (empty for runs of unnamed pipelines).
    pub pipeline: String,
    /// The state.
    pub state: RunState,
    /// How many of its runs are in it (never 0: states without runs have
    /// no row).
    pub runs: u64,
}

impl RunCount {
    /// A row: `runs` runs of `pipeline` in `state`.
    #[must_use]
    pub fn new(pipeline: impl Into<String>, state: RunState, runs: u64) -> Self {
        RunCount {
            pipeline: pipeline.into(),
            state,
            runs,
        }
    }
}

/// `counts` as [`CheckpointStore::count_runs`] returns them: one row per
/// pipeline and state, zero rows dropped, sorted by pipeline then by the
/// state's place in [`RunState::ALL`].
#[must_use]
pub fn tally(counts: impl IntoIterator<Item = RunCount>) -> Vec<RunCount> {
    let place = |s: RunState| {
        RunState::ALL
            .iter()
            .position(|x| *x == s)
            .unwrap_or(usize::MAX)
    };
    let mut rows: std::collections::BTreeMap<(String, usize), RunCount> =
        std::collections::BTreeMap::new();
    for c in counts.into_iter().filter(|c| c.runs > 0) {
        rows.entry((c.pipeline.clone(), place(c.state)))
            .and_modify(|r| r.runs = r.runs.saturating_add(c.runs))
            .or_insert(c);
    }
    rows.into_values().collect()
}

/// What [`CheckpointStore::count_runs`] does by default: it pages through
/// [`list_runs`](CheckpointStore::list_runs) ([`MAX_LIST_LIMIT`] runs a
/// page) and counts what each page holds, so it reads every run the filter
/// matches. A store with an index of its runs by state counts there.
///
/// # Errors
/// The listing's ([`Error::Unsupported`](crate::Error::Unsupported) from a
/// store that cannot list).
pub async fn count_by_listing<S: CheckpointStore + ?Sized>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<RunCount>> {
    let mut page_filter = filter.clone();
    page_filter.limit = MAX_LIST_LIMIT;
    page_filter.after = None;
    let mut counts = Vec::new();
    loop {
        let page = store.list_runs(&page_filter).await?;
        counts.extend(
            page.runs
                .iter()
                .map(|r| RunCount::new(r.pipeline.clone(), r.state, 1)),
        );
        match page.next {
            Some(next) => page_filter.after = Some(next),
            None => return Ok(tally(counts)),
        }
    }
}
