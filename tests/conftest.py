"""Shared fixtures: a real redis-server for the session, flushed before each test that uses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from tests.redis_server import RedisServer

# The local Kubernetes control plane fixtures (control_plane, k8s_namespace) live with the launcher (hack/, which
# make bootstrap installs): a plain plugin, so a checkout without it fails at collection rather than losing fixtures.
pytest_plugins = ["unicore_devcluster.pytest_plugin"]

# A failing property test (hypothesis draws its examples at random) prints, with its falsifying example, the
# @reproduce_failure blob that replays it exactly (the random seeds printed).
settings.register_profile("unicore", print_blob=True)
settings.load_profile("unicore")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
