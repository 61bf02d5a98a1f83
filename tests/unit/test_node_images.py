"""unicore_devcluster.node_images: the Helm values that make the chart run the images built here (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicore_devcluster.image_inputs import BuiltImage
from unicore_devcluster.node_images import chart_values, split_ref


def test_split_ref() -> None:
    assert split_ref("docker.io/library/unicore-agent:0.1.0") == ("docker.io/library/unicore-agent", "0.1.0")
    assert split_ref("localhost:5000/a/b:7.0-bookworm") == ("localhost:5000/a/b", "7.0-bookworm")
    with pytest.raises(ValueError, match="without a tag"):
        split_ref("localhost:5000/a/b")


def test_chart_values_point_every_image_at_the_imported_one_and_never_pull() -> None:
    images = {
        key: BuiltImage(key, f"docker.io/library/unicore-{key}:{tag}", "ab" * 32, Path(f"/x/{key}.tar"))
        for key, tag in (("agent", "0.1.0"), ("operator", "0.1.0"), ("redis", "7.0-bookworm"), ("mcptime", "1"))
    }
    args = chart_values(images)
    values = [args[i + 1] for i in range(0, len(args), 2)]
    assert set(args[::2]) == {"--set", "--set-string"}
    assert "agent.image.repository=docker.io/library/unicore-agent" in values
    assert "redis.image.tag=7.0-bookworm" in values
    assert {v for v in values if v.endswith("pullPolicy=Never")} == {
        f"{key}.image.pullPolicy=Never" for key in ("agent", "operator", "redis")}
    assert "operator.podAnnotations.unicore\\.dev/image-inputs=" + "ab" * 8 in values
    assert not [v for v in values if "mcp" in v]  # the MCP test server is the examples' and tests', not the chart's
