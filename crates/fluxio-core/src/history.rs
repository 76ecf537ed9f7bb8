//! A run's history (contract rule 20): the steps it took, read from its
//! journal of checkpoints ([`Pipeline::history`](crate::Pipeline::history)).
//!
//! A *step* is one attempt of one stage (or parallel block) of the run: it
//! starts at the running checkpoint written before the stage, and ends at
//! the next checkpoint: the next stage's (it completed, and the keys it
//! wrote are what changed), its failure checkpoint, the completed
//! checkpoint, a cancel, or a later attempt of the same stage (it was
//! interrupted: its worker died). Steps are numbered by the checkpoint
//! they start at, which is what `replay`, `fork` and `diff` accept besides
//! a stage name.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::context::Snapshot;
use crate::error::{Error, Result};
use crate::store::{Checkpoint, CheckpointStore, RunStatus};

/// How a step of a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StepStatus {
    /// Still running (or its worker died and nobody resumed it yet).
    Running,
    /// The stage finished and the run moved on.
    Completed,
    /// The stage failed.
    Failed,
    /// The worker running it died (or the run was replayed): a later
    /// attempt, or a replay, started over.
    Interrupted,
    /// The run was cancelled while it ran.
    Cancelled,
    /// A sleep (rule 25): the run gave its lease back until its wake time.
    Sleeping,
    /// A wait (rule 26): the run gave its lease back until a signal or its
    /// deadline.
    Waiting,
    /// The run was paused at this step (rule 30) and is not unpaused yet.
    Paused,
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StepStatus::Running => "running",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Interrupted => "interrupted",
            StepStatus::Cancelled => "cancelled",
            StepStatus::Sleeping => "sleeping",
            StepStatus::Waiting => "waiting",
            StepStatus::Paused => "paused",
        })
    }
}

/// One step of a run: see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Step {
    /// The number of the checkpoint written before the step: what
    /// `replay`, `fork` and `diff` take to name this point.
    pub number: u32,
    /// The position of the stage (or block) in the program (its
    /// checkpoint's [`ip`](crate::store::Checkpoint::ip)).
    pub ip: u32,
    /// The stage's name (a parallel block's is its first branch's).
    pub stage: String,
    /// Which attempt of the stage this was, from 1.
    pub attempt: u32,
    /// How it ended.
    pub status: StepStatus,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// When it ended, if it did.
    pub finished_at_ms: Option<u64>,
    /// The keys it set (completed steps only), in key order.
    pub written: Vec<String>,
    /// The keys it removed (completed steps only), in key order.
    pub removed: Vec<String>,
    /// How it failed.
    pub error: Option<String>,
    /// A sleep's wake time, or a wait's deadline, in milliseconds since the
    /// Unix epoch (rules 25-26); `None` for a stage, and a wait without a
    /// deadline.
    pub until_ms: Option<u64>,
    /// For a compensator's step (rule 35; `stage` is the compensator):
    /// the stage it compensates. `None` for every other step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensates: Option<String>,
}

/// The steps of a run, oldest first, as its kept journal tells them
/// ([`Pipeline::history`](crate::Pipeline::history)). It prints as a table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct History {
    /// The run's store key (`pipeline/run_id`).
    pub run: String,
    /// Where the run stands: its latest checkpoint's status.
    pub status: RunStatus,
    /// The steps, oldest first.
    pub steps: Vec<Step>,
    /// How many checkpoints the journal holds (its oldest may have been
    /// cut by a history depth bound).
    pub checkpoints: usize,
    /// The signals sent to the run, and the names its waits closed, in
    /// the order they came (contract rule 26): who sent what, when, and
    /// whether a wait took it. Empty when the reader did not ask the store
    /// ([`History::of`] reads the journal only).
    pub signals: Vec<crate::store::Signal>,
    /// Where the run was forked from, and the keys the fork changed, when
    /// [`Pipeline::fork_with`](crate::Pipeline::fork_with) started it (and
    /// its first checkpoint is still kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<crate::store::ForkOrigin>,
    /// The run's compensation (rule 35), as its latest checkpoint tells it,
    /// when it failed for good and undid (or is undoing) its stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<crate::store::Compensation>,
}

