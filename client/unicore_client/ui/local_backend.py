"""The UI's backend for local mode: every read and write of ``unicore ui`` goes through ``LocalBackend``, which reads
Redis directly through ``unicore.store`` (no Redis layout here). The cluster-mode UI implements the same methods over
the operator's task API, so the HTTP layer (``unicore_client.ui.server``) does not change.

Suspend, resume and stop are local mode's (``unicore.store.suspension``): a flag on the task record, honoured by
every local supervisor (``unicore.launch.local``), which stops a running turn of a suspended task. Events are derived
from what the store recorded (``unicore_client.ui.local_views.task_events``: turns started and ended, approvals asked
and decided, compactions, suspensions, the last error); there are no Kubernetes Events in local mode. The JSON of the
tree and of a task's row is ``local_views``' too.

The tree feed (``tree_changes``, ``unicore_client.ui.tree_feed``) follows the stream of task changes
(``state.changes``):
it reads only the rows of the tasks that changed, and the whole forest every 30 s as a safety net.

Running trees: a task created or sent a message from the UI is run by a ``LocalSupervisor`` in a thread of the UI
process (one per root), as ``unicore run``/``unicore send`` do in the foreground; a message arriving while that
thread settles makes it run again rather than starting a second supervisor for the same tree.

Shared conversations (issue 33; ``unicore.store.conversations``): the person is the local user (the account running
``unicore ui``, as for ``unicore conv``); a post from the page joins them, is taken once per client id
(``user:<client id>``, the message box's exactly-once), is delivered, and the trees of the conversation's tasks then
run together in one background thread (``run_conversation``: one supervisor over all of them, as ``unicore conv post``
runs them, so a hand-off from one agent to another's tree is run too); a message, decision or resumption of a task
that takes part in conversations runs them the same way. The page follows a conversation by SSE
(``conversation_events``: Redis read every half second, since conversations have no change stream).
"""

from __future__ import annotations

import getpass
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from unicore import conversations as rules
from unicore.api.schema import (
    APPROVE_ALL,
    Approval,
    Limits,
    TaskSpec,
    check_prompt,
    user_message_id,
    validate_task_id,
)
from unicore.errors import TaskNotFound
from unicore.launch.embedded_redis import unicore_home
from unicore.store import command_jobs, suspension
from unicore.store import conversations as store_conversations
from unicore.store.client import RedisClient
from unicore.store.messages import load_message
from unicore.store.reads import read_message_slice
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import (
    SHOWN_KINDS,
    StreamEntry,
    check_entry_id,
    current_call,
    live_state,
    read_after,
)
from unicore.store.ui_reads import read_all_rows, read_task_history
from unicore.traces import anchors

from unicore_client.local.tree_runs import check_model, known_tools_text, unknown_tools
from unicore_client.ui.local_conversations import CONVERSATION_POLL_SECONDS, LocalConversations
from unicore_client.ui.local_views import EVENT_TURNS, forest_json, node_json, task_events
from unicore_client.ui.manifest import parse_manifest
from unicore_client.ui.refusals import BadRequest
from unicore_client.ui.scripts import ui_model
from unicore_client.ui.trace_links import local_trace
from unicore_client.ui.tree_feed import FeedTiming, tree_changes

PAGE_MAX = 500  # messages per transcript page


@dataclass(frozen=True)
class Cursor:
    """Where a task's event stream is: stored messages sent (``messages``) and the last live token entry sent."""

    messages: int
    tokens: str

    def text(self) -> str:
        return f"{self.messages}/{self.tokens}"

    @classmethod
    def parse(cls, value: str) -> Cursor:
        messages, _, tokens = value.partition("/")
        try:
            count = int(messages)
            check_entry_id(tokens)
        except ValueError:
            raise BadRequest(f"bad event id {value!r}") from None
        if count < 0:
            raise BadRequest(f"bad event id {value!r}")
        return cls(count, tokens)


def _entry_key(entry_id: str) -> tuple[int, int]:
    ms, _, n = entry_id.partition("-")
    return int(ms), int(n or 0)


