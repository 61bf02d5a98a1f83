"""The project's own containerd (Debian's binary) with its own config, root, state and socket: the real node's
container runtime, and a one-shot ``ctr run`` for tests.

``ContainerdRuntime(state_dir)`` keeps everything it makes under two folders: ``state_dir`` (config, socket,
containerd's state, runc's state, ctr's FIFOs, the log; ephemeral) and ``root_dir`` (images and snapshots; may
persist, e.g. under the cache, so imports are not repeated). One containerd per root: they lock it.
The CRI plugin runs with the cgroupfs driver and ``restrict_oom_score_adj`` (a process may not lower its OOM score
on the VMs this runs on). ``stop()`` kills every task in every namespace, stops containerd and its shims, and
unmounts what is mounted under the two folders. The config is ``render_config`` (pure), see docs/control-plane.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unicore_devcluster.containerd_host import (
    cgroup_mounts,
    host_can_run_containers,
    mounts_under,
    normalized_ref,
    render_config,
    user_ids,
)
from unicore_devcluster.log import logger
from unicore_devcluster.procs import Child, alive, spawn

__all__ = ["DEFAULT_SANDBOX_IMAGE", "ContainerdRuntime", "ContainerdError", "host_can_run_containers", "render_config"]

DEFAULT_SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; containerd adds ".ttrpc" for its second socket


class ContainerdError(RuntimeError):
    """containerd did not start, or a ctr command failed (the message holds its output or the log's tail)."""


class ContainerdRuntime:
    """containerd under ``state_dir`` (socket ``state_dir/containerd.sock``) and ``root_dir``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        root_dir: Path | None = None,
        sandbox_image: str = DEFAULT_SANDBOX_IMAGE,
        cni_bin_dir: Path = Path("/usr/lib/cni"),
        cni_conf_dir: Path | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.root_dir = Path(root_dir).absolute() if root_dir else self.state_dir / "root"
        self.sandbox_image = sandbox_image
        self.cni_bin_dir = Path(cni_bin_dir)
        self.cni_conf_dir = Path(cni_conf_dir).absolute() if cni_conf_dir else self.state_dir / "cni" / "net.d"
        self.socket = self.state_dir / "containerd.sock"
        self.config_path = self.state_dir / "config.toml"
        self.log_path = self.state_dir / "containerd.log"
        self.runc_root = self.state_dir / "runc"  # runc's state, <runc_root>/<namespace>/<container>
        self.fifo_dir = self.state_dir / "fifo"
        # ctr-run containers get their cgroups under one parent of their own, removed by stop()
        self.cgroup_parent = "unicore-ctr-" + hashlib.sha256(str(self.socket).encode()).hexdigest()[:12]
        self._child: Child | None = None

    # ------------------------------------------------------------------------------------------- lifecycle
    def config_text(self) -> str:
        return render_config(
            root=self.root_dir,
            state=self.state_dir / "state",
            socket=self.socket,
            sandbox_image=self.sandbox_image,
            cni_bin_dir=self.cni_bin_dir,
            cni_conf_dir=self.cni_conf_dir,
            runc_root=self.runc_root,
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start containerd and wait until ``ctr version`` answers and the CRI plugin is up."""
        if len(str(self.socket)) > SOCKET_PATH_MAX:
            raise ContainerdError(
                f"socket path too long for a unix socket ({len(str(self.socket))} > "
                f"{SOCKET_PATH_MAX} characters): {self.socket}; use a shorter state_dir"
            )
        missing = [b for b in ("containerd", "ctr", "runc", "containerd-shim-runc-v2") if not shutil.which(b)]
        if missing:
            raise ContainerdError(f"not installed: {', '.join(missing)} (hack/build-images.sh installs them with apt)")
        if self._child is not None and self._child.running():
            return
        if self._answers():
            raise ContainerdError(f"a containerd already serves {self.socket}")
        for path in (self.state_dir, self.root_dir, self.cni_conf_dir, self.runc_root, self.fifo_dir):
            path.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.config_path.write_text(self.config_text())
        self._child = spawn("containerd", ["containerd", "--config", str(self.config_path)], log_path=self.log_path)
        deadline = time.monotonic() + timeout
        delay = 0.05
        while not self._answers():
            if not self._child.running():
                raise ContainerdError(f"containerd exited ({self._child.popen.returncode}):\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ContainerdError(
                    f"containerd did not answer on {self.socket} in {timeout:.0f} s:\n{self._log_tail()}"
                )
            time.sleep(delay)
            delay = min(0.5, delay * 1.5)
        cri = [line.split() for line in self.ctr("plugins", "ls").stdout.splitlines() if " cri " in f" {line} "]
        if not cri or cri[0][-1] != "ok":
            self.stop()
            raise ContainerdError(f"containerd's CRI plugin did not start ({cri}):\n{self._log_tail()}")
        logger.info("containerd running (pid %d, socket %s)", self._child.pid, self.socket)

    def stop(self) -> None:
        """Kill every task and container, stop containerd and its shims, unmount what is under root/state."""
        if self._answers():
            try:
                self._kill_all_tasks(delete_containers=True)
            except (ContainerdError, subprocess.TimeoutExpired) as exc:  # runc below still removes them
                logger.warning("stopping the tasks through containerd: %s", exc)
        if self._child is not None:
            self._child.stop(grace=10)
            self._child = None
        self._kill_leftovers()
        self._force_delete_runc_containers()
        for point in mounts_under([self.state_dir, self.root_dir]):
            if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(point)], capture_output=True)
        for mount in cgroup_mounts():  # runc removes a container's cgroup, not the parent; leftovers deepest first
            for folder, _, _ in sorted(os.walk(mount / self.cgroup_parent), key=lambda w: -len(w[0])):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        for sock in (self.socket, Path(f"{self.socket}.ttrpc")):
            sock.unlink(missing_ok=True)
        # containerd 1.6's shims always put their sockets in /run/containerd/s and remove the sockets, not the
        # folder; removed only while no shim of any containerd runs (one could be about to create its socket)
        if not _any_shim_running():
            for shared in (Path("/run/containerd/s"), Path("/run/containerd")):
                with contextlib.suppress(OSError):
                    shared.rmdir()

    def __enter__(self) -> ContainerdRuntime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------------- images
    def import_image(self, archive: Path, namespace: str = "k8s.io") -> None:
        """Load a docker/OCI archive (``hack/build-images.sh``) into ``namespace``, unpacked for overlayfs."""
        self.ctr("images", "import", str(archive), namespace=namespace, timeout=600)

    def images(self, namespace: str = "k8s.io") -> list[str]:
        return self.ctr("images", "ls", "-q", namespace=namespace).stdout.split()

    # ------------------------------------------------------------------------------------------ containers
    def run(
        self,
        image: str,
        args: list[str],
        *,
        user: str | None = None,
        read_only: bool = False,
        timeout: float = 60,
        namespace: str = "k8s.io",
        env: Mapping[str, str] | None = None,
        empty_dirs: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``ctr run --rm``: ``args`` replace the image's entrypoint and command (empty: the image's own).

        ``user`` ("uid[:gid]" or a name in the image's /etc/passwd) overrides the image's USER; ``env`` adds to
        the image's environment; ``empty_dirs`` mounts a fresh empty writable folder at each path, as an
        ``emptyDir`` volume does (mode 0777, removed afterwards). Returns ctr's result (the container's exit
        code, stdout and stderr); raises subprocess.TimeoutExpired after killing the container."""
        ref = normalized_ref(image)
        cid = f"unicore-run-{uuid.uuid4().hex[:10]}"
        work = self.state_dir / "runs" / cid
        volumes = []
        for n, dest in enumerate(empty_dirs):
            source = work / "empty" / str(n)
            source.mkdir(parents=True)
            source.chmod(0o777)  # what the kubelet gives an emptyDir
            volumes.append((str(source), dest))
        base = [
            *self._ctr_base(namespace),
            "run",
            "--rm",
            "--fifo-dir",
            str(self.fifo_dir),
            "--runc-root",
            str(self.runc_root),
            "--cgroup",
            f"/{self.cgroup_parent}/{cid}",
        ]
        rootfs = work / "rootfs"
        mounted = False
        try:
            if user is None:
                argv = [*base, *(["--read-only"] if read_only else [])]
                argv += [
                    f for src, dst in volumes for f in ("--mount", f"type=bind,src={src},dst={dst},options=rbind:rw")
                ]
                argv += [f for k, v in (env or {}).items() for f in ("--env", f"{k}={v}")] + [ref, cid, *args]
                return self._run_container(argv, namespace, cid, timeout)
            rootfs.mkdir(parents=True)
            self.ctr("images", "mount", *([] if read_only else ["--rw"]), ref, str(rootfs), namespace=namespace)
            mounted = True
            spec = self._spec(ref, namespace, cid, rootfs, args, user, read_only, env or {})
            spec["mounts"] += [
                {"destination": dst, "type": "bind", "source": src, "options": ["rbind", "rw"]} for src, dst in volumes
            ]
            (work / "spec.json").write_text(json.dumps(spec))
            return self._run_container([*base, "--config", str(work / "spec.json"), cid], namespace, cid, timeout)
        finally:
            if mounted:
                self.ctr("images", "unmount", "--rm", str(rootfs), namespace=namespace, check=False)
            if not mounts_under([work]):  # never delete through a mount that is still there
                shutil.rmtree(work, ignore_errors=True)

    # ----------------------------------------------------------------------------------------------- ctr
    def ctr(
        self, *args: str, namespace: str = "k8s.io", timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """One ``ctr`` command against this containerd; raises ContainerdError when it fails and ``check``."""
        argv = [*self._ctr_base(namespace), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ContainerdError(f"{' '.join(argv[3:])} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def _ctr_base(self, namespace: str) -> list[str]:
        return ["ctr", "--address", str(self.socket), "--namespace", namespace]

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return self.ctr("version", timeout=5, check=False).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _run_container(
        self, argv: list[str], namespace: str, cid: str, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", cid, namespace=namespace, check=False)
            self._wait_stopped(namespace, [cid], timeout=10)
            self.ctr("tasks", "delete", "--force", cid, namespace=namespace, check=False)
            self.ctr("containers", "delete", cid, namespace=namespace, check=False)
            raise

    def _spec(
        self,
        ref: str,
        namespace: str,
        cid: str,
        rootfs: Path,
        args: list[str],
        user: str,
        read_only: bool,
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        """The OCI spec ``ctr run`` would make from the image's config, with ``user`` (ctr 1.6 has no --user)."""
        spec: dict[str, Any] = json.loads(self.ctr("oci", "spec", namespace=namespace).stdout)
        config = self._image_config(ref, namespace)
        variables = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        variables.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        variables.update(env)
        uid, gid = user_ids(user, rootfs)
        spec["process"].update(
            args=args or [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])],
            env=[f"{k}={v}" for k, v in variables.items()],
            cwd=config.get("WorkingDir") or "/",
            user={"uid": uid, "gid": gid},
        )
        spec["root"] = {"path": str(rootfs), "readonly": read_only}
        spec["linux"]["cgroupsPath"] = f"/{self.cgroup_parent}/{cid}"
        return spec

    def _image_config(self, ref: str, namespace: str) -> dict[str, Any]:
        rows = [line.split() for line in self.ctr("images", "ls", namespace=namespace).stdout.splitlines()[1:]]
        digests = [row[2] for row in rows if row and row[0] == ref]
        if not digests:
            raise ContainerdError(f"image {ref} is not in namespace {namespace}")
        doc = json.loads(self.ctr("content", "get", digests[0], namespace=namespace).stdout)
        if "manifests" in doc:  # an index: this machine's platform
            arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
            chosen = [m for m in doc["manifests"] if m.get("platform", {}).get("architecture") == arch]
            doc = json.loads(self.ctr("content", "get", chosen[0]["digest"], namespace=namespace).stdout)
        config = json.loads(self.ctr("content", "get", doc["config"]["digest"], namespace=namespace).stdout)
        return dict(config.get("config") or {})

    # ------------------------------------------------------------------------------------------- teardown
    def _namespaces(self) -> list[str]:
        return self.ctr("namespaces", "ls", "-q", check=False).stdout.split()

    def _tasks(self, namespace: str) -> dict[str, str]:
        rows = self.ctr("tasks", "ls", namespace=namespace, check=False).stdout.splitlines()[1:]
        return {row.split()[0]: row.split()[-1] for row in rows if row.split()}

    def _wait_stopped(self, namespace: str, ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tasks = self._tasks(namespace)
            if all(tasks.get(t, "STOPPED") in ("STOPPED", "UNKNOWN") for t in ids):
                return
            time.sleep(0.05)
        logger.warning("tasks still running after SIGKILL in %s: %s", namespace, ids)

    def _kill_all_tasks(self, *, delete_containers: bool = False) -> None:
        for ns in self._namespaces():
            tasks = list(self._tasks(ns))
            for task in tasks:
                self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, namespace=ns, check=False)
            self._wait_stopped(ns, tasks, timeout=15)
            for task in tasks:
                self.ctr("tasks", "delete", "--force", task, namespace=ns, check=False)
            if delete_containers:
                for cid in self.ctr("containers", "ls", "-q", namespace=ns, check=False).stdout.split():
                    self.ctr("containers", "delete", cid, namespace=ns, check=False)

    def _processes(self) -> dict[str, list[int]]:
        """This runtime's processes by what they are: a containerd started with its config (by this object or
        an earlier one on the same folders), and shims whose command line names its socket."""
        found: dict[str, list[int]] = {"containerd": [], "shim": []}
        config, socket = str(self.config_path).encode(), str(self.socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"containerd") and config in argv:
                found["containerd"].append(int(proc.name))
            elif argv[0].endswith(b"containerd-shim-runc-v2") and socket in argv:
                found["shim"].append(int(proc.name))
        return found

    def _kill_leftovers(self) -> None:
        """A containerd this object did not start (SIGTERM, then SIGKILL), then shims that outlived it."""
        for kind, sig in (("containerd", signal.SIGTERM), ("shim", signal.SIGKILL)):
            pids = self._processes()[kind]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.02)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _force_delete_runc_containers(self) -> None:
        """What runc still knows under this runtime's runc root (containerd was not there to ask)."""
        if not self.runc_root.is_dir():
            return
        for ns_root in self.runc_root.iterdir():
            listed = subprocess.run(["runc", "--root", str(ns_root), "list", "-q"], capture_output=True, text=True)
            for cid in listed.stdout.split():
                logger.warning("deleting leftover container %s/%s with runc", ns_root.name, cid)
                subprocess.run(["runc", "--root", str(ns_root), "delete", "--force", cid], capture_output=True)


def _any_shim_running() -> bool:
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().startswith("containerd-shim"):
                return True
        except OSError:
            continue
    return False
