"""Limits on what agents may do, enforced in code (never left to the model).

``check_spawn`` and ``check_message`` are PURE functions over the parent's record and a few counts, so the
local spawner and the Kubernetes spawner run exactly the same checks. They run BEFORE anything is written: a
refused action raises ``LimitExceeded`` (or ``ToolError`` for bad input) and leaves Redis untouched.
``tree_counts`` gathers the counts with pipelined reads (a few round trips, one per tree level).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from unicore.api.schema import MAX_TASK_NAME, child_task_id, task_name, validate_task_id
from unicore.errors import LimitExceeded, ToolError
from unicore.store.tasks import TaskStore
from unicore.tools import storeview
from unicore.tools.storeview import TaskView

SPAWN_TOOL = "spawn_task"
MESSAGE_TOOL = "message_task"
# Tools that only make sense for a task allowed to have children.
SPAWNING_TOOLS = (SPAWN_TOOL, MESSAGE_TOOL)

# A root task (no parent) without an explicit tool list gets these.
DEFAULT_TOOLS: tuple[str, ...] = (
    "read_file",
    "write_file",
    "list_files",
    "spawn_task",
    "message_task",
    "task_status",
)
# A child gets a reduced, read-only toolset unless its parent (or the spawn call) says otherwise: a child works on
# a part of its parent's task and changes nothing it was not asked to.
DEFAULT_CHILD_TOOLS: tuple[str, ...] = (
    "read_file",
    "list_files",
    "task_status",
    "spawn_task",
    "message_task",
)

# Tools a child gets only when its parent's ``child_tools`` names them, never by asking for its parent's tools:
# running code is the most dangerous thing an agent does (``tools.run_command``).
EXPLICIT_CHILD_TOOLS: tuple[str, ...] = ("run_command", "submit_job")

CHILD_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_CHILD_NAME = 63


@dataclass(frozen=True)
class TreeCounts:
    """What the limits are checked against."""

    children: int  # existing children of the parent
    descendants: int  # existing descendants of the root (the root itself not counted)
    tokens_used: int  # total tokens used by the root's whole tree


@dataclass(frozen=True)
class SpawnPlan:
    child_id: str
    depth: int
    tools: list[str]


def may_spawn(task: TaskView) -> bool:
    """Recursion is on and a child of this task would be within ``max_depth``."""
    return task.limits.recursion and task.depth + 1 <= task.limits.max_depth


def allowed_tool_names(task: TaskView, known: Collection[str] | None = None) -> list[str]:
    """The names of the tools this task may use (in order; names not in ``known`` dropped, None: none dropped)."""
    if task.tools is not None:
        base: Sequence[str] = task.tools
    else:
        base = DEFAULT_TOOLS if task.parent is None else DEFAULT_CHILD_TOOLS
    names = [name for name in dict.fromkeys(base) if known is None or name in known]
    if not may_spawn(task):
        names = [name for name in names if name not in SPAWNING_TOOLS]
    return names


def validate_child_name(parent_id: str, name: str) -> str:
    """The child's id, or a ToolError saying what a valid name looks like."""
    if not isinstance(name, str) or not CHILD_NAME_RE.match(name) or len(name) > MAX_CHILD_NAME:
        raise ToolError(
            f"invalid child name {name!r}: use 1-{MAX_CHILD_NAME} lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (e.g. 'research-a')"
        )
    child_id = child_task_id(parent_id, name)
    try:
        validate_task_id(child_id)
    except ValueError:
        room = MAX_TASK_NAME - len(task_name(parent_id)) - 1  # the child's name is '<parent name>-<name>'
        advice = f"use at most {room} characters" if room > 0 else "this task's own name leaves no room for children"
        raise ToolError(
            f"child name {name!r} is too long here: the child's task name would be "
            f"{len(task_name(child_id))} characters, at most {MAX_TASK_NAME} are allowed ({advice})"
        ) from None
    return child_id


def check_budget(parent: TaskView, counts: TreeCounts) -> None:
    budget = parent.limits.token_budget
    if budget and counts.tokens_used >= budget:
        raise LimitExceeded(
            f"token budget exhausted: the task tree of {parent.root_id} has used {counts.tokens_used:,} "
            f"of its {budget:,} tokens (limits.token_budget); no more work can be delegated. "
            "Finish with what you have."
        )


def tool_ceiling(parent: TaskView, known: Collection[str] | None = None) -> list[str]:
    """The tools a child of ``parent`` may get: the parent's own, and of those only its ``child_tools`` when set
    (without them, none of ``EXPLICIT_CHILD_TOOLS``).

    The same ceiling holds however the child is made (``spawn_task``, or an AgentTask a user or a turn pod creates:
    the operator's admission webhook and create handler check it too)."""
    allowed = allowed_tool_names(parent, known)
    if parent.child_tools is None:
        return [name for name in allowed if name not in EXPLICIT_CHILD_TOOLS]
    return [name for name in allowed if name in parent.child_tools]


