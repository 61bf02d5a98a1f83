"""A tree's token budget under concurrent turns (issue 24: ``tokenBudget`` 3,000 shared by five concurrent tasks
ended at 4,186 tokens): each model call reserves its worst case before it starts (``state.tree_budget``), so the tree
ends at most one call's usage past its budget, whatever the number of turns running. Real redis-server, real turns
with the scripted model (which reports usage: words in, words out)."""

from __future__ import annotations

import threading
from typing import Any

import redis
from unicore.api.schema import Limits, TaskSpec, Usage
from unicore.store import acl, tree_budget
from unicore.store.client import build_client
from unicore.store.tasks import TaskStore
from unicore.turn.outcome import EXIT_OK, TurnOutcome

from tests.integration.conftest import TurnRunner
from tests.waiting import wait_for

CHILDREN = 5
PROMPT = " ".join(["word"] * 499)  # a call's usage: these words in, "ok" out
STEP = [{"sleep": 0.3, "text": "ok"}]  # each call takes a while: without reservations the five overlap


def no_system_prompt(_store: Any, _record: Any) -> str:
    return ""


def run_tree(store: TaskStore, turn: TurnRunner, root: str, budget: int) -> dict[str, TurnOutcome]:
    """A root with ``budget`` and CHILDREN children, whose first turns run at the same time."""
    store.create_task(TaskSpec(id=root, prompt="plan", limits=Limits(token_budget=budget, max_children=CHILDREN)))
    ids = [f"{root}-c{i}" for i in range(CHILDREN)]
    for child in ids:
        store.create_task(TaskSpec(id=child, parent=root, prompt=PROMPT, script={"tasks": {child: STEP}}))
    outcomes: dict[str, TurnOutcome] = {}
    threads = [threading.Thread(target=lambda c=child: outcomes.__setitem__(c, turn(
        c, system_prompt_builder=no_system_prompt))) for child in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == CHILDREN and all(o.exit_code == EXIT_OK for o in outcomes.values()), outcomes
    return outcomes


def tree_tokens(store: TaskStore, root: str) -> int:
    return int(store.redis.hget(store.keys(root).task, "tree_total_tokens") or 0)


def test_concurrent_turns_pass_the_budget_by_at_most_one_call(store: TaskStore, turn: TurnRunner) -> None:
    # one call's usage, measured on a tree without a budget
    run_tree(store, turn, "free", 0)
    usage = {int(store.get_task(f"free-c{i}").total_tokens) for i in range(CHILDREN)}
    assert len(usage) == 1
    (call,) = usage
    assert call == 500

    # at the bound: three calls leave the tree one token short of its budget, so a fourth may start, and it ends
    # the tree budget - 1 + one call past the budget; the fifth is refused
    budget = 3 * call + 1
    outcomes = run_tree(store, turn, "r", budget)
    assert tree_tokens(store, "r") == 4 * call == budget - 1 + call  # without reservations: 5 * call
    stopped = [o for o in outcomes.values() if "token budget of the tree" in o.note]
    assert len(stopped) == 1
    assert stopped[0].note == f"stopped: the token budget of the tree ({budget} tokens) is used up ({4 * call} used)"
    assert tree_budget.reserved(store.redis, "r") == {}  # every reservation given back


def test_a_reservation_is_refused_when_used_up_and_waits_while_others_hold_the_rest(
        store: TaskStore, redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="t", prompt="go", limits=Limits(token_budget=1000)))
    assert tree_budget.tree_budget(redis_client, "t") == 1000
    first = tree_budget.reserve(redis_client, "t", "a", 4096, 1000, 60_000)
    assert (first.outcome, first.used, first.held) == (tree_budget.ADMITTED, 0, 0)
    assert tree_budget.reserve(redis_client, "t", "b", 10, 1000, 60_000).outcome == tree_budget.HELD
    assert tree_budget.reserve(redis_client, "t", "a", 500, 1000, 60_000).outcome == tree_budget.ADMITTED  # replaced
    assert tree_budget.reserved(redis_client, "t") == {"a": 500}
    assert tree_budget.reserve(redis_client, "t", "b", 10, 1000, 60_000).outcome == tree_budget.ADMITTED
    tree_budget.release(redis_client, "t", "a")
    tree_budget.release(redis_client, "t", "b")
    lease = store.acquire_lease("t", holder="test")
    store.drain(lease, first_drain=True)
    store.append_message(lease, "assistant", [{"text": "ok"}],
                         usage=Usage(input_tokens=1000, output_tokens=0, total_tokens=1000))
    used_up = tree_budget.reserve(redis_client, "t", "c", 1, 1000, 60_000)
    assert (used_up.outcome, used_up.used) == (tree_budget.USED_UP, 1000)
    assert tree_budget.reserved(redis_client, "t") == {}


def test_the_reservation_of_a_turn_that_died_expires(store: TaskStore, redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="t", prompt="go", limits=Limits(token_budget=1000)))
    assert tree_budget.reserve(redis_client, "t", "dead", 5000, 1000, 200).outcome == tree_budget.ADMITTED
    assert tree_budget.reserve(redis_client, "t", "live", 10, 1000, 60_000).outcome == tree_budget.HELD
    wait_for(lambda: tree_budget.reserve(redis_client, "t", "live", 10, 1000, 60_000).outcome == tree_budget.ADMITTED,
             timeout=10, what="the dead turn's reservation to expire")
    assert tree_budget.reserved(redis_client, "t") == {"live": 10}
    assert 0 < redis_client.pttl(store.keys("t").budget) <= 60_000  # the key goes with its last reservation


def test_a_tree_without_a_budget_reserves_nothing(store: TaskStore, turn: TurnRunner) -> None:
    store.create_task(TaskSpec(id="n", prompt="hello", limits=Limits(token_budget=0),
                               script={"tasks": {"n": [{"text": "ok"}]}}))
    assert turn("n").exit_code == EXIT_OK
    assert not store.redis.exists(store.keys("n").budget)


def test_a_namespaces_own_redis_user_reserves_and_gives_back(redis_client: redis.Redis, redis_url: str,
                                                              tmp_path: Any) -> None:
    """A turn pod runs with its namespace's Redis user: the reservation script and its key are within its rights."""
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, "team-b", password)
    tenant = build_client(acl.identity_url(redis_url, acl.namespace_user("team-b"), password), decode_responses=True,
                          retry_for=0)
    try:
        TaskStore(redis_client).create_task(TaskSpec(id="team-b/t", prompt="go", limits=Limits(token_budget=10),
                                                     script={"tasks": {"t": [{"text": "a b c d e f g h i j k"}]}}))
        turn = TurnRunner(tenant, tmp_path)
        assert turn("team-b/t").exit_code == EXIT_OK
        assert turn("team-b/t").exit_code == EXIT_OK  # nothing new: no call
        TaskStore(redis_client).queue_text("team-b/t", "more")
        outcome = turn("team-b/t")
        assert outcome.exit_code == EXIT_OK and "token budget of the tree (10 tokens) is used up" in outcome.note
        assert tree_budget.reserved(redis_client, "team-b/t") == {}
    finally:
        tenant.close()
        acl.delete_namespace_user(redis_client, "team-b")
