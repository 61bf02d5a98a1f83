"""The operator's per-namespace Redis identities (unicore_operator.redis_identities): the Secret it writes, how it
keeps it (create, reuse, rewrite, refuse), the ACL user applied from it, the turn Jobs' REDIS_URL and the settings;
against stand-ins for the API server and Redis (the real ones: tests/integration/test_redis_identities.py and
tests/cluster/test_redis_identities.py)."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import pytest
import redis
from kubernetes.client.rest import ApiException
from unicore.store.acl import url_credentials
from unicore_operator.job_builder import build_env
from unicore_operator.redis_identities import (
    RedisIdentities,
    RestartWatch,
    TransientFailure,
    build_secret,
    managed,
    secret_url,
    server_ids,
)
from unicore_operator.settings import OperatorSettings, load_settings

SETTINGS = OperatorSettings(redis_url="redis://:admin@unicore-redis.sys.svc:6379/0", redis_identities=True)
PATH = "/api/v1/namespaces/team-a/secrets/unicore-redis-agent"


class FakeCore:
    """The API server's Secrets, as CoreCalls reaches them."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: dict[str, ApiException] = {}

    def read(self, path: str) -> dict[str, Any] | None:
        self.calls.append(("GET", path))
        if "GET" in self.fail:
            raise self.fail["GET"]
        return self.objects.get(path)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("POST", path))
        if "POST" in self.fail:
            raise self.fail["POST"]
        self.objects[f"{path}/{body['metadata']['name']}"] = body
        return body

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        self.objects[path] = body
        return body


class FakeRedis:
    def __init__(self, error: Exception | None = None) -> None:
        self.commands: list[tuple[Any, ...]] = []
        self.error = error

    def execute_command(self, *args: Any) -> Any:
        if self.error:
            raise self.error
        self.commands.append(args)
        return "OK"

    def applied_password(self) -> str:
        (command,) = self.commands
        assert command[:4] == ("ACL SETUSER", "unicore-ns-team-a", "reset", "on")
        return str(command[4])[1:]


def make(core: FakeCore | None = None, client: FakeRedis | None = None,
         settings: OperatorSettings = SETTINGS) -> tuple[RedisIdentities, FakeCore, FakeRedis]:
    core, client = core or FakeCore(), client or FakeRedis()
    return RedisIdentities(core, client, settings), core, client  # type: ignore[arg-type]


def test_the_secret_holds_only_the_namespaces_url_and_says_who_manages_it() -> None:
    secret = build_secret("team-a", SETTINGS, "redis://u:p@h:6379/0")
    assert secret["metadata"] == {"name": "unicore-redis-agent", "namespace": "team-a", "labels": {
        "app.kubernetes.io/name": "unicore", "app.kubernetes.io/component": "redis-identity",
        "app.kubernetes.io/managed-by": "unicore-operator"}}
    assert secret["data"] == {"redis-url": base64.b64encode(b"redis://u:p@h:6379/0").decode()}
    assert secret_url(secret) == "redis://u:p@h:6379/0" and managed(secret)


def test_a_new_namespace_gets_a_secret_with_a_new_password_and_that_user() -> None:
    identities, core, client = make()
    assert identities.sync_now("team-a") is None
    url = secret_url(core.objects[PATH])
    user, password = url_credentials(url)  # type: ignore[misc]
    assert user == "unicore-ns-team-a" and len(password) == 64
    assert url == f"redis://unicore-ns-team-a:{password}@unicore-redis.sys.svc:6379/0"
    assert client.applied_password() == password
    assert "admin" not in url


def test_an_existing_secret_is_reused_and_its_password_applied_again() -> None:
    identities, core, _ = make()
    identities.sync_now("team-a")
    first = secret_url(core.objects[PATH])
    again, _, client = make(core)
    core.calls.clear()
    assert again.sync_now("team-a") is None
    assert core.calls == [("GET", PATH)]  # read only: nothing written
    assert secret_url(core.objects[PATH]) == first and client.applied_password() == url_credentials(first)[1]


