"""The Bedrock model-name cache (``unicore.providers.model_names``): one JSON object per region, short name ->
model or inference-profile id, written with a TTL by the first process that discovers the names."""

from __future__ import annotations

import json

from unicore.store.client import RedisClient
from unicore.store.keys import BEDROCK_MODELS_CACHE


def model_cache_key(region: str) -> str:
    return BEDROCK_MODELS_CACHE.format(region=region)


def read_model_names(client: RedisClient, region: str) -> dict[str, str] | None:
    """The cached names of ``region``; None when there are none (or they do not decode). Raises RedisError."""
    raw = client.get(model_cache_key(region))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def write_model_names(client: RedisClient, region: str, mapping: dict[str, str], ttl_seconds: int) -> None:
    """Cache ``mapping`` for ``region`` for ``ttl_seconds``. Raises RedisError."""
    client.set(model_cache_key(region), json.dumps(mapping, sort_keys=True), ex=ttl_seconds)


__all__ = ["model_cache_key", "read_model_names", "write_model_names"]
