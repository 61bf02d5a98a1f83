"""unicore-devcluster up [--data-dir D] [--detach] | down | status | env | load-images"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from unicore_devcluster.cluster import (
    DevCluster,
    default_data_dir,
    read_state,
    stop_running,
    supervisor_alive,
)
from unicore_devcluster.log import logger
from unicore_devcluster.procs import alive


def _export_lines(state: dict[str, object]) -> str:
    return f"export KUBEBUILDER_ASSETS={state['bin_dir']}\nexport KUBECONFIG={state['kubeconfig']}"


def choose_node(mode: str) -> tuple[bool, str]:
    """(real node?, the one line that says which and why) for ``up --node auto|real|runner``."""
    if mode == "runner":
        return False, "devcluster: pods run on the pod runner (fake GPU/CPU nodes), as asked (--node runner)"
    from unicore_devcluster.binaries import BinariesNotFound, find_node_bin_dir
    from unicore_devcluster.node_host import node_ip, unavailable_reason
    from unicore_devcluster.realnode import NODE_NAME

    reason = unavailable_reason()
    if reason is None:
        try:
            find_node_bin_dir()
        except BinariesNotFound as exc:
            reason = str(exc)
    if reason is None:
        return True, f"devcluster: real node {NODE_NAME} (containerd + kubelet) on {node_ip()}"
    if mode == "real":
        raise SystemExit(f"devcluster: cannot run a real node here: {reason}")
    return False, f"devcluster: no real node ({reason}); pods run on the pod runner (fake GPU/CPU nodes)"


def cmd_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    state = read_state(data_dir)
    if state and supervisor_alive(state):
        print(f"devcluster already running in {data_dir}", file=sys.stderr)
        print(_export_lines(state))
        return 0
    if state:  # stale state of a supervisor that died
        stop_running(data_dir)
    real, line = choose_node(args.node)
    print(line, file=sys.stderr, flush=True)
    node = "real" if real else "runner"
    if args.detach:
        return _up_detached(data_dir, args.timeout, node)
    return _up_foreground(data_dir, args.timeout, node)


def _up_foreground(data_dir: Path, timeout: float, node: str) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    cluster = DevCluster(data_dir, nodes=(), real_node=True) if node == "real" else DevCluster(data_dir)
    try:
        cluster.start(timeout=timeout)
        print(f"devcluster ready in {cluster.ready_seconds:.1f}s", file=sys.stderr)
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


def _up_detached(data_dir: Path, timeout: float, node: str) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "devcluster.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "unicore_devcluster.cli",
                "up",
                "--data-dir",
                str(data_dir),
                "--timeout",
                str(timeout),
                "--node",
                node,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout + (150 if node == "real" else 30)
    while time.monotonic() < deadline:
        state = read_state(data_dir)
        if state and state.get("ready") and state["supervisor"]["pid"] == proc.pid:
            print(
                f"devcluster ready in {state['ready_seconds']:.1f}s (pid {proc.pid}, logs {data_dir}/logs)",
                file=sys.stderr,
            )
            print(_export_lines(state))
            return 0
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    print(f"devcluster failed to start; {log_path}:\n{tail}", file=sys.stderr)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)
    return 1


def cmd_down(args: argparse.Namespace) -> int:
    if stop_running(args.data_dir):
        print("devcluster stopped", file=sys.stderr)
    else:
        print("no devcluster state found; nothing to stop", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.data_dir)
    if state is None:
        print("devcluster: not running")
        return 1
    running = supervisor_alive(state)
    print(f"devcluster: {'running' if running else 'DEAD (stale state)'}  server {state['server']}")
    print(f"  kubeconfig {state['kubeconfig']}")
    print(f"  supervisor pid {state['supervisor']['pid']}")
    for name, proc in state.get("processes", {}).items():
        print(
            f"  {name:24s} pid {proc['pid']:>7}  "
            f"{'up' if alive(proc['pid'], proc.get('started')) else 'gone'}"
        )
    if running:
        os.environ.setdefault("KUBECONFIG", state["kubeconfig"])
        from kubernetes import client
        from unicore.kube_config import load_api_client

        api = load_api_client(state["kubeconfig"])
        try:
            core: Any = client.CoreV1Api(api)
            for node in core.list_node().items:
                ready = next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "?")
                gpus = (node.status.allocatable or {}).get("nvidia.com/gpu", "0")
                print(f"  node {node.metadata.name:20s} Ready={ready} gpus={gpus}")
        finally:
            api.close()
    return 0 if running else 1


def cmd_env(args: argparse.Namespace) -> int:
    state = read_state(args.data_dir)
    if state is None or not supervisor_alive(state):
        print("devcluster: not running", file=sys.stderr)
        return 1
    print(_export_lines(state))
    return 0


def cmd_load_images(args: argparse.Namespace) -> int:
    """Import the project's images (hack/build-images.sh's archives) into the running real node's containerd."""
    state = read_state(args.data_dir)
    if state is None or not supervisor_alive(state):
        print("devcluster: not running", file=sys.stderr)
        return 1
    real = state.get("real_node")
    if not real:
        print("devcluster: this cluster has no real node (its pods run on the pod runner): no images to load",
              file=sys.stderr)
        return 1
    from unicore_devcluster.containerd import ContainerdRuntime
    from unicore_devcluster.node_images import ImagesError, chart_values, load_images

    state_dir = Path(real["state_dir"])
    runtime = ContainerdRuntime(state_dir / "containerd", root_dir=state_dir / "containerd-root")
    try:
        images = load_images(runtime)
    except ImagesError as exc:
        print(f"devcluster: {exc}", file=sys.stderr)
        return 1
    lines = chart_values(images) if args.helm_args else [f"{key} {image.ref}" for key, image in images.items()]
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unicore-devcluster", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, helptext in (
        ("up", cmd_up, "start the control plane, nodes and pod runner (foreground unless --detach)"),
        ("down", cmd_down, "stop a running devcluster"),
        ("status", cmd_status, "show processes and nodes"),
        ("env", cmd_env, "print export lines for KUBECONFIG and KUBEBUILDER_ASSETS"),
        ("load-images", cmd_load_images, "import the project's images (make images-local) into the real node"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--data-dir", default=str(default_data_dir()))
        p.set_defaults(func=func)
        if name == "up":
            p.add_argument(
                "--detach", action="store_true", help="run in the background and return once ready"
            )
            p.add_argument("--timeout", type=float, default=120.0)
            p.add_argument(
                "--node",
                choices=("auto", "real", "runner"),
                default=os.environ.get("UNICORE_DEVCLUSTER_NODE", "auto"),
                help="auto (default, $UNICORE_DEVCLUSTER_NODE): a real node (containerd + kubelet) where this host"
                " can run one, else the pod runner, saying why; real: fail if it cannot; runner: the pod runner",
            )
        if name == "load-images":
            p.add_argument(
                "--helm-args", action="store_true",
                help="print the helm arguments (one a line) that make the chart run the imported images",
            )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logger.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
