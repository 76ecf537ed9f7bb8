//! Schedules (contract rule 32): a pipeline's runs started on a cron
//! pattern in a time zone, or every interval.
//!
//! ```
//! use std::time::Duration;
//! use fluxio_core::schedule::{CatchUp, Overlap, Schedule};
//!
//! let daily = Schedule::cron("0 9 * * MON-FRI", "Europe/Paris")?
//!     .overlap(Overlap::Skip)
//!     .catch_up(CatchUp::Latest);
//! let often = Schedule::every(Duration::from_secs(30))?;
//! assert!(Schedule::cron("61 * * * *", "UTC").is_err());
//! assert!(Schedule::cron("0 9 * * *", "Mars/Olympus").is_err());
//! # let _ = (daily, often);
//! # Ok::<(), fluxio_core::Error>(())
//! ```
//!
//! [`Pipeline::schedule`](crate::Pipeline::schedule) stores a schedule in
//! the pipeline's store, as a record of its own under the key
//! `~{pipeline}/{name}`: sleeping until its next tick, in the store's
//! due-index like any sleeping run. A [`RecoveryWorker`](crate::recovery::RecoveryWorker)
//! of the pipeline claims it when it is due (one worker: the claim takes its
//! lease), starts the tick's run and writes the next tick, so each tick
//! starts one run across every worker:
//!
//! - **The run's id** is `{name}:{tick}` (the tick in RFC 3339, UTC, to the
//!   millisecond: `nightly:2026-12-24T09:00:00.000Z`), and it is stored with
//!   the schedule's input, due at once for a worker, only if nothing is
//!   stored under it: a worker killed after starting a tick and before
//!   writing the next one leaves the schedule due, and the next worker
//!   starts nothing twice.
//! - **Overlap**: while the previous tick's run has not ended, a tick is
//!   skipped ([`Overlap::Skip`], the default), kept until it ends
//!   ([`Overlap::QueueOne`]: one tick at most, the later ones skipped), or
//!   started all the same ([`Overlap::Allow`]).
//! - **Catch-up** after a time with no worker: the latest missed tick runs
//!   ([`CatchUp::Latest`], the default), none of them ([`CatchUp::None`]:
//!   only a tick with no missed one before it runs), or the last `n`, oldest
//!   first ([`CatchUp::All`]).
//! - **Cron and daylight saving time** are croner's (Vixie cron's rules): a
//!   fixed-time pattern whose time falls in a gap (spring forward) runs at
//!   the first instant after the gap, and one whose time occurs twice (fall
//!   back) runs once, at the earlier; an interval or wildcard pattern
//!   (`*/15 * * * *`) runs on both instants of a repeated hour. Patterns take
//!   5 fields (minute first) or 6 (seconds first).
//!
//! Pausing, resuming and deleting a schedule work from any process
//! ([`Pipeline::pause_schedule`](crate::Pipeline::pause_schedule), `fluxio schedules pause`); a
//! paused schedule starts nothing, and resumed, catches up as its policy
//! says.

use std::str::FromStr as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::context::{Context, Snapshot};
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::store::{
    Change, Checkpoint, CheckpointStore, DueRun, Lease, MAX_LIST_LIMIT, MAX_UNTIL_MS, Mark,
    Pending, RunFilter, RunStatus,
};

/// The version a schedule's record is written with: what a worker claims
/// beside its pipeline's versions.
pub const SCHEDULE_VERSION: &str = "schedule";

/// What starts a schedule record's pipeline name: `~orders` keeps the
/// schedules of `orders` (no pipeline name can start with it).
pub const SCHEDULE_MARK: char = '~';

/// The shortest interval a schedule accepts.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The most missed ticks [`CatchUp::All`] runs.
pub const MAX_CATCH_UP: u32 = 1_000;

/// What a schedule does with a tick while the previous tick's run has not
/// ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Overlap {
    /// Skip the tick (the default).
    #[default]
    Skip,
    /// Keep one tick until the run ends, then start it; skip the later ones.
    QueueOne,
    /// Start it all the same.
    Allow,
}

