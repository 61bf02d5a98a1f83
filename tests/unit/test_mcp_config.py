"""MCP server definitions, references and the names the model sees (issue 17): pure."""

from __future__ import annotations

import hashlib
import itertools
import json
import re

import mcp_types
import pytest
from pydantic import ValidationError
from unicore.api.schema import MCPServerRef, TaskSpec
from unicore.errors import ConfigError
from unicore.mcp_config import dump_resolved, parse_document, parse_resolved, resolved
from unicore.tools.mcp_toolbox import offered_names
from unicore.tools.mcp_tools import result_text
from unicore_client.arguments import UsageError
from unicore_client.local.mcp_commands import is_mcp_tool_name, parse_attachment

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def doc(spec: dict, name: str = "web", **top: object) -> dict:
    return {"apiVersion": "unicore.dev/v1alpha1", "kind": "MCPServer", "metadata": {"name": name}, "spec": spec,
            **top}


def test_a_document_becomes_its_resolved_definition_and_survives_the_variable():
    server = resolved(parse_document(doc({"url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"},
                                 "headersFromEnv": {"Authorization": "WEB_TOKEN"}, "timeoutSeconds": 5,
                                 "toolTimeoutSeconds": {"slow": 300}}), "f.yaml", local=True))
    assert server.name == "web" and server.spec.transport == "http"
    assert server.spec.call_timeout("slow") == 300 and server.spec.call_timeout("fast") == 5
    text = dump_resolved([server])
    assert json.loads(text) == [{"name": "web", "spec": {
        "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"},
        "headersFromEnv": {"Authorization": "WEB_TOKEN"}, "timeoutSeconds": 5.0,
        "toolTimeoutSeconds": {"slow": 300.0}}}]
    assert parse_resolved(text, local=False) == {"web": server}
    stdio = parse_document(doc({"command": "python", "args": ["-m", "x"], "env": {"A": "1"}}, "t"), "f", local=True)
    assert stdio.spec.transport == "stdio" and stdio.spec.timeout_seconds == 30


@pytest.mark.parametrize(("spec", "expected"), [
    ({"url": "https://x/mcp", "port": 1}, "spec.port: unknown field"),
    ({"url": "https://x/mcp", "command": "y"}, "give exactly one of url (streamable HTTP) or command (stdio)"),
    ({}, "give exactly one of url"),
    ({"url": "https://x/mcp", "args": ["a"]}, "args and env go with command (stdio), not with url"),
    ({"command": "y", "headers": {"A": "b"}}, "headers go with url (streamable HTTP), not with command"),
    ({"url": "x.example.com/mcp"}, "url must be an http:// or https:// URL with a host"),
    ({"url": "https://x/mcp", "timeoutSeconds": 0}, "spec.timeoutSeconds: Input should be greater than 0"),
    ({"url": "https://x/mcp", "toolTimeoutSeconds": {"t": 7200}}, "spec.toolTimeoutSeconds.t: Input should be less"),
    ({"url": "https://x/mcp", "headers": {"Bad Name": "v"}}, "invalid header name(s): 'Bad Name'"),
    ({"url": "https://x/mcp", "headersFromEnv": {"A": "1X"}}, "headersFromEnv: invalid variable name"),
    ({"command": "y", "env": {"A-B": "1"}}, "invalid environment variable name(s): 'A-B'"),
    ({"url": "https://x/mcp", "headersFrom": [{"name": "A", "secretKeyRef": {"name": "Bad_Name", "key": "k"}}]},
     "invalid Secret name 'Bad_Name'"),
])
def test_bad_specs_are_one_line_naming_the_server_and_the_field(spec, expected):
    with pytest.raises(ConfigError) as caught:
        parse_document(doc(spec), "servers.yaml", local=False)
    message = str(caught.value)
    assert message.startswith("servers.yaml: MCPServer 'web': ") and expected in message and "\n" not in message


def test_bad_documents_are_one_line():
    cases = [
        (doc({"url": "https://x"}, apiVersion="v1"), "apiVersion: must be 'unicore.dev/v1alpha1'"),
        ({**doc({"url": "https://x"}), "kind": "Agent"}, "kind: must be 'MCPServer'"),
        (doc({"url": "https://x"}, name="Web_1"), "invalid MCP server name 'Web_1'"),
        (doc({"url": "https://x"}, name="a" * 33), "use 1-32 lowercase letters"),
        (["not", "a", "mapping"], "an MCPServer document is a mapping"),
    ]
    for data, expected in cases:
        with pytest.raises(ConfigError) as caught:
            parse_document(data, "f.yaml", local=True)
        assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_header_values_never_appear_in_errors():
    with pytest.raises(ConfigError) as caught:
        parse_document(doc({"url": "https://x/mcp", "headers": {"Authorization": "Bearer s3cret\nX: y"}}), "f",
                       local=True)
    assert "line break" in str(caught.value) and "s3cret" not in str(caught.value)
    text = json.dumps([{"name": "web", "spec": {"url": "https://x/mcp", "headers": {"A": "s3cret"}, "bad": 1}}])
    with pytest.raises(ConfigError) as caught:
        parse_resolved(text, local=True)
    assert "UNICORE_MCP_SERVERS[0]: spec.bad: unknown field" in str(caught.value) and "s3cret" not in str(caught.value)


