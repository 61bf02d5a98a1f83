"""Chaos on the real control plane (issue 10): a 3-level scripted tree run by the operator (root ``r`` -> ``r-a``,
``r-b`` -> leaves ``r-a-a``, ``r-b-a``) is hit by one fault while its leaves are mid-turn (lease held, prompt
drained, inside a model call): a turn container SIGKILLed twice, Redis restarted from its AOF (appendfsync everysec,
then always), the operator SIGKILLed and restarted, the API server paused (SIGSTOP ~10 s), a leaf's pod deleted, a
leaf's Job deleted.

The faults to a turn's container, pod or Job (``kill-leaf-twice``, ``delete-leaf-pod``, ``delete-leaf-job``) run on
the real node (containerd + kubelet, the agent image; the container killed from outside with ``ctr tasks kill``, a
deleted pod's container stopped by the kubelet), where what the kubelet does with a dying container is what is
tested; Redis there is the node IP's (no AOF: these faults do not touch it). The faults to Redis, the operator and
the API server are about delivery, not the container: they run on the pod runner (turn pods as host processes),
with a private AOF Redis on a unix socket that the test SIGKILLs and starts again.

The leaves' model call lasts until the test opens their gates, once the fault is in place; in the Redis restarts,
where the call must end while Redis is down (and a gate is read from Redis), it sleeps instead. Every scenario must
settle (every AgentTask Idle, Redis quiet) within 60 s of the fault, with every prompt and child report stored
exactly once and valid model requests (``check_tree``, the same checks as the local fault-injection harness).

Every scenario runs the same helper (start tree -> wait for the leaves to be mid-turn -> inject -> wait to settle
-> check_tree) plus a check that the fault happened and cost what it should (retried attempts, Events).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore

from tests.cluster.conftest import on_real_node
from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, task_events, turn_pod_logs
from tests.cluster.real_node import kill_pod_container
from tests.integration.fault_harness import check_tree, leafy_tree_script
from tests.waiting import WaitTimeout, wait_for

pytestmark = pytest.mark.cluster

SETTLE_AFTER_FAULT = 60.0  # the tree settles within this many seconds of the (first) fault
# each leaf's first model call in the Redis restarts: long enough for both leaves to be mid-turn at once, and to end
# while Redis is down (the other scenarios' leaves wait at a gate instead: a gate is read from Redis)
LEAF_SLEEP = 8.0
GATE = "fault-in-place"  # the other scenarios' leaves' first model call waits until the test opens it
PAUSE_SECONDS = 10.0  # scenario apiserver-pause: how long the API server stays stopped
TREE = ("r", "r-a", "r-a-a", "r-b", "r-b-a")
LEAVES = ("r-a-a", "r-b-a")
KILLED = "container turn: Error (exit code 137: killed by SIGKILL)"  # a TurnFailed Event's words for a killed one
OPERATOR_ENV = {
    "UNICORE_MAX_REAPS": "3",
    "UNICORE_MAX_TURN_RETRIES": "3",
    "UNICORE_TURN_RETRY_BACKOFF_SECONDS": "0.5",
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "60",
    "UNICORE_DEFAULT_GPUS": "0",
}


def chaos_script(gated: bool) -> dict[str, Any]:
    """``leafy_tree_script(2, 1)`` whose leaves' first model call (a long, healthy model call) lasts until the test
    opens their gate (``gated``) or sleeps ``LEAF_SLEEP`` s."""
    script = leafy_tree_script(2, 1)
    first, *rest = script["tasks"]["r-?-?"]
    wait = {"gate": GATE} if gated else {"sleep": LEAF_SLEEP}
    script["tasks"]["r-?-?"] = [{**first, **wait}, *rest]
    return script


class AofRedis:
    """A private redis-server with AOF persistence (``appendfsync`` as given) on a unix socket. ``crash`` SIGKILLs
    it; ``start`` starts it again on the same data dir and socket, so it comes back from its AOF alone."""

    def __init__(self, appendfsync: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run hack/bootstrap.sh")
        self.dir = Path(tempfile.mkdtemp(prefix="uc-chaos-redis-"))  # short: a unix socket path has <= 107 bytes
        self.socket = self.dir / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.argv = [binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
                     "--dir", str(self.dir), "--save", "", "--appendonly", "yes", "--appendfsync", appendfsync]
        self.proc: subprocess.Popen[bytes]
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def answers() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            with redis.Redis.from_url(self.url, socket_timeout=2) as probe:
                return bool(probe.ping())

        wait_for(answers, timeout=20, what="redis-server to answer PING")

    def crash(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Chaos:
    """What a fault may touch."""

    tasks: Tasks
    client: redis.Redis
    store: TaskStore
    redis: AofRedis | None  # the pod runner's scenarios' own Redis (None on the real node: the node IP's)
    operator: OperatorProcess
    control_plane: Any
    namespace: str

    def tid(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def holder(self, name: str) -> str | None:
        return self.store.lease_holder(self.tid(name))

    def mid_turn(self, name: str, not_holder: str | None = None) -> str | None:
        """The lease holder (``<pod>:<pid>``) of ``name`` if it is inside its first model call: lease held, prompt
        drained, no answer stored yet (None otherwise)."""
        holder = self.holder(name)
        if not holder or holder == not_holder:
            return None
        messages = self.store.messages(self.tid(name))
        if [m.role for m in messages] != ["user"]:
            return None
        return holder

    def open_gates(self) -> None:
        """Let the leaves' first model call answer (the fault is in place)."""
        for leaf in LEAVES:
            open_gate(self.client, self.tid(leaf), GATE)

    def jobs_of(self, name: str) -> list[str]:
        return sorted(job.metadata.name for job in self.tasks.jobs()
                      if (job.metadata.annotations or {}).get("unicore.dev/task-id") == self.tid(name))

    def retried_jobs(self) -> list[str]:
        return sorted(job.metadata.name for job in self.tasks.jobs() if "-r" in job.metadata.name.rsplit("-t", 1)[-1])


