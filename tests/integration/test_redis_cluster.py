"""The Redis-facing integration tests on a real 3-master Redis Cluster (``REDIS_URL=redis+cluster://host:port``).

A session fixture starts the cluster (``tests.redis_cluster``); this module overrides ``redis_url`` and
``redis_client`` so that the shared ``store`` and ``turn`` fixtures (tests/integration/conftest.py) run on a
``redis.cluster.RedisCluster`` built by ``unicore.store.client.build_client``. Existing single-Redis tests are
re-collected here by importing them (store, drain, fencing and leases, approvals and ask_user, the seed sequences
with full in-process turns, the stream of task changes and the UI's tree feed, spawning with LocalSpawner, the
watchdog's heartbeat-index reads, turns under a namespace's own ACL user, made on every node, and its NOPERMs); the
rest are cluster-only checks
(activations consumer groups, telemetry, slots, the operator's RedisState, the async client).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from unicore.api.schema import TaskSpec
from unicore.launch.local_spawner import LocalSpawner
from unicore.store import heartbeats
from unicore.store.activations import AsyncActivationConsumer, read_streams
from unicore.store.client import build_async_client, build_client, cluster_seed_url
from unicore.store.keys import (
    ACTIVATIONS_STREAM,
    HEARTBEATS_INDEX,
    METRICS_COUNTERS,
    METRICS_GAUGES,
    METRICS_HISTOGRAMS,
    TASKS_INDEX,
    TaskKeys,
    namespace_activations_stream,
)
from unicore.store.slots import SpawnSlots
from unicore.store.tasks import TaskStore
from unicore.store.telemetry import Telemetry
from unicore_operator import names
from unicore_operator.metrics.state_collector import inbox_depths
from unicore_operator.redis_state import RedisState

# Re-collected on the cluster (pytest runs every test function found in this module's namespace).
from tests.integration.test_approvals_state import (  # noqa: F401 (the approvals' scripts on the cluster)
    test_a_decision_retried_after_a_lost_reply_answers_as_the_first_run,
    test_a_second_approval_of_the_same_call_changes_nothing,
    test_a_user_message_answers_a_question_and_leaves_the_inbox,
    test_an_approved_call_starts_once_and_resolves_once,
    test_expire_overdue_denies_only_old_approvals,
    test_the_wake_up_is_queued_once_nothing_is_pending_and_the_task_is_activated,
    waiting,
)
from tests.integration.test_approvals_turn import (  # noqa: F401 (gated turns and ask_user on the cluster)
    gated,
    test_an_approved_call_runs_once_after_the_decision_and_the_conversation_goes_on,
    test_ask_user_waits_and_the_next_user_message_is_its_result,
)
from tests.integration.test_fencing import (  # noqa: F401
    test_a_live_lease_refuses_a_second_turn,
    test_a_turn_reaped_during_its_model_call_writes_nothing_afterwards,
    test_a_zombie_turn_cannot_write_after_its_lease_expired_and_was_taken,
)
from tests.integration.test_live_stream import (  # noqa: F401 (the live token stream on the cluster)
    test_a_local_turn_streams_its_answer_before_the_turn_ends,
    test_a_new_try_is_marked_and_the_reader_starts_at_the_call_in_progress,
    test_the_first_delta_goes_out_at_once_and_later_ones_are_batched,
)
from tests.integration.test_redis_identities import (  # noqa: F401  (the ACL users are made on every node)
    identities,
    test_a_turn_with_its_namespaces_own_user_runs_spawns_a_child_and_gets_its_report,
    test_another_namespaces_keys_answer_noperm_to_read_and_write,
    test_reads_of_what_other_tenants_share_are_refused,
)
from tests.integration.test_sequences import (
    test_bug_1_tool_results_reach_the_conversation,  # noqa: F401
    test_bug_2_recreating_an_existing_task_never_overwrites_its_conversation,  # noqa: F401
    test_bug_3_messages_go_to_the_turn_just_created,  # noqa: F401
    test_bug_4_no_new_turn_while_the_task_is_running,  # noqa: F401
    test_sequence_1_new_task_creation,  # noqa: F401
    test_sequence_2_continuing_conversation_starts_a_new_turn_and_keeps_history,  # noqa: F401
    test_sequence_3_tool_results_stay_in_the_current_turn_batched_in_one_message,  # noqa: F401
)
from tests.integration.test_sequences import (
    test_sequence_4_parent_spawns_child_which_sees_the_parent_and_reports_back as _sequence_4,
)
from tests.integration.test_sequences import (
    test_sequence_5_child_completing_while_parent_runs_joins_the_current_turn as _sequence_5,
)
from tests.integration.test_sequences import (
    test_sequence_6_child_completing_while_parent_is_stopped_starts_a_new_turn as _sequence_6,
)
from tests.integration.test_sequences import (
    test_sequence_7_simultaneous_completions_land_in_one_new_turn_as_separate_messages as _sequence_7,
)
from tests.integration.test_task_changes import (  # noqa: F401 (the change stream: XADDs beside the scripts)
    test_a_change_that_cannot_be_noted_fails_no_write,
    test_a_gated_call_notes_the_wait_and_the_decision,
    test_retention_notes_the_tasks_it_archives_and_removes,
    test_store_writes_that_change_a_tree_row_each_note_it_and_nothing_else_does,
    test_suspend_and_resume_note_the_change_and_a_repeat_does_not,
    test_the_tree_feed_resyncs_when_an_entry_was_lost,
    test_the_tree_feed_sends_a_change_without_polling,
)
from tests.integration.test_throttle import (  # noqa: F401
    test_acquire_waits_with_the_injected_sleeper,
    test_keys_share_one_hash_tag_and_expire,
    test_multiplier_rises_on_throttling_decays_on_success,
    test_multiplier_spaces_calls_without_limits,
    test_request_limit_sliding_window,
    test_token_limit_uses_estimates_then_real_usage,
)
from tests.integration.test_tools_tasks import test_message_task_reaches_a_descendant as _message_descendant
from tests.integration.test_tools_tasks import test_spawn_creates_a_child_with_inherited_settings as _spawn_child
from tests.integration.test_tools_tasks import test_spawning_an_existing_child_sends_it_a_message as _spawn_again
from tests.integration.test_tools_tasks import test_task_status_on_a_small_tree as _status_tree
from tests.integration.test_watchdog_heartbeats import (  # noqa: F401
    test_a_stale_entry_refreshed_meanwhile_is_kept,
    test_deleting_a_running_task_and_reaping_a_turn_remove_the_entry,
    test_only_stale_missing_and_flagged_tasks_are_read_and_the_reaps_match_a_full_read,
    test_the_turn_keeps_its_heartbeat_entry_from_acquire_to_release,
)
from tests.redis_cluster import RedisClusterServer

test_sequence_4_on_the_cluster = _sequence_4
test_sequence_5_on_the_cluster = _sequence_5
test_sequence_6_on_the_cluster = _sequence_6
test_sequence_7_on_the_cluster = _sequence_7
test_message_task_reaches_a_descendant_on_the_cluster = _message_descendant
test_spawn_creates_a_child_on_the_cluster = _spawn_child
test_spawning_an_existing_child_on_the_cluster = _spawn_again
test_task_status_on_a_small_tree_on_the_cluster = _status_tree


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    cluster = RedisClusterServer()
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_url(redis_cluster: RedisClusterServer) -> str:
    """Overrides tests/conftest.py's: the cluster's REDIS_URL, every master flushed."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """Overrides tests/conftest.py's: what ``REDIS_URL`` gives the runtime (a RedisCluster decoding to str)."""
    client = build_client(redis_url, decode_responses=True)
    yield client
    client.close()


