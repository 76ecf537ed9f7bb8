//! The Lua scripts behind the ownership methods. Each runs atomically on the
//! server, in one round trip (`EVALSHA`, falling back to loading the script
//! when the server does not have it).

use std::sync::LazyLock;

use redis::Script;

/// The Lua functions that take and keep a lease, shared by `ACQUIRE`,
/// `RENEW` and `BEGIN`.
///
/// - `extend(lease, lease_px, epoch, epoch_px)`: the held lease `lease`
///   expires in `lease_px` ms again, and the run's epoch `epoch`, unless it
///   has no expiry, in `epoch_px` ms.
/// - `take(lease, epoch, nonce, journal, lease_px, epoch_px, mark)`: takes
///   the free lease: draws the next token from `epoch` (a new or expiring
///   epoch gets `epoch_px` ms, unless the run's `journal` has no expiry),
///   sets `lease` to it and `nonce` to `mark`, both for `lease_px` ms, and
///   returns the token.
macro_rules! lease_fns {
    () => {
        r"
local function extend(lease, lease_px, epoch, epoch_px)
  redis.call('PEXPIRE', lease, lease_px)
  if redis.call('PTTL', epoch) ~= -1 then
    redis.call('PEXPIRE', epoch, epoch_px)
  end
end
local function take(lease, epoch, nonce, journal, lease_px, epoch_px, mark)
  local fresh = redis.call('EXISTS', epoch) == 0
  local token = redis.call('INCR', epoch)
  if (fresh or redis.call('PTTL', epoch) ~= -1) and redis.call('PTTL', journal) ~= -1 then
    redis.call('PEXPIRE', epoch, epoch_px)
  end
  redis.call('SET', lease, token, 'PX', lease_px)
  redis.call('SET', nonce, mark, 'PX', lease_px)
  return token
end
"
    };
}

