"""The chart's release on the real node disrupted with a task tree in flight (issue 27, item 5): the operator pod
deleted, the operator Deployment rolled, the bundled Redis pod deleted (AOF on its claim), and ``helm upgrade`` with a
changed operator setting and a new operator image. The operator Deployment is ``strategy: Recreate``, so each one is an
operator outage (Redis' is a Redis outage); what must hold is that nothing is lost or done twice.

Each test starts a tree in the one release of this module: a root whose first turn spawns two children and ends; each
child's turn holds its model call at a scripted gate (``unicore.store.gates``) until the test opens it. Once both
children's turns run (pods Running, prompts drained into their conversations, at the gate), the test disrupts, checks
that both children's turns still ran when the disruption began, opens the gates (at once for the operator, whose
outage the children's reports then meet; once Redis is back for Redis), and checks that the tree settles with:

- every child's report in the parent's conversation exactly once (and once in the parent's answers that echo them),
  no report of a failure, the spawns once, every inbox empty;
- every turn run once: each task's Jobs are exactly ``<task>-t1 .. -t<turns>`` (no ``-r`` retry Job), each ran one pod
  that succeeded without a restart, no failed attempt is counted, and each conversation holds one answer per model
  step the script implies (the root: "waiting" in turn 1, then one echo per later turn; a child: one).

The Redis restart too: it drops the namespaces' Redis users (``redis.identities``: ACL users are not persisted), the
operator notices the new server within a second and applies them again (its log says so once), and the children's
turn pods, whose logins are refused meanwhile, wait for them in their clients' retry window: no turn fails.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from kubernetes import client
from unicore.store.gates import open_gate

from tests.cluster.chart_release import OPERATOR, REDIS, installed_release, kubectl, pod_of, ready
from tests.cluster.operator_harness import Tasks, stored_messages
from tests.cluster.test_chart_render import CHART, helm
from tests.cluster.test_operator import role_texts
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

CHILDREN = ("a", "b")
GATE = "go"
SETTLE = 180.0
ROOT_LABEL = "unicore.dev/root"
UPGRADE_TAG = "0.1.0-upgraded"  # the operator archive retagged in the node's containerd: "a new operator image"
JOB_TTL_AFTER = 600  # agent.jobTTLSeconds (UNICORE_JOB_TTL_SECONDS) after the upgrade; the chart's default is 300
NEW_SERVER = "Redis is a new server"  # the operator's log line when it applies the users to a restarted Redis
REFUSED_LOGIN = "Redis refused this client's credentials, which it accepted before"  # a turn pod waiting for its user


@pytest.fixture(scope="module")
def release(real_node_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One release for the module's trees; the retagged operator image is removed from the node after it."""
    try:
        with installed_release(real_node_session, tmp_path_factory) as installed:
            yield installed
    finally:
        node = real_node_session.running.real_node if real_node_session.running else None
        if node is not None and node.runtime is not None:
            node.runtime.ctr("images", "rm", upgraded_ref(real_node_session.images), check=False)


def upgraded_ref(images: dict[str, Any]) -> str:
    return f"{images['operator'].ref.rpartition(':')[0]}:{UPGRADE_TAG}"


def tree_script(root: str) -> dict[str, Any]:
    return {"default": "Done.", "tasks": {
        root: [
            {"tool_use": [{"name": "spawn_task", "input": {"name": c, "prompt": f"report {c}"}} for c in CHILDREN]},
            {"text": "Waiting for my two researchers."},
            *[{"echo": True}] * 3,  # every wake-up repeats the reports that arrived
        ],
        # a child holds its model call until the test opens its gate, then answers with its prompt: "report <c>"
        f"{root}-*": [{"gate": GATE, "timeout": 240, "echo": True}],
    }}


def redis_of(release: dict[str, Any]) -> redis.Redis:
    """The chart's Redis, by its pod's IP (the node's bridge is the host's) with the admin password of its Secret."""
    core = client.CoreV1Api(release["api"])
    secret = core.read_namespaced_secret("unicore-redis", release["namespace"])
    password = base64.b64decode(secret.data["redis-password"]).decode()
    pod = core.read_namespaced_pod("unicore-redis-0", release["namespace"])
    return redis.Redis(host=pod.status.pod_ip, port=6379, password=password, decode_responses=True,
                       socket_timeout=10)


