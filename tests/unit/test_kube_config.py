"""unicore.kube_config: which credentials win (no API server needed: the chosen server URL shows the source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client
from unicore import kube_config
from unicore.errors import ConfigError
from unicore.kube_config import choose_source, load_api_client

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def write_kubeconfig(path: Path, server: str, *, extra_context: tuple[str, str] | None = None) -> str:
    """A kubeconfig whose current context talks to ``server`` (and ``extra_context`` = (name, server) if given)."""
    clusters = [{"name": "main", "cluster": {"server": server}}]
    contexts = [{"name": "main", "context": {"cluster": "main", "user": "me"}}]
    if extra_context:
        name, other = extra_context
        clusters.append({"name": name, "cluster": {"server": other}})
        contexts.append({"name": name, "context": {"cluster": name, "user": "me"}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "main", "clusters": clusters, "contexts": contexts,
        "users": [{"name": "me", "user": {"token": "t0k3n"}}],
    }))
    return str(path)


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Four credential sources, each naming a different server; the ServiceAccount folder is a temp folder."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("not checked until a request is made")
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_DIR", account)
    home = tmp_path / "home"
    write_kubeconfig(home / ".kube" / "config", "https://home.example:6443")
    return {
        "given": write_kubeconfig(tmp_path / "given.yaml", "https://given.example:6443"),
        "env": write_kubeconfig(tmp_path / "env.yaml", "https://env.example:6443"),
        "home": str(home),
    }


def host(config_file: str | None, environ: dict[str, str]) -> str:
    return str(load_api_client(config_file, environ=environ).configuration.host)


def test_a_given_file_wins_over_everything(places: dict[str, str]) -> None:
    environ = {"KUBECONFIG": places["env"], "HOME": places["home"], **IN_CLUSTER}
    assert host(places["given"], environ) == "https://given.example:6443"


def test_kubeconfig_env_wins_over_the_service_account_and_home(places: dict[str, str]) -> None:
    environ = {"KUBECONFIG": places["env"], "HOME": places["home"], **IN_CLUSTER}
    assert host(None, environ) == "https://env.example:6443"
    assert choose_source(None, environ).why == "$KUBECONFIG"


def test_in_a_pod_the_service_account_wins_over_home(places: dict[str, str]) -> None:
    api = load_api_client(environ={"HOME": places["home"], "KUBECONFIG": "", **IN_CLUSTER})
    assert api.configuration.host == "https://10.96.0.1:443"
    assert api.configuration.api_key["BearerToken"] == "bearer pod-token"


def test_home_kubeconfig_is_the_last_resort(places: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    assert host(None, {"HOME": places["home"]}) == "https://home.example:6443"
    # in a pod without a mounted token (automountServiceAccountToken: false) the home kubeconfig still works
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_DIR", tmp_path / "no-account")
    assert host(None, {"HOME": places["home"], **IN_CLUSTER}) == "https://home.example:6443"


def test_no_credentials_is_a_config_error_saying_what_was_tried(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_DIR", tmp_path / "no-account")
    with pytest.raises(ConfigError, match=r"\$KUBECONFIG is not set, not in a pod .* does not exist"):
        load_api_client(environ={"HOME": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"KUBERNETES_SERVICE_HOST is set but .*token does not exist"):
        load_api_client(environ={"HOME": str(tmp_path), **IN_CLUSTER})


def test_a_broken_kubeconfig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [")
    with pytest.raises(ConfigError, match=f"cannot load Kubernetes credentials from kubeconfig {broken}"):
        load_api_client(str(broken), environ={})
    with pytest.raises(ConfigError, match=r"\$KUBECONFIG"):
        load_api_client(environ={"KUBECONFIG": str(tmp_path / "missing.yaml")})


def test_a_context_can_be_chosen(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "two.yaml", "https://main.example", extra_context=("other", "https://other"))
    assert load_api_client(path, context="other", environ={}).configuration.host == "https://other"
    with pytest.raises(ConfigError):
        load_api_client(path, context="nope", environ={})


def test_the_clients_global_default_configuration_is_left_alone(places: dict[str, str]) -> None:
    before = client.Configuration.get_default_copy().host
    load_api_client(environ={"HOME": places["home"], **IN_CLUSTER})
    load_api_client(places["given"], environ={})
    assert client.Configuration.get_default_copy().host == before


def test_the_spawner_uses_the_loader(places: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from unicore.launch.k8s_spawner import load_custom_objects_api

    monkeypatch.setenv("KUBECONFIG", places["env"])
    assert load_custom_objects_api().api_client.configuration.host == "https://env.example:6443"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", places["home"])
    for name, value in IN_CLUSTER.items():
        monkeypatch.setenv(name, value)
    assert load_custom_objects_api().api_client.configuration.host == "https://10.96.0.1:443"


def test_kubectl_order_puts_the_home_kubeconfig_before_the_service_account(
    places: dict[str, str], tmp_path: Path
) -> None:
    in_pod = {"HOME": places["home"], **IN_CLUSTER}
    assert choose_source(None, in_pod, in_cluster_last=True).why == "the default kubeconfig"
    assert load_api_client(environ=in_pod, in_cluster_last=True).configuration.host == "https://home.example:6443"
    # a given file and $KUBECONFIG still come first
    assert load_api_client(places["given"], environ=in_pod, in_cluster_last=True).configuration.host == (
        "https://given.example:6443"
    )
    with_env = {**in_pod, "KUBECONFIG": places["env"]}
    assert load_api_client(environ=with_env, in_cluster_last=True).configuration.host == "https://env.example:6443"
    # without a kubeconfig, the ServiceAccount
    no_home = {"HOME": str(tmp_path / "nobody"), **IN_CLUSTER}
    assert choose_source(None, no_home, in_cluster_last=True).kind == "in-cluster"
    assert load_api_client(environ=no_home, in_cluster_last=True).configuration.host == "https://10.96.0.1:443"


def test_the_kubectl_plugin_uses_the_loader_in_kubectls_order(
    places: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unicore_client.kubectl_plugin.errors import PluginError
    from unicore_client.kubectl_plugin.kube import connect

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", places["home"])
    for name, value in IN_CLUSTER.items():
        monkeypatch.setenv(name, value)
    home = connect()
    assert home.api_client.configuration.host == "https://home.example:6443"
    assert (home.namespace, home.user) == ("default", "me")
    assert connect(kubeconfig=places["given"]).api_client.configuration.host == "https://given.example:6443"
    monkeypatch.setenv("KUBECONFIG", places["env"])
    assert connect(namespace="team").api_client.configuration.host == "https://env.example:6443"
    assert connect(namespace="team").namespace == "team"
    other = write_kubeconfig(tmp_path / "two.yaml", "https://main.example", extra_context=("other", "https://other"))
    assert connect(kubeconfig=other, context="other").api_client.configuration.host == "https://other"
    with pytest.raises(PluginError, match="context 'nope' not found"):
        connect(kubeconfig=other, context="nope")
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [")
    with pytest.raises(PluginError, match=f"cannot load the kubeconfig {broken}"):
        connect(kubeconfig=str(broken))
    # in a pod without a kubeconfig: the ServiceAccount and the pod's namespace
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    (kube_config.SERVICE_ACCOUNT_DIR / "namespace").write_text("agents\n")
    pod = connect()
    assert pod.api_client.configuration.host == "https://10.96.0.1:443"
    assert (pod.namespace, pod.user) == ("agents", "serviceaccount")
    # nowhere at all: one line saying what was tried
    for name in IN_CLUSTER:
        monkeypatch.delenv(name)
    with pytest.raises(PluginError, match=r"no Kubernetes credentials: \$KUBECONFIG is not set"):
        connect()
