"""``run_command`` of ``true`` through the workbench's exec server against ``sh -c true`` run directly, in one run.

The exec server (``unicore-exec serve``, built by hack/build-exec-server.sh) runs here on a unix socket, as it does
in the workbench container; each call is one ``ExecServerRunner.run`` (connect, request, fork of ``/bin/sh -c``,
output and exit lines). The anchor is ``subprocess.run(["sh", "-c", "true"])`` from the same Python process. The two
alternate call by call, so machine load hits both alike. Target (issue 28): p50 through the server at most 1.5x the
direct p50 + 5 ms.

Usage: .venv/bin/python bench/bench_run_command.py [--runs 200] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.commands.exec_client import ExecServerRunner  # noqa: E402

from bench.doc_section import write_section  # noqa: E402

SECTION = "## run_command through the exec server (issue 28)"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    build = subprocess.run([str(REPO / "hack/build-exec-server.sh")], check=True, capture_output=True, text=True)
    binary = build.stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory(prefix="ue-bench-") as tmp:
        sock, workspace = Path(tmp) / "exec.sock", Path(tmp) / "ws"
        workspace.mkdir()
        server = subprocess.Popen([binary, "serve", "--socket", str(sock), "--workdir", str(workspace)])
        try:
            runner = ExecServerRunner(sock)
            cancel = threading.Event()

            def through_server() -> float:
                began = time.perf_counter()
                result = runner.run("true", workdir=str(workspace), timeout_seconds=60, cancel=cancel)
                elapsed = time.perf_counter() - began
                if result.exit_code != 0:
                    raise RuntimeError(f"true through the exec server: {result}")
                return elapsed

            def direct() -> float:
                began = time.perf_counter()
                subprocess.run(["sh", "-c", "true"], check=True, cwd=workspace)
                return time.perf_counter() - began

            for _ in range(10):  # warm-up: page cache, the server's first connections
                through_server()
                direct()
            served, anchors = [], []
            for _ in range(args.runs):
                served.append(through_server())
                anchors.append(direct())
        finally:
            server.terminate()
            server.wait(timeout=10)
    ms = {name: (1000 * statistics.median(v), 1000 * percentile(v, 0.95))
          for name, v in (("direct", anchors), ("served", served))}
    target = 1.5 * ms["direct"][0] + 5.0
    ratio = ms["served"][0] / ms["direct"][0]
    ok = ms["served"][0] <= target
    table = [
        "| measure | p50 (ms) | p95 (ms) |",
        "|---|---:|---:|",
        f"| `sh -c true` run directly (`subprocess.run`) | {ms['direct'][0]:.2f} | {ms['direct'][1]:.2f} |",
        f"| `run_command` of `true` through the exec server (`ExecServerRunner`) | {ms['served'][0]:.2f} | "
        f"{ms['served'][1]:.2f} |",
    ]
    verdict = (f"p50 ratio **{ratio:.2f}x**; target p50 <= 1.5x direct + 5 ms = {target:.2f} ms: "
               f"{'met' if ok else 'NOT met'} ({args.runs} calls each, alternating)")
    print("\n".join(table))
    print(f"\n{verdict}")
    if not args.no_write:
        doc = "\n".join([
            SECTION,
            "",
            f"Command: `.venv/bin/python bench/bench_run_command.py --runs {args.runs}` (the exec server on a unix "
            "socket on this host, as in the workbench container; each call connects, sends the request, and reads "
            "the output and exit lines; the anchor `sh -c true` is spawned by the same Python process; the two "
            "alternate call by call).",
            f"Measured {datetime.date.today().isoformat()} on a shared {os.cpu_count()}-core machine (load average "
            f"{os.getloadavg()[0]:.2f}, 1 min).",
            "",
            *table,
            "",
            verdict + ".",
        ])
        print(f"written to {write_section(SECTION, doc)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
