"""The aggregated task API's pure auth parts: the request-header settings from the API server's ConfigMap, which
client certificates may assert a user, the user from the X-Remote-* headers, and the SubjectAccessReview asked."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from unicore_operator.task_api.authn import (
    AuthConfigError,
    RequestHeaderConfig,
    UserInfo,
    client_cert_problem,
    user_from_headers,
)
from unicore_operator.task_api.authz import Attributes, Authorizer, decision_of, review_body

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(1).not_valid_before(NOW - datetime.timedelta(days=1))
            .not_valid_after(NOW + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_leaf(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], cn: str, *,
              usage: Any = ExtendedKeyUsageOID.CLIENT_AUTH, days: tuple[int, int] = (-1, 1)) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca[0].subject)
               .public_key(key.public_key()).serial_number(2)
               .not_valid_before(NOW + datetime.timedelta(days=days[0]))
               .not_valid_after(NOW + datetime.timedelta(days=days[1])))
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(ca[1], hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def front_proxy() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return make_ca("front-proxy-ca")


def configmap(ca_pem: str, **overrides: Any) -> dict[str, str]:
    data = {
        "client-ca-file": "(the users' CA: not for this)",
        "requestheader-client-ca-file": ca_pem,
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-uid-headers": '["X-Remote-Uid"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }
    data.update({key: json.dumps(value) if not isinstance(value, str) else value
                 for key, value in overrides.items()})
    return data


def test_the_settings_come_from_the_api_servers_configmap(front_proxy: Any) -> None:
    config = RequestHeaderConfig.from_configmap(configmap(pem(front_proxy[0])))
    assert config.allowed_names == ("front-proxy-client",)
    assert (config.username_headers, config.uid_headers, config.group_headers, config.extra_prefixes) == (
        ("X-Remote-User",), ("X-Remote-Uid",), ("X-Remote-Group",), ("X-Remote-Extra-",))
    assert config.ca_certs == (front_proxy[0],)
    other = make_ca("second")[0]
    assert len(RequestHeaderConfig.from_configmap(configmap(pem(front_proxy[0]) + pem(other))).ca_certs) == 2
    # an API server without the aggregation layer, or values that are not what Kubernetes writes
    for data, fragment in (
        ({}, "has no requestheader-client-ca-file"),
        (configmap("  "), "has no requestheader-client-ca-file"),
        (configmap("not a certificate"), "holds no PEM certificate"),
        (configmap(pem(front_proxy[0]), **{"requestheader-username-headers": "[]"}), "names no requestheader-user"),
        (configmap(pem(front_proxy[0]), **{"requestheader-allowed-names": "front-proxy-client"}), "not a JSON list"),
        (configmap(pem(front_proxy[0]), **{"requestheader-group-headers": "[1]"}), "not a JSON list of strings"),
    ):
        with pytest.raises(AuthConfigError, match=fragment):
            RequestHeaderConfig.from_configmap(data)


def test_only_the_front_proxy_certificate_may_assert_a_user(front_proxy: Any) -> None:
    config = RequestHeaderConfig.from_configmap(configmap(pem(front_proxy[0])))
    assert client_cert_problem(config, make_leaf(front_proxy, "front-proxy-client"), NOW) is None
    stranger = make_ca("cluster-ca")
    for der, fragment in (
        (None, "no client certificate"),
        (b"junk", "cannot be parsed"),
        (make_leaf(stranger, "front-proxy-client"), "not signed by the API server's request-header CA"),
        (make_leaf(front_proxy, "alice"), "common name 'alice' is not one of requestheader-allowed-names"),
        (make_leaf(front_proxy, "front-proxy-client", usage=ExtendedKeyUsageOID.SERVER_AUTH), "not for client auth"),
        (make_leaf(front_proxy, "front-proxy-client", days=(-3, -2)), "outside its validity period"),
        (make_leaf(front_proxy, "front-proxy-client", days=(2, 3)), "outside its validity period"),
    ):
        problem = client_cert_problem(config, der, NOW)
        assert problem is not None and fragment in problem, (fragment, problem)
    # no EKU at all is any usage; no allowed names: any certificate the CA signed
    assert client_cert_problem(config, make_leaf(front_proxy, "front-proxy-client", usage=None), NOW) is None
    anyone = RequestHeaderConfig.from_configmap(configmap(pem(front_proxy[0]), **{"requestheader-allowed-names": ""}))
    assert client_cert_problem(anyone, make_leaf(front_proxy, "alice"), NOW) is None
    # the CA rotated out: the handshake may still pass (Python's trust store only grows), this does not
    rotated = RequestHeaderConfig.from_configmap(configmap(pem(make_ca("new-front-proxy-ca")[0])))
    assert "not signed" in str(client_cert_problem(rotated, make_leaf(front_proxy, "front-proxy-client"), NOW))


def test_the_user_comes_from_the_configured_headers_as_kubernetes_reads_them(front_proxy: Any) -> None:
    config = RequestHeaderConfig.from_configmap(configmap(pem(front_proxy[0]), **{
        "requestheader-username-headers": '["X-Remote-User", "X-Other-User"]'}))
    headers = [
        ("Host", "x"), ("x-remote-user", "alice"), ("X-Other-User", "mallory"), ("X-Remote-Uid", "u-1"),
        ("X-Remote-Group", "team-a"), ("X-Remote-Group", "system:authenticated"),
        ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-scopes", "b"),
        ("X-Remote-Extra-Example.com%2fteam", "blue"),
    ]
    assert user_from_headers(config, headers) == UserInfo(
        name="alice", uid="u-1", groups=("team-a", "system:authenticated"),
        extra=(("example.com/team", ("blue",)), ("scopes", ("a", "b"))))
    assert user_from_headers(config, [("X-Other-User", "bob")]) == UserInfo(name="bob")
    assert user_from_headers(config, [("X-Remote-User", " "), ("X-Remote-Group", "system:masters")]) is None
    assert user_from_headers(config, [("Authorization", "Bearer x")]) is None


ATTRS = Attributes(verb="create", namespace="team-a", name="demo", subresource="messages",
                   group="tasks.unicore.dev", version="v1alpha1", resource="agenttasks")


def test_the_subject_access_review_asks_about_the_user_and_the_subresource() -> None:
    user = UserInfo(name="alice", uid="u-1", groups=("team-a",), extra=(("scopes", ("a", "b")),))
    assert review_body(user, ATTRS) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "alice",
            "uid": "u-1",
            "groups": ["team-a"],
            "extra": {"scopes": ["a", "b"]},
            "resourceAttributes": {"namespace": "team-a", "verb": "create", "group": "tasks.unicore.dev",
                                   "version": "v1alpha1", "resource": "agenttasks", "subresource": "messages",
                                   "name": "demo"},
        },
    }
    assert "uid" not in review_body(UserInfo(name="bob"), ATTRS)["spec"]
    assert decision_of({"status": {"allowed": True}}).allowed
    assert not decision_of({"status": {"allowed": True, "denied": True}}).allowed
    assert decision_of({"status": {"allowed": False, "reason": "no RBAC policy matched"}}).reason == (
        "no RBAC policy matched")
    assert not decision_of({}).allowed
    assert ATTRS.describe() == ('create resource "agenttasks/messages" in API group "tasks.unicore.dev" in the '
                                'namespace "team-a"')


def test_allowed_decisions_are_reused_briefly_and_denials_never() -> None:
    asked: list[dict[str, Any]] = []
    answers = {"alice": True, "bob": False}
    now = [100.0]

    def create(path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        asked.append(body)
        return {"status": {"allowed": answers[body["spec"]["user"]]}}

    authorizer = Authorizer(create, clock=lambda: now[0])
    alice, bob = UserInfo(name="alice"), UserInfo(name="bob")
    assert authorizer.check(alice, ATTRS).allowed and authorizer.check(alice, ATTRS).allowed
    assert len(asked) == 1
    other_task = Attributes(**{**ATTRS.__dict__, "name": "other"})
    assert authorizer.check(alice, other_task).allowed and len(asked) == 2  # another task is another question
    assert not authorizer.check(bob, ATTRS).allowed and not authorizer.check(bob, ATTRS).allowed
    assert len(asked) == 4
    answers["bob"] = True  # granted: works at once
    assert authorizer.check(bob, ATTRS).allowed
    answers["alice"] = False  # revoked: works until the cached answer expires
    now[0] += 9.9
    assert authorizer.check(alice, ATTRS).allowed
    now[0] += 0.2
    assert not authorizer.check(alice, ATTRS).allowed
