"""Per-namespace Redis identities (``UNICORE_REDIS_IDENTITIES``): every namespace with AgentTasks gets its own Redis
ACL user, and its turn pods get only that user's credentials.

The user's rules are ``unicore.store.acl``'s (only that namespace's task keys, plus the few writes a turn makes to
shared keys); its name is ``unicore-ns-<namespace>``. Its one copy of the password is the Secret
``UNICORE_REDIS_IDENTITY_SECRET`` (default ``unicore-redis-agent``, key ``redis-url``: the operator's own REDIS_URL
with that user's name and password) in the namespace, which the turn Jobs read (job_builder.py). The Secret is the
truth and the Redis user is derived from it:

- the first AgentTask created in a namespace makes both (the create handler, next to the agent RBAC), before any turn
  Job there: a new random password is written into a new Secret, then ``ACL SETUSER`` applies it;
- every ``UNICORE_REDIS_IDENTITY_RESYNC_SECONDS`` (default 30) and at start-up, for every namespace with AgentTasks,
  the Secret is read and the user applied again (``ACL SETUSER reset ...``, idempotent; on a Redis Cluster on every
  node). So a user deleted by hand, a changed rule set, or a Redis address that changed (the Secret's URL is
  rewritten, same password) heal within one period, without an aclfile and the same way for the bundled and an
  external Redis;
- a new Redis server at once: every ``RESTART_CHECK_SECONDS`` (1 s) the operator asks Redis which server it is
  (``INFO server``'s ``run_id``; every node's on a Redis Cluster, ``server_ids``), and when the answer changed (a
  restart, which comes back without the ACL users: they are not persisted; a replica promoted by Sentinel, which
  never had them: ACL users are not replicated) it applies every namespace's user again right away (``RestartWatch``,
  logged once per new server). Turn pods whose connections dropped wait for their user in their client's retry
  window (``unicore.store.client``, ``Credentials``), so the restart costs no turn;
- rotation: delete the Secret. The next pass writes a new one with a new password and replaces the user's password
  (the old one stops working for new connections at once; turns already connected keep their connection, and the
  next turn pods read the new Secret).

A Secret of that name without the operator's ``app.kubernetes.io/managed-by`` label is left alone (a Warning Event
``RedisIdentityMissing`` on the task says so), as is any problem the API server or Redis reports permanently.

The operator's own Redis user needs the right to manage ACL users; at start-up ``unicore.store.acl.check_acl_rights``
creates and deletes a disabled probe user with a namespace's rules, and without the rights (or on a Redis without
selectors, older than 7) the operator stops with one line saying why (``identity_problem``, before Kopf starts; the
start-up hook checks again when Redis was not reachable then).
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import kopf
import redis
from kubernetes.client.rest import ApiException
from unicore.store.acl import (
    AclUnavailable,
    apply_namespace_user,
    check_acl_rights,
    identity_url,
    namespace_user,
    new_password,
    same_address,
    url_credentials,
)
from unicore.store.client import build_client
from urllib3.exceptions import HTTPError

from unicore_operator import events, names
from unicore_operator.context import OperatorContext
from unicore_operator.core_calls import CoreCalls
from unicore_operator.log import logger
from unicore_operator.settings import OperatorSettings

SECRET_KEY = "redis-url"
LABELS = {names.NAME_LABEL: "unicore", names.COMPONENT_LABEL: "redis-identity",
          names.MANAGED_BY_LABEL: names.MANAGED_BY}
MISSING_REASON = "RedisIdentityMissing"  # the Event posted on a task when its namespace's identity cannot be made
TRANSIENT = frozenset({409, 429, 500, 502, 503, 504})
REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)
RESTART_CHECK_SECONDS = 1.0  # how often RestartWatch asks Redis which server it is


class TransientFailure(Exception):
    """The API server or Redis could not answer now: try again shortly."""


def secrets_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets"


def secret_path(namespace: str, name: str) -> str:
    return f"{secrets_path(namespace)}/{quote(name, safe='')}"


def build_secret(namespace: str, settings: OperatorSettings, url: str) -> dict[str, Any]:
    """The Secret turn pods in ``namespace`` read REDIS_URL from (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": settings.redis_identity_secret, "namespace": namespace, "labels": dict(LABELS)},
        "data": {SECRET_KEY: base64.b64encode(url.encode()).decode()},
    }


