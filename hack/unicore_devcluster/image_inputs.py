"""What the registry-free images are built from, hashed by content; the images manifest the build writes.

``hack/build-images.sh`` runs this file by path with the system Python (standard library only, so it works before
the venv exists) to learn each image's reference, input hash and archive name::

    python3 hack/unicore_devcluster/image_inputs.py plan [--root REPO]        # shell assignments, one per line
    python3 hack/unicore_devcluster/image_inputs.py manifest IMAGES_DIR       # writes IMAGES_DIR/images.json
    python3 hack/unicore_devcluster/image_inputs.py dockerfile FILE --stage NAME=IMAGE   # a stage replaced

``Dockerfile.agent`` builds the workbench's exec server in a ``golang`` stage; without a registry there is no golang
image, so the build makes that binary on the host (``hack/build-exec-server.sh``) and replaces the stage with an
image holding it (``dockerfile``). Such host-built stages (``HOST_BUILT_STAGES``) do not count as bases.

An input hash covers file contents (and paths and the executable bit), never mtimes: the base hashes the
debootstrap suite/variant/mirror, the recipe version, its setup script (which holds the package list) and the
host's CA bundle; the project images hash their Dockerfile, ``.dockerignore``, the scripts that build their
host-built stages, every build-context file (``git ls-files``: tracked plus untracked-but-not-ignored) and the base
hash; Redis hashes its Containerfile and the base hash; the MCP time server hashes its Containerfile, its pinned
requirements and the base hash. The archive name carries the first 16 hex digits, so a changed input means a new
archive.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

# bump when the base recipe in hack/build-images.sh changes in a way its inputs below do not show
BASE_RECIPE_VERSION = "1"
SUITE = "bookworm"
VARIANT = "minbase"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BASE_SETUP = "hack/images/base-setup.sh"
REDIS_RECIPE = "hack/images/Containerfile.redis"
REDIS_REF = "unicore-redis:7.0-bookworm"  # Debian bookworm ships Redis 7.0; the Containerfile checks it
# a real third-party MCP server for the tests and examples (mcp-server-time behind mcp-proxy)
MCP_TIME_RECIPE = "hack/images/Containerfile.mcp-time"
MCP_TIME_FILES = ("hack/images/mcp-time/proxy-requirements.txt", "hack/images/mcp-time/time-requirements.txt")
MCP_TIME_REF = "unicore-mcp-time:2026.10.19"  # mcp-server-time's version (hack/images/mcp-time/time-requirements.txt)
PROJECT_DOCKERFILES = {"agent": "Dockerfile.agent", "operator": "Dockerfile.operator"}
# what each Dockerfile copies into its build (the .dockerignore lets only these in): the agent image the core and the
# workbench's exec server only
IMAGE_SOURCES = {"agent": ("core", "exec-server"), "operator": ("core", "operator")}
CONTEXT_SOURCES = ("core", "operator", "exec-server")
# stages of a Dockerfile that the registry-free build makes on the host instead (their FROM image is not pulled),
# with the script that builds what the stage would: stage name -> script
HOST_BUILT_STAGES = {"agent": {"exec-server": "hack/build-exec-server.sh"}, "operator": {}}
_IGNORED_PARTS = ("__pycache__", ".egg-info")
MANIFEST = "images.json"
HASH_CHARS = 16


@dataclass(frozen=True)
class ImagePlan:
    """One image: its short name (base, agent, operator, redis, mcptime), reference, input hash and archive file
    name."""

    key: str
    ref: str
    inputs: str

    @property
    def archive(self) -> str:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", self.ref)
        return f"{safe}-{self.inputs[:HASH_CHARS]}.tar"

    @property
    def archive_glob(self) -> str:
        """Matches every archive of this reference, whatever its hash (to prune stale ones)."""
        return self.archive.removesuffix(f"{self.inputs[:HASH_CHARS]}.tar") + "*.tar"


# ------------------------------------------------------------------------------------------------ hashing
def hash_files(root: Path, rel_paths: Iterable[str]) -> str:
    """sha256 over each file's path, executable bit and content, in sorted path order."""
    digest = hashlib.sha256()
    for rel in sorted(set(rel_paths)):
        path = root / rel
        data = path.read_bytes()
        executable = "x" if os.access(path, os.X_OK) else "-"
        digest.update(f"{rel}\0{executable}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def hash_parts(*parts: str | bytes) -> str:
    """sha256 over length-prefixed parts (so ("ab", "c") and ("a", "bc") differ)."""
    digest = hashlib.sha256()
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        digest.update(f"{len(raw)}\0".encode())
        digest.update(raw)
    return digest.hexdigest()


def context_files(root: Path, sources: Sequence[str] = CONTEXT_SOURCES) -> list[str]:
    """The build-context files under ``sources``: git's view (tracked + untracked not ignored), no mtimes.

    Outside a git checkout, every file under them except caches and egg-info."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *sources],
            check=True,
            capture_output=True,
        ).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for src in sources:
            path = root / src
            found = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            files += [p.relative_to(root).as_posix() for p in found]
    # deleted-but-still-tracked files are not in the context; caches never are (.dockerignore)
    return [
        f
        for f in files
        if (root / f).is_file() and not any(part in f for part in _IGNORED_PARTS) and not f.endswith(".pyc")
    ]


def app_version(root: Path) -> str:
    """The chart's appVersion (the images' tag), as hack/ship.mk reads it."""
    for line in (root / "helm/unicore/Chart.yaml").read_text().splitlines():
        match = re.match(r"""^appVersion:\s*["']?([^"'\s#]+)""", line)
        if match:
            return match.group(1)
    raise ValueError("helm/unicore/Chart.yaml has no appVersion")


_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)


