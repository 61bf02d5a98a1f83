"""The real node's pure configuration builders (unicore_devcluster.node_config), its kubeconfig and certificates,
and the OCI archive writer of the pause and busybox images."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tarfile
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from unicore_devcluster import node_config as nc
from unicore_devcluster import pki
from unicore_devcluster.kubeconfig import write_kubeconfig
from unicore_devcluster.launcher import SERVICE_CIDR
from unicore_devcluster.oci_archive import ImageSpec, layer_tar, write_archive


def _kubelet(**overrides: object) -> dict:
    args: dict = {
        "node_ip": "192.0.2.2",
        "port": 10250,
        "healthz_port": 10248,
        "ca_file": Path("/s/ca.crt"),
        "tls_cert": Path("/s/kubelet.crt"),
        "tls_key": Path("/s/kubelet.key"),
        "runtime_socket": Path("/run/x/containerd.sock"),
        "pod_logs_dir": Path("/s/pod-logs"),
        "cgroup_root": "/unicore-node",
    }
    args.update(overrides)
    return nc.kubelet_config(**args)


def test_kubelet_config_fits_a_cgroup_v1_cgroupfs_host_and_the_cluster_dns() -> None:
    config = _kubelet()
    assert config["kind"] == "KubeletConfiguration"
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert config["failCgroupV1"] is False  # Kubernetes >= 1.35 refuses cgroup v1 otherwise
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/unicore-node"
    assert config["containerRuntimeEndpoint"] == "unix:///run/x/containerd.sock"
    assert config["clusterDNS"] == [nc.DNS_SERVICE_IP]
    assert config["clusterDomain"] == "cluster.local"
    assert ipaddress.ip_address(nc.DNS_SERVICE_IP) in ipaddress.ip_network(SERVICE_CIDR)
    # served on the node IP for the API server (logs, exec), authenticated and authorized by the API server
    assert config["address"] == "192.0.2.2" and config["port"] == 10250 and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/s/ca.crt"
    assert config["authorization"]["mode"] == "Webhook"
    # imported images cannot be pulled again: image garbage collection never runs
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["podLogsDir"] == "/s/pod-logs"
    yaml.safe_load(yaml.safe_dump(config))  # serialisable as written


def test_kube_proxy_config_is_iptables_mode_and_leaves_host_sysctls_alone() -> None:
    config = nc.kube_proxy_config(
        kubeconfig=Path("/s/kp.kubeconfig"), node_name="n0", node_ip="192.0.2.2", healthz_port=1, metrics_port=2
    )
    assert config["mode"] == "iptables"
    assert config["hostnameOverride"] == "n0"
    assert config["clusterCIDR"] == nc.POD_CIDR
    assert config["clientConnection"]["kubeconfig"] == "/s/kp.kubeconfig"
    assert config["healthzBindAddress"] == "127.0.0.1:1" and config["metricsBindAddress"] == "127.0.0.1:2"
    assert config["conntrack"]["maxPerCore"] == 0  # 0 = do not touch nf_conntrack_max
    assert config["iptables"]["localhostNodePorts"] is False  # no route_localnet


def test_cni_conflist_is_a_bridge_with_host_local_ipam_under_the_state_folder() -> None:
    conf = nc.cni_conflist(ipam_dir=Path("/s/cni/ipam"))
    assert conf["cniVersion"] == "1.0.0" and conf["name"] == nc.CNI_NETWORK
    (bridge,) = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == nc.BRIDGE
    assert bridge["isGateway"] is True
    assert bridge["ipMasq"] is False  # pods reach the node and each other, nothing beyond
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local" and ipam["dataDir"] == "/s/cni/ipam"
    assert ipam["ranges"] == [[{"subnet": nc.POD_CIDR, "gateway": "10.244.0.1"}]]
    json.dumps(conf)


def test_gateway_is_the_first_host_address() -> None:
    assert nc.gateway("10.244.0.0/24") == "10.244.0.1"
    assert nc.gateway("172.20.8.0/22") == "172.20.8.1"


def test_corefile_serves_the_cluster_zone_on_the_node_ip_and_forwards_the_rest() -> None:
    text = nc.corefile(
        node_ip="192.0.2.2",
        port=5353,
        health_port=1,
        ready_port=2,
        kubeconfig=Path("/s/coredns.kubeconfig"),
        upstreams=["10.255.255.53"],
    )
    assert text.startswith(".:5353 {")
    assert "    bind 192.0.2.2\n" in text
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text
    assert "kubeconfig /s/coredns.kubeconfig" in text
    assert "forward . 10.255.255.53" in text
    assert "ready 127.0.0.1:2" in text and "health 127.0.0.1:1" in text
    assert text.count("{") == text.count("}")
    alone = nc.corefile(node_ip="192.0.2.2", port=1, health_port=2, ready_port=3, kubeconfig=Path("/k"), upstreams=[])
    assert "forward" not in alone


def test_resolv_upstreams_skips_loopback_resolvers_and_junk() -> None:
    text = "# x\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nsearch a.b\nnameserver ::1\nnameserver bad\n"
    assert nc.resolv_upstreams(text) == ["10.255.255.53"]


def test_dns_service_and_its_slice_point_kube_proxy_at_the_host_process() -> None:
    service = nc.dns_service()
    assert service["metadata"] == {
        "name": "kube-dns",
        "namespace": "kube-system",
        "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
    }
    assert service["spec"]["clusterIP"] == nc.DNS_SERVICE_IP
    assert "selector" not in service["spec"]  # endpoints come from the slice below, not from pods
    assert {(p["name"], p["protocol"], p["port"]) for p in service["spec"]["ports"]} == {
        ("dns", "UDP", 53),
        ("dns-tcp", "TCP", 53),
    }
    slice_ = nc.dns_endpoint_slice("192.0.2.2", 5353, "n0")
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert slice_["endpoints"] == [{"addresses": ["192.0.2.2"], "conditions": {"ready": True}, "nodeName": "n0"}]
    # port names match the Service's, so kube-proxy maps 53 -> 5353 for both protocols
    assert {(p["name"], p["protocol"], p["port"]) for p in slice_["ports"]} == {
        ("dns", "UDP", 5353),
        ("dns-tcp", "TCP", 5353),
    }


def test_coredns_rbac_grants_list_and_watch_only() -> None:
    role, binding = nc.coredns_rbac("system:unicore-coredns")
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"list", "watch"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:unicore-coredns"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_local_path_storage_class_is_the_default_and_waits_for_the_first_consumer() -> None:
    sc = nc.local_path_storage_class()
    assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert sc["provisioner"] == nc.LOCAL_PATH_PROVISIONER
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer" and sc["reclaimPolicy"] == "Delete"


def test_isolation_rules_keep_pod_traffic_on_the_node() -> None:
    rules = nc.isolation_rules("10.244.0.0/24", "br9", "10.0.0.0/24")
    assert ["-s", "10.244.0.0/24", "!", "-o", "br9", "-j", "REJECT"] in rules
    assert ["-d", "10.0.0.0/24", "-j", "REJECT"] in rules


def test_node_kubeconfig_and_certificate_name_the_node(tmp_path: Path) -> None:
    ca_pki = pki.generate(tmp_path / "pki", extra_ips=("192.0.2.2",))
    apiserver = x509.load_pem_x509_certificate(ca_pki.apiserver.cert.read_bytes())
    sans = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("192.0.2.2") in sans.get_values_for_type(x509.IPAddress)

    pair = pki.issue(ca_pki.ca, tmp_path / "node", "kubelet-client", "system:node:n0", ("system:nodes",), client=True)
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n0"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    ca_cert = x509.load_pem_x509_certificate(ca_pki.ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca_cert)

    path = write_kubeconfig(
        tmp_path / "kubelet.kubeconfig",
        server="https://127.0.0.1:6443",
        ca_file=ca_pki.ca.cert,
        user="system:node:n0",
        cert_file=pair.cert,
        key_file=pair.key,
    )
    doc = yaml.safe_load(path.read_text())
    assert doc["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority": str(ca_pki.ca.cert),
    }
    assert doc["users"] == [
        {"name": "system:node:n0", "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)}}
    ]
    assert path.stat().st_mode & 0o777 == 0o600


def test_oci_archive_is_a_loadable_layout_with_stable_digests(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF fake")
    binary.chmod(0o755)
    spec = ImageSpec(
        name="unicore.local/pause:3.10.2",
        files={"/pause": binary},
        symlinks={"/bin/sh": "/pause"},
        dirs=("/tmp",),
        entrypoint=["/pause"],
        user="65535:65535",
    )
    assert layer_tar(spec) == layer_tar(spec)  # fixed owners and times
    digest = write_archive(spec, tmp_path / "pause.tar")
    assert write_archive(spec, tmp_path / "again.tar") == digest

    with tarfile.open(tmp_path / "pause.tar") as tar:
        names = set(tar.getnames())
        assert {"oci-layout", "index.json"} <= names
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (entry,) = index["manifests"]
        assert entry["digest"] == digest
        assert entry["annotations"] == {
            "io.containerd.image.name": "unicore.local/pause:3.10.2",
            "org.opencontainers.image.ref.name": "3.10.2",
        }

        def blob(digest: str) -> bytes:
            data = tar.extractfile("blobs/sha256/" + digest.split(":")[1]).read()  # type: ignore[union-attr]
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
            return data

        manifest = json.loads(blob(digest))
        config = json.loads(blob(manifest["config"]["digest"]))
        layer = blob(manifest["layers"][0]["digest"])
    assert config["config"]["Entrypoint"] == ["/pause"] and config["config"]["User"] == "65535:65535"
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    (tmp_path / "layer.tar").write_bytes(layer)
    with tarfile.open(tmp_path / "layer.tar") as inner:
        members = {m.name: m for m in inner.getmembers()}
    assert members["pause"].mode == 0o755 and members["pause"].uid == 0
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/pause"
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