Verify = Callable[[], None]
Fault = Callable[[Chaos], Verify]


def kill_leaf_twice(chaos: Chaos) -> Verify:
    """SIGKILL the leaf's turn container from outside (the node's containerd) mid-turn, and its retry's again."""
    killed: list[str] = []
    for _ in range(2):
        holder = str(wait_for(lambda: chaos.mid_turn(LEAVES[0], not_holder=killed[-1] if killed else None),
                              timeout=30, what=f"{LEAVES[0]} mid-turn (a new holder after {killed})"))
        kill_pod_container(chaos.control_plane, chaos.tasks.core, chaos.namespace, holder.rsplit(":", 1)[0])
        killed.append(holder)
    chaos.open_gates()  # the second retry answers

    def verify() -> None:
        name = LEAVES[0]
        assert chaos.jobs_of(name) == [f"{name}-t1", f"{name}-t1-r1", f"{name}-t1-r2"], chaos.jobs_of(name)
        failures = [event.message for event in task_events(chaos.tasks, name, "TurnFailed")]
        assert len(failures) == 2 and all(KILLED in message for message in failures), failures
        status = chaos.tasks.get(name)["status"]  # type: ignore[index]
        assert status["turns"] == 1 and status["lastResponse"] == "leaf result", status
        assert chaos.retried_jobs() == [f"{name}-t1-r1", f"{name}-t1-r2"]

    return verify


def no_attempt_lost(chaos: Chaos) -> Verify:
    def verify() -> None:
        assert chaos.retried_jobs() == [], "the fault cost a turn attempt"

    return verify


def pod_log(chaos: Chaos, holder: str) -> str:
    return str(chaos.control_plane.read_log(chaos.namespace, holder.rsplit(":", 1)[0]))