def dockerfile_bases(text: str, skip_stages: Iterable[str] = ()) -> list[str]:
    """The external images a Dockerfile's stages start FROM (not its own stage names), but those of the stages named
    in ``skip_stages``."""
    skipped = set(skip_stages)
    stages: set[str] = set()
    bases: list[str] = []
    for line in text.splitlines():
        match = _FROM.match(line)
        if not match:
            continue
        if match.group(1) not in stages and match.group(1) not in bases and match.group(2) not in skipped:
            bases.append(match.group(1))
        if match.group(2):
            stages.add(match.group(2))
    return bases


def replace_stage(text: str, stage: str, image: str) -> str:
    """The Dockerfile ``text`` with stage ``stage`` (its FROM line up to the next FROM) replaced by ``FROM image AS
    stage``: what the stage made must be in that image, at the same paths."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _FROM.match(line)]
    for n, i in enumerate(starts):
        match = _FROM.match(lines[i])
        if match and match.group(2) == stage:
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            while end > i + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
                end -= 1  # the next stage's comments stay
            return "".join([*lines[:i], f"FROM {image} AS {stage}\n", *lines[end:]])
    raise ValueError(f"the Dockerfile has no stage named {stage!r}")


def base_ref(root: Path) -> str:
    """The one base image every Dockerfile (and the Redis recipe) starts from; the local base is tagged so."""
    host_built = {name: HOST_BUILT_STAGES[key] for key, name in PROJECT_DOCKERFILES.items()}
    found = {
        name: dockerfile_bases((root / name).read_text(), host_built.get(name, {}))
        for name in [*PROJECT_DOCKERFILES.values(), REDIS_RECIPE, MCP_TIME_RECIPE]
    }
    refs = {ref for bases in found.values() for ref in bases}
    if len(refs) != 1:
        raise ValueError(f"the Dockerfiles must share one base image to build them without a registry: {found}")
    return refs.pop()


def plan(root: Path, *, mirror: str = DEFAULT_MIRROR, ca_bundle: Path = CA_BUNDLE) -> list[ImagePlan]:
    """Every image in build order (base first) with its input hash."""
    ca = ca_bundle.read_bytes() if ca_bundle.is_file() else b""
    base = ImagePlan(
        "base",
        base_ref(root),
        hash_parts(
            "base",
            BASE_RECIPE_VERSION,
            SUITE,
            VARIANT,
            mirror,
            base_ref(root),
            hash_files(root, [BASE_SETUP]),
            ca,
        ),
    )
    version = app_version(root)
    images = [base]
    for key, dockerfile in PROJECT_DOCKERFILES.items():
        recipe = hash_files(root, [dockerfile, ".dockerignore", *HOST_BUILT_STAGES[key].values()])
        sources = hash_files(root, context_files(root, IMAGE_SOURCES[key]))
        images.append(ImagePlan(key, f"unicore-{key}:{version}", hash_parts(key, recipe, sources, base.inputs)))
    images.append(ImagePlan("redis", REDIS_REF, hash_parts("redis", hash_files(root, [REDIS_RECIPE]), base.inputs)))
    images.append(ImagePlan("mcptime", MCP_TIME_REF,
                            hash_parts("mcptime", hash_files(root, [MCP_TIME_RECIPE, *MCP_TIME_FILES]), base.inputs)))
    return images


# ----------------------------------------------------------------------------------------------- manifest
@dataclass(frozen=True)
class BuiltImage:
    """One entry of ``images.json``: the image reference (as ``ctr`` names it after import) and its archive."""

    key: str
    ref: str
    inputs: str
    archive: Path


def normalized(ref: str) -> str:
    """``unicore-agent:0.1.0`` -> ``docker.io/library/unicore-agent:0.1.0`` (Docker's rule; the name containerd
    stores an imported image under and the kubelet looks up)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if sep else f"docker.io/library/{ref}"


