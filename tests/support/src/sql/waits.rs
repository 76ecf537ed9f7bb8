//! Runs that wait in SQL (contract rules 25-28), past what the conformance
//! suite checks through the API: the run row's due time, written with its
//! checkpoint and cleared when the run goes on or is cancelled; the
//! mailbox, which goes with its run; the bounds of wake times and
//! payloads; tables of the schema before waits; the wake-ups; the clock.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{
    Begin, Checkpoint, CheckpointStore, Delivery, DueFilter, MAX_SIGNAL_PAYLOAD, MAX_UNTIL_MS,
    Payload, Pending, RunEventKind, RunFilter, RunState, Signal, WaitName,
};

use super::{SqlHarness, open};

const TTL: Duration = Duration::from_secs(30);

/// A signal for `name` carrying `value`.
fn signal(name: &str, value: &str) -> Signal {
    Signal::new(name, Payload::new(value).expect("encodes"), "sql check").expect("a name")
}

/// Writes `cp` as its owner does when it parks (its last write).
async fn park<S: CheckpointStore>(store: &S, cp: Checkpoint) {
    let lease = store.acquire_lease(&cp.key(), TTL).await.expect("acquire");
    store.finish_run(cp, lease, false).await.expect("park");
}

/// The `due_at` of run `key`'s row (-1: NULL).
async fn due_at<H: SqlHarness>(h: &H, key: &str) -> i64 {
    h.scalar(&format!(
        "SELECT coalesce(max(due_at), -1) FROM {{s}}.fluxio_checkpoints WHERE run_id = '{key}'"
    ))
    .await
}

/// How many entries the mailbox of run `key` holds, in SQL.
async fn entries<H: SqlHarness>(h: &H, key: &str) -> i64 {
    h.scalar(&format!(
        "SELECT count(*) FROM {{s}}.fluxio_checkpoints_signals WHERE run_id = '{key}'"
    ))
    .await
}

/// Rule 27: a parked run's row holds when it is due, written with its
/// checkpoint: its wake time or deadline (`u64::MAX` read as
/// [`MAX_UNTIL_MS`], which stores and lists), 0 once a signal it waits for
/// came, nothing for a wait only a signal ends; a run that goes on, or is
/// cancelled, is due no more.
pub async fn rule27_the_due_time_is_written_with_the_checkpoint_and_cleared_after<H: SqlHarness>(
    h: &H,
) {
    let store = open(h).await;
    let asleep = crate::checkpoint("nap", 2)
        .in_pipeline("p")
        .parked(Pending::sleep(u64::MAX));
    park(&store, asleep.clone()).await;
    assert_eq!(
        due_at(h, "p/nap").await,
        i64::try_from(MAX_UNTIL_MS).expect("fits")
    );
    let page = store
        .list_runs(&RunFilter::new().state(RunState::Sleeping))
        .await
        .expect("list");
    assert_eq!(page.runs.len(), 1, "{page:?}");
    assert!(
        store
            .due_runs(&DueFilter::new(MAX_UNTIL_MS - 1))
            .await
            .expect("due")
            .is_empty()
    );
    let due = store
        .due_runs(&DueFilter::new(u64::MAX))
        .await
        .expect("due");
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].key.as_str(), due[0].due_ms),
        ("p/nap", MAX_UNTIL_MS)
    );
    assert_eq!(
        store.load("p/nap").await.expect("load"),
        Some(asleep.clone())
    );

    let waits = vec![WaitName::new("ok", "alloc::string::String")];
    let forever = crate::checkpoint("wait", 2)
        .in_pipeline("p")
        .parked(Pending::wait(waits.clone(), None));
    park(&store, forever).await;
    assert_eq!(due_at(h, "p/wait").await, -1, "only a signal ends it");
    let page = store
        .list_runs(&RunFilter::new().state(RunState::Waiting))
        .await
        .expect("list");
    assert_eq!(page.runs.len(), 1, "{page:?}");
    store
        .send_signal("p/wait", signal("other", "x"))
        .await
        .expect("kept");
    assert_eq!(due_at(h, "p/wait").await, -1, "not a name it waits for");
    store
        .send_signal("p/wait", signal("ok", "x"))
        .await
        .expect("sent");
    assert_eq!(due_at(h, "p/wait").await, 0, "due at once");
    // a waiting run written again (a refused signal, a crash) reads its
    // mailbox: still due at once
    let mut again = crate::checkpoint("wait", 2)
        .in_pipeline("p")
        .parked(Pending::wait(waits, Some(u64::MAX)));
    again.seq = 1;
    park(&store, again).await;
    assert_eq!(due_at(h, "p/wait").await, 0, "its signal is still there");

    store
        .cancel("p/nap")
        .await
        .expect("a sleeping run is cancelled");
    assert_eq!(due_at(h, "p/nap").await, -1, "a cancelled run is not due");
    let lease = store.acquire_lease("p/wait", TTL).await.expect("acquire");
    let mut going_on = crate::checkpoint("wait", 3).in_pipeline("p");
    going_on.seq = 2;
    store.save_fenced(going_on, &lease).await.expect("goes on");
    assert_eq!(
        due_at(h, "p/wait").await,
        -1,
        "a run that goes on is not due"
    );
    store.release_lease(lease).await.expect("release");
    let due = store
        .due_runs(&DueFilter::new(u64::MAX))
        .await
        .expect("due");
    assert!(due.is_empty(), "{due:?}");
}

