//! The Lua scripts behind the ownership methods. Each runs atomically on the
//! server, in one round trip (`EVALSHA`, falling back to loading the script
//! when the server does not have it).

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: lease, epoch, nonce. `ARGV`: lease ttl (ms), epoch ttl (ms), the
/// calling `acquire_lease`'s nonce. Returns the new token, or 0 when the
/// lease is held.
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
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return tonumber(held)
end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
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
redis.call('PEXPIRE', KEYS[2], ARGV[3])
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

/// `KEYS`: lease, checkpoint. `ARGV`: token, bytes, checkpoint ttl (ms).
/// Returns 1 when saved, 0 (nothing written) when the lease is not `token`'s.
pub(crate) const SAVE_FENCED: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
";

/// `KEYS`: lease, checkpoint. `ARGV`: token.
/// Returns 1 when deleted (or already absent), 0 when the lease is not `token`'s.
pub(crate) const DELETE_FENCED: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
return 1
";

pub(crate) const ALL: [&str; 5] = [ACQUIRE, RENEW, RELEASE, SAVE_FENCED, DELETE_FENCED];

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static SAVE_FENCED_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SAVE_FENCED));
pub(crate) static DELETE_FENCED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(DELETE_FENCED));
