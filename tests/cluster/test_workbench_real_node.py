"""The workbench on the real node (issue 28): run_command in a container of the task's own image, next to the turn
container, under the kubelet and containerd, with a host operator.

- Debian (the project's base image) as the workbench: the command runs there as uid 65532 and sees none of the
  runtime's variables and no ServiceAccount token; the GPU limit is on the workbench, not the turn container; the turn
  container still creates a child with its own (projected) token; the Job completes when the turn ends;
- busybox as the workbench: a command past its timeout is killed with its whole process group (nothing of it is left
  in the workbench), a command printing 20 MB returns a capped tail;
- ``spec.suspend`` while a ``sleep 600`` runs: the command is killed and recorded as cancelled, the pod goes;
- an image that only root can use (busybox whose /bin only root may enter): one line in the task's status and a
  PodReaped Event, not a sidecar in CrashLoopBackOff;
- examples/workbench.yaml as a user applies it: the Agent's image runs the script the task wrote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from unicore_devcluster.node_images import load_images

from tests.cluster.oci_image import with_directory_modes
from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages, task_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

REPO = Path(__file__).resolve().parents[2]
OPERATOR_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "90",
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_DEFAULT_GPUS": "0",
    "UNICORE_MAX_REAPS": "1",
}
ROOT_ONLY_IMAGE = "unicore.local/busybox-root-only:test"


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=OPERATOR_ENV, pod_logs=True) as start:
        yield start


@pytest.fixture
def images(crd: Any, tmp_path: Path) -> dict[str, str]:
    """The workbench images on the node: the project's Debian base, busybox, and busybox that only root can use."""
    node = crd.real_node
    base = load_images(node.runtime, keys=("base",))["base"].ref
    busybox = node.busybox_image
    if ROOT_ONLY_IMAGE not in " ".join(node.runtime.images()):
        archive = with_directory_modes(node.bin_dir / "images" / "busybox.tar", tmp_path / "root-only.tar",
                                       ROOT_ONLY_IMAGE, {"bin": 0o700})
        node.runtime.import_image(tmp_path / "root-only.tar")
        assert archive == ROOT_ONLY_IMAGE
    return {"debian": base, "busybox": busybox, "root-only": ROOT_ONLY_IMAGE}


def status_of(tasks: Tasks, name: str) -> dict[str, Any]:
    return dict((tasks.get(name) or {}).get("status") or {})


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = status_of(tasks, name)
    return status if status.get("phase") in ("Idle", "Failed") else None


def command_results(client: redis.Redis, task_id: str) -> list[dict[str, Any]]:
    """The stored results of the task's run_command calls, in order (their JSON, or {"error": text})."""
    calls = {block["toolUse"]["toolUseId"] for m in stored_messages(client, task_id) if m["role"] == "assistant"
             for block in m["content"] if "toolUse" in block and block["toolUse"]["name"] == "run_command"}
    results = []
    for message in stored_messages(client, task_id):
        for block in message["content"]:
            result = block.get("toolResult")
            if result and result["toolUseId"] in calls:
                item = result["content"][0]
                results.append(item["json"] if "json" in item else {"error": item.get("text", "")})
    return results


def script(name: str, *commands: dict[str, Any], also: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool_use": [{"name": "run_command", "input": c}, *((also or []) if i == 0 else [])]}
        for i, c in enumerate(commands)
    ]
    return {"default": "Done.", "tasks": {name: [*steps, {"text": "All commands ran."}]}}


