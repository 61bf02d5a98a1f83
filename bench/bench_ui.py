"""The web UI (issue 16): event latency into the page's DOM next to a plain Redis stream read, and first renders.

(a) Event latency: a live text entry appended to a task's Redis stream (``state.token_stream.publish``, what a
running model call writes) -> ``unicore ui``'s SSE stream -> Chromium's EventSource -> the text in the task page's
DOM (a MutationObserver stamps it with the page's clock, ``performance.timeOrigin + performance.now()``, the same
epoch clock as Python's ``time.time()`` on one machine). Anchor, in the same run and for the same entries: a plain
``XREAD BLOCK`` on the stream in a thread of this process (``read_after``, its own connection). Printed: p50 and
p99 of both, and the ratio of the medians.
(b) First render: from the navigation's start to the tree of 1,000 tasks in the DOM, and to the newest page of a
transcript of 10,000 messages; anchors: a tree of one task and a transcript of 10 messages. Target: under 1 s.

Usage: .venv/bin/python bench/bench_ui.py [--events 200] [--renders 5] [--label TEXT] [--no-write]
Starts its own redis-server (or uses $REDIS_URL, which it flushes) and ``unicore ui --port 0``; drives Debian's
chromium (/usr/bin/chromium, hack/bootstrap.sh) with Playwright, as tests/ui do. Writes its section of
docs/benchmarks.md unless --no-write.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.api.schema import TaskSpec  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402
from unicore.store.token_stream import StreamSettings, publish, read_after  # noqa: E402

from bench.doc_section import write_section  # noqa: E402
from tests.ui.conftest import CHROMIUM, UNICORE, _printed_url  # noqa: E402
from tests.ui.seeding import seed_forest, seed_transcript  # noqa: E402

SECTION = "## Web UI: event latency and first render (issue 16)"
TARGET_RENDER_MS = 1000.0
STAMP = """() => {
  window.seenAt = {};
  const live = document.getElementById("live");
  new MutationObserver(() => {
    const match = live.textContent.match(/#(\\d+);$/);
    if (match && !(match[1] in window.seenAt)) window.seenAt[match[1]] = performance.timeOrigin + performance.now();
  }).observe(live, { childList: true, subtree: true, characterData: true });
}"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class StreamReader(threading.Thread):
    """The anchor: XREAD BLOCK on the task's stream, stamping each entry's marker when the read returns."""

    def __init__(self, url: str, task_id: str) -> None:
        super().__init__(daemon=True)
        self.store = TaskStore(connect(url))
        self.task_id = task_id
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        after = "0"  # the task's stream starts empty: every entry from its first
        while not self.stop.is_set():
            for entry in read_after(self.store, self.task_id, after, wait_seconds=1.0):
                now = time.time()
                after = entry.id
                if entry.text.startswith("#"):
                    self.seen[int(entry.text[1:-1])] = now


def event_latency(page: Any, store: TaskStore, url: str, base: str, events: int) -> dict[str, list[float]]:
    store.create_task(TaskSpec(id="lat"))
    page.goto(f"{base}/#/task/lat")
    page.wait_for_function("document.getElementById('conn').textContent === 'live'")
    page.evaluate(STAMP)
    reader = StreamReader(url, "lat")
    reader.start()
    dom: list[float] = []
    xread: list[float] = []
    for i in range(events):
        entry = {"turn": 0, "call": 0, "seq": 1, "attempt": 1, "kind": "text", "text": f"#{i};"}
        sent = time.time()
        publish(store.redis, "lat", [entry], StreamSettings())
        seen_at = page.wait_for_function(f"() => window.seenAt[{i}]", polling=5, timeout=30_000).json_value()
        deadline = time.monotonic() + 30
        while i not in reader.seen:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stream reader never saw event {i}")
            time.sleep(0.001)
        dom.append(float(seen_at) - sent * 1000)
        xread.append((reader.seen[i] - sent) * 1000)
    reader.stop.set()
    reader.join(timeout=5)
    return {"dom": dom[1:], "xread": xread[1:]}  # the first pays for connections and JIT warm-up


def first_render(page: Any, url: str, condition: str, renders: int) -> float:
    """Median ms from the navigation's start to ``condition`` (a JS expression) holding, over ``renders`` loads."""
    times = []
    for _ in range(renders):
        page.goto("about:blank")
        page.goto(url)
        handle = page.wait_for_function(f"() => ({condition}) && performance.now()", polling="raf", timeout=60_000)
        times.append(float(handle.json_value()))
    return statistics.median(times)


def renders(page: Any, store: TaskStore, base: str, count: int) -> dict[str, float]:
    store.create_task(TaskSpec(id="one"))
    rows = "document.getElementById('tree').dataset.rendered === '{n}'"
    out = {"tree 1 (anchor)": first_render(page, f"{base}/#/", rows.format(n=1), count)}
    seed_forest(store, roots=9, children_per_root=110)  # 999 more: 1,000 tasks
    assert len(store.list_tasks()) == 1000
    out["tree 1,000"] = first_render(page, f"{base}/#/", rows.format(n=1000), count)
    seed_transcript(store, "short", 10)
    seed_transcript(store, "long", 10_000)
    newest = "document.querySelector('#transcript [data-seq=\"{seq}\"]')"
    out["transcript 10 (anchor)"] = first_render(page, f"{base}/#/task/short", newest.format(seq=9), count)
    out["transcript 10,000"] = first_render(page, f"{base}/#/task/long", newest.format(seq=9999), count)
    return out




def run(args: argparse.Namespace, url: str, home: Path) -> tuple[dict[str, list[float]], dict[str, float]]:
    from playwright.sync_api import sync_playwright

    store = TaskStore(connect(url))
    store.redis.flushdb()
    env = {**os.environ, "REDIS_URL": url, "UNICORE_HOME": str(home)}
    ui = subprocess.Popen([UNICORE, "ui", "--port", "0"], env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        printed = _printed_url(ui)
        base = printed.split("/?", 1)[0]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                 args=["--no-sandbox"] if os.geteuid() == 0 else [])
            page = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
            page.goto(printed)  # the token sets the cookie
            shown = renders(page, store, base, args.renders)
            latency = event_latency(page, store, url, base, args.events + 1)
            browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=10)
    return latency, shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="live entries timed (after one warm-up)")
    parser.add_argument("--renders", type=int, default=5, help="page loads per first-render figure (median)")
    parser.add_argument("--label", default="", help="a note for the heading of the written figures")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import tempfile

    server: Any = None
    url = os.environ.get("REDIS_URL")
    if not url:
        from tests.redis_server import RedisServer

        server = RedisServer()
        url = server.url
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ui-") as home:
            latency, shown = run(args, url, Path(home))
    finally:
        if server is not None:
            server.stop()
    dom, xread = latency["dom"], latency["xread"]
    load = os.getloadavg()
    lines = ["| path | p50 ms | p99 ms |", "|---|---:|---:|",
             f"| Redis XREAD BLOCK (anchor) | {percentile(xread, .5):.2f} | {percentile(xread, .99):.2f} |",
             f"| SSE -> page DOM | {percentile(dom, .5):.2f} | {percentile(dom, .99):.2f} |"]
    ratio = percentile(dom, .5) / max(percentile(xread, .5), 1e-6)
    lines += ["", "| first render (navigation start -> in the DOM) | ms (median) | vs anchor |", "|---|---:|---:|"]
    anchors = {"tree 1,000": "tree 1 (anchor)", "transcript 10,000": "transcript 10 (anchor)"}
    for name, ms in shown.items():
        anchor = shown[anchors.get(name, name)]
        lines.append(f"| {name} | {ms:.0f} | {ms / anchor:.2f}x |")
    slowest = max(shown["tree 1,000"], shown["transcript 10,000"])
    verdict = (f"Event latency: the page's DOM has an entry {ratio:.1f}x the median time of a plain XREAD BLOCK of "
               f"the same entry ({percentile(dom, .5) - percentile(xread, .5):+.1f} ms). First render: "
               f"{shown['tree 1,000']:.0f} ms for 1,000 tasks, {shown['transcript 10,000']:.0f} ms for a "
               f"10,000-message transcript (target under {TARGET_RENDER_MS:.0f} ms: "
               f"{'met' if slowest < TARGET_RENDER_MS else 'missed'}). Load average during the run: "
               f"{load[0]:.2f} (1 min), {load[1]:.2f} (5 min).")
    table = "\n".join(lines)
    print(table)
    print(verdict)
    if not args.no_write:
        command = (f".venv/bin/python bench/bench_ui.py --events {args.events} --renders {args.renders}"
                   + (f" --label '{args.label}'" if args.label else ""))
        doc = "\n".join([
            SECTION, "",
            f"Command: `{command}` ({args.events} live entries after one warm-up; first renders: median of "
            f"{args.renders} page loads; Debian's chromium headless via Playwright; `unicore ui` and a private "
            "redis-server on a unix socket).",
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on a shared 2-core machine"
            + (f" ({args.label})." if args.label else "."),
            "", table, "", verdict])
        print(f"written to {write_section(SECTION, doc)}")
    return 0 if slowest < TARGET_RENDER_MS else 1


if __name__ == "__main__":
    sys.exit(main())