def test_redis_url_names_a_cluster_by_its_scheme(redis_client: redis.Redis, redis_cluster: RedisClusterServer) -> None:
    assert isinstance(redis_client, RedisCluster)
    assert len(redis_client.get_primaries()) == 3
    assert cluster_seed_url("redis+cluster://u:p@h:7000") == "redis://u:p@h:7000"
    assert cluster_seed_url("rediss+cluster://h:7000") == "rediss://h:7000"
    assert cluster_seed_url("redis://h:6379/0") is None and cluster_seed_url("unix:///tmp/r.sock") is None
    assert not isinstance(build_client(redis_cluster.seed_url), RedisCluster)  # a plain URL: one node


def test_a_tasks_keys_share_one_slot_and_tasks_spread_over_the_masters(redis_client: RedisCluster) -> None:
    slots = {redis_client.keyslot(key) for key in TaskKeys("ns/one").all()}
    assert len(slots) == 1
    nodes = {redis_client.nodes_manager.get_node_from_slot(redis_client.keyslot(TaskKeys(f"ns/t{i}").task)).name
             for i in range(30)}
    assert len(nodes) == 3  # the scenarios below really cross masters


def test_store_round_trip_leases_and_delete(store: TaskStore, redis_client: redis.Redis) -> None:
    assert store.create_task(TaskSpec(id="ns/root", prompt="hello"))
    assert store.create_task(TaskSpec(id="ns/kid", parent="ns/root", prompt="hi"))
    assert store.list_tasks() == ["ns/root", "ns/kid"] and store.children("ns/root") == ["ns/kid"]
    lease = store.acquire_lease("ns/root", holder="pod-a:1")
    store.renew_lease(lease)
    assert redis_client.zscore(HEARTBEATS_INDEX, "ns/root") is not None
    drained = store.drain(lease, first_drain=True)
    assert drained.drained == 1 and drained.new_turn
    store.append_message(lease, "assistant", [{"text": "hello back"}])
    store.end_turn(lease, drained.turn_number, last_response="hello back")
    (turn,) = store.load_history("ns/root")
    assert [m.role for m in turn.messages] == ["user", "assistant"] and turn.ended_at is not None
    assert store.release_lease(lease)
    assert redis_client.zscore(HEARTBEATS_INDEX, "ns/root") is None
    other = store.acquire_lease("ns/root", holder="pod-b:7")
    assert store.break_lease("ns/root", "pod-b:", exact=False)
    assert store.lease_holder("ns/root") is None and other.token > lease.token
    store.delete_task("ns/kid")
    assert not store.exists("ns/kid") and store.children("ns/root") == []
    assert redis_client.zrange(TASKS_INDEX, 0, -1) == ["ns/root"]
    assert not list(redis_client.scan_iter(match=TaskKeys("ns/kid").pattern()))