class LocalBackend:
    """Reads and writes of the UI in local mode (module doc). ``client``: the Redis of ``redis_url``, connected; the
    task store is over it, and what works on a client itself takes it (the tree feed and rows, the model check, the
    supervisors of the trees it runs)."""

    def __init__(self, client: RedisClient, redis_url: str, *, tree_timing: FeedTiming | None = None,
                 scripts: Path | None = None, person: str | None = None) -> None:
        self.client = client
        self.person = person or getpass.getuser()  # who posts to conversations: the account running ``unicore ui``
        self.store = TaskStore(client)
        self.redis_url = redis_url
        self.scripts = scripts  # ``unicore ui --scripts DIR``: where the UI's scripted:NAME is read (ui.scripts)
        self.tree_timing = tree_timing or FeedTiming()
        self._lock = threading.Lock()
        self._runners: dict[str, bool] = {}  # root or "conversation:<name>" -> run again after settling
        self.conversation_source = LocalConversations(self.store, self.person, self.run_conversation)

    # ------------------------------------------------------------------ reads

    def roots(self) -> list[str]:
        return [node["id"] for node in self.forest() if node["depth"] == 0]

    def forest(self) -> list[dict[str, Any]]:
        """Every root's tree, flattened depth first (newest root first), at most ``local_views.MAX_NODES`` tasks (two
        round trips, whatever the number of tasks)."""
        return forest_json(read_all_rows(self.client))

    def tree_changes(self, stop: threading.Event) -> Iterator[list[dict[str, Any]] | None]:
        """The tree feed: the forest, then again when the stream of task changes says a row changed and it did
        (``unicore_client.ui.tree_feed``: only the named rows are read again; a full read every 30 s as a safety
        net)."""
        return tree_changes(self.client, stop, forest_json, self.tree_timing)

    def task(self, task_id: str) -> dict[str, Any]:
        record = self.store.get_task(task_id)  # TaskNotFound -> 404
        node = node_json(record.depth, record, self.store.waiting_for(task_id))
        node["children"] = self.store.children(task_id)
        node["messages"] = live_state(self.store, task_id).messages
        node["pending_calls"] = [
            {"call_id": c.call_id, "tool": c.tool, "input": c.input}
            for c in self.store.pending_calls(task_id)
        ]
        node["jobs"] = [command_jobs.shown(task_id, state) for state in command_jobs.job_states(self.store, task_id)]
        node["trace"] = local_trace(record.trace_id)  # {id, url} of its tree's trace (ui.trace_links); None: none
        node["conversations"] = store_conversations.task_conversations(self.store, task_id)
        return node

    def messages(self, task_id: str, start: int, count: int) -> list[dict[str, Any]]:
        self.store.get_task(task_id)
        count = max(0, min(count, PAGE_MAX))
        raws = read_message_slice(self.store, task_id, max(0, start), max(0, start) + count)
        return [load_message(raw).model_dump(mode="json") for raw in raws]

    def events(self, task_id: str) -> list[dict[str, Any]]:
        """The task's events (time, type Normal/Warning, reason, message), oldest first, derived from the store."""
        record = self.store.get_task(task_id)  # TaskNotFound -> 404
        return task_events(record, read_task_history(self.client, task_id, last_turns=EVENT_TURNS))

    # ------------------------------------------------------------------ writes

    def create(self, prompt: str, model: str, name: str | None, gated: list[str] | None = None,
               limits: dict[str, Any] | None = None) -> str:
        """Create and run a root task (as ``unicore run``); ``gated``: tools whose calls wait for approval;
        ``limits``: fields of ``schema.Limits`` (the others keep their defaults); ``scripted:NAME``: a file of the
        scripts directory only (``unicore_client.ui.scripts``)."""
        name = name or f"task-{uuid.uuid4().hex[:8]}"
        spec_model, script = ui_model(model or "scripted", self.scripts)
        spec = TaskSpec(id=_root_name(name), prompt=_prompt(prompt), model=spec_model, script=script,
                        limits=_limits(limits))
        if gated:
            spec.approval = Approval(tools=list(dict.fromkeys(gated)))
        return self._create(spec)

    def create_from_yaml(self, text: str) -> str:
        """Create and run a root task from an AgentTask manifest (``unicore_client.ui.manifest``: the CRD model's rules;
        Kubernetes-only fields such as gpus or nodeSelector have no meaning here and are ignored); one with
        ``spec.suspend: true`` is created suspended."""
        name, parsed = parse_manifest(text)
        model, script = ui_model(parsed.model or "scripted", self.scripts, parsed.script)
        try:
            spec = TaskSpec(id=_root_name(name), prompt=parsed.prompt, model=model, script=script,
                            system_prompt=parsed.system_prompt or "", tools=parsed.tools,
                            child_tools=parsed.child_tools, limits=_limits(parsed.limits.set_fields()),
                            approval=parsed.approval.runtime() if parsed.approval is not None else None)
        except ValidationError as exc:
            raise BadRequest(f"spec: {exc.errors()[0]['msg']}") from None
        return self._create(spec, suspended=parsed.suspend)

    def _create(self, spec: TaskSpec, *, suspended: bool = False) -> str:
        _prompt(spec.prompt)  # a manifest without spec.prompt
        check_model(spec.model, spec.script, self.client)
        if spec.approval is not None:
            _check_gated(spec.approval.tools)
        if not self.store.create_task(spec, trace_parent=anchors.for_new_task(spec.id, spec.id, parent=None)):
            raise BadRequest(f"task {spec.id} exists")
        if suspended:
            suspension.suspend(self.store, spec.id)
        self.store.activate(spec.id, "run")
        self.run_tree(spec.id)
        return spec.id

    def suspend(self, task_id: str) -> None:
        """Stop the task's running turn (its supervisor does, at once) and start no new one."""
        suspension.suspend(self.store, _local_id(task_id))

    def resume(self, task_id: str) -> None:
        suspension.resume(self.store, _local_id(task_id))
        self._run_for(task_id)

    def stop(self, task_id: str) -> list[str]:
        """Suspend the task and every descendant (the subtree's turns are stopped and none starts); the ids suspended
        now, top down."""
        return suspension.stop(self.store, _local_id(task_id))

    def send(self, task_id: str, text: str, client_id: str) -> bool:
        """Queue ``text`` once per ``client_id`` (a repeat is accepted and not queued again); runs the tree. An id of
        the runtime's own messages is refused (``schema.user_message_id``)."""
        try:
            user_message_id(client_id)
        except ValueError as exc:
            raise BadRequest(f"client_id: {exc}") from None
        if not text.strip():
            raise BadRequest("the message is empty")
        queued = self.store.queue_text(task_id, text, message_id=client_id)
        self.store.activate(task_id, "send")
        self._run_for(task_id)
        return queued

    def decide(self, task_id: str, call_id: str, approve: bool) -> None:
        self.store.decide(task_id, call_id, approve, by="ui", reason="")
        self._run_for(task_id)

    def run_tree(self, root: str) -> None:
        """Run the tree of ``root`` until it settles, in a thread of this process (module doc)."""
        self._run_in_background(root, lambda: [root])

    def _run_for(self, task_id: str) -> None:
        """Run what a message, decision or resumption of ``task_id`` sets going: its tree, or, when it takes part in
        conversations, their participants' trees together (its answer is posted there and may hand work to another
        participant's tree)."""
        joined = store_conversations.task_conversations(self.store, task_id)
        for name in joined:
            self.run_conversation(name)
        if not joined:
            self.run_tree(self.store.get_task(task_id).root)

    def run_conversation(self, name: str) -> None:
        """Run the trees of the conversation's participating tasks together until they settle, in a thread (module
        doc); the participants are read again each time it runs again."""
        self._run_in_background(f"conversation:{name}", lambda: self._conversation_roots(name))

    def _run_in_background(self, key: str, roots: Callable[[], list[str]]) -> None:
        with self._lock:
            if key in self._runners:
                self._runners[key] = True
                return
            self._runners[key] = False
        threading.Thread(target=self._run, args=(key, roots), name=f"ui-run-{key}", daemon=True).start()

    def _run(self, key: str, roots: Callable[[], list[str]]) -> None:
        from unicore.launch.local import LocalSupervisor

        supervisor = LocalSupervisor(self.client, self.redis_url, log_dir=unicore_home() / "logs")
        while True:
            try:
                found = roots()
                if found:
                    supervisor.run_until_settled(found)
            finally:
                with self._lock:
                    again = self._runners.get(key, False)
                    if not again:
                        self._runners.pop(key, None)
                    else:
                        self._runners[key] = False
            if not again:
                return

    def _conversation_roots(self, name: str) -> list[str]:
        roots: list[str] = []
        for task_id in rules.active_tasks(store_conversations.members(self.store, name)):
            try:
                roots.append(self.store.get_task(task_id).root or task_id)
            except TaskNotFound:
                continue
        return list(dict.fromkeys(roots))

    # ------------------------------------------------------------------ conversations (issue 33)

    def conversations(self) -> list[dict[str, Any]]:
        return self.conversation_source.conversations()

    def conversation(self, name: str) -> dict[str, Any]:
        return self.conversation_source.conversation(name)

    def conversation_posts(self, name: str, after: int, limit: int) -> list[dict[str, Any]]:
        return self.conversation_source.conversation_posts(name, after, limit)

    def conversation_post(self, name: str, text: str, client_id: str) -> dict[str, Any]:
        return self.conversation_source.conversation_post(name, text, client_id)

    def conversation_control(self, name: str, action: str) -> dict[str, Any]:
        return self.conversation_source.conversation_control(name, action)

    def conversation_create(self, name: str, title: str, tasks: list[str], handoff_limit: int) -> dict[str, Any]:
        return self.conversation_source.conversation_create(name, title, tasks, handoff_limit)

    def conversation_member(self, name: str, task: str, action: str) -> dict[str, Any]:
        return self.conversation_source.conversation_member(name, task, action)

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = CONVERSATION_POLL_SECONDS,
                            stop: threading.Event | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
        return self.conversation_source.conversation_events(name, after, wait_seconds=wait_seconds, stop=stop)

    # ------------------------------------------------------------------ live events

    def task_events(self, task_id: str, cursor: Cursor | int, *, wait_seconds: float = 1.0,
                    stop: threading.Event | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(event id, event name, data) of one task: stored messages (``message``), live text of calls whose answer
        is not stored yet (``token``) and the task's state when it changes (``task``); an empty name after a quiet
        wait (a keepalive). ``cursor`` is a resumed event id (everything after it, nothing twice) or, for a new
        stream, the number of messages the page has (then the call in progress is sent from its start). The event
        id is the cursor after the event."""
        self.store.get_task(task_id)  # TaskNotFound -> 404 before the stream starts
        pending: list[StreamEntry] = []
        if isinstance(cursor, int):
            pending, after = current_call(self.store, task_id)
            cursor = Cursor(cursor, "0" if pending else after)  # the pending entries move it on
        last_state: tuple[Any, ...] | None = None
        while stop is None or not stop.is_set():
            state = live_state(self.store, task_id)
            if cursor.messages < state.messages:
                for raw in read_message_slice(self.store, task_id, cursor.messages, state.messages):
                    message = load_message(raw).model_dump(mode="json")
                    cursor = Cursor(cursor.messages + 1, cursor.tokens)
                    yield cursor.text(), "message", message
            record = self.store.get_task(task_id)
            waiting = self.store.waiting_for(task_id)
            now = (record.status, record.turns, record.total_tokens, state.busy, waiting, record.suspended,
                   record.last_error)
            if now != last_state:
                last_state = now
                yield cursor.text(), "task", {**node_json(record.depth, record, waiting), "busy": state.busy,
                                              "messages": state.messages}
            if pending:
                entries, pending = pending, []
            else:
                entries = read_after(self.store, task_id, cursor.tokens, wait_seconds=wait_seconds)
            for entry in entries:
                cursor = Cursor(cursor.messages, max(cursor.tokens, entry.id, key=_entry_key))
                if entry.kind in SHOWN_KINDS and entry.seq >= cursor.messages:
                    yield cursor.text(), "token", {"seq": entry.seq, "attempt": entry.attempt,
                                                   "kind": entry.kind, "text": entry.text}
            if not entries:
                yield cursor.text(), "", {}  # nothing new: the server sends a comment (a closed client shows)


def _prompt(text: str | None) -> str:
    """``text`` by ``schema.check_prompt`` (the rule of ``unicore run`` too); BadRequest otherwise."""
    try:
        return check_prompt(text or "")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _root_name(name: str) -> str:
    try:
        validate_task_id(name)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return _local_id(name)


def _local_id(task_id: str) -> str:
    if "/" in task_id:
        raise BadRequest(f"{task_id}: a local task name has no '<namespace>/' part")
    return task_id


def _check_gated(names: list[str]) -> None:
    """BadRequest naming the tools to wait for approval that are no known tool (the command line's check, in the web
    UI's words: no option names)."""
    unknown = unknown_tools(names)
    if unknown:
        raise BadRequest(f"tools to wait for approval: unknown tool(s) {', '.join(unknown)}; known tools: "
                         f"{known_tools_text()} (or '{APPROVE_ALL}' for every tool)")


def _limits(given: dict[str, Any] | None) -> Limits:
    """``Limits`` with ``given`` over the defaults; a bad field is one line naming it."""
    try:
        return Limits.model_validate({**Limits().model_dump(), **(given or {})})
    except ValidationError as exc:
        error = exc.errors()[0]
        raise BadRequest(f"limits.{'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None


__all__ = ["BadRequest", "Cursor", "LocalBackend"]