/// Which ticks a schedule runs that were missed while no worker ran it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CatchUp {
    /// None: only a tick with no missed tick before it runs.
    None,
    /// The latest missed tick (the default).
    #[default]
    Latest,
    /// The last `n` missed ticks, oldest first (1 to [`MAX_CATCH_UP`]).
    All(u32),
}

/// When a schedule ticks, and what its runs get. See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    def: Definition,
    input: Snapshot,
}

/// What is stored of a schedule's definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Definition {
    cron: Option<String>,
    time_zone: Option<String>,
    every_ms: Option<u64>,
    overlap: Overlap,
    catch_up: CatchUp,
}

/// What a schedule has done, kept with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    /// Where interval ticks count from.
    anchor_ms: u64,
    /// The last tick run or skipped.
    last_tick_ms: Option<u64>,
    /// The run of the last tick started.
    last_run: Option<String>,
    /// A tick kept until the previous run ends ([`Overlap::QueueOne`]).
    queued_ms: Option<u64>,
    fired: u64,
    skipped: u64,
}

fn invalid(setting: &'static str, message: String) -> Error {
    Error::InvalidSetting { setting, message }
}

impl Schedule {
    /// A schedule on the cron `pattern` (5 fields, or 6 with seconds
    /// first) in the IANA time zone `time_zone` (`"UTC"`, `"Europe/Paris"`).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `cron` for a pattern that does not
    /// parse or never matches, or `time_zone` for a zone that does not
    /// exist.
    pub fn cron(pattern: &str, time_zone: &str) -> Result<Schedule> {
        let def = Definition {
            cron: Some(pattern.trim().to_owned()),
            time_zone: Some(time_zone.trim().to_owned()),
            every_ms: None,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
        };
        def.next_after(0, crate::store::now_ms())?.ok_or_else(|| {
            invalid(
                "cron",
                format!("{pattern:?} never matches a time: no run would start"),
            )
        })?;
        Ok(Schedule {
            def,
            input: Snapshot::default(),
        })
    }

    /// A schedule every `interval` (at least [`MIN_INTERVAL`]), counted
    /// from when it is first stored.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `interval` for a shorter interval
    /// or one past the year 9999.
    pub fn every(interval: Duration) -> Result<Schedule> {
        let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        if interval < MIN_INTERVAL || ms >= MAX_UNTIL_MS {
            return Err(invalid(
                "interval",
                format!(
                    "{interval:?} is out of range: a schedule ticks every 1 s or more, within the year 9999"
                ),
            ));
        }
        Ok(Schedule {
            def: Definition {
                cron: None,
                time_zone: None,
                every_ms: Some(ms),
                overlap: Overlap::default(),
                catch_up: CatchUp::default(),
            },
            input: Snapshot::default(),
        })
    }

    /// Each run's input.
    #[must_use]
    pub fn input(mut self, input: &Context) -> Schedule {
        self.input = input.snapshot();
        self
    }

    /// What a tick does while the previous run has not ended.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> Schedule {
        self.def.overlap = overlap;
        self
    }

    /// Which missed ticks run.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Schedule {
        self.def.catch_up = catch_up;
        self
    }

    /// The first `n` ticks after `after_ms` (ms since the Unix epoch), an
    /// interval counted from `after_ms`: when it would start runs.
    ///
    /// ```
    /// use fluxio_core::schedule::Schedule;
    /// // 2027-03-27T12:00:00Z; the night after, Paris skips 02:00-03:00
    /// let after = 1_806_148_800_000;
    /// let ticks = Schedule::cron("30 2 * * *", "Europe/Paris")?.ticks_after(after, 2)?;
    /// // the first instant after the gap (03:00 CEST, 01:00Z), then 02:30 CEST
    /// assert_eq!(ticks, [1_806_195_600_000, 1_806_280_200_000]);
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] as [`cron`](Self::cron) says.
    pub fn ticks_after(&self, after_ms: u64, n: usize) -> Result<Vec<u64>> {
        let mut ticks = Vec::with_capacity(n.min(1_000));
        let mut at = after_ms;
        while ticks.len() < n {
            let Some(next) = self.def.next_after(after_ms, at)? else {
                break;
            };
            ticks.push(next);
            at = next;
        }
        Ok(ticks)
    }

    fn check(&self) -> Result<()> {
        if let CatchUp::All(n) = self.def.catch_up {
            if n == 0 || n > MAX_CATCH_UP {
                return Err(invalid(
                    "catch_up",
                    format!("CatchUp::All({n}) is out of range: 1 to {MAX_CATCH_UP} ticks"),
                ));
            }
        }
        Ok(())
    }
}

