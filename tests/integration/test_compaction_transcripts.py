"""Compaction marks in the task API's transcript pages and ``kubectl agenttask logs`` (over a real Redis)."""

from __future__ import annotations

from typing import Any

import redis
from unicore.api.schema import TaskSpec
from unicore.store.compactions import Compaction, append_compaction
from unicore.store.tasks import TaskStore
from unicore.turn.transcript import compaction_mark
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

NS, NAME = "team-c", "long"
TASK_ID = f"{NS}/{NAME}"
BASE = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{NAME}"


def _pages(api: TaskApi, query: str) -> list[dict[str, Any]]:
    pages, since = [], 0
    while True:
        page = answer(api, "GET", BASE + "/transcript", f"since={since}&limit=7&{query}", sender="user:bo").body
        pages.append(page)
        since = page["next"]
        if not page["more"]:
            return pages


def test_pages_mark_each_compaction_once_and_show_every_message(redis_url: str) -> None:
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    api = TaskApi(store, static_lookup(lambda: [{"metadata": {"namespace": NS, "name": NAME}}]))
    store.create_task(TaskSpec(id=TASK_ID, prompt="message 0"))
    lease = store.acquire_lease(TASK_ID)
    store.drain(lease, first_drain=True)
    for i in range(1, 30):
        store.append_message(lease, "assistant" if i % 2 else "user", [{"text": f"message {i}"}])
    append_compaction(store.redis, lease, Compaction(upto=10, summary="the first ten"))
    append_compaction(store.redis, lease, Compaction(upto=21, summary="twenty-one \x1b[31mred\x1b[0m"))

    with_tools = _pages(api, "tools=true")
    marks = [m for page in with_tools for m in page["compactions"]]
    assert [m["upto"] for m in marks] == [10, 21]  # each once, in the page holding message 10 / 21
    assert marks[1]["summary"] == "twenty-one \x1b[31mred\x1b[0m"
    assert [m["seq"] for page in with_tools for m in page["messages"]] == list(range(30))  # nothing hidden
    brief = _pages(api, "")
    assert all("summary" not in m for page in brief for m in page["compactions"])

    printer = TranscriptPrinter(tools=True)
    text = "".join(printer.render(page) for page in with_tools)
    assert text.count(compaction_mark(10)) == 1 and text.count(compaction_mark(21)) == 1
    assert text.index(compaction_mark(21)) < text.index("message 21") and text.index("message 20") < text.index(
        compaction_mark(21))
    assert "[compaction summary] the first ten" in text
    assert "\x1b" not in text and "twenty-one" in text  # model text is escaped for the terminal
    assert all(f"message {i}" in text for i in range(30))
    plain = "".join(TranscriptPrinter(tools=False).render(page) for page in brief)
    assert compaction_mark(10) in plain and "the first ten" not in plain


def test_show_marks_compactions_and_lists_them_in_json(redis_url: str, monkeypatch: Any, capsys: Any) -> None:
    import json

    from unicore_client.local import main as cli

    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    store.create_task(TaskSpec(id="local-long", prompt="message 0"))
    lease = store.acquire_lease("local-long")
    store.drain(lease, first_drain=True)
    for i in range(1, 12):
        store.append_message(lease, "assistant" if i % 2 else "user", [{"text": f"message {i}"}])
    append_compaction(store.redis, lease, Compaction(upto=6, summary="six \x1b[2J summarized"))
    store.release_lease(lease)
    monkeypatch.setenv("REDIS_URL", redis_url)
    capsys.readouterr()

    assert cli.main(["show", "local-long"]) == 0
    plain = capsys.readouterr().out
    assert plain.count(compaction_mark(6)) == 1 and "six" not in plain
    assert plain.index("message 5") < plain.index(compaction_mark(6)) < plain.index("message 6")
    assert all(f"message {i}" in plain for i in range(12))
    assert cli.main(["show", "local-long", "--compactions"]) == 0
    detailed = capsys.readouterr().out
    assert "(compaction summary: six" in detailed and "\x1b" not in detailed
    assert cli.main(["show", "local-long", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["upto"] for c in data["compactions"]] == [6] and data["compactions"][0]["summary"].startswith("six")
