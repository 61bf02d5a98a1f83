"""The operator's HTTPS ports that only the Kubernetes API server may call: the aggregated task API
(``task_api.server``) and the admission webhook (``admission``). Both authenticate the caller the way every aggregated
API server does (``task_api.authn``): the client certificate must be signed by the API server's request-header CA
and carry an allowed name, both read from ``kube-system/extension-apiserver-authentication`` (re-read every
``REFRESH_SECONDS``).

The task API gets that certificate from the aggregator (``--proxy-client-cert-file``) with every proxied request. The
API server presents a client certificate to an admission webhook only when its ``--admission-control-config-file``
names a kubeconfig for webhooks (docs/install.md, "The admission webhook accepts only the API server"): the
front-proxy client certificate there passes the same check.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from kubernetes.client.rest import ApiException
from unicore.errors import ConfigError

from unicore_operator.kube import KubeClients
from unicore_operator.log import logger
from unicore_operator.task_api.authn import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    CONFIGMAP_PATH,
    AuthConfigError,
    RequestHeaderConfig,
    UserInfo,
    client_cert_problem,
    user_from_headers,
)

__all__ = ["CERT_FILE", "KEY_FILE", "READER_ROLE", "REFRESH_SECONDS", "Authentication", "authentication",
           "read_auth_config", "refresh", "startup_problem"]

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
REFRESH_SECONDS = 30.0  # the serving certificate's files and the request-header ConfigMap are checked this often
READER_ROLE = "extension-apiserver-authentication-reader"


def read_auth_config(kube: KubeClients) -> RequestHeaderConfig:
    """The request-header settings the API server publishes; AuthConfigError saying why not."""
    where = f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"
    try:
        found = kube.core.read(CONFIGMAP_PATH)
    except ApiException as exc:
        if exc.status == 403:
            raise AuthConfigError(f"the operator may not read the ConfigMap {where} (bind it the Role {READER_ROLE} "
                                  f"in {CONFIGMAP_NAMESPACE}, as the chart does)") from None
        raise AuthConfigError(f"cannot read the ConfigMap {where}: HTTP {exc.status} {exc.reason}") from None
    if found is None:
        raise AuthConfigError(f"the ConfigMap {where} does not exist: the API server runs without the aggregation "
                              "layer")
    return RequestHeaderConfig.from_configmap(found.get("data"))


def _server_context(cert_dir: Path, config: RequestHeaderConfig | None) -> ssl.SSLContext:
    # Not create_default_context: that would also trust the system's CAs for client certificates.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_dir / CERT_FILE), str(cert_dir / KEY_FILE))
    if config is not None:
        context.verify_mode = ssl.CERT_OPTIONAL  # ask every client for a certificate; a wrong one fails the handshake
        context.load_verify_locations(cadata=config.ca_pem)
    return context


class Authentication:
    """The TLS context (serving certificate, request-header CAs) and the current request-header settings; without
    settings (``config`` None: the webhook's ``UNICORE_WEBHOOK_CLIENT_AUTH=none``) any client is accepted.

    The context's trust store only grows (Python cannot drop a CA from it): a CA the API server stopped publishing
    still passes the handshake until the operator restarts, but ``client_cert_problem`` then refuses it."""

    def __init__(self, cert_dir: Path, config: RequestHeaderConfig | None) -> None:
        self.cert_dir = cert_dir
        self.config = config
        self.context = _server_context(cert_dir, config)
        self.stamp = self._stamp()

    def _stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert_dir / CERT_FILE).st_mtime, os.stat(self.cert_dir / KEY_FILE).st_mtime)

    def update(self, config: RequestHeaderConfig) -> bool:
        """Use new request-header settings; True when they changed."""
        if config == self.config or self.config is None:
            return False
        self.context.load_verify_locations(cadata=config.ca_pem)
        self.config = config
        return True

    def reload_certificate(self) -> bool:
        """Load renewed serving certificate files for new connections; True when they changed."""
        stamp = self._stamp()
        if stamp == self.stamp:
            return False
        self.context.load_cert_chain(str(self.cert_dir / CERT_FILE), str(self.cert_dir / KEY_FILE))
        self.stamp = stamp
        return True

    def client_problem(self, request: web.Request) -> str | None:
        """Why this connection is not the API server's (its client certificate), or None when it is (or when any
        client is accepted)."""
        if self.config is None:
            return None
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return client_cert_problem(self.config, der)

    def user(self, request: web.Request) -> tuple[UserInfo | None, str]:
        """The user the API server vouches for on this request, else (None, why not)."""
        problem = self.client_problem(request)
        if problem:
            return None, problem
        if self.config is None:
            return None, "this port does not authenticate the API server"
        user = user_from_headers(self.config, request.headers.items())
        if user is None:
            return None, (f"the request names no user ({', '.join(self.config.username_headers)}): call this API "
                          "through the Kubernetes API server")
        return user, ""


def authentication(cert_dir: Path, kube: KubeClients, what: str, cert_setting: str) -> Authentication:
    """``what``'s Authentication (e.g. "the task API (UNICORE_TASK_API_PORT=9443)", its certificates from the
    setting ``cert_setting``); ConfigError saying in one line why it cannot be had (the request-header ConfigMap
    unreadable or missing, no usable certificate)."""
    try:
        config = read_auth_config(kube)
    except AuthConfigError as exc:
        raise ConfigError(f"{what} cannot authenticate the API server: {exc}") from exc
    try:
        return Authentication(cert_dir, config)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{what} has no usable certificate in {cert_setting}={cert_dir} ({CERT_FILE}, "
                          f"{KEY_FILE}): {exc}") from exc


def startup_problem(check: Callable[[KubeClients], object]) -> str | None:
    """A start-up check (``main``, before Kopf starts) as one line: ``check`` run with the operator's API client;
    the ConfigError it raises, or None (it passed, the operator has no credentials, which its start-up reports, or
    the API server is not reachable yet: then the start-up hook checks once it is)."""
    from unicore.kube_config import load_api_client

    try:
        api = load_api_client()
    except Exception:
        return None
    try:
        check(KubeClients(api))
    except ConfigError as exc:
        return str(exc)
    except Exception:  # transient: the hook checks again
        return None
    finally:
        api.close()
    return None


async def refresh(auth: Authentication, kube: KubeClients | None, what: str) -> None:
    """One check (every REFRESH_SECONDS): load a renewed serving certificate, and new request-header settings
    through ``kube`` (None: never); a failure keeps what was loaded before, with a warning."""
    try:
        if auth.reload_certificate():
            logger.info("%s: loaded the renewed serving certificate from %s", what, auth.cert_dir)
    except (OSError, ssl.SSLError) as exc:  # mid-update: try again at the next check
        logger.warning("%s: cannot load the serving certificate from %s: %s", what, auth.cert_dir, exc)
    if kube is not None:
        try:
            if auth.update(await asyncio.to_thread(read_auth_config, kube)):
                logger.info("%s: the API server's request-header settings changed; using them", what)
        except (AuthConfigError, ssl.SSLError, OSError) as exc:
            logger.warning("%s: keeping the request-header settings read before: %s", what, exc)
