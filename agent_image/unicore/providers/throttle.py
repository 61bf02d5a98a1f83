"""Throttle coordination for one model, shared by every process through Redis (seed 001, with error handling).

Two mechanisms, both keyed by the model (all keys share the hash tag ``{<model key>}``):

* **Proactive limiter**: a sliding window log. ``uc:throttle:{M}:win`` (zset: admission id -> admission time in
  ms) and ``uc:throttle:{M}:tok`` (hash: admission id -> tokens). A call is admitted only if, within the last
  ``window_seconds``, fewer than ``max_requests / multiplier`` calls were admitted and the tokens of those calls
  plus this call's estimate stay within ``max_tokens / multiplier``. Otherwise the Lua script returns how long to
  wait until enough old entries leave the window; the caller sleeps that long and asks again. The estimate is
  replaced by the real token count once the call returns (``commit``). Time is the Redis server's clock (ms), so
  pods on different nodes agree.
* **Shared multiplier** (``uc:throttle:{M}:state`` field ``mult``, 1.0 .. ``max_multiplier``): multiplied by
  ``throttle_factor`` whenever any process is throttled, decays by ``decay`` (~10 %) on each success. It divides
  the limits above, spaces calls by ``cooldown_seconds * (mult - 1)`` even when no limits are configured, and a
  throttled process also sets ``pause_until`` so every process waits out its backoff (mandatory shared backoff).

Redis trouble never blocks a model call: the coordinator logs it and lets the call through.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis
from pydantic import BaseModel, Field

from unicore.log import get_logger
from unicore.providers.retry import Sleeper, Uniform, real_sleep
from unicore.state.keys import THROTTLE_PREFIX
from unicore.state.telemetry import Telemetry

log = get_logger("throttle")

KEY_PREFIX = THROTTLE_PREFIX

_ACQUIRE = """
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

_COMMIT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return 1
end
return 0
"""

_THROTTLED = """
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

_SUCCEEDED = """
local st = KEYS[1]
local mult = tonumber(redis.call('HGET', st, 'mult') or '1') or 1
if mult <= 1 then return 1000000 end
mult = math.max(1, mult * tonumber(ARGV[1]))
redis.call('HSET', st, 'mult', string.format('%.6f', mult))
return math.floor(mult * 1000000)
"""


class ThrottleLimits(BaseModel):
    """Limits of one model across all processes. ``None`` (or 0) = no proactive limit of that kind."""

    max_requests: int | None = Field(
        default=None, ge=0, description="requests per window (RPM with the default window)"
    )
    max_tokens: int | None = Field(
        default=None, ge=0, description="tokens per window (TPM with the default window)"
    )
    window_seconds: float = Field(default=60.0, gt=0)
    max_multiplier: float = Field(default=3.0, ge=1.0)
    throttle_factor: float = Field(default=1.5, gt=1.0)
    decay: float = Field(default=0.9, gt=0.0, le=1.0)
    cooldown_seconds: float = Field(
        default=1.0, ge=0.0, description="call spacing per unit of multiplier above 1"
    )
    max_wait_seconds: float = Field(
        default=900.0, gt=0, description="give up limiting (and call anyway) after this wait"
    )


@dataclass(frozen=True)
class Admission:
    id: str | None  # None when Redis was unavailable and the call went through unlimited
    admitted_at_ms: int
    waited_seconds: float
    multiplier: float


def throttle_keys(model_key: str) -> tuple[str, str, str]:
    tag = "{" + model_key.replace("{", "(").replace("}", ")") + "}"
    return f"{KEY_PREFIX}{tag}:win", f"{KEY_PREFIX}{tag}:tok", f"{KEY_PREFIX}{tag}:state"