def write_manifest(images_dir: Path, images: Sequence[ImagePlan]) -> Path:
    """Record the archives of ``images`` (all present) in ``images_dir/images.json`` (temp file + rename)."""
    entries = []
    for image in images:
        archive = images_dir / image.archive
        if not archive.is_file():
            raise FileNotFoundError(f"{archive} is missing; the build did not finish")
        entries.append({**asdict(image), "archive": image.archive, "containerd_ref": normalized(image.ref)})
    path = images_dir / MANIFEST
    tmp = path.with_name(f".{MANIFEST}.{os.getpid()}")
    tmp.write_text(json.dumps({"images": entries}, indent=2) + "\n")
    tmp.replace(path)
    return path


def read_manifest(images_dir: Path) -> dict[str, BuiltImage]:
    """The images ``hack/build-images.sh`` built, by key (base, agent, operator, redis, mcptime)."""
    data = json.loads((images_dir / MANIFEST).read_text())
    return {
        e["key"]: BuiltImage(e["key"], e["containerd_ref"], e["inputs"], images_dir / e["archive"])
        for e in data["images"]
    }


# ---------------------------------------------------------------------------------------------------- CLI
def _shell_lines(images: Sequence[ImagePlan]) -> list[str]:
    lines = []
    for image in images:
        prefix = image.key.upper()
        for field, value in (
            ("REF", image.ref),
            ("QREF", normalized(image.ref)),
            ("INPUTS", image.inputs),
            ("ARCHIVE", image.archive),
            ("ARCHIVE_GLOB", image.archive_glob),
        ):
            if not re.fullmatch(r"[A-Za-z0-9._:/*@+-]+", value):
                raise ValueError(f"unsafe value for {prefix}_{field}: {value!r}")
            lines.append(f"{prefix}_{field}='{value}'")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_plan = sub.add_parser(
        "plan", help="print each image's REF, QREF (as stored), INPUTS, ARCHIVE as shell assignments"
    )
    p_plan.add_argument("--save", type=Path, help="also write the plan (JSON) here, for `manifest --plan`")
    p_manifest = sub.add_parser("manifest", help="write IMAGES_DIR/images.json for the planned images")
    p_manifest.add_argument("images_dir", type=Path)
    p_manifest.add_argument("--plan", type=Path, help="the plan the build used (default: plan the tree now)")
    p_dockerfile = sub.add_parser("dockerfile", help="print FILE with each --stage NAME=IMAGE replaced by that image")
    p_dockerfile.add_argument("file", type=Path)
    p_dockerfile.add_argument("--stage", action="append", default=[], metavar="NAME=IMAGE")
    for p in (p_plan, p_manifest):
        p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
        p.add_argument("--mirror", default=os.environ.get("UNICORE_DEBIAN_MIRROR", DEFAULT_MIRROR))
    args = parser.parse_args(argv)
    if args.command == "dockerfile":
        text = args.file.read_text()
        for spec in args.stage:
            stage, _, image = spec.partition("=")
            text = replace_stage(text, stage, image)
        sys.stdout.write(text)
        return 0
    images = plan(args.root, mirror=args.mirror)
    if args.command == "plan":
        if args.save:
            args.save.write_text(json.dumps([asdict(image) for image in images]))
        print("\n".join(_shell_lines(images)))
        return 0
    built = [ImagePlan(**entry) for entry in json.loads(args.plan.read_text())] if args.plan else images
    if built != images:
        print(
            "image_inputs: sources changed during the build; the next build makes images of the new sources",
            file=sys.stderr,
        )
    print(write_manifest(args.images_dir, built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
