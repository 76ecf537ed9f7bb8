//! The Lua scripts behind the ownership methods. Each runs atomically on the
//! server, in one round trip (`EVALSHA`, falling back to loading the script
//! when the server does not have it).

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: lease, epoch. `ARGV`: lease ttl (ms), epoch ttl (ms).
/// Returns the new token, or 0 when the lease is held.
pub(crate) const ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
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

/// `KEYS`: lease. `ARGV`: token. Deletes the lease only if it is `token`'s.
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
