"""Retry policy for model calls: retry only throttling / overload, fail fast on the rest.

Up to ``max_attempts`` tries (default 8). After failed try ``n`` the caller waits
``base_delay * 2 ** (n - 1)`` seconds with +-``jitter`` (default 2 s x 2^(n-1), +-20 %).
Sleep and randomness are injectable so tests compute the delays without sleeping.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

Sleeper = Callable[[float], None]
Uniform = Callable[[float, float], float]


class RetryPolicy(BaseModel):
    max_attempts: int = Field(default=8, ge=1, le=50)
    base_delay: float = Field(default=2.0, ge=0.0)
    jitter: float = Field(default=0.2, ge=0.0, lt=1.0)
    max_delay: float = Field(default=600.0, gt=0.0)
    # A server's Retry-After replaces the computed backoff, but never beyond this (a bad header must not park a
    # turn for hours).
    max_retry_after: float = Field(default=120.0, ge=0.0)

    def delay(self, attempt: int, uniform: Uniform = random.uniform) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based) before the next try."""
        if attempt < 1:
            raise ValueError("attempt numbers start at 1")
        nominal = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
        return nominal * uniform(1.0 - self.jitter, 1.0 + self.jitter)


# AWS error codes (and HTTP statuses) that mean "slow down / try again later".
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "ServiceUnavailableException",
        "ServiceUnavailable",
        "ModelNotReadyException",
    }
)
RETRYABLE_STATUSES = frozenset({429, 503, 529})


def is_retryable(code: str | None, status: int | None) -> bool:
    return (code in RETRYABLE_CODES) or (status in RETRYABLE_STATUSES)


def real_sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
