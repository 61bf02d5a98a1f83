"""Tear-down of the real node's host state, from the state folder alone: what ``RealNode.stop()`` ends with, and
``cleanup_leftovers`` after a supervisor that was killed (``unicore-devcluster down``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from unicore_devcluster import node_host as host
from unicore_devcluster.binaries import find_node_bin_dir
from unicore_devcluster.log import logger
from unicore_devcluster.node_config import BRIDGE, CGROUP_ROOT, RUNNING_MARKER


def pids_naming(text: str) -> list[int]:
    """Pids of the processes whose command line contains ``text``."""
    needle = text.encode()
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    out.append(int(proc.name))
            except OSError:
                pass
    return out


def _kill_by_path(state_dir: Path) -> None:
    """SIGKILL every process whose command line names the state folder (kubelet, kube-proxy, CoreDNS,
    containerd, its shims), e.g. after a supervisor that was killed."""
    for pid in pids_naming(f"{state_dir}/"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_host_state(state_dir: Path, bin_dir: Path, ip_forward_before: str) -> None:
    _kill_by_path(state_dir)
    left = host.remove_cgroup_root(CGROUP_ROOT)
    if left:
        logger.warning("cgroups that could not be removed: %s", left)
    stuck = host.unmount_under(state_dir)
    if stuck:
        logger.warning("mounts left under %s: %s", state_dir, stuck)
    host.delete_link(BRIDGE)
    proxy = bin_dir / "kube-proxy"
    if proxy.exists():
        subprocess.run([str(proxy), "--cleanup", "--v=0"], capture_output=True, timeout=60, check=False)  # noqa: S603
    host.remove_chains()
    if not ip_forward_before:
        try:
            ip_forward_before = (state_dir / "config" / "ip_forward.before").read_text().strip()
        except OSError:
            ip_forward_before = ""
    host.write_ip_forward(ip_forward_before)
    for sub in ("containerd-root", "kubelet", "cni"):  # containerd/ (its config and log) stays, as logs/
        shutil.rmtree(state_dir / sub, ignore_errors=True)


def cleanup_leftovers(state_dir: str | os.PathLike[str], bin_dir: str | os.PathLike[str] | None = None) -> None:
    """Remove what a real node that was not stopped left in ``state_dir`` and on the host: its processes, then
    (with containerd started once more on the same folders) every pod sandbox over CRI, then cgroups, mounts,
    bridge, iptables chains. Nothing to do unless the folder holds a node that was started and not stopped."""
    state = Path(state_dir).resolve()
    if not (state / "config" / RUNNING_MARKER).exists():
        return
    bins = Path(bin_dir) if bin_dir else find_node_bin_dir()
    _kill_by_path(state)
    if (state / "containerd-root").is_dir():
        try:
            from unicore_devcluster.containerd import ContainerdRuntime

            runtime = ContainerdRuntime(
                state / "containerd", root_dir=state / "containerd-root", cni_conf_dir=state / "cni" / "net.d"
            )
            runtime.start(timeout=30)
            try:
                subprocess.run(  # noqa: S603 - our own tool
                    [str(bins / "unicore-cri"), "--endpoint", f"unix://{runtime.socket}", "remove-all"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
            finally:
                runtime.stop()
        except Exception as exc:  # noqa: BLE001 - the rest of the clean-up still runs
            logger.warning("could not remove the old pod sandboxes over CRI: %s", exc)
    remove_host_state(state, bins, "")
    (state / "config" / RUNNING_MARKER).unlink(missing_ok=True)
