"""Throttle coordination for one model, shared by every process through Redis.

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

Redis trouble never blocks a model call: the coordinator logs it and lets the call through. The keys and the Lua
scripts are ``unicore.store.throttle``'s (the Redis layout's owner).
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
from unicore.store.keys import THROTTLE_PREFIX
from unicore.store.telemetry import Telemetry
from unicore.store.throttle import ThrottleState, throttle_keys

log = get_logger("throttle")

KEY_PREFIX = THROTTLE_PREFIX
__all__ = ["Admission", "KEY_PREFIX", "ThrottleCoordinator", "ThrottleLimits", "throttle_keys"]


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
        self._state = ThrottleState(client, model_key)
        self._telemetry = telemetry or Telemetry(client)
        self._sleep = sleep
        self._uniform = uniform
        self._clock_ms = clock_ms  # None = the Redis server's clock

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
        admitted, wait_ms, now_ms, mult_ppm = self._state.acquire(
            now=now,
            window_ms=int(lim.window_seconds * 1000),
            max_requests=lim.max_requests or 0,
            max_tokens=lim.max_tokens or 0,
            estimate=max(0, int(estimated_tokens)),
            admission_id=admission_id or uuid.uuid4().hex,
            cooldown_ms=int(lim.cooldown_seconds * 1000),
        )
        return admitted, wait_ms / 1000.0, now_ms, mult_ppm / 1e6

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
            self._state.commit(admission.id, max(0, int(tokens)))
        except redis.RedisError as exc:
            log.warning("could not record token use for %s: %s", self.model_key, exc)

    def throttled(self, backoff_seconds: float) -> float:
        """The provider throttled us: raise the shared multiplier and make every process wait
        ``backoff_seconds``."""
        self._telemetry.incr("throttle_events_total", self._labels)
        try:
            ppm = self._state.throttled(
                factor=self.limits.throttle_factor,
                max_multiplier=self.limits.max_multiplier,
                backoff_ms=int(backoff_seconds * 1000),
                now=self._now_arg(),
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
            ppm = self._state.succeeded(self.limits.decay)
        except redis.RedisError as exc:
            log.warning("could not update throttle multiplier of %s: %s", self.model_key, exc)
            return 1.0
        mult = int(ppm) / 1e6
        self._telemetry.set_gauge("throttle_multiplier", mult, self._labels)
        return mult

    def multiplier(self) -> float:
        value = self._state.multiplier()
        return value if value is not None else 1.0
