"""The one builder of Redis clients (runtime, turn processes, operator): a blip in Redis does not fail a turn.

Every client made here retries a command that fails with ``ConnectionError`` / ``TimeoutError`` (a reset
connection, a restarted server, a failover) with exponential backoff and jitter, for a bounded total time
(``UNICORE_REDIS_RETRY_SECONDS``, default 30 s; 0 = fail at once), reconnecting as needed. It uses redis-py's own
machinery (``Retry``, ``EqualJitterBackoff``, ``retry_on_error``) with two additions redis-py 6 lacks:

- the bound is a time, not a count, and one call has one retry loop: redis-py nests retrying calls in one another
  (a command's retry reconnects, whose own retry wraps the socket connect; a health-check PING's retry reconnects,
  whose handshake's first command runs the health check's retry again, ...). A retrying call made while another
  one is in progress in the same thread / asyncio task makes a single attempt and leaves the retrying to the
  outermost loop. Nested loops would multiply, and the PING -> reconnect -> handshake -> PING chain recursed one
  stack level per failed reconnect (a server that refuses new connections for long enough: RecursionError);
- taking a connection from the pool is retried too (redis-py reconnects a pooled connection outside of any
  retry, so a command issued while the server restarts failed on its first attempt).

Text is written valid whatever it holds (a lone surrogate as U+FFFD) and a reply that is not UTF-8 is read with
U+FFFD in place of its bad bytes: ``state.codec``'s ``ENCODING_ERRORS`` handler.

Sockets get timeouts (``UNICORE_REDIS_SOCKET_TIMEOUT``, default 15 s, longer than the longest blocking read:
XREADGROUP BLOCK 2 s), TCP keepalive, and a PING before using a connection idle for more than 15 s, so a dead or
half-open connection is noticed and replaced instead of hanging a turn.

A Redis with Sentinel (``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>]``: the
sentinels, then the name they monitor) gets a client that asks the sentinels for the primary whenever it connects,
so a connection lost in a failover (or refused by a demoted primary: READONLY) reconnects to the promoted replica
within the same retry window (``sentinel_url``; what a failover can lose: docs/architecture.md, "Redis failover").

A URL no client can be built from (scheme, port, path, options) is refused before any client exists:
``check_url``'s one-line ``RedisURLError``, which never shows a password. An unreachable server is an error only
once the retry window is over, for a Redis Cluster too (its client connects as it is built: that is retried).

A credential refusal (``WRONGPASS``/``NOAUTH``) is final on a client's first login: a wrong password fails at once,
not after the window. Once Redis has accepted the client's credentials, a refusal of the same credentials on a
reconnect is retried in the window like a blip (``Credentials``): a restarted or failed-over Redis comes back without
the per-namespace ACL users (not persisted, not replicated), and the operator applies them again within a second or
so (``unicore_operator.redis_identities``), so a turn pod rides that out instead of failing its turn. (Not for a
Redis Cluster client: redis-py's cluster retries are its own.)

What a retry can repeat: a command whose connection died after the server executed it, but before the reply
arrived, runs twice. docs/architecture.md ("Redis blips") lists which writes that affects.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlencode

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.backoff import AbstractBackoff, EqualJitterBackoff, NoBackoff
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.connection import Connection, parse_url
from redis.exceptions import AuthenticationError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from unicore.errors import ConfigError
from unicore.log import get_logger
from unicore.settings import RedisClientSettings
from unicore.store.codec import ENCODING_ERRORS

log = get_logger("state.client")

# The client every store function takes: what ``build_client`` returns. A Redis Cluster client is one too (typed so
# by ``build_client``: it has the same command API); the few places that must tell them apart check its class.
RedisClient: TypeAlias = redis.Redis
RedisPipeline: TypeAlias = Pipeline  # ``RedisClient.pipeline()``'s (a cluster client's: its ClusterPipeline)
AsyncRedisClient: TypeAlias = aioredis.Redis  # what ``build_async_client`` returns (the operator's event loop)

T = TypeVar("T")

RETRY_SECONDS_ENV = RedisClientSettings.env_var("retry_seconds")
SOCKET_TIMEOUT_ENV = RedisClientSettings.env_var("socket_timeout")
CONNECT_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15
ASYNC_MAX_CONNECTIONS = 32  # connections of one asyncio client (the operator's): commands beyond wait for one
POOL_WAIT_SECONDS = 30.0  # how long a command waits for a free connection before the pool's ConnectionError
BACKOFF_BASE = 0.05  # seconds: about 0.1, 0.2, 0.4, ... (each with jitter), at most BACKOFF_CAP
BACKOFF_CAP = 2.0
RETRY_ERRORS: tuple[type[RedisError], ...] = (RedisConnectionError, RedisTimeoutError)
# Connection errors no retry can mend on a first login: a wrong password (NOAUTH/WRONGPASS; redis-py makes them
# connection errors) fails at once instead of after the whole retry window. After a login of the client worked, the
# same refusal is retried (``Credentials``): a restarted Redis without its ACL users yet, or a rotated password
# (which then fails once the window is over).
FINAL_ERRORS: tuple[type[RedisError], ...] = (AuthenticationError,)


def is_final(error: BaseException) -> bool:
    """A credential error, also as redis.asyncio reports it (a ConnectionError raised from the AuthenticationError)."""
    return any(isinstance(e, FINAL_ERRORS) for e in (error, error.__cause__, error.__context__))


class Credentials:
    """Whether Redis has accepted a client's credentials once (a connection of the client logged in with them).

    Shared by the client's retry and the copies redis-py makes of it for each connection (``BoundedRetry``'s
    ``__deepcopy__``). Until then a credential refusal is a wrong password, final at once; afterwards it is the same
    credentials refused on a reconnect, a Redis that restarted or failed over without its ACL users until the operator
    applies them again, and it is retried in the window (module doc)."""

    def __init__(self) -> None:
        self.accepted = False

    def refused_for_good(self, error: BaseException) -> bool:
        """Whether ``error`` ends the retrying at once: a credential error before any login of the client worked."""
        return is_final(error) and not self.accepted


def _has_credentials(connection_kwargs: Mapping[str, Any]) -> bool:
    """Whether a pool's connections log in (a password or a credential provider): only their login can be accepted."""
    return bool(connection_kwargs.get("password") or connection_kwargs.get("credential_provider"))
