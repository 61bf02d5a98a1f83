"""Kopf's connection to the API server: the operator's own credentials, over a bounded pool of connections.

Kopf's built-in login opens its aiohttp session with no limit on connections. Its API calls (finalizers, progress
annotations, status patches, Events) each take a connection of their own while they run, so an operator that found
4,000 new AgentTasks at start-up opened some 700 TLS connections at once, each with its buffers (asyncio's 256 KiB
read buffer and OpenSSL's state): about 300 KiB per connection, 2 GB in all, most of it kept after the burst.

Here the session allows the long-lived watch streams (three kinds per watched namespace: AgentTasks, turn Jobs,
turn pods) plus ``REQUEST_CONNECTIONS`` for everything else; a call beyond that waits for a connection. The
credentials come from ``unicore.kube_config.load_api_client``, the loader the operator's other client, turn pods and
the tooling use, so both of the operator's clients act as the same identity, found in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import kopf
from unicore.kube_config import load_api_client

REQUEST_CONNECTIONS = 32  # connections for Kopf's API calls other than its watch streams
WATCHES_PER_NAMESPACE = 3  # AgentTasks, turn Jobs, turn pods


def connection_limit(namespaces: Sequence[str]) -> int:
    """The session's connections: every watch stream (one set cluster-wide) plus ``REQUEST_CONNECTIONS``."""
    return WATCHES_PER_NAMESPACE * max(1, len(namespaces)) + REQUEST_CONNECTIONS


def _bearer(configuration: Any) -> tuple[str | None, str | None]:
    """(scheme, token) of the configuration's Authorization value (kubernetes-client keeps it under ``BearerToken``
    since 36, under ``authorization`` before)."""
    header = (configuration.get_api_key_with_prefix("BearerToken")
              or configuration.get_api_key_with_prefix("authorization") or "")
    scheme, _, token = header.partition(" ")
    if not token:  # a bare value is a token without a scheme
        return None, scheme or None
    return scheme, token


def connection_info(configuration: Any) -> kopf.ConnectionInfo:
    """Kopf's view of a ``kubernetes.client.Configuration`` (pure): server, CA, client certificate, token."""
    scheme, token = _bearer(configuration)
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def bounded_session(info: kopf.ConnectionInfo, limit: int) -> kopf.AiohttpSession:
    """An aiohttp session with ``info``'s credentials and at most ``limit`` connections (call it in the loop)."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
    )
    return kopf.AiohttpSession(aiohttp_session=session, server=info.server, default_namespace=info.default_namespace)


def login(namespaces: Sequence[str]) -> kopf.AiohttpSession:
    """The operator's Kopf session (see the module doc)."""
    api_client = load_api_client()
    try:
        info = connection_info(api_client.configuration)
    finally:
        api_client.close()
    return bounded_session(info, connection_limit(namespaces))