def test_a_moved_redis_rewrites_the_url_and_keeps_the_password() -> None:
    identities, core, _ = make()
    identities.sync_now("team-a")
    password = url_credentials(secret_url(core.objects[PATH]))[1]  # type: ignore[index]
    moved = SETTINGS.model_copy(update={"redis_url": "rediss://:admin@redis.example:6380/2"})
    again, _, client = make(core, settings=moved)
    assert again.sync_now("team-a") is None
    assert secret_url(core.objects[PATH]) == f"rediss://unicore-ns-team-a:{password}@redis.example:6380/2"
    assert client.applied_password() == password


def test_a_secret_edited_into_something_else_is_rewritten_with_a_new_password() -> None:
    identities, core, _ = make()
    identities.sync_now("team-a")
    core.objects[PATH]["data"]["redis-url"] = base64.b64encode(b"redis://someone:else@h/0").decode()
    again, _, client = make(core)
    assert again.sync_now("team-a") is None
    user, password = url_credentials(secret_url(core.objects[PATH]))  # type: ignore[misc]
    assert user == "unicore-ns-team-a" and password != "else" and client.applied_password() == password


def test_a_secret_of_that_name_that_is_not_the_operators_is_left_alone() -> None:
    identities, core, client = make()
    core.objects[PATH] = {"metadata": {"name": "unicore-redis-agent", "labels": {}},
                          "data": {"redis-url": base64.b64encode(b"redis://mine:pw@h/0").decode()}}
    problem = identities.sync_now("team-a")
    assert problem is not None and "not the operator's" in problem and "\n" not in problem
    assert client.commands == [] and secret_url(core.objects[PATH]) == "redis://mine:pw@h/0"


def test_refusals_are_problems_and_unavailability_is_transient() -> None:
    identities, core, _ = make()
    core.fail["POST"] = ApiException(status=403, reason="Forbidden")
    problem = identities.sync_now("team-a")
    assert problem == "could not read or write Secret unicore-redis-agent in namespace team-a (403: Forbidden)"
    core.fail = {"GET": ApiException(status=503, reason="Service Unavailable")}
    with pytest.raises(TransientFailure):
        identities.sync_now("team-a")
    down, _, _ = make(client=FakeRedis(redis.ConnectionError("refused")))
    with pytest.raises(TransientFailure):
        down.sync_now("team-a")
    noperm, _, _ = make(client=FakeRedis(redis.exceptions.NoPermissionError("no acl|setuser")))
    assert noperm.sync_now("team-a") == "could not create Redis user unicore-ns-team-a: no acl|setuser"


def test_ensure_works_once_per_namespace_and_the_resync_every_time() -> None:
    identities, core, client = make()

    async def run() -> None:
        assert await identities.ensure("team-a") is None
        assert await identities.ensure("team-a") is None
        assert len(client.commands) == 1
        del core.objects[PATH]  # rotation: the Secret deleted
        await identities.sync_all({"team-a"})
        assert len(client.commands) == 2 and PATH in core.objects

    asyncio.run(run())
    first, second = (str(command[4])[1:] for command in client.commands)
    assert first != second and url_credentials(secret_url(core.objects[PATH]))[1] == second  # type: ignore[index]


def env_of(settings: OperatorSettings) -> dict[str, Any]:
    task = {"metadata": {"name": "t", "namespace": "team-a"}}
    env, _ = build_env(task, settings)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def test_turn_pods_read_the_namespaces_own_secret_when_identities_are_on() -> None:
    assert env_of(SETTINGS)["REDIS_URL"] == {"secretKeyRef": {"name": "unicore-redis-agent", "key": "redis-url"}}
    shared = SETTINGS.model_copy(update={"agent_redis_secret": "unicore-redis"})
    assert env_of(shared)["REDIS_URL"]["secretKeyRef"]["name"] == "unicore-redis-agent"  # not the shared one
    off = shared.model_copy(update={"redis_identities": False})
    assert env_of(off)["REDIS_URL"] == {"secretKeyRef": {"name": "unicore-redis", "key": "redis-url"}}


