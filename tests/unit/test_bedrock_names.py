"""Bedrock short model names: discovery (stubbed ``bedrock`` control-plane client), fallback table, errors."""

from __future__ import annotations

import re
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from unicore.errors import ConfigError
from unicore.providers.model_names import (
    FALLBACK,
    ModelNameResolver,
    build_name_map,
    fallback_id,
    geo_prefix,
    is_full_model_id,
    short_name,
)

REGION = "us-east-1"
ACCOUNT = "123456789012"


def control_client() -> Any:
    return boto3.client(
        "bedrock", region_name=REGION, aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="x"
    )


def foundation(model_id: str, *, on_demand: bool = True, status: str = "ACTIVE") -> dict[str, Any]:
    return {
        "modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{model_id}",
        "modelId": model_id,
        "modelName": model_id,
        "providerName": model_id.split(".")[0],
        "inputModalities": ["TEXT"],
        "outputModalities": ["TEXT"],
        "inferenceTypesSupported": ["ON_DEMAND"] if on_demand else ["INFERENCE_PROFILE"],
        "modelLifecycle": {"status": status},
    }


def profile(profile_id: str) -> dict[str, Any]:
    base = profile_id.split(".", 1)[1]
    return {
        "inferenceProfileName": profile_id,
        "inferenceProfileArn": f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{profile_id}",
        "models": [{"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{base}"}],
        "inferenceProfileId": profile_id,
        "status": "ACTIVE",
        "type": "SYSTEM_DEFINED",
    }


FOUNDATION = [
    foundation("anthropic.claude-sonnet-4-20250514-v1:0", on_demand=False),
    foundation("anthropic.claude-3-5-sonnet-20240620-v1:0"),
    foundation("anthropic.claude-3-5-sonnet-20241022-v2:0"),
    foundation("anthropic.claude-3-haiku-20240307-v1:0"),
    foundation("anthropic.claude-3-haiku-20240307-v1:0:200k"),
    foundation("amazon.nova-pro-v1:0"),
    foundation("meta.llama3-70b-instruct-v1:0"),
    foundation("acme.brand-new-model-v1:0"),
    foundation("acme.retired-model-v1:0", status="LEGACY"),
]
PROFILES_PAGE_1 = [
    profile("us.anthropic.claude-sonnet-4-20250514-v1:0"),
    profile("eu.anthropic.claude-sonnet-4-20250514-v1:0"),
]
PROFILES_PAGE_2 = [
    profile("us.amazon.nova-pro-v1:0"),
    profile("global.anthropic.claude-opus-4-1-20250805-v1:0"),
]


def stub_discovery(stubber: Stubber) -> None:
    stubber.add_response(
        "list_foundation_models", {"modelSummaries": FOUNDATION}, {"byOutputModality": "TEXT"}
    )
    stubber.add_response(
        "list_inference_profiles",
        {"inferenceProfileSummaries": PROFILES_PAGE_1, "nextToken": "page-2"},
        {"typeEquals": "SYSTEM_DEFINED"},
    )
    stubber.add_response(
        "list_inference_profiles",
        {"inferenceProfileSummaries": PROFILES_PAGE_2},
        {"typeEquals": "SYSTEM_DEFINED", "nextToken": "page-2"},
    )


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("meta.llama3-70b-instruct-v1:0", "llama3-70b"),
        ("amazon.nova-pro-v1:0", "nova-pro"),
        ("mistral.mistral-large-2407-v1:0", "mistral-large"),
        ("deepseek.r1-v1:0", "deepseek-r1"),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        (
            f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/eu.anthropic.claude-3-5-haiku-20241022-v1:0",
            "claude-3-5-haiku",
        ),
    ],
)
def test_short_name(model_id: str, expected: str) -> None:
    assert short_name(model_id) == expected


def test_full_ids_and_geographies() -> None:
    assert is_full_model_id("anthropic.claude-3-haiku-20240307-v1:0")
    assert is_full_model_id(f"arn:aws:bedrock:{REGION}:{ACCOUNT}:application-inference-profile/abc123")
    assert not is_full_model_id("claude-sonnet-4")
    assert [geo_prefix(r) for r in ("us-west-2", "eu-central-1", "ap-northeast-1", "us-gov-west-1")] == [
        "us",
        "eu",
        "apac",
        "us-gov",
    ]


