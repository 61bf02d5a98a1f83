"""``kubectl agenttask tree``: a pure rendering of AgentTask objects as a box-drawing tree (like
``argo get``).

``render_tree(tasks, now)`` takes the AgentTask objects (dicts as the API returns them) and the current time,
and returns the text; nothing here talks to a cluster, so golden files pin the output down.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from unicore.api import contract
from unicore.api.spec import task_spec_of
from unicore.terminal import printable

from unicore_client.kubectl_plugin.humanize import human_count, human_duration, one_line, parse_time
from unicore_client.tree import Forest, TreeRow, assemble

PHASE_ICONS_UTF8: dict[str, str] = {
    "Idle": "✔",
    "Running": "●",
    "Pending": "◷",
    "Suspended": "⏸",
    "Failed": "✖",
    "Waiting": "…",
    "WaitingForApproval": "?",
    "WaitingForInput": "?",
    "WaitingForJobs": "…",
    "Archived": "▫",
}
PHASE_ICONS_ASCII: dict[str, str] = {
    "Idle": "+",
    "Running": "*",
    "Pending": "o",
    "Suspended": "=",
    "Failed": "x",
    "Waiting": ".",
    "WaitingForApproval": "?",
    "WaitingForInput": "?",
    "WaitingForJobs": ".",
    "Archived": "-",
}
UNKNOWN_ICON = {True: "◌", False: "?"}
SETTLED = frozenset({"Idle", "Failed", "Archived"})
HUMAN = frozenset({"WaitingForApproval", "WaitingForInput"})  # the message says what the human is asked
LAST_RESPONSE_MAX = 60


@dataclass(frozen=True)
class Glyphs:
    branch: str
    last: str
    pipe: str
    blank: str

    @classmethod
    def for_mode(cls, utf8: bool) -> Glyphs:
        return cls("├─", "└─", "│ ", "  ") if utf8 else cls("|-", "`-", "| ", "  ")


def parent_name(obj: Mapping[str, Any]) -> str | None:
    """The parent AgentTask's name: the ownerReference of kind AgentTask, else ``spec.parentRef.name``."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == contract.KIND and str(ref.get("apiVersion", "")).startswith(f"{contract.GROUP}/"):
            return str(ref.get("name"))
    parent = task_spec_of(obj).parent_ref
    return parent.name if parent is not None and parent.name else None


def task_row(obj: Mapping[str, Any]) -> TreeRow[Mapping[str, Any]]:
    """An AgentTask object as a tree row: id ``<namespace>/<name>``, its parent in its own namespace, created at its
    ``creationTimestamp`` (none or unreadable: before any other)."""
    meta = obj.get("metadata", {})
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", "?"))
    parent = parent_name(obj)
    created = parse_time(meta.get("creationTimestamp"))
    return TreeRow(f"{namespace}/{name}", f"{namespace}/{parent}" if parent else None,
                   created.timestamp() if created else -math.inf, obj, name)


def namespace_of(row: TreeRow[Mapping[str, Any]]) -> str:
    return str(row.item.get("metadata", {}).get("namespace", ""))


def task_forest(tasks: Iterable[Mapping[str, Any]]) -> Forest[Mapping[str, Any]]:
    """The forest of ``tasks``: a task whose parent is not among them (or is itself) is a root; roots by namespace,
    then oldest first; siblings oldest first."""
    forest = assemble((task_row(obj) for obj in tasks), orphans_are_roots=True)
    return replace(forest, roots=sorted(forest.roots, key=namespace_of))


def build_forest(tasks: Iterable[Mapping[str, Any]]) -> list[TreeRow[Mapping[str, Any]]]:
    """The roots of ``tasks``' forest (``task_forest``)."""
    return task_forest(tasks).roots


def find_subtree(
    forest: Forest[Mapping[str, Any]], name: str, namespace: str | None = None
) -> TreeRow[Mapping[str, Any]] | None:
    stack = list(forest.roots)
    while stack:
        row = stack.pop()
        if row.name == name and (namespace is None or namespace_of(row) == namespace):
            return row
        stack.extend(forest.children_of(row.id))
    return None


