//! The Lua scripts behind the ownership methods. Each runs atomically on the
//! server, in one round trip (`EVALSHA`, falling back to loading the script
//! when the server does not have it).

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: lease, epoch, nonce. `ARGV`: lease ttl (ms), epoch ttl (ms), the
/// calling `acquire_lease`'s nonce. Returns the new token, or 0 when the
/// lease is held. An epoch with no expiry (its run's checkpoint has none)
/// keeps none; a new or expiring one gets the epoch ttl.
///
/// A new lease stores the nonce next to it (same expiry). A lease that
/// carries this nonce was set by an earlier attempt of this very call (sent
/// again after its reply was lost on a dropped connection): its token is
/// returned and its expiry reset, as if this attempt had taken it.
pub(crate) const ACQUIRE: &str = r"
local held = redis.call('GET', KEYS[1])
if held then
  if redis.call('GET', KEYS[3]) ~= ARGV[3] then
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if redis.call('PTTL', KEYS[2]) ~= -1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return tonumber(held)
end
local fresh = redis.call('EXISTS', KEYS[2]) == 0
local token = redis.call('INCR', KEYS[2])
if fresh or redis.call('PTTL', KEYS[2]) ~= -1 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[1])
return token
";

/// `KEYS`: lease, epoch. `ARGV`: token, lease ttl (ms), epoch ttl (ms).
/// Returns 1 when renewed, 0 when the lease is not `token`'s any more.
pub(crate) const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('PTTL', KEYS[2]) ~= -1 then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
";

/// `KEYS`: a key. `ARGV`: a value. Deletes the key only if it holds the
/// value: the lease only if it is `token`'s (`release_lease`), the acquire
/// nonce only if it is still the calling `acquire_lease`'s.
pub(crate) const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Sets `key` to `value` with an expiry of `px` ms, or none when `px` is
/// `'0'` (a run that did not complete); the run's epoch `epoch` then keeps
/// no expiry either, and otherwise lasts at least `epoch_px` ms. Shared by
/// the scripts that write a checkpoint.
macro_rules! put_fn {
    () => {
        r"
local function put(key, value, px, epoch, epoch_px)
  if px == '0' then
    redis.call('SET', key, value)
    redis.call('PERSIST', epoch)
  else
    redis.call('SET', key, value, 'PX', px)
    if redis.call('EXISTS', epoch) == 1 and redis.call('PTTL', epoch) < tonumber(epoch_px) then
      redis.call('PEXPIRE', epoch, epoch_px)
    end
  end
end
"
    };
}

/// `KEYS`: checkpoint, cancel mark, epoch. `ARGV`: bytes, checkpoint ttl
/// (ms, `0` for none), `1` when the checkpoint is cancelled, epoch ttl (ms).
/// The plain `save`: the checkpoint, and the cancel mark set or deleted to
/// match it.
pub(crate) const SAVE: &str = concat!(
    put_fn!(),
    r"
put(KEYS[1], ARGV[1], ARGV[2], KEYS[3], ARGV[4])
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], 1)
else
  redis.call('DEL', KEYS[2])
end
return 1
"
);

/// `KEYS`: lease, checkpoint, cancel mark, epoch. `ARGV`: token, bytes,
/// checkpoint ttl (ms, `0` for none), `1` when the checkpoint is cancelled,
/// epoch ttl (ms). Returns 1 when saved; 2 (nothing written) when the run is
/// cancelled, whatever the lease; 0 (nothing written) when the lease is not
/// `token`'s.
pub(crate) const SAVE_FENCED: &str = concat!(
    put_fn!(),
    r"
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 2
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
put(KEYS[2], ARGV[2], ARGV[3], KEYS[4], ARGV[5])
if ARGV[4] == '1' then
  redis.call('SET', KEYS[3], 1)
end
return 1
"
);

/// `KEYS`: lease, checkpoint, cancel mark, epoch. `ARGV`: token, epoch ttl
/// (ms). Returns 1 when deleted (or already absent), 0 when the lease is not
/// `token`'s. A cancelled run is deleted like any other, mark and all; an
/// epoch left without expiry gets the epoch ttl.
pub(crate) const DELETE_FENCED: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
if redis.call('PTTL', KEYS[4]) == -1 then
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return 1
";

/// `KEYS`: checkpoint, cancel mark, epoch. `ARGV`: epoch ttl (ms). The plain
/// `delete`: as `DELETE_FENCED` without the lease check.
pub(crate) const DELETE: &str = r"
redis.call('DEL', KEYS[1], KEYS[2])
if redis.call('PTTL', KEYS[3]) == -1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return 1
";

/// `KEYS`: checkpoint, cancel mark, epoch. `ARGV`: the checkpoint's bytes as
/// the cancel read them, its cancelled bytes. Writes the cancelled bytes
/// and the mark, with no expiry (a cancelled run is kept until deleted, and
/// so is its epoch), only if the checkpoint
/// still holds the bytes read: returns 1 then, and also when it holds the
/// cancelled bytes already (an earlier attempt of this very call, sent again
/// after its reply was lost); 0 (nothing written) when a write came in
/// between, and the cancel reads again.
pub(crate) const CANCEL: &str = r"
local current = redis.call('GET', KEYS[1])
if current == ARGV[2] then
  return 1
end
if current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], 1)
redis.call('PERSIST', KEYS[3])
return 1
";

pub(crate) const ALL: [&str; 8] = [
    ACQUIRE,
    RENEW,
    RELEASE,
    SAVE,
    SAVE_FENCED,
    DELETE_FENCED,
    DELETE,
    CANCEL,
];

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static SAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SAVE));
pub(crate) static SAVE_FENCED_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SAVE_FENCED));
pub(crate) static DELETE_FENCED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(DELETE_FENCED));
pub(crate) static DELETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE));
pub(crate) static CANCEL_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CANCEL));
