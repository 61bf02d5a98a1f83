"""Translate a pod's first container into a local process: argv, environment, working directory, volumes."""

from __future__ import annotations

import base64
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

_FIELD_RE = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_REF_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodSetupError(RuntimeError):
    """The container cannot be started (no command, executable not found, missing secret, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: dict[str, Path] = field(default_factory=dict)  # container mount path -> host folder


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (``$$`` escapes a dollar; unknown references stay as they are)."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REF_RE.sub(repl, text)


def _field_value(pod: dict[str, Any], path: str) -> str:
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD_RE.match(path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    raise PodSetupError("CreateContainerConfigError", f"unsupported fieldRef {path!r}")


class ConfigSource:
    """Reads ConfigMaps and Secrets of the pod's namespace (cached per pod start)."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self._cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        key = (kind, name)
        if key not in self._cache:
            try:
                if kind == "secret":
                    obj = self.core.read_namespaced_secret(name, self.namespace)
                    raw = obj.data or {}
                    self._cache[key] = {
                        k: base64.b64decode(v).decode(errors="replace") for k, v in raw.items()
                    }
                else:
                    obj = self.core.read_namespaced_config_map(name, self.namespace)
                    self._cache[key] = dict(obj.data or {})
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self._cache[key] = None
        return self._cache[key]

    def value(self, kind: str, ref: dict[str, Any]) -> str | None:
        data = self.data(kind, ref.get("name", ""))
        if data is None or ref.get("key") not in data:
            if ref.get("optional"):
                return None
            raise PodSetupError(
                "CreateContainerConfigError", f"{kind} {ref.get('name')!r} key {ref.get('key')!r} not found"
            )
        return data[ref["key"]]


def _resource_value(container: dict[str, Any], ref: dict[str, Any]) -> str:
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    value = container.get("resources", {}).get(kind, {}).get(name)
    return str(value) if value is not None else "0"


def _map_path(value: str, mounts: dict[str, Path]) -> str:
    for mount_path, host in sorted(mounts.items(), key=lambda item: -len(item[0])):
        if value == mount_path:
            return str(host)
        if value.startswith(mount_path.rstrip("/") + "/"):
            return str(host) + value[len(mount_path.rstrip("/")) :]
    return value


def _sub_path(mount: dict[str, Any]) -> str:
    """The mount's ``subPath``, refused as the kubelet refuses it when absolute or with a ``..`` component."""
    sub = str(mount.get("subPath") or "")
    if sub.startswith("/") or ".." in sub.split("/"):
        raise PodSetupError("CreateContainerConfigError", f"invalid subPath {sub!r}: must be a relative path "
                            "without '..'")
    return sub


def _prepare_volumes(
    pod: dict[str, Any], container: dict[str, Any], pod_dir: Path, source: ConfigSource, claims_dir: Path
) -> dict[str, Path]:
    """emptyDir, configMap and secret volumes become folders under the pod's data folder; a persistentVolumeClaim
    volume is the claim's folder ``<claims_dir>/<namespace>/<claimName>``, shared by every pod that mounts the claim
    and kept after they end. A ``subPath`` of an emptyDir or a claim is created, as the kubelet does."""
    volumes = {vol["name"]: vol for vol in pod.get("spec", {}).get("volumes", []) or []}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []) or []:
        vol = volumes.get(mount.get("name", ""))
        if vol is None:
            continue
        host = pod_dir / "volumes" / vol["name"]
        sub = _sub_path(mount)
        is_dir_volume = False
        if "emptyDir" in vol:
            host.mkdir(parents=True, exist_ok=True)
            is_dir_volume = True
        elif "persistentVolumeClaim" in vol:
            claim = str((vol["persistentVolumeClaim"] or {}).get("claimName") or "")
            if not claim or "/" in claim or claim in (".", ".."):
                raise PodSetupError("CreateContainerConfigError", f"invalid claimName {claim!r}")
            host = claims_dir / pod["metadata"]["namespace"] / claim
            host.mkdir(parents=True, exist_ok=True)
            is_dir_volume = True
        elif "configMap" in vol or "secret" in vol:
            kind = "secret" if "secret" in vol else "configmap"
            ref = vol.get("secret") or vol.get("configMap") or {}
            data = source.data(kind, ref.get("secretName") or ref.get("name", ""))
            if data is None and not ref.get("optional"):
                continue
            host.mkdir(parents=True, exist_ok=True)
            for key, text in (data or {}).items():
                (host / key).write_text(text)
        else:
            continue
        target = host / sub if sub else host
        if sub and is_dir_volume:
            target.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = target
    return mounts


