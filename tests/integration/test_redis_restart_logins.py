"""A restarted Redis without the namespaces' ACL users costs no turn (issue 27): on a real redis-server, restarted with
its data (AOF) and without its ACL users (not persisted: no aclfile; a replica promoted in a failover never had them,
ACL users are not replicated).

- A client whose login as a namespace's user worked (``unicore.store.client``) meets the restart in a command: its
  reconnects are refused (``WRONGPASS``) and retried in its window until the user is back, then the command answers
  (sync and asyncio). When the user never comes back, the command fails with Redis's refusal once the window is over.
- A first login refused (a wrong password, a user Redis does not have) fails at once, a 30 s window or not.
- The operator's restart watch (``unicore_operator.redis_identities.RestartWatch``, with its RedisIdentities over the
  real Redis and a stand-in for the API server's Secrets) notices the new server and applies every namespace's user
  again at once, long before its resync period, logging it once; a client of a namespace rides the restart out on
  its own. The same through a failover (tests/integration/test_redis_failover.py's primary, replica and three
  sentinels, every client on the ``redis+sentinel://`` URL): the promoted replica never had the users, the watch
  applies them to it, and the namespace's client goes on there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from unicore.store import acl
from unicore.store.client import build_async_client, build_client
from unicore.store.keys import TaskKeys
from unicore_operator.redis_identities import RedisIdentities, RestartWatch, secret_url, server_ids
from unicore_operator.settings import OperatorSettings

from tests.integration.test_redis_failover import ReplicatedRedis
from tests.redis_server import RestartableRedis
from tests.waiting import wait_for

NS = "team-restart"
REFUSED = "invalid username-password pair or user is disabled"  # Redis, to a user it does not have (any more)


class Server(RestartableRedis):
    """A private redis-server on a unix socket (the default user: the admin), stopped and started again with its
    data (AOF) but not its ACL users."""

    def users(self) -> list[str]:
        with self.admin() as admin:
            return list(acl.acl_users(admin))

    def refused_logins(self, user: str) -> int:
        with self.admin() as admin:
            return refused_logins(admin, user)


def refused_logins(server: redis.Redis, user: str) -> int:
    """The logins as ``user`` the server refused (ACL LOG counts repeats of one entry)."""
    return sum(int(e["count"]) for e in server.acl_log() if e["reason"] == "auth" and e["username"] == user)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    instance = Server(tmp_path)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def user_url(server: Server, password: str, namespace: str = NS) -> str:
    return acl.identity_url(server.url, acl.namespace_user(namespace), password)


def with_user(server: Server, namespace: str = NS) -> str:
    """``namespace``'s user made with the admin client (what the operator does); its password."""
    password = acl.new_password()
    with server.admin() as admin:
        acl.apply_namespace_user(admin, namespace, password)
    return password


def new_server_logged(caplog: pytest.LogCaptureFixture, scenario: Callable[[], Coroutine[Any, Any, None]],
                      *closers: Callable[[], Any]) -> str:
    """Run ``scenario``, then ``closers`` whatever happened; the watch's one "Redis is a new server" line."""
    with caplog.at_level(logging.WARNING, logger="unicore"):
        try:
            asyncio.run(scenario())
        finally:
            for close in closers:
                close()
    noticed = [r.getMessage() for r in caplog.records if "Redis is a new server" in r.getMessage()]
    assert len(noticed) == 1, noticed  # logged once
    return noticed[0]


