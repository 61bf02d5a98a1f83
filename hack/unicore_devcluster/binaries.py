"""Locate the control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, helm)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from unicore_devcluster.log import logger

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "build-k8s.sh"


class BinariesNotFound(RuntimeError):
    """No folder with the control-plane binaries, and they could not be built."""


def has_binaries(folder: str | os.PathLike[str], names: tuple[str, ...] = REQUIRED) -> bool:
    path = Path(folder)
    return all(os.access(path / name, os.X_OK) for name in names)


def find_bin_dir(build: bool = True) -> Path:
    """Return the folder holding the binaries.

    Order: ``$KUBEBUILDER_ASSETS`` (envtest's convention), ``$UNICORE_K8S_BIN_DIR``, then
    ``hack/build-k8s.sh``
    (which builds what is missing into its cache and prints the folder) when ``build`` is true.
    """
    for var in ("KUBEBUILDER_ASSETS", "UNICORE_K8S_BIN_DIR"):
        value = os.environ.get(var)
        if value and has_binaries(value):
            return Path(value)
    if build and BUILD_SCRIPT.is_file():
        logger.info("building/locating control-plane binaries with %s", BUILD_SCRIPT)
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], check=False, stdout=subprocess.PIPE, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode == 0 and lines and has_binaries(lines[-1]):
            return Path(lines[-1])
        raise BinariesNotFound(f"{BUILD_SCRIPT} failed (exit {proc.returncode})")
    raise BinariesNotFound(
        "control-plane binaries not found: set KUBEBUILDER_ASSETS to a folder holding "
        + ", ".join(REQUIRED)
        + " or run hack/build-k8s.sh"
    )


NODE_REQUIRED = ("kubelet", "kube-proxy", "coredns", "unicore-cri", "images/pause.tar", "images/busybox.tar")
NODE_BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "build-node.sh"


def find_node_bin_dir(build: bool = True) -> Path:
    """The folder with the real node's binaries and image archives (``hack/build-node.sh``'s output).

    Order: ``$UNICORE_NODE_BIN_DIR``, then ``hack/build-node.sh`` (builds what is missing, prints the folder)
    when ``build`` is true.
    """
    value = os.environ.get("UNICORE_NODE_BIN_DIR")
    if value and all((Path(value) / name).exists() for name in NODE_REQUIRED):
        return Path(value)
    if build and NODE_BUILD_SCRIPT.is_file():
        logger.info("building/locating the node binaries with %s", NODE_BUILD_SCRIPT)
        proc = subprocess.run(["bash", str(NODE_BUILD_SCRIPT)], check=False, stdout=subprocess.PIPE, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode == 0 and lines and all((Path(lines[-1]) / n).exists() for n in NODE_REQUIRED):
            return Path(lines[-1])
        raise BinariesNotFound(f"{NODE_BUILD_SCRIPT} failed (exit {proc.returncode})")
    raise BinariesNotFound("node binaries not found: set UNICORE_NODE_BIN_DIR or run hack/build-node.sh")
