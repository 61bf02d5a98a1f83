"""A derived OCI image archive for tests: an existing archive (an OCI layout in a tar, as hack/build-node.sh makes
busybox's) plus one layer of directory entries, under a new name. No registry or builder needed."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any


def _read(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None, name
    return member.read()


def _blob(data: bytes) -> tuple[str, str]:
    digest = hashlib.sha256(data).hexdigest()
    return f"sha256:{digest}", f"blobs/sha256/{digest}"


def _add(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def with_directory_modes(source: Path, dest: Path, image_name: str, modes: dict[str, int]) -> str:
    """Write ``dest``: ``source``'s image with a top layer that gives each directory of ``modes`` (path -> mode, owned
    by root) that mode, named ``image_name``; returns the name."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for path, mode in modes.items():
            info = tarfile.TarInfo(path.strip("/"))
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, 0, 0
            tar.addfile(info)
    layer_bytes = layer.getvalue()
    with tarfile.open(source) as src:
        index = json.loads(_read(src, "index.json"))
        manifest_desc = index["manifests"][0]
        manifest = json.loads(_read(src, "blobs/sha256/" + manifest_desc["digest"].split(":", 1)[1]))
        config: dict[str, Any] = json.loads(_read(src, "blobs/sha256/" + manifest["config"]["digest"].split(":", 1)[1]))
        layer_digest, layer_path = _blob(layer_bytes)
        config["rootfs"]["diff_ids"].append(layer_digest)
        config.setdefault("history", []).append({"created_by": f"tests: directory modes {modes}"})
        config_bytes = json.dumps(config).encode()
        config_digest, config_path = _blob(config_bytes)
        manifest["config"] = {**manifest["config"], "digest": config_digest, "size": len(config_bytes)}
        manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                                   "size": len(layer_bytes)})
        manifest_bytes = json.dumps(manifest).encode()
        manifest_digest, manifest_path = _blob(manifest_bytes)
        tag = image_name.rsplit(":", 1)[1]
        index["manifests"] = [{**manifest_desc, "digest": manifest_digest, "size": len(manifest_bytes),
                               "annotations": {"io.containerd.image.name": image_name,
                                               "org.opencontainers.image.ref.name": tag}}]
        with tarfile.open(dest, "w") as out:
            for member in src.getmembers():
                if member.name in ("index.json",) or not member.isfile():
                    continue
                _add(out, member.name, _read(src, member.name))
            for path, data in ((layer_path, layer_bytes), (config_path, config_bytes),
                               (manifest_path, manifest_bytes), ("index.json", json.dumps(index).encode())):
                _add(out, path, data)
    return image_name
