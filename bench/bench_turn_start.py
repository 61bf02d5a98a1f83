"""Turn process start to its first model request, against an anchor measured in the same run.

A turn Job runs ``unicore-turn <task>`` once per turn, so its start-up is paid on every turn. This benchmark spawns
``unicore-turn`` for a task whose model is ``openai:bench`` served by a local HTTP endpoint that records when the
first request arrives (and answers with a final text), and compares the time from spawn to that request with the
time ``python -c "import boto3"`` takes to exit (the anchor: importing the AWS SDK, which a Bedrock turn needs
anyway). Target: at most 1.5x (issue 11).

Usage: .venv/bin/python bench/bench_turn_start.py [--runs 7]
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


def time_turn(store: TaskStore, url: str, endpoint: FirstRequestClock, n: int, home: Path) -> float:
    task = f"bench-{n}"
    store.create_task(TaskSpec(id=task, prompt="hello", model="openai:bench"))
    env = {**os.environ, "REDIS_URL": url, "OPENAI_BASE_URL": endpoint.url, "OPENAI_API_KEY": "x",
           "UNICORE_HOME": str(home), "UNICORE_SUMMARIZE_TURNS": "0"}
    turn = Path(sys.executable).with_name("unicore-turn")
    seen = len(endpoint.arrivals)
    began = time.monotonic()
    subprocess.run([str(turn), task], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if len(endpoint.arrivals) <= seen:
        raise RuntimeError("the turn made no model request")
    return endpoint.arrivals[seen] - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    url, server = redis_url()
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