def test_activations_reach_sync_and_async_consumer_groups(store: TaskStore, redis_client: redis.Redis,
                                                          redis_url: str) -> None:
    redis_client.xgroup_create(ACTIVATIONS_STREAM, "local", id="$", mkstream=True)  # the local supervisor's calls
    store.activate("a", "test")
    reply = redis_client.xreadgroup("local", "me", {ACTIVATIONS_STREAM: ">"}, count=100, block=100)
    ((_stream, entries),) = reply
    assert [fields["task"] for _, fields in entries] == ["a"]
    assert redis_client.xack(ACTIVATIONS_STREAM, "local", *[entry_id for entry_id, _ in entries]) == 1

    stream = namespace_activations_stream("ns")
    store.activate("ns/a", "test")  # an AgentTask's activation: its namespace's own stream

    async def operator_side() -> list[str]:  # unicore_operator.activation's calls, on the async cluster client
        client = build_async_client(redis_url)
        assert isinstance(client, AsyncRedisCluster)
        group = names.OPERATOR_CONSUMER_GROUP
        try:
            await AsyncActivationConsumer(client, group, "op-1", stream).ensure_group()
            assert await read_streams(client, group, "op-1", {stream: "0"}, count=10, block=None) == []
            read = await read_streams(client, group, "op-1", {stream: ">"}, count=10, block=100)
            assert [(entry.task_id, entry.stream) for entry in read] == [("ns/a", stream)]
            claimed = await AsyncActivationConsumer(client, group, "op-2", stream).claim(0, count=10)
            assert [entry.entry_id for entry in claimed] == [entry.entry_id for entry in read]
            await AsyncActivationConsumer(client, group, "op-2", stream).ack(claimed)
            return [entry.task_id for entry in read]
        finally:
            await client.aclose()

    assert asyncio.run(operator_side()) == ["ns/a"]


