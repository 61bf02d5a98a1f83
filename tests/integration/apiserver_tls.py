"""Real TLS for the operator's HTTPS servers that only the Kubernetes API server may call (the aggregated task API,
the admission webhook): a dev-cluster PKI (the users' CA, the front-proxy CA and the API server's front-proxy client
certificate), the request-header settings the API server would publish, client certificates to call with, and an
aiohttp server run on its own event loop in a thread."""

from __future__ import annotations

import asyncio
import http.client
import shutil
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicore_devcluster import pki
from unicore_operator.task_api.authn import RequestHeaderConfig


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiServerPki:
    ca: Path  # verifies the operator's serving certificate
    cert_dir: Path  # tls.crt, tls.key: the operator's serving certificate
    certs: dict[str, Any]  # client certificate pairs by name (pki.CertPair)
    config: RequestHeaderConfig  # what kube-system/extension-apiserver-authentication says

    def client_context(self, cert: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            pair = self.certs[cert]
            context.load_cert_chain(str(pair.cert), str(pair.key))
        return context

    def connection(self, port: int, cert: str | None = "front-proxy",
                   timeout: float = 30) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", port, context=self.client_context(cert), timeout=timeout)


def make_pki(folder: Path) -> ApiServerPki:
    """The PKI of a cluster: ``front-proxy`` is the API server's front-proxy client certificate;
    ``front-proxy-ca-alice`` is signed by the front-proxy CA but not with the allowed name; ``user-ca`` is a user's
    certificate from the cluster CA (what kubectl holds), named like the proxy."""
    cluster = pki.generate(folder / "pki")
    serving = pki.issue(cluster.ca, folder / "pki", "serving", "unicore-operator", server=True, ips=("127.0.0.1",))
    cert_dir = folder / "certs"
    cert_dir.mkdir()
    shutil.copy(serving.cert, cert_dir / "tls.crt")
    shutil.copy(serving.key, cert_dir / "tls.key")
    certs = {
        "front-proxy": cluster.front_proxy_client,
        "front-proxy-ca-alice": pki.issue(cluster.front_proxy_ca, folder / "pki", "fp-alice", "alice", client=True),
        "user-ca": pki.issue(cluster.ca, folder / "pki", "user", "front-proxy-client", client=True),
    }
    config = RequestHeaderConfig.from_configmap({
        "requestheader-client-ca-file": cluster.front_proxy_ca.cert.read_text(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    })
    return ApiServerPki(cluster.ca.cert, cert_dir, certs, config)


@contextmanager
def serving(serve: Callable[[int], Coroutine[Any, Any, None]]) -> Iterator[int]:
    """Run ``serve(port)`` (serves until cancelled) on a free port in a thread; yield the port once it accepts
    connections; cancel it at the end."""
    port = free_port()
    loop = asyncio.new_event_loop()
    task = loop.create_task(serve(port))

    async def up() -> None:
        for _ in range(200):
            if task.done():
                task.result()  # its error
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return
        raise AssertionError(f"the server on port {port} did not start")

    loop.run_until_complete(up())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(task.cancel)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()
