"""The project's images on the real node: built by ``hack/build-images.sh``, imported into the node's containerd,
and the Helm values that make the chart run them.

There is no registry: ``hack/build-images.sh`` writes one archive per image into ``${UNICORE_CACHE}/images`` and
``images.json`` names them; ``load_images`` imports the agent, operator, Redis and MCP time server archives into the
node's containerd (as ``docker.io/library/<name>:<tag>``, where the kubelet looks a short name up), once per archive: a
file in the containerd root remembers which archive was imported, so importing again after the sources changed
takes only the new archives, and a fresh node (its containerd root is deleted at stop) imports them all.
``chart_values`` points the chart's three images at them with ``pullPolicy: Never``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unicore_devcluster.image_inputs import BuiltImage, read_manifest
from unicore_devcluster.log import logger

PROJECT_IMAGES = ("agent", "operator", "redis", "mcptime")
IMPORTED_FILE = "unicore-imported.json"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "build-images.sh"
# the chart's value prefix of each image
CHART_KEYS = {"agent": "agent.image", "operator": "operator.image", "redis": "redis.image"}


class ImagesError(RuntimeError):
    """The images are not built, or could not be imported (the message says which and why, in one line)."""


def images_dir() -> Path:
    """``${UNICORE_CACHE:-~/.cache/unicore}/images``, where ``hack/build-images.sh`` keeps its archives."""
    cache = os.environ.get("UNICORE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "unicore")
    return Path(cache) / "images"


def build_images(timeout: float = 1800.0) -> Path:
    """Run ``hack/build-images.sh`` (builds only what changed; under a second when nothing did) and return its
    folder. Raises ImagesError with the tail of its output when it fails."""
    proc = subprocess.run(  # noqa: S603 - the project's own script
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ImagesError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}): {tail}")
    return Path(lines[-1])


def built_images(folder: Path | None = None, keys: Sequence[str] = PROJECT_IMAGES) -> dict[str, BuiltImage]:
    """The built images of ``keys`` (from ``images.json``); ImagesError when one is missing."""
    folder = folder or images_dir()
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError, KeyError) as exc:
        raise ImagesError(f"no images in {folder} ({exc}); run make images-local") from None
    missing = [key for key in keys if key not in manifest or not manifest[key].archive.is_file()]
    if missing:
        raise ImagesError(f"images {', '.join(missing)} are not built in {folder}; run make images-local")
    return {key: manifest[key] for key in keys}


def load_images(runtime: Any, folder: Path | None = None,
                keys: Sequence[str] = PROJECT_IMAGES) -> dict[str, BuiltImage]:
    """Import the archives of ``keys`` into ``runtime`` (a ContainerdRuntime, namespace k8s.io) unless that very
    archive was imported there already; returns the images by key (``.ref``: the reference containerd stores)."""
    images = built_images(folder, keys)
    marker = Path(runtime.root_dir) / IMPORTED_FILE
    try:
        done: dict[str, str] = json.loads(marker.read_text())
    except (OSError, ValueError):
        done = {}
    present = set(runtime.images())
    for key, image in images.items():
        if done.get(key) == image.archive.name and image.ref in present:
            continue
        logger.info("importing %s (%s) into the node's containerd", image.ref, image.archive.name)
        try:
            runtime.import_image(image.archive)
        except Exception as exc:  # noqa: BLE001 - one line for the caller
            raise ImagesError(f"importing {image.archive} failed: {exc}") from None
        done[key] = image.archive.name
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(done, indent=2))
    return images


def split_ref(ref: str) -> tuple[str, str]:
    """``docker.io/library/unicore-agent:0.1.0`` -> (``docker.io/library/unicore-agent``, ``0.1.0``) (pure)."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise ValueError(f"image reference without a tag: {ref}")
    return name, tag


def chart_values(images: dict[str, BuiltImage]) -> list[str]:
    """``helm`` arguments that make the chart run these images: repository, tag and ``pullPolicy: Never`` of each,
    and the operator image's input hash as a pod annotation, so that ``helm upgrade`` after a rebuild restarts the
    operator on the new image (pure)."""
    args: list[str] = []
    for key, image in sorted(images.items()):
        if key not in CHART_KEYS:  # e.g. the MCP test server: the examples and tests deploy it, not the chart
            continue
        repository, tag = split_ref(image.ref)
        prefix = CHART_KEYS[key]
        args += ["--set", f"{prefix}.repository={repository}", "--set-string", f"{prefix}.tag={tag}",
                 "--set", f"{prefix}.pullPolicy=Never"]
        if key == "operator":
            args += ["--set-string", f"operator.podAnnotations.unicore\\.dev/image-inputs={image.inputs[:16]}"]
    return args