impl Definition {
    /// The first tick strictly after `after_ms`, for intervals counted
    /// from `anchor_ms`; `None` when there is none before the year 9999.
    fn next_after(&self, anchor_ms: u64, after_ms: u64) -> Result<Option<u64>> {
        Ok(self.ticker(anchor_ms)?.next_after(after_ms))
    }

    /// The definition parsed once, for intervals counted from `anchor_ms`.
    fn ticker(&self, anchor_ms: u64) -> Result<Ticker> {
        if let Some(every) = self.every_ms {
            return Ok(Ticker::Every {
                anchor: anchor_ms,
                every: every.max(1),
            });
        }
        let (Some(pattern), Some(zone)) = (&self.cron, &self.time_zone) else {
            return Err(invalid(
                "cron",
                "a schedule with neither a pattern nor an interval".to_owned(),
            ));
        };
        let cron = croner::Cron::from_str(pattern)
            .map_err(|e| invalid("cron", format!("{pattern:?} is not a cron pattern: {e}")))?;
        let tz = jiff::tz::TimeZone::get(zone)
            .map_err(|e| invalid("time_zone", format!("{zone:?} is not a time zone: {e}")))?;
        Ok(Ticker::Cron {
            cron: Box::new(cron),
            tz,
        })
    }

    /// The ticks due by `now`, after the last one, as the catch-up policy
    /// picks them, oldest first; the latest tick due; and how many were
    /// due (counted up to 10,000). Found backwards from `now`, so a long
    /// pause of a frequent schedule costs what a short one does.
    fn due_ticks(&self, state: &State, now: u64) -> Result<(Vec<u64>, Option<u64>, u64)> {
        let ticker = self.ticker(state.anchor_ms)?;
        let from = state.last_tick_ms.unwrap_or(state.anchor_ms);
        let Some(latest) = ticker.at_or_before(now).filter(|at| *at > from) else {
            return Ok((Vec::new(), None, 0));
        };
        let keep = match self.catch_up {
            CatchUp::All(n) => n.max(1) as usize,
            CatchUp::None | CatchUp::Latest => 1,
        };
        let mut due = vec![latest];
        while due.len() < keep {
            let before = due.last().map_or(0, |at| at.saturating_sub(1));
            match ticker.at_or_before(before) {
                Some(at) if at > from => due.push(at),
                _ => break,
            }
        }
        due.reverse();
        let mut count = 0u64;
        let mut at = from;
        while count < 10_000 {
            match ticker.next_after(at) {
                Some(next) if next <= latest => {
                    count += 1;
                    at = next;
                }
                _ => break,
            }
        }
        if self.catch_up == CatchUp::None && count > 1 {
            return Ok((Vec::new(), Some(latest), count));
        }
        Ok((due, Some(latest), count))
    }

    fn describe(&self) -> String {
        match (&self.cron, &self.time_zone, self.every_ms) {
            (Some(cron), Some(tz), _) => format!("cron {cron:?} in {tz}"),
            (_, _, Some(ms)) => format!(
                "every {}",
                humantime::format_duration(Duration::from_millis(ms))
            ),
            _ => "-".to_owned(),
        }
    }
}

/// A schedule's definition parsed: when it ticks.
enum Ticker {
    Every {
        anchor: u64,
        every: u64,
    },
    Cron {
        cron: Box<croner::Cron>,
        tz: jiff::tz::TimeZone,
    },
}

impl Ticker {
    /// The first tick strictly after `after_ms`; `None` past the year 9999.
    fn next_after(&self, after_ms: u64) -> Option<u64> {
        let next = match self {
            Ticker::Every { anchor, every } => {
                let k = after_ms.saturating_sub(*anchor) / every + 1;
                anchor.saturating_add(k.saturating_mul(*every))
            }
            Ticker::Cron { cron, tz } => {
                let after = zoned(after_ms, tz)?;
                let next = cron.find_next_occurrence(&after, false).ok()?;
                u64::try_from(next.timestamp().as_millisecond()).ok()?
            }
        };
        (next < MAX_UNTIL_MS).then_some(next)
    }

