"""Shared fixtures: a real redis-server for the session, flushed before each test that uses it; the session's one
1.5B model server (tests/model and the real node's model pod tests share it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from tests.model_server import OPT_OUT, TOOL_ALIAS, ModelServer, ModelUnavailable, opted_out, shared_server
from tests.redis_server import RedisServer

# The local Kubernetes control plane fixtures (control_plane, k8s_namespace) live with the launcher (hack/, which
# make bootstrap installs): a plain plugin, so a checkout without it fails at collection rather than losing fixtures.
pytest_plugins = ["unicore_devcluster.pytest_plugin"]

# A failing property test (hypothesis draws its examples at random) prints, with its falsifying example, the
# @reproduce_failure blob that replays it exactly (the random seeds printed).
settings.register_profile("unicore", print_blob=True)
settings.load_profile("unicore")

# What one host has one of: the real node (its bridge, CIDR, iptables chain and cgroups: markers real_node and
# stops_real_node; tests/node's images run in its containerd). Under pytest-xdist (`make test`: -n 2 --dist
# loadgroup) the tests that use it run in one worker, in collection order; every other test goes where a worker is
# free. (The 1.5B model server is shared across workers instead: ``tool_model_server``.)
HOST_GROUP = "host"
HOST_MARKERS = ("real_node", "stops_real_node", "node")


def _on_host(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) for name in HOST_MARKERS)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _on_host(item):
            item.add_marker(pytest.mark.xdist_group(HOST_GROUP))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """In an xdist worker with --dist loadgroup: every host test carries the group in its node id (xdist's way of
    grouping); else the workers would each start a real node (pytest 9.2 broke it: requirements-dev.txt)."""
    if not getattr(session.config.option, "loadgroup", False):  # set in xdist workers only
        return
    lost = [item.nodeid for item in session.items if _on_host(item) and not item.nodeid.endswith(f"@{HOST_GROUP}")]
    if lost:
        raise pytest.UsageError(f"pytest-xdist did not put {len(lost)} tests in the {HOST_GROUP!r} group "
                                f"(e.g. {lost[0]}); check the pytest and pytest-xdist versions")


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


def model_host() -> str:
    """Where the session's model server listens: the node IP where there is one (turn pods on the real node reach
    it there, and the host does too), else 127.0.0.1."""
    from unicore_devcluster.node_host import node_ip

    return node_ip() or "127.0.0.1"


@pytest.fixture(scope="session")
def tool_model_server(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[ModelServer]:
    """Qwen2.5-Coder-1.5B: turns that call tools (the 0.5B repeats its call after the result: docs/models.md). One
    per run: local-mode tests and turn pods on the real node share it, and so do pytest-xdist's workers (the first
    starts it, the last stops it: tests/model_server.py, shared_server)."""
    if opted_out():
        pytest.skip(f"{OPT_OUT}=1: no real model server")

    def start() -> ModelServer:
        try:
            return ModelServer(model=TOOL_ALIAS, host=model_host())
        except ModelUnavailable as exc:
            pytest.fail(f"the real model server is unavailable: {exc} (set {OPT_OUT}=1 to skip these tests)")

    if worker_id == "master":  # not distributed: this process's own
        server = start()
        yield server
        print(f"--- llama-server log:\n{server.log_tail(40)}")
        server.stop()
        return
    # the workers' temp folders are popen-gw0, popen-gw1, ... under one folder of this run
    with shared_server(tmp_path_factory.getbasetemp().parent / "tool-model-server.json", start) as server:
        yield server
        print(f"--- llama-server log:\n{server.log_tail(40)}")
