"""``unicore`` (local mode and inspection) and ``unicore-turn`` (one turn; the Kubernetes Job entrypoint).

``unicore run [--model M] [--name NAME] [--script FILE] PROMPT``   create a root task, run its tree, print the answer
``unicore send TASK TEXT [--no-wait]``                              queue a message, run the tree again
``unicore show TASK [--json | --follow]``                           the transcript, turn by turn (then live)
``unicore tree [TASK]``                                             the tree with statuses, turns and tokens
``unicore approve|deny TASK [--call ID] [--reason TEXT]``, ``unicore pending TASK``   tool calls waiting for a person
``unicore suspend|resume|stop TASK``                                pause a task (stop: its whole subtree), resume
``unicore gc [--ttl S] [--archive URL] [--dry-run]``                archive and remove trees idle past the TTL
``unicore ui [--port P] [--open]``                                  the web UI on 127.0.0.1 (``unicore_client.ui``)

Exit codes: 0 ok, 1 failed (a clear one-line error), 2 bad arguments or input files (one line, checked by
``unicore_client.arguments`` before anything is written). ``unicore-turn``: see ``unicore.turn.entry``.
``REDIS_URL`` selects Redis; unset, a private redis-server is started in ``${UNICORE_HOME:-~/.unicore}/redis``. A
``REDIS_URL`` no client can be built from is exit 2, a server not reached within the retry window exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Sequence
from dataclasses import asdict

import redis
from redis.exceptions import RedisClusterException
from unicore import log as unicore_log
from unicore.api.contract import same_namespace
from unicore.api.schema import (
    APPROVE_ALL,
    Approval,
    Limits,
    TaskSpec,
    check_prompt,
    prompt_message_id,
    validate_task_id,
)
from unicore.api.turn_numbers import shown_turn
from unicore.errors import ConfigError, MessageTooLarge, TaskNotFound, UniCoreError
from unicore.launch.embedded_redis import redis_url
from unicore.settings import RuntimeSettings
from unicore.store import conversations
from unicore.store.client import RedisURLError
from unicore.store.records import TaskRecord
from unicore.store.retention import archived_note
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable
from unicore.traces import anchors
from unicore.traces import setup as traces
from unicore.turn.history import answer_to, message_text
from unicore.turn.transcript import compaction_mark

from unicore_client.arguments import (
    UsageError,
    check_utf8_arguments,
    field_bounds,
    int_between,
    message_id_argument,
    positive_seconds,
)
from unicore_client.local.agent_commands import (
    add_agents_command,
    agent_task_spec,
    chosen_definition,
    read_agent_option,
)
from unicore_client.local.approval_commands import add_approval_commands, call_mark, print_waiting
from unicore_client.local.control_commands import add_control_commands, print_suspended
from unicore_client.local.conversation_command import add_conversation_command
from unicore_client.local.follow import Follower
from unicore_client.local.follow import block_lines as _block_lines
from unicore_client.local.gc_command import add_gc_command
from unicore_client.local.mcp_commands import add_mcp_arguments, mcp_for_run
from unicore_client.local.schedule_command import add_schedule_command
from unicore_client.local.traces_command import add_traces_command
from unicore_client.local.tree_runs import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    check_gated_tools,
    check_model,
    open_store,
    script_spec,
    settle,
)
from unicore_client.local.ui_command import add_ui_command
from unicore_client.tree import TreeRow, assemble


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line (no usage block), exit code 2."""
        print(f"{self.prog}: error: {printable(message, multiline=False)} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"unicore: error: {printable(message, multiline=False)}", file=sys.stderr)
    return code


def _show(text: str) -> None:
    """Print text that may hold model, user or tool text: control characters become visible escapes."""
    print(printable(text))


def cmd_run(args: argparse.Namespace) -> int:
    try:
        check_prompt(args.prompt)  # the web UI's rule too
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    name = args.name or f"task-{uuid.uuid4().hex[:8]}"
    try:
        validate_task_id(name)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if "/" in name:  # local roots are bare names: their workspace folder is named after them
        return _fail(f"invalid task name {name!r}: a local task name has no '<namespace>/' part", EXIT_USAGE)
    model, script = script_spec(args.model or "scripted", args.script)  # bad script files: refused before Redis
    mcp_refs, mcp_servers = mcp_for_run(args.mcp_server, args.mcp)  # bad files and names: refused here too
    choice = read_agent_option(args.agent) if args.agent else None  # bad Agent files: refused here too
    if choice is None:
        check_gated_tools(args.require_approval or [], mcp_refs)
    if args.tool:
        check_tool_names(args.tool)
    no_sandbox(args)
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    if choice is not None:  # docs/agents.md: the agent's settings, narrowed by the options given
        definition = chosen_definition(client, choice)
        given = {server.name for server in mcp_servers}  # --mcp-server FILE wins over the agent files' own
        mcp_servers += [s for s in (choice.files.mcp_servers if choice.files else []) if s.name not in given]
        if choice.files and choice.files.skipped:
            print(f"[unicore] local mode runs no {', '.join(choice.files.skipped)} (Kubernetes objects of the agent "
                  "files)", file=sys.stderr)
        check_model(args.model or definition.model, script, client)
        spec = agent_task_spec(args, name, definition, choice.name, model if args.model else None, script,
                               mcp_refs if args.mcp else None, mcp_servers)
    else:
        check_model(model, script, client)
        spec = TaskSpec(id=name, prompt=args.prompt, model=model, script=script, system_prompt=args.system or "",
                        mcp_servers=mcp_refs, mcp_definitions=[server.dump() for server in mcp_servers] or None)
    if choice is None:
        if args.max_iterations is not None:
            spec.limits.max_iterations = args.max_iterations
        if args.no_summary:
            spec.limits.summarize_turns = False
        if args.require_approval:
            spec.approval = Approval(tools=list(dict.fromkeys(args.require_approval)),
                                     timeout_seconds=args.approval_timeout or Approval().timeout_seconds)
        if args.ask_user or args.tool:
            from unicore.tools.policy import DEFAULT_TOOLS

            added = (["ask_user"] if args.ask_user else []) + list(args.tool or ())
            spec.tools = list(dict.fromkeys([*DEFAULT_TOOLS, *added]))
    message_id = prompt_message_id(name)
    for conversation in args.conversation or ():  # it must exist: checked before anything is created
        conversations.read_meta(store, conversation)
    if not store.create_task(spec, trace_parent=anchors.for_new_task(spec.id, name, parent=None)):
        message_id = uuid.uuid4().hex
        store.queue_text(name, args.prompt, message_id=message_id)
        print(f"[unicore] task {name} exists: the prompt was sent to it as a new message"
              + (" (its MCP servers stay as they were)" if mcp_refs else ""), file=sys.stderr)
    for conversation in args.conversation or ():  # before its first turn: that turn's answer is posted there
        conversations.join(store, conversation, "task", name)
    store.activate(name, "run")
    code = settle(client, url, name, quiet=args.quiet, timeout=args.timeout)
    if code == EXIT_OK and (print_waiting(store, name) or print_suspended(store, name)):  # what to do next
        return code
    return _print_answer(store, name, message_id, code)


def _where_it_went(store: TaskStore, task_id: str, exc: TaskNotFound) -> TaskNotFound:
    """A missing task that retention removed says where its conversation went; others stay as they are."""
    note = archived_note(store, task_id)
    return TaskNotFound(note.describe()) if note is not None else exc


def no_sandbox(args: argparse.Namespace) -> None:
    """``--no-sandbox``: this command's turns run ``run_command`` as plain subprocesses (said loudly)."""
    if getattr(args, "no_sandbox", False):
        os.environ[RuntimeSettings.env_var("command_sandbox")] = "0"
        print("[unicore] WARNING: --no-sandbox: run_command runs commands as plain processes with your user's "
              "rights: they can read your home folder, ~/.unicore and everything else you can", file=sys.stderr)


def check_tool_names(names: list[str]) -> None:
    from unicore.tools.registry import known_tools

    unknown = sorted(set(names) - set(known_tools()))
    if unknown:
        raise UsageError(f"--tool: unknown tool(s) {', '.join(unknown)}; known: {', '.join(sorted(known_tools()))}")


def cmd_send(args: argparse.Namespace) -> int:
    no_sandbox(args)
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    message_id = args.id or uuid.uuid4().hex
    try:
        store.queue_text(args.task, args.text, message_id=message_id)
    except TaskNotFound as exc:
        raise _where_it_went(store, args.task, exc) from None
    store.activate(args.task, "send")
    if args.no_wait:
        _show(f"queued for {args.task} (message {message_id})")
        return EXIT_OK
    code = settle(client, url, args.task, quiet=args.quiet, timeout=args.timeout)
    if code == EXIT_OK and (print_waiting(store, store.get_task(args.task).root) or print_suspended(store, args.task)):
        return code
    return _print_answer(store, args.task, message_id, code)


def _print_answer(store: TaskStore, task_id: str, message_id: str, code: int) -> int:
    """Print the answer to OUR message (not the task's latest answer: another send may have come after ours)."""
    answer = answer_to(store.load_history(task_id), message_id)
    if answer is None:
        note = f"[unicore] message {message_id} of {task_id} has no answer yet (see: unicore show {task_id})"
        print(printable(note), file=sys.stderr)
        return code if code != EXIT_OK else EXIT_FAILED
    if answer:
        _show(answer)
    return code


def cmd_show(args: argparse.Namespace) -> int:
    if args.json and args.follow:
        raise UsageError("--follow prints text as it comes; it does not go with --json")
    store = open_store()
    try:
        record = store.get_task(args.task)
    except TaskNotFound as exc:
        raise _where_it_went(store, args.task, exc) from None
    turns = store.load_history(args.task)
    compacted = {c.upto: c for c in store.compactions(args.task)}  # where requests start (marks)
    if args.json:
        print(
            json.dumps(
                {
                    "task": record.model_dump(mode="json"),
                    "turns": [turn.model_dump(mode="json") for turn in turns],
                    "compactions": [asdict(c) for c in compacted.values()],
                    "approvals": [asdict(c) for c in store.approval_calls(args.task)],
                    "inbox": [m.model_dump(mode="json") for m in store.inbox(args.task)],
                },
                indent=2,
            )
        )
        return EXIT_OK
    _show(
        f"Task {record.id}  status={record.status}  model={record.model}  turns={record.turns}  "
        f"tokens={record.total_tokens}" + (f"  parent={record.parent}" if record.parent else "")
        + (f"  agent={record.agent}" if record.agent else "")
    )
    if record.last_error:
        _show(f"Last error: {record.last_error}")
    marks = {call.call_id: call_mark(call) for call in store.approval_calls(args.task)}
    for turn in turns:
        print(f"\n=== Turn {shown_turn(turn.turn_number)} ===")
        for message in turn.messages:
            if message.seq in compacted:
                _show(compaction_mark(message.seq))
                if args.compactions:
                    _show(f"(compaction summary: {compacted[message.seq].summary})")
            who = "User" if message.role == "user" else "Assistant"
            for block in message.content:
                for line in _block_lines(block):
                    _show(f"{who}: {line}")
                if "toolUse" in block and block["toolUse"].get("toolUseId") in marks:  # waited for a person
                    _show(f"  {marks[block['toolUse']['toolUseId']]}")
        if turn.note:
            _show(f"(note: {turn.note})")
        if turn.summary:
            _show(f"(summary: {turn.summary})")
    pending = store.pending_count(args.task)
    if pending:
        print(f"\n({pending} message(s) waiting in the inbox)")
    if store.waiting_for(args.task):
        print()
        print_waiting(store, args.task)
    if args.follow:
        stored = [message.seq for turn in turns for message in turn.messages]
        follower = Follower(store, args.task, printed_next=max(stored, default=-1) + 1,
                            turn=turns[-1].turn_number if turns else None)
        try:
            follower.run()
        except KeyboardInterrupt:
            print()
    return EXIT_OK


def _tree_line(depth: int, record: TaskRecord, waiting: str | None = None) -> str:
    last = record.last_response.strip().splitlines()[0] if record.last_response.strip() else ""
    last = last if len(last) <= 60 else last[:57] + "..."
    status = record.status + (f", waiting for {waiting}" if waiting else "")  # approval or input (a question)
    status += ", suspended" if record.suspended else ""
    return (
        f"{'  ' * depth}{'- ' if depth else ''}{record.id}  [{status}]  turns={record.turns}  "
        f"tokens={record.total_tokens}" + (f"  last: {last}" if last else "")
    )


def _tree_row(task_id: str, record: TaskRecord) -> TreeRow[TaskRecord]:
    return TreeRow(task_id, record.parent, record.created_at, record)


def cmd_tree(args: argparse.Namespace) -> int:
    store = open_store()
    # From the records' parent fields (every record is read to find the roots anyway). A link to another namespace's
    # parent is not followed: a namespace's Redis user can write it (the store's children() skips such links too).
    forest = assemble((_tree_row(t, store.get_task(t)) for t in store.list_tasks()), orphans_are_roots=False,
                      follow=same_namespace)
    if args.task:
        found = forest.rows.get(args.task)  # an orphan too: shown alone
        roots = [found if found is not None else _tree_row(args.task, store.get_task(args.task))]
    else:
        roots = forest.roots
    if not roots:
        print("no tasks")
    for depth, row in forest.walk(roots):
        _show(_tree_line(depth, row.item, store.waiting_for(row.id)))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="unicore", description="UniCore local mode: run and inspect agent task trees.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="create a root task and run its tree until it settles")
    run.add_argument("prompt", help="the first user message")
    run.add_argument("--model", help="scripted (default), scripted:PATH, bedrock:NAME, openai:NAME")
    run.add_argument(
        "--name", help="task name (lowercase letters, digits, '-', '.'; at most 253); default: a random one"
    )
    run.add_argument("--script", help="scripted model file (YAML or JSON)")
    run.add_argument("--system", help="extra system prompt for the root task")
    low, high = field_bounds(Limits, "max_iterations")
    run.add_argument(
        "--max-iterations",
        type=int_between(low, high),
        help=f"model calls per turn, {low}-{high} (default {Limits().max_iterations})",
    )
    run.add_argument("--no-summary", action="store_true", help="do not summarize turns")
    run.add_argument("--require-approval", action="append", metavar="TOOL",
                     help=f"calls of TOOL wait for 'unicore approve' (repeatable; '{APPROVE_ALL}': every tool)")
    run.add_argument("--approval-timeout", type=int_between(1, 30 * 24 * 3600), metavar="SECONDS",
                     help=f"deny approvals not decided within this time (default {Approval().timeout_seconds})")
    run.add_argument("--ask-user", action="store_true",
                     help="give the task the ask_user tool (its questions are answered with 'unicore send')")
    run.add_argument("--tool", action="append", metavar="TOOL",
                     help="add TOOL to the root task's default toolset (repeatable), e.g. run_command")
    run.add_argument("--no-sandbox", action="store_true",
                     help="run_command runs plain processes instead of a bubblewrap sandbox (they can reach your "
                          "home folder and ~/.unicore)")
    add_mcp_arguments(run)
    run.add_argument("--agent", metavar="NAME|FILE",
                     help="run as this agent: a stored one, or an Agent file or directory (stored first; "
                          "docs/agents.md); the options above only narrow it")
    run.add_argument("--conversation", action="append", metavar="NAME",
                     help="take part in this shared conversation from the first turn (repeatable; unicore conv)")
    run.add_argument("--timeout", type=positive_seconds, help="give up after this many seconds")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    run.set_defaults(func=cmd_run)

    send = sub.add_parser("send", help="send a message to a task and run its tree again")
    send.add_argument("task")
    send.add_argument("text")
    send.add_argument("--id", type=message_id_argument,
                      help="message id (a repeated id is accepted once; not one of the runtime's own: "
                           "'completion:...', 'tr:...' etc.)")
    send.add_argument("--no-wait", action="store_true", help="queue only; do not run turns")
    send.add_argument("--no-sandbox", action="store_true",
                      help="run_command runs plain processes instead of a bubblewrap sandbox")
    send.add_argument("--timeout", type=positive_seconds)
    send.add_argument("--quiet", "-q", action="store_true")
    send.set_defaults(func=cmd_send)

    show = sub.add_parser("show", help="print a task's transcript")
    show.add_argument("task")
    show.add_argument("--json", action="store_true", help="the stored turns and messages as JSON")
    show.add_argument("--follow", "-f", action="store_true",
                      help="then print the model's answers as they are written, until the task settles")
    show.add_argument("--compactions", action="store_true",
                      help="print each compaction's summary under its mark (every message is shown either way)")
    show.set_defaults(func=cmd_show)

    tree = sub.add_parser("tree", help="print the task tree with statuses")
    tree.add_argument("task", nargs="?")
    tree.set_defaults(func=cmd_tree)
    add_gc_command(sub)
    add_agents_command(sub)
    add_approval_commands(sub)
    add_control_commands(sub)
    add_ui_command(sub)
    add_schedule_command(sub)
    add_traces_command(sub)
    add_conversation_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_utf8_arguments(argv)
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    args = build_parser().parse_args(argv)
    unicore_log.configure(RuntimeSettings.from_env(only={"log_level"}).log_level or "WARNING")
    traces.start("unicore")  # OTEL_* configure an exporter: the roots it creates start their trees' traces
    try:
        code = int(args.func(args))
    except (UsageError, RedisURLError) as exc:
        code = _fail(str(exc), EXIT_USAGE)
    except (ConfigError, TaskNotFound, MessageTooLarge) as exc:
        code = _fail(str(exc))
    except UniCoreError as exc:
        code = _fail(f"{type(exc).__name__}: {exc}")
    except (redis.RedisError, RedisClusterException) as exc:  # unreachable once the retry window is over
        code = _fail(f"Redis: {exc}")
    except KeyboardInterrupt:
        code = _fail("interrupted", 130)
    except OSError as exc:  # e.g. UNICORE_HOME not writable: say so in one line
        code = _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    finally:
        traces.stop()
    return code


__all__ = ["main", "message_text"]

if __name__ == "__main__":
    sys.exit(main())