def resolve_executable(name: str, path: str) -> str:
    """Find ``name`` on ``path`` (the project's venv first); an absolute path that does not exist here is
    looked up by its base name (an image's /usr/local/bin/x is the venv's x)."""
    if "/" in name:
        if os.access(name, os.X_OK) and os.path.isfile(name):
            return name
        name = os.path.basename(name)
    found = shutil.which(name, path=path)
    if not found:
        raise PodSetupError("StartError", f"executable {name!r} not found on PATH={path}")
    return found


def build_plan(
    pod: dict[str, Any],
    core: Any,
    pod_dir: Path,
    *,
    path: str,
    kubeconfig: Path | None,
    claims_dir: Path | None = None,
) -> LaunchPlan:
    """The argv, env and working directory for the pod's first container.

    ``claims_dir`` holds the folders of persistentVolumeClaim volumes (default: ``claims`` next to the folder of
    ``pod_dir``, i.e. ``<data>/claims`` for ``<data>/pods/<pod>``)."""
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    if not containers:
        raise PodSetupError("CreateContainerConfigError", "pod has no containers")
    container = containers[0]
    source = ConfigSource(core, pod["metadata"]["namespace"])
    claims = claims_dir if claims_dir is not None else pod_dir.parent.parent / "claims"
    mounts = _prepare_volumes(pod, container, pod_dir, source, claims)

    env: dict[str, str] = {}
    for env_from in container.get("envFrom", []) or []:
        prefix = env_from.get("prefix", "")
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = env_from.get(key)
            if ref:
                data = source.data(kind, ref.get("name", ""))
                if data is None and not ref.get("optional"):
                    raise PodSetupError("CreateContainerConfigError", f"{kind} {ref.get('name')!r} not found")
                env.update({prefix + k: v for k, v in (data or {}).items()})
    for item in container.get("env", []) or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = _map_path(expand(item.get("value", "") or "", env), mounts)
            continue
        value_from = item["valueFrom"]
        value: str | None
        if "fieldRef" in value_from:
            value = _field_value(pod, value_from["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in value_from:
            value = source.value("secret", value_from["secretKeyRef"])
        elif "configMapKeyRef" in value_from:
            value = source.value("configmap", value_from["configMapKeyRef"])
        elif "resourceFieldRef" in value_from:
            value = _resource_value(container, value_from["resourceFieldRef"])
        else:
            raise PodSetupError("CreateContainerConfigError", f"unsupported valueFrom for {name}")
        if value is not None:
            env[name] = value

    home = pod_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.setdefault("HOSTNAME", pod["metadata"]["name"])
    env.setdefault("HOME", str(home))
    env["PATH"] = path
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)

    command = [expand(part, env) for part in container.get("command", []) or []]
    args = [expand(part, env) for part in container.get("args", []) or []]
    if not command:
        raise PodSetupError(
            "StartError",
            "the first container has no command: image entrypoints are not available to the local runner",
        )
    argv = [_map_path(part, mounts) for part in command + args]
    argv[0] = resolve_executable(command[0], path)

    cwd = home
    working_dir = container.get("workingDir")
    if working_dir:
        mapped = Path(_map_path(working_dir, mounts))
        if mapped != Path(working_dir) or mapped.is_dir():
            cwd = mapped
            cwd.mkdir(parents=True, exist_ok=True)
    return LaunchPlan(argv=argv, env=env, cwd=cwd, mounts=mounts)