def test_telemetry_writes_its_global_hashes(redis_client: redis.Redis) -> None:
    telemetry = Telemetry(redis_client, buckets=(1, 5))
    telemetry.incr("model_calls_total", {"model": "m"})
    telemetry.set_gauge("queue_depth", 3)
    telemetry.observe("turn_seconds", 2.0, {"outcome": "ok"})
    assert redis_client.hgetall(METRICS_COUNTERS) == {"model_calls_total|model=m": "1"}
    assert redis_client.hgetall(METRICS_GAUGES) == {"queue_depth|": "3"}
    assert redis_client.hgetall(METRICS_HISTOGRAMS) == {
        "turn_seconds|outcome=ok|le=5": "1", "turn_seconds|outcome=ok|le=+Inf": "1",
        "turn_seconds|outcome=ok|sum": "2", "turn_seconds|outcome=ok|count": "1",
    }


def test_spawn_slots_reserve_on_the_parent_and_root_tags(store: TaskStore) -> None:
    slots = SpawnSlots(store.redis)
    slots.reserve(parent_id="ns/p", root_id="ns/r", child_id="ns/p-a", max_children=1, max_descendants=5)
    assert slots.held("ns/p")["children"] == 1 and slots.held("ns/r")["descendants"] == 1
    slots.release(parent_id="ns/p", root_id="ns/r", child_id="ns/p-a")
    assert slots.held("ns/p") == {"children": 0, "descendants": 0} and slots.held("ns/r")["descendants"] == 0


def test_local_spawner_reserves_the_slots_on_the_cluster(store: TaskStore) -> None:
    store.create_task(TaskSpec(id="ns/boss", prompt="go"))
    child, created = LocalSpawner(store).spawn("ns/boss", "kid", "work", None)
    assert created and store.get_task(child).parent == "ns/boss"
    assert SpawnSlots(store.redis).held("ns/boss") == {"children": 1, "descendants": 1}


def test_the_watchdog_pipeline_fallback_on_the_cluster(store: TaskStore, redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="team/run", prompt=None))
    store.create_task(TaskSpec(id="team/idle", prompt=None))
    lease = store.acquire_lease("team/run", holder="run-t1-x:1")
    ids = ["team/run", "team/idle", "team/gone"]
    states = heartbeats._read_running(redis_client, ids)  # the cluster path: plain reads, no cross-slot script
    assert list(states) == ["team/run"] and states["team/run"].lease_token == str(lease.token)
    assert heartbeats.read_not_running(redis_client, ids)["team/gone"].status == ""
    assert heartbeats.TurnReset(redis_client)("team/run", str(lease.token), time.time(), "test")
    assert redis_client.zscore(HEARTBEATS_INDEX, "team/run") is None


def test_the_operators_redis_state(store: TaskStore, redis_url: str) -> None:
    store.create_task(TaskSpec(id="team/op", prompt="hi"))
    store.create_task(TaskSpec(id="team/op-kid", parent="team/op", prompt=None))
    store.acquire_lease("team/op", holder="op-t1-x:1")

    async def check() -> None:
        state = RedisState(redis_url)
        try:
            assert isinstance(state.aio, aioredis.RedisCluster)
            snap = await state.snapshot("team/op", ended_jobs=["op-t1"])
            assert snap.exists and snap.pending == 1 and snap.lease_held and snap.unrecorded_jobs == ("op-t1",)
            assert snap.children == ("team/op-kid",)  # read in the same round trip (reconcile.children_of)
            assert state.account_job_end("team/op", "op-t1", 1, "failed", "boom") == 1
            assert state.account_job_end("team/op", "op-t1", 1, "failed", "boom") == -1
            assert state.break_lease("team/op", "op-t1-x")
            assert set(state.task_keys("team/op")) >= {TaskKeys("team/op").task, TaskKeys("team/op").operator}
        finally:
            await state.close()

    asyncio.run(check())


def test_the_operators_inbox_depth_gauge_on_the_cluster(store: TaskStore, redis_client: redis.Redis) -> None:
    for name in ("a", "b", "c"):
        store.create_task(TaskSpec(id=f"team/{name}", prompt="hi"))
    assert inbox_depths(redis_client, ["team/a", "team/b", "team/c"]) == {"team/a": 1, "team/b": 1, "team/c": 1}