def test_settings() -> None:
    base = {"REDIS_URL": "redis://r"}
    default = load_settings(base)
    assert (default.redis_identities, default.redis_identity_secret, default.redis_identity_resync_seconds) == (
        False, "unicore-redis-agent", 30.0)
    on = load_settings({**base, "UNICORE_REDIS_IDENTITIES": "true", "UNICORE_REDIS_IDENTITY_SECRET": "tenant-redis",
                        "UNICORE_REDIS_IDENTITY_RESYNC_SECONDS": "5"})
    assert (on.redis_identities, on.redis_identity_secret, on.redis_identity_resync_seconds) == (
        True, "tenant-redis", 5.0)
    for name, value in (("UNICORE_REDIS_IDENTITY_SECRET", "Not_A_Name"), ("UNICORE_REDIS_IDENTITY_RESYNC_SECONDS", "0"),
                        ("UNICORE_REDIS_IDENTITIES", "maybe")):
        with pytest.raises(Exception, match=name):
            load_settings({**base, name: value})


class InfoRedis:
    """A Redis that answers INFO server with the run_id(s) set (a dict per node, as a cluster client's), or fails."""

    def __init__(self, *run_ids: str) -> None:
        self.run_ids = list(run_ids)
        self.error: Exception | None = None
        self.asked = 0

    def info(self, section: str) -> dict[str, Any]:
        assert section == "server"
        self.asked += 1
        if self.error:
            raise self.error
        if len(self.run_ids) == 1:
            return {"redis_version": "7.2.4", "run_id": self.run_ids[0]}
        return {f"10.0.0.{n}:6379": {"run_id": run_id} for n, run_id in enumerate(self.run_ids)}


def test_the_restart_watch_applies_every_namespace_again_once_per_new_server(caplog: pytest.LogCaptureFixture) -> None:
    identities, core, client = make()
    server = InfoRedis("first")
    watch = RestartWatch(identities, server, lambda: {"team-a"})  # type: ignore[arg-type]

    async def run() -> list[bool]:
        steps = [await watch.check(), await watch.check()]  # the first answer, then the same server: nothing
        server.error = redis.ConnectionError("down")  # restarting: no answer, nothing changes
        steps.append(await watch.check())
        server.error, server.run_ids = None, ["second"]
        steps += [await watch.check(), await watch.check()]  # a new server: the users again, once
        server.run_ids = ["second", "third"]  # a cluster that gained a node
        steps.append(await watch.check())
        return steps

    with caplog.at_level(logging.WARNING, logger="unicore"):
        assert asyncio.run(run()) == [False, False, False, True, False, True]
    assert watch.known == frozenset({"second", "third"}) and server_ids(server) == watch.known  # type: ignore[arg-type]
    assert [c[:2] for c in client.commands] == [("ACL SETUSER", "unicore-ns-team-a")] * 2
    assert PATH in core.objects
    noticed = [r.getMessage() for r in caplog.records if "Redis is a new server" in r.getMessage()]
    assert len(noticed) == 2 and "run_id second, was first" in noticed[0], noticed


def test_a_watch_that_may_not_ask_says_so_once_and_keeps_asking(caplog: pytest.LogCaptureFixture) -> None:
    identities, _, client = make()
    server = InfoRedis("first")
    server.error = redis.exceptions.NoPermissionError("this user has no permissions to run the 'info' command")
    watch = RestartWatch(identities, server, lambda: {"team-a"})  # type: ignore[arg-type]

    async def run() -> list[bool]:
        return [await watch.check() for _ in range(3)]

    with caplog.at_level(logging.WARNING, logger="unicore"):
        assert asyncio.run(run()) == [False, False, False]
    assert server.asked == 3 and watch.known is None and client.commands == []
    refused = [r.getMessage() for r in caplog.records if "cannot tell a restarted Redis" in r.getMessage()]
    assert len(refused) == 1 and "+info" in refused[0], refused
