"""Write a single-layer OCI image archive (``ctr images import`` loads it) from files on this machine.

Standard library only, so ``hack/build-node.sh`` runs it with the system ``python3`` before any venv exists::

    python3 hack/unicore_devcluster/oci_archive.py --name unicore.local/pause:3.10.2 --out pause.tar \
        --file /pause=./pause --entrypoint /pause --user 65535:65535

The archive is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) whose index names the
image with both the ``io.containerd.image.name`` (full name) and ``org.opencontainers.image.ref.name`` (tag)
annotations. The layer is an uncompressed tar with fixed owners and times, so the same inputs give the same
digests.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"


@dataclass
class ImageSpec:
    """What goes into the image: files (path in the image -> file here), symlinks, folders and the config."""

    name: str
    files: dict[str, Path] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    user: str = ""
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"])


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type = kind
    info.mode = mode
    info.size = size
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def layer_tar(spec: ImageSpec) -> bytes:
    """The layer: parent folders, folders, files (mode kept: executables stay executable), symlinks."""
    buf = io.BytesIO()
    folders: set[str] = set(d.strip("/") for d in spec.dirs)
    for path in [*spec.files, *spec.symlinks]:
        parts = path.strip("/").split("/")[:-1]
        folders.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in sorted(f for f in folders if f):
            mode = 0o1777 if folder == "tmp" else 0o755
            tar.addfile(_info(folder + "/", tarfile.DIRTYPE, mode))
        for path, source in sorted(spec.files.items()):
            data = source.read_bytes()
            mode = source.stat().st_mode & 0o7777
            tar.addfile(_info(path, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
        for path, target in sorted(spec.symlinks.items()):
            info = _info(path, tarfile.SYMTYPE, 0o777)
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def _blob(out: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    out.addfile(_info(f"blobs/sha256/{digest}", tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def write_archive(spec: ImageSpec, out_path: Path) -> str:
    """Write the archive to ``out_path`` (via a temporary name) and return the manifest digest."""
    layer = layer_tar(spec)
    config: dict[str, object] = {"Env": spec.env}
    if spec.entrypoint:
        config["Entrypoint"] = spec.entrypoint
    if spec.cmd:
        config["Cmd"] = spec.cmd
    if spec.user:
        config["User"] = spec.user
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        "history": [{"created_by": "unicore_devcluster.oci_archive"}],
    }
    tag = spec.name.rsplit(":", 1)[1] if ":" in spec.name.rsplit("/", 1)[-1] else "latest"
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        layout = _json({"imageLayoutVersion": "1.0.0"})
        out.addfile(_info("oci-layout", tarfile.REGTYPE, 0o644, len(layout)), io.BytesIO(layout))
        out.addfile(_info("blobs/", tarfile.DIRTYPE, 0o755))
        out.addfile(_info("blobs/sha256/", tarfile.DIRTYPE, 0o755))
        layer_desc = {"mediaType": LAYER_MEDIA_TYPE, **_blob(out, layer)}
        config_desc = {"mediaType": CONFIG_MEDIA_TYPE, **_blob(out, _json(image_config))}
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": config_desc,
            "layers": [layer_desc],
        }
        manifest_desc = {
            "mediaType": MANIFEST_MEDIA_TYPE,
            **_blob(out, _json(manifest)),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": spec.name,
                "org.opencontainers.image.ref.name": tag,
            },
        }
        index = _json({"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [manifest_desc]})
        out.addfile(_info("index.json", tarfile.REGTYPE, 0o644, len(index)), io.BytesIO(index))
    tmp.replace(out_path)
    return str(manifest_desc["digest"])


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        left, sep, right = value.partition("=")
        if not sep or not left.startswith("/"):
            raise SystemExit(f"--{what} wants /path/in/image=VALUE, got {value!r}")
        out[left] = right
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="image name, e.g. unicore.local/pause:3.10.2")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--file", action="append", default=[], help="/path/in/image=local/file")
    parser.add_argument("--symlink", action="append", default=[], help="/path/in/image=target")
    parser.add_argument("--dir", action="append", default=[], help="an (empty) folder in the image")
    parser.add_argument("--entrypoint", nargs="*", default=[])
    parser.add_argument("--cmd", nargs="*", default=[])
    parser.add_argument("--user", default="")
    args = parser.parse_args(argv)
    spec = ImageSpec(
        name=args.name,
        files={k: Path(v) for k, v in _pairs(args.file, "file").items()},
        symlinks=_pairs(args.symlink, "symlink"),
        dirs=tuple(args.dir),
        entrypoint=list(args.entrypoint),
        cmd=list(args.cmd),
        user=args.user,
    )
    print(write_archive(spec, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
