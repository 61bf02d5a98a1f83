"""The containerd runtime's pure parts: the generated config, the folder layout, mount and user lookups.

Starting containerd and running containers is tests/node/test_images.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from unicore_devcluster.containerd import DEFAULT_SANDBOX_IMAGE, ContainerdRuntime
from unicore_devcluster.containerd_host import cgroup_mounts, mounts_under, render_config, user_ids

CRI = "io.containerd.grpc.v1.cri"


def config_of(runtime: ContainerdRuntime) -> dict[str, Any]:
    return tomllib.loads(runtime.config_text())


def test_everything_lives_under_the_state_and_root_folders(tmp_path: Path) -> None:
    runtime = ContainerdRuntime(tmp_path / "run", root_dir=tmp_path / "cache" / "containerd")
    config = config_of(runtime)
    assert runtime.socket == tmp_path / "run" / "containerd.sock"
    assert config["version"] == 2
    assert config["grpc"]["address"] == str(runtime.socket)
    assert config["ttrpc"]["address"] == f"{runtime.socket}.ttrpc"
    assert config["root"] == str(tmp_path / "cache" / "containerd")
    assert Path(config["state"]).is_relative_to(tmp_path / "run")
    assert config["plugins"]["io.containerd.internal.v1.opt"]["path"].startswith(config["root"])  # not /opt
    assert config["debug"]["address"] == "" and config["metrics"]["address"] == ""
    runc = config["plugins"][CRI]["containerd"]["runtimes"]["runc"]
    assert Path(runc["options"]["Root"]).is_relative_to(tmp_path / "run")  # not /run/containerd/runc


def test_cri_uses_cgroupfs_and_restricts_oom_score_adjustments(tmp_path: Path) -> None:
    cri = config_of(ContainerdRuntime(tmp_path))["plugins"][CRI]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["disable_apparmor"] is True and cri["enable_selinux"] is False
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    assert cri["containerd"]["default_runtime_name"] == "runc"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False


def test_defaults_and_constructor_arguments(tmp_path: Path) -> None:
    default = ContainerdRuntime(tmp_path / "a")
    cri = config_of(default)["plugins"][CRI]
    assert cri["sandbox_image"] == DEFAULT_SANDBOX_IMAGE == "registry.k8s.io/pause:3.10"
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": str(tmp_path / "a" / "cni" / "net.d")}
    assert default.root_dir == tmp_path / "a" / "root"
    custom = ContainerdRuntime(
        tmp_path / "b",
        sandbox_image="unicore-pause:local",
        cni_bin_dir=Path("/opt/cni/bin"),
        cni_conf_dir=tmp_path / "net.d",
    )
    cri = config_of(custom)["plugins"][CRI]
    assert cri["sandbox_image"] == "unicore-pause:local"
    assert cri["cni"] == {"bin_dir": "/opt/cni/bin", "conf_dir": str(tmp_path / "net.d")}
    assert default.cgroup_parent != custom.cgroup_parent  # two runtimes never share ctr-run cgroups


def test_paths_with_quotes_and_spaces_survive_toml() -> None:
    odd = Path('/tmp/a "quoted" dir/with\\backslash')
    text = render_config(
        root=odd / "root",
        state=odd / "state",
        socket=odd / "c.sock",
        sandbox_image="x:1",
        cni_bin_dir=odd / "bin",
        cni_conf_dir=odd / "conf",
        runc_root=odd / "runc",
    )
    config = tomllib.loads(text)
    assert config["root"] == str(odd / "root") and config["grpc"]["address"] == str(odd / "c.sock")


MOUNTINFO = """\
22 1 8:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
33 30 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
40 22 0:40 / /tmp/node/root/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw
41 22 0:41 / /tmp/node/state/shm\\040dir rw - tmpfs shm rw
42 22 0:42 / /tmp/node-other/x rw - tmpfs tmpfs rw
43 22 0:43 / /tmp/node rw - tmpfs tmpfs rw
"""


def test_mounts_under_the_folders_deepest_first(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    found = mounts_under([Path("/tmp/node")], mountinfo=info)
    assert found == [
        Path("/tmp/node/root/io.containerd.runtime.v2.task/k8s.io/abc/rootfs"),
        Path("/tmp/node/state/shm dir"),
    ]  # not /tmp/node itself, not its sibling /tmp/node-other
    assert cgroup_mounts(mountinfo=info) == [
        Path("/sys/fs/cgroup/memory"),
        Path("/sys/fs/cgroup/cpu"),
        Path("/sys/fs/cgroup/unified"),
    ]


@pytest.mark.parametrize(
    ("user", "ids"),
    [
        ("65532", (65532, 65532)),
        ("65532:0", (65532, 0)),
        ("1234", (1234, 0)),
        ("redis", (999, 999)),
        ("redis:staff", (999, 50)),
        ("0:0", (0, 0)),
    ],
)
def test_user_ids_follow_the_images_passwd(tmp_path: Path, user: str, ids: tuple[int, int]) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nredis:x:999:999::/data:/usr/sbin/nologin\n"
        "unicore:x:65532:65532::/home/unicore:/usr/sbin/nologin\n"
    )
    (tmp_path / "etc/group").write_text("root:x:0:\nstaff:x:50:\nredis:x:999:\n")
    assert user_ids(user, tmp_path) == ids


def test_unknown_users_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no user 'nobody'"):
        user_ids("nobody", tmp_path)