def test_a_debian_workbench_runs_commands_without_the_runtimes_credentials(
    start_operator: StartOperator, tasks: Tasks, images: dict[str, str], redis_client: redis.Redis,
    k8s_namespace: str,
) -> None:
    start_operator()
    probe = ("env; echo ---; id -u; echo ---; ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1; echo ---; "
             "echo written > /workspace/probe.txt && cat probe.txt")
    spawn = {"name": "spawn_task", "input": {"name": "kid", "prompt": "Say hi."}}
    tasks.create("deb", {"prompt": "probe", "model": "scripted", "image": images["debian"], "gpus": 1,
                         "tools": ["run_command", "spawn_task"],
                         "workbench": {"env": [{"name": "DATASET", "value": "squares"}]},
                         "script": script("deb", {"command": probe}, also=[spawn])})
    done = wait_for(lambda: settled(tasks, "deb"), timeout=240, what="the task to settle after its commands")
    assert done["phase"] == "Idle", done
    [result] = command_results(redis_client, f"{k8s_namespace}/deb")
    assert result["exit_code"] == 0, result
    env, uid, token, written = result["stdout"].split("---\n")
    assert "DATASET=squares" in env and "HOME=/tmp" in env
    assert "REDIS_URL" not in env and "UNICORE_" not in env and "OPENAI" not in env, env
    assert uid.strip() == "65532"
    assert "No such file or directory" in token, token
    assert written.strip() == "written"
    # the turn container's own token still works: it created the child AgentTask
    assert tasks.get("deb-kid") is not None
    [job] = [j for j in tasks.jobs() if j.metadata.name == "deb-t1"]
    assert job.status.succeeded == 1  # the workbench ended with the turn: the Job completed
    pod_spec = job.spec.template.spec
    bench = next(c for c in pod_spec.init_containers if c.name == "workbench")
    turn = pod_spec.containers[0]
    assert bench.restart_policy == "Always" and bench.image == images["debian"]
    assert bench.resources.limits["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in (turn.resources.limits or {})
    assert pod_spec.automount_service_account_token is False


def test_a_busybox_workbench_kills_timed_out_groups_and_caps_output(
    start_operator: StartOperator, tasks: Tasks, images: dict[str, str], redis_client: redis.Redis,
    k8s_namespace: str,
) -> None:
    start_operator()
    processes = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    tasks.create("bb", {"prompt": "work", "model": "scripted", "image": images["busybox"],
                        "tools": ["run_command"], "limits": {"commandTimeoutSeconds": 3},
                        "script": script("bb", {"command": "sleep 600 & sleep 600; wait", "timeout_seconds": 60},
                                         {"command": "head -c 20000000 /dev/zero | tr '\\0' x"},
                                         {"command": processes})})
    done = wait_for(lambda: settled(tasks, "bb"), timeout=240, what="the task to settle after its commands")
    assert done["phase"] == "Idle", done
    slept, printed, listed = command_results(redis_client, f"{k8s_namespace}/bb")
    assert slept.get("timed_out") is True and slept["exit_code"] is None, slept  # the limit (3 s) capped the 60
    assert 2.5 < slept["duration_seconds"] < 30, slept
    assert printed["exit_code"] == 0, {**printed, "stdout": "..."}
    assert printed["stdout"] == "x" * 16 * 1024 and "of 20,000,000 bytes" in printed["stdout_truncated"], printed[
        "stdout_truncated"]
    assert "sleep 600" not in listed["stdout"], listed["stdout"]  # nothing of the timed-out group is left
    assert "unicore-exec" in listed["stdout"]  # the listing did see the workbench's processes


def live_output(client: redis.Redis, task_id: str) -> str:
    entries = client.xrange(f"uc:{{{task_id}}}:tokens")
    return "".join(fields["text"] for _, fields in entries if fields.get("kind") == "output")  # decoded client


def test_suspending_the_task_kills_a_running_command_and_records_it_cancelled(
    start_operator: StartOperator, tasks: Tasks, images: dict[str, str], redis_client: redis.Redis,
    k8s_namespace: str,
) -> None:
    start_operator()
    task_id = f"{k8s_namespace}/sleeper"
    tasks.create("sleeper", {"prompt": "wait", "model": "scripted", "image": images["busybox"],
                             "tools": ["run_command"],
                             "script": script("sleeper", {"command": "echo sleeping; sleep 600"})})
    wait_for(lambda: "sleeping" in live_output(redis_client, task_id), timeout=180, interval=0.2,
             what="the command's live output (it runs)")
    assert live_output(redis_client, task_id).startswith("$ echo sleeping; sleep 600\n")
    suspended_at = time.monotonic()
    tasks.patch("sleeper", {"suspend": True})
    wait_for(lambda: status_of(tasks, "sleeper").get("phase") == "Suspended"
             and not [p for p in tasks.pods() if p.metadata.labels.get("job-name", "").startswith("sleeper-")
                      and p.status.phase in ("Pending", "Running")],
             timeout=90, what="the task Suspended and its pod gone")
    assert time.monotonic() - suspended_at < 90
    tasks.patch("sleeper", {"suspend": False})
    done = wait_for(lambda: settled(tasks, "sleeper"), timeout=180, what="the resumed task to settle")
    assert done["phase"] == "Idle", done
    [result] = command_results(redis_client, task_id)
    assert "cancelled" in result.get("error", ""), result
    assert "sleeping" in result["error"]  # what it printed before it was killed


def test_an_image_only_root_can_use_fails_the_turn_with_one_line(
    start_operator: StartOperator, tasks: Tasks, images: dict[str, str],
) -> None:
    start_operator()
    tasks.create("rooty", {"prompt": "work", "model": "scripted", "image": images["root-only"],
                           "tools": ["run_command"], "script": script("rooty", {"command": "true"})})
    status = wait_for(lambda: settled(tasks, "rooty"), timeout=180, what="the task to fail with the reason")
    assert status["phase"] == "Failed", status
    assert "the workbench failed: container workbench" in status["message"], status
    assert "exit code 3" in status["message"] and "65532" in status["message"], status
    [event] = wait_for(lambda: task_events(tasks, "rooty", "PodReaped"), timeout=30, what="the PodReaped Event")
    assert "the workbench failed" in event.message and "\n" not in event.message


def test_the_workbench_example_runs_the_script_it_wrote(
    start_operator: StartOperator, tasks: Tasks, images: dict[str, str], redis_client: redis.Redis, crd: Any,
    k8s_namespace: str,
) -> None:
    start_operator()
    agent, task = yaml.safe_load_all((REPO / "examples" / "workbench.yaml").read_text())
    tasks.custom.create_namespaced_custom_object("unicore.dev", "v1alpha1", k8s_namespace, "agents", agent)
    tasks.custom.create_namespaced_custom_object("unicore.dev", "v1alpha1", k8s_namespace, "agenttasks", task)
    done = wait_for(lambda: settled(tasks, "workbench-demo"), timeout=240, what="the example task to settle")
    assert done["phase"] == "Idle", done
    [result] = command_results(redis_client, f"{k8s_namespace}/workbench-demo")
    assert result["exit_code"] == 0 and result["stdout"] == "338350\n", json.dumps(result)
    assert "338350" in done["lastResponse"]
