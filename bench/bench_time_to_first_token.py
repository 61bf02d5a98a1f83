"""Time to first token through the whole path vs the model server's own, measured in the same run (issue 14).

Whole path: a model call through the OpenAI-compatible provider (``openai:qwen2.5-coder-0.5b``, streaming) with the
turn's live-stream sink (``TokenStreamSink``) -> the task's Redis stream -> a follower blocked on the stream (the
reader of ``unicore show --follow``: ``unicore_client.local.follow.Follower``, in a thread with its own Redis
connection), timed
from the call's start to the follower writing the first character of the answer.
Direct: the same request body, ``stream: true``, straight to llama-server over HTTP, timed from the request to the
first SSE chunk with answer text.

The two alternate, each run with a fresh prompt prefix (a nonce first, so llama-server's prompt cache cannot serve
one better than the other) of the same length: ``cold`` (the whole ~1,000-token prompt is evaluated, as on a turn's
first call) and ``warm`` (a shared long prefix the server has cached, then a short new question: a turn's later calls).
Target: whole-path median <= 1.1 x direct median + 20 ms.

Usage: .venv/bin/python bench/bench_time_to_first_token.py [--runs 7]
Starts its own llama-server (tests/model_server.py: hack/build-model-server.sh, hack/fetch-model.py) and redis-server.
UNICORE_NO_MODEL=1: prints that it skips and exits 0.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import redis  # noqa: E402
from unicore.providers.base import ModelRequest  # noqa: E402
from unicore.providers.openai_compat import OpenAISettings, chat_request  # noqa: E402
from unicore.providers.registry import resolve_model  # noqa: E402
from unicore.store.token_stream import StreamSettings, TokenStreamSink, read_after  # noqa: E402

from tests.model_server import ModelServer, opted_out  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

TARGET_FACTOR, TARGET_MS = 1.1, 20.0
FILLER = ("UniCore runs LLM agent conversations as tasks; each turn is one short process that reads the inbox, "
          "calls the model and its tools, and stores one message per answer. ") * 28  # ~1,000 tokens


def request_for(nonce: str, warm: bool) -> ModelRequest:
    system = (f"{FILLER}\nSession {nonce}." if warm else f"Session {nonce}.\n{FILLER}")
    question = "In one sentence, what does a turn store?" + (f" ({nonce})" if warm else "")
    return ModelRequest(task_id="bench-ttft", system=system, max_tokens=24,
                        messages=[{"role": "user", "content": [{"text": question}]}])


def direct_ttft(base_url: str, alias: str, request: ModelRequest) -> float:
    body = {**chat_request(alias, request), "stream": True}
    http = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    start = time.perf_counter()
    with urllib.request.urlopen(http, timeout=300) as response:
        first = None
        for raw in response:
            line = raw.decode().strip()
            if first is None and line.startswith("data:") and line != "data: [DONE]":
                chunk = json.loads(line[5:])
                choices = chunk.get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    first = time.perf_counter() - start
        # the rest is read to the end, as the provider does, so both leave the server in the same state
    if first is None:
        raise RuntimeError("the server streamed no text")
    return first


class FirstWrite(io.StringIO):
    """A follower's output that notes when the first non-empty text arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None
        self.event = threading.Event()

    def write(self, text: str) -> int:
        if text.strip() and self.first is None:
            self.first = time.perf_counter()
            self.event.set()
        return super().write(text)

    def flush(self) -> None:
        pass


def make_reader(client: redis.Redis, task_id: str, done: threading.Event, out: FirstWrite) -> threading.Thread:
    """The show --follow reader if it is importable, else a bare XREAD loop (the primitive it uses)."""
    try:
        from unicore.store.tasks import TaskStore  # noqa: PLC0415
        from unicore_client.local.follow import Follower  # noqa: PLC0415

        follower = Follower(TaskStore(client), task_id, printed_next=0, turn=None, out=out, wait_seconds=0.5,
                            settled=done.is_set)
        target: Any = follower.run
    except (ImportError, TypeError, AttributeError):
        def target() -> None:
            after = "0"
            while not done.is_set():
                for entry in read_after(client, task_id, after, wait_seconds=0.5):
                    after = entry.id
                    if entry.kind == "text" and entry.text:
                        out.write(entry.text)
    return threading.Thread(target=target, daemon=True)


def whole_path_ttft(model: Any, redis_url: str, request: ModelRequest, run: int) -> float:
    task_id = f"bench-ttft-{run}"
    writer = redis.Redis.from_url(redis_url, decode_responses=True)
    reader_client = redis.Redis.from_url(redis_url, decode_responses=True)
    done = threading.Event()
    out = FirstWrite()
    reader = make_reader(reader_client, task_id, done, out)
    reader.start()
    time.sleep(0.2)  # the reader is blocked in XREAD before the call starts (a benchmark, not a test)
    sink = TokenStreamSink(writer, task_id, turn=0, call=0, seq=0, settings=StreamSettings())
    start = time.perf_counter()
    try:
        model.converse(request.model_copy(update={"task_id": task_id}), sink)
    finally:
        sink.close()
    out.event.wait(5)
    done.set()
    reader.join(5)
    if out.first is None:
        raise RuntimeError(f"the reader saw no text; it wrote {out.getvalue()!r}")
    return out.first - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if opted_out():
        print("bench_time_to_first_token: UNICORE_NO_MODEL=1, skipped")
        return 0
    redis_server = None
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        redis_server = RedisServer()
        redis_url = redis_server.url
    server = ModelServer()
    try:
        client = redis.Redis.from_url(redis_url)
        model = resolve_model(f"openai:{server.alias}", redis=client,
                              settings=OpenAISettings(base_url=server.base_url))
        direct_ttft(server.base_url, server.alias, request_for("warm-up", True))  # load, cache the shared prefix
        rows: list[tuple[str, float, float, float, float, float, bool]] = []
        for mode in ("cold", "warm"):
            direct: list[float] = []
            whole: list[float] = []
            for run in range(args.runs):
                for first in (("direct", "whole") if run % 2 == 0 else ("whole", "direct")):
                    request = request_for(uuid.uuid4().hex[:12], mode == "warm")
                    if first == "direct":
                        direct.append(direct_ttft(server.base_url, server.alias, request))
                    else:
                        whole.append(whole_path_ttft(model, redis_url, request, len(whole) + 100 * len(rows)))
            d, w = statistics.median(direct), statistics.median(whole)
            limit = TARGET_FACTOR * d + TARGET_MS / 1000
            rows.append((mode, d, w, w / d, w - d, limit, w <= limit))
        print(f"llama-server ready in {server.ready_seconds:.1f} s; {args.runs} runs per mode, medians")
        print(f"{'prompt':<6} {'direct TTFT':>12} {'whole path':>12} {'ratio':>7} {'extra':>9} {'limit':>9}  target")
        for mode, d, w, ratio, extra, limit, ok in rows:
            print(f"{mode:<6} {d * 1000:>9.0f} ms {w * 1000:>9.0f} ms {ratio:>6.3f}x {extra * 1000:>6.0f} ms "
                  f"{limit * 1000:>6.0f} ms  {'met' if ok else 'MISSED'}")
        return 0 if all(row[-1] for row in rows) else 1
    finally:
        server.stop()
        if redis_server is not None:
            redis_server.stop()


if __name__ == "__main__":
    sys.exit(main())
