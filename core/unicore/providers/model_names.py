"""Bedrock model names: short names (``claude-sonnet-4``) -> model or inference-profile ids.

Resolution order for ``bedrock:<name>``:
1. a full id or ARN (``anthropic.claude-3-haiku-20240307-v1:0``, ``us.anthropic...``, ``arn:aws:bedrock:...``)
   is used unchanged;
2. the short-name map discovered from the account with the ``bedrock`` control-plane API
   (``list_foundation_models`` + ``list_inference_profiles``), cached in Redis for ``cache_ttl`` seconds
   (key ``uc:bedrock:models:<region>``, a JSON object) so turn processes do not repeat the discovery;
3. the built-in FALLBACK table below, used when discovery is not permitted / fails or does not know the name.

The fallback table is only a convenience snapshot of common models; ids change as AWS releases models, so
discovery (or a full id) is the reliable path. Short names are derived from ids: provider and geography prefixes,
release dates, ``-instruct`` and version suffixes are dropped (``us.anthropic.claude-sonnet-4-20250514-v1:0`` ->
``claude-sonnet-4``). When several ids share a short name, an on-demand foundation model in the region wins over
an inference profile of the region's geography (``us.``/``eu.``/``apac.``), which wins over other profiles; ties
go to the newest release.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import redis
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from unicore.errors import ConfigError
from unicore.log import get_logger
from unicore.store.keys import BEDROCK_MODELS_CACHE
from unicore.store.model_cache import model_cache_key, read_model_names, write_model_names

log = get_logger("bedrock.models")

CACHE_KEY = BEDROCK_MODELS_CACHE

# short name -> (base model id, needs an inference profile). A fallback snapshot, not the source of truth.
FALLBACK: dict[str, tuple[str, bool]] = {
    "claude-opus-4-1": ("anthropic.claude-opus-4-1-20250805-v1:0", True),
    "claude-opus-4": ("anthropic.claude-opus-4-20250514-v1:0", True),
    "claude-sonnet-4-5": ("anthropic.claude-sonnet-4-5-20250929-v1:0", True),
    "claude-sonnet-4": ("anthropic.claude-sonnet-4-20250514-v1:0", True),
    "claude-haiku-4-5": ("anthropic.claude-haiku-4-5-20251001-v1:0", True),
    "claude-3-7-sonnet": ("anthropic.claude-3-7-sonnet-20250219-v1:0", True),
    "claude-3-5-sonnet": ("anthropic.claude-3-5-sonnet-20241022-v2:0", True),
    "claude-3-5-haiku": ("anthropic.claude-3-5-haiku-20241022-v1:0", True),
    "claude-3-haiku": ("anthropic.claude-3-haiku-20240307-v1:0", False),
    "nova-premier": ("amazon.nova-premier-v1:0", True),
    "nova-pro": ("amazon.nova-pro-v1:0", False),
    "nova-lite": ("amazon.nova-lite-v1:0", False),
    "nova-micro": ("amazon.nova-micro-v1:0", False),
    "llama3-3-70b": ("meta.llama3-3-70b-instruct-v1:0", True),
    "llama3-1-70b": ("meta.llama3-1-70b-instruct-v1:0", True),
    "llama3-1-8b": ("meta.llama3-1-8b-instruct-v1:0", True),
    "llama3-70b": ("meta.llama3-70b-instruct-v1:0", False),
    "llama3-8b": ("meta.llama3-8b-instruct-v1:0", False),
    "mistral-large": ("mistral.mistral-large-2402-v1:0", False),
    "deepseek-r1": ("deepseek.r1-v1:0", True),
}

GEO_PREFIXES = ("us-gov", "us", "eu", "apac", "ca", "jp", "au", "global")
_FULL_ID = re.compile(r"^(arn:aws[a-z-]*:bedrock:|[a-z0-9-]+\.[a-z0-9])")
_DATE = re.compile(r"-(?:\d{8}|\d{4})(?=-|$)")  # release date (or Mistral's yymm)
_VERSION = re.compile(r"-v\d+(?::\d+)?(?::\d+k)?$|:\d+$")


def is_full_model_id(name: str) -> bool:
    """A model id, inference-profile id or ARN, as opposed to a short name."""
    return bool(_FULL_ID.match(name))


def geo_prefix(region: str) -> str:
    """The inference-profile prefix for a region: ``us-east-1`` -> ``us``, ``ap-south-1`` -> ``apac``."""
    if region.startswith("us-gov"):
        return "us-gov"
    head = region.split("-", 1)[0]
    return {"ap": "apac"}.get(head, head)


def short_name(model_id: str) -> str:
    """Derive the short name of a model or inference-profile id."""
    name = model_id.strip().lower()
    if name.startswith("arn:"):
        name = name.rsplit("/", 1)[-1]
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] in GEO_PREFIXES:
        parts = parts[1:]
    provider = parts[0] if len(parts) >= 2 else ""
    if provider:
        parts = parts[1:]
    name = ".".join(parts)
    name = _VERSION.sub("", name)
    name = _DATE.sub("", name)
    name = name.replace("-instruct", "")
    if provider and len(name) <= 3:  # deepseek.r1-v1:0 -> deepseek-r1
        name = f"{provider}-{name}"
    return name


def _release_key(model_id: str) -> tuple[str, str]:
    date = _DATE.search(model_id)
    version = _VERSION.search(model_id)
    return (date.group(0) if date else "", version.group(0) if version else "")


def build_name_map(
    foundation_models: Iterable[dict[str, Any]], inference_profiles: Iterable[dict[str, Any]], region: str
) -> dict[str, str]:
    """short name -> best id, from ``list_foundation_models`` / ``list_inference_profiles`` summaries."""
    geo = geo_prefix(region)
    candidates: dict[str, list[tuple[int, tuple[str, str], str]]] = {}
    for summary in foundation_models:
        model_id = summary["modelId"]
        if (summary.get("modelLifecycle") or {}).get("status", "ACTIVE") != "ACTIVE":
            continue
        if "ON_DEMAND" not in summary.get("inferenceTypesSupported", ["ON_DEMAND"]):
            continue
        if re.search(r":\d+k$|:mm$", model_id):  # context-length / multimodal variants are provisioned-only
            continue
        candidates.setdefault(short_name(model_id), []).append((3, _release_key(model_id), model_id))
    for summary in inference_profiles:
        profile_id = summary["inferenceProfileId"]
        if summary.get("status", "ACTIVE") != "ACTIVE":
            continue
        rank = 2 if profile_id.startswith(f"{geo}.") else 1
        candidates.setdefault(short_name(profile_id), []).append((rank, _release_key(profile_id), profile_id))
    return {name: max(options)[2] for name, options in candidates.items()}


def fallback_id(name: str, region: str) -> str | None:
    entry = FALLBACK.get(name)
    if entry is None:
        return None
    base, needs_profile = entry
    return f"{geo_prefix(region)}.{base}" if needs_profile else base


class ModelNameResolver:
    """Resolve ``bedrock:<name>`` names with discovery + Redis cache + the fallback table."""

    def __init__(
        self,
        region: str,
        *,
        control_client: Any | None = None,
        redis_client: redis.Redis | None = None,
        cache_ttl: int = 6 * 3600,
        discover: bool = True,
    ) -> None:
        self.region = region
        self._client: Any = control_client
        self._redis = redis_client
        self._ttl = cache_ttl
        self._discover = discover and control_client is not None
        self._map: dict[str, str] | None = None

    @property
    def cache_key(self) -> str:
        return model_cache_key(self.region)

    def resolve(self, name: str) -> str:
        name = name.strip()
        if not name:
            raise ConfigError("empty Bedrock model name")
        if is_full_model_id(name):
            return name
        key = name.lower()
        discovered = self.name_map()
        if key in discovered:
            return discovered[key]
        fallback = fallback_id(key, self.region)
        if fallback is not None:
            return fallback
        known = sorted(set(discovered) | set(FALLBACK))
        raise ConfigError(
            f"unknown Bedrock model {name!r}: use a model id, an inference-profile id or ARN, "
            "or a short name "
            f"such as {', '.join(known[:40])}{' ...' if len(known) > 40 else ''}"
        )

    def name_map(self) -> dict[str, str]:
        if self._map is None:
            self._map = self._cached() or self._discovered() or {}
        return self._map

    def _cached(self) -> dict[str, str] | None:
        if self._redis is None:
            return None
        try:
            return read_model_names(self._redis, self.region)
        except redis.RedisError as exc:
            log.warning("model name cache unavailable: %s", exc)
            return None

    def _discovered(self) -> dict[str, str] | None:
        if not self._discover:
            return None
        try:
            models = self._client.list_foundation_models(byOutputModality="TEXT").get("modelSummaries", [])
            profiles: list[dict[str, Any]] = []
            kwargs: dict[str, Any] = {"typeEquals": "SYSTEM_DEFINED"}
            while True:
                page = self._client.list_inference_profiles(**kwargs)
                profiles.extend(page.get("inferenceProfileSummaries", []))
                token = page.get("nextToken")
                if not token:
                    break
                kwargs["nextToken"] = token
        except (NoCredentialsError, NoRegionError) as exc:
            raise ConfigError(aws_credentials_hint(exc)) from exc
        except (ClientError, BotoCoreError) as exc:
            log.warning("Bedrock model discovery failed (%s); using the built-in fallback table", exc)
            return None
        mapping = build_name_map(models, profiles, self.region)
        if self._redis is not None and mapping:
            try:
                write_model_names(self._redis, self.region, mapping, self._ttl)
            except redis.RedisError as exc:
                log.warning("could not cache Bedrock model names: %s", exc)
        return mapping


def aws_credentials_hint(exc: Exception) -> str:
    return (
        f"AWS is not configured for Bedrock ({exc}). Provide credentials and a region: set AWS_REGION "
        "(or AWS_DEFAULT_REGION) and either AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
        "or on Kubernetes IRSA / EKS Pod Identity (a ServiceAccount annotated with an IAM role allowed "
        "bedrock:InvokeModelWithResponseStream, which ConverseStream needs)."
    )