def restart_redis(chaos: Chaos) -> Verify:
    """SIGKILL Redis; start it again once both leaves, at the end of their model call, found it down."""
    assert chaos.redis is not None, "a pod runner scenario: its own AOF Redis"
    holders = [str(chaos.holder(leaf)) for leaf in LEAVES]
    before = chaos.client.info("server")["run_id"]
    chaos.redis.crash()
    try:
        wait_for(lambda: all("Redis unavailable" in pod_log(chaos, h) for h in holders), timeout=LEAF_SLEEP + 15,
                 what="both leaves' turn processes to find Redis down")
    finally:
        chaos.redis.start()
    assert chaos.client.info("server")["run_id"] != before

    def verify() -> None:
        no_attempt_lost(chaos)()
        for leaf in LEAVES:  # the leaves' turns outlived the outage: one process each, one turn
            assert chaos.jobs_of(leaf) == [f"{leaf}-t1"], chaos.jobs_of(leaf)

    return verify


def restart_operator(chaos: Chaos) -> Verify:
    """SIGKILL the operator; start it again once the leaves' turns ended (their reports wait for it)."""
    old = chaos.operator.proc
    chaos.operator.kill()
    chaos.open_gates()
    wait_for(lambda: all(chaos.holder(leaf) is None for leaf in LEAVES), timeout=LEAF_SLEEP + 20,
             what="the leaves' turns to end while the operator is down")
    chaos.operator.start()
    assert chaos.operator.proc is not old
    return no_attempt_lost(chaos)