    /// The last tick at or before `at_ms` (an interval's after its anchor).
    fn at_or_before(&self, at_ms: u64) -> Option<u64> {
        match self {
            Ticker::Every { anchor, every } => {
                let k = at_ms.checked_sub(*anchor)? / every;
                (k > 0).then(|| anchor.saturating_add(k.saturating_mul(*every)))
            }
            Ticker::Cron { cron, tz } => {
                let at = zoned(at_ms, tz)?;
                let prev = cron.find_previous_occurrence(&at, true).ok()?;
                u64::try_from(prev.timestamp().as_millisecond()).ok()
            }
        }
    }
}

/// `ms` since the Unix epoch in `tz`.
fn zoned(ms: u64, tz: &jiff::tz::TimeZone) -> Option<jiff::Zoned> {
    let ts = jiff::Timestamp::from_millisecond(i64::try_from(ms).ok()?).ok()?;
    Some(ts.to_zoned(tz.clone()))
}

/// A stored schedule, as [`Pipeline::schedules`](crate::Pipeline::schedules) and
/// `fluxio schedules list` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its store key (`~orders/nightly`).
    pub key: String,
    /// The pipeline whose runs it starts.
    pub pipeline: String,
    /// Its name.
    pub name: String,
    /// When it ticks: `cron "0 9 * * *" in Europe/Paris`, `every 30s`.
    pub every: String,
    /// Its overlap and catch-up policies.
    pub overlap: Overlap,
    /// See `overlap`.
    pub catch_up: CatchUp,
    /// Whether it is paused.
    pub paused: bool,
    /// Its next tick (ms since the Unix epoch).
    pub next_ms: Option<u64>,
    /// The last tick it ran or skipped.
    pub last_tick_ms: Option<u64>,
    /// The id of the last run it started.
    pub last_run: Option<String>,
    /// How many runs it started, and how many ticks it skipped.
    pub fired: u64,
    /// See `fired`.
    pub skipped: u64,
}

impl ScheduleInfo {
    /// The schedule stored under `key` as `cp`.
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] naming the key when `cp` is not a
    /// schedule.
    pub fn of(key: &str, cp: &Checkpoint) -> Result<ScheduleInfo> {
        let (def, state, _) = read(key, cp)?;
        Ok(ScheduleInfo {
            key: key.to_owned(),
            pipeline: cp.pipeline.trim_start_matches(SCHEDULE_MARK).to_owned(),
            name: cp.run_id.clone(),
            every: def.describe(),
            overlap: def.overlap,
            catch_up: def.catch_up,
            paused: cp.status == RunStatus::Paused,
            next_ms: cp.pending.as_ref().and_then(|p| p.until_ms),
            last_tick_ms: state.last_tick_ms,
            last_run: state.last_run,
            fired: state.fired,
            skipped: state.skipped,
        })
    }
}

/// The store key of schedule `name` of `pipeline`.
#[must_use]
pub fn schedule_key(pipeline: &str, name: &str) -> String {
    format!("{SCHEDULE_MARK}{pipeline}/{name}")
}

/// The id of the run a schedule `name` starts for `tick_ms`.
#[must_use]
pub fn tick_run_id(name: &str, tick_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(tick_ms);
    format!("{name}:{}", humantime::format_rfc3339_millis(at))
}

/// The definition, state and run input of the schedule stored as `cp`.
fn read(key: &str, cp: &Checkpoint) -> Result<(Definition, State, Snapshot)> {
    let corrupt = |why: String| Error::CorruptCheckpoint {
        run_id: key.to_owned(),
        reason: format!("not a schedule: {why}"),
        source: None,
    };
    if cp.version != SCHEDULE_VERSION {
        return Err(corrupt(format!("its version is {:?}", cp.version)));
    }
    let ctx = Context::from(cp.context.clone());
    let def: Definition = ctx.get("schedule").map_err(|e| corrupt(e.to_string()))?;
    let state: State = ctx.get("state").map_err(|e| corrupt(e.to_string()))?;
    let mut input = Context::new();
    for (k, v) in cp.context.entries() {
        if let Some(k) = k.strip_prefix("input.") {
            input = input.set_encoded(k.to_owned(), v.clone());
        }
    }
    Ok((def, state, input.snapshot()))
}