# REDIS_URL schemes that name a Redis Cluster (build_client / build_async_client return cluster clients for them).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# The window of the outermost retrying call in progress in this thread / asyncio task (None: none is). A context
# copied while one was open (a task or thread started from inside a call) sees it closed once that call has ended.
_window: ContextVar[_Window | None] = ContextVar("unicore_redis_retry_window", default=None)


def retry_seconds() -> float:
    """How long a Redis command keeps retrying through connection failures (``UNICORE_REDIS_RETRY_SECONDS``)."""
    return RedisClientSettings.from_env(only={"retry_seconds"}).retry_seconds


def _backoff() -> AbstractBackoff:
    return EqualJitterBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE)


def _nested() -> bool:
    """Whether a retrying call is in progress in this thread / asyncio task (then it does the retrying)."""
    window = _window.get()
    return window is not None and window.open


class _Window:
    """The retry loop of the outermost retrying call: its deadline and failure count (open until the call ends)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.backoff = backoff
        self.failures = 0
        self.open = True
        backoff.reset()
        self._token = _window.set(self)

    def next_delay(self, error: Exception) -> float:
        """Seconds to wait before the next attempt; re-raises ``error`` once the window is used up."""
        self.failures += 1
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise error
        if self.failures == 1 and is_final(error):
            log.warning("Redis refused this client's credentials, which it accepted before (%s: a restarted or "
                        "failed-over Redis without its ACL users yet?); retrying for up to %.0f s", error, self.seconds)
        elif self.failures == 1:
            log.warning("Redis unavailable (%s: %s); retrying for up to %.0f s", type(error).__name__, error,
                        self.seconds)
        return min(self.backoff.compute(self.failures), remaining)

    def close(self) -> None:
        self.open = False
        _window.reset(self._token)


class BoundedRetry(Retry):
    """redis-py's ``Retry`` bounded by a total time instead of a count; nested calls make one attempt (module doc)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff | None = None) -> None:
        self.seconds = seconds
        self.policy = backoff or _backoff()
        self.credentials = Credentials()
        super().__init__(self.policy, -1, RETRY_ERRORS)

    def __deepcopy__(self, memo: dict[int, Any]) -> BoundedRetry:
        return _copy_sharing_credentials(self, memo)

    def errors(self) -> tuple[type[Exception], ...]:
        return tuple(getattr(self, "_supported_errors", RETRY_ERRORS))  # redis-py adds retry_on_error's here

    def call_with_retry(self, do: Callable[[], T], fail: Callable[[Exception], Any]) -> T:
        errors = self.errors()
        if _nested():
            try:
                return do()
            except errors as error:
                fail(error)  # this level's clean-up (disconnect); the outer loop retries
                raise
        window = _Window(self.seconds, self.policy)
        try:
            while True:
                try:
                    return do()
                except errors as error:
                    if self.credentials.refused_for_good(error):
                        raise
                    failed: Exception = error
                try:
                    fail(failed)  # disconnects; raises ``failed`` for errors the connection must not retry
                except errors as error:
                    if error is failed:
                        raise
                    failed = error  # a handler that reconnects (PubSub's) failed to: one more failed attempt
                time.sleep(window.next_delay(failed))
        finally:
            window.close()


