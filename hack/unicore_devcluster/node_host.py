"""The real node's footprint on the host, made and removed: the node IP, cgroups, iptables chains, the bridge,
mounts, ``net.ipv4.ip_forward``; and why this host cannot run a real node (``unavailable_reason``).

Every remover works from what is on the host now (not from memory of what was made), so the same calls clean up
after a supervisor that was SIGKILLed (``unicore-devcluster down``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from unicore_devcluster.log import logger
from unicore_devcluster.node_config import BRIDGE

CGROUP_V1 = Path("/sys/fs/cgroup")
ISOLATION_CHAIN = "UNICORE-NODE"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def _run(argv: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)  # noqa: S603 - fixed tools


# ------------------------------------------------------------------------------------------------ node IP
def node_ip() -> str | None:
    """The IPv4 address of the interface holding the default route (else any global address that is not the
    node's own bridge): the kubelet's ``--node-ip`` and the API server's advertised address. Never loopback."""
    try:
        routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "default"], check=True).stdout or "[]")
        addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"], check=True).stdout or "[]")
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    devices = {r["dev"] for r in routes if r.get("dev")}
    candidates: list[tuple[int, str]] = []
    for iface in addrs:
        if iface.get("ifname") == BRIDGE:
            continue
        for info in iface.get("addr_info", []):
            ip = info.get("local")
            if ip and info.get("scope") == "global" and not ipaddress.ip_address(ip).is_loopback:
                candidates.append((0 if iface.get("ifname") in devices else 1, ip))
    return min(candidates)[1] if candidates else None


# ------------------------------------------------------------------------------------------------ can it run?
def _cgroup_mounts(types: tuple[str, ...]) -> list[Path]:
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] in types:
            mount_point = Path(left.split()[4])
            if mount_point.parent == CGROUP_V1:
                out.append(mount_point)
    return sorted(out)


def cgroup_v1_controllers() -> list[Path]:
    """The mounted cgroup v1 hierarchies (``/sys/fs/cgroup/<controller>``); empty on a cgroup v2 host."""
    return _cgroup_mounts(("cgroup",))


def cgroup_hierarchies() -> list[Path]:
    """Every hierarchy the kubelet's cgroups may be made in: the v1 controllers and, on a hybrid host, the
    unified (v2) one at ``/sys/fs/cgroup/unified``, where runc mirrors each cgroup."""
    return _cgroup_mounts(("cgroup", "cgroup2"))


