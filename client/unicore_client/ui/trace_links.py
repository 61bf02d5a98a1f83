"""The ``trace`` field of a task's JSON in the web UI (issue 32): ``{id, url}`` of the task tree's OpenTelemetry trace,
``url`` "" when there is no page to link to; ``None`` when the task has no trace. Built here, server-side, for both
backends:

- cluster mode (``cluster_trace``): the AgentTask's ``status.trace`` as the operator wrote it (its ``url`` only when
  the operator's ``UNICORE_TRACE_URL`` is set);
- local mode (``local_trace_url``): ``UNICORE_TRACE_URL`` of the UI's environment (``unicore.traces.links``), or,
  when it is unset, the Jaeger ``unicore traces up`` runs for this UniCore home (its ``/trace/<id>`` page).

The page (``static/app.js``) sets the url as a link's ``href`` only when it is an http or https URL; anything else is
shown as text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from unicore.traces.links import TRACE_ID, TRACE_URL_VARIABLE, trace_url

from unicore_client.local.traces_command import jaeger_home, read_state, running_pid

MAX_ID = 64  # a trace id is 32 hex digits; anything longer from an object's status is cut


def trace_json(trace_id: Any, url: Any = "") -> dict[str, str] | None:
    """``{id, url}`` (None without an id)."""
    if not isinstance(trace_id, str) or not trace_id:
        return None
    return {"id": trace_id[:MAX_ID], "url": url if isinstance(url, str) else ""}


def cluster_trace(trace: Any) -> dict[str, str] | None:
    """An AgentTask's ``status.trace`` ({id, url?}) as the page's ``trace``."""
    if not isinstance(trace, Mapping):
        return None
    return trace_json(trace.get("id"), trace.get("url") or "")


def jaeger_trace_url(trace_id: str, home: Path | None = None) -> str:
    """The page of ``trace_id`` in the Jaeger of ``unicore traces up`` (its state in ``home``, default
    ``${UNICORE_HOME}/jaeger``) while it runs; "" otherwise."""
    if not TRACE_ID.match(trace_id or ""):
        return ""
    state = read_state(home if home is not None else jaeger_home())
    if state is None or running_pid(state) is None:
        return ""
    query_url = state.get("query_url")
    return f"{query_url.rstrip('/')}/trace/{trace_id}" if isinstance(query_url, str) and query_url else ""


def local_trace_url(trace_id: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """The page of a local task's trace: ``UNICORE_TRACE_URL``'s when it is set (``env``, default the process's),
    else the running local Jaeger's; "" when neither gives one."""
    template = (os.environ if env is None else env).get(TRACE_URL_VARIABLE, "")
    if template:
        return trace_url(trace_id, template)
    return jaeger_trace_url(trace_id, home)


def local_trace(trace_id: str) -> dict[str, str] | None:
    """A local task's ``trace`` (``TaskRecord.trace_id``: "" when it has none)."""
    return trace_json(trace_id, local_trace_url(trace_id)) if trace_id else None


__all__ = ["cluster_trace", "jaeger_trace_url", "local_trace", "local_trace_url", "trace_json"]
