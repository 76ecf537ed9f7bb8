//! # fluxio-redis: a Redis checkpoint store for fluxio
//!
//! [`RedisStore`] keeps the checkpoints of durable pipelines in Redis, so a
//! run that failed or whose process died is resumed by any process that
//! connects to the same server, and two processes never execute the same run
//! id at once (leases with fencing tokens, kept in Redis).
//!
//! ```no_run
//! use fluxio::{Context, StageResult, ctx, pipeline, stage};
//! use fluxio_redis::RedisStore;
//!
//! #[stage]
//! async fn charge(ctx: Context) -> StageResult {
//!     let cents: u64 = ctx.get("cents")?;
//!     Ok(ctx.set("charged", cents)?)
//! }
//!
//! #[stage]
//! async fn receipt(ctx: Context) -> StageResult {
//!     Ok(ctx.set("receipt", "sent")?)
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> fluxio::Result<()> {
//! let pipeline = pipeline![charge, receipt]
//!     .name("payments")
//!     .store(RedisStore::connect("redis://127.0.0.1:6379").await?)
//!     .build()?;
//!
//! match pipeline.invoke("order-42", ctx! { "cents" => 1999u64 }?).await {
//!     Ok(out) => println!("{}", out.completed()?.get::<String>("receipt")?),
//!     // later, in this process or another one: continue from the failed stage
//!     Err(_) => {
//!         pipeline.resume("order-42").await?.completed()?;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! [`RedisStore::builder`] sets how long a completed run is kept (default
//! one day), how many completed runs of each pipeline are kept
//! ([`keep_completed`](RedisStoreBuilder::keep_completed), default all),
//! the key prefix (default `fluxio:checkpoint`), the per-call timeout
//! (default 10 s), for `rediss://` URLs a private CA, and whether each
//! checkpoint write waits for replicas
//! ([`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas), default no).
//!
//! ## Key layout
//!
//! For a run id `R` and the key prefix `P`:
//!
//! | key | type | content | expiry |
//! |---|---|---|---|
//! | `P:R` | hash (a string for a run of an earlier build: see below) | the run's journal (contract rules 18 and 20): see below | a completed run's: the store's `completed_retention`, set by the save that completed it; every other run's: none |
//! | `P.lease:R` | string | the fencing token of the current lease, in decimal | the lease's time-to-live, reset by every renewal |
//! | `P.epoch:R` | integer | the last token handed out for `R` | none while `P:R` has none; otherwise the longest of a day, `completed_retention` and the lease's, reset by every acquire, renewal and save |
//! | `P.nonce:R` | string | the nonce of the `acquire_lease` or `begin_run` call that took the lease (`begin_run`'s with its outcome, `:1` or `:0`); after `finish_run`, `end:<token>:<result>` | the lease's first time-to-live (not renewed); deleted with the lease by `release_lease`; `finish_run`'s mark: the command timeout |
//! | `P.cancelled:R` | string | `1` while the checkpoint `P:R` is cancelled (contract rule 14) | none, like the cancelled checkpoint: deleted with it |
//! | `P.completed:N` | sorted set | only with [`keep_completed`](RedisStoreBuilder::keep_completed): the completed runs of the pipeline `N` (the part of a run id before its first `/`, empty for a bare id), a member per run (its id `R`) scored by its `done` | the newest member's run's: `completed_retention`, reset by every completion; none without it |
//! | `P.runs` | sorted set | the run index (contract rule 21; see [Listing](#listing-runs)): every run, a member per run (its id `R`) scored 0, so in key order | none |
//! | `P.runs.S` | sorted set | the runs whose latest checkpoint has status `S`: `running`, `failed`, `completed`, `cancelled`, `needs_attention`, `sleeping`, `waiting` | none |
//! | `P.expiring` | sorted set | the completed runs whose journal expires, each scored by when (the server's clock, ms) | none |
//! | `P.signals:R` | hash | the run's mailbox (contract rule 26; see [Runs that wait](#runs-that-wait)): a field per wait name signalled or closed, holding its entry, and the field `""` counting the entries ever added | the journal's: set with it by the save that completes the run |
//! | `P.due:N` | sorted set | the due-index of the pipeline `N` (contract rule 27): its sleeping and waiting runs that can become due, a member per run (its id `R`) scored by when it is due (ms; 0 once its mailbox holds an entry of a name it waits for) | none |
//! | `P.due` | set | the pipelines whose `P.due:N` exists | none |
//!
//! The journal hash `P:R` holds, for each stored checkpoint, a field named
//! by its number ([`seq`](fluxio_core::store::Checkpoint::seq), in decimal:
//! `0`, `1`, ...) whose value is exactly its
//! [`entry_bytes`](fluxio_core::store::Checkpoint::entry_bytes): the whole
//! context for a whole checkpoint, only the changed keys for a delta. And
//! seven meta fields:
//!
//! | field | content |
//! |---|---|
//! | `first`, `last` | the numbers of the oldest and the newest stored checkpoint; every number between is stored, and `first` is a whole checkpoint |
//! | `fulls` | the numbers of the stored whole checkpoints, ascending, separated by spaces (`0 32 64`) |
//! | `born` | the server's clock (`TIME`, `seconds.microseconds`) when the hash was created |
//! | `ver` | the number of writes to the hash since; `born:ver` names one state of the journal (a run deleted and written again never repeats one), which the cancel's compare-and-set and the reads check |
//! | `exp` | `1` while the hash has an expiry (a completed run's), else `0` or absent: a save that keeps a journal without expiry then leaves it, and the epoch, alone |
//! | `done` | when the run completed (the server's clock, `TIME`, in ms), written by the save of its completed checkpoint; absent while its latest checkpoint is not completed |
//!
//! And the run's summary, what a listing shows (contract rule 21), of its
//! latest checkpoint, written by every script that writes the journal:
//!
//! | field | content |
//! |---|---|
//! | `status` | `running`, `failed`, `completed`, `cancelled`, `needs_attention`, `sleeping` or `waiting` (a running run is abandoned when `P.lease:R` does not exist) |
//! | `step`, `attempt` | the stage it is at (empty once completed) and its attempt |
//! | `version` | the pipeline version that wrote it (not `ver`, the journal's write count) |
//! | `error` | how its stage failed; absent when it did not |
//! | `created`, `updated` | when the run started and was last written (ms since the Unix epoch, decimal) |
//! | `pipeline` | the checkpoint's pipeline name (empty for a bare run id) |
//! | `waits`, `until` | only while the run sleeps or waits: the names it waits for, separated by a newline (empty for a sleep), and its wake time or deadline (ms, at most [`MAX_UNTIL_MS`](fluxio_core::store::MAX_UNTIL_MS); empty for none): what `send_signal`'s script reads to decide whether a signal makes it due |
//!
//! A run is one key, so its deletion and its expiry are never partial: all
//! of its checkpoints go together. A load reads the fields from the last
//! whole checkpoint (the last of `fulls`) to `last`: at most
//! [`COMPACT_EVERY`](fluxio_core::store::COMPACT_EVERY) and a few.
//!
//! **Runs of earlier builds.** Builds before the journal kept a run as one
//! string at `P:R`, exactly `Checkpoint::to_bytes` in checkpoint format 1 to
//! 3. Such a key is read as it is (a read fallback: `load`, `history`,
//! `exists` and `cancel`'s read take it as the run's checkpoint 0, whole)
//! and migrated on write: the first script that appends to it (a resume's
//! fenced save of a delta, a cancel) first turns it into the hash, the old
//! bytes becoming field `0` unchanged, all in the one script, so the
//! migration is atomic with the write. A whole checkpoint 0, a plain `save`
//! or a delete replace it. Nothing else is migrated, so runs nobody touches
//! keep their old key. (A string at `P:R` is taken for checkpoint 0: a blob
//! of format 4 with several checkpoints, which no released build wrote to
//! Redis, is read whole but appended to as if it held checkpoint 0 only.)
//!
//! The lease, epoch, nonce, cancel, completed, mailbox, due and index keys have `.` after the prefix where a
//! checkpoint key has `:`, so no run id's checkpoint can collide with them.
//! The nonce key exists while the lease its call took does (at most its
//! first time-to-live), and for a command timeout after `finish_run`: it
//! lets a call sent again after a lost reply find what its first attempt
//! did (see [Reconnecting](#reconnecting)).
//!
//! ## What each call does
//!
//! Every call is one network round trip (`load` and `history`: two;
//! `cancel`: three or more; `due_runs` on a cluster: one per bucket asked,
//! sent at once; `watch`: a connection of its own): a single
//! command, or a Lua script run with `EVALSHA` (loaded at connect time; a
//! server that lost the scripts, after a restart say, is sent them again
//! once). A call whose connection dropped is sent once more; see
//! [Reconnecting](#reconnecting).
//!
//! - `save`: `P:R` replaced by the hash of the checkpoint's journal (its
//!   [`earlier`](fluxio_core::store::Checkpoint::earlier) ones, then
//!   itself; with `PEXPIRE <completed_retention>` when the run completed),
//!   and `P.cancelled:R` set when the checkpoint is cancelled, deleted
//!   otherwise, and the epoch's expiry adjusted, and the completion
//!   recorded (below) (one script). `load`: a
//!   script reading the meta fields (the numbers of the last whole
//!   checkpoint and of the last one), then one `HMGET` of `born`, `ver` and
//!   those entries, put together with
//!   [`Checkpoint::from_entries`](fluxio_core::store::Checkpoint::from_entries);
//!   `history`: the same for every entry
//!   ([`Checkpoint::journal_from_entries`](fluxio_core::store::Checkpoint::journal_from_entries)).
//!   The `HMGET` returns the entries of the journal the script saw when its
//!   `born:ver` is the same; when it is not (a write came in between), and
//!   for a run of an earlier build, a third round trip reads all in one
//!   script. Two round trips rather than one script because a script is
//!   slow to return large values: Redis 7 takes about 2.4 ms to return 1 MB
//!   from Lua, 0.08 ms from `HMGET`.
//!   `delete`: `DEL P:R P.cancelled:R P.signals:R`, `ZREM P.completed:N R`
//!   (and `ZREM P.due:N R` for a run that sleeps or waits) and an
//!   expiry for the epoch (one script); `exists`: `EXISTS`.
//! - `acquire_lease`: if `P.lease:R` exists, [`Error::RunIdInUse`](fluxio_core::Error::RunIdInUse);
//!   else `INCR P.epoch:R` (a new epoch gets an expiry unless `P:R` is
//!   stored without one), `SET P.lease:R <token> PX <lease ttl>` and
//!   `SET P.nonce:R <nonce> PX <lease ttl>` (a random nonce per call), and
//!   the lease carries that token. Tokens grow with every acquisition. A
//!   lease whose `P.nonce:R` is this call's was taken by this call's first
//!   attempt (see [Reconnecting](#reconnecting)): its token is returned and
//!   its expiry reset. `P.nonce:R` is left in place (nonces are never
//!   reused, so no other call matches it): an earlier build deleted it in a
//!   second round trip.
//! - `renew_lease`: `PEXPIRE P.lease:R` if it still holds the token, else
//!   [`Error::LeaseLost`](fluxio_core::Error::LeaseLost).
//! - `release_lease`: `DEL P.lease:R P.nonce:R` if the lease still holds the
//!   token (else nothing).
//! - `begin_run` (contract rule 24), one script: `acquire_lease`'s, then
//!   for `Begin::Replace` `delete_fenced`'s, for `Begin::IfAbsent` nothing
//!   more when `P:R` exists (the lease is taken, the run kept, `started`
//!   false), then `save_fenced`'s of the first checkpoint on the emptied
//!   journal. Refused (`RunIdInUse`; `Cancelled` for `IfAbsent` when only a
//!   cancel mark is stored; a first checkpoint that is a delta) it writes
//!   nothing and takes no lease. `P.nonce:R` holds the call's nonce and
//!   outcome, so a repeat returns what the first attempt did.
//! - `finish_run` (contract rule 24), one script: `save_fenced`'s (the same
//!   Lua, run as a function), then, when it saved and the run is to be
//!   deleted, `delete_fenced`'s, then, if the lease is still the token's,
//!   `release_lease`'s, whatever the save returned; `P.nonce:R` then holds
//!   `end:<token>:<result>` for a command timeout, which a repeat of the
//!   call (its reply lost, the lease gone) returns. A durable run of `n`
//!   stages is `n + 1` round trips: `begin_run`, `n - 1` fenced saves,
//!   `finish_run`.
//! - `save_fenced`: if `P.lease:R` still holds the token, the checkpoint
//!   appended to the journal, as [`append`](fluxio_core::store::append)
//!   does: the fields numbered at or after it deleted (a write sent again;
//!   a whole checkpoint at or before `first` deletes the hash: a fresh run),
//!   its `entry_bytes` written under its number, the meta updated, and the
//!   fields before the [`cut_point`](fluxio_core::store::cut_point) (which
//!   the script computes from `fulls` and the checkpoint's `keep_from`)
//!   deleted; then the expiry (a completed run's, or none), and the
//!   completion recorded (below). A delta whose
//!   predecessor is not stored is refused with
//!   [`missing_predecessor`](fluxio_core::store::missing_predecessor)'s
//!   error; `LeaseLost` when the lease is not the token's; and first of all
//!   a run whose `P.cancelled:R` exists is refused with
//!   [`Error::Cancelled`](fluxio_core::Error::Cancelled). A refused save
//!   writes nothing. Check and write are one script, so a worker whose
//!   lease expired (paused, cut off) cannot overwrite the new owner's
//!   checkpoint, and a delta save sends and writes only its entry (about
//!   the size of the keys it changed), never the whole context.
//!   `delete_fenced`: the `DEL` of `P:R`, `P.cancelled:R` and
//!   `P.signals:R` (and the `ZREM` from `P.completed:N` and `P.due:N`)
//!   under the same lease check.
//! - The completion, in `save`'s and `save_fenced`'s script (contract rule
//!   20, keep the last N): a completed checkpoint sets `done` in `P:R`; with
//!   [`keep_completed(Some(n))`](RedisStoreBuilder::keep_completed), the
//!   members of `P.completed:N` whose runs have expired (scored more than
//!   `completed_retention` less one second ago) are removed, `R` is added,
//!   and while the set holds more than `n` members its oldest is popped and
//!   that run deleted whole, as `delete` does (its `P:R` and cancel mark;
//!   its epoch gets an expiry, never deleted, so tokens keep growing), only
//!   if its `P:R` still carries the `done` the member was scored with: a
//!   run written again since it completed (a fresh `invoke` under the same
//!   key), deleted or expired is only taken out of the set. A save of a
//!   checkpoint that is not completed over a run that was removes `done`
//!   and the member. Running, failed and cancelled runs are never indexed,
//!   so never deleted by the trim. Stores sharing a prefix should share
//!   `keep_completed` and `completed_retention`: a run a store without the
//!   setting completes is not indexed (so kept), and a member the set
//!   holds for a run that is gone without a script seeing it (a key deleted
//!   by hand; a run with a longer retention than the store trimming) is
//!   still counted, so a trim may then keep one run fewer than `n`.
//! - `cancel` (rule 14): a `load`, decided here (a Lua script cannot read
//!   the status inside the payload), then one script that, only if the
//!   journal is still the one read (its `born:ver`), appends the cancelled
//!   checkpoint (the run's next, an empty delta) and sets
//!   `P.cancelled:R`, with no expiry (a compare-and-set). If the
//!   owner's next checkpoint landed in between, the cancel reads again,
//!   within its one command timeout; once the script has run, every fenced
//!   save of the run, from any process, is refused.
//! - The index, in the script of every write above (`save`, `save_fenced`,
//!   `cancel`, `delete`, `delete_fenced`, the keep-the-last-N trim, and the
//!   migration of a run of an earlier build, which happens inside a write):
//!   the run's summary fields written from the checkpoint the script
//!   writes (Rust hands them over: a script cannot decode a checkpoint),
//!   and the run moved from `P.runs.<old status>` to `P.runs.<new>` (added
//!   to `P.runs` when new), or taken out of every index set when deleted.
//!   A completion with a retention scores the run in `P.expiring`; see
//!   [Listing](#listing-runs) for how expired runs leave the index.
//! - `list_runs`: see [Listing](#listing-runs).
//! - `send_signal`, `take_signal`, `signals`, `due_runs`, `clock_ms`,
//!   `watch`: see [Runs that wait](#runs-that-wait).
//!
//! ## Listing runs
//!
//! [`list_runs`](fluxio_core::store::CheckpointStore::list_runs) (contract
//! rule 21) answers as `InMemoryStore`'s: runs in key order, the cursor
//! the last key of a page, `limit` clamped to 1..=10,000, filters by
//! pipeline, state, version and time, abandoned = running with no live
//! lease. It reads the index, never a checkpoint: the `LIST` script takes
//! one sorted set (`P.runs.S` when the filter names a state, else
//! `P.runs`) and walks it with `ZRANGEBYLEX` from the cursor on. A
//! pipeline `N`'s runs are the keys `N/...`, one lexical range of that set
//! (from `[N/` to `(N0`), so a page of one pipeline's failed runs reads
//! only those. For each candidate the script reads the summary fields
//! with one `HMGET` and, for a running run, the `PTTL` of its lease key
//! (held: running, its expiry shown; else abandoned), applies the
//! filters the sets do not cover (version, times), and stops at the page
//! and one run more (whether there is a next page). It looks at 500
//! members at most per call; a filter few runs pass (a version, a time
//! window, or the bare ids' pipeline `""`, whose keys are spread through
//! the set) is answered in several such scripts, so none holds the
//! server long. A page of the 50 failed runs of a pipeline of 100,000
//! takes one script (see `benches/list.rs` and the changelog's figures).
//!
//! The index never disagrees with the journals: each write changes both in
//! one script, so a crash (of the client or the server, given
//! persistence) leaves both before or both after. Expiry is the one change
//! no script makes: a completed run's journal expires on its own, leaving
//! its members behind. They go two ways, both in a script: each save that
//! completes a run takes up to 8 runs due in `P.expiring` and drops from
//! the index the ones whose journal is gone (so the index does not grow
//! with expired runs while runs complete, whether anyone lists or not),
//! and a listing that meets a member whose journal is gone drops it
//! (lazily, in its own script) and skips it, so a listing never shows a
//! run that is not stored.
//!
//! **Runs of earlier builds** (written before the index: a journal hash
//! without the summary, or a string of a build before the journal) are not
//! listed until they are written again by this build, or until
//! [`RedisStore::reindex`] indexes them: run it once after upgrading, when
//! no process of an earlier build writes any more. A process of an earlier
//! build that writes a run meanwhile leaves the index out of step for that
//! run until the next `reindex` (it does not know the index); stores of
//! this build never do.
//!
//! ## Runs that wait
//!
//! A run that sleeps or waits (contract rules 25-28) is stored like any
//! other, with status `sleeping` or `waiting`, and listed under it. Three
//! more things are kept, each written in the script of the write that
//! changes it, so none disagrees with the journal:
//!
//! - **The due-index** (rule 27), `P.due:N` per pipeline (in the
//!   pipeline's slot on a cluster, like `P.completed:N`), and `P.due`, its
//!   pipelines. Every script that writes a run's summary (`save`,
//!   `save_fenced`, `begin_run`, `finish_run`, `cancel`) scores a sleeping
//!   or waiting run by
//!   [`Pending::due_ms`](fluxio_core::store::Pending::due_ms) of its
//!   mailbox (reading the mailbox's entries of the names it waits for:
//!   0 when there is one, else its wake time or deadline, at most
//!   [`MAX_UNTIL_MS`](fluxio_core::store::MAX_UNTIL_MS), which a score, a
//!   double, holds exactly; a wait with no deadline and no signal is not
//!   in the index) and takes any other run out of it when it was in;
//!   `delete`, `delete_fenced`, `begin_run`'s replace and the
//!   keep-the-last-N trim take it out with the run. A run that took its
//!   signal or timed out (`take_signal`) stays scored until its next
//!   checkpoint, so a worker that dies in between leaves it due for the
//!   next.
//! - **The mailbox** (rule 26), `P.signals:R`: a field per wait name,
//!   holding `<order> <state> <sent_at> <sender length>\n<sender><payload>`
//!   (`state` is `delivered`, `consumed` or `closed`, `sent_at` in ms, the
//!   payload [`Payload::bytes`](fluxio_core::store::Payload::bytes)), and
//!   the field `""` counting the entries ever added, whose count is each
//!   entry's `order`: the mailbox's send order. It goes with the run on
//!   every delete, is emptied when a fresh run replaces it (a whole
//!   checkpoint 0, `begin_run`'s replace, a plain `save`, which writes the
//!   checkpoint's [`signals`](fluxio_core::store::Checkpoint::signals)
//!   instead), and expires with a completed run's journal.
//! - **Wake-ups**, `PUBLISH`ed to `P.events` (on a cluster, `{P#b}.events`
//!   of the run's bucket) by the scripts: `due R` when a run parks or a
//!   signal it waits for is delivered, `ended R` when a save leaves it
//!   completed, failed, cancelled or needing attention, and by `cancel`.
//!
//! The calls:
//!
//! - `send_signal`: one script (`SEND`) reads the run's `status` and
//!   `waits` and the name's mailbox entry and decides as
//!   [`deliver`](fluxio_core::store::deliver) does (no run, a completed or
//!   cancelled one, the same payload, another payload, a closed name: a
//!   code the store turns into the same answer or error), then stores the
//!   entry and, when the run is waiting for the name, scores it 0 and
//!   publishes `due`. A run of an earlier build has no summary: it is
//!   [reindexed](RedisStore::reindex) and the script sent again.
//! - `take_signal`: one script (`TAKE`), fenced as `save_fenced` is (a
//!   cancel mark: `Cancelled`; another token: `LeaseLost`; no journal:
//!   `CheckpointNotFound`), then [`decide`](fluxio_core::store::decide)
//!   **ported to Lua** (run against the Rust on generated mailboxes by a
//!   unit test) over the mailbox entries of the wait's names, writing what
//!   it decides in the same script. `SEND` and `TAKE` touch the same keys
//!   and each runs atomically, so a signal racing a deadline has exactly
//!   one winner, with no retry.
//! - `signals`: one `HGETALL` of the mailbox, in send order.
//! - `due_runs`: one script (`DUE`) per bucket of the pipelines asked (one
//!   script on a single server; every bucket, at once, on a cluster when
//!   none is asked, then merged): for each pipeline (`P.due`'s when none is
//!   asked), its members due by the filter's time, earliest first,
//!   skipping those whose lease key exists, up to the limit (and at most
//!   1,000 held ones more), each with the version and pipeline of its
//!   summary.
//! - `clock_ms`: `TIME`, on a cluster of any node.
//! - `watch`: a subscription on a connection of its own (redis-rs's async
//!   pub/sub) to `P.events`, on a cluster to every bucket's channel on the
//!   first node given that answers (a `PUBLISH` reaches every node of a
//!   cluster over its bus, so an event may come a few milliseconds after
//!   the write, or after a subscription made just after the write). The
//!   stream ends when that connection drops or does not answer its
//!   keep-alive `PING` (every 15 s) in time: the watcher polls and
//!   subscribes again. Events are hints: the due-index stays the truth.
//!
//! A run that neither sleeps nor waits costs no round trip more than
//! before: the due-index and the events are written by the scripts its
//! calls run anyway.
//!
//! ## Redis Cluster
//!
//! [`RedisStore::cluster_builder`] connects to a Redis Cluster through some
//! of its nodes (redis-rs's cluster connection: it follows `MOVED` and
//! `ASK`, and sends each script to the node of its first key). Every script
//! touches several keys of a run and the index keys of its pipeline, so they
//! must all be in one hash slot: a cluster store spreads its runs over
//! [`CLUSTER_BUCKETS`] (16) buckets, the bucket of a run being its
//! pipeline's ([`cluster_bucket`]: FNV-1a of the pipeline's name, the part
//! of the run's key before its first `/`, empty for a bare id), and writes
//! every key of a bucket `b` under the prefix `{P#b}` instead of `P`: a
//! hash tag, so one slot. That is the whole difference from the layout
//! above, table for table:
//!
//! | one server | cluster |
//! |---|---|
//! | `P:R`, `P.lease:R`, `P.epoch:R`, `P.nonce:R`, `P.cancelled:R`, `P.signals:R` | `{P#b}:R`, `{P#b}.lease:R`, ... with `b` the bucket of `R`'s pipeline |
//! | `P.completed:N`, `P.due:N` | `{P#b}.completed:N`, `{P#b}.due:N`, `b` the bucket of `N` |
//! | `P.runs`, `P.runs.S`, `P.expiring`, `P.due` | `{P#b}.runs`, `{P#b}.runs.S`, `{P#b}.expiring`, `{P#b}.due` for each bucket `b`, holding its runs (its pipelines) |
//! | the channel `P.events` | `{P#b}.events` for each bucket `b` |
//!
//! A run's pipeline decides its bucket, not its id, so that all the runs of
//! a pipeline share one slot: keep-the-last-N
//! ([`keep_completed`](RedisStoreBuilder::keep_completed)) stays exact and
//! atomic (the script that completes a run deletes the pipeline's oldest
//! completed runs, which are in its slot), and a listing of one pipeline
//! (or of the bare ids, pipeline `""`) reads one bucket, as on one server.
//! A listing of every pipeline reads each bucket's first page after the
//! cursor (16 round trips) and merges them in key order. The price: a
//! cluster spreads pipelines (16 buckets, over its masters), not the runs of
//! one pipeline, whose writes all go to one master.
//!
//! The key prefix must not contain `{` or `}`. The cluster layout is only
//! a cluster store's, so nothing written by a single-server store (or by an
//! earlier build) is read by one, and [`RedisStore::reindex`] has nothing to
//! do on it: moving runs from a single server to a cluster is not
//! supported (let them finish, or copy them with the store API: `history`,
//! then `save`). Every store on a cluster key prefix must be a cluster
//! store of a build with the same [`CLUSTER_BUCKETS`].
//!
//! With [`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas), each
//! checkpoint write and its `WAIT` are one pipeline, which redis-rs sends to
//! the node of the script's first key: the primary of the run's slot, so
//! `WAIT` counts that primary's replicas, in the same single round trip as
//! on one server.
//!
//! ## Reconnecting
//!
//! Clones of a store share one connection (redis-rs's `ConnectionManager`;
//! on a cluster its `ClusterConnection`, which reconnects to each node by
//! itself and is kept after a timeout),
//! which learns that the connection died (the server restarted, the
//! connection was reset or killed) only when a call fails on it; it then
//! opens a new one for the next call. So a call that fails on the
//! connection, rather than with an error reply of the server, is sent once
//! more, on the new connection and within the same command timeout: it
//! succeeds if the server is back. That is safe for every call:
//!
//! - `save`, `load`, `delete`, `exists` and `release_lease` are idempotent;
//! - `renew_lease`, `save_fenced` and `delete_fenced` check the lease's token
//!   first, so a repeat after a first attempt that was applied does the same
//!   again (or reports `LeaseLost` only if the lease really was lost);
//! - `acquire_lease` stores its call's nonce next to the lease it takes, so
//!   a repeat recognizes a lease taken by its own first attempt and returns
//!   that lease instead of `RunIdInUse`; `begin_run` stores its outcome
//!   with the nonce, so a repeat returns the same lease and `started`;
//!   `finish_run` leaves its result under the lease's token, so a repeat
//!   returns it rather than `LeaseLost`;
//! - `cancel`'s script finds the cancelled checkpoint it appended itself (it
//!   carries the time of the cancel) and answers done, not `RunFinished`.
//!
//! A call that times out is not sent again (the time is used up): it fails,
//! and the store replaces the connection for the next call.
//!
//! ## Guarantees, and their limits
//!
//! - Each call is atomic on the server; see [`RedisStore`]'s `# Cancel safety`.
//! - Each call ends within the command timeout, with a result or an
//!   [`Error::Store`](fluxio_core::Error::Store). After a timeout the store
//!   replaces its connection (redis-rs keeps a connection that never
//!   reported an error, so a half-open one would stay stuck), and it
//!   reconnects on its own after the server restarts or the network heals:
//!   the first call after that succeeds (see [Reconnecting](#reconnecting)).
//! - Leases and fencing are exactly as safe as **one Redis instance**. With
//!   replicas and failover (Sentinel, managed services), a promoted replica
//!   may lack writes the old primary acknowledged: a lease (two owners at
//!   once) or a checkpoint (a resume from an older stage). Checkpoints
//!   survive a restart only with persistence on; for no loss of
//!   acknowledged saves, use `appendonly yes` with `appendfsync always`.
//! - [`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas) narrows
//!   the failover window for checkpoints: each checkpoint write is
//!   followed, in the same round trip, by `WAIT n timeout`, and fails when
//!   fewer than `n` replicas acknowledged it (the primary keeps the write).
//!   A failover can still lose an acknowledged checkpoint (a promoted
//!   replica that is not one of those that acknowledged it; replicas
//!   restarted without persistence), and leases are not waited for: it is
//!   not strong consistency.
//! - Lease expiry is measured on the Redis server's clock.
//! - On a **Redis Cluster** ([`RedisStore::cluster_builder`], see
//!   [Redis Cluster](#redis-cluster)) every script's keys are in one hash
//!   slot, the run's bucket: the keys it declares in `KEYS` (lease, epoch,
//!   nonce, journal, cancel mark, `P.completed:N`) and those it builds from
//!   the bucket's prefix it is given (`.runs`, `.runs.S`, `.expiring`, the
//!   run's `.signals:R`, its pipeline's `.due:N`, `.due`, the runs a
//!   keep-the-last-N trim deletes). So each call is atomic there
//!   too, and as safe as that slot's primary: a failover of a master is a
//!   failover as above.
//! - Retention: a completed run's journal (its one key) expires
//!   [`completed_retention`](RedisStoreBuilder::completed_retention) after it
//!   completed (default one day; `None` keeps it), or sooner when
//!   [`keep_completed`](RedisStoreBuilder::keep_completed) trims it (see
//!   the completion above). Every other run (running,
//!   failed, abandoned, cancelled) has no expiry: it stays until deleted, so
//!   it can always be resumed or inspected. A run's fencing epoch has no
//!   expiry either while its checkpoint has none; it expires a day (or the
//!   completed retention, if longer) after the checkpoint expires or is
//!   deleted.
//!
//! ## TLS
//!
//! `rediss://` URLs use rustls with the `ring` crypto provider (installed as
//! rustls's process default when the application has not installed one)
//! and Mozilla's root certificates, or the CA given to
//! [`RedisStoreBuilder::tls_root_certificates`].
//!
//! ## Errors
//!
//! Every failure of Redis or of the connection is
//! [`Error::Store`](fluxio_core::Error::Store) with backend `"redis"` and a
//! [`RedisStoreError`] as source, naming the operation, the key and the URL
//! with its password replaced by `***`. No `Debug`, `Display` or log line of
//! this crate contains the password.

mod builder;
mod connection;
mod error;
mod index;
mod list;
mod scripts;
mod store;

pub use builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_COMPLETED_RETENTION, DEFAULT_KEY_PREFIX, RedisStoreBuilder,
};
pub use error::{BACKEND, RedisStoreError};
pub use store::{CLUSTER_BUCKETS, RedisStore, cluster_bucket};
