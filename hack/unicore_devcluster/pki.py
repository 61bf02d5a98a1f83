"""Certificates and keys for a local control plane (EC P-256, generated with ``cryptography``)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)

SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVER_IPS = ("127.0.0.1", "10.0.0.1")
# The common name of the API server's front-proxy client certificate (--requestheader-allowed-names).
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of every file the control plane needs."""

    ca: CertPair
    apiserver: CertPair
    kubelet_serving: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    apiserver_kubelet_client: CertPair
    sa_key: Path
    sa_pub: Path
    # The aggregation layer: the API server's client certificate when it proxies a request to an aggregated API
    # (--proxy-client-cert-file), signed by its own CA (--requestheader-client-ca-file), which the aggregated API
    # servers read from kube-system/extension-apiserver-authentication to trust the X-Remote-User headers.
    front_proxy_ca: CertPair
    front_proxy_client: CertPair


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _issue(
    folder: Path,
    stem: str,
    subject: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate | None,
    *,
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    key: ec.EllipticCurvePrivateKey | None = None,
) -> CertPair:
    key = key or _new_key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject if ca_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )
    if ca_cert is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(folder / f"{stem}.crt", folder / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def generate(folder: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write a fresh CA, serving and client certificates and the service-account key pair into ``folder``
    (``extra_ips``: more addresses the API server's certificate is valid for, e.g. the real node's IP)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca = _issue(folder, "ca", _name("unicore-devcluster-ca"), ca_key, None, key=ca_key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())

    def client(stem: str, cn: str, orgs: tuple[str, ...] = ()) -> CertPair:
        return _issue(folder, stem, _name(cn, orgs), ca_key, ca_cert, client=True)

    apiserver = _issue(
        folder,
        "apiserver",
        _name("kube-apiserver"),
        ca_key,
        ca_cert,
        server=True,
        dns=SERVER_NAMES,
        ips=SERVER_IPS + tuple(ip for ip in extra_ips if ip not in SERVER_IPS),
    )
    kubelet_serving = _issue(
        folder,
        "kubelet",
        _name("unicore-devcluster-kubelet"),
        ca_key,
        ca_cert,
        server=True,
        dns=("localhost",),
        ips=("127.0.0.1",),
    )
    sa = _new_key()
    sa_key = folder / "sa.key"
    sa_pub = folder / "sa.pub"
    _write_key(sa, sa_key)
    sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    front_proxy_key = _new_key()
    front_proxy_ca = _issue(
        folder, "front-proxy-ca", _name("unicore-devcluster-front-proxy-ca"), front_proxy_key, None, key=front_proxy_key
    )
    front_proxy_client = _issue(
        folder,
        "front-proxy-client",
        _name(FRONT_PROXY_CLIENT),
        front_proxy_key,
        x509.load_pem_x509_certificate(front_proxy_ca.cert.read_bytes()),
        client=True,
    )
    return Pki(
        ca=ca,
        apiserver=apiserver,
        kubelet_serving=kubelet_serving,
        admin=client("admin", "unicore-admin", ("system:masters",)),
        controller_manager=client("controller-manager", "system:kube-controller-manager"),
        scheduler=client("scheduler", "system:kube-scheduler"),
        apiserver_kubelet_client=client(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
        ),
        sa_key=sa_key,
        sa_pub=sa_pub,
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=front_proxy_client,
    )


def issue(
    ca: CertPair,
    folder: Path,
    stem: str,
    common_name: str,
    orgs: tuple[str, ...] = (),
    *,
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> CertPair:
    """One more certificate signed by the CA at ``ca`` (e.g. a kubelet's ``system:node:<name>`` client
    certificate and its serving certificate), written to ``folder/<stem>.crt`` and ``.key``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca.key} is not an EC key")
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    return _issue(
        folder, stem, _name(common_name, orgs), ca_key, ca_cert, server=server, client=client, dns=dns, ips=ips
    )
