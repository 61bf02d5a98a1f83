"""A turn process loads only what every turn uses (issue 24; docs/benchmarks.md "Turn start-up"): the ``mcp`` SDK
(about 0.3 s) only for a task with MCP servers (``tools.registry.toolbox_for``), boto3 only for a Bedrock model
(``providers.registry``), YAML only for the scripted model's script files. Checked in a fresh interpreter, as
``unicore-turn`` starts, up to its model: its context window and the model object of an OpenAI-compatible model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Top-level packages a turn with a real model and without MCP servers never needs.
LAZY = ("mcp", "mcp_types", "httpx2", "anyio", "boto3", "botocore", "yaml")

TURN_START = """
import json, sys
import unicore.turn.entry
from unicore.turn.context_window import ContextSettings
from unicore.providers.registry import resolve_model

ContextSettings.from_env().window_for("openai:bench")
resolve_model("openai:bench")
print(json.dumps(sorted(sys.modules)))
"""


def test_a_turn_with_a_real_model_and_no_mcp_servers_loads_no_mcp_sdk_no_aws_sdk_and_no_yaml():
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "x"}
    proc = subprocess.run([sys.executable, "-c", TURN_START], capture_output=True, text=True, timeout=120,
                          env=env, check=True)
    loaded = {name.split(".", 1)[0] for name in json.loads(proc.stdout)}
    assert loaded.isdisjoint(LAZY), sorted(loaded.intersection(LAZY))
