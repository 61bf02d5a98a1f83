"""unicore_operator.mcp_servers: the MCP variables of a turn pod (pure dicts)."""

from __future__ import annotations

import json
from typing import Any

from unicore.api.pod_env import MCP_SERVERS as MCP_SERVERS_ENV
from unicore.api.spec import AgentSpec, AgentTaskSpec, agent_spec_of, task_spec_of
from unicore.mcp_config import parse_resolved
from unicore_operator.mcp_servers import build_mcp_env, turn_mcp_env, used_server_names

TIME = {"url": "http://time.tools.svc:8000/mcp", "timeoutSeconds": 10, "toolTimeoutSeconds": {"slow": 60}}
SEARCH = {"url": "https://search.example.com/mcp",
          "headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "search-key", "key": "token"}},
                          {"name": "X-Team", "secretKeyRef": {"name": "search-key", "key": "team"}}]}


def task_spec(**fields: Any) -> AgentTaskSpec:
    return task_spec_of({"spec": fields})


def agent_spec(**fields: Any) -> AgentSpec:
    return agent_spec_of({"spec": fields})


def test_a_task_uses_its_own_servers_and_its_agents_each_once() -> None:
    spec = task_spec(mcpServers=[{"name": "time"}, {"name": "search", "tools": ["find"]}])
    agent = agent_spec(mcpServers=[{"name": "time", "tools": ["get_current_time"]}, {"name": "files"}])
    assert used_server_names(spec, agent) == ["files", "search", "time"]
    assert used_server_names(task_spec()) == [] and used_server_names(task_spec(mcpServers=None), None) == []


def test_the_pod_gets_resolved_definitions_and_header_secret_refs_never_values() -> None:
    env = build_mcp_env(["search", "time"], {"time": TIME, "search": SEARCH})
    by_name = {item["name"]: item for item in env}
    definitions = json.loads(by_name[MCP_SERVERS_ENV]["value"])
    assert definitions == [
        {"name": "search", "spec": {"url": SEARCH["url"], "headersFromEnv": {
            "Authorization": "UNICORE_MCP_HEADER_0_0", "X-Team": "UNICORE_MCP_HEADER_0_1"}}},
        {"name": "time", "spec": TIME},
    ]
    assert by_name["UNICORE_MCP_HEADER_0_1"]["valueFrom"] == {
        "secretKeyRef": {"name": "search-key", "key": "team", "optional": True}}
    assert "value" not in by_name["UNICORE_MCP_HEADER_0_0"]
    # what the runtime reads back (a turn pod: stdio refused)
    servers = parse_resolved(by_name[MCP_SERVERS_ENV]["value"], local=False)
    assert servers["search"].spec.headers_from_env == {"Authorization": "UNICORE_MCP_HEADER_0_0",
                                                       "X-Team": "UNICORE_MCP_HEADER_0_1"}
    assert servers["time"].spec.call_timeout("slow") == 60 and servers["time"].spec.call_timeout("x") == 10


def test_undefined_servers_are_left_to_the_turn_and_none_means_no_variables() -> None:
    assert build_mcp_env(["ghost"], {"time": TIME}) == []
    hostless = {"url": "http://:8000/mcp"}  # the CRD's pattern lets it through; no turn could connect to it
    assert build_mcp_env(["ghost", "hostless"], {"hostless": hostless}) == []
    assert build_mcp_env([], {"time": TIME}) == []
    env = build_mcp_env(["ghost", "time"], {"time": TIME})
    assert [d["name"] for d in json.loads(env[0]["value"])] == ["time"]


def test_a_turn_pod_gets_the_servers_of_its_task_and_agent_from_its_own_namespace_only() -> None:
    index = {("team-a", "time"): [TIME], ("team-b", "search"): [SEARCH], ("team-a", "search"): [SEARCH]}
    task = task_spec(mcpServers=[{"name": "time"}])
    env = turn_mcp_env(index, "team-a", task)
    assert [d["name"] for d in json.loads(env[0]["value"])] == ["time"] and len(env) == 1
    with_agent = turn_mcp_env(index, "team-a", task, agent_spec(mcpServers=[{"name": "search"}]))
    assert [d["name"] for d in json.loads(with_agent[0]["value"])] == ["search", "time"]
    other = task_spec(mcpServers=[{"name": "search"}])
    assert turn_mcp_env(index, "team-c", other) == []  # team-b's server is not team-c's
    assert turn_mcp_env(None, "team-a", task) == []


def test_an_agenttasks_mcp_servers_reach_its_stored_task_spec() -> None:
    from unicore.api.spec import SpecInvalid, parse_spec, to_task_spec

    spec = parse_spec({"prompt": "what time is it?", "mcpServers": [{"name": "time", "tools": ["get_current_time"]}]})
    stored = to_task_spec("team-a", "clock", spec, None)
    assert [(ref.name, ref.tools) for ref in stored.mcp_servers or []] == [("time", ["get_current_time"])]
    try:
        parse_spec({"prompt": "x", "mcpServers": [{"name": "Bad_Name"}]})
    except SpecInvalid as exc:
        assert "invalid MCP server name 'Bad_Name'" in str(exc)
    else:
        raise AssertionError("a bad server name was accepted")