def test_local_mode_has_no_secrets_and_turn_pods_no_stdio_servers():
    secret = doc({"url": "https://x/mcp",
                  "headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "web-token", "key": "t"}}]})
    assert parse_document(secret, "f", local=False).spec.headers_from is not None  # cluster: resolved by the operator
    with pytest.raises(ConfigError, match="headersFrom names a Kubernetes Secret, which local mode does not have"):
        parse_document(secret, "f", local=True)
    unresolved = json.dumps([{"name": "web", "spec": secret["spec"]}])
    with pytest.raises(ConfigError, match="headersFrom is not resolved"):
        parse_resolved(unresolved, local=False)
    stdio = json.dumps([{"name": "t", "spec": {"command": "python"}}])
    assert "t" in parse_resolved(stdio, local=True)
    with pytest.raises(ConfigError, match="'t' is a stdio server .command., which runs only in local mode"):
        parse_resolved(stdio, local=False)


@pytest.mark.parametrize(("text", "expected"), [
    ("{", "UNICORE_MCP_SERVERS is not JSON"),
    ('{"name": "t"}', "must be a JSON list"),
    ('[{"name": "t", "spec": {"command": "a"}}, {"name": "t", "spec": {"command": "b"}}]', "'t' is defined twice"),
])
def test_bad_variable_values(text, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        parse_resolved(text, local=True)
    assert parse_resolved("  ", local=False) == {}


def test_offered_names_keep_valid_names_and_make_the_others_valid_unique_and_stable():
    tools = ["echo", "get-sum", "files.read", "files_read", "a.b", "x" * 80, "y" * 80, "ü"]
    offered = offered_names("fs", tools)
    assert sorted(offered.values()) == sorted(tools)  # every tool once
    assert all(NAME.match(name) for name in offered)
    assert offered["fs__echo"] == "echo" and offered["fs__get-sum"] == "get-sum"
    assert offered["fs__files_read"] == "files_read"  # a valid name keeps it; the sanitized clash is hashed
    hashed = next(name for name, tool in offered.items() if tool == "files.read")
    assert re.fullmatch(r"fs__files_read_[0-9a-f]{8}", hashed)
    assert offered["fs__a_b"] == "a.b"  # sanitized, no clash: readable
    long_names = [name for name, tool in offered.items() if tool in ("x" * 80, "y" * 80)]
    assert len(set(long_names)) == 2 and all(len(name) == 64 for name in long_names)
    assert offered_names("fs", list(reversed(tools))) == offered  # the same names in every turn, whatever the order
    longest_server = "s" * 32
    assert all(NAME.match(name) for name in offered_names(longest_server, ["t" * 100, "u.v"]))


def test_offered_names_do_not_depend_on_the_order_the_server_lists_its_tools_in():
    """Names that sanitise alike (issue 24): each gets a name derived from its own real name, in every order."""
    tools = ["files.read", "files/read", "files read", "files_read", "a.b", "a/b"]
    offered = offered_names("fs", tools)
    assert sorted(offered.values()) == sorted(tools) and all(NAME.match(name) for name in offered)
    for order in itertools.permutations(tools):
        assert offered_names("fs", list(order)) == offered, order
    for colliding in ("files.read", "files/read", "files read", "a.b", "a/b"):  # each of a clash is hashed
        digest = hashlib.sha256(colliding.encode()).hexdigest()[:8]
        assert {tool: name for name, tool in offered.items()}[colliding].endswith("_" + digest)
    assert offered["fs__files_read"] == "files_read"  # a valid name keeps it


def test_result_text_summarizes_what_is_not_text():
    result = mcp_types.CallToolResult(content=[
        mcp_types.TextContent(text="hello"),
        mcp_types.ImageContent(data="AAAA" * 10, mime_type="image/png"),
        mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="inside")),
        mcp_types.EmbeddedResource(resource=mcp_types.BlobResourceContents(uri="file:///b.bin", blob="AAAA",
                                                                           mime_type="application/zip")),
        mcp_types.ResourceLink(uri="file:///c", name="c", mime_type="text/plain"),
    ], structured_content={"ignored": "when there is text"})
    assert result_text(result).splitlines() == [
        "hello", "[image image/png, 30 bytes: not shown]", "[resource file:///a.txt]", "inside",
        "[resource file:///b.bin application/zip, 3 bytes: not shown]", "[resource link file:///c (c, text/plain)]"]
    only_structured = mcp_types.CallToolResult(content=[], structured_content={"temperature": 3})
    assert result_text(only_structured) == '{"temperature": 3}'


def test_references_and_attachments():
    assert MCPServerRef(name="time", tools=["a", "a", "b"]).tools == ["a", "b"]
    with pytest.raises(ValidationError):
        MCPServerRef(name="time", tools=[""])
    with pytest.raises(ValidationError, match="MCP server.s. named more than once: time"):
        TaskSpec(id="t", mcp_servers=[{"name": "time"}, {"name": "time", "tools": ["x"]}])
    assert parse_attachment("time") == MCPServerRef(name="time")
    assert parse_attachment("time:get_current_time, convert_time") == MCPServerRef(
        name="time", tools=["get_current_time", "convert_time"])
    with pytest.raises(UsageError, match="invalid MCP server name 'Time'"):
        parse_attachment("Time")
    refs = [MCPServerRef(name="time")]
    assert is_mcp_tool_name("time__get_current_time", refs)
    assert not is_mcp_tool_name("clock__x", refs) and not is_mcp_tool_name("time__", refs)
