"""Write kubeconfig files (client certificate or bearer token)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    user: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token: str | None = None,
    namespace: str | None = None,
    cluster: str = "unicore-devcluster",
) -> Path:
    """Write a one-context kubeconfig at ``path`` (mode 0600, written atomically) and return the path."""
    credentials: dict[str, Any] = {}
    if cert_file and key_file:
        credentials = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    if token:
        credentials["token"] = token
    context: dict[str, Any] = {"cluster": cluster, "user": user}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": cluster, "context": context}],
        "current-context": cluster,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(doc, handle, sort_keys=False)
    os.replace(tmp, path)
    return path