def _duration(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    created = parse_time(obj.get("metadata", {}).get("creationTimestamp"))
    if created is None:
        return "-"
    status = obj.get("status") or {}
    if status.get("phase") in SETTLED:
        ended = parse_time((status.get("lastTurn") or {}).get("endedAt"))
        return human_duration((ended - created).total_seconds()) if ended else "-"
    return human_duration((now - created).total_seconds())


def _age(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    created = parse_time(obj.get("metadata", {}).get("creationTimestamp"))
    return human_duration((now - created).total_seconds()) if created else "-"


def _message(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    if status.get("phase") in HUMAN | {"Failed"} and status.get("message"):
        return str(status["message"])
    return str(status.get("lastResponse") or "")


def job_row(job: Mapping[str, Any], prefix: str, all_namespaces: bool, namespace: str) -> list[str]:
    """A command Job of a task (``status.jobs``) as a row under it: its name, state, and command (exit code)."""
    gpus = int(job.get("gpus") or 0)
    what = str(job.get("command") or "")
    if job.get("exitCode") is not None:
        what = f"exit {job.get('exitCode')}: {what}"
    row = [f"{prefix}job {job.get('name') or '?'}" + (f" ({gpus} GPU)" if gpus else ""), str(job.get("state") or "-"),
           "-", "-", "-", "-", what]
    row = [printable(cell) for cell in row]
    return [printable(namespace), *row] if all_namespaces else row


def render_tree(
    tasks: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
    *,
    utf8: bool = True,
    root: str | None = None,
    namespace: str | None = None,
    all_namespaces: bool = False,
    width: int | None = None,
) -> str:
    """The tree as text (lines end with newlines). ``root`` limits it to one task's subtree; ``width``
    (terminal columns) trims the LAST RESPONSE column so lines fit. KeyError when ``root`` is absent."""
    forest = task_forest(tasks)
    roots = forest.roots
    if root is not None:
        found = find_subtree(forest, root, namespace)
        if found is None:
            raise KeyError(root)
        roots = [found]
    if not roots:
        where = "any namespace" if all_namespaces else f"namespace {namespace or 'default'}"
        return f"No agenttasks found in {where}.\n"
    glyphs = Glyphs.for_mode(utf8)
    icons = PHASE_ICONS_UTF8 if utf8 else PHASE_ICONS_ASCII
    rows: list[list[str]] = []

    def visit(node: TreeRow[Mapping[str, Any]], prefix: str, connector: str) -> None:
        status = node.item.get("status") or {}
        phase = str(status.get("phase") or "")
        icon = icons.get(phase, UNKNOWN_ICON[utf8])
        origin = status.get("origin") or {}
        started_by = ""  # what started a root (issue 31): a schedule, a webhook trigger, an A2A caller
        if isinstance(origin, Mapping) and origin.get("kind"):
            kind = {"AgentSchedule": "schedule", "AgentTrigger": "trigger"}.get(str(origin["kind"]), "a2a")
            started_by = f" [{kind} {origin.get('name', '')}]"
        row = [
            f"{prefix}{connector}{icon} {node.name}{started_by}",
            phase or "-",
            str(status.get("turns") or 0),
            human_count(status.get("tokens")),
            _age(node.item, now),
            _duration(node.item, now),
            _message(node.item),
        ]
        # Names, phases and responses come from objects anyone with write access shaped: escape controls.
        row = [printable(cell) for cell in row]
        rows.append([printable(namespace_of(node)), *row] if all_namespaces else row)
        below = (
            "" if connector == "" else prefix + (glyphs.pipe if connector == glyphs.branch else glyphs.blank)
        )
        children = forest.children_of(node.id)
        jobs = [job for job in status.get("jobs") or [] if isinstance(job, Mapping)]
        for index, job in enumerate(jobs):  # its command Jobs (submit_job), before its children
            connector_of_job = glyphs.last if index == len(jobs) - 1 and not children else glyphs.branch
            rows.append(job_row(job, below + connector_of_job, all_namespaces, namespace_of(node)))
        for index, child in enumerate(children):
            visit(child, below, glyphs.last if index == len(children) - 1 else glyphs.branch)

    for tree_root in roots:
        visit(tree_root, "", "")
    header = ["NAME", "PHASE", "TURNS", "TOKENS", "AGE", "DURATION", "LAST RESPONSE"]
    if all_namespaces:
        header = ["NAMESPACE", *header]
    fixed = len(header) - 1
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(fixed)]
    numeric = {header.index("TURNS"), header.index("TOKENS")}
    used = sum(widths) + 2 * fixed
    budget = LAST_RESPONSE_MAX if width is None else max(0, min(LAST_RESPONSE_MAX, width - used))
    lines = []
    for row in [header, *rows]:
        cells = [
            row[i].rjust(widths[i]) if i in numeric and row is not header else row[i].ljust(widths[i])
            for i in range(fixed)
        ]
        last = row[fixed] if row is header else one_line(row[fixed], budget, utf8=utf8)
        lines.append(("  ".join(cells) + "  " + last).rstrip())
    return "\n".join(lines) + "\n"
