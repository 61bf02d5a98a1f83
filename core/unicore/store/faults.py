"""The fault-injection harness's Redis side (``unicore.faults``): one key per kill point, armed at most once over a
whole run, and the log of every kill in order."""

from __future__ import annotations

from unicore.store.client import RedisClient
from unicore.store.keys import FAULTS_LOG, FAULTS_PREFIX


def claim_kill(client: RedisClient, point: str) -> bool:
    """True (and ``point`` appended to the kill log) for the first process to reach ``point``; False afterwards."""
    if client.set(f"{FAULTS_PREFIX}{point}", "1", nx=True):
        client.rpush(FAULTS_LOG, point)
        return True
    return False


__all__ = ["claim_kill"]
