"""``kubectl agenttask describe``: spec, status, children and recent events of one AgentTask. Pure."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from unicore.api.spec import AgentTaskSpec, spec_key, task_spec_of
from unicore.terminal import printable
from unicore.traces.links import trace_url

from unicore_client.kubectl_plugin.humanize import human_duration, one_line, parse_time

MAX_EVENTS = 20
# Scheduling fields shown as they are set (even empty), each under its YAML key.
SHOWN_AS_SET = ("gpus", "queue_name", "priority_class_name", "runtime_class_name")


def _event_time(event: Mapping[str, Any]) -> datetime.datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        moment = parse_time(event.get(key))
        if moment:
            return moment
    return parse_time((event.get("metadata") or {}).get("creationTimestamp"))


def _field(label: str, value: Any, indent: int = 0) -> str:
    return f"{' ' * indent}{label + ':':<20}{'' if value is None else value}"


def trace_text(trace: Any, template: str = "") -> str:
    """The ``Trace:`` value of an AgentTask's ``status.trace`` ({id, url?}; "" without a trace): the operator's url,
    else the id, with the page ``template`` (the user's ``UNICORE_TRACE_URL``) makes of it, if any."""
    if not isinstance(trace, Mapping):
        return ""
    url = one_line(trace.get("url"), 1000)
    if url:
        return url
    trace_id = one_line(trace.get("id"), 64)
    built = trace_url(trace_id, template) if template and trace_id else ""
    return f"{trace_id} ({one_line(built, 1000)})" if built else trace_id


def render_describe(
    obj: Mapping[str, Any],
    children: Sequence[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
    approvals: Sequence[str] = (),
    trace_template: str = "",
) -> str:
    """The text; ``approvals``: the lines of ``approvals.render_approvals`` (none: the section is left out);
    ``trace_template``: the user's ``UNICORE_TRACE_URL`` (``unicore.traces.links``), for a trace without a url."""
    meta = obj.get("metadata") or {}
    spec = task_spec_of(obj)
    status = obj.get("status") or {}
    created = parse_time(meta.get("creationTimestamp"))
    lines = [
        _field("Name", meta.get("name")),
        _field("Namespace", meta.get("namespace")),
        _field(
            "Created",
            f"{meta.get('creationTimestamp')} ({human_duration((now - created).total_seconds())} ago)"
            if created
            else "-",
        ),
        _field("Parent", (spec.parent_ref.name if spec.parent_ref is not None else "") or "<none>"),
        "Spec:",
        _field("Agent", (spec.agent_ref.name if spec.agent_ref is not None else "") or "<none>", 2),
        _field("Model", spec.model or status.get("model") or "scripted", 2),
        _field("Suspend", spec.suspend, 2),
        _field("Prompt", one_line(spec.prompt, 200) or "<none>", 2),
    ]
    if spec.system_prompt:
        lines.append(_field("System Prompt", one_line(spec.system_prompt, 200), 2))
    if spec.tools:
        lines.append(_field("Tools", ", ".join(spec.tools), 2))
    for server in spec.mcp_servers or ():
        allowed = ", ".join(server.tools or []) or "all its tools"
        lines.append(_field("MCP Server", f"{server.name} ({allowed})", 2))
    limits = spec.limits.model_dump(by_alias=True, exclude_none=True)
    if limits:
        lines.append(_field("Limits", json.dumps(limits, sort_keys=True), 2))
    for field in SHOWN_AS_SET:
        if field in spec.model_fields_set:
            key = spec_key(AgentTaskSpec, field)
            lines.append(_field(key[0].upper() + key[1:], getattr(spec, field), 2))
    last_turn = status.get("lastTurn") or {}
    lines += [
        "Status:",
        _field("Phase", status.get("phase", "<unknown>"), 2),
        _field("Message", status.get("message", ""), 2),
        _field("Turns", status.get("turns", 0), 2),
        _field("Iterations", status.get("iterations", 0), 2),
        _field(
            "Tokens",
            f"{status.get('tokens', 0)} (in {status.get('inputTokens', 0)}, "
            f"out {status.get('outputTokens', 0)})",
            2,
        ),
        _field("Active Job", status.get("activeJob") or "<none>", 2),
        _field("Depth", status.get("depth", 0), 2),
    ]
    origin = status.get("origin") or {}
    if origin:  # what started it (issue 31): a schedule's run, a webhook event, an A2A caller
        detail = ", ".join(f"{key} {one_line(str(origin[key]), 120)}" for key in ("at", "id", "caller")
                           if origin.get(key))
        lines.append(_field("Started By", f"{one_line(str(origin.get('kind', '')), 40)} "
                                          f"{one_line(str(origin.get('name', '')), 120)}"
                                          + (f" ({detail})" if detail else ""), 2))
    trace = trace_text(status.get("trace"), trace_template)
    if trace:  # the tree's OpenTelemetry trace (issue 32): its page, else its id
        lines.append(_field("Trace", trace, 2))
    if last_turn:
        lines.append(
            _field(
                "Last Turn",
                f"#{last_turn.get('number')} {last_turn.get('startedAt', '?')} -> "
                f"{last_turn.get('endedAt', '...')}",
                2,
            )
        )
        if last_turn.get("summary"):
            lines.append(_field("Summary", one_line(last_turn["summary"], 300), 4))
    lines.append(_field("Last Response", one_line(status.get("lastResponse"), 300) or "<none>", 2))
    waiting = status.get("waitingFor") or {}
    if waiting.get("kind") == "approval":
        more = f" (+{int(waiting.get('calls') or 1) - 1} more)" if int(waiting.get("calls") or 1) > 1 else ""
        lines.append(_field("Waiting For", f"approval of call {waiting.get('callId')} ({waiting.get('tool')}){more} "
                                           f"since {waiting.get('since', '?')}: kubectl agenttask approve|deny "
                                           f"{meta.get('name')}", 2))
    elif waiting.get("kind") == "input":
        lines.append(_field("Waiting For", f"an answer since {waiting.get('since', '?')}: kubectl agenttask send "
                                           f"{meta.get('name')} TEXT", 2))
        lines.append(_field("Question", one_line(waiting.get("question"), 300), 4))
    conditions = status.get("conditions") or []
    lines.append("  Conditions:" + ("" if conditions else " <none>"))
    for cond in conditions:
        lines.append(
            f"    {cond.get('type')}={cond.get('status')} reason={cond.get('reason', '')} "
            f"observedGeneration={cond.get('observedGeneration', '')}: {cond.get('message', '')}".rstrip()
        )
    lines.extend(approvals)
    lines.append("Children:" + ("" if children else " <none>"))
    for child in sorted(
        children,
        key=lambda c: (
            (c.get("metadata") or {}).get("creationTimestamp") or "",
            (c.get("metadata") or {}).get("name") or "",
        ),
    ):
        child_status = child.get("status") or {}
        lines.append(
            f"  {(child.get('metadata') or {}).get('name'):<30} {child_status.get('phase', '-'):<10} "
            f"turns={child_status.get('turns', 0)} tokens={child_status.get('tokens', 0)}"
        )
    recent = sorted(
        events, key=lambda e: _event_time(e) or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    )
    recent = recent[-MAX_EVENTS:]
    lines.append("Events:" + ("" if recent else " <none>"))
    if recent:
        lines.append(f"  {'Type':<8} {'Reason':<14} {'Age':<8} {'From':<18} Message")
        for event in recent:
            moment = _event_time(event)
            age = human_duration((now - moment).total_seconds()) if moment else "-"
            source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
            count = int(event.get("count") or 1)
            age_text = f"{age} (x{count})" if count > 1 else age
            lines.append(
                f"  {event.get('type', ''):<8} {event.get('reason', ''):<14} {age_text:<8} "
                f"{source:<18} {one_line(event.get('message'), 200)}"
            )
    return printable("\n".join(lines)) + "\n"