impl History {
    /// The history told by `journal`, the checkpoints of the run `run`,
    /// oldest first.
    #[must_use]
    pub fn of(run: &str, journal: &[Checkpoint]) -> History {
        let mut steps: Vec<Step> = Vec::new();
        let mut open: Option<usize> = None;
        // the compensation step open, by its index (rule 35)
        let mut open_comp: Option<u32> = None;
        let mut before: Option<&Snapshot> = None;
        for cp in journal {
            let close = |steps: &mut Vec<Step>, status: StepStatus, keys: bool| {
                if let Some(step) = open.and_then(|i| steps.get_mut(i)) {
                    step.status = status;
                    step.finished_at_ms = Some(cp.updated_at_ms);
                    if let (true, Some(before)) = (keys, before) {
                        (step.written, step.removed) = cp.context.changes_since(before);
                    }
                }
            };
            if let Some(comp) = &cp.compensation {
                // rule 35: each compensator is a step of its own, at the
                // position of the stage it compensates
                let error = cp.error_message.clone();
                match cp.status {
                    // an operator's retry handing it back: no step runs yet
                    RunStatus::Running if cp.attempt == 0 => {}
                    RunStatus::Running => {
                        let same = open_comp == Some(comp.next)
                            && open
                                .and_then(|i| steps.get(i))
                                .is_some_and(|s| s.attempt == cp.attempt);
                        if !same {
                            match open_comp {
                                // the stage that failed for good
                                None => {
                                    close(&mut steps, StepStatus::Failed, false);
                                    if let Some(step) = open.and_then(|i| steps.get_mut(i)) {
                                        step.error = Some(comp.reason.clone());
                                    }
                                }
                                Some(at) if at < comp.next => {
                                    close(&mut steps, StepStatus::Completed, false);
                                }
                                Some(_) => close(&mut steps, StepStatus::Interrupted, false),
                            }
                            open = None;
                            open_comp = None;
                            if let Some(c) = comp.current() {
                                open = Some(steps.len());
                                open_comp = Some(comp.next);
                                steps.push(Step {
                                    number: cp.seq,
                                    ip: c.position,
                                    stage: c.compensator.clone(),
                                    attempt: cp.attempt,
                                    status: StepStatus::Running,
                                    started_at_ms: cp.updated_at_ms,
                                    finished_at_ms: None,
                                    written: Vec::new(),
                                    removed: Vec::new(),
                                    error: None,
                                    until_ms: None,
                                    compensates: Some(c.stage.clone()),
                                });
                            }
                        }
                    }
                    status => {
                        let closed = match status {
                            RunStatus::Failed => StepStatus::Completed,
                            RunStatus::Cancelled => StepStatus::Cancelled,
                            RunStatus::Paused => StepStatus::Paused,
                            _ => StepStatus::Failed,
                        };
                        if open_comp.is_some() {
                            close(&mut steps, closed, false);
                            if closed == StepStatus::Failed {
                                if let Some(step) = open.and_then(|i| steps.get_mut(i)) {
                                    step.error = error;
                                }
                            }
                        }
                        open = None;
                        open_comp = None;
                    }
                }
                before = Some(&cp.context);
                continue;
            }
            open_comp = None;
            match cp.status {
                // a pause (rule 30) and its unpause stay at the step
                RunStatus::Running
                | RunStatus::Sleeping
                | RunStatus::Waiting
                | RunStatus::Paused => {
                    let same = open.and_then(|i| steps.get(i)).is_some_and(|s| {
                        s.ip == cp.ip
                            && s.attempt == cp.attempt
                            && before.is_some_and(|b| *b == cp.context)
                    });
                    if same {
                        // a sleep or wait parked, or woken: the same step
                        if let Some(step) = open.and_then(|i| steps.get_mut(i)) {
                            step.status = step_status(cp.status);
                            step.until_ms = cp.pending.as_ref().and_then(|p| p.until_ms);
                        }
                    } else {
                        let moved_on = open
                            .and_then(|i| steps.get(i))
                            .is_some_and(|s| cp.ip > s.ip);
                        if moved_on {
                            close(&mut steps, StepStatus::Completed, true);
                        } else {
                            close(&mut steps, StepStatus::Interrupted, false);
                        }
                        open = Some(steps.len());
                        steps.push(Step {
                            number: cp.seq,
                            ip: cp.ip,
                            stage: cp.step.clone(),
                            attempt: cp.attempt,
                            status: step_status(cp.status),
                            started_at_ms: cp.updated_at_ms,
                            finished_at_ms: None,
                            written: Vec::new(),
                            removed: Vec::new(),
                            error: None,
                            until_ms: cp.pending.as_ref().and_then(|p| p.until_ms),
                            compensates: None,
                        });
                    }
                }
                RunStatus::Failed => {
                    close(&mut steps, StepStatus::Failed, false);
                    if let Some(step) = open.and_then(|i| steps.get_mut(i)) {
                        step.error.clone_from(&cp.error_message);
                    }
                    open = None;
                }
                RunStatus::Completed => {
                    close(&mut steps, StepStatus::Completed, true);
                    open = None;
                }
                RunStatus::Cancelled => {
                    close(&mut steps, StepStatus::Cancelled, false);
                    open = None;
                }
                // Recovery gave up (rule 22): a step still open was
                // interrupted by the crash that left the run behind.
                RunStatus::NeedsAttention => {
                    close(&mut steps, StepStatus::Interrupted, false);
                    open = None;
                }
            }
            before = Some(&cp.context);
        }
        History {
            run: run.to_owned(),
            status: journal.last().map_or(RunStatus::Running, |cp| cp.status),
            steps,
            checkpoints: journal.len(),
            signals: Vec::new(),
            forked_from: journal
                .iter()
                .find_map(|cp| cp.forked_from.as_deref().cloned()),
            compensation: journal
                .last()
                .and_then(|cp| cp.compensation.as_deref().cloned()),
        }
    }
}