class AsyncBoundedRetry(AsyncRetry):
    """``BoundedRetry`` for ``redis.asyncio`` clients (the operator's event loop)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff | None = None) -> None:
        self.seconds = seconds
        self.policy = backoff or _backoff()
        self.credentials = Credentials()
        super().__init__(self.policy, -1, RETRY_ERRORS)

    def __deepcopy__(self, memo: dict[int, Any]) -> AsyncBoundedRetry:
        return _copy_sharing_credentials(self, memo)

    def errors(self) -> tuple[type[Exception], ...]:
        return tuple(getattr(self, "_supported_errors", RETRY_ERRORS))

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Callable[[Any], Any]) -> T:
        errors = self.errors()
        if _nested():
            try:
                return await do()
            except errors as error:
                await fail(error)
                raise
        window = _Window(self.seconds, self.policy)
        try:
            while True:
                try:
                    return await do()
                except errors as error:
                    if self.credentials.refused_for_good(error):
                        raise
                    failed: Exception = error
                try:
                    await fail(failed)
                except errors as error:
                    if error is failed:
                        raise
                    failed = error
                await asyncio.sleep(window.next_delay(failed))
        finally:
            window.close()


RetryT = TypeVar("RetryT", BoundedRetry, AsyncBoundedRetry)


def _copy_sharing_credentials(retry: RetryT, memo: dict[int, Any]) -> RetryT:
    """A deep copy of ``retry`` (redis-py copies a connection's) that shares its ``Credentials``."""
    memo[id(retry.credentials)] = retry.credentials
    twin = copy.copy(retry)
    twin.__dict__.update(copy.deepcopy(retry.__dict__, memo))
    return twin


def _accepted(connection_kwargs: Mapping[str, Any]) -> None:
    """A connection of the pool is connected: its login, if it has one, worked (``Credentials``)."""
    retry = connection_kwargs.get("retry")
    if isinstance(retry, (BoundedRetry, AsyncBoundedRetry)) and _has_credentials(connection_kwargs):
        retry.credentials.accepted = True


class RetryingConnectionPool(redis.ConnectionPool):
    """Taking a connection (which reconnects a dropped one) retries under the connections' ``retry`` too; the first
    connection that logs in marks the client's credentials accepted."""

    def get_connection(self, *args: Any, **options: Any) -> Any:  # args: deprecated in redis-py 5.3, passed on
        get = super().get_connection
        retry = self.connection_kwargs.get("retry")
        if not isinstance(retry, Retry):
            return get(*args, **options)
        connection = retry.call_with_retry(lambda: get(*args, **options), lambda _error: None)
        _accepted(self.connection_kwargs)
        return connection


async def _ignore(_error: Any) -> None:
    return None


class AsyncRetryingConnectionPool(aioredis.ConnectionPool):
    """``RetryingConnectionPool`` for ``redis.asyncio``."""

    async def get_connection(self, *args: Any, **options: Any) -> Any:
        get = super().get_connection
        retry = self.connection_kwargs.get("retry")
        if not isinstance(retry, AsyncRetry):
            return await get(*args, **options)
        connection = await retry.call_with_retry(lambda: get(*args, **options), _ignore)
        _accepted(self.connection_kwargs)
        return connection


class AsyncBoundedConnectionPool(AsyncRetryingConnectionPool, aioredis.BlockingConnectionPool):
    """``AsyncRetryingConnectionPool`` that opens at most ``max_connections`` connections; a command waits for a free
    one (up to ``timeout`` seconds, then the pool's ConnectionError, which the retry covers).

    redis.asyncio's own pool opens a connection for every command that finds none free, without limit: an operator
    starting with 4,000 new AgentTasks ran 4,000 snapshots at once and held 4,000 connections (each with its read
    buffers: 2 GB of memory, and as many server-side clients)."""


class SentinelConnection(SentinelManagedConnection):
    """A connection to the primary that asks the sentinels where the primary is each time it connects.

    redis-py's own asks only in ``connect()``, but a command's retry reconnects the same connection with
    ``connect_check_health()``, which went back to the address it had: the dead primary's, until the retry window
    was over (tests/integration/test_redis_failover.py)."""

    # (types-redis 4.6 knows neither connect_check_health nor the sentinel pool proxy: Any below)

    def _connect_retry(self) -> None:
        pool: Any = self.connection_pool
        self.connect_check_health(check_health=pool.check_connection, retry_socket_connect=False)

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        pool: Any = self.connection_pool
        if getattr(self, "_sock", None) is None:
            self.host, self.port = pool.get_master_address()
        parent: Any = super()
        parent.connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)