class ThrottleCoordinator:
    """Per-model limiter + shared multiplier; safe to use from any number of processes at once."""

    def __init__(
        self,
        client: redis.Redis,
        model_key: str,
        limits: ThrottleLimits | None = None,
        *,
        telemetry: Telemetry | None = None,
        sleep: Sleeper = real_sleep,
        uniform: Uniform = random.uniform,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.model_key = model_key
        self.limits = limits or ThrottleLimits()
        self._redis = client
        self._keys = throttle_keys(model_key)
        self._telemetry = telemetry or Telemetry(client)
        self._sleep = sleep
        self._uniform = uniform
        self._clock_ms = clock_ms  # None = the Redis server's clock
        self._acquire = client.register_script(_ACQUIRE)
        self._commit = client.register_script(_COMMIT)
        self._throttled = client.register_script(_THROTTLED)
        self._succeeded = client.register_script(_SUCCEEDED)

    def _now_arg(self) -> str:
        return "" if self._clock_ms is None else str(int(self._clock_ms()))

    @property
    def _labels(self) -> dict[str, str]:
        return {"model": self.model_key}

    def try_acquire(
        self, estimated_tokens: int, admission_id: str | None = None
    ) -> tuple[bool, float, int, float]:
        """One attempt: (admitted, seconds to wait, server time ms, multiplier). Admits with
        ``admission_id``."""
        lim = self.limits
        now = self._now_arg()
        admitted, wait_ms, now_ms, mult_ppm = self._acquire(
            keys=list(self._keys),
            args=[
                now,
                int(lim.window_seconds * 1000),
                lim.max_requests or 0,
                lim.max_tokens or 0,
                max(0, int(estimated_tokens)),
                admission_id or uuid.uuid4().hex,
                int(lim.cooldown_seconds * 1000),
            ],
        )
        return bool(admitted), int(wait_ms) / 1000.0, int(now_ms), int(mult_ppm) / 1e6

    def acquire(self, estimated_tokens: int = 0) -> Admission:
        """Block (with the injected sleeper) until this call fits the model's shared limits."""
        admission_id = uuid.uuid4().hex
        waited = 0.0
        start = time.monotonic()
        while True:
            try:
                ok, wait, now_ms, mult = self.try_acquire(estimated_tokens, admission_id)
            except redis.RedisError as exc:
                log.warning(
                    "throttle coordination unavailable for %s (%s); calling without it", self.model_key, exc
                )
                return Admission(None, int(time.time() * 1000), waited, 1.0)
            if ok:
                if waited > 0:
                    self._telemetry.incr("throttle_wait_seconds_total", self._labels, by=waited)
                return Admission(admission_id, now_ms, waited, mult)
            if waited >= self.limits.max_wait_seconds:
                log.warning("throttle wait for %s exceeded %.0fs; calling anyway", self.model_key, waited)
                return Admission(None, now_ms, waited, mult)
            # a little jitter so waiting processes do not all retry in the same millisecond
            pause = wait * self._uniform(1.0, 1.05) + 0.001
            log.debug("throttle: %s waits %.3fs (multiplier %.2f)", self.model_key, pause, mult)
            self._sleep(pause)
            waited += pause
            if self._sleep is real_sleep:
                waited = max(waited, time.monotonic() - start)

    def commit(self, admission: Admission, tokens: int) -> None:
        """Replace the admission's token estimate with the tokens the call really used."""
        if admission.id is None:
            return
        try:
            self._commit(keys=list(self._keys[:2]), args=[admission.id, max(0, int(tokens))])
        except redis.RedisError as exc:
            log.warning("could not record token use for %s: %s", self.model_key, exc)

    def throttled(self, backoff_seconds: float) -> float:
        """The provider throttled us: raise the shared multiplier and make every process wait
        ``backoff_seconds``."""
        self._telemetry.incr("throttle_events_total", self._labels)
        try:
            ppm = self._throttled(
                keys=[self._keys[2]],
                args=[
                    self.limits.throttle_factor,
                    self.limits.max_multiplier,
                    int(backoff_seconds * 1000),
                    self._now_arg(),
                ],
            )
        except redis.RedisError as exc:
            log.warning("could not share throttling of %s: %s", self.model_key, exc)
            return 1.0
        mult = int(ppm) / 1e6
        self._telemetry.set_gauge("throttle_multiplier", mult, self._labels)
        return mult

    def succeeded(self) -> float:
        """A call succeeded: decay the shared multiplier towards 1.0."""
        try:
            ppm = self._succeeded(keys=[self._keys[2]], args=[self.limits.decay])
        except redis.RedisError as exc:
            log.warning("could not update throttle multiplier of %s: %s", self.model_key, exc)
            return 1.0
        mult = int(ppm) / 1e6
        self._telemetry.set_gauge("throttle_multiplier", mult, self._labels)
        return mult

    def multiplier(self) -> float:
        value = self._redis.hget(self._keys[2], "mult")
        return float(value) if value is not None else 1.0