/// Rule 26: a run's mailbox goes with it: with `delete`, with
/// `delete_fenced`, with a run that replaces it under its key (`begin_run`
/// [`Begin::Replace`], or a first checkpoint written fenced); a plain save
/// replaces it with the checkpoint's own.
pub async fn rule26_a_mailbox_goes_with_its_run<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    let run = crate::checkpoint("r", 1).in_pipeline("p");
    let sent = async |store: &H::Store| {
        store.save(run.clone()).await.expect("save");
        store
            .send_signal("p/r", signal("ok", "x"))
            .await
            .expect("sent");
        assert_eq!(entries(h, "p/r").await, 1);
    };
    sent(&store).await;
    store.delete("p/r").await.expect("delete");
    assert_eq!(entries(h, "p/r").await, 0, "delete");

    sent(&store).await;
    let lease = store.acquire_lease("p/r", TTL).await.expect("acquire");
    store.delete_fenced("p/r", &lease).await.expect("delete");
    store.release_lease(lease).await.expect("release");
    assert_eq!(entries(h, "p/r").await, 0, "delete_fenced");

    sent(&store).await;
    let first = crate::checkpoint("r", 0).in_pipeline("p");
    let begun = store
        .begin_run(first.clone(), TTL, Begin::Replace)
        .await
        .expect("begin");
    assert_eq!(entries(h, "p/r").await, 0, "a run replaced");
    store
        .save_fenced(run.clone(), &begun.lease)
        .await
        .expect("save");
    store
        .send_signal("p/r", signal("ok", "x"))
        .await
        .expect("sent");
    store
        .save_fenced(first, &begun.lease)
        .await
        .expect("a first write");
    assert_eq!(
        entries(h, "p/r").await,
        0,
        "a first checkpoint written fenced"
    );
    store.release_lease(begun.lease).await.expect("release");

    sent(&store).await;
    let mut carried = run.clone();
    carried.signals = vec![signal("a", "1"), signal("b", "2")];
    store.save(carried).await.expect("save");
    let names: Vec<String> = store
        .signals("p/r")
        .await
        .expect("signals")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["a", "b"], "a plain save carries its mailbox");
}

