"""The tenant boundary on the Redis side (issue 25): a namespace's own Redis user can write its tasks' records and
children sets, and the operator, the task API and the reports act with the admin connection, so no link read from
those is followed into another namespace, and an owed report goes only where the API server says (real redis-server).
The writes below are what code in a turn pod of ``team-a`` may send with ``team-a``'s Redis user."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore
from unicore.store.tree_reads import descendants
from unicore.turn.reports import deliver_report, report_failure
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

A, B = "team-a", "team-b"
ATTACKER, VICTIM = f"{A}/mole", f"{B}/victim"


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    made = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    made.create_task(TaskSpec(id=ATTACKER, prompt="hello"))
    made.create_task(TaskSpec(id=VICTIM, prompt="private work"))
    made.redis.hset(TaskKeys(VICTIM).task, mapping={"last_response": "B's secret answer"})
    return made


def _owe(store: TaskStore, task_id: str, parent: str, report_id: str, text: str = "INJECTED BY TEAM-A") -> None:
    """What a turn pod of the task's namespace can write into its own record."""
    store.redis.hset(TaskKeys(task_id).task, mapping={"parent": parent, "report_id": report_id, "report": text})


def _inbox_ids(store: TaskStore, task_id: str) -> list[str]:
    return [m.id for m in store.inbox(task_id)]


def test_an_owed_report_never_crosses_into_another_namespace(store: TaskStore) -> None:
    before = _inbox_ids(store, VICTIM)
    _owe(store, ATTACKER, VICTIM, f"completion:{ATTACKER}:0")
    assert deliver_report(store, ATTACKER) is True  # it was owed, and it is cleared ...
    assert _inbox_ids(store, VICTIM) == before  # ... but nothing reached team-b's task
    assert store.redis.hget(TaskKeys(ATTACKER).task, "report_id") in (None, "")


def test_a_report_id_of_another_child_is_refused_and_the_real_report_still_arrives(store: TaskStore) -> None:
    parent, real_child = f"{A}/boss", f"{A}/boss-real"
    store.create_task(TaskSpec(id=parent, prompt="lead"))
    store.create_task(TaskSpec(id=real_child, parent=parent, prompt="work"))
    forged_id = f"completion:{real_child}:0"
    _owe(store, ATTACKER, parent, forged_id, "a fake report")
    deliver_report(store, ATTACKER)
    assert forged_id not in _inbox_ids(store, parent)
    _owe(store, real_child, parent, forged_id, "the real report")
    deliver_report(store, real_child, expected_parent=parent)
    reports = [m for m in store.inbox(parent) if m.id == forged_id]
    assert len(reports) == 1 and "the real report" in str(reports[0].content)


def test_the_operator_delivers_only_to_the_parent_the_api_server_names(store: TaskStore) -> None:
    parent, other = f"{A}/boss", f"{A}/bystander"
    store.create_task(TaskSpec(id=parent, prompt="lead"))
    store.create_task(TaskSpec(id=other, prompt="idle"))
    _owe(store, ATTACKER, other, f"completion:{ATTACKER}:3")
    deliver_report(store, ATTACKER, expected_parent=parent)
    assert f"completion:{ATTACKER}:3" not in _inbox_ids(store, other)
    _owe(store, ATTACKER, parent, f"completion:{ATTACKER}:4", "legit")
    deliver_report(store, ATTACKER, expected_parent=parent)
    assert f"completion:{ATTACKER}:4" in _inbox_ids(store, parent)


def test_a_failure_report_never_crosses_into_another_namespace(store: TaskStore) -> None:
    before = _inbox_ids(store, VICTIM)
    store.redis.hset(TaskKeys(ATTACKER).task, "parent", VICTIM)
    assert report_failure(store, ATTACKER, "boom") is False
    assert report_failure(store, ATTACKER, "boom", expected_parent="") is False
    assert _inbox_ids(store, VICTIM) == before


def test_children_in_another_namespace_are_never_read(store: TaskStore) -> None:
    own_child = f"{ATTACKER}-kid"
    store.create_task(TaskSpec(id=own_child, parent=ATTACKER, prompt="kid"))
    store.redis.zadd(TaskKeys(ATTACKER).children, {VICTIM: 1})  # the turn pod's write
    assert store.children(ATTACKER) == [own_child]
    assert [node.id for node in descendants(store.redis, ATTACKER)] == [own_child]
    objects: list[dict[str, Any]] = [{"metadata": {"namespace": A, "name": "mole"}}]
    api = TaskApi(store, static_lookup(lambda: objects))
    tree = answer(api, "GET", f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{A}/agenttasks/mole/tree", "",
                  sender="user:alice")
    assert tree.status == 200
    assert [node["id"] for node in tree.body["nodes"]] == [ATTACKER, own_child]
    assert "B's secret answer" not in str(tree.body)
