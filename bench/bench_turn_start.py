"""Turn process start to its first model request, against an anchor measured in the same run.

A turn Job runs ``unicore-turn <task>`` once per turn, so its start-up is paid on every turn. This benchmark spawns
``unicore-turn`` for a task whose model is ``openai:bench`` served by a local HTTP endpoint that records when the
first request arrives (and answers with a final text), and compares the time from spawn to that request with the
time ``python -c "import boto3"`` takes to exit (the anchor: importing the AWS SDK, which a Bedrock turn needs
anyway). Target: at most 1.5x (issue 11).

``--tracing`` (issue 32) adds, interleaved in the same run, the same start-up with tracing on: the turn's
``OTEL_EXPORTER_OTLP_ENDPOINT`` points at a real Jaeger this benchmark starts (``JaegerServer``: the binary from
``--jaeger``, else ``find_jaeger_binary``'s search), so the turn imports the OpenTelemetry SDK and sets up its tracer
provider before its first model request (the OTLP exporter is imported later, in the batch processor's thread).
Each run times the anchor, then the turn off and on (which goes first alternates); every turn is a fresh task.
Target: on at most 1.1x of off (the medians). The spans are checked to have reached Jaeger.

Usage: .venv/bin/python bench/bench_turn_start.py [--runs 7] [--tracing [--jaeger PATH]]
Uses $REDIS_URL if set, else a private redis-server on a unix socket.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.api.schema import TaskSpec  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402

ANSWER = {
    "id": "c", "object": "chat.completion", "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class FirstRequestClock:
    """An OpenAI-compatible endpoint that notes the monotonic time of each request's arrival."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        clock = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                clock.arrivals.append(time.monotonic())
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.dumps(ANSWER).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def redis_url() -> tuple[str, Any]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None
    sys.path.insert(0, str(REPO))
    from tests.redis_server import RedisServer

    server = RedisServer()
    return server.url, server


def time_anchor() -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import boto3"], check=True)
    return time.monotonic() - began


RUN = uuid.uuid4().hex[:8]  # task ids are fresh per run, also against a shared $REDIS_URL


def time_turn(store: TaskStore, url: str, endpoint: FirstRequestClock, n: int | str, home: Path,
              otlp_endpoint: str | None = None) -> float:
    """Spawn -> first model request of one turn of a fresh task; ``otlp_endpoint``: with tracing on, exporting there."""
    task = f"bench-{RUN}-{n}"
    store.create_task(TaskSpec(id=task, prompt="hello", model="openai:bench"))
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}  # off: none at all
    env.update({"REDIS_URL": url, "OPENAI_BASE_URL": endpoint.url, "OPENAI_API_KEY": "x",
                "UNICORE_HOME": str(home), "UNICORE_SUMMARIZE_TURNS": "0"})
    if otlp_endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_endpoint
    turn = Path(sys.executable).with_name("unicore-turn")
    seen = len(endpoint.arrivals)
    began = time.monotonic()
    subprocess.run([str(turn), task], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if len(endpoint.arrivals) <= seen:
        raise RuntimeError("the turn made no model request")
    return endpoint.arrivals[seen] - began


def row(label: str, values: list[float]) -> str:
    return f"| {label} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"


def tracing_runs(store: TaskStore, url: str, runs: int, jaeger_binary: str | None) -> int:
    """The ``--tracing`` mode: anchor, turn off, turn on, interleaved; prints both ratios."""
    from unicore_client.traces.jaeger import JaegerNotFound, JaegerServer

    try:
        jaeger = JaegerServer(jaeger_binary)
    except JaegerNotFound as exc:
        print(f"bench_turn_start: --tracing needs a jaeger binary: {exc}", file=sys.stderr)
        return 2
    endpoint = FirstRequestClock()
    with jaeger, tempfile.TemporaryDirectory() as home:
        time_anchor()  # warm the page cache for all three, and Jaeger's first export
        time_turn(store, url, endpoint, "warm-off", Path(home))
        time_turn(store, url, endpoint, "warm-on", Path(home), jaeger.otlp_endpoint)
        anchors, off, on = [], [], []
        for n in range(runs):  # interleaved, so machine load hits all alike; off and on take turns going first
            anchors.append(time_anchor())
            for traced in ((False, True) if n % 2 == 0 else (True, False)):
                if traced:
                    on.append(time_turn(store, url, endpoint, f"{n}-on", Path(home), jaeger.otlp_endpoint))
                else:
                    off.append(time_turn(store, url, endpoint, f"{n}-off", Path(home)))
        traces = len(jaeger.find_traces("unicore-turn", limit=1000))  # each turn's exit flushed its spans
    anchor, turn_off, turn_on = statistics.median(anchors), statistics.median(off), statistics.median(on)
    paired = statistics.median(b / a for a, b in zip(off, on, strict=True))
    print("| measure | median (s) | min (s) | max (s) |")
    print("|---|---|---|---|")
    print(row('`python -c "import boto3"` (anchor)', anchors))
    print(row("`unicore-turn` spawn -> first model request, tracing off", off))
    print(row("`unicore-turn` spawn -> first model request, tracing on (OTLP to Jaeger)", on))
    print(f"\nratio off / anchor (median): **{turn_off / anchor:.2f}x** (target <= 1.5x)")
    print(f"ratio on / off (median): **{turn_on / turn_off:.2f}x** (target <= 1.1x); median of the per-run ratios "
          f"{paired:.2f}x; on - off {1000 * (turn_on - turn_off):+.0f} ms")
    print(f"{runs} runs; Jaeger holds {traces} traces of service unicore-turn ({runs + 1} traced turns)")
    if traces < runs + 1:
        print("bench_turn_start: the traced turns' spans did not all reach Jaeger", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tracing", action="store_true", help="also time the start-up with tracing on (issue 32)")
    parser.add_argument("--jaeger", help="the jaeger binary for --tracing (default: find_jaeger_binary's search)")
    args = parser.parse_args()
    url, server = redis_url()
    if args.tracing:
        try:
            return tracing_runs(TaskStore(connect(url)), url, args.runs, args.jaeger)
        finally:
            if server is not None:
                server.stop()
    try:
        store = TaskStore(connect(url))
        endpoint = FirstRequestClock()
        with tempfile.TemporaryDirectory() as home:
            time_anchor()  # warm the page cache for both
            time_turn(store, url, endpoint, -1, Path(home))
            anchors, turns = [], []
            for n in range(args.runs):  # interleaved, so machine load hits both alike
                anchors.append(time_anchor())
                turns.append(time_turn(store, url, endpoint, n, Path(home)))
        anchor, turn = statistics.median(anchors), statistics.median(turns)
        print("| measure | median (s) | min (s) | max (s) |")
        print("|---|---|---|---|")
        print(f"| `python -c \"import boto3\"` (anchor) | {anchor:.3f} | {min(anchors):.3f} | {max(anchors):.3f} |")
        print(f"| `unicore-turn` spawn -> first model request | {turn:.3f} | {min(turns):.3f} | {max(turns):.3f} |")
        print(f"\nratio (median): **{turn / anchor:.2f}x** (target <= 1.5x), {args.runs} runs")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