/// Rule 26: a payload of [`MAX_SIGNAL_PAYLOAD`] bytes stores and reads
/// back whole, where the server takes a statement that long; where it
/// does not (MySQL's `max_allowed_packet`, 16 MiB by default on MariaDB),
/// it is refused before it is sent with `ValueTooLarge` naming the limit,
/// and the run stays signalable.
pub async fn rule26_a_signal_payload_of_16_mib_stores_or_is_refused_by_name<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    store
        .save(crate::checkpoint("big", 1).in_pipeline("p"))
        .await
        .expect("save");
    // the longest text within the limit (which counts 21 bytes more: the
    // value's header, and the key it is refused by)
    let text = "x".repeat(MAX_SIGNAL_PAYLOAD - 21);
    let payload = Payload::new(&text).expect("within the limit");
    assert!(payload.bytes().len() > MAX_SIGNAL_PAYLOAD - 32);
    assert!(Payload::new(&format!("{text}x")).is_err(), "the longest");
    let big = Signal::new("doc", payload.clone(), "sql check").expect("a name");
    match store.send_signal("p/big", big).await {
        Ok(Delivery::Delivered) => {
            let mailbox = store.signals("p/big").await.expect("signals");
            assert_eq!(mailbox.len(), 1);
            assert!(mailbox[0].payload == payload, "read back whole");
        }
        Err(Error::ValueTooLarge { key, size, limit }) => {
            assert_eq!(H::BACKEND, "mysql", "only a packet limit refuses it");
            assert_eq!(key, "signal payload");
            assert!(size > limit, "{size} > {limit}");
            let small = store.send_signal("p/big", signal("doc", "a link")).await;
            assert_eq!(small.expect("still signalable"), Delivery::Delivered);
        }
        other => panic!("{other:?}"),
    }
}

/// Schema version before waits: its tables gain the due time and the
/// mailbox when a store of this build opens them; their runs keep working
/// (not due), and runs park and are signalled in them. `undo` is the
/// store's SQL that takes its tables back to before the waits migration
/// (its bookkeeping row included; `{s}.` for the namespace).
pub async fn rule27_tables_before_waits_gain_the_due_time_and_the_mailbox<H: SqlHarness>(
    h: &H,
    undo: &str,
) {
    let first = open(h).await;
    let old = crate::checkpoint("old", 1).in_pipeline("p");
    first.save(old.clone()).await.expect("save");
    drop(first);
    h.execute(undo).await;
    h.insert_old_row("p/older", "v", "failed", &[]).await;

    let store = open(h).await;
    assert_eq!(store.load("p/old").await.expect("load"), Some(old));
    assert_eq!(
        h.scalar("SELECT count(*) FROM {s}.fluxio_checkpoints WHERE due_at IS NULL")
            .await,
        2,
        "runs of earlier builds are not due"
    );
    assert!(
        store
            .due_runs(&DueFilter::new(u64::MAX))
            .await
            .expect("due")
            .is_empty()
    );
    let sent = store.send_signal("p/old", signal("ok", "x")).await;
    assert_eq!(sent.expect("a mailbox"), Delivery::Delivered);
    park(
        &store,
        crate::checkpoint("nap", 2)
            .in_pipeline("p")
            .parked(Pending::sleep(5)),
    )
    .await;
    let due = store.due_runs(&DueFilter::new(5)).await.expect("due");
    assert_eq!(due.len(), 1, "{due:?}");
}

/// Rule 27: a store that tells wake-ups tells its watchers when a run
/// parks (due), is signalled a name it waits for (due) and ends (ended);
/// a store that tells none answers `None` (its workers poll).
pub async fn rule27_watchers_are_told_when_a_run_parks_is_signalled_or_ends<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    let Some(mut events) = store.watch().await.expect("watch") else {
        assert_eq!(H::BACKEND, "mysql", "only MySQL tells no wake-ups");
        return;
    };
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("told within 10 s")
            .expect("the events go on")
    };
    let waits = vec![WaitName::new("ok", "alloc::string::String")];
    let waiting = crate::checkpoint("w", 2)
        .in_pipeline("p")
        .parked(Pending::wait(waits, None));
    park(&store, waiting).await;
    let told = next().await;
    assert_eq!((told.key.as_str(), told.kind), ("p/w", RunEventKind::Due));
    store
        .send_signal("p/w", signal("ok", "x"))
        .await
        .expect("sent");
    let told = next().await;
    assert_eq!((told.key.as_str(), told.kind), ("p/w", RunEventKind::Due));
    store.cancel("p/w").await.expect("cancel");
    let told = next().await;
    assert_eq!((told.key.as_str(), told.kind), ("p/w", RunEventKind::Ended));
}

