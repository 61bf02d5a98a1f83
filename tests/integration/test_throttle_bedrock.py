"""Bedrock with a real Redis: model-name cache, shared throttling around stubbed Converse calls, metrics."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import redis
from botocore.stub import Stubber
from unicore.providers.base import ModelRequest
from unicore.providers.bedrock import BedrockModel, BedrockSettings, build_bedrock_model
from unicore.providers.model_names import CACHE_KEY
from unicore.providers.retry import RetryPolicy
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits, throttle_keys
from unicore.store.keys import METRICS_COUNTERS, METRICS_GAUGES, METRICS_HISTOGRAMS

from tests.bedrock_stream_stub import add_stream, text_events

REGION = "us-west-2"
ACCOUNT = "123456789012"
PROFILE_ID = "us.anthropic.claude-sonnet-4-20250514-v1:0"
PROFILE_ARN = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{PROFILE_ID}"


def client(service: str) -> Any:
    return boto3.client(
        service, region_name=REGION, aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="x"
    )


def ok_answer(text: str = "ok") -> list[dict[str, Any]]:
    return text_events(text, inp=20, out=5)


def request() -> ModelRequest:
    return ModelRequest(
        task_id="demo", messages=[{"role": "user", "content": [{"text": "hi"}]}], max_tokens=100
    )


def stub_discovery(stubber: Stubber) -> None:
    stubber.add_response(
        "list_foundation_models",
        {
            "modelSummaries": [
                {
                    "modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/amazon.nova-pro-v1:0",
                    "modelId": "amazon.nova-pro-v1:0",
                    "inferenceTypesSupported": ["ON_DEMAND"],
                    "modelLifecycle": {"status": "ACTIVE"},
                }
            ]
        },
        {"byOutputModality": "TEXT"},
    )
    stubber.add_response(
        "list_inference_profiles",
        {
            "inferenceProfileSummaries": [
                {
                    "inferenceProfileName": "US Claude Sonnet 4",
                    "inferenceProfileArn": PROFILE_ARN,
                    "models": [
                        {"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/anthropic.claude-sonnet-4"}
                    ],
                    "inferenceProfileId": PROFILE_ID,
                    "status": "ACTIVE",
                    "type": "SYSTEM_DEFINED",
                }
            ]
        },
        {"typeEquals": "SYSTEM_DEFINED"},
    )


def test_short_names_are_discovered_once_then_served_from_redis(redis_client: redis.Redis) -> None:
    runtime, control = client("bedrock-runtime"), client("bedrock")
    clients = {"bedrock-runtime": runtime, "bedrock": control}
    settings = BedrockSettings(region=REGION, client_factory=clients.__getitem__, model_cache_ttl=120)
    with Stubber(control) as control_stub, Stubber(runtime) as runtime_stub:
        stub_discovery(control_stub)
        model = build_bedrock_model("claude-sonnet-4", settings=settings, redis_client=redis_client)
        assert model.name == PROFILE_ID
        control_stub.assert_no_pending_responses()
        key = CACHE_KEY.format(region=REGION)
        assert 0 < redis_client.ttl(key) <= 120
        # a second process: no discovery calls queued, so any API call would fail; the cache answers
        again = build_bedrock_model("nova-pro", settings=settings, redis_client=redis_client)
        assert again.name == "amazon.nova-pro-v1:0"
        # the resolved id is what Converse receives (Stubber checks the request)
        add_stream(runtime_stub, runtime, ok_answer(),
            {"modelId": PROFILE_ID, "messages": request().messages, "inferenceConfig": {"maxTokens": 100}},
        )
        assert model.converse(request()).content == [{"text": "ok"}]
        runtime_stub.assert_no_pending_responses()


def test_throttled_call_raises_the_shared_multiplier_and_records_metrics(redis_client: redis.Redis) -> None:
    runtime = client("bedrock-runtime")
    clock = {"ms": 1_700_000_000_000}
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # no real waiting: the limiter's clock moves instead
        sleeps.append(seconds)
        clock["ms"] += int(seconds * 1000)

    def no_jitter(lo: float, hi: float) -> float:
        return (lo + hi) / 2 if lo < 1.0 else lo

    coordinator = ThrottleCoordinator(
        redis_client,
        PROFILE_ID,
        ThrottleLimits(max_requests=100, cooldown_seconds=0),
        sleep=sleep,
        uniform=no_jitter,
        clock_ms=lambda: clock["ms"],
    )
    model = BedrockModel(
        PROFILE_ID,
        runtime,
        policy=RetryPolicy(max_attempts=3),
        coordinator=coordinator,
        redis_client=redis_client,
        sleep=sleep,
        uniform=no_jitter,
    )
    with Stubber(runtime) as stubber:
        stubber.add_client_error("converse_stream", "ThrottlingException", "Rate exceeded", http_status_code=429)
        add_stream(stubber, runtime, ok_answer("after backoff"))
        response = model.converse(request())
        stubber.assert_no_pending_responses()
    assert response.content == [{"text": "after backoff"}]
    # one backoff of 2 s; it was shared as a pause, which had passed when this process tried again
    assert sleeps == [pytest.approx(2.0)]
    assert (
        int(str(redis_client.hget(throttle_keys(PROFILE_ID)[2], "pause_until"))) == 1_700_000_000_000 + 2000
    )
    labels = "model=" + PROFILE_ID
    counters = redis_client.hgetall(METRICS_COUNTERS)
    assert float(counters[f"throttle_events_total|{labels}"]) == 1
    assert float(counters[f"model_calls_total|{labels},outcome=throttled,provider=bedrock"]) == 1
    assert float(counters[f"model_calls_total|{labels},outcome=ok,provider=bedrock"]) == 1
    assert float(counters[f"model_tokens_total|kind=input,{labels},provider=bedrock"]) == 20
    assert float(counters[f"model_tokens_total|kind=output,{labels},provider=bedrock"]) == 5
    histogram = redis_client.hgetall(METRICS_HISTOGRAMS)
    assert float(histogram[f"model_call_duration_seconds|{labels},provider=bedrock|count"]) == 1
    # throttled -> 1.5, then one success decays it by 10 %
    assert float(str(redis_client.hget(METRICS_GAUGES, f"throttle_multiplier|{labels}"))) == pytest.approx(1.35)
    assert coordinator.multiplier() == pytest.approx(1.35)
    # the limiter holds the real token use of the successful call (the throttled try counts 0 tokens)
    win, tok, _ = throttle_keys(PROFILE_ID)
    assert redis_client.zcard(win) == 2
    assert sorted(int(v) for v in redis_client.hvals(tok)) == [0, 25]


def test_resolve_through_registry_with_fallback_when_discovery_is_off(redis_client: redis.Redis) -> None:
    from unicore.providers.registry import resolve_model

    runtime = client("bedrock-runtime")
    settings = BedrockSettings(region="eu-central-1", discover_models=False, client_factory=lambda s: runtime)
    model = resolve_model("bedrock:claude-3-5-haiku", redis=redis_client, settings=settings)
    assert model.provider == "bedrock"
    assert model.name == "eu.anthropic.claude-3-5-haiku-20241022-v1:0"
    assert redis_client.get(CACHE_KEY.format(region="eu-central-1")) is None  # the fallback is never cached
