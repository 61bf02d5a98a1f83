"""The registry-free images' input hashes (unicore_devcluster.image_inputs), on a small git repository.

An image is rebuilt exactly when its hash changes: content, paths and the executable bit count, mtimes never;
a change to the base reaches every image built on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from unicore_devcluster import image_inputs
from unicore_devcluster.image_inputs import ImagePlan, normalized, plan, read_manifest, write_manifest

ROOT = Path(__file__).resolve().parents[2]
BASE = "python:3.11.11-slim-bookworm"
FILES = {
    "Dockerfile.agent": (f"FROM golang:1.26-bookworm AS exec-server\nRUN go build -o /unicore-exec .\n\n# builder\n"
                         f'FROM {BASE} AS builder\nFROM {BASE}\nCOPY --from=exec-server /unicore-exec /x\n'
                         'ENTRYPOINT ["unicore-turn"]\n'),
    "Dockerfile.operator": f"FROM {BASE} AS builder\nFROM builder AS x\nFROM {BASE}\n",
    ".dockerignore": "*\n!core/\n!exec-server/\n",
    "exec-server/main.go": "package main\n",
    "hack/build-exec-server.sh": "#!/bin/sh\ngo build\n",
    ".gitignore": "__pycache__/\n*.pyc\n*.egg-info/\n",
    "core/pyproject.toml": "[project]\nname = 'unicore'\n",
    "README.md": "# readme\n",
    "core/unicore/turn/agent_turn.py": "print('turn')\n",
    "operator/unicore_operator/main.py": "print('operator')\n",
    "helm/unicore/Chart.yaml": 'name: unicore\nversion: 0.1.0\nappVersion: "1.2.3"\n',
    "hack/images/base-setup.sh": "#!/bin/sh\napt-get install python3\n",
    "hack/images/Containerfile.redis": f"FROM {BASE}\nRUN apt-get install redis-server\n",
    "hack/images/Containerfile.mcp-time": f"FROM {BASE}\nCOPY mcp-time/ /opt/requirements/\n",
    "hack/images/mcp-time/proxy-requirements.txt": "mcp-proxy==0.13.0\n",
    "hack/images/mcp-time/time-requirements.txt": "mcp-server-time==2026.10.19\n",
    "tests/test_x.py": "def test(): pass\n",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    return root


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.crt"
    path.write_text("-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n")
    return path


def hashes(root: Path, ca: Path) -> dict[str, str]:
    return {image.key: image.inputs for image in plan(root, ca_bundle=ca)}


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {key for key in before if before[key] != after[key]}


def test_plan_names_every_image_from_the_chart_and_the_dockerfiles(repo: Path, ca: Path) -> None:
    images = {image.key: image for image in plan(repo, ca_bundle=ca)}
    assert list(images) == ["base", "agent", "operator", "redis", "mcptime"]
    assert images["base"].ref == BASE
    assert images["agent"].ref == "unicore-agent:1.2.3" and images["operator"].ref == "unicore-operator:1.2.3"
    assert images["redis"].ref == image_inputs.REDIS_REF
    assert images["mcptime"].ref == image_inputs.MCP_TIME_REF
    agent = images["agent"]
    assert agent.archive == f"unicore-agent-1.2.3-{agent.inputs[:16]}.tar"
    assert Path(agent.archive).match(agent.archive_glob) and not Path(images["base"].archive).match(agent.archive_glob)
    assert len({image.inputs for image in images.values()}) == 5


def test_an_mtime_alone_changes_nothing(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    for path in repo.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            os.utime(path, (1_000_000, 1_000_000))
    assert hashes(repo, ca) == before


def test_a_source_file_changes_the_two_project_images_only(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    (repo / "core/unicore/turn/agent_turn.py").write_text("print('turn 2')\n")
    assert changed(before, hashes(repo, ca)) == {"agent", "operator"}


def test_a_renamed_file_and_the_executable_bit_count(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    (repo / "operator/unicore_operator/main.py").rename(repo / "operator/unicore_operator/main2.py")
    renamed = hashes(repo, ca)
    assert changed(before, renamed) == {"operator"}  # the agent image installs the core only
    (repo / "operator/unicore_operator/main2.py").chmod(0o755)
    assert changed(renamed, hashes(repo, ca)) == {"operator"}
    (repo / "core/unicore/turn/agent_turn.py").chmod(0o755)
    assert changed(renamed, hashes(repo, ca)) == {"agent", "operator"}


def test_untracked_sources_count_and_ignored_files_do_not(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    (repo / "core/unicore/__pycache__").mkdir()
    (repo / "core/unicore/__pycache__/turn.cpython-311.pyc").write_bytes(b"\0bytecode")
    (repo / "core/unicore.egg-info").mkdir()
    (repo / "core/unicore.egg-info/PKG-INFO").write_text("x")
    (repo / "tests/test_y.py").write_text("outside the build context")
    assert hashes(repo, ca) == before
    (repo / "core/unicore/new_module.py").write_text("x = 1\n")  # untracked, not ignored: in the context
    assert changed(before, hashes(repo, ca)) == {"agent", "operator"}


@pytest.mark.parametrize("path", ["exec-server/main.go", "exec-server/go.mod", "hack/build-exec-server.sh"])
def test_the_exec_server_and_its_build_script_change_the_agent_image_only(repo: Path, ca: Path, path: str) -> None:
    before = hashes(repo, ca)
    (repo / path).write_text((repo / path).read_text() + "// changed\n" if (repo / path).exists() else "module x\n")
    assert changed(before, hashes(repo, ca)) == {"agent"}


def test_a_dockerfile_changes_its_own_image_only(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    (repo / "Dockerfile.agent").write_text(FILES["Dockerfile.agent"] + "LABEL x=y\n")
    assert changed(before, hashes(repo, ca)) == {"agent"}
    middle = hashes(repo, ca)
    (repo / "hack/images/Containerfile.redis").write_text(FILES["hack/images/Containerfile.redis"] + "USER 999\n")
    assert changed(middle, hashes(repo, ca)) == {"redis"}
    last = hashes(repo, ca)
    (repo / "hack/images/mcp-time/time-requirements.txt").write_text("mcp-server-time==2026.10.20\n")
    assert changed(last, hashes(repo, ca)) == {"mcptime"}


@pytest.mark.parametrize("what", ["setup script", "CA bundle", "mirror"])
def test_a_base_input_changes_every_image(repo: Path, ca: Path, what: str) -> None:
    before = hashes(repo, ca)
    if what == "setup script":
        (repo / "hack/images/base-setup.sh").write_text(FILES["hack/images/base-setup.sh"] + "apt-get install tzdata\n")
        after = hashes(repo, ca)
    elif what == "CA bundle":
        ca.write_text(ca.read_text() + "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n")
        after = hashes(repo, ca)
    else:
        after = {image.key: image.inputs for image in plan(repo, ca_bundle=ca, mirror="http://mirror.example/debian")}
    assert changed(before, after) == {"base", "agent", "operator", "redis", "mcptime"}


def test_a_new_app_version_renames_the_project_images(repo: Path, ca: Path) -> None:
    (repo / "helm/unicore/Chart.yaml").write_text("name: unicore\nappVersion: 2.0.0 # released\n")
    refs = {image.key: image.ref for image in plan(repo, ca_bundle=ca)}
    assert refs["agent"] == "unicore-agent:2.0.0" and refs["operator"] == "unicore-operator:2.0.0"


def test_dockerfiles_on_different_bases_are_refused(repo: Path, ca: Path) -> None:
    (repo / "Dockerfile.operator").write_text("FROM python:3.12-slim\n")
    with pytest.raises(ValueError, match="share one base image"):
        plan(repo, ca_bundle=ca)


def test_outside_a_git_checkout_the_files_are_walked(repo: Path, ca: Path) -> None:
    before = hashes(repo, ca)
    shutil.rmtree(repo / ".git")
    assert hashes(repo, ca) == before
    (repo / "core/unicore/__pycache__").mkdir()
    (repo / "core/unicore/__pycache__/turn.cpython-311.pyc").write_bytes(b"\0")
    assert hashes(repo, ca) == before


def test_the_repository_plan_matches_its_dockerfiles_and_chart() -> None:
    images = {image.key: image for image in plan(ROOT)}
    version = image_inputs.app_version(ROOT)
    for key, name in image_inputs.PROJECT_DOCKERFILES.items():
        text = (ROOT / name).read_text()
        assert image_inputs.dockerfile_bases(text, image_inputs.HOST_BUILT_STAGES[key]) == [images["base"].ref]
        for stage, script in image_inputs.HOST_BUILT_STAGES[key].items():
            assert f" AS {stage}\n" in text and (ROOT / script).is_file()
    assert images["agent"].ref == f"unicore-agent:{version}"
    assert images["operator"].ref == f"unicore-operator:{version}"


def test_a_host_built_stage_is_replaced_by_an_image_and_the_rest_stays() -> None:
    text = (ROOT / "Dockerfile.agent").read_text()
    replaced = image_inputs.replace_stage(text, "exec-server", "localhost/unicore-exec-server:abc")
    assert image_inputs.dockerfile_bases(text)[0].startswith("golang:")  # the stage Docker users build
    assert image_inputs.dockerfile_bases(replaced) == ["localhost/unicore-exec-server:abc", BASE]
    assert "golang" not in replaced.split("AS exec-server")[1] and "go build" not in replaced
    kept = [line for line in text.splitlines(keepends=True) if line not in replaced.splitlines(keepends=True)]
    assert all("exec-server" in line or line.startswith(("WORKDIR", "RUN CGO_ENABLED")) for line in kept), kept
    assert "COPY --from=exec-server /unicore-exec /usr/local/bin/unicore-exec\n" in replaced
    with pytest.raises(ValueError, match="no stage named 'nope'"):
        image_inputs.replace_stage(text, "nope", "x")


def test_the_script_reads_the_plan_as_shell_assignments(repo: Path) -> None:
    script = Path(image_inputs.__file__)
    out = subprocess.run(
        ["bash", "-c", f'eval "$(python3 {script} plan --root {repo})"; echo "$AGENT_REF $AGENT_QREF $REDIS_ARCHIVE"'],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert out[:2] == ["unicore-agent:1.2.3", "docker.io/library/unicore-agent:1.2.3"]
    assert out[2].startswith("unicore-redis-") and out[2].endswith(".tar")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("unicore-agent:0.1.0", "docker.io/library/unicore-agent:0.1.0"),
        ("team/img:1", "docker.io/team/img:1"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
        ("localhost/x:1", "localhost/x:1"),
    ],
)
def test_references_normalize_as_dockers(ref: str, expected: str) -> None:
    assert normalized(ref) == expected


def test_the_manifest_records_finished_archives_only(tmp_path: Path) -> None:
    images = [ImagePlan("base", BASE, "a" * 64), ImagePlan("agent", "unicore-agent:1", "b" * 64)]
    (tmp_path / images[0].archive).write_bytes(b"tar")
    with pytest.raises(FileNotFoundError):
        write_manifest(tmp_path, images)
    (tmp_path / images[1].archive).write_bytes(b"tar")
    write_manifest(tmp_path, images)
    built = read_manifest(tmp_path)
    assert built["agent"].ref == "docker.io/library/unicore-agent:1"
    assert built["agent"].archive == tmp_path / images[1].archive and built["base"].inputs == "a" * 64
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
