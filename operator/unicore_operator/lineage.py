"""A child AgentTask may only narrow its parent: the checks the admission webhook and the create handler share.

A child (an AgentTask with ``spec.parentRef``) is made by ``spawn_task`` in a turn pod, which copies the parent's
limits and narrows its tools, but anyone who may create AgentTasks (a namespace user, any turn pod's ServiceAccount)
could also write one by hand. ``check_child`` says what is wrong with such a child, against its parent's settings as
the API server has them (a ``TaskView`` from ``parent_view.effective_view``: the AgentTask chain and the Agents, equal
to what an untampered record holds) and its parent's AgentTask. Never against the parent's Redis record: a namespace's
own Redis user, held by its turn pods, may write every field of it. The same function checks every link of
that chain (``parent_view``):

- the parent is in the child's own namespace, is the object ``parentRef.uid`` names, and may have children at all
  (``limits.recursion``, and the child's depth within the parent's ``limits.maxDepth``);
- every limit of the child (its own ``spec.limits`` over the parent's, as ``spec.to_task_spec`` stores them) is
  at most the parent's: maxIterations, maxDepth, maxChildren, maxDescendants; a tokenBudget of the parent's or
  less, and never 0 (unlimited) under a parent that has one; recursion only if the parent has it; the turn timeout
  (``spec.limits.turnTimeoutSeconds``, else the operator's default, as the turn Jobs get it) at most the parent's;
- its tools (``spec.tools``, else the parent's default child toolset) lie within ``policy.tool_ceiling``: the
  parent's own tools, and only those of its ``childTools`` when it has them (a child with ``spec.agentRef``: within
  its Agent's, which its parent's agent must list: ``agent_checks``);
- its ``unicore.dev/root`` label, if any, names the parent's tree (the label picks the tree's workspace folder).

The root's descendant budget (``maxDescendants``) and the parent's ``maxChildren`` are counted in Redis: the webhook
reads the slot sets (``SpawnSlots.room``), the create handler reserves the child's slots (``reserve_child_slots``),
both in the tree of the chain's root (the view's ``root_id``: in the child's namespace by construction).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unicore.api.schema import Limits, task_name
from unicore.api.spec import AgentTaskSpec, LimitsSpec, SpecInvalid, spec_key, task_spec_of, to_task_spec
from unicore.store.task_views import TaskView
from unicore.tools import policy

from unicore_operator import names

__all__ = ["check_child", "refusal", "turn_timeout"]

# Limits whose child value must not exceed the parent's.
CAPPED_LIMITS = ("max_iterations", "max_depth", "max_children", "max_descendants")


def turn_timeout(spec: AgentTaskSpec, default: int) -> int:
    """The turn timeout a task's Jobs get: ``spec.limits.turnTimeoutSeconds``, else the operator's default
    (``job_builder.turn_timeout_seconds``)."""
    return spec.limits.turn_timeout_seconds or default


def limit_problems(parent: Limits, child: Limits) -> list[str]:
    """Where the child's stored limits exceed its parent's."""
    problems = [
        f"spec.limits.{spec_key(LimitsSpec, field)} {getattr(child, field)} is above its parent's "
        f"{getattr(parent, field)}"
        for field in CAPPED_LIMITS
        if getattr(child, field) > getattr(parent, field)
    ]
    if parent.token_budget:
        if not child.token_budget:
            problems.append(f"spec.limits.tokenBudget 0 (unlimited) is above its parent's {parent.token_budget:,}")
        elif child.token_budget > parent.token_budget:
            problems.append(
                f"spec.limits.tokenBudget {child.token_budget:,} is above its parent's {parent.token_budget:,}"
            )
    if child.recursion and not parent.recursion:
        problems.append("spec.limits.recursion is true but its parent's is false")
    return problems


def check_child(
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    parsed: AgentTaskSpec,
    parent_obj: Mapping[str, Any],
    parent: TaskView,
    default_turn_timeout: int,
) -> list[str]:
    """What is wrong with child AgentTask ``namespace/name`` (``parsed``: its spec) under its parent (``parent_obj``
    its AgentTask, ``parent`` its settings: ``parent_view``); empty when it only narrows its parent."""
    ref = parsed.parent_ref
    if ref is None:
        return []
    problems: list[str] = []
    if ref.namespace not in (None, namespace):
        problems.append(
            f"spec.parentRef.namespace {ref.namespace!r}: a parent must be in its child's own namespace ({namespace})"
        )
    parent_meta = parent_obj.get("metadata") or {}
    if ref.uid and ref.uid != parent_meta.get("uid"):
        problems.append(
            f"spec.parentRef.uid {ref.uid} is not the uid of AgentTask {namespace}/{ref.name} "
            f"({parent_meta.get('uid')})"
        )
    if not parent.limits.recursion:
        problems.append(f"its parent may not have children (limits.recursion is false for {parent.id})")
    elif parent.depth + 1 > parent.limits.max_depth:
        problems.append(
            f"it would be at depth {parent.depth + 1}, deeper than its parent's limits.maxDepth "
            f"{parent.limits.max_depth}"
        )
    try:
        stored = to_task_spec(namespace, name, parsed, parent)
    except SpecInvalid as exc:
        return [*problems, str(exc)]
    problems += limit_problems(parent.limits, stored.limits)
    child_timeout = turn_timeout(parsed, default_turn_timeout)
    parent_timeout = turn_timeout(task_spec_of(parent_obj), default_turn_timeout)
    if child_timeout > parent_timeout:
        problems.append(f"spec.limits.turnTimeoutSeconds {child_timeout} is above its parent's {parent_timeout}")
    # A child with spec.agentRef: its Agent's tools are its ceiling, granted by its parent's agent listing it
    # (agent_checks.agent_task_problems); otherwise its parent's.
    ceiling = policy.tool_ceiling(parent)
    outside = [tool for tool in stored.tools or () if tool not in ceiling] if parsed.agent_ref is None else []
    if outside:
        source = "spec.tools" if parsed.tools is not None else "the default child toolset"
        granted = "its parent's tools" if parent.child_tools is None else "its parent's childTools"
        problems.append(
            f"{source} names {', '.join(outside)}, not among {granted} ({', '.join(ceiling) or 'none'})"
        )
    root_label = labels.get(names.ROOT_LABEL)
    parent_labels = parent_meta.get("labels") or {}
    tree = parent_labels.get(names.ROOT_LABEL) or names.label_value(task_name(parent.root_id))
    if root_label is not None and root_label != tree:
        problems.append(f"label {names.ROOT_LABEL}={root_label} is not its parent's tree ({tree})")
    return problems


def refusal(namespace: str, name: str, parent_name: str, problems: list[str]) -> str:
    """One message for a refused child."""
    return (
        f"AgentTask {namespace}/{name} may only narrow its parent {namespace}/{parent_name}: " + "; ".join(problems)
    )