/// The context a schedule is stored with.
fn context(def: &Definition, state: &State, input: &Snapshot) -> Result<Snapshot> {
    let mut ctx = Context::new().set("schedule", def)?.set("state", state)?;
    for (k, v) in input.entries() {
        ctx = ctx.set_encoded(format!("input.{k}"), v.clone());
    }
    Ok(ctx.snapshot())
}

/// `cp`'s successor holding `ctx`, sleeping until `next` (for good when
/// there is none), keeping `status` when paused, the journal cut to it.
fn successor(cp: Checkpoint, ctx: Snapshot, next: Option<u64>) -> Checkpoint {
    let paused = cp.status == RunStatus::Paused;
    let mut next_cp = crate::store::successor(cp);
    next_cp.change = Change::Full;
    next_cp.keep_from = next_cp.seq;
    next_cp.context = ctx;
    next_cp.updated_at_ms = crate::store::now_ms();
    let mut next_cp = next_cp.parked(Pending::sleep(next.unwrap_or(MAX_UNTIL_MS)));
    if paused {
        next_cp = next_cp.paused();
    }
    next_cp
}

/// How long an operation on a schedule holds its lease.
const LEASE: Duration = Duration::from_secs(30);

impl Pipeline {
    /// Stores schedule `name` of this pipeline (contract rule 32), or
    /// updates the one stored under it, keeping what it has done (its last
    /// tick), so a service can call this at every start. See the
    /// [`schedule`](crate::schedule) module.
    ///
    /// # Errors
    /// [`Error::NotDurable`] without a store; [`Error::InvalidRunId`] for a
    /// name that is not a valid run id or holds `/`;
    /// [`Error::InvalidSetting`] naming `catch_up`; [`Error::Paused`] when a
    /// paused schedule's definition would change; [`Error::RunIdInUse`]
    /// while a worker fires it; the store's errors.
    pub async fn schedule(&self, name: &str, schedule: Schedule) -> Result<ScheduleInfo> {
        schedule.check()?;
        let (store, key) = self.schedule_key(name)?;
        let now = self.clock().now_ms(Some(store.as_ref())).await?;
        let lease = store.acquire_lease(&key, LEASE).await?;
        let written = async {
            let stored = store.load(&key).await?;
            let cp = match stored {
                Some(cp) => {
                    let (def, state, input) = read(&key, &cp)?;
                    if def == schedule.def && input == schedule.input {
                        return Ok(cp);
                    }
                    if cp.status == RunStatus::Paused {
                        return Err(Error::Paused {
                            run_id: key.clone(),
                        });
                    }
                    let after = now.max(state.last_tick_ms.unwrap_or(0));
                    let next = schedule.def.next_after(state.anchor_ms, after)?;
                    let ctx = context(&schedule.def, &state, &schedule.input)?;
                    successor(cp, ctx, next)
                }
                None => {
                    let state = State {
                        anchor_ms: now,
                        ..State::default()
                    };
                    let next = schedule.def.next_after(now, now)?;
                    let ctx = context(&schedule.def, &state, &schedule.input)?;
                    let name_of = self.name().to_owned();
                    let mut cp = Checkpoint::new(name, SCHEDULE_VERSION, 0, "schedule", ctx)
                        .in_pipeline(format!("{SCHEDULE_MARK}{name_of}"));
                    cp.created_at_ms = crate::store::now_ms();
                    cp.updated_at_ms = cp.created_at_ms;
                    cp.parked(Pending::sleep(next.unwrap_or(MAX_UNTIL_MS)))
                }
            };
            store.save_fenced(cp.clone(), &lease).await?;
            Ok(cp)
        }
        .await;
        let released = store.release_lease(lease).await;
        let cp = written?;
        released?;
        tracing::info!(schedule = %key, "stored a schedule");
        ScheduleInfo::of(&key, &cp)
    }

