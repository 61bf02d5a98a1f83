"""The Redis side of the per-model throttle coordination (``unicore.providers.throttle`` has the policy: waits,
retries, telemetry). Three keys per model, under one hash tag ``{<model key>}`` (``throttle_keys``):
``uc:throttle:{M}:win`` (zset: admission id -> admission time in ms), ``uc:throttle:{M}:tok`` (hash: admission id
-> tokens) and ``uc:throttle:{M}:state`` (hash: ``mult``, ``pause_until``, ``last``). Each operation is one Lua
script; time is the Redis server's clock (ms) unless the caller passes one.
"""

from __future__ import annotations

from unicore.store.client import RedisClient
from unicore.store.keys import THROTTLE_PREFIX

# KEYS: win, tok, state   ARGV: now ms ('' = the server's clock), window ms, max requests, max tokens, estimate,
# admission id, cooldown ms. Returns {admitted 0/1, wait ms, now ms, multiplier in ppm}.
ACQUIRE = """
local win, tok, st = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local window = tonumber(ARGV[2])
local maxreq = tonumber(ARGV[3])
local maxtok = tonumber(ARGV[4])
local est = tonumber(ARGV[5])
local id = ARGV[6]
local cooldown = tonumber(ARGV[7])
local mult = tonumber(redis.call('HGET', st, 'mult') or '1') or 1
local mult_ppm = math.floor(mult * 1000000)
local pause = tonumber(redis.call('HGET', st, 'pause_until') or '0') or 0
if pause > now then return {0, pause - now, now, mult_ppm} end
local old = redis.call('ZRANGEBYSCORE', win, '-inf', now - window)
if #old > 0 then
  redis.call('ZREMRANGEBYSCORE', win, '-inf', now - window)
  for i = 1, #old, 500 do
    redis.call('HDEL', tok, unpack(old, i, math.min(i + 499, #old)))
  end
end
local entries = redis.call('ZRANGE', win, 0, -1, 'WITHSCORES')
local n = #entries / 2
local wait = 0
if maxreq > 0 and n > 0 then
  local allowed = math.max(1, math.floor(maxreq / mult))
  if n + 1 > allowed then
    local k = n + 1 - allowed
    wait = math.max(wait, tonumber(entries[2 * k]) + window - now)
  end
end
if maxtok > 0 and n > 0 then
  local budget = maxtok / mult
  local counts = {}
  for i = 1, n, 500 do
    local ids = {}
    for j = i, math.min(i + 499, n) do ids[#ids + 1] = entries[2 * j - 1] end
    local part = redis.call('HMGET', tok, unpack(ids))
    for j = 1, #part do counts[i + j - 1] = part[j] end
  end
  local used = 0
  for i = 1, n do used = used + (tonumber(counts[i]) or 0) end
  if used + est > budget then
    local freed = 0
    for i = 1, n do
      freed = freed + (tonumber(counts[i]) or 0)
      if used - freed + est <= budget or i == n then
        wait = math.max(wait, tonumber(entries[2 * i]) + window - now)
        break
      end
    end
  end
end
if cooldown > 0 and mult > 1 then
  local last = tonumber(redis.call('HGET', st, 'last') or '0') or 0
  local gap = math.floor(cooldown * (mult - 1))
  if last + gap > now then wait = math.max(wait, last + gap - now) end
end
if wait > 0 then return {0, wait, now, mult_ppm} end
redis.call('ZADD', win, now, id)
redis.call('HSET', tok, id, est)
redis.call('HSET', st, 'last', now)
redis.call('PEXPIRE', win, window + 60000)
redis.call('PEXPIRE', tok, window + 60000)
redis.call('PEXPIRE', st, 86400000)
return {1, 0, now, mult_ppm}
"""

# KEYS: win, tok   ARGV: admission id, tokens. Replaces the estimate of a live admission.
COMMIT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: state   ARGV: factor, max multiplier, backoff ms, now ms. Returns the new multiplier in ppm.
THROTTLED = """
local st = KEYS[1]
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local mult = tonumber(redis.call('HGET', st, 'mult') or '1') or 1
mult = math.min(tonumber(ARGV[2]), mult * tonumber(ARGV[1]))
local pause = tonumber(redis.call('HGET', st, 'pause_until') or '0') or 0
pause = math.max(pause, now + tonumber(ARGV[3]))
redis.call('HSET', st, 'mult', string.format('%.6f', mult), 'pause_until', pause)
redis.call('PEXPIRE', st, 86400000)
return math.floor(mult * 1000000)
"""

# KEYS: state   ARGV: decay. Returns the new multiplier in ppm.
SUCCEEDED = """
local st = KEYS[1]
local mult = tonumber(redis.call('HGET', st, 'mult') or '1') or 1
if mult <= 1 then return 1000000 end
mult = math.max(1, mult * tonumber(ARGV[1]))
redis.call('HSET', st, 'mult', string.format('%.6f', mult))
return math.floor(mult * 1000000)
"""


def throttle_keys(model_key: str) -> tuple[str, str, str]:
    tag = "{" + model_key.replace("{", "(").replace("}", ")") + "}"
    return f"{THROTTLE_PREFIX}{tag}:win", f"{THROTTLE_PREFIX}{tag}:tok", f"{THROTTLE_PREFIX}{tag}:state"


class ThrottleState:
    """The throttle keys of one model: each call is one script (one round trip); errors are the caller's."""

    def __init__(self, client: RedisClient, model_key: str) -> None:
        self.redis = client
        self.keys = throttle_keys(model_key)
        self._acquire = client.register_script(ACQUIRE)
        self._commit = client.register_script(COMMIT)
        self._throttled = client.register_script(THROTTLED)
        self._succeeded = client.register_script(SUCCEEDED)

    def acquire(self, *, now: str, window_ms: int, max_requests: int, max_tokens: int, estimate: int,
                admission_id: str, cooldown_ms: int) -> tuple[bool, int, int, int]:
        """Admit a call (recorded under ``admission_id``) if it fits: (admitted, wait ms, now ms, multiplier ppm)."""
        admitted, wait_ms, now_ms, mult_ppm = self._acquire(
            keys=list(self.keys),
            args=[now, window_ms, max_requests, max_tokens, estimate, admission_id, cooldown_ms],
        )
        return bool(admitted), int(wait_ms), int(now_ms), int(mult_ppm)

    def commit(self, admission_id: str, tokens: int) -> None:
        self._commit(keys=list(self.keys[:2]), args=[admission_id, tokens])

    def throttled(self, *, factor: float, max_multiplier: float, backoff_ms: int, now: str) -> int:
        """Raise the shared multiplier and pause every process for ``backoff_ms``; the multiplier in ppm."""
        return int(self._throttled(keys=[self.keys[2]], args=[factor, max_multiplier, backoff_ms, now]))

    def succeeded(self, decay: float) -> int:
        """Decay the shared multiplier towards 1.0; the multiplier in ppm."""
        return int(self._succeeded(keys=[self.keys[2]], args=[decay]))

    def multiplier(self) -> float | None:
        value = self.redis.hget(self.keys[2], "mult")
        return float(value) if value is not None else None


__all__ = ["ThrottleState", "throttle_keys"]