/// `KEYS`: lease, epoch, nonce, journal. `ARGV`: lease ttl (ms), epoch ttl
/// (ms), the calling `acquire_lease`'s nonce. Returns the new token, or 0
/// when the lease is held. An epoch with no expiry (its run's journal has
/// none) keeps none; a new or expiring one gets the epoch ttl, unless its
/// run's journal is stored with no expiry (written by a plain `save` before
/// any lease was taken): the epoch then keeps none either, as the journal's
/// writes expect.
///
/// A new lease stores the nonce next to it (same expiry). A lease that
/// carries this nonce was set by an earlier attempt of this very call (sent
/// again after its reply was lost on a dropped connection): its token is
/// returned and its expiry reset, as if this attempt had taken it. The
/// nonce stays until it expires or `RELEASE_LEASE` or `FINISH` takes it
/// with the lease: nonces are never reused, so no other call matches it.
pub(crate) const ACQUIRE: &str = concat!(
    lease_fns!(),
    r"
local held = redis.call('GET', KEYS[1])
if held then
  if redis.call('GET', KEYS[3]) ~= ARGV[3] then
    return 0
  end
  extend(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
  return tonumber(held)
end
return take(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
"
);

/// `KEYS`: lease, epoch. `ARGV`: token, lease ttl (ms), epoch ttl (ms).
/// Returns 1 when renewed, 0 when the lease is not `token`'s any more.
pub(crate) const RENEW: &str = concat!(
    lease_fns!(),
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
extend(KEYS[1], ARGV[2], KEYS[2], ARGV[3])
return 1
"
);

/// The Lua functions that keep the due-index and tell the watchers
/// (contract rules 25-27; see the crate docs' key layout), shared by every
/// script that writes a run (through `index_fns!`). The due-index of the
/// key prefix `P` is a sorted set per pipeline `N`, `P.due:N`, a member per
/// sleeping or waiting run that can become due (its key), scored by when
/// (`Pending::due_ms`: 0 once its mailbox holds an entry of a name it waits for, else its
/// wake time or deadline, in ms); and the set `P.due`, the pipelines whose
/// `P.due:N` exists. Wake-ups go to the channel `P.events` as `due <run>`
/// or `ended <run>`.
///
/// - `PARKED`, `ENDED`: the statuses of a parked run, of an ended one.
/// - `due_of(prefix, run)`: the due-index of the run's pipeline, and the
///   pipeline.
/// - `schedule(prefix, run, score)`, `unschedule(prefix, run)`: the run in
///   (out of) its pipeline's due-index, the pipeline in (out of) `P.due`.
/// - `tell(prefix, kind, run)`: `PUBLISH`es `kind run` to `P.events`.
/// - `refused(lease, mark, token)`: the gate of a fenced write: `2` when
///   the cancel mark says cancelled (`1`), `6` when it says paused (`p`,
///   rule 30), `0` when the lease key does not hold `token`, `nil` when
///   the write may go on.
/// - `digits_lt(a, b)`: `a < b` for decimal numbers written without
///   leading zeros (exact past 2^53, and free of the server's locale).
/// - `entry(v)`: the mailbox entry `v` (`<order> <state> <sent_at>
///   <sender length>\n<sender><payload>`, see `crate::store::waits`)
///   read: `order`, `state`, `at` (sent at, decimal), `rest` (where its
///   sent-at starts: what follows its state), `body` (where its payload
///   starts) and `v`; `nil` when it is not one.
/// - `due(j, prefix, run, old, at, retry)`: after a write of the run
///   (journal `j`) from status `old` to the summary at `ARGV[at]` (see
///   `summarize`), `retry` its recovery time before the write (`SET_DUE`'s
///   field `retry`, which goes): a sleeping or waiting run is scored as
///   `due_ms` says (its mailbox read for the names it waits for) or taken
///   out when only a signal can wake it, and its watchers told it may be
///   due; any other run leaves the due-index (and its `waits` and `until`
///   go) when it was parked or had a recovery time, and its watchers are
///   told when it ended.
macro_rules! waits_fns {
    () => {
        r"
local PARKED = {sleeping = true, waiting = true}
local ENDED = {completed = true, failed = true, cancelled = true, needs_attention = true}
local function due_of(prefix, run)
  local pipeline = string.match(run, '^([^/]*)/') or ''
  return prefix .. '.due:' .. pipeline, pipeline
end
local function schedule(prefix, run, score)
  local key, pipeline = due_of(prefix, run)
  redis.call('ZADD', key, score, run)
  redis.call('SADD', prefix .. '.due', pipeline)
end
local function unschedule(prefix, run)
  local key, pipeline = due_of(prefix, run)
  if redis.call('ZREM', key, run) == 1 and redis.call('EXISTS', key) == 0 then
    redis.call('SREM', prefix .. '.due', pipeline)
  end
end
local function tell(prefix, kind, run)
  redis.call('PUBLISH', prefix .. '.events', kind .. ' ' .. run)
end
local function refused(lease, mark, token)
  local gate = redis.call('MGET', lease, mark)
  if gate[2] then
    return gate[2] == 'p' and 6 or 2
  elseif gate[1] ~= token then
    return 0
  end
end
local function digits_lt(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end
local function entry(v)
  local order, state, rest, at, len, body = string.match(v, '^(%d+) (%a+) ()(%d+) (%d+)\n()')
  if not order then
    return nil
  end
  return {order = tonumber(order), state = state, rest = rest, at = at,
    body = body + tonumber(len), v = v}
end
local function due(j, prefix, run, old, at, retry)
  if retry then
    redis.call('HDEL', j, 'retry')
  end
  if PARKED[ARGV[at]] then
    local score, box = ARGV[at + 10], prefix .. '.signals:' .. run
    for name in string.gmatch(ARGV[at + 9], '[^\n]+') do
      -- any entry of a waited name: signalled, or decided by a worker
      -- that stopped before its next checkpoint (`Pending::due_ms`)
      if redis.call('HEXISTS', box, name) == 1 then
        score = '0'
        break
      end
    end
    if score == '' then
      unschedule(prefix, run)
    else
      schedule(prefix, run, score)
    end
    tell(prefix, 'due', run)
    return
  end
  if PARKED[old] then
    redis.call('HDEL', j, 'waits', 'until')
  end
  if PARKED[old] or retry then
    unschedule(prefix, run)
  end
  if ENDED[ARGV[at]] then
    tell(prefix, 'ended', run)
  end
end
"
    };
}

/// The Lua functions that keep the run index (contract rule 21; see the
/// crate docs' key layout), shared by every script that writes a run. The
/// index of the key prefix `P` is the sorted sets `P.runs` (every run) and
/// `P.runs.S` (the runs whose latest checkpoint has status `S`), each
/// member a run's key scored 0, so they are in key order
/// (`ZRANGEBYLEX`), and a pipeline's runs (`N/...`) are one range of them;
/// plus `P.expiring`, the completed runs whose journal expires, scored by
/// when (the server's clock, ms), so the expired ones leave the index.
///
/// - `STATUSES`: every status a run's `status` field may hold.
/// - `summarize(j, at)`: writes the summary meta fields of journal `j` from
///   the eleven `ARGV` from `at` on (status, step, attempt, version, `1`
///   when there is an error message, the message, created, updated,
///   pipeline, and for a sleeping or waiting run the names it waits for
///   and its wake time or deadline, written as `waits` and `until`; see
///   `crate::index::summary_args`) and returns the status.
/// - `index(prefix, run, old, new)`: the run `run`, indexed under status
///   `old` (`nil`: not indexed), is indexed under `new`.
/// - `unindex(prefix, run, status)`: the run leaves the index; `status`
///   `nil` when unknown (its journal is gone): every status set.
/// - `delete_run(j, mark, epoch, completed, prefix, run, epoch_px)`: what
///   `DELETE` does: the journal `j`, cancel mark `mark` and mailbox
///   deleted, the run out of the index, of the due-index and of the
///   pipeline's completed index `completed`, and the epoch `epoch`, when it
///   has no expiry, given `epoch_px` ms.
/// - `now_ms()`: the server's clock, `TIME`, in ms.
/// - `expiring(c, now)`: after a save that completed the run `c.run`
///   (`c.prefix`; `c.px` its journal's ttl, `'0'` for none), at the
///   server's `now` (ms): the run is in `P.expiring`, scored `now + px`,
///   when it has a ttl, and not otherwise; then up to 8 runs due by `now`
///   leave the index, each only if its journal is gone (one still there,
///   kept longer by another store's retention, is scored again by its
///   ttl). So the index does not grow with expired runs while runs
///   complete, whether or not anyone lists.
macro_rules! index_fns {
    () => {
        concat!(
            waits_fns!(),
            r"
local STATUSES = {'running', 'failed', 'completed', 'cancelled', 'needs_attention',
  'sleeping', 'waiting', 'paused'}
local function summarize(j, at)
  local f = {'status', ARGV[at], 'step', ARGV[at + 1], 'attempt', ARGV[at + 2],
    'version', ARGV[at + 3], 'created', ARGV[at + 6], 'updated', ARGV[at + 7],
    'pipeline', ARGV[at + 8]}
  if PARKED[ARGV[at]] then
    f[#f + 1] = 'waits'
    f[#f + 1] = ARGV[at + 9]
    f[#f + 1] = 'until'
    f[#f + 1] = ARGV[at + 10]
  end
  if ARGV[at + 4] == '1' then
    f[#f + 1] = 'error'
    f[#f + 1] = ARGV[at + 5]
  else
    redis.call('HDEL', j, 'error')
  end
  redis.call('HSET', j, unpack(f))
  return ARGV[at]
end
local function index(prefix, run, old, new)
  if old == new then
    return
  end
  if old then
    redis.call('ZREM', prefix .. '.runs.' .. old, run)
  else
    redis.call('ZADD', prefix .. '.runs', 0, run)
  end
  redis.call('ZADD', prefix .. '.runs.' .. new, 0, run)
end
local function unindex(prefix, run, status)
  redis.call('ZREM', prefix .. '.runs', run)
  if status then
    redis.call('ZREM', prefix .. '.runs.' .. status, run)
  else
    for _, s in ipairs(STATUSES) do
      redis.call('ZREM', prefix .. '.runs.' .. s, run)
    end
  end
  redis.call('ZREM', prefix .. '.expiring', run)
end
local function delete_run(j, mark, epoch, completed, prefix, run, epoch_px)
  local h = redis.pcall('HMGET', j, 'status', 'retry')
  local status = not h['err'] and h[1] or nil
  unindex(prefix, run, status)
  if not status or PARKED[status] or (not h['err'] and h[2]) then
    unschedule(prefix, run)
  end
  redis.call('DEL', j, mark, prefix .. '.signals:' .. run)
  redis.call('ZREM', completed, run)
  if redis.call('PTTL', epoch) == -1 then
    redis.call('PEXPIRE', epoch, epoch_px)
  end
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function expiring(c, now)
  local set = c.prefix .. '.expiring'
  if c.px ~= '0' then
    redis.call('ZADD', set, string.format('%d', now + tonumber(c.px)), c.run)
  else
    redis.call('ZREM', set, c.run)
  end
  local due = redis.call('ZRANGEBYSCORE', set, '-inf', string.format('%d', now), 'LIMIT', 0, 8)
  for _, run in ipairs(due) do
    local ttl = redis.call('PTTL', c.prefix .. ':' .. run)
    if ttl == -2 then
      unindex(c.prefix, run, nil)
    elseif ttl > 0 then
      redis.call('ZADD', set, string.format('%d', now + ttl), run)
    else
      redis.call('ZREM', set, run)
    end
  end
end
"
        )
    };
}

/// The Lua functions the journal's scripts share (see the crate docs' key
/// layout): a run's journal is one hash, `P:R`, whose fields are the
/// checkpoints' numbers (each holding that checkpoint's
/// [`entry_bytes`](fluxio_core::store::Checkpoint::entry_bytes)) and seven
/// meta fields: `first` and `last` (the numbers of the oldest and newest
/// stored checkpoints: every number between is stored), `fulls` (the
/// numbers of the stored whole checkpoints, ascending, space-separated;
/// `first` is always one), `born` (the server's clock, `TIME`, when the
/// hash was created), `ver` (the number of writes since; `born:ver` names
/// one state of the journal: a deleted and rewritten run never shows one
/// seen before), `exp` (`1` while the hash has an expiry: a completed
/// run's) and `done` (when the run completed, the server's clock in ms;
/// absent while its latest checkpoint is not completed).
///
/// - `meta(key)`: the journal's meta (and its `status`, `nil` when not
///   indexed), or `nil` when nothing is stored. A
///   string key is a run of an earlier build (one format 1 to 3 blob): it
///   reads as a journal of one whole checkpoint, 0, with `legacy` set.
/// - `migrate(key)`: turns such a string into a hash of that one checkpoint.
/// - `int(n)`: the number `n` in decimal (what Rust writes and reads;
///   Redis may write a number argument as `1e+07`).
/// - `drop(key, from, to)`: deletes the checkpoints `from..=to`.
/// - `get(key, from, to)`: the checkpoints `from..=to`, in order.
/// - `to_read(key, all, blob)`: what `LOAD` and `META` read of the journal
///   `key`: `nil`, its meta and the first checkpoint to read (every stored
///   one when `all` is `'1'`, from the last whole one on when it is `'0'`);
///   or the reply when there is no journal to read: `{}` when nothing is
///   stored, `{'legacy'}` (and with `blob` the run's blob) for a run of an
///   earlier build.
/// - `born()`: a `born` for a new hash.
/// - `version(m)`: the `born:ver` of meta `m`.
/// - `remove_run(prefix, run, epoch_px)`: deletes the run `run` as `DELETE`
///   does (journal, cancel mark, mailbox and index members: a completed
///   run, never in the due-index; the epoch only gets an expiry, so its
///   tokens keep growing).
/// - `completion(j, idx, c, was_done)`: keep-the-last-N (contract rule 20),
///   after a save wrote journal `j`. `c`: `completed` (the latest
///   checkpoint is), `keep` (`nil`: keep all), `prefix`, `run` (the run's
///   key, its member in `idx`), `px` (the journal's ttl) and `epoch_px`;
///   `was_done`: the journal replaced or appended to had a `done` field.
///   A run that is not completed loses its `done`, its member of `idx`
///   (the pipeline's sorted set of completed runs, scored by completion
///   time, the server's clock in ms) and of `P.expiring`. A completed one
///   gets `done` = now and `expiring`'s bookkeeping; then, with `keep`, the members whose runs have expired (scored more
///   than `px` less a second ago) are dropped, the run is added, and while
///   `idx` holds more than `keep`, its oldest member is popped and that run
///   deleted with `remove_run`, only if its hash still carries that very
///   `done` (a run written again since, or deleted or expired, is left
///   alone); `idx` expires with its newest run.
/// - `expire(key, px, epoch, epoch_px, had, fresh, box)`: the journal's
///   expiry, and its mailbox `box`'s,
///   `px` ms, or none when `px` is `'0'` (a run that did not complete); the
///   run's epoch `epoch` then keeps no expiry either, and otherwise lasts at
///   least `epoch_px` ms. Called after the journal's fields are written
///   (their `exp` set to match). `had`: the journal had an expiry; `fresh`:
///   the hash was just created. A journal with no expiry that keeps none is
///   left alone, and so is its epoch: it has had none since the hash was
///   created (only a delete, which takes the hash, an expiring journal, or
///   `ACQUIRE` of an epoch whose journal is missing or expiring gives it
///   one).
macro_rules! journal_fns {
    () => {
        concat!(
            index_fns!(),
            r"
local function meta(key)
  local m = redis.pcall('HMGET', key, 'first', 'last', 'fulls', 'born', 'ver', 'exp', 'done',
    'status', 'retry')
  if m['err'] then
    if redis.call('TYPE', key)['ok'] == 'string' then
      return {first = 0, last = 0, fulls = {0}, legacy = true}
    end
    redis.call('HMGET', key, 'first')
  end
  if not m[1] then
    return nil
  end
  local fulls = {}
  for s in string.gmatch(m[3], '%d+') do
    fulls[#fulls + 1] = tonumber(s)
  end
  return {first = tonumber(m[1]), last = tonumber(m[2]), fulls = fulls, born = m[4],
    ver = tonumber(m[5]), exp = m[6] == '1', done = m[7], status = m[8] or nil,
    retry = m[9] or nil}
end
local function to_read(key, all, blob)
  local m = meta(key)
  if not m then
    return {}
  end
  if m.legacy then
    return blob and {'legacy', redis.call('GET', key)} or {'legacy'}
  end
  if all == '0' then
    return nil, m, m.fulls[#m.fulls] or m.first
  end
  return nil, m, m.first
end
local function born()
  local t = redis.call('TIME')
  return t[1] .. '.' .. t[2]
end
local function version(m)
  return m.born .. ':' .. string.format('%d', m.ver)
end
local function migrate(key, m)
  local blob = redis.call('GET', key)
  redis.call('DEL', key)
  m.born, m.ver = born(), 0
  redis.call('HSET', key, 0, blob, 'first', 0, 'last', 0, 'fulls', '0', 'born', m.born, 'ver', 0)
end
local function int(n)
  return string.format('%d', n)
end
local function drop(key, from, to)
  local batch = {}
  for s = from, to do
    batch[#batch + 1] = int(s)
    if #batch == 1000 or s == to then
      redis.call('HDEL', key, unpack(batch))
      batch = {}
    end
  end
end
local function get(key, from, to)
  local out, batch = {}, {}
  for s = from, to do
    batch[#batch + 1] = int(s)
    if #batch == 1000 or s == to then
      local got = redis.call('HMGET', key, unpack(batch))
      for i = 1, #batch do
        out[#out + 1] = got[i]
      end
      batch = {}
    end
  end
  return out
end
local function remove_run(prefix, run, epoch_px)
  local status = redis.call('HGET', prefix .. ':' .. run, 'status')
  unindex(prefix, run, status or nil)
  redis.call('DEL', prefix .. ':' .. run, prefix .. '.cancelled:' .. run,
    prefix .. '.signals:' .. run)
  local epoch = prefix .. '.epoch:' .. run
  if redis.call('PTTL', epoch) == -1 then
    redis.call('PEXPIRE', epoch, epoch_px)
  end
end
local function completion(j, idx, c, was_done)
  if not c.completed then
    if was_done then
      redis.call('HDEL', j, 'done')
      redis.call('ZREM', idx, c.run)
      redis.call('ZREM', c.prefix .. '.expiring', c.run)
    end
    return
  end
  local now = now_ms()
  redis.call('HSET', j, 'done', int(now))
  expiring(c, now)
  if not c.keep then
    if was_done then
      redis.call('ZREM', idx, c.run)
    end
    return
  end
  if c.px ~= '0' then
    redis.call('ZREMRANGEBYSCORE', idx, '-inf', int(now - tonumber(c.px) + 1000))
  end
  redis.call('ZADD', idx, int(now), c.run)
  while redis.call('ZCARD', idx) > c.keep do
    local oldest = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
    redis.call('ZREM', idx, oldest[1])
    local done = redis.pcall('HGET', c.prefix .. ':' .. oldest[1], 'done')
    if type(done) == 'string' and tonumber(done) == tonumber(oldest[2]) then
      remove_run(c.prefix, oldest[1], c.epoch_px)
    end
  end
  if c.px ~= '0' and redis.call('EXISTS', idx) == 1 then
    redis.call('PEXPIRE', idx, c.px)
  end
end
local function expire(key, px, epoch, epoch_px, had, fresh, box)
  if px == '0' then
    if had then
      redis.call('PERSIST', key)
    end
    if had or fresh then
      redis.call('PERSIST', epoch)
      redis.call('PERSIST', box)
    end
    return
  end
  redis.call('PEXPIRE', key, px)
  redis.call('PEXPIRE', box, px)
  if redis.call('EXISTS', epoch) == 1 and redis.call('PTTL', epoch) < tonumber(epoch_px) then
    redis.call('PEXPIRE', epoch, epoch_px)
  end
end
"
        )
    };
}

/// `KEYS`: journal, cancel mark, epoch, the pipeline's completed index.
/// `ARGV`: journal ttl (ms, `0` for none), the mark of the latest
/// checkpoint (`1` cancelled, `p` paused, `0` neither), epoch ttl (ms), the journal's `first`, `last` and `fulls`,
/// `1` when the latest checkpoint is completed, the number of completed
/// runs to keep (`none`: all), the key prefix, the run's key, the latest
/// checkpoint's summary (eleven: see `summarize`), the number `n` of
/// signals in the run's mailbox, `n` pairs of a wait name and its encoded
/// entry (`crate::store::waits`), then each checkpoint's number and entry
/// bytes. The plain `save`: the journal replaced by the one given, the
/// mailbox by the checkpoint's (`Checkpoint::signals`, as
/// `InMemoryStore` does), the cancel mark set or deleted to match its
/// latest checkpoint, the run's summary written and the run indexed under
/// its status (rule 21) and in the due-index (`due`), and the completion
/// recorded (`completion`: the run indexed and the pipeline trimmed when
/// it completed, taken out of the index when it did not).
pub(crate) const SAVE: &str = concat!(
    journal_fns!(),
    r"
local was = redis.pcall('HMGET', KEYS[1], 'status', 'retry')
local old, retry = nil, nil
if not was['err'] then
  old, retry = was[1] or nil, was[2] or nil
end
local box, signals = ARGV[9] .. '.signals:' .. ARGV[10], tonumber(ARGV[22])
redis.call('DEL', KEYS[1], box)
for i = 23, 22 + 2 * signals, 1000 do
  redis.call('HSET', box, '', signals, unpack(ARGV, i, math.min(i + 999, 22 + 2 * signals)))
end
local fields = {'first', ARGV[4], 'last', ARGV[5], 'fulls', ARGV[6], 'born', born(), 'ver', 0}
for i = 23 + 2 * signals, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  if #fields >= 1000 or i + 2 > #ARGV then
    redis.call('HSET', KEYS[1], unpack(fields))
    fields = {}
  end
end
redis.call('HSET', KEYS[1], 'exp', ARGV[1] ~= '0' and '1' or '0')
index(ARGV[9], ARGV[10], old, summarize(KEYS[1], 11))
due(KEYS[1], ARGV[9], ARGV[10], old, 11, retry)
expire(KEYS[1], ARGV[1], KEYS[3], ARGV[3], false, true, box)
if ARGV[2] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[2])
else
  redis.call('DEL', KEYS[2])
end
completion(KEYS[1], KEYS[4], {completed = ARGV[7] == '1', keep = tonumber(ARGV[8]),
  prefix = ARGV[9], run = ARGV[10], px = ARGV[1], epoch_px = ARGV[3]},
  -- a plain save replaces whatever was there: drop a stale index entry
  true)
return 1
"
);

/// The body of `SAVE_FENCED` (after `journal_fns!`), with its `KEYS` and
/// `ARGV` and its `return`s: `FINISH` runs it as a function.
macro_rules! save_fenced_body {
    () => {
        r"
local no = refused(KEYS[1], KEYS[3], ARGV[1])
if no then
  return no
end
local j = KEYS[2]
local seq, full, keep = tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local m = meta(j)
if not full and not (m and m.first < seq and seq - 1 <= m.last) then
  return 3
end
local had = m and m.exp
local was_done = m and m.done and true
local old, retry = m and m.status, m and m.retry
local box = ARGV[11] .. '.signals:' .. ARGV[12]
if not m or seq == 0 then
  -- a fresh run under the key: none of the old run's signals
  redis.call('DEL', box)
end
if m and (seq <= m.first or (full and seq > m.last + 1)) then
  redis.call('DEL', j)
  m, had = nil, false
end
local fresh = not m or m.legacy
if m and m.legacy then
  migrate(j, m)
end
-- the fields to write: the entry, and the meta fields that change
local set = {ARGV[2], ARGV[5], 'last', ARGV[2]}
local fulls, fulls_changed = {}, full
if m then
  if seq <= m.last then
    drop(j, seq, m.last)
  end
  for _, s in ipairs(m.fulls) do
    if s < seq then
      fulls[#fulls + 1] = s
    else
      fulls_changed = true
    end
  end
else
  m = {first = seq, born = born(), ver = 0}
  set[#set + 1] = 'born'
  set[#set + 1] = m.born
  set[#set + 1] = 'first'
  set[#set + 1] = ARGV[2]
end
local cut = nil
if keep > 0 then
  for _, s in ipairs(fulls) do
    if s <= keep and (not cut or s > cut) then
      cut = s
    end
  end
  if not cut and full and keep >= seq then
    cut = seq
  end
end
if full then
  fulls[#fulls + 1] = seq
end
if cut and cut > m.first then
  drop(j, m.first, cut - 1)
  m.first = cut
  set[#set + 1] = 'first'
  set[#set + 1] = int(cut)
  local kept = {}
  for _, s in ipairs(fulls) do
    if s >= cut then
      kept[#kept + 1] = s
    end
  end
  fulls, fulls_changed = kept, true
end
if fulls_changed then
  set[#set + 1] = 'fulls'
  set[#set + 1] = table.concat(fulls, ' ')
end
set[#set + 1] = 'ver'
set[#set + 1] = int(m.ver + 1)
if had or ARGV[6] ~= '0' then
  set[#set + 1] = 'exp'
  set[#set + 1] = ARGV[6] ~= '0' and '1' or '0'
end
redis.call('HSET', j, unpack(set))
index(ARGV[11], ARGV[12], old, summarize(j, 13))
due(j, ARGV[11], ARGV[12], old, 13, retry)
expire(j, ARGV[6], KEYS[4], ARGV[8], had, fresh, box)
if ARGV[7] ~= '0' then
  redis.call('SET', KEYS[3], ARGV[7])
end
completion(j, KEYS[5], {completed = ARGV[9] == '1', keep = tonumber(ARGV[10]),
  prefix = ARGV[11], run = ARGV[12], px = ARGV[6], epoch_px = ARGV[8]}, was_done)
return 1
"
    };
}

/// `KEYS`: lease, journal, cancel mark, epoch, the pipeline's completed
/// index. `ARGV`: token, the checkpoint's number, `1` when it is whole, its
/// `keep_from`, its entry bytes, journal ttl (ms, `0` for none), its mark
/// (`1` cancelled, `p` paused, `0` neither), epoch ttl (ms), `1` when it is completed, the number of
/// completed runs to keep (`none`: all), the key prefix, the run's key,
/// the checkpoint's summary (eleven: see `summarize`).
///
/// Returns 1 when appended; 2 (nothing written) when the run is cancelled,
/// 6 when it is paused, whatever the lease; 0 (nothing written) when the lease is not `token`'s;
/// 3 (nothing written) when the checkpoint is a delta and its predecessor
/// is not stored. Appending drops the stored checkpoints numbered at or
/// after it (the whole hash when that is all of them, or when a whole
/// checkpoint leaves a gap after the last: every number from `first` to
/// `last` stays stored), migrates a run of an
/// earlier build, and drops the checkpoints before the cut point, computed
/// as `fluxio_core::store::cut_point` does. The run's summary is written
/// and the run indexed under its status (rule 21) and in the due-index
/// (`due`: a sleeping or waiting run scored, any other taken out; a
/// fresh run, the checkpoint numbered 0 or the first of an empty journal,
/// empties the mailbox first). Then `completion`: a
/// completed run is indexed and its pipeline trimmed; a run that was
/// completed and is not any more leaves that index.
pub(crate) const SAVE_FENCED: &str = concat!(journal_fns!(), save_fenced_body!());

/// `KEYS`: journal. `ARGV`: `1` for every stored checkpoint (`history`),
/// `0` for those from the last whole one on (`load`). Returns nothing when
/// nothing is stored; otherwise the journal's `born:ver` and the checkpoints'
/// entry bytes, oldest first, or `legacy` and the blob of a run of an
/// earlier build. The reads' fallback, atomic in one round trip but slow
/// for large entries (see `META`): for a run of an earlier build, and when
/// the journal changed between `META` and its `HMGET`.
pub(crate) const LOAD: &str = concat!(
    journal_fns!(),
    r"
local reply, m, from = to_read(KEYS[1], ARGV[1], true)
if reply then
  return reply
end
local out = get(KEYS[1], from, m.last)
table.insert(out, 1, version(m))
return out
"
);

/// `KEYS`: journal. `ARGV`: `1` for every stored checkpoint (`history`),
/// `0` for those from the last whole one on (`load`). Returns nothing when
/// nothing is stored; `legacy` for a run of an earlier build; otherwise the
/// journal's `born:ver` and the numbers of the first and the last
/// checkpoint to read, which the caller then reads with one `HMGET` of
/// `born`, `ver` and those fields (the same `born:ver`: the same journal).
/// Two round trips rather than `LOAD`'s one, because a script's reply of a
/// whole checkpoint is slow: Redis 7 takes about 2.4 ms to return 1 MB from
/// Lua, 0.08 ms from `HMGET`.
pub(crate) const META: &str = concat!(
    journal_fns!(),
    r"
local reply, m, from = to_read(KEYS[1], ARGV[1], false)
if reply then
  return reply
end
return {version(m), int(from), int(m.last)}
"
);

/// `KEYS`: lease, journal, cancel mark, epoch, the pipeline's completed
/// index. `ARGV`: token, epoch ttl (ms), the run's key, the key prefix.
/// Returns 1 when deleted (or already absent), 0 when the lease is not
/// `token`'s. A cancelled run is deleted like any other, mark and all; the
/// run leaves the run index, and a completed one the completed index; an
/// epoch left without expiry gets the epoch ttl.
pub(crate) const DELETE_FENCED: &str = concat!(
    index_fns!(),
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
delete_run(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[3], ARGV[2])
return 1
"
);

/// `KEYS`: journal, cancel mark, epoch, the pipeline's completed index.
/// `ARGV`: epoch ttl (ms), the run's key, the key prefix. The plain
/// `delete`: as `DELETE_FENCED` without the lease check.
pub(crate) const DELETE: &str = concat!(
    index_fns!(),
    r"
delete_run(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[2], ARGV[1])
return 1
"
);

/// `KEYS`: journal, cancel mark, epoch. `ARGV`: the journal's `born:ver` as the
/// mark read it (`legacy` for a run of an earlier build), the marked
/// checkpoint's number and its entry bytes, the key prefix, the run's key,
/// the marked checkpoint's summary (eleven: see `summarize`), then the
/// mark (`1` cancelled, `p` paused, `0` unpaused). Appends the marked
/// checkpoint (a cancel, a pause or an unpause, rules 14 and 30), writes
/// its summary and indexes the run under its status (a cancelled or
/// paused run out of the due-index, an unpaused one back in it, its
/// watchers told), and sets the mark (deletes it for an unpause), with no
/// expiry (such a run is kept until deleted, and so is its epoch), only
/// if the journal is still the one read (a compare-and-set on `born:ver`):
/// returns 1 then, and also when the journal ends with the marked
/// checkpoint already (an earlier attempt of this very call, sent again
/// after its reply was lost: the entry carries the time of the mark); 0
/// (nothing written) when a write came in between, and the mark reads
/// again.
pub(crate) const MARK: &str = concat!(
    journal_fns!(),
    r"
local m = meta(KEYS[1])
if not m then
  return 0
end
local seq = tonumber(ARGV[2])
if m.legacy then
  if ARGV[1] ~= 'legacy' then
    return 0
  end
  migrate(KEYS[1], m)
else
  if m.last == seq and redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[3] then
    return 1
  end
  if version(m) ~= ARGV[1] or m.last + 1 ~= seq then
    return 0
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3], 'last', ARGV[2], 'ver', int(m.ver + 1), 'exp', '0')
index(ARGV[4], ARGV[5], m.status, summarize(KEYS[1], 6))
due(KEYS[1], ARGV[4], ARGV[5], m.status, 6, m.retry)
if ARGV[17] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[17])
else
  redis.call('DEL', KEYS[2])
end
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[3])
return 1
"
);

/// `KEYS`: the index set to read (`P.runs`, or `P.runs.S` for one
/// status). `ARGV`: the key prefix, the `ZRANGEBYLEX` bounds `min` and
/// `max`, how many runs to find at most (`want`), how many members to
/// look at at most (`budget`), then the filters: the status (`''`: any),
/// the lease (`held`, `free`, `''`: either; running runs only), `1` and the
/// version (`0` and anything: any), created at or after (ms, decimal,
/// `''`: any), updated before (likewise), `1` for runs with no pipeline
/// only (keys without `/`), and the prefix the run id (the key after its
/// first `/`) must start with (`''`: any).
///
/// Returns `{more, last, rows...}`: `more` is 0 when the range is
/// exhausted, 1 when the script stopped at `want` runs or `budget` members
/// (`last`, the last member looked at, is then where the next call starts
/// after); each row is ten values: the run's key, pipeline, status, step,
/// attempt, version, error message (nil: none), created, updated, and when
/// its lease expires (the server's clock, ms; nil unless the run is running
/// with its lease held).
///
/// A member whose journal is gone (a completed run that expired before a
/// save swept it from `P.expiring`, or a key deleted by hand) leaves the
/// index here, in this script, and is skipped: the index never shows a run
/// that is not stored. Reads and writes only the index and the runs'
/// meta fields, never a checkpoint's entry.
pub(crate) const LIST: &str = concat!(
    index_fns!(),
    r"
local prefix, max = ARGV[1], ARGV[3]
local want, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local status, lease = ARGV[6], ARGV[7]
local has_version, version = ARGV[8] == '1', ARGV[9]
local created_after, updated_before, bare = ARGV[10], ARGV[11], ARGV[12] == '1'
local id_prefix = ARGV[13]
-- whether the run id of `run` (what follows its first `/`) starts with
-- `id_prefix`
local function id_starts(run)
  if id_prefix == '' then
    return true
  end
  local slash = string.find(run, '/', 1, true)
  local id = slash and string.sub(run, slash + 1) or run
  return string.sub(id, 1, #id_prefix) == id_prefix
end
local now = now_ms()
local out = {1, ''}
local found, looked, min = 0, 0, ARGV[2]
while true do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], min, max, 'LIMIT', 0,
    math.min(200, budget - looked))
  if #batch == 0 then
    out[1] = 0
    return out
  end
  for _, run in ipairs(batch) do
    looked = looked + 1
    out[2] = run
    if not (bare and string.find(run, '/', 1, true)) and id_starts(run) then
      local j = prefix .. ':' .. run
      local h = redis.pcall('HMGET', j, 'status', 'step', 'attempt', 'version', 'error',
        'created', 'updated', 'pipeline')
      if h['err'] then
        -- not a hash: nothing this build indexes; skipped
      elseif not h[1] then
        if redis.call('EXISTS', j) == 0 then
          unindex(prefix, run, nil)
        end
      elseif (status == '' or h[1] == status)
        and (not has_version or h[4] == version)
        and (created_after == '' or not digits_lt(h[6], created_after))
        and (updated_before == '' or digits_lt(h[7], updated_before)) then
        local expires = false
        if h[1] == 'running' then
          local ttl = redis.call('PTTL', prefix .. '.lease:' .. run)
          if ttl > 0 then
            expires = string.format('%d', now + ttl)
          end
        end
        if lease == '' or h[1] ~= 'running' or (lease == 'held') == (expires ~= false) then
          local row = {run, h[8], h[1], h[2], h[3], h[4], h[5], h[6], h[7], expires}
          for i = 1, 10 do
            out[#out + 1] = row[i]
          end
          found = found + 1
          if found == want then
            return out
          end
        end
      end
    end
    if looked >= budget then
      return out
    end
  end
  min = '(' .. batch[#batch]
end
"
);

/// `KEYS`: journals. Returns, for each, `1` when it is indexed (a hash with
/// a `status`), `0` when it is not (a hash an earlier build wrote, or a
/// string: a run of a build before the journal), `-1` when it is gone.
pub(crate) const INDEXED: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  local status = redis.pcall('HGET', key, 'status')
  if type(status) == 'string' then
    out[i] = 1
  elseif redis.call('EXISTS', key) == 1 then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
";

/// `KEYS`: journal. `ARGV`: the journal's `born:ver` as read (`legacy` for
/// a run of a build before the journal), the key prefix, the run's key,
/// the latest checkpoint's summary (eleven: see `summarize`). Indexes a run
/// an earlier build wrote, only if its journal is still the one read (a
/// compare-and-set, as `MARK`'s) and has no `status` yet: its summary
/// written, stale members of the index dropped, the run indexed under its
/// status, and, when it is completed and expires, in `P.expiring`. A run
/// of a build before the journal is first migrated to the hash (keeping
/// its expiry). Returns 1 when indexed, 0 when the journal changed or is
/// indexed already (nothing written).
pub(crate) const REINDEX: &str = concat!(
    journal_fns!(),
    r"
local m = meta(KEYS[1])
if not m then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if m.legacy then
  if ARGV[1] ~= 'legacy' then
    return 0
  end
  migrate(KEYS[1], m)
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('HSET', KEYS[1], 'exp', '1')
  end
elseif m.status or version(m) ~= ARGV[1] then
  return 0
end
local prefix, run = ARGV[2], ARGV[3]
unindex(prefix, run, nil)
local status = summarize(KEYS[1], 4)
index(prefix, run, nil, status)
if status == 'completed' and ttl > 0 then
  redis.call('ZADD', prefix .. '.expiring', int(now_ms() + ttl), run)
end
return 1
"
);

/// `KEYS`: lease, epoch, nonce, journal, cancel mark, the pipeline's
/// completed index. `ARGV`: lease ttl (ms), the epoch ttl `ACQUIRE` takes
/// (ms), the calling `begin_run`'s nonce, `1` to replace a stored run (`0`:
/// keep it), the epoch ttl the deletes and saves take (ms), then the first
/// checkpoint: its number, `1` when it is whole, its entry bytes, the
/// journal ttl (ms, `0` for none), `1` when it is cancelled, `1` when it is
/// completed, the number of completed runs to keep (`none`: all), the key
/// prefix, the run's key, its summary (eleven: see `summarize`).
///
/// `begin_run` in one step: `ACQUIRE`'s logic, then (replace) `DELETE_FENCED`'s
/// or (keep) nothing more when a journal is stored, then `SAVE_FENCED`'s on
/// the journal, which is empty by then. Returns `{token, 1}` when the
/// first checkpoint was written, `{token, 0}` when a stored run was kept
/// (the lease taken all the same), `{0, 0}` when the lease is held,
/// `{0, 2}` when a run that was to be written is marked cancelled, `{0, 3}`
/// when the first checkpoint is a delta (it has no predecessor): on these
/// three nothing is written, the lease not taken.
///
/// The nonce is stored with the lease (same expiry) and the outcome
/// (`nonce:1` or `nonce:0`): a repeat of this very call (its reply lost with
/// the connection) finds it and returns what the first attempt did. It is
/// not deleted in a second round trip as `acquire_lease`'s is: it expires
/// with the lease, or `FINISH` takes it.
pub(crate) const BEGIN: &str = concat!(
    lease_fns!(),
    journal_fns!(),
    r"
local held = redis.call('GET', KEYS[1])
if held then
  local n = redis.call('GET', KEYS[3])
  if n == ARGV[3] .. ':1' then
    return {tonumber(held), 1}
  elseif n == ARGV[3] .. ':0' then
    return {tonumber(held), 0}
  end
  return {0, 0}
end
local replace = ARGV[4] == '1'
local write = replace or redis.call('EXISTS', KEYS[4]) == 0
if write then
  if not replace and redis.call('EXISTS', KEYS[5]) == 1 then
    return {0, 2}
  end
  if ARGV[7] ~= '1' then
    return {0, 3}
  end
end
-- ACQUIRE
local token = take(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2],
  ARGV[3] .. (write and ':1' or ':0'))
if not write then
  return {token, 0}
end
local prefix, run, epoch_px = ARGV[13], ARGV[14], ARGV[5]
local box = prefix .. '.signals:' .. run
if replace then
  -- DELETE_FENCED
  delete_run(KEYS[4], KEYS[5], KEYS[2], KEYS[6], prefix, run, epoch_px)
else
  -- nothing stored: no signals either
  redis.call('DEL', box)
end
-- SAVE_FENCED of a whole checkpoint, the journal's first
local set = {ARGV[6], ARGV[8], 'last', ARGV[6], 'born', born(), 'first', ARGV[6],
  'fulls', ARGV[6], 'ver', '1'}
if ARGV[9] ~= '0' then
  set[#set + 1] = 'exp'
  set[#set + 1] = '1'
end
redis.call('HSET', KEYS[4], unpack(set))
index(prefix, run, nil, summarize(KEYS[4], 15))
due(KEYS[4], prefix, run, nil, 15)
expire(KEYS[4], ARGV[9], KEYS[2], epoch_px, false, true, box)
if ARGV[10] ~= '0' then
  redis.call('SET', KEYS[5], ARGV[10])
end
completion(KEYS[4], KEYS[6], {completed = ARGV[11] == '1', keep = tonumber(ARGV[12]),
  prefix = prefix, run = run, px = ARGV[9], epoch_px = epoch_px}, false)
return {token, 1}
"
);

/// `KEYS`: those of `SAVE_FENCED` (lease, journal, cancel mark, epoch, the
/// pipeline's completed index), then the nonce, last. `ARGV`: those of
/// `SAVE_FENCED`, then, last, `1` to delete the run once saved, and how
/// long a repeat of this call may still come (ms: the command timeout).
/// (The script takes its own ones from the end, so `SAVE_FENCED` may gain
/// keys and arguments: `finish_run` then passes them too.)
///
/// `finish_run` in one step: `SAVE_FENCED` (run as a function: same
/// checks, same writes, same result), then, when it saved and `delete` is
/// set, `DELETE_FENCED`'s writes, then, if the lease is still the token's,
/// `RELEASE_LEASE`'s: the lease deleted, and the nonce key (`BEGIN`'s, no use
/// once the lease is gone) replaced by `end:<token>:<result>`, kept as long
/// as a repeat may come. Returns `SAVE_FENCED`'s result (1, 0, 2 or 3).
/// A repeat of this very call (its reply lost with the connection, the
/// lease gone with the first attempt) finds that mark and returns its
/// result, writing nothing; tokens are never drawn twice, so no other
/// call finds it.
pub(crate) const FINISH: &str = concat!(
    journal_fns!(),
    r"
local nonce, delete, mark_px = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
local mark = 'end:' .. ARGV[1] .. ':'
local n = redis.call('GET', nonce)
if n and string.sub(n, 1, #mark) == mark then
  return tonumber(string.sub(n, #mark + 1))
end
local function save_fenced()
",
    save_fenced_body!(),
    r"
end
local saved = save_fenced()
if saved == 1 and delete == '1' then
  -- DELETE_FENCED (the lease was checked by the save)
  delete_run(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[11], ARGV[12], ARGV[8])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', nonce, mark .. saved, 'PX', mark_px)
end
return saved
"
);

/// `KEYS`: lease, nonce. `ARGV`: token. `release_lease`: deletes the
/// lease and the nonce of the call that took it (`ACQUIRE`'s or `BEGIN`'s,
/// left to expire with the lease rather than deleted in a second round
/// trip) only if the lease is `token`'s. Returns 1 when released, 0 when
/// the lease is not `token`'s.
pub(crate) const RELEASE_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
";

/// Every script, as [`ALL`] (what a connection loads), and a static
/// [`Script`] of each, named `<NAME>_SCRIPT`.
macro_rules! scripts {
    ($($name:ident => $script:ident),* $(,)?) => {
        pub(crate) const ALL: [&str; [$($name),*].len()] = [$($name),*];
        $(pub(crate) static $script: LazyLock<Script> = LazyLock::new(|| Script::new($name));)*
    };
}

mod waits;

#[cfg(test)]
pub(crate) use waits::DECIDE;
pub(crate) use waits::{DUE, SEND, SET_DUE, TAKE};

scripts! {
    SEND => SEND_SCRIPT,
    TAKE => TAKE_SCRIPT,
    DUE => DUE_SCRIPT,
    SET_DUE => SET_DUE_SCRIPT,
    ACQUIRE => ACQUIRE_SCRIPT,
    RENEW => RENEW_SCRIPT,
    SAVE => SAVE_SCRIPT,
    SAVE_FENCED => SAVE_FENCED_SCRIPT,
    META => META_SCRIPT,
    LOAD => LOAD_SCRIPT,
    DELETE_FENCED => DELETE_FENCED_SCRIPT,
    DELETE => DELETE_SCRIPT,
    MARK => MARK_SCRIPT,
    LIST => LIST_SCRIPT,
    INDEXED => INDEXED_SCRIPT,
    REINDEX => REINDEX_SCRIPT,
    BEGIN => BEGIN_SCRIPT,
    FINISH => FINISH_SCRIPT,
    RELEASE_LEASE => RELEASE_LEASE_SCRIPT,
}
