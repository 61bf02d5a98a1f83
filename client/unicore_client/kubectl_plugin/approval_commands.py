"""``kubectl agenttask approve|deny NAME [--call ID] [--reason TEXT]``: decide a tool call that waits for approval,
through the task API's ``approvals`` subresource (RBAC ``create agenttasks/approvals``, group ``tasks.unicore.dev``;
the chart's messenger and editor roles grant it next to ``agenttasks/messages``). Without ``--call`` every call the
task waits to have approved is decided (``describe`` lists them). Deciding a call again is refused (409
AlreadyDecided): the tool runs once.

Also the pure rendering of a task's approvals for ``describe`` (text from the model and users escaped).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import IO, Any

from unicore.terminal import printable

from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.humanize import one_line
from unicore_client.kubectl_plugin.kube import KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient, task_path

APPROVALS = "approvals"  # the task API subresource
MAX_REASON_CHARS = 4096
CALL_ID_MAX = 256
INPUT_PREVIEW = 160
PAST = {"approve": "approved", "deny": "denied"}


def _call_id(text: str) -> str:
    """``--call ID``: checked before anything is asked (argparse: exit 2)."""
    if not text.strip() or len(text) > CALL_ID_MAX or not text.isprintable():
        raise argparse.ArgumentTypeError(f"must be a tool call id (printable, 1-{CALL_ID_MAX} characters)")
    return text


def _reason(text: str) -> str:
    if len(text) > MAX_REASON_CHARS:
        raise argparse.ArgumentTypeError(f"is {len(text)} characters, over the cap of {MAX_REASON_CHARS}")
    return text


def add_parsers(sub: Any, common: argparse.ArgumentParser, timeout: float) -> None:
    """The ``approve`` and ``deny`` subcommands."""
    for verb, text in (("approve", "let a tool call that waits for approval run (the task continues)"),
                       ("deny", "refuse a tool call that waits for approval (the model gets an error result)")):
        cmd = sub.add_parser(verb, parents=[common], help=text)
        cmd.add_argument("name")
        cmd.add_argument("--call", metavar="ID", type=_call_id,
                         help="the tool call's id (default: every call that waits for approval)")
        cmd.add_argument("--reason", metavar="TEXT", type=_reason, default="",
                         help="why (a denied call's error result tells the model)")
        cmd.add_argument("--timeout", type=float, default=timeout,
                         help="seconds to keep retrying while the operator is unreachable")
        cmd.set_defaults(func=cmd_decide, decision=verb)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST body from the arguments; PluginError (exit 2) for a bad one."""
    call = args.call
    if call is not None and (not call.strip() or len(call) > CALL_ID_MAX or not call.isprintable()):
        raise PluginError(f"--call must be a tool call id (printable, 1-{CALL_ID_MAX} characters)", exit_code=2)
    if len(args.reason) > MAX_REASON_CHARS:
        raise PluginError(f"--reason is {len(args.reason)} characters, over the cap of {MAX_REASON_CHARS}",
                          exit_code=2)
    body: dict[str, Any] = {"decision": args.decision, "reason": args.reason}
    if call is not None:
        body["callId"] = call
    return body


def cmd_decide(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    body = request_body(args)
    api = TaskApiClient(kube, timeout=args.timeout)
    receipt = api.post(task_path(kube.namespace, args.name, APPROVALS), body)
    for call in receipt.get("decided") or []:
        line = f"agenttask.unicore.dev/{args.name}: call {call.get('callId')} ({call.get('tool')}) {call.get('status')}"
        out.write(printable(line, multiline=False) + "\n")
    return 0


def fetch(kube: KubeContext, name: str, timeout: float = 10.0) -> dict[str, Any] | str:
    """The task's approvals (the GET answer), or why they cannot be shown (one line)."""
    try:
        return TaskApiClient(kube, timeout=timeout).get(task_path(kube.namespace, name, APPROVALS))
    except PluginError as exc:
        return exc.message


def _input(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return one_line(text, INPUT_PREVIEW)


def render_approvals(answer: Mapping[str, Any] | str, waiting: Mapping[str, Any] | None = None) -> list[str]:
    """``describe``'s lines: the calls that wait (id, tool, input), then the decided ones (newest last); when the
    task API could not be asked, what ``status.waitingFor`` says and why. The caller escapes the whole text."""
    if isinstance(answer, str):
        lines = ["Approvals:"]
        if waiting:
            lines.append(f"  waiting: call {waiting.get('callId', '?')} ({waiting.get('tool', '?')})")
        return [*lines, f"  (cannot list approvals: {one_line(answer, 200)})"]
    pending: Sequence[Mapping[str, Any]] = answer.get("pending") or []
    decided: Sequence[Mapping[str, Any]] = answer.get("decided") or []
    if not pending and not decided:
        return ["Approvals: <none>"]
    lines = ["Approvals:"]
    for call in pending:
        lines.append(f"  WAITING   {call.get('callId')}  {call.get('tool')}  {_input(call.get('input'))}")
    for call in decided:
        by = f" by {call.get('decidedBy')}" if call.get("decidedBy") else ""
        why = f": {one_line(call.get('reason'), 120)}" if call.get("reason") else ""
        lines.append(f"  {str(call.get('decision', '?')).upper():<9} {call.get('callId')}  {call.get('tool')}{by}{why}")
    return lines