class AsyncSentinelConnection(AsyncSentinelManagedConnection):
    """``SentinelConnection`` for ``redis.asyncio``."""

    async def _connect_retry(self) -> None:
        pool: Any = self.connection_pool
        await self.connect_check_health(check_health=pool.check_connection, retry_socket_connect=False)

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        pool: Any = self.connection_pool
        if not self.is_connected:
            self.host, self.port = await pool.get_master_address()
        parent: Any = super()
        await parent.connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)


class RetryingSentinelPool(RetryingConnectionPool, SentinelConnectionPool):
    """The primary's connections of a Redis with Sentinel: each (re)connect asks the sentinels for the primary
    (``SentinelConnectionPool``), taking a connection is retried (``RetryingConnectionPool``), and closing the client
    closes the connections to the sentinels too."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:  # the client's close(), not the pool dropping idle connections to a replaced primary
            for sentinel in self.sentinel_manager.sentinels:
                sentinel.connection_pool.disconnect()


class AsyncBoundedSentinelPool(AsyncRetryingConnectionPool, AsyncSentinelConnectionPool,
                               aioredis.BlockingConnectionPool):
    """``RetryingSentinelPool`` for ``redis.asyncio``, bounded like ``AsyncBoundedConnectionPool``."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.connection_pool.disconnect()


def client_options(
    url: str, *, retry_for: float | None = None, is_async: bool = False, health_check_interval: float | None = None
) -> dict[str, Any]:
    """Connection keyword arguments of every UniCore Redis client (options in the URL's query string win).

    ``health_check_interval``: seconds a connection may stay idle before it is PINGed (default 15; tests lower it).
    """
    seconds = retry_seconds() if retry_for is None else retry_for
    options: dict[str, Any] = {
        "socket_timeout": RedisClientSettings.from_env(only={"socket_timeout"}).socket_timeout or None,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "health_check_interval": HEALTH_CHECK_INTERVAL if health_check_interval is None else health_check_interval,
        "retry": AsyncBoundedRetry(seconds) if is_async else BoundedRetry(seconds),
        "retry_on_error": list(RETRY_ERRORS),
        "encoding_errors": ENCODING_ERRORS,  # text is written valid, a reply that is not UTF-8 read (state.codec)
    }
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True
    return options


