"""A parent task as the API server has it: the settings a new child is checked against, and its tree's root.

A task's Redis record holds the settings its turns run with (limits, tools, childTools, depth, root, the agents it
may spawn), but a namespace's own Redis user, the one its turn pods hold (``unicore.store.acl``), may write every
field of it (a pod could raise its own record's limits and tools and have a wider child admitted, or set its
``root`` to a task of another namespace and have the child's slot reserved in that tree's budget). So the
admission webhook and the create handler (``admission``) never read a parent's settings from its record; they compute
them from what only the API server says:

- ``ancestry``: the AgentTask chain above a parent, root first, along ``spec.parentRef`` within the parent's own
  namespace (a link into another namespace, to a task that does not exist, a cycle, or more than ``MAX_DEPTH``
  links are a ``LineageBroken`` with one line). Every id in the chain is ``<namespace>/<name>`` of that namespace,
  so the root it yields (for the tree's slots, ``reserve_child_slots``) is in the child's namespace by construction;
- ``effective_view``: folds that chain down from the root with the functions that build the stored records
  (``spec.to_task_spec``; for a task with ``spec.agentRef``, ``unicore.agents.effective_spec`` over its Agent as
  the API server has it now, as ``TaskStore.create_task`` and each turn's ``agent_resolution`` lay it), so the
  ``TaskView`` equals what an untampered record holds; an Agent changed since is no difference to report: the Agent
  object wins, as it does at the task's next turn. Each link is checked as admission checks a new child
  (``lineage.check_child``; an Agent must exist and be one its parent may spawn), so an ancestor that got past
  admission another way, or that no longer narrows its parent (its root's spec or an Agent narrowed since), stops
  its subtree from growing: the refusal names it;
- ``create_record``: the create handler's write of a new task's record from that view (its depth and root from the
  chain, not from the parent's record).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from unicore.agents import AgentDefinition, effective_spec, own_settings
from unicore.api.schema import TaskSpec
from unicore.api.spec import AgentTaskSpec, SpecInvalid, parse_spec, task_spec_of, to_task_spec
from unicore.store.task_views import TaskView
from unicore.store.tasks import TaskStore

from unicore_operator import agent_checks, lineage

__all__ = ["MAX_DEPTH", "LineageBroken", "ancestry", "broken", "create_record", "effective_view", "task_view"]

# The deepest a task can be: ``schema.Limits.max_depth`` is at most 32 (the CRDs' ``maxDepth`` maximum), and a child
# is at most its parent's maxDepth deep, so a parent has at most MAX_DEPTH ancestors.
MAX_DEPTH = 32

Body = Mapping[str, Any]
Fetch = Callable[[str], Awaitable[Body | None]]


class LineageBroken(SpecInvalid):
    """The AgentTask chain above a parent cannot vouch for a child; the message says where, in one line."""


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


async def ancestry(namespace: str, parent: Body, fetch: Fetch) -> list[Body]:
    """The AgentTasks from the root of ``parent``'s tree down to ``parent`` (its last element), following each
    ``spec.parentRef`` with ``fetch`` (an AgentTask of ``namespace`` by name; None: none); LineageBroken when a link
    leaves the namespace, names no AgentTask, closes a cycle, or the chain is deeper than MAX_DEPTH."""
    chain = [parent]
    seen = [_name(parent)]
    while True:
        ref = task_spec_of(chain[-1]).parent_ref
        if ref is None:
            return chain[::-1]
        above = ref.name
        below = f"{namespace}/{seen[-1]}"
        if ref.namespace not in (None, namespace) or not above or "/" in above:
            raise LineageBroken(f"AgentTask {below} names a parent outside namespace {namespace} "
                                f"({ref.namespace or namespace}/{above})")
        if above in seen:
            raise LineageBroken(f"the parentRefs above AgentTask {below} form a cycle: "
                                f"{' -> '.join([*seen, above])}")
        if len(chain) > MAX_DEPTH:
            raise LineageBroken(f"AgentTask {namespace}/{seen[0]} has more than {MAX_DEPTH} ancestors (a task is at "
                                f"most {MAX_DEPTH} deep: limits.maxDepth is at most {MAX_DEPTH})")
        body = await fetch(above)
        if body is None:
            raise LineageBroken(f"AgentTask {namespace}/{above}, the parent of {below}, does not exist")
        chain.append(body)
        seen.append(above)


def task_view(spec: TaskSpec, definition: AgentDefinition | None, *, root: str, depth: int) -> TaskView:
    """The record ``TaskStore.create_task`` stores for ``spec`` (at ``depth`` in the tree of ``root``), with a turn's
    resolution against its Agent ``definition`` (None: it has none), as the settings a child is checked against."""
    agents: list[str] | None = None
    if definition is not None:
        agents = list(definition.agents)
        spec = effective_spec(TaskSpec.model_validate({"id": spec.id, **own_settings(spec)}), definition).model_copy(
            update={"parent": spec.parent, "script": spec.script, "agent": spec.agent})
    return TaskView(id=spec.id, parent=spec.parent, root=root, depth=depth, model=spec.model,
                    system_prompt=spec.system_prompt, tools=spec.tools, child_tools=spec.child_tools,
                    limits=spec.limits, script=spec.script, agent=spec.agent, agents=agents)


def _parsed(namespace: str, body: Body) -> AgentTaskSpec:
    try:
        return parse_spec(dict(body.get("spec") or {}))
    except SpecInvalid as exc:
        raise LineageBroken(f"AgentTask {namespace}/{_name(body)} above it cannot run: {exc}") from None


def effective_view(namespace: str, chain: Sequence[Body], agents: Mapping[str, Body | None],
                   default_turn_timeout: int) -> TaskView:
    """The settings of the last task of ``chain`` (root first, ``ancestry``), from the AgentTasks alone and the
    Agents of ``namespace`` they name (``agents``: body by name, None: it does not exist); LineageBroken naming the
    first link that does not narrow its parent."""
    view: TaskView | None = None
    above: Body = {}
    for depth, body in enumerate(chain):
        name, meta = _name(body), body.get("metadata") or {}
        parsed = _parsed(namespace, body)
        ref = parsed.parent_ref
        if (ref.name if ref is not None else None) != (_name(above) if view is not None else None):
            raise LineageBroken(f"AgentTask {namespace}/{name} is not where its spec.parentRef puts it")
        if view is not None:
            problems = lineage.check_child(namespace=namespace, name=name, labels=meta.get("labels") or {},
                                           parsed=parsed, parent_obj=above, parent=view,
                                           default_turn_timeout=default_turn_timeout)
            if problems:
                raise LineageBroken(f"AgentTask {namespace}/{name} above it does not narrow its own parent "
                                    f"{view.id}: " + "; ".join(problems))
        definition = None
        if parsed.agent_ref is not None:
            agent = parsed.agent_ref.name
            definition, problems = agent_checks.usable_agent(namespace, agent, agents.get(agent), view)
            if definition is None or problems:
                raise LineageBroken(f"AgentTask {namespace}/{name} above it cannot run as its Agent: "
                                    + "; ".join(problems))
        try:
            spec = to_task_spec(namespace, name, parsed, view)
        except SpecInvalid as exc:
            raise LineageBroken(f"AgentTask {namespace}/{name} above it cannot run: {exc}") from None
        root = view.root_id if view is not None else spec.id
        view, above = task_view(spec, definition, root=root, depth=depth), body
    if view is None:
        raise LineageBroken("no AgentTask to check a child against")
    return view


def broken(namespace: str, name: str, parent: str, exc: LineageBroken) -> str:
    """One message for a child whose parent's chain cannot vouch for it."""
    return f"AgentTask {namespace}/{name} cannot be checked against its parent {namespace}/{parent}: {exc}"


def create_record(store: TaskStore, namespace: str, name: str, parsed: AgentTaskSpec,
                  parent: TaskView | None, trace_parent: str = "") -> bool:
    """Store AgentTask ``namespace/name``'s record (False: it existed and is kept): its settings from ``parsed`` over
    ``parent`` (``effective_view``; None for a root), its depth and root from the chain; ``trace_parent``: where its
    turns hang in its tree's trace (``unicore.traces.anchors``)."""
    spec = to_task_spec(namespace, name, parsed, parent)
    if parent is None:
        return store.create_task(spec, trace_parent=trace_parent)
    return store.create_task(spec, root=parent.root_id, depth=parent.depth + 1, trace_parent=trace_parent)