    /// This pipeline's schedules, in name order.
    ///
    /// # Errors
    /// [`Error::NotDurable`] without a store; [`Error::Unsupported`] on a
    /// store that does not list runs; the store's errors.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let store = self.store().ok_or(Error::NotDurable {
            operation: "schedules",
        })?;
        stored_schedules(store.as_ref(), Some(self.name())).await
    }

    /// Pauses schedule `name` from any process: it starts nothing until
    /// resumed.
    ///
    /// # Errors
    /// As [`CheckpointStore::mark`]: [`Error::CheckpointNotFound`] for no
    /// such schedule.
    pub async fn pause_schedule(&self, name: &str) -> Result<()> {
        let (store, key) = self.schedule_key(name)?;
        store.mark(&key, Mark::Pause).await
    }

    /// Resumes schedule `name`: missed ticks run as its catch-up policy
    /// says.
    ///
    /// # Errors
    /// As [`CheckpointStore::mark`]: [`Error::NotPaused`] when it is not
    /// paused.
    pub async fn resume_schedule(&self, name: &str) -> Result<()> {
        let (store, key) = self.schedule_key(name)?;
        let now = self.clock().now_ms(Some(store.as_ref())).await?;
        store.mark(&key, Mark::Unpause { now_ms: now }).await
    }

    /// Deletes schedule `name` (the runs it started stay).
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] for no such schedule;
    /// [`Error::RunIdInUse`] while a worker fires it; the store's errors.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        let (store, key) = self.schedule_key(name)?;
        delete_schedule(store.as_ref(), &key).await
    }

    fn schedule_key(&self, name: &str) -> Result<(&std::sync::Arc<dyn CheckpointStore>, String)> {
        crate::store::check_run_id(name)?;
        if name.contains('/') {
            return Err(Error::InvalidRunId {
                run_id: name.chars().take(64).collect(),
                reason: "a schedule's name holds no `/`",
            });
        }
        let store = self.store().ok_or(Error::NotDurable {
            operation: "schedule",
        })?;
        let key = schedule_key(self.name(), name);
        crate::store::check_run_id(&key)?;
        Ok((store, key))
    }
}

/// The schedules stored in `store` (of `pipeline`, or of every pipeline),
/// in key order: what `fluxio schedules list` shows.
///
/// # Errors
/// [`Error::Unsupported`] on a store that does not list runs; the store's
/// errors.
pub async fn stored_schedules(
    store: &dyn CheckpointStore,
    pipeline: Option<&str>,
) -> Result<Vec<ScheduleInfo>> {
    let mut filter = RunFilter::new().limit(MAX_LIST_LIMIT);
    if let Some(p) = pipeline {
        filter = filter.pipeline(format!("{SCHEDULE_MARK}{p}"));
    }
    let mut out = Vec::new();
    loop {
        let page = store.list_runs(&filter).await?;
        for run in &page.runs {
            if !run.pipeline.starts_with(SCHEDULE_MARK) || run.version != SCHEDULE_VERSION {
                continue;
            }
            if let Some(cp) = store.load(&run.key).await? {
                out.push(ScheduleInfo::of(&run.key, &cp)?);
            }
        }
        match page.next {
            Some(next) => filter = filter.after(next),
            None => return Ok(out),
        }
    }
}

/// Deletes the schedule stored under `key`, taking its lease first.
///
/// # Errors
/// [`Error::CheckpointNotFound`]; [`Error::RunIdInUse`] while a worker
/// fires it; the store's errors.
pub async fn delete_schedule(store: &dyn CheckpointStore, key: &str) -> Result<()> {
    let lease = store.acquire_lease(key, LEASE).await?;
    let deleted = async {
        let Some(cp) = store.load(key).await? else {
            return Err(Error::CheckpointNotFound {
                run_id: key.to_owned(),
            });
        };
        read(key, &cp)?;
        store.delete(key).await
    }
    .await;
    let released = store.release_lease(lease).await;
    deleted?;
    released
}

