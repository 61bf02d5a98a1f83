"""Per-namespace Redis identities on a real redis-server (issue 13, item 2).

A namespace's user (``unicore.store.acl``, applied with the admin client as the operator does) runs whole turns of
its own tasks in process (TurnRunner), with the Kubernetes spawner (the child's AgentTask create answered by a stand-in
that makes the child's record with the admin client, as the operator's create handler does): the turn, its heartbeats
and telemetry, a spawned child, the child's report reaching the parent and the parent's next turn. The same
credentials get NOPERM on another namespace's keys (read and write) and on reads of the shared index, stream,
heartbeats and telemetry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes.client.rest import ApiException
from redis.exceptions import AuthenticationError, NoPermissionError
from unicore.api.schema import TaskSpec
from unicore.launch.k8s_spawner import KubernetesSpawner
from unicore.store import acl
from unicore.store.client import build_client
from unicore.store.keys import (
    ACTIVATIONS_STREAM,
    CHANGES_STREAM,
    HEARTBEATS_INDEX,
    METRICS_COUNTERS,
    METRICS_GAUGES,
    METRICS_HISTOGRAMS,
    TASKS_INDEX,
    TaskKeys,
    namespace_activations_stream,
    namespace_changes_stream,
)
from unicore.store.model_cache import read_model_names, write_model_names
from unicore.store.slots import SpawnSlots
from unicore.store.tasks import TaskStore
from unicore.store.telemetry import Telemetry
from unicore.store.throttle import ThrottleState
from unicore_operator.redis_identities import identity_problem
from unicore_operator.settings import load_settings

from tests.integration.conftest import NoteTool, TurnRunner


class Identities:
    """Namespace users made with the admin client (what the operator does), and clients logged in as them."""

    def __init__(self, admin: redis.Redis, url: str) -> None:
        self.admin, self.url = admin, url
        self.made: list[str] = []
        self.clients: list[redis.Redis] = []

    def password(self, namespace: str) -> str:
        password = acl.new_password()
        acl.apply_namespace_user(self.admin, namespace, password)
        self.made.append(namespace)
        return password

    def url_of(self, namespace: str, password: str | None = None) -> str:
        return acl.identity_url(self.url, acl.namespace_user(namespace), password or self.password(namespace))

    def client(self, namespace: str, password: str | None = None) -> redis.Redis:
        client = build_client(self.url_of(namespace, password), decode_responses=True, retry_for=0)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for namespace in set(self.made):
            acl.delete_namespace_user(self.admin, namespace)


@pytest.fixture
def identities(redis_client: redis.Redis, redis_url: str) -> Iterator[Identities]:
    made = Identities(redis_client, redis_url)
    yield made
    made.close()


class OperatorStandIn:
    """The Kubernetes API a turn pod's spawner talks to, with the operator's part played by the admin store: a created
    child AgentTask gets its Redis record and its prompt (the operator's create handler), then an activation."""

    def __init__(self, admin: TaskStore, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.objects: dict[str, dict[str, Any]] = {}

    def add(self, name: str) -> None:
        self.objects[name] = {"metadata": {"name": name, "namespace": self.namespace, "uid": str(uuid.uuid4())},
                              "spec": {}}

    def get_namespaced_custom_object(self, _group: str, _version: str, namespace: str, _plural: str,
                                     name: str) -> dict[str, Any]:
        assert namespace == self.namespace
        if name not in self.objects:
            raise ApiException(status=404)
        return self.objects[name]

    def create_namespaced_custom_object(self, _group: str, _version: str, namespace: str, _plural: str,
                                        body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.objects:
            raise ApiException(status=409)
        self.objects[name] = body
        spec = body["spec"]
        parent = self.admin.get_task(f"{namespace}/{spec['parentRef']['name']}")
        self.admin.create_task(TaskSpec(id=f"{namespace}/{name}", prompt=spec["prompt"], parent=parent.id,
                                        model=parent.model, tools=spec["tools"], limits=parent.limits,
                                        script=parent.script))
        self.admin.activate(f"{namespace}/{name}", "created")
        return body


def spawn(name: str, prompt: str) -> dict[str, Any]:
    return {"name": "spawn_task", "input": {"name": name, "prompt": prompt}}


def test_a_turn_with_its_namespaces_own_user_runs_spawns_a_child_and_gets_its_report(
    redis_client: redis.Redis, identities: Identities, tmp_path: Path
) -> None:
    admin = TaskStore(redis_client)
    tenant = identities.client("team-a")
    script = {"tasks": {
        "root": [{"tool_use": [spawn("kid", "Find the answer.")]}, {"text": "Asked kid."}, {"echo": True}],
        "root-kid": [{"tool_use": [{"name": "note", "input": {"text": "looked"}}]}, {"text": "It is 42."}],
    }}
    admin.create_task(TaskSpec(id="team-a/root", prompt="Delegate.", script=script))  # the operator's part
    api = OperatorStandIn(admin, "team-a")
    api.add("root")
    runner = TurnRunner(tenant, tmp_path, extra_tools=[NoteTool()])
    seen_beats: list[float | None] = []
    runner.hooks["team-a/root"] = lambda _request: seen_beats.append(redis_client.zscore(HEARTBEATS_INDEX,
                                                                                            "team-a/root"))

    def run(task_id: str) -> Any:
        return runner(task_id, spawner=KubernetesSpawner(TaskStore(tenant), api, "team-a"))

    first = run("team-a/root")
    assert (first.exit_code, first.final_text, first.error) == (0, "Asked kid.", "")
    (spawned,) = [block["toolResult"] for message in admin.messages("team-a/root") for block in message.content
                  if "toolResult" in block]
    assert spawned["status"] == "success", spawned
    assert seen_beats and all(seen_beats), "the turn's heartbeat entry, written with the namespace's user"
    assert redis_client.zscore(HEARTBEATS_INDEX, "team-a/root") is None  # released: removed again
    kid = admin.get_task("team-a/root-kid")
    assert (kid.parent, kid.root, kid.depth) == ("team-a/root", "team-a/root", 1)
    assert SpawnSlots(redis_client).held("team-a/root") == {"children": 1, "descendants": 1}

    child = run("team-a/root-kid")
    assert (child.exit_code, child.final_text) == (0, "It is 42.")
    (report,) = admin.inbox("team-a/root")
    assert report.sender == "team-a/root-kid" and report.content.endswith("It is 42.")
    assert redis_client.hget(TaskKeys("team-a/root-kid").task, "report_id") == ""  # delivered and cleared

    second = run("team-a/root")
    assert second.exit_code == 0 and "It is 42." in second.final_text
    assert [t.turn_number for t in admin.load_history("team-a/root")] == [0, 1]
    activations = [(f["task"], f["reason"]) for _, f in redis_client.xrange(namespace_activations_stream("team-a"))]
    assert ("team-a/root", "completion:team-a/root-kid") in activations
    assert redis_client.xlen(ACTIVATIONS_STREAM) == 0  # the namespace's own stream, not the local one
    noted = [(f["task"], f["change"])  # the tree rows' changes, in the namespace's own stream
             for _, f in redis_client.xrange(namespace_changes_stream("team-a"))]
    kid_changes = [change for task, change in noted if task == "team-a/root-kid"]  # two model calls: tokens twice
    assert kid_changes == ["created", "turn_started", "turn", "tokens", "tokens", "turn_ended"]
    counters = redis_client.hgetall(METRICS_COUNTERS)
    assert float(counters["turns_started_total|"]) == 3 and float(counters["turns_finished_total|"]) == 3
    assert any(field.startswith("turn_duration_seconds||count") for field in redis_client.hgetall(METRICS_HISTOGRAMS))

    # the rest of what a turn does on Redis: heartbeats, gauges, the model throttle, the model-name cache
    store = TaskStore(tenant)
    lease = store.acquire_lease("team-a/root")
    store.renew_lease(lease)
    assert redis_client.zscore(HEARTBEATS_INDEX, "team-a/root") is not None
    assert store.release_lease(lease) and redis_client.zscore(HEARTBEATS_INDEX, "team-a/root") is None
    Telemetry(tenant).set_gauge("throttle_multiplier", 1.5, {"model": "m"})
    assert redis_client.hget(METRICS_GAUGES, "throttle_multiplier|model=m") == "1.5"
    throttle = ThrottleState(tenant, "bedrock:m")
    assert throttle.acquire(now="", window_ms=60_000, max_requests=5, max_tokens=0, estimate=10,
                            admission_id="a1", cooldown_ms=0)[0]
    throttle.commit("a1", 12)
    assert throttle.throttled(factor=2, max_multiplier=8, backoff_ms=1, now="") == 2_000_000
    assert throttle.succeeded(0.5) == 1_000_000 and throttle.multiplier() == 1.0
    write_model_names(tenant, "us-east-1", {"claude": "anthropic.claude-v1"}, 60)
    assert read_model_names(tenant, "us-east-1") == {"claude": "anthropic.claude-v1"}


OTHER_NAMESPACE_CALLS: dict[str, Any] = {  # (store, client, task id) -> a read or write of that task
    "read the record": lambda store, _c, task: store.get_task(task),
    "read the inbox": lambda store, _c, task: store.inbox(task),
    "read the conversation": lambda store, _c, task: store.load_history(task),
    "check it exists": lambda store, _c, task: store.exists(task),
    "read its children": lambda store, _c, task: store.children(task),
    "read its heartbeat": lambda _s, client, task: client.get(TaskKeys(task).heartbeat),
    "queue a message (script)": lambda store, _c, task: store.queue_text(task, "injected"),
    "take its lease (script)": lambda store, _c, task: store.acquire_lease(task),
    "HSET its record": lambda _s, client, task: client.hset(TaskKeys(task).task, "status", "running"),
    "DEL its messages": lambda _s, client, task: client.delete(TaskKeys(task).messages),
    "RPUSH its inbox": lambda _s, client, task: client.rpush(TaskKeys(task).inbox, "{}"),
    "EVAL on its keys": lambda _s, client, task: client.eval("return redis.call('HGET', KEYS[1], 'id')", 1,
                                                             TaskKeys(task).task),
    "reserve a child slot (script)": lambda _s, client, task: SpawnSlots(client).reserve(
        parent_id=task, root_id=task, child_id=f"{task}-x", max_children=5, max_descendants=5),
}


@pytest.mark.parametrize("call", sorted(OTHER_NAMESPACE_CALLS))
@pytest.mark.parametrize("other", ["team-b/secret", "team-a-2/near"])  # also a namespace whose name starts alike
def test_another_namespaces_keys_answer_noperm_to_read_and_write(
    call: str, other: str, redis_client: redis.Redis, identities: Identities
) -> None:
    admin = TaskStore(redis_client)
    for task_id in (other, "team-a/own"):
        admin.create_task(TaskSpec(id=task_id, prompt=f"the prompt of {task_id}"))
    tenant = identities.client("team-a")
    store = TaskStore(tenant)
    assert store.get_task("team-a/own").id == "team-a/own"  # its own namespace works
    with pytest.raises(NoPermissionError):
        OTHER_NAMESPACE_CALLS[call](store, tenant, other)
    assert [m.content for m in admin.inbox(other)] == [f"the prompt of {other}"]
    assert admin.get_task(other).status == "idle" and len(admin.load_history(other)) == 0


def test_a_namespaces_scripts_cannot_reach_into_another_and_the_operators_records_are_not_its(
    redis_client: redis.Redis, identities: Identities
) -> None:
    admin = TaskStore(redis_client)
    for task_id in ("team-b/secret", "team-a/own"):
        admin.create_task(TaskSpec(id=task_id, prompt="hi"))
    tenant = identities.client("team-a")
    with pytest.raises(redis.ResponseError, match="can't access"):
        tenant.eval("return redis.call('HGET', 'uc:{team-b/secret}:task', 'id')", 1, TaskKeys("team-a/own").task)
    # the operator's own records of the namespace's tasks (failure counts, retry times) are not the tenant's
    own = TaskKeys("team-a/own")
    for key in (own.operator, own.operator_jobs, own.operator_reaped):
        with pytest.raises(NoPermissionError):
            tenant.exists(key)


B_ACTIVATIONS, A_ACTIVATIONS = namespace_activations_stream("team-b"), namespace_activations_stream("team-a")
MAX_ID = "18446744073709551615-18446744073709551615"
SHARED_READS = {
    "activation stream XRANGE": lambda c: c.xrange(B_ACTIVATIONS),
    "activation stream XREAD": lambda c: c.xread({B_ACTIVATIONS: "0"}),
    "activation stream XREADGROUP": lambda c: c.xreadgroup("operator", "me", {B_ACTIVATIONS: "0"}),
    "activation stream XLEN": lambda c: c.xlen(B_ACTIVATIONS),
    "own activation stream XRANGE": lambda c: c.xrange(A_ACTIVATIONS),
    "change stream XREAD": lambda c: c.xread({namespace_changes_stream("team-b"): "0"}),
    "change stream XREVRANGE": lambda c: c.xrevrange(namespace_changes_stream("team-b"), count=1),
    # issue 25: an entry with the largest id, or MAXLEN 0, in a stream others use stopped their wake-ups
    "another namespace's activation stream XADD": lambda c: c.xadd(B_ACTIVATIONS, {"task": "x"}, id=MAX_ID),
    "another namespace's activation stream MAXLEN 0": lambda c: c.xadd(B_ACTIVATIONS, {"task": "x"}, maxlen=0),
    "another namespace's change stream XADD": lambda c: c.xadd(namespace_changes_stream("team-b"), {"task": "x"},
                                                               id=MAX_ID),
    "the local activation stream XADD": lambda c: c.xadd(ACTIVATIONS_STREAM, {"task": "x"}, id=MAX_ID),
    "the local change stream XADD": lambda c: c.xadd(CHANGES_STREAM, {"task": "x"}, id=MAX_ID),
    "task index ZRANGE": lambda c: c.zrange(TASKS_INDEX, 0, -1),
    "task index ZADD": lambda c: c.zadd(TASKS_INDEX, {"team-b/fake": 1}),
    "heartbeat index ZRANGE": lambda c: c.zrange(HEARTBEATS_INDEX, 0, -1, withscores=True),
    "heartbeat index ZSCORE": lambda c: c.zscore(HEARTBEATS_INDEX, "team-b/secret"),
    "telemetry counters HGETALL": lambda c: c.hgetall(METRICS_COUNTERS),
    "telemetry histograms HGETALL": lambda c: c.hgetall(METRICS_HISTOGRAMS),
    "telemetry gauges HGET": lambda c: c.hget(METRICS_GAUGES, "x"),
    "KEYS": lambda c: c.keys("*"),
    "SCAN": lambda c: c.scan(0, match="uc:*"),
    "RANDOMKEY": lambda c: c.randomkey(),
    "INFO": lambda c: c.info(),
    "CLIENT LIST": lambda c: c.client_list(),
    "CONFIG GET": lambda c: c.config_get("*"),
    "ACL LIST": lambda c: c.acl_list(),
    "FLUSHALL": lambda c: c.flushall(),
    "SCRIPT FLUSH": lambda c: c.script_flush(),
    "SLOWLOG GET": lambda c: c.slowlog_get(),
    "PUBLISH": lambda c: c.publish("uc:anything", "x"),
    "fault harness SET": lambda c: c.set("uc:faults:x", "1", nx=True),
}


@pytest.mark.parametrize("what", sorted(SHARED_READS))
def test_reads_of_what_other_tenants_share_are_refused(
    what: str, redis_client: redis.Redis, identities: Identities
) -> None:
    admin = TaskStore(redis_client)
    admin.create_task(TaskSpec(id="team-b/secret", prompt="hush"))
    admin.activate("team-b/secret", "created")
    redis_client.xgroup_create(B_ACTIVATIONS, "operator", id="0")
    redis_client.zadd(HEARTBEATS_INDEX, {"team-b/secret": 1.0})
    Telemetry(redis_client).incr("turns_started_total")
    tenant = identities.client("team-a")
    with pytest.raises(NoPermissionError):
        SHARED_READS[what](tenant)
    assert redis_client.zrange(TASKS_INDEX, 0, -1) == ["team-b/secret"]  # nothing was flushed or changed
    assert redis_client.exists(TaskKeys("team-b/secret").task)
    assert redis_client.xlen(B_ACTIVATIONS) == 1


def test_a_namespace_that_poisons_its_own_activation_stream_stops_no_other_and_loses_no_message(
    redis_client: redis.Redis, identities: Identities
) -> None:
    """Issue 25: XADD with the largest id (or MAXLEN 0) is all a namespace's user can do to a stream, and only to its
    own: the other namespaces' activations go on, and its own sends still queue (the resync starts them)."""
    admin = TaskStore(redis_client)
    for task_id in ("team-a/own", "team-b/work"):
        admin.create_task(TaskSpec(id=task_id, prompt="hi"))
    tenant = identities.client("team-a")
    tenant.xadd(A_ACTIVATIONS, {"task": "team-a/own"}, maxlen=0)  # its own stream emptied: its own loss only
    tenant.xadd(A_ACTIVATIONS, {"task": "team-a/own"}, id=MAX_ID)
    assert admin.activate("team-a/own", "message") == ""  # refused by the stream: logged, not raised
    assert admin.queue_text("team-a/own", "still queued", message_id="m-1")
    assert [m.id for m in admin.inbox("team-a/own")][-1] == "m-1"
    assert admin.activate("team-b/work", "message")  # another namespace: unaffected
    assert [f["task"] for _, f in redis_client.xrange(B_ACTIVATIONS)][-1] == "team-b/work"


def test_the_user_is_idempotent_and_a_new_password_replaces_the_old(
    redis_client: redis.Redis, identities: Identities, redis_url: str
) -> None:
    first = identities.password("team-a")
    acl.apply_namespace_user(redis_client, "team-a", first)  # again: same user, same rules
    assert identities.client("team-a", first).ping()
    rules = redis_client.acl_getuser(acl.namespace_user("team-a"))
    assert rules["enabled"] and len(rules["passwords"]) == 1
    # + its own streams' XADD, + the GET of its namespace's agent definitions, + the reads of its tasks' decisions,
    # + the EXISTS of its tasks' scripted-model gates, + its warm pods' records and their assignments' reads
    assert len(rules["selectors"]) == len(acl.SHARED_SELECTORS) + 6
    second = identities.password("team-a")  # rotation: the next apply with a new password
    with pytest.raises(AuthenticationError):
        build_client(acl.identity_url(redis_url, acl.namespace_user("team-a"), first), retry_for=0).ping()
    assert identities.client("team-a", second).ping()
    # a Redis that lost its users (a restart without an aclfile): applying again from the stored password heals it
    acl.delete_namespace_user(redis_client, "team-a")
    with pytest.raises(AuthenticationError):
        build_client(acl.identity_url(redis_url, acl.namespace_user("team-a"), second), retry_for=0).ping()
    acl.apply_namespace_user(redis_client, "team-a", second)
    assert identities.client("team-a", second).ping()


def test_the_rights_check_passes_for_an_admin_and_says_in_one_line_why_not_otherwise(
    redis_client: redis.Redis, identities: Identities, redis_url: str
) -> None:
    acl.check_acl_rights(redis_client)
    assert acl.CHECK_USER not in acl.acl_users(redis_client)  # the probe user is gone again
    redis_client.acl_setuser("no-acl-rights", enabled=True, passwords=["+pw"], commands=["+@all", "-@admin"],
                             keys=["*"], reset=True)
    try:
        limited = build_client(acl.identity_url(redis_url, "no-acl-rights", "pw"), retry_for=0)
        with pytest.raises(acl.AclUnavailable) as caught:
            acl.check_acl_rights(limited)
        message = str(caught.value)
        assert "\n" not in message and "'no-acl-rights' may not manage ACL users (NOPERM" in message
        assert "+acl|setuser" in message
        limited.close()
        # the operator's start-up check says the same, and nothing when Redis cannot be reached yet
        on = {"UNICORE_REDIS_IDENTITIES": "true"}
        problem = identity_problem(load_settings({**on, "REDIS_URL": acl.identity_url(redis_url, "no-acl-rights",
                                                                                           "pw")}))
        assert problem == f"UNICORE_REDIS_IDENTITIES is on, but {message} (UNICORE_REDIS_IDENTITIES=false)"
        assert identity_problem(load_settings({**on, "REDIS_URL": redis_url})) is None
        assert identity_problem(load_settings({**on, "REDIS_URL": "redis://127.0.0.1:1/0"})) is None
        assert identity_problem(load_settings({"REDIS_URL": acl.identity_url(redis_url, "no-acl-rights", "pw")})) \
            is None  # identities off: nothing to check
    finally:
        redis_client.acl_deluser("no-acl-rights")