def cluster_retries(seconds: float) -> int:
    """The retry count a Redis Cluster client gets for a window of ``seconds``.

    redis-py's cluster clients retry a whole command (re-reading the slot map between attempts) a number of times
    (``Retry.get_retries()``: a negative count would mean no attempt at all) and give each node connection no retries
    of its own, so the time-bounded ``BoundedRetry`` cannot be theirs. This is the number of backoffs
    (``BACKOFF_BASE`` doubling, capped at ``BACKOFF_CAP``, jitter up to half of each) whose full lengths add up to
    ``seconds``: about the same window, ended by a count rather than a clock."""
    retries, total, delay = 0, 0.0, BACKOFF_BASE
    while total < seconds:
        delay = min(delay * 2, BACKOFF_CAP)
        total += delay
        retries += 1
    return retries


def cluster_seed_url(url: str) -> str | None:
    """For a URL naming a Redis Cluster (``redis+cluster://[user:password@]host:port`` or ``rediss+cluster://...``
    for TLS: any one node; the client discovers the rest), the plain URL of that node; None for any other URL."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower()) if sep else None
    return f"{plain}://{rest}" if plain else None


# The REDIS_URL scheme of a Redis with Sentinel (build_client / build_async_client ask the sentinels for the primary).
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
SENTINEL_FORM = f"{SENTINEL_SCHEME}://[user:password@]host:port[,host:port...]/<master name>[/<db>]"
# Query options for the sentinels themselves (when they require a password of their own); every other option is the
# primary's connection's, as in a redis:// URL.
SENTINEL_AUTH_OPTIONS = {"sentinel_username": "username", "sentinel_password": "password"}


@dataclass(frozen=True)
class SentinelURL:
    """What a ``redis+sentinel://`` URL names: the sentinels, the master name they monitor, the primary's connection
    (``node_url``: a plain ``redis://`` URL with the credentials, database and options, its host a placeholder) and
    the sentinels' own credentials."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    node_url: str
    sentinel_auth: dict[str, str]


def _sentinel_address(part: str) -> tuple[str, int]:
    """``host:port``, ``host`` (port 26379) or ``[v6 address]:port`` of one sentinel; ValueError with why not."""
    if part.startswith("["):
        host, bracket, rest = part[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise ValueError(f"sentinel address {part!r} is not [IPv6 address]:port")
        port_text = rest[1:]
    else:
        host, colon, port_text = part.rpartition(":") if ":" in part else (part, "", "")
        if ":" in host:
            raise ValueError(f"sentinel address {part!r}: an IPv6 address goes in brackets ([::1]:26379)")
    if not host:
        raise ValueError(f"sentinel address {part!r} has no host")
    if not port_text:
        return host, SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"sentinel port {port_text!r} is not a port number (1-65535)")
    return host, int(port_text)


def sentinel_url(url: str) -> SentinelURL | None:
    """For ``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>][?options]``, its parts;
    None for a URL of any other scheme; ValueError (why, one line) for a malformed one.

    ``user:password`` and the options are the primary's (as in ``redis://``; the name of the master is
    percent-decoded); ``sentinel_username`` / ``sentinel_password`` options are the sentinels' own, for sentinels that
    require a password (``requirepass`` in sentinel.conf). A sentinel without a port is on 26379."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != SENTINEL_SCHEME:
        return None
    rest, _hash, _fragment = rest.partition("#")
    rest, _q, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not hosts:
        raise ValueError(f"no sentinel named ({SENTINEL_FORM})")
    sentinels = tuple(_sentinel_address(part) for part in hosts.split(","))
    segments = path.split("/") if slash else []
    if segments and segments[-1] == "" and len(segments) > 1:
        segments.pop()  # a trailing slash
    if not segments or not segments[0]:
        raise ValueError(f"no master name ({SENTINEL_FORM})")
    if len(segments) > 2:
        raise ValueError(f"the path must be /<master name>[/<db>] ({SENTINEL_FORM})")
    db = segments[1] if len(segments) == 2 else "0"
    if not db.isdigit():
        raise ValueError(f"database {db!r} is not a number")
    options = parse_qsl(query, keep_blank_values=True)
    auth = {SENTINEL_AUTH_OPTIONS[k]: v for k, v in options if k in SENTINEL_AUTH_OPTIONS}
    node_query = urlencode([(k, v) for k, v in options if k not in SENTINEL_AUTH_OPTIONS])
    host, port = sentinels[0]
    node_url = f"redis://{userinfo}{at}[{host}]:{port}/{db}" if ":" in host else \
        f"redis://{userinfo}{at}{host}:{port}/{db}"
    return SentinelURL(sentinels, unquote(segments[0]), node_url + (f"?{node_query}" if node_query else ""), auth)


class RedisURLError(ConfigError):
    """A Redis URL no client can be built from: one line, its password shown as ``***``."""


URL_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES, SENTINEL_SCHEME)
_SECRETS = (re.compile(r"(://[^/?#@]*?:)[^/?#]*@"), re.compile(r"([?&][a-z_]*password=)[^&#]*", re.IGNORECASE))


def shown_url(url: str) -> str:
    """``url`` for a message: its passwords (in the user part, a ``password=`` or ``sentinel_password=`` option) as
    ``***``, cut at 200."""
    for secret in _SECRETS:
        url = secret.sub(r"\1***@" if secret is _SECRETS[0] else r"\1***", url)
    return url if len(url) <= 200 else url[:200] + "..."


def _url_problem(url: str) -> str | None:
    """Why no client can be built from ``url`` (None: one can). Uses redis-py's own parser and builds (without
    connecting) the connection it would make, so an option it would refuse at the first command is refused now."""
    scheme, sep, _rest = url.partition("://")
    if not sep or scheme not in URL_SCHEMES:
        return f"the scheme must be one of {', '.join(s + '://' for s in URL_SCHEMES)}"
    seed = cluster_seed_url(url)
    try:
        sentinel = sentinel_url(url)
        if sentinel is not None:
            url = sentinel.node_url  # the primary's connection: checked as a redis:// URL's
        options = parse_url(seed or url)
        if seed is not None:  # the cluster client drops options it does not know
            if not options.get("host"):
                return "no host (a Redis Cluster URL names any one node: host:port)"
            if int(options.get("db") or 0) != 0:
                return "a Redis Cluster has only database 0"
            return None
        if scheme == "unix" and not options.get("path"):
            return "no socket path (unix:///path/to/redis.sock)"
        options.pop("max_connections", None)  # the pool's, not the connection's
        options.pop("connection_class", Connection)(**options)
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        return f"unknown option {unknown.group(1)!r}" if unknown else str(exc)
    except (ValueError, RedisError) as exc:
        return str(exc)
    return None


def check_url(url: str, name: str = "Redis URL") -> str:
    """``url`` when a client can be built from it; ``RedisURLError`` (one line, naming ``name``) otherwise."""
    problem = _url_problem(url)
    if problem is not None:
        raise RedisURLError(f"invalid {name} {shown_url(url)!r}: {problem}")
    return url


def _connected_cluster(make: Callable[[], T], seconds: float) -> T:
    """``make()`` (a cluster client, which connects as it is built) retried for ``seconds`` while no node can be
    reached, like a command; other cluster errors at once."""

    def attempt() -> T:
        try:
            return make()
        except RedisClusterException as exc:
            cause = exc.__cause__
            if isinstance(cause, RETRY_ERRORS) and not is_final(cause):  # no startup node could be reached
                raise RedisConnectionError(str(exc)) from exc
            raise

    return BoundedRetry(seconds).call_with_retry(attempt, lambda _error: None)


def _sentinel_options(parts: SentinelURL, options: dict[str, Any], *, is_async: bool) -> tuple[dict[str, Any],
                                                                                             dict[str, Any]]:
    """(the primary's connection options, the sentinels' connection options) of a Sentinel URL's client.

    A sentinel is asked once per connection attempt (no retries of its own): the primary's connection is retried by
    the client's window, and a sentinel that is down is skipped for the next one (redis-py's ``discover_master``)."""
    node = parse_url(parts.node_url)
    for placeholder in ("host", "port"):
        node.pop(placeholder, None)
    sentinel: dict[str, Any] = {k: options[k] for k in ("socket_timeout", "socket_connect_timeout",
                                                       "socket_keepalive") if k in options}
    sentinel["retry"] = AsyncRetry(NoBackoff(), 0) if is_async else Retry(NoBackoff(), 0)
    sentinel.update(parts.sentinel_auth)
    return {**options, **node}, sentinel  # options in the URL win, as for redis://


def build_client(
    url: str, *, decode_responses: bool = True, retry_for: float | None = None,
    health_check_interval: float | None = None,
) -> RedisClient:
    """A synchronous client for ``url`` that rides out connection blips (see the module doc); ``RedisURLError`` for
    a URL no client can be built from."""
    check_url(url)
    options = client_options(url, retry_for=retry_for, health_check_interval=health_check_interval)
    seed = cluster_seed_url(url)
    if seed is not None:  # same command API; redis-py's sync cluster client ignores health_check_interval
        seconds = options.pop("retry").seconds
        options["retry"] = Retry(_backoff(), cluster_retries(seconds), RETRY_ERRORS)
        return cast(RedisClient, _connected_cluster(
            lambda: RedisCluster.from_url(seed, decode_responses=decode_responses, **options), seconds))
    sentinel = sentinel_url(url)
    if sentinel is not None:
        node, sentinel_options = _sentinel_options(sentinel, options, is_async=False)
        manager = Sentinel(list(sentinel.sentinels), sentinel_kwargs=sentinel_options)
        pool: redis.ConnectionPool = RetryingSentinelPool(sentinel.service, manager, decode_responses=decode_responses,
                                                          connection_class=SentinelConnection, **node)
    else:
        pool = RetryingConnectionPool.from_url(url, decode_responses=decode_responses, **options)
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # type: ignore[attr-defined]  # close() also closes the pool
    return client


def build_async_client(
    url: str, *, decode_responses: bool = False, retry_for: float | None = None,
    health_check_interval: float | None = None, max_connections: int = ASYNC_MAX_CONNECTIONS,
) -> AsyncRedisClient:
    """A ``redis.asyncio`` client for ``url`` with the same retries, timeouts and health checks, and at most
    ``max_connections`` connections (``AsyncBoundedConnectionPool``; a Redis Cluster client is not bounded);
    ``RedisURLError`` for a URL no client can be built from."""
    check_url(url)
    options = client_options(url, retry_for=retry_for, is_async=True, health_check_interval=health_check_interval)
    seed = cluster_seed_url(url)
    if seed is not None:
        options["retry"] = AsyncRetry(_backoff(), cluster_retries(options.pop("retry").seconds), RETRY_ERRORS)
        # Not bounded: redis.asyncio's cluster nodes refuse a command over their max_connections instead of waiting.
        return cast(AsyncRedisClient, AsyncRedisCluster.from_url(seed, decode_responses=decode_responses, **options))
    sentinel = sentinel_url(url)
    if sentinel is not None:
        node, sentinel_options = _sentinel_options(sentinel, options, is_async=True)
        manager = AsyncSentinel(list(sentinel.sentinels), sentinel_kwargs=sentinel_options)
        node.update(max_connections=max_connections, timeout=POOL_WAIT_SECONDS,  # BlockingConnectionPool's
                    connection_class=AsyncSentinelConnection)
        pool: aioredis.ConnectionPool = AsyncBoundedSentinelPool(sentinel.service, manager,
                                                                 decode_responses=decode_responses, **node)
    else:
        pool = AsyncBoundedConnectionPool.from_url(url, decode_responses=decode_responses,
                                                   max_connections=max_connections, timeout=POOL_WAIT_SECONDS,
                                                   **options)
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client