def api_answers(chaos: Chaos) -> bool:
    """Whether the API server answers /version within 2 s (one attempt, no client-side retries)."""
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(str(chaos.control_plane.kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    with k8s.ApiClient(configuration) as api:
        try:
            k8s.VersionApi(api).get_code(_request_timeout=2)
        except (urllib3.exceptions.HTTPError, OSError):
            return False
    return True


def pause_api_server(chaos: Chaos) -> Verify:
    pid = chaos.control_plane.pids()["kube-apiserver"]
    os.kill(pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        assert not api_answers(chaos), "the stopped API server still answers"
        chaos.open_gates()
        # the leaves' turns end during the pause (Redis only): their reports wait for the API to come back
        wait_for(lambda: all(chaos.holder(leaf) is None for leaf in LEAVES), timeout=PAUSE_SECONDS + 20,
                 what="the leaves' turns to end while the API server is stopped")
        time.sleep(max(0.0, PAUSE_SECONDS - (time.monotonic() - paused_at)))  # the deliberate pause
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: api_answers(chaos), timeout=30, what="the API server to answer again")
    return no_attempt_lost(chaos)


def delete_leaf_pod(chaos: Chaos) -> Verify:
    name = LEAVES[0]
    holder = str(chaos.holder(name))
    pod = holder.rsplit(":", 1)[0]  # the pod of the process holding the lease
    assert pod.startswith(f"{name}-t1-"), pod
    chaos.tasks.core.delete_namespaced_pod(pod, chaos.namespace)
    wait_for(lambda: chaos.holder(name) != holder, timeout=30, what=f"the deleted pod's turn to give up {name}")
    chaos.open_gates()

    def verify() -> None:
        assert chaos.jobs_of(name) == [f"{name}-t1", f"{name}-t1-r1"], chaos.jobs_of(name)
        assert pod not in {p.metadata.name for p in chaos.tasks.pods()}

    return verify


def delete_leaf_job(chaos: Chaos) -> Verify:
    name = LEAVES[0]
    holder = chaos.holder(name)
    chaos.tasks.batch.delete_namespaced_job(f"{name}-t1", chaos.namespace, propagation_policy="Background")
    wait_for(lambda: chaos.holder(name) != holder, timeout=30, what=f"the deleted Job's turn to give up {name}")
    chaos.open_gates()

    def verify() -> None:
        [event] = task_events(chaos.tasks, name, "TurnJobDeleted")
        assert f"{name}-t1 was deleted before it finished" in event.message, event.message
        assert chaos.jobs_of(name) == [f"{name}-t1-r1"], chaos.jobs_of(name)

    return verify


SCENARIOS: dict[str, tuple[Fault, str | None]] = {  # id -> (fault, Redis appendfsync; None: the real node's Redis)
    "kill-leaf-twice": (kill_leaf_twice, None),
    "redis-restart-everysec": (restart_redis, "everysec"),
    "redis-restart-always": (restart_redis, "always"),
    "operator-sigkill": (restart_operator, "everysec"),
    "apiserver-pause": (pause_api_server, "everysec"),
    "delete-leaf-pod": (delete_leaf_pod, None),
    "delete-leaf-job": (delete_leaf_job, None),
}


def scenario_params() -> list[Any]:
    """The scenarios, those to a turn's container, pod or Job (no Redis of their own) marked ``real_node``."""
    return [pytest.param(name, marks=pytest.mark.real_node) if appendfsync is None else name
            for name, (_, appendfsync) in SCENARIOS.items()]


@pytest.fixture
def chaos(request: pytest.FixtureRequest, crd: Any, k8s_namespace: str, tmp_path: Path) -> Iterator[Chaos]:
    _, appendfsync = SCENARIOS[request.node.callspec.params["scenario"]]
    assert (appendfsync is None) == on_real_node(request), "real node scenarios use the node's Redis, others their own"
    server = AofRedis(appendfsync) if appendfsync else None
    url = server.url if server else str(request.getfixturevalue("redis_url"))
    client = redis.Redis.from_url(url, decode_responses=True)
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    operator = OperatorProcess(crd.kubeconfig, url, k8s_namespace, tmp_path / "operator.log", **OPERATOR_ENV).start()
    api = crd.api_client()
    try:
        yield Chaos(Tasks(api, k8s_namespace), client, TaskStore(client), server, operator, crd, k8s_namespace)
    finally:
        operator.stop()
        print(f"--- operator log ({operator.log_path}):\n{operator.log(200)}")
        for log in turn_pod_logs(crd, k8s_namespace):
            print(f"--- turn pod log ({log}):\n{log.read_text(errors='replace')[-3000:]}")
        api.close()
        client.close()
        if server:
            server.stop()


def settled(chaos: Chaos) -> str | None:
    """``"settled"`` once every AgentTask of the tree is Idle and Redis is quiet (no inbox entry, no lease, every
    record idle); ``"failed: ..."`` at once if a task is Failed; None while the tree still works."""
    phases = chaos.tasks.all_phases()
    failed = {name: phase for name, phase in phases.items() if phase == "Failed"}
    if failed:
        return f"failed: {failed}"
    if sorted(phases) != sorted(TREE) or set(phases.values()) != {"Idle"}:
        return None
    quiet = all(not chaos.store.pending_count(chaos.tid(n)) and chaos.holder(n) is None
                and chaos.store.get_task(chaos.tid(n)).status == "idle" for n in TREE)
    return "settled" if quiet else None


@pytest.mark.parametrize("scenario", scenario_params())
def test_a_tree_hit_mid_turn_settles_with_every_report_delivered_once(chaos: Chaos, scenario: str) -> None:
    fault, _ = SCENARIOS[scenario]
    script = chaos_script(gated=fault is not restart_redis)
    chaos.tasks.create("r", {"prompt": "split the work", "gpus": 0, "script": script})
    wait_for(lambda: all(chaos.mid_turn(leaf) for leaf in LEAVES), timeout=120, what=f"{LEAVES} mid-turn")
    began = time.monotonic()
    verify = fault(chaos)
    left = SETTLE_AFTER_FAULT - (time.monotonic() - began)
    try:
        outcome = wait_for(lambda: settled(chaos), timeout=max(left, 0.1), interval=0.25, what="the tree to settle")
    except WaitTimeout:
        outcome = f"not settled {SETTLE_AFTER_FAULT:.0f}s after the fault: phases {chaos.tasks.all_phases()}"
    took = time.monotonic() - began
    assert outcome == "settled", outcome
    report = check_tree(chaos.client, chaos.tid("r"), True)
    print(f"\n{scenario}: settled {took:.1f}s after the fault; {report}")
    assert report.tasks == len(TREE)
    assert report.losses == [] and report.duplicates == [] and report.problems == [], report
    verify()
