"""Links to a tree's trace in the tracing UI people use: a URL template with ``{trace_id}`` (the operator's
``UNICORE_TRACE_URL``, local mode's ``UNICORE_TRACE_URL`` as ``unicore traces up`` prints it)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

TRACE_URL_VARIABLE = "UNICORE_TRACE_URL"
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def trace_url(trace_id: str, template: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The page of trace ``trace_id`` ("" without a valid id or template; default template: ``$UNICORE_TRACE_URL``)."""
    if template is None:
        template = (os.environ if env is None else env).get(TRACE_URL_VARIABLE, "")
    if not template or "{trace_id}" not in template or not TRACE_ID.match(trace_id or ""):
        return ""
    return template.replace("{trace_id}", trace_id)


def trace_status(trace_id: str, template: str) -> dict[str, str] | None:
    """An AgentTask's ``status.trace`` ({id, url}; None without a trace)."""
    if not TRACE_ID.match(trace_id or ""):
        return None
    url = trace_url(trace_id, template)
    return {"id": trace_id, "url": url} if url else {"id": trace_id}


__all__ = ["TRACE_URL_VARIABLE", "trace_status", "trace_url"]