class Call:
    """A call run in a thread (the test meanwhile restarts Redis, watches its log, applies users)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            self.value = call()
        except BaseException as exc:  # noqa: BLE001  # the test reads it
            self.error = exc
        self.seconds = time.monotonic() - started

    def result(self, timeout: float) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the call still runs after {timeout} s"
        if self.error is not None:
            raise self.error
        return self.value


def sync_reader(url: str, retry_for: float) -> tuple[Callable[[], Any], Callable[[], None]]:
    """(a read of the task's id, close) on a sync client of ``url``."""
    client = build_client(url, decode_responses=True, retry_for=retry_for)
    return (lambda: client.hget(TaskKeys(f"{NS}/t").task, "id")), client.close


def async_reader(url: str, retry_for: float) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The same on a redis.asyncio client, on an event loop of its own (its calls may run in another thread)."""
    loop = asyncio.new_event_loop()
    client = build_async_client(url, decode_responses=True, retry_for=retry_for)

    def read() -> Any:
        return asyncio.run_coroutine_threadsafe(client.hget(TaskKeys(f"{NS}/t").task, "id"), loop).result()

    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    def close() -> None:
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(10)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()

    return read, close


READERS = {"sync": sync_reader, "asyncio": async_reader}


def refusal(error: BaseException) -> AuthenticationError | None:
    """Redis's login refusal in ``error`` (redis.asyncio raises a ConnectionError from it)."""
    for candidate in (error, error.__cause__, error.__context__):
        if isinstance(candidate, AuthenticationError):
            return candidate
    return None


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_client_whose_login_worked_waits_for_its_user_after_a_restart(server: Server, kind: str) -> None:
    password = with_user(server)
    user = acl.namespace_user(NS)
    read, close = READERS[kind](user_url(server, password), 30)
    try:
        with server.admin() as admin:
            admin.hset(TaskKeys(f"{NS}/t").task, "id", f"{NS}/t")
        assert read() == f"{NS}/t"  # its login worked
        server.restart()
        assert user not in server.users() and server.refused_logins(user) == 0  # data kept, users gone
        call = Call(read)
        # the reconnects are refused and retried (not failed): several refusals while the call still waits
        wait_for(lambda: server.refused_logins(user) >= 3 or call.error is not None, timeout=20, interval=0.05,
                 what="the client's logins refused again and again")
        assert call.error is None and call.thread.is_alive(), call.error
        with server.admin() as admin:
            acl.apply_namespace_user(admin, NS, password)  # the user back (the operator's restart watch's job)
        assert call.result(timeout=30) == f"{NS}/t"
        print(f"{kind}: the read answered {call.seconds:.2f} s after it began, "
              f"{server.refused_logins(user)} logins refused meanwhile")
    finally:
        close()


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_user_that_never_comes_back_fails_the_call_with_the_refusal_once_the_window_is_over(
    server: Server, kind: str,
) -> None:
    password = with_user(server)
    user = acl.namespace_user(NS)
    window = 2.0
    read, close = READERS[kind](user_url(server, password), window)
    try:
        read()
        server.restart()
        call = Call(read)
        with pytest.raises(RedisConnectionError) as caught:
            call.result(timeout=window + 30)
        found = refusal(caught.value)
        assert found is not None and REFUSED in str(found), repr(caught.value)
        assert window <= call.seconds < window + 10, call.seconds  # retried for the window, then failed
        assert server.refused_logins(user) >= 3
    finally:
        close()


@pytest.mark.parametrize("kind", sorted(READERS))
@pytest.mark.parametrize("login", ["wrong password", "no such user"])
def test_a_first_login_refused_fails_at_once(server: Server, kind: str, login: str) -> None:
    if login == "wrong password":
        with_user(server)
        url = user_url(server, acl.new_password())
    else:
        url = user_url(server, acl.new_password(), "team-nobody")
    user = acl.url_credentials(url)[0]  # type: ignore[index]
    read, close = READERS[kind](url, 30)
    try:
        call = Call(read)
        with pytest.raises(RedisConnectionError) as caught:
            call.result(timeout=30)
        found = refusal(caught.value)
        assert found is not None and REFUSED in str(found), repr(caught.value)
        assert call.seconds < 5, call.seconds  # not the 30 s window
        assert server.refused_logins(user) == 1
    finally:
        close()


class Secrets:
    """The API server's Secrets, as RedisIdentities reaches them (CoreCalls' read/create/replace)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def read(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.objects[f"{path}/{body['metadata']['name']}"] = body
        return body

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.objects[path] = body
        return body


def test_the_operators_restart_watch_applies_every_namespaces_user_again_at_once(
    server: Server, caplog: pytest.LogCaptureFixture,
) -> None:
    namespaces = (NS, "team-other")
    # the resync is an hour away: only the restart watch can bring the users back within the test
    settings = OperatorSettings(redis_url=server.url, redis_identities=True, redis_identity_resync_seconds=3600)
    admin = build_client(server.url, decode_responses=True)
    watch_client = build_client(server.url, decode_responses=True, retry_for=0)
    secrets = Secrets()
    identities = RedisIdentities(secrets, admin, settings)  # type: ignore[arg-type]  # the Secrets stand-in
    watch = RestartWatch(identities, watch_client, lambda: {NS}, interval=0.2)  # team-other: made before
    users = {acl.namespace_user(ns) for ns in namespaces}

    async def scenario() -> None:
        for namespace in namespaces:
            assert await identities.ensure(namespace) is None
        assert users <= set(server.users())
        assert not await watch.check()  # the first answer: the server the users were applied to
        first = watch.known
        assert first == server_ids(admin) and len(first) == 1
        assert not await watch.check()  # the same server: nothing to do
        url = secret_url(secrets.objects[f"/api/v1/namespaces/{NS}/secrets/unicore-redis-agent"])
        read, close = sync_reader(url, 30)
        try:
            admin.hset(TaskKeys(f"{NS}/t").task, "id", f"{NS}/t")
            assert read() == f"{NS}/t"
            await asyncio.to_thread(server.restart)
            call = Call(read)  # a turn pod's next command, its connection dropped with the restart
            await asyncio.to_thread(wait_for, lambda: server.refused_logins(acl.namespace_user(NS)) >= 1,
                                    timeout=20, interval=0.05, what="the client's login refused by the new server")
            watching = asyncio.create_task(watch.run())
            restarted = time.monotonic()
            await asyncio.to_thread(wait_for, lambda: users <= set(server.users()), timeout=10, interval=0.05,
                                    what="every namespace's user applied again")
            applied = time.monotonic() - restarted
            assert await asyncio.to_thread(call.result, 30) == f"{NS}/t"  # rode it out, nothing failed
            watching.cancel()
            print(f"users applied again {applied:.2f} s after the watch began; the client's read answered after "
                  f"{call.seconds:.2f} s")
            assert applied < 5
            assert watch.known != first and watch.known == server_ids(admin)
        finally:
            close()

    noticed = new_server_logged(caplog, scenario, admin.close, watch_client.close)
    assert "applying the Redis users of 2 namespace(s) again" in noticed, noticed


def test_after_a_failover_the_watch_applies_the_users_to_the_promoted_replica_and_a_client_goes_on_there(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # a failover takes about 2 s, longer on a loaded machine (a sentinel in TILT mode: 30 s): a wide window
    monkeypatch.setenv("UNICORE_REDIS_RETRY_SECONDS", "90")
    group = ReplicatedRedis()
    settings = OperatorSettings(redis_url=group.url, redis_identities=True, redis_identity_resync_seconds=3600)
    admin = build_client(group.url, decode_responses=True)
    watch_client = build_client(group.url, decode_responses=True, retry_for=0)
    secrets = Secrets()
    identities = RedisIdentities(secrets, admin, settings)  # type: ignore[arg-type]  # the Secrets stand-in
    watch = RestartWatch(identities, watch_client, lambda: {NS}, interval=0.2)
    user = acl.namespace_user(NS)

    async def scenario() -> None:
        assert await identities.ensure(NS) is None
        url = secret_url(secrets.objects[f"/api/v1/namespaces/{NS}/secrets/unicore-redis-agent"])
        assert url.startswith("redis+sentinel://")
        read, close = sync_reader(url, 90)
        try:
            admin.hset(TaskKeys(f"{NS}/t").task, "id", f"{NS}/t")
            assert read() == f"{NS}/t"
            await asyncio.to_thread(wait_for, group.in_sync, timeout=10, what="the replica to have every write")
            assert user not in acl.acl_users(group.replica.client)  # ACL users are not replicated
            assert not await watch.check()
            began = time.monotonic()
            group.kill_primary()
            call = Call(read)  # its connection went with the primary
            # the client finds the promoted replica, which refuses its login (it never had the user) ...
            await asyncio.to_thread(wait_for, lambda: refused_logins(group.replica.client, user) >= 1 or
                                    not call.thread.is_alive(), timeout=90, interval=0.05,
                                    what="the client's login refused by the promoted replica")
            assert call.thread.is_alive() and call.error is None, call.error  # ... and waits
            watching = asyncio.create_task(watch.run())  # the operator's watch: the users there at once
            assert await asyncio.to_thread(call.result, 90) == f"{NS}/t"
            watching.cancel()
            assert group.promoted() and user in acl.acl_users(group.replica.client)
            print(f"the read answered on the promoted replica {time.monotonic() - began:.1f} s after the kill")
        finally:
            close()

    new_server_logged(caplog, scenario, admin.close, watch_client.close, group.stop)