/// The status of a step whose latest checkpoint says `status` (running,
/// sleeping or waiting).
fn step_status(status: RunStatus) -> StepStatus {
    match status {
        RunStatus::Sleeping => StepStatus::Sleeping,
        RunStatus::Waiting => StepStatus::Waiting,
        RunStatus::Paused => StepStatus::Paused,
        _ => StepStatus::Running,
    }
}

/// The checkpoint a run stood at before `step`: the one numbered `step`
/// when it is a number, else the latest running checkpoint at `ip` (the
/// position of the stage named `step`) or, with no `ip` (a caller that has
/// the journal but not the pipeline), the latest running checkpoint whose
/// stage is named `step`.
pub(crate) fn before<'j>(
    journal: &'j [Checkpoint],
    step: &str,
    ip: Option<usize>,
) -> Option<&'j Checkpoint> {
    if is_step_number(step) {
        let number = step.parse::<u32>().ok()?;
        return journal
            .iter()
            .find(|cp| cp.seq == number && cp.status == RunStatus::Running);
    }
    let running = journal
        .iter()
        .rev()
        .filter(|cp| cp.status == RunStatus::Running);
    match ip {
        Some(ip) => {
            let ip = u32::try_from(ip).ok()?;
            running.into_iter().find(|cp| cp.ip == ip)
        }
        None => running.into_iter().find(|cp| cp.step == step),
    }
}

/// Whether `step` names a step by its number.
pub(crate) fn is_step_number(step: &str) -> bool {
    !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit())
}

/// [`before`], or the error naming what is missing: `key` has no journal
/// at all, or its journal has no such step.
pub(crate) fn point_in<'j>(
    journal: &'j [Checkpoint],
    key: &str,
    step: &str,
    ip: Option<usize>,
) -> Result<&'j Checkpoint> {
    if journal.is_empty() {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        });
    }
    before(journal, step, ip).ok_or_else(|| Error::StepNotInHistory {
        run_id: key.to_owned(),
        step: step.to_owned(),
    })
}

