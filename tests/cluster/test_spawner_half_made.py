"""The Kubernetes spawner against the real API server: no half-made child (issue 10, item 5).

A spawn is one write that makes the child (the AgentTask; the operator creates its Redis record). A Redis record
left without its AgentTask (by an older version, or anything else) is completed by the next spawn of that name; a
create whose answer is lost is looked up before it is reported as failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kubernetes import client
from unicore.api.schema import TaskSpec
from unicore.launch.k8s_spawner import GROUP, PLURAL, VERSION, KubernetesSpawner
from unicore.store.tasks import TaskStore
from urllib3.exceptions import ReadTimeoutError

from tests.cluster.operator_harness import Tasks

pytestmark = pytest.mark.cluster


@pytest.fixture
def custom_api(crd: Any) -> Iterator[Any]:
    api = crd.api_client()
    yield client.CustomObjectsApi(api)
    api.close()


@pytest.fixture
def parent(tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str) -> str:
    tasks.create("p", {"prompt": "plan", "gpus": 0})
    parent_id = f"{k8s_namespace}/p"
    TaskStore(redis_client).create_task(TaskSpec(id=parent_id, prompt="plan"))
    return parent_id


def test_a_record_without_its_agenttask_is_completed_by_the_next_spawn(
    custom_api: Any, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, parent: str,
) -> None:
    store = TaskStore(redis_client)
    # What a spawner that died between its two writes left behind: the child's record, no AgentTask.
    store.create_task(TaskSpec(id=f"{parent}-a", parent=parent))
    child_id, created = KubernetesSpawner(store, custom_api, k8s_namespace).spawn(parent, "a", "find A", None)
    assert child_id == f"{parent}-a" and created
    child = tasks.get("p-a")
    assert child is not None, "the next spawn created the missing AgentTask"
    assert child["spec"]["prompt"] == "find A" and child["spec"]["parentRef"]["name"] == "p"


class CreateThenLoseTheAnswerApi:
    """The API server creates the object but the answer never arrives (a read timeout, a reset connection)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.inner.create_namespaced_custom_object(*args, **kwargs)
        raise ReadTimeoutError(None, "/apis", "Read timed out.")  # type: ignore[arg-type]


def test_a_create_whose_answer_was_lost_counts_as_created_and_keeps_its_slot(
    custom_api: Any, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, parent: str,
) -> None:
    store = TaskStore(redis_client)
    spawner = KubernetesSpawner(store, CreateThenLoseTheAnswerApi(custom_api), k8s_namespace)
    child_id, created = spawner.spawn(parent, "b", "find B", None)
    assert created and tasks.get("p-b") is not None
    assert redis_client.zscore(store.keys(parent).child_slots, child_id) is not None
    names = [obj["metadata"]["name"] for obj in custom_api.list_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, PLURAL)["items"]]
    assert sorted(names) == ["p", "p-b"]
