"""Kopf's API session: the operator's credentials, and a connection limit that leaves room for every watch."""

from __future__ import annotations

import asyncio

from kubernetes.client import Configuration
from unicore_operator.kopf_login import (
    REQUEST_CONNECTIONS,
    WATCHES_PER_NAMESPACE,
    bounded_session,
    connection_info,
    connection_limit,
)


def test_the_limit_leaves_every_watch_its_connection_and_requests_theirs() -> None:
    assert connection_limit(()) == WATCHES_PER_NAMESPACE + REQUEST_CONNECTIONS  # cluster-wide: one set of watches
    assert connection_limit(("a", "b", "c")) == 3 * WATCHES_PER_NAMESPACE + REQUEST_CONNECTIONS


def test_connection_info_takes_server_ca_client_certificate_and_token() -> None:
    config = Configuration(host="https://10.0.0.1:6443")
    config.ssl_ca_cert = "/pki/ca.crt"
    config.cert_file, config.key_file = "/pki/user.crt", "/pki/user.key"
    config.api_key = {"BearerToken": "abc.def"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    info = connection_info(config)
    assert (info.server, info.ca_path, info.certificate_path, info.private_key_path) == (
        "https://10.0.0.1:6443", "/pki/ca.crt", "/pki/user.crt", "/pki/user.key")
    assert (info.scheme, info.token, info.insecure) == ("Bearer", "abc.def", False)
    assert info.as_http_headers() == {"Authorization": "Bearer abc.def"}


def test_the_session_is_bounded() -> None:
    async def limit() -> int:
        session = bounded_session(connection_info(Configuration(host="https://10.0.0.1:6443")), 7)
        try:
            return session.aiohttp_session.connector.limit  # type: ignore[union-attr]
        finally:
            await session.aiohttp_session.close()

    assert asyncio.run(limit()) == 7