def child_tools(parent: TaskView, requested: Sequence[str] | None, known: Collection[str] | None) -> list[str]:
    """The child's tools: ``requested`` (checked) or the parent's child toolset; never beyond ``tool_ceiling``.

    ``known`` None checks no names against a registry (the operator, which does not load the turn pods' tools)."""
    parent_allowed = allowed_tool_names(parent, known)
    if requested is None:
        base = parent.child_tools if parent.child_tools is not None else DEFAULT_CHILD_TOOLS
        return [name for name in dict.fromkeys(base) if name in parent_allowed]
    unknown = sorted({name for name in requested if known is not None and name not in known})
    if unknown:
        raise ToolError(f"unknown tool(s) {', '.join(unknown)}; known tools: {', '.join(sorted(known or ()))}")
    lacking = sorted({name for name in requested if name not in parent_allowed})
    if lacking:
        raise LimitExceeded(
            f"a child cannot get tools its parent lacks: {', '.join(lacking)} "
            f"(your tools: {', '.join(parent_allowed) or 'none'})"
        )
    ceiling = tool_ceiling(parent, known)
    outside = sorted({name for name in requested if name not in ceiling})
    if outside:
        raise LimitExceeded(
            f"a child cannot get tools outside its parent's child toolset (childTools): {', '.join(outside)} "
            f"(your children may get: {', '.join(ceiling) or 'none'})"
        )
    return list(dict.fromkeys(requested))


def check_agent(parent: TaskView, agent: str) -> None:
    """``parent`` may spawn a child running agent ``agent`` (a name): its own agent lists it (``agents``)."""
    allowed = parent.agents or []
    if agent not in allowed:
        may = f"the agents you may spawn: {', '.join(allowed)}" if allowed else "you may spawn no agents by name"
        raise LimitExceeded(f"you may not spawn agent {agent!r}: {may} (or spawn without `agent`)")


def agent_child_tools(agent: str, agent_tools: Sequence[str], requested: Sequence[str] | None) -> list[str]:
    """The tools of a child that runs agent ``agent``: ``requested`` (a subset of the agent's), else the agent's.
    An agent child's ceiling is its agent's tools, not its parent's: the parent's agent granted it by listing it."""
    if requested is None:
        return list(agent_tools)
    outside = sorted({name for name in requested if name not in agent_tools})
    if outside:
        raise LimitExceeded(f"a child running agent {agent!r} can only get that agent's tools: {', '.join(outside)} "
                            f"are not among them ({', '.join(agent_tools) or 'none'})")
    return list(dict.fromkeys(requested))


def check_spawn(
    parent: TaskView,
    name: str,
    counts: TreeCounts,
    requested_tools: Sequence[str] | None,
    known_tools: Collection[str],
    agent: tuple[str, Sequence[str]] | None = None,
) -> SpawnPlan:
    """Decide whether ``parent`` may create a NEW child ``name``; raise LimitExceeded/ToolError if not. ``agent``:
    (name, tools) of the agent the child runs (``check_agent`` first): its tools replace the parent's ceiling."""
    child_id = validate_child_name(parent.id, name)
    limits = parent.limits
    if not limits.recursion:
        raise LimitExceeded("spawning child tasks is disabled for this task tree (limits.recursion is false)")
    depth = parent.depth + 1
    if depth > limits.max_depth:
        raise LimitExceeded(
            f"maximum depth reached: a child of {parent.id} would be at depth {depth}, "
            f"but limits.max_depth is {limits.max_depth}. Do the work yourself instead."
        )
    if counts.children >= limits.max_children:
        raise LimitExceeded(
            f"maximum children reached: {parent.id} already has {counts.children} child task(s) "
            f"(limits.max_children = {limits.max_children}). Reuse an existing child by spawning it again "
            "with the same name (it gets your prompt as a new message)."
        )
    if counts.descendants >= limits.max_descendants:
        raise LimitExceeded(
            f"maximum task tree size reached: {parent.root_id} already has {counts.descendants} "
            "descendant task(s) "
            f"(limits.max_descendants = {limits.max_descendants})"
        )
    check_budget(parent, counts)
    if agent is not None:
        return SpawnPlan(child_id=child_id, depth=depth, tools=agent_child_tools(agent[0], agent[1], requested_tools))
    return SpawnPlan(child_id=child_id, depth=depth, tools=child_tools(parent, requested_tools, known_tools))


def check_message(parent: TaskView, counts: TreeCounts) -> None:
    """Decide whether ``parent`` may send more work to an existing descendant (token budget only)."""
    check_budget(parent, counts)


def tree_counts(store: TaskStore, parent: TaskView) -> TreeCounts:
    """Counts for ``check_spawn``: the parent's children, the root's descendants and the tree's token use."""
    root = parent.root_id
    tree = store.descendants(root, limit=parent.limits.max_descendants + 1)
    children = store.child_count(parent.id)
    # The store rolls usage up onto the root (best effort); the per-task sum covers a missed roll-up.
    root_view = parent if parent.id == root else storeview.read_views(store, [root])[0]
    rolled_up = root_view.tree_total_tokens if root_view is not None else 0
    tokens = max(rolled_up, store.tree_tokens([root, *(node.id for node in tree)]))
    return TreeCounts(children=children, descendants=len(tree), tokens_used=tokens)
