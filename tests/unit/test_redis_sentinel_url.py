"""``redis+sentinel://`` URLs (unicore.store.client): their parts, the one-line errors for bad ones, and the client
built from a good one (nothing connects until the first command). A real failover: tests/integration/
test_redis_failover.py."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.connection import parse_url
from unicore.store.client import (
    AsyncBoundedSentinelPool,
    AsyncSentinelConnection,
    RedisURLError,
    RetryingSentinelPool,
    SentinelConnection,
    build_async_client,
    build_client,
    check_url,
    sentinel_url,
)


def test_the_parts_of_a_sentinel_url() -> None:
    parts = sentinel_url("redis+sentinel://me:p%40ss@s1:1,s2,[::1]:3/my%20master/2?socket_timeout=3"
                         "&sentinel_password=sp&sentinel_username=su")
    assert parts is not None
    assert parts.sentinels == (("s1", 1), ("s2", 26379), ("::1", 3))
    assert parts.service == "my master"
    assert parts.sentinel_auth == {"password": "sp", "username": "su"}
    node = parse_url(parts.node_url)
    assert (node["username"], node["password"], node["db"], node["socket_timeout"]) == ("me", "p@ss", 2, 3.0)
    assert "sentinel" not in parts.node_url
    assert parse_url(sentinel_url("redis+sentinel://s:1/m/").node_url)["db"] == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("url", ["redis://h:1/0", "unix:///r.sock", "redis+cluster://h:1", "rediss://h:1"])
def test_other_schemes_are_not_sentinel_urls(url: str) -> None:
    assert sentinel_url(url) is None


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis+sentinel://s:1", "no master name (redis+sentinel://[user:password@]host:port[,host:port...]/"),
        ("redis+sentinel://s:1/", "no master name"),
        ("redis+sentinel:///m", "no sentinel named"),
        ("redis+sentinel://s:x/m", "sentinel port 'x' is not a port number"),
        ("redis+sentinel://s:1,s:70000/m", "sentinel port '70000' is not a port number"),
        ("redis+sentinel://s:1,/m", "sentinel address '' has no host"),
        ("redis+sentinel://::1:5/m", "an IPv6 address goes in brackets"),
        ("redis+sentinel://[::1/m", "is not [IPv6 address]:port"),
        ("redis+sentinel://s:1/m/0/x", "the path must be /<master name>[/<db>]"),
        ("redis+sentinel://s:1/m/two", "database 'two' is not a number"),
        ("redis+sentinel://s:1/m?foo=1", "unknown option 'foo'"),
        ("redis+sentinel://s:1/m?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
        ("rediss+sentinel://s:1/m", "the scheme must be one of redis://, rediss://, unix://, redis+cluster://, "
                                    "rediss+cluster://, redis+sentinel://"),
    ],
)
def test_a_bad_sentinel_url_is_one_line(url: str, needle: str) -> None:
    with pytest.raises(RedisURLError) as raised:
        check_url(url, "REDIS_URL")
    message = str(raised.value)
    assert message.startswith("invalid REDIS_URL ") and needle in message and "\n" not in message, message


def test_a_bad_sentinel_url_never_shows_its_password() -> None:
    with pytest.raises(RedisURLError) as raised:
        check_url("redis+sentinel://me:s3cret@s:1/m/x?sentinel_password=s3cret2")
    assert "s3cret" not in str(raised.value) and "***" in str(raised.value)


def test_the_client_asks_the_sentinels_for_the_primary() -> None:
    client = build_client("redis+sentinel://me:pw@s1:1,s2:2/m/3?sentinel_password=sp", retry_for=1)
    pool = client.connection_pool
    assert isinstance(pool, RetryingSentinelPool) and pool.service_name == "m" and pool.is_master
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"], kwargs["decode_responses"]) == ("me", "pw", 3, True)
    assert pool.connection_class is SentinelConnection
    assert kwargs["retry"].seconds == 1 and kwargs["socket_keepalive"] is True
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinels] == [("s1", 1), ("s2", 2)]
    for sentinel in sentinels:  # one attempt per connection attempt of the primary's (whose window retries)
        options = sentinel.connection_pool.connection_kwargs
        assert options["password"] == "sp" and options["retry"].get_retries() == 0
        assert options.get("username") is None
    client.close()


def test_the_async_client_asks_the_sentinels_too() -> None:
    client = build_async_client("redis+sentinel://s1:1/m", max_connections=7)
    pool = client.connection_pool
    assert isinstance(pool, AsyncBoundedSentinelPool) and pool.max_connections == 7
    assert pool.connection_class is AsyncSentinelConnection
    asyncio.run(client.aclose())


def test_no_sentinel_answering_is_a_connection_error_after_the_window() -> None:
    client = build_client("redis+sentinel://127.0.0.1:1/m", retry_for=0)
    with pytest.raises(redis.ConnectionError, match="No master found for 'm'"):
        client.ping()
    client.close()