def test_discovery_prefers_on_demand_then_regional_profile_then_newest() -> None:
    mapping = build_name_map(FOUNDATION, PROFILES_PAGE_1 + PROFILES_PAGE_2, REGION)
    assert (
        mapping["claude-sonnet-4"] == "us.anthropic.claude-sonnet-4-20250514-v1:0"
    )  # not on-demand; us. profile
    assert mapping["nova-pro"] == "amazon.nova-pro-v1:0"  # on-demand in region beats the profile
    assert mapping["claude-3-5-sonnet"] == "anthropic.claude-3-5-sonnet-20241022-v2:0"  # newest release
    assert mapping["claude-3-haiku"] == "anthropic.claude-3-haiku-20240307-v1:0"  # not the :200k variant
    assert mapping["claude-opus-4-1"] == "global.anthropic.claude-opus-4-1-20250805-v1:0"
    assert "retired-model" not in mapping
    eu = build_name_map(FOUNDATION, PROFILES_PAGE_1, "eu-west-1")
    assert eu["claude-sonnet-4"] == "eu.anthropic.claude-sonnet-4-20250514-v1:0"


def test_resolver_discovers_with_paging() -> None:
    client = control_client()
    with Stubber(client) as stubber:
        stub_discovery(stubber)
        resolver = ModelNameResolver(REGION, control_client=client)
        assert resolver.resolve("claude-sonnet-4") == "us.anthropic.claude-sonnet-4-20250514-v1:0"
        assert resolver.resolve("brand-new-model") == "acme.brand-new-model-v1:0"  # only discovery knows it
        assert resolver.resolve("  Nova-Pro ") == "amazon.nova-pro-v1:0"
        # a name discovery does not know falls back to the table (no further API calls: stubber would fail)
        assert resolver.resolve("nova-micro") == "amazon.nova-micro-v1:0"
        stubber.assert_no_pending_responses()


def test_full_ids_skip_discovery() -> None:
    client = control_client()
    with Stubber(client):  # no responses queued: any API call would raise
        resolver = ModelNameResolver(REGION, control_client=client)
        arn = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:application-inference-profile/abc123"
        assert resolver.resolve(arn) == arn
        assert (
            resolver.resolve("anthropic.claude-3-haiku-20240307-v1:0")
            == "anthropic.claude-3-haiku-20240307-v1:0"
        )


def test_discovery_denied_uses_fallback_table() -> None:
    client = control_client()
    with Stubber(client) as stubber:
        stubber.add_client_error("list_foundation_models", "AccessDeniedException", "not allowed", 403)
        resolver = ModelNameResolver("eu-west-1", control_client=client)
        assert resolver.resolve("claude-sonnet-4") == "eu.anthropic.claude-sonnet-4-20250514-v1:0"
        assert resolver.resolve("llama3-70b") == "meta.llama3-70b-instruct-v1:0"
        stubber.assert_no_pending_responses()


def test_fallback_table_ids_are_well_formed() -> None:
    """Every fallback id has the ``[geo.]provider.model-vN:M`` shape and maps back to its own short name."""
    shape = re.compile(r"^(?:(?:us|eu|apac)\.)?[a-z0-9]+\.[a-z0-9-]+-v\d+:\d+$")
    for name in FALLBACK:
        for region in (REGION, "eu-west-1", "ap-southeast-2"):
            model_id = fallback_id(name, region)
            assert model_id and shape.fullmatch(model_id), (name, model_id)
            assert short_name(model_id) == name, (name, short_name(model_id))  # discovery and table agree
    assert fallback_id("claude-sonnet-4", "ap-southeast-2") == "apac.anthropic.claude-sonnet-4-20250514-v1:0"
    assert fallback_id("nova-pro", "eu-west-1") == "amazon.nova-pro-v1:0"
    assert fallback_id("no-such-model", REGION) is None


def test_unknown_and_empty_names() -> None:
    resolver = ModelNameResolver(REGION)  # no discovery client: table only
    with pytest.raises(ConfigError) as info:
        resolver.resolve("gpt-17")
    assert "gpt-17" in str(info.value) and "claude-sonnet-4" in str(info.value) and "ARN" in str(info.value)
    with pytest.raises(ConfigError, match="empty"):
        resolver.resolve("  ")
