"""A turn pod's variables are the ones ``unicore.api.pod_env`` declares: the Job builder sets exactly those (with
every optional part on), the runtime reads each of them by its constant, and no other module spells their names."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from unicore.api import pod_env
from unicore.api.spec import task_spec_of
from unicore.mcp_config import parse_resolved
from unicore.providers.endpoints import parse_endpoints
from unicore_operator.job_builder import build_turn_job_spec
from unicore_operator.mcp_servers import turn_mcp_env
from unicore_operator.settings import RESERVED_AGENT_ENV, OperatorSettings
from unicore_operator.warm_pool import build_warm_job_spec

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "core" / "unicore"
DECLARED = REPO / "core" / "unicore" / "api" / "pod_env.py"
# Local mode's supervisor sets some of the variables for its turn processes; setting is not reading.
SETTERS = (REPO / "core" / "unicore" / "launch" / "local.py",)
ENDPOINTS = [{"models": ["gpt-*"], "baseUrl": "https://api.openai.com/v1",
              "apiKeySecret": {"name": "openai", "key": "api-key"}}]
SEARCH = {"url": "https://search.example.com/mcp",
          "headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "search-key", "key": "token"}}]}


def constants() -> dict[str, str]:
    """The module's variables and prefixes by constant name."""
    return {name: value for name, value in vars(pod_env).items() if name.isupper() and isinstance(value, str)}


def full_env() -> list[dict[str, Any]]:
    """The turn container's env of a task that uses every optional part: a stall limit, the endpoint map with a key
    for its model, an MCP server with a header from a Secret, run_command (the workbench's socket); and the warm
    pool's variables, which only a warm Job of such a task's pool has (``warm_pool``)."""
    settings = OperatorSettings(redis_url="redis://redis:6379/0", stall_seconds=120,
                                openai_endpoints=json.dumps(ENDPOINTS))
    task = {"metadata": {"name": "demo", "namespace": "team-a", "uid": "uid-1", "labels": {}},
            "spec": {"prompt": "hi", "model": "openai:gpt-4o", "mcpServers": [{"name": "search"}],
                     "tools": ["read_file", "run_command"]}}
    mcp_env = turn_mcp_env({("team-a", "search"): [SEARCH]}, "team-a", task_spec_of(task))
    job = build_turn_job_spec(task, 1, settings, mcp_env=mcp_env)
    env: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"][0]["env"]
    warm = build_warm_job_spec(job, "demo", {}, max_wait_seconds=60)["spec"]["template"]["spec"]["containers"][0]
    return env + [item for item in warm["env"] if item["name"].startswith("UNICORE_WARM_")]


def test_the_module_lists_every_constant_it_declares() -> None:
    assert set(constants().values()) == set(pod_env.VARIABLES) | set(pod_env.PREFIXES)
    assert len(set(pod_env.VARIABLES)) == len(pod_env.VARIABLES)


def test_the_job_builder_sets_exactly_the_declared_variables() -> None:
    names = [item["name"] for item in full_env()]
    assert len(names) == len(set(names))
    assert {name for name in names if name in pod_env.VARIABLES} == set(pod_env.VARIABLES)
    numbered = [name for name in names if name not in pod_env.VARIABLES]
    assert all(name.startswith(pod_env.PREFIXES) for name in numbered), numbered
    assert {prefix for prefix in pod_env.PREFIXES if any(name.startswith(prefix) for name in numbered)} == set(
        pod_env.PREFIXES)
    # what UNICORE_AGENT_EXTRA_ENV may not override is the builder's own variables
    assert RESERVED_AGENT_ENV <= set(pod_env.VARIABLES)


def test_the_runtime_reads_each_variable() -> None:
    sources = [path.read_text() for path in sorted(CORE.rglob("*.py")) if path != DECLARED and path not in SETTERS]
    for name, value in constants().items():
        if value == pod_env.HOME or value in pod_env.PREFIXES:
            continue  # HOME is read by Python itself (Path.home), not by UniCore's code; the numbered ones: below
        assert any(re.search(rf"\bpod_env\.{name}\b", text) for text in sources), f"nothing in core reads {value}"
    # The numbered ones are read by the names the pod's maps give: the MCP header variables are the servers'
    # headersFromEnv, the key variable the one its endpoint's entry names.
    env = {item["name"]: item for item in full_env()}
    servers = parse_resolved(env[pod_env.MCP_SERVERS]["value"], local=False)
    headers = {variable for server in servers.values() for variable in server.spec.headers_from_env.values()}
    assert headers == {name for name in env if name.startswith(pod_env.MCP_HEADER_PREFIX)} != set()
    endpoints = parse_endpoints(env[pod_env.OPENAI_ENDPOINTS]["value"])
    keys = {endpoint.api_key_env for endpoint in endpoints.endpoints}
    assert keys == {name for name in env if name.startswith(pod_env.OPENAI_KEY_PREFIX)} != set()


def test_no_other_module_spells_a_declared_name() -> None:
    spelled = {value for value in constants().values() if value.startswith("UNICORE_")}
    offenders = []
    for package in ("core", "operator", "client", "hack"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == DECLARED:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in spelled:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} spells {node.value}")
    assert offenders == [], "use the constants of unicore.api.pod_env:\n" + "\n".join(offenders)