/// Rule 28: the store's clock is the database's, in milliseconds since
/// the Unix epoch (here, on the same host, within a minute of this
/// process's).
pub async fn rule28_the_clock_is_the_databases<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    let ms = store.clock_ms().await.expect("clock").expect("a clock");
    let here = crate::child::unix_ms();
    assert!(ms.abs_diff(here) < 60_000, "{ms} against {here}");
}

/// Completes run `id` of pipeline `p` with a signal in its mailbox: the
/// mailbox stays with the run through its fenced writes.
async fn complete_with_mail<H: SqlHarness>(h: &H, store: &H::Store, id: &str) {
    let key = format!("p/{id}");
    store
        .save(crate::checkpoint(id, 1).in_pipeline("p"))
        .await
        .expect("save");
    store
        .send_signal(&key, signal("ok", "x"))
        .await
        .expect("sent");
    let lease = store.acquire_lease(&key, TTL).await.expect("acquire");
    let mut done = crate::checkpoint(id, 2).in_pipeline("p").completed();
    done.seq = 1;
    store
        .finish_run(done, lease, false)
        .await
        .expect("complete");
    assert_eq!(entries(h, &key).await, 1, "the mailbox stays with the run");
}

/// Rule 26: the runs that retention takes, kept past the newest completed
/// (`keep_completed`) or purged past their time (`purge_expired`), take
/// their mailbox with them. `builder` makes a builder of a store on the
/// harness's tables.
pub async fn rule26_trimmed_and_purged_runs_take_their_mailbox<H, T>(
    h: &H,
    builder: impl Fn() -> T::Builder,
) where
    H: SqlHarness,
    T: super::SqlStore<Store = H::Store>,
{
    let keeping = T::connect(T::keep_completed(builder(), Some(1)))
        .await
        .expect("open");
    complete_with_mail(h, &keeping, "a").await;
    complete_with_mail(h, &keeping, "b").await;
    assert_eq!(entries(h, "p/a").await, 0, "trimmed with its run");
    let expiring = T::connect(T::completed_retention(
        builder(),
        Some(Duration::from_millis(1)),
    ))
    .await
    .expect("open");
    complete_with_mail(h, &expiring, "c").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(T::purge_expired(&expiring).await.expect("purge") >= 1);
    assert_eq!(entries(h, "p/c").await, 0, "purged with its run");
}

/// The checks of this module as `#[tokio::test]`s of harness `$harness`
/// (whose store's types are `$types`): `before_waits`, the store's SQL
/// that takes its tables back to before the waits migration (see
/// [`rule27_tables_before_waits_gain_the_due_time_and_the_mailbox`]);
/// `builder`, a builder of a store on the harness `$h`'s tables.
///
/// ```ignore
/// fluxio_test_support::sql_waits_tests! { Sqlite, sql::Types;
///     before_waits = BEFORE_WAITS,
///     builder = |h| SqliteStore::builder(h.file()),
/// }
/// ```
#[macro_export]
macro_rules! sql_waits_tests {
    ($harness:ty, $types:ty; before_waits = $undo:expr, builder = |$h:ident| $builder:expr $(,)?) => {
        $crate::sql_tests! { $harness;
            rule27_the_due_time_is_written_with_the_checkpoint_and_cleared_after,
            rule26_a_mailbox_goes_with_its_run,
            rule26_a_signal_payload_of_16_mib_stores_or_is_refused_by_name,
            rule27_watchers_are_told_when_a_run_parks_is_signalled_or_ends,
            rule28_the_clock_is_the_databases,
        }

        #[tokio::test]
        async fn rule27_tables_before_waits_gain_the_due_time_and_the_mailbox() {
            $crate::sql::run::<$harness, _, _>("before_waits", |h| async move {
                $crate::sql::rule27_tables_before_waits_gain_the_due_time_and_the_mailbox(
                    &*h, $undo,
                )
                .await;
            })
            .await;
        }

        #[tokio::test]
        async fn rule26_trimmed_and_purged_runs_take_their_mailbox() {
            $crate::sql::run::<$harness, _, _>("mail_retention", |$h| async move {
                $crate::sql::rule26_trimmed_and_purged_runs_take_their_mailbox::<$harness, $types>(
                    &*$h,
                    || $builder,
                )
                .await;
            })
            .await;
        }
    };
}
