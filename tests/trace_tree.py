"""A trace as Jaeger's query API returns it, read as a tree (the trace tests of local mode and the real node)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CHAT_ATTRIBUTES = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
                   "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons")
TOOL_ATTRIBUTES = ("gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type")
AGENT_ATTRIBUTES = ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.conversation.id")
ROOT, MID, LEAF = "tr", "tr-mid", "tr-mid-leaf"


def three_level_script(leaf: dict[str, Any]) -> dict[str, Any]:
    """A scripted tree ROOT -> MID -> LEAF whose turns report up (``leaf``: the leaf's one step). Each of mid's turns
    reports, so the root runs a turn for each (or one for both)."""
    spawn = [{"name": "spawn_task", "input": {"name": "mid", "prompt": "Ask a leaf."}}]
    return {"default": "Done.", "tasks": {
        ROOT: [{"tool_use": spawn}, {"text": "Waiting for mid."}],
        MID: [{"tool_use": [{"name": "spawn_task", "input": {"name": "leaf", "prompt": "Answer."}}]},
              {"text": "Waiting for the leaf."}, {"text": "Mid: the leaf reported."}],
        LEAF: [leaf],
    }}


@dataclass
class Span:
    id: str
    name: str
    parent: str | None
    links: list[str]
    start: int  # microseconds
    duration: int
    tags: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.tags.get("otel.status_code") == "ERROR" or self.tags.get("error") is True


class TraceTree:
    def __init__(self, trace: dict[str, Any]) -> None:
        self.trace_id: str = trace["traceID"]
        self.spans: dict[str, Span] = {}
        self.foreign: list[str] = []  # references to other traces
        for raw in trace["spans"]:
            parent, links = None, []
            for ref in raw.get("references") or []:
                if ref["traceID"] != self.trace_id and ref["refType"] == "CHILD_OF":
                    self.foreign.append(raw["spanID"])
                if ref["refType"] == "CHILD_OF":
                    parent = ref["spanID"]
                else:
                    links.append(ref["spanID"])
            tags = {tag["key"]: tag["value"] for tag in raw.get("tags") or []}
            events = [{f["key"]: f["value"] for f in log.get("fields") or []} for log in raw.get("logs") or []]
            self.spans[raw["spanID"]] = Span(raw["spanID"], raw["operationName"], parent, links, raw["startTime"],
                                             raw["duration"], tags, events)

    def named(self, name: str) -> list[Span]:
        return sorted((s for s in self.spans.values() if s.name == name), key=lambda s: s.start)

    def prefixed(self, prefix: str) -> list[Span]:
        return sorted((s for s in self.spans.values() if s.name.startswith(prefix)), key=lambda s: s.start)

    def orphans(self) -> list[Span]:
        """Spans whose parent is not in the trace."""
        return [s for s in self.spans.values() if s.parent is not None and s.parent not in self.spans]

    def roots(self) -> list[Span]:
        return [s for s in self.spans.values() if s.parent is None]

    def parent(self, span: Span) -> Span:
        assert span.parent is not None and span.parent in self.spans, f"{span.name} has no parent in the trace"
        return self.spans[span.parent]

    def turns(self, task: str) -> list[Span]:
        """The ``invoke_agent`` spans of task ``task`` (its turn attempts), oldest first."""
        return [s for s in self.prefixed("invoke_agent ") if s.tags.get("gen_ai.agent.id") == task]

    def within(self, span: Span) -> Iterable[Span]:
        """Every span under ``span``."""
        for child in self.spans.values():
            if child.parent == span.id:
                yield child
                yield from self.within(child)

    def outline(self) -> str:
        """The tree as indented names (assertion messages)."""
        lines: list[str] = []

        def walk(span: Span, depth: int) -> None:
            lines.append("  " * depth + span.name + (" [ERROR]" if span.failed else ""))
            for child in sorted((c for c in self.spans.values() if c.parent == span.id), key=lambda c: c.start):
                walk(child, depth + 1)

        for root in sorted(self.roots() + self.orphans(), key=lambda s: s.start):
            walk(root, 0)
        return "\n".join(lines)


def missing(span: Span, names: Iterable[str]) -> list[str]:
    return [name for name in names if name not in span.tags]