/// The checkpoint at a point of a stored run, read from `store` alone,
/// without the pipeline (what [`Pipeline::context_at`](crate::Pipeline::context_at)
/// and [`Pipeline::diff`](crate::Pipeline::diff) read, and the `fluxio` CLI):
/// `key` (a store key, `pipeline/run_id`) is the run's latest checkpoint;
/// `key@step` the one written before `step`, a step number from its
/// [`History`] or a stage name (its latest run; a stage inside a parallel
/// block goes by its block's first stage, or by number). A key that itself
/// contains `@` is taken whole when it is stored and the part after its
/// last `@` is not a number.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fluxio_core::Result<()> {
/// use fluxio_core::history::checkpoint_at;
/// use fluxio_core::store::{Checkpoint, CheckpointStore, InMemoryStore};
/// use fluxio_core::{Context, Error};
///
/// let store = InMemoryStore::new();
/// let ctx = Context::new().set("n", 1)?;
/// let first = Checkpoint::new("r1", "v1", 1, "load", ctx.snapshot()).in_pipeline("orders");
/// store.save(first).await?;
/// assert_eq!(checkpoint_at(&store, "orders/r1").await?.step, "load");
/// assert_eq!(checkpoint_at(&store, "orders/r1@load").await?.seq, 0);
/// assert_eq!(checkpoint_at(&store, "orders/r1@0").await?.step, "load");
/// assert!(matches!(
///     checkpoint_at(&store, "orders/r1@ship").await,
///     Err(Error::StepNotInHistory { .. })
/// ));
/// assert!(matches!(
///     checkpoint_at(&store, "orders/r2").await,
///     Err(Error::CheckpointNotFound { .. })
/// ));
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::CheckpointNotFound`] naming the key when nothing is stored;
/// [`Error::StepNotInHistory`] when the kept history has no such step;
/// [`Error::InvalidRunId`] for a malformed key; the store's errors.
pub async fn checkpoint_at<S: CheckpointStore + ?Sized>(
    store: &S,
    point: &str,
) -> Result<Checkpoint> {
    let (key, step) = match point.rsplit_once('@') {
        Some((key, step)) if !key.is_empty() && !step.is_empty() => {
            if is_step_number(step) || !store.exists(point).await? {
                (key, Some(step))
            } else {
                (point, None)
            }
        }
        _ => (point, None),
    };
    crate::store::check_run_id(key)?;
    match step {
        None => store
            .load(key)
            .await?
            .ok_or_else(|| Error::CheckpointNotFound {
                run_id: key.to_owned(),
            }),
        Some(step) => {
            let journal = store.history(key).await?;
            point_in(&journal, key, step, None).cloned()
        }
    }
}

/// How [`History::table`] writes the cells of a history table that are
/// not numbers. Every method has the default [`History`]'s `Display` uses;
/// a tool that renders the table its own way (the `fluxio` CLI) overrides
/// the ones it writes otherwise.
pub trait TableCells {
    /// A time, in milliseconds since the Unix epoch: RFC 3339, to the
    /// millisecond, UTC.
    fn time(&self, ms: u64) -> String {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        humantime::format_rfc3339_millis(at).to_string()
    }

    /// A stage's name: as it is.
    fn stage(&self, stage: &str) -> String {
        stage.to_owned()
    }

    /// The keys a step wrote and removed: `+key` written, `-key` removed,
    /// a comma apart; a key that a reader could mistake for another (empty,
    /// with blanks, control, invisible or bidi characters, a comma) is
    /// quoted and escaped as `Debug` does.
    fn keys(&self, written: &[String], removed: &[String]) -> String {
        let written = written.iter().map(|k| marked('+', k));
        let removed = removed.iter().map(|k| marked('-', k));
        written.chain(removed).collect::<Vec<_>>().join(", ")
    }

    /// A step's error: as it is.
    fn error(&self, error: &str) -> String {
        error.to_owned()
    }
}

/// The cells [`History`]'s `Display` writes: every default of
/// [`TableCells`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainCells;

impl TableCells for PlainCells {}

/// `+key` or `-key`, quoted and escaped when a reader could mistake the key
/// for another (see [`TableCells::keys`]).
fn marked(mark: char, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| {
            !(c.is_whitespace()
                || c.is_control()
                || matches!(c, ',' | '"' | '\\' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'))
        });
    if plain {
        format!("{mark}{key}")
    } else {
        format!("{mark}{key:?}")
    }
}

impl History {
    /// The header of the history table.
    pub const TABLE_HEAD: [&'static str; 7] = [
        "step",
        "stage",
        "try",
        "status",
        "started",
        "took",
        "keys written / error",
    ];

    /// The history table's rows, one per step (under
    /// [`History::TABLE_HEAD`]): its number, stage, attempt, status, start,
    /// duration, and the keys it wrote and removed or its error, the text
    /// cells written by `cells`. [`History`]'s `Display` aligns them
    /// ([`PlainCells`]), then tells the run's status.
    pub fn table(&self, cells: &impl TableCells) -> Vec<[String; 7]> {
        self.steps
            .iter()
            .map(|s| {
                [
                    s.number.to_string(),
                    match &s.compensates {
                        Some(undone) => cells.stage(&format!("{} (undoes {undone})", s.stage)),
                        None => cells.stage(&s.stage),
                    },
                    s.attempt.to_string(),
                    s.status.to_string(),
                    cells.time(s.started_at_ms),
                    s.finished_at_ms
                        .map(|e| format!("{} ms", e.saturating_sub(s.started_at_ms)))
                        .unwrap_or_default(),
                    match (&s.error, s.status, s.until_ms) {
                        (Some(e), _, _) => cells.error(e),
                        (None, StepStatus::Sleeping | StepStatus::Waiting, Some(until)) => {
                            format!("until {}", cells.time(until))
                        }
                        (None, ..) => cells.keys(&s.written, &s.removed),
                    },
                ]
            })
            .collect()
    }
}

impl fmt::Display for History {
    /// A table, one row per step, then the run's status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = self.table(&PlainCells);
        let head = History::TABLE_HEAD;
        let mut widths = head.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| -> fmt::Result {
            let mut out = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<w$}  "));
                }
            }
            writeln!(f, "{}", out.trim_end())
        };
        line(f, &head)?;
        for row in &rows {
            line(f, &row.each_ref().map(String::as_str))?;
        }
        let status = match self.status {
            RunStatus::Running => "running",
            RunStatus::Failed => "failed",
            RunStatus::Completed => "completed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::NeedsAttention => "needs attention",
            RunStatus::Sleeping => "sleeping",
            RunStatus::Waiting => "waiting",
            RunStatus::Paused => "paused",
        };
        writeln!(
            f,
            "run {}: {status} ({} checkpoints kept)",
            self.run, self.checkpoints
        )?;
        if let Some(origin) = &self.forked_from {
            writeln!(f, "{origin}")?;
        }
        if let Some(c) = &self.compensation {
            writeln!(f, "{c}")?;
        }
        for signal in &self.signals {
            let from = if signal.sender.is_empty() {
                String::new()
            } else {
                format!(" from {}", signal.sender)
            };
            writeln!(
                f,
                "signal {}: {}{from} at {}",
                signal.name,
                signal.state.as_str(),
                PlainCells.time(signal.sent_at_ms)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use crate::store::Change;

    fn cp(
        seq: u32,
        ip: u32,
        step: &str,
        attempt: u32,
        status: RunStatus,
        ctx: &Context,
    ) -> Checkpoint {
        let mut cp = Checkpoint::new("r", "v", ip, step, ctx.snapshot()).in_pipeline("p");
        (cp.seq, cp.attempt, cp.status, cp.change) = (seq, attempt, status, Change::Full);
        cp.updated_at_ms = 1_000 * u64::from(seq);
        cp
    }

    #[test]
    fn rule20_history_tells_completed_failed_interrupted_and_retried_steps() {
        let c0 = Context::new().set("n", 0).expect("set");
        let c1 = c0.clone().set("a", 1).expect("set").remove("n");
        let journal = [
            cp(0, 1, "a", 1, RunStatus::Running, &c0),
            cp(1, 3, "b", 1, RunStatus::Running, &c1),
            cp(2, 3, "b", 1, RunStatus::Failed, &c1).failed("boom"),
            cp(3, 3, "b", 2, RunStatus::Running, &c1),
            cp(4, 3, "b", 3, RunStatus::Running, &c1),
            cp(
                5,
                9,
                "",
                1,
                RunStatus::Completed,
                &c1.set("b", true).expect("set"),
            ),
        ];
        let h = History::of("p/r", &journal);
        assert_eq!(
            h.steps
                .iter()
                .map(|s| (s.number, s.stage.as_str(), s.attempt, s.status))
                .collect::<Vec<_>>(),
            [
                (0, "a", 1, StepStatus::Completed),
                (1, "b", 1, StepStatus::Failed),
                (3, "b", 2, StepStatus::Interrupted),
                (4, "b", 3, StepStatus::Completed),
            ]
        );
        assert_eq!(
            (h.steps[0].written.clone(), h.steps[0].removed.clone()),
            (vec!["a".into()], vec!["n".into()])
        );
        assert_eq!(h.steps[1].error.as_deref(), Some("boom"));
        assert_eq!(h.steps[3].written, ["b"]);
        assert_eq!(h.steps[0].finished_at_ms, Some(1_000));
        assert_eq!(h.status, RunStatus::Completed);
        let table = h.to_string();
        assert!(table.starts_with("step  stage"), "{table}");
        // written and removed keys are told apart: step 0 wrote `a` and removed `n`
        assert!(table.contains("+a, -n"), "{table}");
        assert_eq!(marked('+', "-coupon"), "+-coupon");
        assert_eq!(marked('-', "coupon"), "-coupon");
        assert_eq!(marked('+', "a\nb"), "+\"a\\nb\"");
        assert_eq!(marked('+', ""), "+\"\"");
        assert_eq!(marked('+', "a\u{202e}b"), "+\"a\\u{202e}b\"");
        assert!(table.contains("1970-01-01T00:00:01.000Z"), "{table}");
        assert!(
            table.ends_with("run p/r: completed (6 checkpoints kept)\n"),
            "{table}"
        );
        assert_eq!(before(&journal, "b", Some(3)).map(|c| c.seq), Some(4));
        assert_eq!(before(&journal, "1", None).map(|c| c.seq), Some(1));
        assert!(
            before(&journal, "2", None).is_none(),
            "a failure is no step start"
        );
        assert!(before(&journal, "c", Some(7)).is_none());
    }
}