def secret_url(secret: dict[str, Any]) -> str:
    """The ``redis-url`` a Secret holds ("" when none, or not decodable)."""
    raw = (secret.get("data") or {}).get(SECRET_KEY) or ""
    try:
        return base64.b64decode(raw).decode()
    except ValueError:
        return ""


def managed(secret: dict[str, Any]) -> bool:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return labels.get(names.MANAGED_BY_LABEL) == names.MANAGED_BY


def _api_problem(what: str, exc: ApiException) -> str:
    detail = " ".join(str(exc.reason or "").split())
    return f"could not {what} ({exc.status}: {detail})"


class RedisIdentities:
    """Makes and keeps every namespace's Redis user and Secret (module docstring)."""

    def __init__(self, core: CoreCalls, client: redis.Redis, settings: OperatorSettings) -> None:
        self.core = core
        self.redis = client
        self.settings = settings
        self.done: set[str] = set()  # namespaces whose identity this process made or checked
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.problems: dict[str, str] = {}  # the last problem logged per namespace (logged again only when new)

    async def ensure(self, namespace: str) -> str | None:
        """Make sure ``namespace`` has its user and Secret: None when it has (checked once per process), else the
        one-line reason; TransientFailure when the API server or Redis could not answer now."""
        if namespace in self.done:
            return None
        return await self.sync(namespace)

    async def sync(self, namespace: str) -> str | None:
        """Read the namespace's Secret (writing it when missing) and apply its user; ``ensure``'s answers."""
        async with self.locks[namespace]:
            problem = await asyncio.to_thread(self.sync_now, namespace)
            if problem is None:
                self.done.add(namespace)
            return problem

    async def sync_all(self, namespaces: Iterable[str]) -> None:
        """``sync`` each namespace; problems are logged (once each until they change), never raised."""
        for namespace in sorted(set(namespaces)):
            try:
                problem = await self.sync(namespace)
            except TransientFailure as exc:
                problem = str(exc)
            if problem is None:
                if self.problems.pop(namespace, None) is not None:
                    logger.info("Redis identity of namespace %s is in place again", namespace)
            elif self.problems.get(namespace) != problem:
                self.problems[namespace] = problem
                logger.warning("namespace %s: %s", namespace, problem)

    def sync_now(self, namespace: str) -> str | None:
        """The blocking work of ``sync`` (a worker thread)."""
        name = self.settings.redis_identity_secret
        user = namespace_user(namespace)
        try:
            secret = self.core.read(secret_path(namespace, name))
            if secret is None:
                secret = self._create(namespace, user)
            elif not managed(secret):
                return (f"Secret {name} in namespace {namespace} is not the operator's (no label "
                        f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}); delete it to let the operator write the "
                        "namespace's Redis credentials there")
            url = secret_url(secret)
            credentials = url_credentials(url) if url else None
            if credentials is None or credentials[0] != user or not same_address(url, self.settings.redis_url):
                # not readable as this user's URL (edited by hand), or Redis moved: rewrite it (same password if any)
                password = credentials[1] if credentials and credentials[0] == user else new_password()
                url = identity_url(self.settings.redis_url, user, password)
                self.core.replace(secret_path(namespace, name), {**secret, "data": {
                    SECRET_KEY: base64.b64encode(url.encode()).decode()}})
                logger.info("namespace %s: Secret %s rewritten for Redis user %s", namespace, name, user)
            else:
                password = credentials[1]
        except ApiException as exc:
            if exc.status in TRANSIENT:
                raise TransientFailure(_api_problem(f"write Secret {name} in namespace {namespace}", exc)) from exc
            return _api_problem(f"read or write Secret {name} in namespace {namespace}", exc)
        except (HTTPError, OSError) as exc:
            raise TransientFailure(f"could not reach the API server: {exc}") from exc
        try:
            apply_namespace_user(self.redis, namespace, password)
        except REDIS_TRANSIENT as exc:
            raise TransientFailure(f"could not reach Redis to apply user {user}: {exc}") from exc
        except redis.RedisError as exc:
            return f"could not create Redis user {user}: {' '.join(str(exc).split())}"
        return None

    def _create(self, namespace: str, user: str) -> dict[str, Any]:
        """A new Secret with a new password; when one appeared meanwhile (409), that one."""
        body = build_secret(namespace, self.settings, identity_url(self.settings.redis_url, user, new_password()))
        try:
            made = self.core.create(secrets_path(namespace), body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = self.core.read(secret_path(namespace, body["metadata"]["name"]))
            if existing is None:
                raise TransientFailure(f"Secret {body['metadata']['name']} in {namespace} came and went") from exc
            return existing
        logger.info("namespace %s: Redis user %s created, its URL in Secret %s", namespace, user,
                    body["metadata"]["name"])
        return made or body


def namespaces_with_tasks(ctx: OperatorContext) -> set[str]:
    """The namespaces of the AgentTasks in the index (keys are ``(namespace, name)``)."""
    return {key[0] for key in list(ctx.agenttasks.keys())} if ctx.agenttasks is not None else set()


async def resync_loop(ctx: OperatorContext, identities: RedisIdentities) -> None:
    """Every ``redis_identity_resync_seconds``: every namespace with AgentTasks (and every one made before) again."""
    await asyncio.sleep(min(2.0, ctx.settings.redis_identity_resync_seconds))  # the index fills first
    while True:
        try:
            await identities.sync_all(namespaces_with_tasks(ctx) | identities.done)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("Redis identity resync failed; next one in %.0fs",
                             ctx.settings.redis_identity_resync_seconds)
        await asyncio.sleep(ctx.settings.redis_identity_resync_seconds)


def server_ids(client: redis.Redis) -> frozenset[str]:
    """The ``run_id`` of the Redis server ``client`` talks to (``INFO server``; of every node on a Redis Cluster,
    whose client asks them all). A restarted server, or a replica promoted in a failover, answers with another."""
    reply: Any = client.info("server")
    infos = [reply] if "run_id" in reply else [info for info in reply.values() if isinstance(info, dict)]
    return frozenset(str(info["run_id"]) for info in infos)


class RestartWatch:
    """Applies every namespace's user again as soon as the Redis answering is a new server (module docstring).

    ``client`` is the watch's own (built without a retry window: one attempt per check, so a Redis that is back is
    seen within ``interval``); ``namespaces`` the namespaces to apply (those with AgentTasks, and every one made
    before). It trusts only Redis's own ``INFO`` reply, nothing a namespace can write."""

    def __init__(self, identities: RedisIdentities, client: redis.Redis, namespaces: Callable[[], Iterable[str]],
                 interval: float = RESTART_CHECK_SECONDS) -> None:
        self.identities = identities
        self.client = client
        self.namespaces = namespaces
        self.interval = interval
        self.known: frozenset[str] | None = None  # the server(s) whose users were applied (None: not asked yet)
        self.problem = ""  # the last refusal logged (logged again only when it changes)

    def ask(self) -> frozenset[str] | None:
        """The server ids now (a worker thread); None when Redis cannot be reached or refuses INFO (logged once)."""
        try:
            ids = server_ids(self.client)
        except REDIS_TRANSIENT:
            return None
        except redis.RedisError as exc:
            problem = " ".join(str(exc).split())
            if problem != self.problem:
                self.problem = problem
                logger.warning("cannot tell a restarted Redis from INFO server (%s): namespaces' Redis users come "
                               "back only at the identity resync (grant the operator's Redis user +info)", problem)
            return None
        self.problem = ""
        return ids

    async def check(self) -> bool:
        """One check: when the server is another than before, apply every namespace's user again. Whether it did."""
        ids = await asyncio.to_thread(self.ask)
        if ids is None or ids == self.known:
            return False
        before, self.known = self.known, ids
        if before is None:  # the first answer: the start-up sync and the resync loop apply the users
            return False
        namespaces = set(self.namespaces()) | self.identities.done
        logger.warning("Redis is a new server (run_id %s, was %s: restarted or failed over, without its ACL users); "
                       "applying the Redis users of %d namespace(s) again", ",".join(sorted(ids)),
                       ",".join(sorted(before)), len(namespaces))
        await self.identities.sync_all(namespaces)
        return True

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Redis restart check failed; next one in %.0fs", self.interval)
            await asyncio.sleep(self.interval)


async def restart_watch_loop(ctx: OperatorContext, identities: RedisIdentities) -> None:
    """``RestartWatch`` on its own client, over the namespaces with AgentTasks and those made before."""
    client = build_client(ctx.settings.redis_url, decode_responses=True, retry_for=0)
    watch = RestartWatch(identities, client, lambda: namespaces_with_tasks(ctx))
    try:
        watch.known = await asyncio.to_thread(watch.ask)  # the server the start-up sync is about to apply the users to
        await watch.run()
    finally:
        client.close()


def identity_problem(settings: OperatorSettings) -> str | None:
    """The start-up check (``main``, before Kopf starts) as one line: why the operator's Redis user cannot manage the
    namespaces' users, or None (identities off, the check passed, or Redis not reachable yet: then the start-up hook
    checks once it is)."""
    if not settings.redis_identities:
        return None
    client = build_client(settings.redis_url, retry_for=0)
    try:
        check_acl_rights(client)
    except AclUnavailable as exc:
        return unavailable(exc)
    except REDIS_TRANSIENT:
        return None
    finally:
        client.close()
    return None


def unavailable(exc: AclUnavailable) -> str:
    return f"UNICORE_REDIS_IDENTITIES is on, but {exc} (UNICORE_REDIS_IDENTITIES=false)"


async def start(ctx: OperatorContext) -> None:
    """Start-up hook: with ``UNICORE_REDIS_IDENTITIES``, check that the operator's Redis user may manage ACL users
    (kopf.PermanentError with one line if not: the operator stops), then keep every namespace's identity."""
    if not ctx.settings.redis_identities:
        return
    try:
        await asyncio.to_thread(check_acl_rights, ctx.redis.sync)
    except AclUnavailable as exc:
        message = unavailable(exc)
        logger.error("%s", message)
        raise kopf.PermanentError(message) from None
    identities = RedisIdentities(ctx.kube.core, ctx.redis.sync, ctx.settings)
    ctx.redis_identities = identities
    loop = asyncio.get_running_loop()
    ctx.background.append(loop.create_task(resync_loop(ctx, identities), name="unicore-redis-identities"))
    ctx.background.append(loop.create_task(restart_watch_loop(ctx, identities), name="unicore-redis-restart-watch"))
    logger.info("per-namespace Redis identities on (Secret %s in each agent namespace)",
                ctx.settings.redis_identity_secret)


async def provision_for(ctx: OperatorContext, task: dict[str, Any]) -> None:
    """The AgentTask create handler's step before any turn Job: the task's namespace gets its Redis user and Secret
    (once per process). A problem is logged and posted on the task as a Warning Event and the task goes on (its turn
    pods wait for the Secret); a transient failure retries the handler."""
    if not ctx.settings.redis_identities:
        return
    identities: RedisIdentities | None = ctx.redis_identities
    if identities is None:
        raise kopf.TemporaryError("Redis identities are still starting", delay=1)
    meta = task["metadata"]
    try:
        problem = await identities.ensure(meta["namespace"])
    except TransientFailure as exc:
        raise kopf.TemporaryError(f"{exc}; trying again", delay=2) from exc
    if problem:
        logger.warning("AgentTask %s/%s: %s", meta["namespace"], meta["name"], problem)
        events.post(ctx, task, events.WARNING, MISSING_REASON, problem)


__all__ = ["MISSING_REASON", "RESTART_CHECK_SECONDS", "RedisIdentities", "RestartWatch", "TransientFailure",
           "build_secret", "identity_problem", "managed", "provision_for", "restart_watch_loop", "resync_loop",
           "secret_url", "server_ids", "start"]
