"""A namespace's Redis user and Agent definitions (issue 17), on a real redis-server: a turn of an agent task runs
with the namespace's own credentials (it reads its agent's definition and writes the resolved settings into its task's
record), and those credentials can neither write an agent definition (that would widen the namespace's own agents)
nor read another namespace's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import NoPermissionError
from unicore.agents import definition_from_spec
from unicore.api.schema import TaskSpec
from unicore.store import acl
from unicore.store.agents import read_agent, write_agent
from unicore.store.client import build_client
from unicore.store.tasks import TaskStore

from tests.integration.conftest import TurnRunner

NS, OTHER = "team-agents", "team-other"


@pytest.fixture
def tenant(redis_client: redis.Redis, redis_url: str) -> Iterator[redis.Redis]:
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, NS, password)
    client = build_client(acl.identity_url(redis_url, acl.namespace_user(NS), password), decode_responses=True,
                          retry_for=0)
    yield client
    client.close()
    acl.delete_namespace_user(redis_client, NS)


def test_a_tenant_turn_reads_its_agent_and_cannot_write_or_read_others(redis_client: redis.Redis,
                                                                        tenant: redis.Redis, tmp_path: Path) -> None:
    writer = definition_from_spec({"model": "scripted", "systemPrompt": "Write well.", "tools": ["read_file"],
                                   "limits": {"maxIterations": 7}})
    write_agent(redis_client, f"{NS}/writer", writer)  # the operator's part, with the admin client
    write_agent(redis_client, f"{OTHER}/writer", writer)
    assert TaskStore(redis_client).create_task(TaskSpec(id=f"{NS}/t", prompt="go", agent=f"{NS}/writer",
                                                        script={"default": "ok"}))
    write_agent(redis_client, f"{NS}/writer", writer.model_copy(update={"system_prompt": "Write better."}))
    turn = TurnRunner(tenant, tmp_path)
    assert turn(f"{NS}/t").exit_code == 0
    (request,) = turn.requests(f"{NS}/t")
    assert "Write better." in request.system  # read with the tenant's credentials at the turn's start
    assert TaskStore(redis_client).get_task(f"{NS}/t").system_prompt == "Write better."  # written back, fenced
    assert read_agent(tenant, f"{NS}/writer") is not None
    with pytest.raises(NoPermissionError):
        write_agent(tenant, f"{NS}/writer", writer.model_copy(update={"tools": ["read_file", "write_file"]}))
    with pytest.raises(NoPermissionError):
        read_agent(tenant, f"{OTHER}/writer")
    assert read_agent(redis_client, f"{NS}/writer") == writer.model_copy(update={"system_prompt": "Write better."})