def running_kubelets() -> list[int]:
    """Pids of kubelet processes on this host (one real node per host: ports, iptables chains, cgroups)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if os.path.basename(argv0.decode(errors="replace")) == "kubelet":
            pids.append(int(proc.name))
    return pids


def unavailable_reason() -> str | None:
    """Why this host cannot run the real node, in one line; None when it can.

    Needs root, Linux, cgroup v1 controllers mounted (the kubelet runs with the cgroupfs driver; a cgroup v2 host
    is not supported by this setup yet), iptables, the CNI plugins, containerd (the containerd module's own
    check) and no other kubelet on the host.
    """
    if not hasattr(os, "geteuid") or os.uname().sysname != "Linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (the kubelet, containerd and iptables need root)"
    if not cgroup_v1_controllers():
        return "no cgroup v1 controllers mounted under /sys/fs/cgroup (only cgroup v1 + cgroupfs is set up)"
    try:
        from unicore_devcluster.containerd import host_can_run_containers
    except ImportError:
        return "unicore_devcluster.containerd is not there (containerd runtime module missing)"
    reason = host_can_run_containers()
    if reason:
        return reason
    for tool in ("iptables", "ip6tables", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not found (hack/build-node.sh installs it)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "/usr/lib/cni/bridge not found (Debian's containernetworking-plugins; hack/build-node.sh installs it)"
    if node_ip() is None:
        return "no non-loopback IPv4 address for the node"
    others = running_kubelets()
    if others:
        return f"a kubelet already runs on this host (pid {others[0]}): one real node per host"
    return None


# ------------------------------------------------------------------------------------------------ cgroups
def make_cgroup_root(name: str) -> None:
    """Create ``/<name>`` in every v1 hierarchy (the kubelet's ``cgroupRoot`` must exist), cpuset seeded from the
    root cgroup so processes may join it."""
    for hierarchy in cgroup_v1_controllers():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for key in ("cpuset.cpus", "cpuset.mems"):
                if not (path / key).read_text().strip():
                    (path / key).write_text((hierarchy / key).read_text())


def cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name
        if root.is_dir():
            for procs in root.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
    return pids


def remove_cgroup_root(name: str, timeout: float = 10.0) -> list[str]:
    """SIGKILL every process left in ``/<name>`` and remove the cgroups, deepest first; return what could not
    be removed."""
    deadline = time.monotonic() + timeout
    while True:
        pids = cgroup_pids(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left: list[str] = []
        for hierarchy in cgroup_hierarchies():
            root = hierarchy / name
            if not root.is_dir():
                continue
            for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    path.rmdir()
                except OSError:
                    left.append(str(path))
            try:
                root.rmdir()
            except OSError:
                left.append(str(root))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------------ iptables
def _chains(tool: str, table: str) -> tuple[list[str], list[str]]:
    """(chain names, ``-A`` rules) of one table, as ``iptables-save`` prints them."""
    proc = _run([f"{tool}-save", "-t", table])
    if proc.returncode != 0:
        return [], []
    chains = [line[1:].split()[0] for line in proc.stdout.splitlines() if line.startswith(":")]
    rules = [line for line in proc.stdout.splitlines() if line.startswith("-A ")]
    return chains, rules


def own_chains(prefixes: tuple[str, ...] = ("KUBE-", ISOLATION_CHAIN)) -> dict[str, list[str]]:
    """``{"iptables/filter": [chains...], ...}``: the chains with these prefixes on the host now."""
    out: dict[str, list[str]] = {}
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle", "raw"):
            found = [c for c in _chains(tool, table)[0] if c.startswith(prefixes)]
            if found:
                out[f"{tool}/{table}"] = found
    return out


def remove_chains(prefixes: tuple[str, ...] = ("KUBE-", ISOLATION_CHAIN)) -> None:
    """Delete every rule that jumps to a chain with these prefixes, then flush and delete those chains (what
    kube-proxy --cleanup leaves: the kubelet's KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY / KUBE-FIREWALL, and the
    node's isolation chain), in both families and every table."""
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle", "raw"):
            chains, rules = _chains(tool, table)
            own = [c for c in chains if c.startswith(prefixes)]
            if not own:
                continue
            for rule in rules:
                parts = rule.split()
                target = parts[parts.index("-j") + 1] if "-j" in parts else ""
                if target in own and not parts[1].startswith(prefixes):
                    _run(["sh", "-c", f"{tool} -w -t {table} -D {rule[3:]}"])
            for chain in own:
                _run([tool, "-w", "-t", table, "-F", chain])
            for chain in own:
                _run([tool, "-w", "-t", table, "-X", chain])


def add_isolation(rules: list[list[str]]) -> None:
    """Chain UNICORE-NODE in filter, first in FORWARD, holding ``rules``."""
    remove_chains((ISOLATION_CHAIN,))
    _run(["iptables", "-w", "-N", ISOLATION_CHAIN], check=True)
    for rule in rules:
        _run(["iptables", "-w", "-A", ISOLATION_CHAIN, *rule], check=True)
    _run(["iptables", "-w", "-I", "FORWARD", "1", "-j", ISOLATION_CHAIN], check=True)


# ------------------------------------------------------------------------------------------------ links, mounts
def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_link(name: str) -> None:
    if link_exists(name):
        _run(["ip", "link", "delete", name])


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder`` (from /proc/self/mountinfo), deepest first."""
    base = str(folder.resolve())
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point == base or point.startswith(base + "/"):
            out.append(point)
    return sorted(set(out), key=lambda p: -p.count("/"))


def unmount_under(folder: Path) -> list[str]:
    """Unmount everything at or below ``folder`` (a busy mount is detached lazily); return what stays."""
    for point in mounts_under(folder):
        if _run(["umount", point]).returncode != 0:
            _run(["umount", "-l", point])
    return mounts_under(folder)


def netns_names() -> set[str]:
    try:
        return {p.name for p in Path("/run/netns").iterdir()}
    except OSError:
        return set()


# ------------------------------------------------------------------------------------------------ ip_forward
def read_ip_forward() -> str:
    try:
        return IP_FORWARD.read_text().strip()
    except OSError:
        return ""


def write_ip_forward(value: str) -> None:
    if value and read_ip_forward() != value:
        try:
            IP_FORWARD.write_text(value)
        except OSError as exc:
            logger.warning("could not set net.ipv4.ip_forward=%s: %s", value, exc)
