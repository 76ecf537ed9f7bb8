//! The Lua scripts of runs that wait (contract rules 25-27): a signal
//! sent (`SEND`), a wait decided (`TAKE`, a port of
//! `fluxio_core::store::decide`) and the due runs read (`DUE`). The
//! scripts that write checkpoints keep the due-index themselves
//! (`waits_fns!`'s `due`, through `index_fns!`).
//!
//! A run's mailbox is the hash `P.signals:R`: a field per wait name holding
//! its entry, `<order> <state> <sent_at> <sender length>\n<sender><payload>`
//! (see `crate::store::waits`), and the field `""` (no wait name is empty)
//! counting the entries ever added, so each entry's `order` is its place
//! in send order.

/// The Lua of [`decide`](fluxio_core::store::decide), which `TAKE` runs
/// (and a unit test runs against the Rust on the same mailboxes).
///
/// - `decide(box, now, expired, refuse, unit, names)`: decides the wait on
///   `names` over the mailbox `box` at `now` (decimal ms), changing it as
///   `decide` does, in the same order: `refuse`'s entry (`''`: none) and
///   the closed entries of `names` go; a consumed entry of `names` (the
///   first sent) is the decision; all of `names` closed is a timeout; the
///   earliest delivered entry (by sent-at, then order) is taken (made
///   consumed); else an `expired` wait times out; else it is open. A
///   decision closes the names without an entry (new entries carrying the
///   payload `unit`, in the order of `names`). Returns `{'10'}` (open),
///   `{'11', name, entry}` (the signal taken), `{'12'}` (timed out), or
///   `{'8', name}` for an entry that does not read (nothing written).
macro_rules! decide_fns {
    () => {
        r"
local function decide(box, now, expired, refuse, unit, names)
  if refuse ~= '' then
    redis.call('HDEL', box, refuse)
    for _, n in ipairs(names) do
      local v = redis.call('HGET', box, n)
      if v and string.match(v, '^%d+ (%a+) ') == 'closed' then
        redis.call('HDEL', box, n)
      end
    end
  end
  local got, list = {}, {}
  for _, n in ipairs(names) do
    if not got[n] then
      local v = redis.call('HGET', box, n)
      if v then
        local e = entry(v)
        if not e then
          return {'8', n}
        end
        e.name = n
        got[n] = e
        list[#list + 1] = e
      end
    end
  end
  local taken
  for _, e in ipairs(list) do
    if e.state == 'consumed' and (not taken or e.order < taken.order) then
      taken = e
    end
  end
  if taken then
    return {'11', taken.name, taken.v}
  end
  local closed = #names > 0
  for _, n in ipairs(names) do
    if not (got[n] and got[n].state == 'closed') then
      closed = false
    end
  end
  if closed then
    return {'12'}
  end
  local first
  for _, e in ipairs(list) do
    if e.state == 'delivered' and (not first or digits_lt(e.at, first.at)
        or (e.at == first.at and e.order < first.order)) then
      first = e
    end
  end
  local reply
  if first then
    local v = string.format('%d consumed ', first.order) .. string.sub(first.v, first.rest)
    redis.call('HSET', box, first.name, v)
    reply = {'11', first.name, v}
  elseif expired then
    reply = {'12'}
  else
    return {'10'}
  end
  for _, n in ipairs(names) do
    if redis.call('HEXISTS', box, n) == 0 then
      local order = redis.call('HINCRBY', box, '', 1)
      redis.call('HSET', box, n, string.format('%d closed %s 0\n', order, now) .. unit)
    end
  end
  return reply
end
"
    };
}

/// `KEYS`: journal, mailbox. `ARGV`: the key prefix, the run's key, the
/// wait name, sent at (ms), the sender, the payload's bytes.
/// `send_signal`, as `fluxio_core::store::deliver` decides, reading the
/// run's `status` and `waits` (its summary) and the name's entry only.
/// Returns `{'0'}` when stored (in send order; with the journal's expiry
/// when it has one), and then, when the run is waiting for the name, the
/// run is due now (scored 0) and its watchers told; `{'1'}` when the same
/// payload was stored before (nothing written); `{'3', status}` for a
/// completed or cancelled run, `{'4'}` when no run is stored, `{'5'}` for
/// a run without a summary (a run of an earlier build: `reindex` it, then
/// send again), `{'6'}` when the name is closed, `{'7'}` when another
/// payload was delivered for it, `{'8'}` when its entry does not read:
/// nothing written on these.
pub(crate) const SEND: &str = concat!(
    waits_fns!(),
    r"
local h = redis.pcall('HMGET', KEYS[1], 'status', 'waits')
if h['err'] or not h[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'4'}
  end
  return {'5'}
end
local status, name, payload = h[1], ARGV[3], ARGV[6]
if status == 'completed' or status == 'cancelled' then
  return {'3', status}
end
local stored = redis.call('HGET', KEYS[2], name)
if stored then
  local e = entry(stored)
  if not e then
    return {'8'}
  elseif e.state == 'closed' then
    return {'6'}
  elseif string.sub(stored, e.body) == payload then
    return {'1'}
  end
  return {'7'}
end
local order = redis.call('HINCRBY', KEYS[2], '', 1)
redis.call('HSET', KEYS[2], name,
  string.format('%d delivered %s %d\n', order, ARGV[4], #ARGV[5]) .. ARGV[5] .. payload)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if status == 'waiting' then
  for w in string.gmatch(h[2] or '', '[^\n]+') do
    if w == name then
      schedule(ARGV[1], ARGV[2], 0)
      tell(ARGV[1], 'due', ARGV[2])
      break
    end
  end
end
return {'0'}
"
);

/// `KEYS`: lease, journal, cancel mark, mailbox. `ARGV`: token, now (ms),
/// `1` when the wait's deadline passed, the name whose signal the run
/// refused (`''`: none), the payload of a closed entry (unit's bytes),
/// then the wait's names. `take_signal`, fenced as `SAVE_FENCED` is:
/// `{'2'}` when the run is cancelled, `{'0'}` when the lease is not
/// `token`'s, `{'4'}` when no run is stored (nothing written on these);
/// otherwise `decide`'s reply. A mailbox left with no entry is deleted;
/// one of a journal with an expiry gets it. The due-index is left as it
/// is: the run stays due (a worker that dies after taking a signal, or
/// timing out, leaves it to the next) until its next checkpoint scores it
/// again.
pub(crate) const TAKE: &str = concat!(
    waits_fns!(),
    decide_fns!(),
    r"
local no = refused(KEYS[1], KEYS[3], ARGV[1])
if no then
  return {tostring(no)}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'4'}
end
local names = {}
for i = 6, #ARGV do
  names[#names + 1] = ARGV[i]
end
local reply = decide(KEYS[4], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5], names)
if redis.call('HLEN', KEYS[4]) <= 1 then
  redis.call('DEL', KEYS[4])
else
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
end
return reply
"
);

/// `KEYS`: lease, journal, cancel mark. `ARGV`: token, the key prefix,
/// the run's key, its recovery time (ms, decimal; `''`: none).
/// `set_due`, fenced as `SAVE_FENCED` is: `2` when the run is cancelled,
/// `6` when it is paused, `0` when the lease is not `token`'s, `4` when no run is stored (nothing
/// written on these). A running or failed run is scored at its recovery
/// time in the due-index (its journal's field `retry` holds it, so its
/// next write takes it out: `due`), or taken out with `''`; any other run
/// (and one of an earlier build, without a summary) is left as it is.
/// Returns 1 then.
pub(crate) const SET_DUE: &str = concat!(
    waits_fns!(),
    r"
local no = refused(KEYS[1], KEYS[3], ARGV[1])
if no then
  return no
end
local status = redis.pcall('HGET', KEYS[2], 'status')
if type(status) ~= 'string' then
  return redis.call('EXISTS', KEYS[2]) == 0 and 4 or 1
end
if status == 'running' or status == 'failed' then
  if ARGV[4] == '' then
    if redis.call('HDEL', KEYS[2], 'retry') == 1 then
      unschedule(ARGV[2], ARGV[3])
    end
  else
    redis.call('HSET', KEYS[2], 'retry', ARGV[4])
    schedule(ARGV[2], ARGV[3], ARGV[4])
  end
end
return 1
"
);

/// `KEYS`: the pipelines' set `P.due` (of one bucket on a cluster).
/// `ARGV`: the key prefix, due at or before (ms), how many runs at most
/// (`limit`), how many members of each pipeline's due-index to look at at
/// most (`budget`), the lease ttl (ms) of a claim (`0`: only list), the
/// epoch ttl (ms) and the nonce of a claim (as `ACQUIRE` takes them), how
/// many versions follow (`0`: any version), the versions, then the
/// pipelines (none: every pipeline in `P.due`). For each pipeline, its
/// first `limit` runs by due time that no worker holds (their lease key
/// does not exist) and of a version asked, each as five values: its key,
/// its pipeline and version (its summary's), when it is due (ms), and the
/// token of the lease a claim took on it (`0` when listing). A claim
/// takes the lease as `ACQUIRE` does; a run whose lease carries the
/// claim's nonce was claimed by an earlier attempt of the same call (sent
/// again after its reply was lost), and is returned with that lease. A
/// member whose journal is gone is taken out of the due-index.
pub(crate) const DUE: &str = concat!(
    lease_fns!(),
    waits_fns!(),
    r"
local prefix, before = ARGV[1], ARGV[2]
local limit, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local lease_px, epoch_px, mark = ARGV[5], ARGV[6], ARGV[7]
local claim = lease_px ~= '0'
local versions, nv = {}, tonumber(ARGV[8])
for i = 9, 8 + nv do
  versions[ARGV[i]] = true
end
local pipelines = {}
for i = 9 + nv, #ARGV do
  pipelines[#pipelines + 1] = ARGV[i]
end
if #pipelines == 0 then
  pipelines = redis.call('SMEMBERS', KEYS[1])
end
local out, gone = {}, {}
for _, p in ipairs(pipelines) do
  local key = prefix .. '.due:' .. p
  local found, looked = 0, 0
  while found < limit and looked < budget do
    local batch = redis.call('ZRANGEBYSCORE', key, '-inf', before, 'WITHSCORES', 'LIMIT', looked,
      math.min(200, budget - looked))
    if #batch == 0 then
      break
    end
    looked = looked + #batch / 2
    for i = 1, #batch, 2 do
      local run = batch[i]
      local lease = prefix .. '.lease:' .. run
      local token = '0'
      local free = redis.call('EXISTS', lease) == 0
      if not free and claim and redis.call('GET', prefix .. '.nonce:' .. run) == mark then
        free, token = true, redis.call('GET', lease)
      end
      if found < limit and free then
        local h = redis.pcall('HMGET', prefix .. ':' .. run, 'version', 'pipeline')
        if h['err'] or not h[1] then
          gone[#gone + 1] = run
        elseif nv == 0 or versions[h[1]] then
          if claim and token == '0' then
            token = tostring(take(lease, prefix .. '.epoch:' .. run, prefix .. '.nonce:' .. run,
              prefix .. ':' .. run, lease_px, epoch_px, mark))
          end
          local due = string.format('%d', tonumber(batch[i + 1]))
          for _, v in ipairs({run, h[2] or '', h[1], due, token}) do
            out[#out + 1] = v
          end
          found = found + 1
        end
      end
    end
  end
end
for _, run in ipairs(gone) do
  unschedule(prefix, run)
end
return out
"
);

/// `KEYS`: mailbox. `ARGV`: now, `1` when expired, refused name (`''`),
/// unit's bytes, names. `decide` alone, for the test that runs it against
/// `fluxio_core::store::decide`.
#[cfg(test)]
pub(crate) const DECIDE: &str = concat!(
    waits_fns!(),
    decide_fns!(),
    r"
local names = {}
for i = 5, #ARGV do
  names[#names + 1] = ARGV[i]
end
return decide(KEYS[1], ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4], names)
"
);
