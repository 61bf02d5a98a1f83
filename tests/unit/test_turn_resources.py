"""Turn pods' requests and limits (unicore.api.resources): quantities, the rules the CRD's CEL also applies,
and the merge of the operator's defaults, the GPU limit and spec.resources (pure)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from unicore.api.resources import ResourcesInvalid, check_resources, merge_resources, parse_quantity
from unicore.api.spec import SpecInvalid, parse_spec

from tests.unit.test_operator_settings import ROOT

DEFAULTS = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


@pytest.mark.parametrize(("text", "value"), [
    ("100m", Decimal("0.1")), ("2", Decimal(2)), (2, Decimal(2)), ("1.5", Decimal("1.5")), (".5", Decimal("0.5")),
    ("256Mi", Decimal(256 * 1024**2)), ("1Gi", Decimal(1024**3)), ("1G", Decimal(10**9)), ("1k", Decimal(1000)),
    ("1e3", Decimal(1000)), ("5E-2", Decimal("0.05")), ("+1", Decimal(1)), ("0", Decimal(0)),
    ("250n", Decimal("2.5e-7")),
])
def test_quantities(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", " 1", "1x", "-1", "Gi", "1 Gi", "1GiB", "1.2.3", 0.5, True, None, "1KI"])
def test_not_quantities(bad: Any) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(bad)


def test_check_resources_keeps_valid_maps_as_strings() -> None:
    assert check_resources({"requests": {"cpu": 1}, "limits": {"cpu": "2", "nvidia.com/gpu": 4,
                                                                "hugepages-2Mi": "64Mi"}}) == {
        "requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "4", "hugepages-2Mi": "64Mi"}}
    assert check_resources({}) == {} and check_resources({"requests": {}, "limits": None}) == {}


@pytest.mark.parametrize(("value", "message"), [
    ([], "must be an object"),
    ({"requests": ["cpu"]}, "requests must be an object"),
    ({"requests": {"hugepages-2Mi": "1Mi"}}, "requests may only name cpu, memory, ephemeral-storage"),
    ({"limits": {"kubernetes": "1"}}, "'kubernetes' is not a resource name"),
    ({"limits": {"example.com/fpga": "1500m"}}, "limits.example.com/fpga: an extended resource must be a whole number"),
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}, "requests.cpu (2) is more than limits.cpu (1500m)"),
])
def test_check_resources_refuses_in_one_line(value: Any, message: str) -> None:
    with pytest.raises(ResourcesInvalid) as caught:
        check_resources(value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_merge_order_defaults_then_gpu_then_task() -> None:
    assert merge_resources(DEFAULTS, {"nvidia.com/gpu": "1"}, None) == {
        "requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}}
    task = {"requests": {"cpu": 1}, "limits": {"nvidia.com/gpu": 2, "memory": "3Gi"}}
    assert merge_resources(DEFAULTS, {"nvidia.com/gpu": "1"}, task) == {
        "requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "3Gi", "nvidia.com/gpu": "2"}}
    assert merge_resources({}, {}, None) == {}
    assert DEFAULTS == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}  # unchanged


def test_merge_moves_a_default_side_that_would_make_the_pair_invalid() -> None:
    low = merge_resources(DEFAULTS, {}, {"limits": {"memory": "100Mi"}})
    assert low == {"requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"memory": "100Mi"}}
    high = merge_resources(DEFAULTS, {}, {"requests": {"memory": "8Gi"}})
    assert high == {"requests": {"cpu": "100m", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
    # the operator's own defaults were checked at startup; a default CPU limit follows a task's CPU request too
    capped = {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}
    assert merge_resources(capped, {}, {"requests": {"cpu": "4"}}) == {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}


def test_the_crd_model_refuses_what_the_crd_refuses() -> None:
    assert parse_spec({"prompt": "x", "resources": {"limits": {"memory": "2Gi"}}}).resources is not None
    with pytest.raises(SpecInvalid, match=r"spec.resources: .*requests.cpu: '1x' is not a non-negative"):
        parse_spec({"prompt": "x", "resources": {"requests": {"cpu": "1x"}}})
    with pytest.raises(SpecInvalid, match=r"spec.resources.claims: Extra inputs are not permitted"):
        parse_spec({"prompt": "x", "resources": {"claims": []}})


def test_the_crd_and_the_settings_share_the_example_defaults() -> None:
    """The CRD's description of spec.resources quotes the operator's defaults: keep them in step."""
    crd = yaml.safe_load((ROOT / "crds" / "agenttask.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["resources"]
    assert "requests cpu 100m and memory 256Mi, limit memory 1Gi" in " ".join(schema["description"].split())
    from unicore_operator.settings import DEFAULT_AGENT_RESOURCES

    assert DEFAULT_AGENT_RESOURCES == DEFAULTS