@dataclasses.dataclass
class Tree:
    release: dict[str, Any]
    root: str

    @property
    def namespace(self) -> str:
        return str(self.release["namespace"])

    @property
    def tasks(self) -> Tasks:
        return Tasks(self.release["api"], self.namespace)

    @property
    def children(self) -> list[str]:
        return [f"{self.root}-{c}" for c in CHILDREN]

    @property
    def names(self) -> list[str]:
        return [self.root, *self.children]

    def tid(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def jobs(self) -> list[Any]:
        return list(self.tasks.batch.list_namespaced_job(self.namespace, label_selector=f"{ROOT_LABEL}={self.root}")
                    .items)

    def pods(self) -> list[Any]:
        return list(self.tasks.core.list_namespaced_pod(self.namespace, label_selector=f"{ROOT_LABEL}={self.root}")
                    .items)

    def child_turns_running(self) -> list[str]:
        """The children's first turn Jobs whose pod runs and which have not ended, by name."""
        wanted = {f"{child}-t1" for child in self.children}
        running = {pod.metadata.labels.get("job-name") for pod in self.pods() if pod.status.phase == "Running"}
        ended = {job.metadata.name for job in self.jobs() if job.status.succeeded or job.status.failed}
        return sorted((wanted & running) - ended)

    def open_gates(self) -> None:
        store = redis_of(self.release)
        for child in self.children:
            open_gate(store, self.tid(child), GATE)
        store.close()


def start_tree(release: dict[str, Any], root: str) -> Tree:
    """Create the tree; wait until the root's first turn ended and both children's turns wait at their gates (pods
    Running, prompts drained)."""
    tree = Tree(release, root)
    tree.tasks.create(root, {"prompt": "ask two researchers and report", "gpus": 0, "script": tree_script(root),
                             "limits": {"turnTimeoutSeconds": 300}})
    store = redis_of(release)

    def at_the_gates() -> bool:
        first = {job.metadata.name: job for job in tree.jobs()}.get(f"{root}-t1")
        return (first is not None and first.status.succeeded == 1
                and len(tree.child_turns_running()) == len(CHILDREN)
                and all(role_texts(store, tree.tid(f"{root}-{c}"), "user") == [f"report {c}"] for c in CHILDREN))

    wait_for(at_the_gates, timeout=120, interval=0.2,
             what=f"both children's turns at their gates (phases {tree.tasks.all_phases()})")
    store.close()
    return tree


def disrupt(tree: Tree, action: Callable[[], None]) -> float:
    """Run the disruption; check it began while both children's turns still ran. Returns its start (monotonic)."""
    started = time.monotonic()
    action()
    in_flight = tree.child_turns_running()
    assert in_flight == [f"{child}-t1" for child in tree.children], (
        f"the disruption did not land mid-tree: the children's turns running after it began: {in_flight}")
    return started


def settled(tree: Tree, store: redis.Redis) -> bool:
    phases = tree.tasks.all_phases()
    if any(phases.get(name) != "Idle" for name in tree.names):
        return False
    echoed = "\n".join(role_texts(store, tree.tid(tree.root), "assistant"))  # the root answered both reports
    return all(f"Final response from child:\nreport {c}" in echoed for c in CHILDREN)


def check_tree(tree: Tree, started: float) -> dict[str, list[str]]:
    """Wait for the tree to settle, then check that nothing was lost or done twice (the module doc). Returns each
    task's Jobs in order."""
    store = redis_of(tree.release)
    wait_for(lambda: settled(tree, store), timeout=SETTLE, interval=0.5,
             what=f"the tree Idle with both reports answered (phases {tree.tasks.all_phases()})")
    print(f"{tree.root}: settled {time.monotonic() - started:.1f} s after the disruption began")
    statuses = {name: (tree.tasks.get(name) or {}).get("status") or {} for name in tree.names}
    turns = {name: int(status.get("turns") or 0) for name, status in statuses.items()}
    for name, status in statuses.items():
        assert status.get("failedAttempts", 0) == 0 and status.get("activeJob", "") == "", (name, status)
    assert turns[tree.root] in (2, 3) and all(turns[child] == 1 for child in tree.children), turns

    # every turn once: its Job (no -r retry Job), one pod, no restart
    jobs = {job.metadata.name: job for job in tree.jobs()}
    pods: dict[str, list[Any]] = {}
    for pod in tree.pods():
        pods.setdefault(pod.metadata.labels["job-name"], []).append(pod)
    by_task = {name: [f"{name}-t{n}" for n in range(1, count + 1)] for name, count in turns.items()}
    assert set(jobs) == {job for names in by_task.values() for job in names}, (
        f"Jobs {sorted(jobs)}, the turns imply {by_task}")
    assert set(pods) == set(jobs) and all(len(found) == 1 for found in pods.values()), {
        job: len(found) for job, found in pods.items()}
    for name, job in jobs.items():
        (pod,) = pods[name]
        assert job.status.succeeded == 1 and not job.status.failed, (name, job.status)
        assert pod.status.phase == "Succeeded" and pod.status.container_statuses[0].restart_count == 0, name

    # every message once: the prompt, each child's report, the answers the script implies
    root_id = tree.tid(tree.root)
    user = role_texts(store, root_id, "user")
    assert user.count("ask two researchers and report") == 1, user
    delivered = "\n".join(user)
    assert "FAILED" not in delivered, delivered
    for child in tree.children:
        assert delivered.count(f"Child task {tree.tid(child)} has completed successfully.\nRan 1 turns") == 1, (
            delivered)
    answers = role_texts(store, root_id, "assistant")
    assert answers[0] == "Waiting for my two researchers." and len(answers) == turns[tree.root], answers
    echoed = "\n".join(answers[1:])
    for c in CHILDREN:  # each child's final response, "report <c>", reached the root's echoes exactly once
        assert echoed.count(f"Final response from child:\nreport {c}") == 1, echoed
        child_id = tree.tid(f"{tree.root}-{c}")
        assert role_texts(store, child_id, "user") == [f"report {c}"]
        assert role_texts(store, child_id, "assistant") == [f"report {c}"]
    tool_uses = [block for message in stored_messages(store, root_id) if message["role"] == "assistant"
                 for block in message["content"] if "toolUse" in block]
    assert len(tool_uses) == len(CHILDREN), tool_uses  # the spawns once
    for name in tree.names:
        assert store.llen(f"uc:{{{tree.tid(name)}}}:inbox") == 0, name
    store.close()
    return by_task


def operator_pod(release: dict[str, Any]) -> Any:
    return pod_of(client.CoreV1Api(release["api"]), release["namespace"], OPERATOR)


def new_operator_ready(release: dict[str, Any], old_uid: str) -> Any:
    """Wait until exactly one operator pod is left, another than ``old_uid``, and it is Ready; return it."""
    core = client.CoreV1Api(release["api"])

    def one_new_ready() -> Any:
        pods = core.list_namespaced_pod(release["namespace"], label_selector=OPERATOR).items
        if len(pods) == 1 and pods[0].metadata.uid != old_uid and ready(pods[0]):
            return pods[0]
        return None

    return wait_for(one_new_ready, timeout=180, interval=0.5, what="the new operator pod Ready, the old one gone")


def test_operator_pod_deleted_mid_tree(release: dict[str, Any]) -> None:
    cluster, namespace = release["cluster"], release["namespace"]
    old = operator_pod(release)
    tree = start_tree(release, "opkill")
    started = disrupt(tree, lambda: kubectl(cluster, "delete", "pod", old.metadata.name, "-n", namespace,
                                            "--wait=false"))
    tree.open_gates()  # the children report while the operator is away
    new = new_operator_ready(release, old.metadata.uid)
    print(f"operator pod replaced: {old.metadata.name} -> {new.metadata.name}, Ready "
          f"{time.monotonic() - started:.1f} s after the delete")
    check_tree(tree, started)


def test_operator_deployment_rolled_mid_tree(release: dict[str, Any]) -> None:
    cluster, namespace = release["cluster"], release["namespace"]
    old = operator_pod(release)
    tree = start_tree(release, "oproll")
    started = disrupt(tree, lambda: kubectl(cluster, "rollout", "restart", "deploy/unicore-operator", "-n",
                                            namespace))
    tree.open_gates()
    kubectl(cluster, "rollout", "status", "deploy/unicore-operator", "-n", namespace, "--timeout=180s")
    new = new_operator_ready(release, old.metadata.uid)
    assert new.metadata.labels["pod-template-hash"] != old.metadata.labels["pod-template-hash"]  # a new ReplicaSet
    print(f"operator rolled: {old.metadata.name} -> {new.metadata.name}, Ready "
          f"{time.monotonic() - started:.1f} s after the restart")
    check_tree(tree, started)


def test_redis_pod_deleted_mid_tree(release: dict[str, Any]) -> None:
    cluster, namespace = release["cluster"], release["namespace"]
    core = client.CoreV1Api(release["api"])
    old = pod_of(core, namespace, REDIS)
    claim = core.read_namespaced_persistent_volume_claim("data-unicore-redis-0", namespace)
    operator_before = operator_pod(release).metadata.uid
    tree = start_tree(release, "rediskill")
    store = redis_of(release)
    before = {name: stored_messages(store, tree.tid(name)) for name in tree.names}
    run_id = store.info("server")["run_id"]
    store.close()
    assert all(before.values()), before
    started = disrupt(tree, lambda: kubectl(cluster, "delete", "pod", "unicore-redis-0", "-n", namespace,
                                            "--wait=false"))

    def back() -> Any:
        pod = core.read_namespaced_pod("unicore-redis-0", namespace)
        return pod if pod.metadata.uid != old.metadata.uid and ready(pod) else None

    new = wait_for(back, timeout=180, interval=0.5, what="unicore-redis-0 recreated and Ready")
    print(f"Redis pod recreated and Ready {time.monotonic() - started:.1f} s after the delete")
    store = redis_of(release)
    assert store.info("server")["run_id"] != run_id  # another redis-server ...
    assert store.config_get("appendonly") == {"appendonly": "yes"}
    assert (core.read_namespaced_persistent_volume_claim("data-unicore-redis-0", namespace).spec.volume_name
            == claim.spec.volume_name)  # ... on the same volume, which held the data: what was stored is there
    for name, messages in before.items():
        assert stored_messages(store, tree.tid(name))[:len(messages)] == messages, name
    store.close()
    assert new.status.container_statuses[0].restart_count == 0
    tree.open_gates()
    check_tree(tree, started)  # no turn failed: each child's turn one Job, no retry
    operator = operator_pod(release)
    assert operator.metadata.uid == operator_before  # the operator rode it out, not restarted
    log = core.read_namespaced_pod_log(operator.metadata.name, namespace)
    noticed = [line for line in log.splitlines() if NEW_SERVER in line]
    assert len(noticed) == 1, noticed  # it applied the users to the new Redis at once (not only at the resync)
    print(noticed[0])
    # which turn pods met a refused login and waited for their user (said, not asserted: the operator may be first)
    for pod in tree.pods():
        waited = REFUSED_LOGIN in core.read_namespaced_pod_log(pod.metadata.name, namespace)
        print(f"{pod.metadata.name}: {'waited for its Redis user' if waited else 'no refused login'}")


def test_helm_upgrade_with_a_new_operator_image_and_setting_mid_tree(release: dict[str, Any]) -> None:
    cluster, namespace = release["cluster"], release["namespace"]
    node = cluster.real_node
    assert node is not None and node.runtime is not None
    images = release["images"]
    new_ref = upgraded_ref(images)
    node.runtime.ctr("images", "tag", "--force", images["operator"].ref, new_ref)
    repository, _, tag = new_ref.rpartition(":")
    old = operator_pod(release)
    redis_before = pod_of(client.CoreV1Api(release["api"]), namespace, REDIS).metadata.uid
    assert old.spec.containers[0].image == images["operator"].ref
    tree = start_tree(release, "upgrade")
    upgrade = ["upgrade", "unicore", str(CHART), "--namespace", namespace, *release["values"],
               "--set", f"operator.image.repository={repository}", "--set-string", f"operator.image.tag={tag}",
               "--set", f"agent.jobTTLSeconds={JOB_TTL_AFTER}"]

    def upgrade_now() -> None:  # without --wait: it returns once the objects are updated
        helm(*upgrade, env=release["env"])

    started = disrupt(tree, upgrade_now)
    kubectl(cluster, "rollout", "status", "deploy/unicore-operator", "-n", namespace, "--timeout=180s")
    new = new_operator_ready(release, old.metadata.uid)
    # the children's turns ran through the upgrade (disrupt checked); they end once the new operator runs, so the
    # root's next turn is the new operator's: opened before, an old operator still shutting down made it (a cold run)
    tree.open_gates()
    print(f"upgraded: operator {old.metadata.name} -> {new.metadata.name}, Ready "
          f"{time.monotonic() - started:.1f} s after helm upgrade began")
    history = helm("history", "unicore", "--namespace", namespace, "-o", "json", env=release["env"]).stdout
    assert '"revision":2' in history.replace(" ", "") and '"status":"deployed"' in history.replace(" ", "")
    (container,) = new.spec.containers
    (status,) = new.status.container_statuses
    # the new reference (the kubelet reports the image by the first of its names: the same content as before)
    assert container.image == new_ref and status.image_id == old.status.container_statuses[0].image_id, status
    env = {var.name: var.value for var in container.env}
    assert env["UNICORE_JOB_TTL_SECONDS"] == str(JOB_TTL_AFTER), env
    by_task = check_tree(tree, started)
    # the new operator runs the changed setting: the Jobs it created carry the new TTL, the old operator's the old
    born = new.status.start_time
    ttls = {job.metadata.name: (job.metadata.creation_timestamp >= born, job.spec.ttl_seconds_after_finished)
            for job in tree.jobs()}
    assert ttls[by_task[tree.root][-1]] == (True, JOB_TTL_AFTER), ttls
    assert all(ttl == (JOB_TTL_AFTER if after else 300) for after, ttl in ttls.values()), ttls
    assert pod_of(client.CoreV1Api(release["api"]), namespace, REDIS).metadata.uid == redis_before
