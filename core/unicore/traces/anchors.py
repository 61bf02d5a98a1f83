"""Where a task's turns hang in its tree's trace (stored as ``TaskRecord.trace_parent``, never guessed later):

* a child: under the ``execute_tool spawn_task`` span that created it (the spawner passes the current span on; on a
  cluster through the child AgentTask's ``unicore.dev/traceparent`` annotation);
* a root: under a ``task <name>`` span its creator emits (``unicore run``, the web UI, the operator for an AgentTask
  applied by a person, a schedule, a trigger, A2A);
* a task created while its creator had no tracing: under a ``task`` span its first traced turn emits and stores.
"""

from __future__ import annotations

import time

from unicore.traces import genai, spans


def root_span(task_id: str, name: str, created_at: float | None = None) -> str:
    """Emit a root task's ``task <name>`` span (a new trace: the tree's); its traceparent, "" when tracing is off."""
    at = time.time() if created_at is None else created_at
    ref = spans.emit(f"{genai.TASK_SPAN} {name}", start=at, end=max(at, time.time()), parent=None, root=True,
                     attributes={genai.TASK_ID: task_id, genai.CONVERSATION_ID: task_id})
    return ref.traceparent if ref is not None else ""


def for_new_task(task_id: str, name: str, *, parent: str | None, given: str | None = None) -> str:
    """The traceparent a task being created hangs under ("" when tracing is off and none is given): ``given`` (from
    the creator's request: an annotation), else the current span for a child (the spawn call), else a new root
    span for a root."""
    if spans.parse(given) is not None:
        return str(given)
    if parent:
        return spans.current() or ""
    return root_span(task_id, name)


__all__ = ["for_new_task", "root_span"]