/// A worker fires the due schedule `run` of `pipeline`, claimed with
/// `lease` at `now`: starts the runs of its due ticks as its policies
/// say, and writes its next tick, giving the lease back. Returns how many
/// runs it started.
pub(crate) async fn fire(pipeline: &Pipeline, run: &DueRun, lease: Lease, now: u64) -> Result<u64> {
    let Some(store) = pipeline.store() else {
        return Err(Error::NotDurable {
            operation: "fire a schedule",
        });
    };
    match ticked(pipeline, store.as_ref(), run, now).await {
        Ok(Some((next, fired))) => {
            store.finish_run(next, lease, false).await?;
            Ok(fired)
        }
        Ok(None) => {
            store.release_lease(lease).await?;
            Ok(0)
        }
        Err(e) => {
            // the record stays due: the next worker claims it now, not
            // once this claim's lease lapses
            let _ = store.release_lease(lease).await;
            Err(e)
        }
    }
}

/// What firing the due schedule `run` at `now` writes, after starting its
/// due ticks' runs: its next checkpoint and how many runs it started;
/// `None` when it is not due (fired by another worker since, paused,
/// deleted).
async fn ticked(
    pipeline: &Pipeline,
    store: &dyn CheckpointStore,
    run: &DueRun,
    now: u64,
) -> Result<Option<(Checkpoint, u64)>> {
    let Some(cp) = store.load(&run.key).await? else {
        return Ok(None);
    };
    let due = cp.status == RunStatus::Sleeping
        && cp
            .pending
            .as_ref()
            .and_then(|p| p.until_ms)
            .is_some_and(|at| at <= now);
    if !due {
        return Ok(None);
    }
    let (def, mut state, input) = read(&run.key, &cp)?;
    let name = cp.run_id.clone();
    let before = state.fired;
    // a kept tick goes first, once the run before it has ended
    if let Some(queued) = state.queued_ms {
        if !open(pipeline, state.last_run.as_deref()).await? {
            start(pipeline, &name, queued, &input, &mut state).await?;
            state.queued_ms = None;
        }
    }
    let (ticks, latest, due) = def.due_ticks(&state, now)?;
    // the missed ticks the catch-up policy leaves out count as skipped
    state.skipped += due.saturating_sub(ticks.len() as u64);
    for tick in ticks {
        if def.overlap != Overlap::Allow && open(pipeline, state.last_run.as_deref()).await? {
            if def.overlap == Overlap::QueueOne && state.queued_ms.is_none() {
                state.queued_ms = Some(tick);
            } else {
                state.skipped += 1;
            }
            state.last_tick_ms = Some(tick);
            continue;
        }
        start(pipeline, &name, tick, &input, &mut state).await?;
    }
    state.last_tick_ms = state.last_tick_ms.max(latest);
    let after = now.max(state.last_tick_ms.unwrap_or(0));
    let mut next = def.next_after(state.anchor_ms, after)?;
    if state.queued_ms.is_some() {
        // look at the run it waits for again soon
        let soon = now.saturating_add(1_000);
        next = Some(next.map_or(soon, |n| n.min(soon)));
    }
    let ctx = context(&def, &state, &input)?;
    Ok(Some((successor(cp, ctx, next), state.fired - before)))
}

/// Starts tick `tick`'s run of schedule `name`, due at once, unless it is
/// stored already.
async fn start(
    pipeline: &Pipeline,
    name: &str,
    tick: u64,
    input: &Snapshot,
    state: &mut State,
) -> Result<()> {
    use crate::child::ChildRuns as _;
    let id = tick_run_id(name, tick);
    pipeline.submit(&id, input.clone(), None).await?;
    tracing::info!(schedule = name, run = %id, "a schedule started a run");
    state.fired += 1;
    state.last_tick_ms = Some(tick);
    state.last_run = Some(id);
    Ok(())
}

/// Whether the run `run_id` of `pipeline` has not ended.
async fn open(pipeline: &Pipeline, run_id: Option<&str>) -> Result<bool> {
    use crate::child::ChildRuns as _;
    let Some(run_id) = run_id else {
        return Ok(false);
    };
    Ok(pipeline.latest(run_id).await?.is_some_and(|cp| {
        !matches!(
            cp.status,
            RunStatus::Completed
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::NeedsAttention
        )
    }))
}
