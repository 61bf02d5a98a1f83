"""Who calls the aggregated task API: request-header authentication, as every aggregated API server does it
(metrics-server, KubeVirt's subresources; k8s.io/apiserver's ``requestheader`` authenticator).

The API server authenticates the user itself, then proxies the request to the operator over TLS with its front-proxy
client certificate (``--proxy-client-cert-file``) and the user in headers (``X-Remote-User``, ``X-Remote-Uid``,
``X-Remote-Group``, ``X-Remote-Extra-<key>``). Those headers mean something only on a connection whose client
certificate the request-header CA signed (and whose common name is allowed): anyone else could write them. The CA,
the allowed names and the header names are published by the API server in the ConfigMap
``kube-system/extension-apiserver-authentication`` (``requestheader-*`` keys), which the operator reads
(:meth:`RequestHeaderConfig.from_configmap`).

Pure: the TLS server (``server.py``) hands over the peer certificate (DER) and the header pairs.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"
CONFIGMAP_PATH = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/{CONFIGMAP_NAME}"
CA_KEY = "requestheader-client-ca-file"


class AuthConfigError(Exception):
    """The ConfigMap does not say how to authenticate the API server (no request-header CA, bad values)."""


def _names(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        raise AuthConfigError(f"{key} is not a JSON list: {raw[:200]!r}") from None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise AuthConfigError(f"{key} is not a JSON list of strings: {raw[:200]!r}")
    return tuple(item for item in value if item)


@dataclass(frozen=True)
class RequestHeaderConfig:
    """What ``kube-system/extension-apiserver-authentication`` says about the API server's proxied requests."""

    ca_pem: str
    allowed_names: tuple[str, ...] = ()  # empty: any certificate the CA signed
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    ca_certs: tuple[x509.Certificate, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.ca_certs:
            try:
                certs = tuple(x509.load_pem_x509_certificates(self.ca_pem.encode()))
            except ValueError as exc:
                raise AuthConfigError(f"{CA_KEY} holds no PEM certificate ({exc})") from None
            object.__setattr__(self, "ca_certs", certs)

    @classmethod
    def from_configmap(cls, data: Mapping[str, str] | None) -> RequestHeaderConfig:
        data = data or {}
        ca_pem = data.get(CA_KEY, "")
        if not ca_pem.strip():
            raise AuthConfigError(
                f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} has no {CA_KEY}: the API server runs without the "
                "aggregation layer (--requestheader-client-ca-file, --proxy-client-cert-file)"
            )
        usernames = _names(data, "requestheader-username-headers")
        if not usernames:
            raise AuthConfigError(f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} names no requestheader-username-headers")
        return cls(
            ca_pem=ca_pem,
            allowed_names=_names(data, "requestheader-allowed-names"),
            username_headers=usernames,
            uid_headers=_names(data, "requestheader-uid-headers"),
            group_headers=_names(data, "requestheader-group-headers"),
            extra_prefixes=_names(data, "requestheader-extra-headers-prefix"),
        )


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user, as the API server forwarded it (what a SubjectAccessReview asks about)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # sorted (key, values): hashable, for the decision cache


def client_cert_problem(config: RequestHeaderConfig, der: bytes | None,
                        now: datetime.datetime | None = None) -> str | None:
    """Why the connection's client certificate (DER; None: none given) may not assert a user; None when it may.

    The TLS handshake already verified the chain against every request-header CA the operator has seen since it
    started; this checks the leaf against the CAs published now (a rotated-out CA no longer counts), its validity,
    its extended key usage and the allowed names."""
    if not der:
        return "no client certificate: only the Kubernetes API server's front-proxy certificate may call this API"
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return "the client certificate cannot be parsed"
    now = now or datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return "the client certificate is outside its validity period"
    if not any(_issued_by(cert, ca) for ca in config.ca_certs):
        return "the client certificate is not signed by the API server's request-header CA"
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None
    if usages is not None and not ({ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
                                   & set(usages)):
        return "the client certificate is not for client authentication"
    if config.allowed_names:
        common = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if not common or common[0] not in config.allowed_names:
            return (f"the client certificate's common name {common[0] if common else '(none)'!r} is not one of "
                    f"requestheader-allowed-names {list(config.allowed_names)}")
    return None


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # another issuer, signature or key type
        return False
    return True


def _first(headers: Iterable[tuple[str, str]], names: Iterable[str]) -> str:
    pairs = list(headers)
    for name in names:
        for key, value in pairs:
            if key.lower() == name.lower() and value.strip():
                return value.strip()
    return ""


def user_from_headers(config: RequestHeaderConfig, headers: Iterable[tuple[str, str]]) -> UserInfo | None:
    """The user the API server put into the request's headers (every pair, repeated headers included); None when
    no username header is set. As k8s.io/apiserver's requestheader authenticator: the first username (and uid)
    header with a value; every value of every group header; extra keys lower-cased and percent-decoded, values
    in header order."""
    pairs = list(headers)
    name = _first(pairs, config.username_headers)
    if not name:
        return None
    group_names = {header.lower() for header in config.group_headers}
    groups = tuple(value for key, value in pairs if key.lower() in group_names and value)
    extra: dict[str, list[str]] = {}
    for prefix in config.extra_prefixes:
        for key, value in pairs:
            if key.lower().startswith(prefix.lower()) and len(key) > len(prefix):
                extra.setdefault(unquote(key[len(prefix):].lower()), []).append(value)
    return UserInfo(name=name, uid=_first(pairs, config.uid_headers), groups=groups,
                    extra=tuple(sorted((key, tuple(values)) for key, values in extra.items())))
