"""The project's images in real containers: built by hack/build-images.sh (no Docker, no registry), imported
once per run into the real node's containerd (the session's ``real_node_session``, which the real node's tests use
too; unicore_devcluster.containerd), run there with runc outside any pod.

- Each image holds its own distributions only: the agent image the core (no kopf, prometheus-client, operator,
  client or web UI files), the operator image the core and the operator.
- `unicore-turn --help` and `unicore-operator --help` exit 0 with their usage, as uid 65532 on a read-only root
  filesystem, both with the image's own USER and with the user set explicitly.
- The Redis image runs the chart's bundled Redis exactly as helm/unicore renders it (command, args, password
  env, uid/gid, read-only root, the volume mount points) and its readiness and liveness probes pass (PING).
- A second build reuses every archive; ContainerdRuntime.stop() leaves nothing running or mounted (on a containerd
  of its own, with the node's small busybox image).

Needs root and a host that can run containers (unicore_devcluster.containerd.host_can_run_containers). Where it
cannot, these tests FAIL with the one-line reason, unless UNICORE_NO_CONTAINERS=1 says to skip them.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from unicore_devcluster.containerd import ContainerdRuntime, host_can_run_containers
from unicore_devcluster.containerd_host import cgroup_mounts, mounts_under
from unicore_devcluster.image_inputs import BuiltImage, plan, read_manifest

pytestmark = [pytest.mark.node, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "build-images.sh"
OPT_OUT = "UNICORE_NO_CONTAINERS"
NON_ROOT = "65532"
ENTRYPOINTS = {"agent": "unicore-turn", "operator": "unicore-operator"}


def build_images() -> tuple[Path, float]:
    start = time.monotonic()
    proc = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, text=True, timeout=1700)  # log: stderr
    assert proc.returncode == 0, f"{BUILD} failed ({proc.returncode}); its log is in the captured stderr"
    return Path(proc.stdout.strip().splitlines()[-1]), time.monotonic() - start


@pytest.fixture(scope="module")
def images() -> dict[str, BuiltImage]:
    reason = host_can_run_containers()
    if reason:
        if os.environ.get(OPT_OUT) == "1":
            pytest.skip(f"this host cannot run containers: {reason} ({OPT_OUT}=1)")
        pytest.fail(f"this host cannot run containers: {reason} (set {OPT_OUT}=1 to skip these tests)")
    folder, _ = build_images()
    return read_manifest(folder)


def short_tmp(prefix: str) -> Path:
    """A short folder under /tmp (a unix socket path has at most 108 bytes; pytest's tmp_path can be longer)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def leftovers(runtime: ContainerdRuntime, folder: Path) -> list[str]:
    """Processes naming the runtime's socket, mounts under its folder, its ctr-run cgroups, runc state."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(runtime.socket).encode() in (proc / "cmdline").read_bytes():
                found.append(f"process {proc.name}: {(proc / 'cmdline').read_bytes()!r}")
        except OSError:
            continue
    found += [f"mount {point}" for point in mounts_under([folder])]
    found += [f"cgroup {m / runtime.cgroup_parent}" for m in cgroup_mounts() if (m / runtime.cgroup_parent).exists()]
    for ns_root in runtime.runc_root.glob("*"):
        found += [f"runc state {state}" for state in ns_root.iterdir()]
    return found


@pytest.fixture(scope="module")
def runtime(images: dict[str, BuiltImage], real_node_session: Any) -> ContainerdRuntime:
    """The real node's containerd, with the project's images in it (imported once, when the real node started)."""
    node = real_node_session.cluster().real_node
    assert node is not None
    return node.runtime


def test_the_archives_are_named_by_their_input_hashes(images: dict[str, BuiltImage]) -> None:
    expected = {image.key: image for image in plan(ROOT)}
    assert set(images) == {"base", "agent", "operator", "redis", "mcptime"}
    for built in images.values():
        assert built.archive.is_file(), built.archive
        assert built.archive.name.endswith(f"-{built.inputs[:16]}.tar"), built.archive.name
    # the base and Redis depend on hack/images and the CA bundle only; the project images also on the sources,
    # which may have changed since the build on a shared working tree
    for key in ("base", "redis", "mcptime"):
        assert images[key].inputs == expected[key].inputs, f"{key}: the manifest is not of this source tree"


def test_a_second_build_reuses_what_did_not_change(runtime: ContainerdRuntime, images: dict[str, BuiltImage]) -> None:
    """(``runtime`` first: its imports need the archives this build may replace.)"""
    before = {key: image.archive.stat().st_mtime_ns for key, image in images.items()}
    folder, seconds = build_images()
    after = read_manifest(folder)
    for key, image in after.items():
        if image.inputs == images[key].inputs:
            assert image.archive.stat().st_mtime_ns == before[key], f"{key} was rebuilt with unchanged inputs"
        else:  # sources edited meanwhile: a new archive by the new hash
            assert image.archive != images[key].archive and key in ("agent", "operator"), key
    if all(after[key].inputs == images[key].inputs for key in after):
        assert seconds < 60, f"a build with nothing to do took {seconds:.0f} s"


def test_the_images_are_in_containerd(runtime: ContainerdRuntime, real_node_session: Any) -> None:
    listed = runtime.images()
    for key in ("agent", "operator", "redis"):
        assert real_node_session.images[key].ref in listed


@pytest.mark.parametrize("user", [None, f"{NON_ROOT}:{NON_ROOT}"], ids=["image-user", "explicit-user"])
@pytest.mark.parametrize("key", ["agent", "operator"])
def test_help_runs_as_non_root_on_a_read_only_root(
    runtime: ContainerdRuntime, images: dict[str, BuiltImage], key: str, user: str | None
) -> None:
    entrypoint = ENTRYPOINTS[key]
    proc = runtime.run(images[key].ref, [entrypoint, "--help"], user=user, read_only=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"usage: {entrypoint}"), proc.stdout
    probe = runtime.run(
        images[key].ref,
        [
            "sh",
            "-c",
            f"id -u; id -g; touch ./probe /tmp/probe 2>&1; for c in python pip {entrypoint}; do command -v $c; done",
        ],
        user=user,
        read_only=True,
    )
    lines = probe.stdout.splitlines()
    assert lines[:2] == [NON_ROOT, NON_ROOT], probe.stdout + probe.stderr
    assert sum("Read-only file system" in line for line in lines) == 2, probe.stdout
    assert lines[-1] == f"/usr/local/bin/{entrypoint}", probe.stdout


# What each image's Python may import, and what it must not: the agent image installs the core only (distribution
# `unicore`), the operator image the core and the operator. Each name is checked with importlib.util.find_spec.
# (cryptography is in both: the MCP SDK requires pyjwt[crypto]; the operator also requires it directly.)
IMAGE_MODULES = {
    "agent": {"present": ["unicore", "unicore.turn.entry", "redis", "mcp", "kubernetes"],
              "absent": ["kopf", "prometheus_client", "unicore_operator", "unicore_client", "unicore_devcluster"]},
    "operator": {"present": ["unicore", "unicore_operator.main", "kopf", "prometheus_client", "cryptography"],
                 "absent": ["unicore_client", "unicore_devcluster"]},
}
FIND_MODULES = (
    "import importlib.util, json, sys\n"
    "print(json.dumps({name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}))"
)


@pytest.mark.parametrize("key", ["agent", "operator"])
def test_each_image_holds_its_own_distributions_only(runtime: ContainerdRuntime, images: dict[str, BuiltImage],
                                                     key: str) -> None:
    """The packaging rule in the built image itself: no operator or client code or dependencies in a turn pod, no
    client in the operator; and no web UI files (the client's ``ui/static``) anywhere in either image."""
    import json

    names = IMAGE_MODULES[key]["present"] + IMAGE_MODULES[key]["absent"]
    proc = runtime.run(images[key].ref, ["python", "-c", FIND_MODULES, *names], read_only=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [name for name in IMAGE_MODULES[key]["present"] if not found[name]] == [], proc.stdout
    assert [name for name in IMAGE_MODULES[key]["absent"] if found[name]] == [], proc.stdout
    ui = runtime.run(images[key].ref, ["sh", "-c", "find / -xdev -path '*/ui/static/*' -name '*.js' 2>/dev/null; true"],
                     read_only=True)
    assert ui.stdout.strip() == "", f"web UI files in the {key} image: {ui.stdout}"


def redis_ref() -> tuple[str, str]:
    """The Redis image's repository and tag as the chart's values name it."""
    ref = next(image.ref for image in plan(ROOT) if image.key == "redis")
    name, _, tag = ref.rpartition(":")
    return name, tag


def chart_redis_container() -> tuple[dict[str, Any], dict[str, Any]]:
    """The bundled Redis StatefulSet's pod spec and container, rendered by helm with the local image."""
    from tests.cluster.test_chart_render import one, render

    name, tag = redis_ref()
    objs = render("--set", f"redis.image.repository={name}", "--set", f"redis.image.tag={tag}")
    pod = one(objs, "StatefulSet", "unicore-redis")["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_redis_runs_as_the_chart_runs_it_and_answers_its_probes(runtime: ContainerdRuntime) -> None:
    pod, container = chart_redis_container()
    image = ":".join(redis_ref())
    assert container["image"] == image
    security = {**pod["securityContext"], **container["securityContext"]}
    password = secrets.token_hex(8)
    env = {e["name"]: password for e in container["env"]}  # both come from the chart's Secret
    assert set(env) == {"REDIS_PASSWORD", "REDISCLI_AUTH"}
    server = shlex.join([*container["command"], *container["args"]])
    ready = shlex.join(container["readinessProbe"]["exec"]["command"])
    live = shlex.join(container["livenessProbe"]["exec"]["command"])
    # the server as the chart starts it; its probes as the kubelet runs them, polled until ready (15 s at most)
    script = f"""
{server} &
n=0
until {ready}; do n=$((n + 1)); [ "$n" -lt 300 ] || {{ echo "not ready in 15 s" >&2; exit 3; }}; sleep 0.05; done
echo READY
echo "LIVE $({live})"
echo "WRONG $(redis-cli --no-auth-warning -a wrong ping 2>&1 | tr '\n' ' ')"
echo "CONFIG $(redis-cli config get dir appendonly | tr '\n' ' ')"
redis-cli shutdown nosave >/dev/null 2>&1
wait
"""
    proc = runtime.run(
        image,
        ["sh", "-c", script],
        user=f"{security['runAsUser']}:{security['runAsGroup']}",
        read_only=bool(security["readOnlyRootFilesystem"]),
        env=env,
        empty_dirs=[m["mountPath"] for m in container["volumeMounts"]],
        timeout=60,
    )
    out = {line.partition(" ")[0]: line.partition(" ")[2].strip() for line in proc.stdout.splitlines()}
    assert "READY" in out, proc.stdout + proc.stderr
    assert out["LIVE"] == "PONG", proc.stdout
    assert "WRONGPASS" in out["WRONG"], proc.stdout  # the password from the env is the one it requires
    pairs = out["CONFIG"].split()
    assert dict(zip(pairs[::2], pairs[1::2], strict=True)) == {"dir": "/data", "appendonly": "yes"}, proc.stdout
    own = runtime.run(image, ["id", "-u"], read_only=True)
    assert own.stdout.strip() == str(security["runAsUser"]), "the image's own USER is not the chart's runAsUser"


def busybox_image() -> tuple[Path, str]:
    """The real node's busybox archive (hack/build-node.sh) and its ref: a few MB, quick to import."""
    from unicore_devcluster.binaries import find_node_bin_dir

    folder = find_node_bin_dir() / "images"
    return folder / "busybox.tar", (folder / "busybox.name").read_text().strip()


def running_container(rt: ContainerdRuntime, ref: str) -> tuple[threading.Thread, list[Any]]:
    """``sleep 600`` in a container, run by a thread; returns once its task runs."""
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(rt.run(ref, ["sleep", "600"], timeout=120))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            results.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 30
    while "RUNNING" not in rt.ctr("tasks", "ls").stdout:
        assert time.monotonic() < deadline, f"the container never ran: {results}"
        time.sleep(0.05)
    return runner, results


@pytest.mark.parametrize("how", ["same-object", "another-object", "containerd-killed"])
def test_stop_kills_running_containers_and_leaves_nothing(how: str) -> None:
    """stop() from the object that started containerd; from another object on the same folders (clean-up after
    a supervisor died); and after containerd itself was SIGKILLed (its shims and containers still run)."""
    folder = short_tmp("uc-ctd-stop-")
    rt = ContainerdRuntime(folder / "run", root_dir=folder / "root")
    rt.start()
    try:
        archive, ref = busybox_image()
        rt.import_image(archive)
        runner, results = running_container(rt, ref)
        assert mounts_under([folder]), "a running container has its rootfs mounted under the root folder"
        if how == "containerd-killed":
            containerd = rt._processes()["containerd"]
            assert containerd, "containerd's process is not found by its config path"
            os.kill(containerd[0], signal.SIGKILL)
        if how != "same-object":
            ContainerdRuntime(folder / "run", root_dir=folder / "root").stop()
    finally:
        rt.stop()
        if not mounts_under([folder]):
            shutil.rmtree(folder / "root", ignore_errors=True)  # the images; the rest is checked below
    runner.join(timeout=30)
    assert not runner.is_alive() and results, "ctr run did not return"
    assert not isinstance(results[0], subprocess.CompletedProcess) or results[0].returncode != 0, results
    assert leftovers(rt, folder) == []
    assert not rt.socket.exists()
    rt.stop()  # a second stop is harmless
    shutil.rmtree(folder)
