"""The plugin's subcommands. Each takes the parsed arguments, a KubeContext and an output stream."""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

from unicore.api.spec import task_spec_of
from unicore.terminal import printable
from unicore.traces.links import TRACE_URL_VARIABLE

from unicore_client.kubectl_plugin.approval_commands import fetch as fetch_approvals
from unicore_client.kubectl_plugin.approval_commands import render_approvals
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.kubectl_plugin.errors import Forbidden, NotFound, PluginError, Unreachable
from unicore_client.kubectl_plugin.kube import GROUP, PLURAL, VERSION, KubeContext
from unicore_client.kubectl_plugin.live_follow import LiveFollower
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter
from unicore_client.kubectl_plugin.proxy import TaskApiClient, task_path
from unicore_client.kubectl_plugin.tree_view import parent_name, render_tree

# `logs --follow` stops at these: nothing more comes (a task waiting for people runs nothing until they answer)
SETTLED_PHASES = frozenset({"Idle", "Failed", "WaitingForApproval", "WaitingForInput", "Archived"})
CLEAR_SCREEN = "\x1b[H\x1b[2J"
MAX_TEXT_BYTES = 256 * 1024


def _now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


def kube_error(exc: Exception, *, verb: str, what: str, namespace: str) -> PluginError:
    """A Kubernetes API exception as a clear PluginError."""
    status = getattr(exc, "status", None)
    if status == 404 and verb == "list":
        return NotFound(
            "the AgentTask API (agenttasks.unicore.dev/v1alpha1) is not served by this cluster: "
            "is UniCore installed?"
        )
    if status == 404:
        return NotFound(f"{what} not found in namespace {namespace}")
    if status == 403:
        body = str(getattr(exc, "body", "") or "")
        return Forbidden(
            f"forbidden: you cannot {verb} {what} in namespace {namespace} ({_status_message(body)})"
        )
    if status is None or status == 0:
        return Unreachable(f"cannot reach the Kubernetes API server: {exc}")
    return PluginError(
        f"{verb} {what} failed: HTTP {status} {_status_message(str(getattr(exc, 'body', '')))}"
    )


def _status_message(body: str) -> str:
    import json

    try:
        return str(json.loads(body).get("message") or body)
    except (ValueError, AttributeError):
        return body[:300]


def _call(fn: Callable[[], Any], *, verb: str, what: str, namespace: str) -> Any:
    try:
        return fn()
    except PluginError:
        raise
    except Exception as exc:
        raise kube_error(exc, verb=verb, what=what, namespace=namespace) from None


def get_task(kube: KubeContext, namespace: str, name: str) -> dict[str, Any]:
    return dict(
        _call(
            lambda: kube.custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
            verb="get",
            what=f'agenttask "{name}"',
            namespace=namespace,
        )
    )


def list_tasks(kube: KubeContext, namespace: str | None) -> list[dict[str, Any]]:
    custom = kube.custom()
    if namespace is None:
        result = _call(
            lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL),
            verb="list",
            what="agenttasks",
            namespace="(all)",
        )
    else:
        result = _call(
            lambda: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
            verb="list",
            what="agenttasks",
            namespace=namespace,
        )
    return list(result.get("items") or [])


# ---------------------------------------------------------------------------------------------------- tree


def cmd_tree(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    namespace = None if args.all_namespaces else kube.namespace

    def frame() -> str:
        tasks = list_tasks(kube, namespace)
        width = shutil.get_terminal_size((160, 40)).columns if out.isatty() else None
        try:
            return render_tree(
                tasks,
                _now(),
                utf8=not args.no_utf8,
                root=args.name,
                namespace=namespace,
                all_namespaces=args.all_namespaces,
                width=width,
            )
        except KeyError:
            raise NotFound(f'agenttask "{args.name}" not found in namespace {kube.namespace}') from None

    if not args.watch:
        out.write(frame())
        return 0
    try:
        while True:
            text = frame()
            stamp = _now().strftime("%H:%M:%S")
            out.write(f"{CLEAR_SCREEN}Every {args.interval:g}s: kubectl agenttask tree  {stamp}\n\n{text}")
            out.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        out.write("\n")
        return 0


# ---------------------------------------------------------------------------------------------------- send


def read_text(args: argparse.Namespace) -> str:
    if args.file and args.text:
        raise PluginError("give the message either as TEXT or with -f FILE, not both", exit_code=2)
    if args.file:
        source = "standard input" if args.file == "-" else args.file
        try:
            if args.file == "-":
                data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
            else:
                with open(args.file, "rb") as handle:
                    data = handle.read(MAX_TEXT_BYTES + 1)
            if len(data) > MAX_TEXT_BYTES:
                raise PluginError(f"{source} is over the cap of {MAX_TEXT_BYTES} bytes", exit_code=2)
            text = data.decode("utf-8")
        except OSError as exc:
            raise PluginError(f"cannot read {source}: {exc.strerror}", exit_code=2) from None
        except UnicodeDecodeError as exc:
            raise PluginError(f"{source} is not UTF-8 text (byte {exc.start})", exit_code=2) from None
    elif args.text:
        text = " ".join(args.text)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise PluginError("the message is not valid UTF-8 text", exit_code=2) from None
    else:
        raise PluginError("nothing to send: give TEXT or -f FILE", exit_code=2)
    if not text.strip():
        raise PluginError("the message is empty", exit_code=2)
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise PluginError(
            f"the message is {len(text.encode())} bytes, over the cap of {MAX_TEXT_BYTES} bytes", exit_code=2
        )
    return text


def cmd_send(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    text = read_text(args)
    message_id = args.id or str(uuid.uuid4())
    api = TaskApiClient(kube, timeout=args.timeout)
    receipt = api.post(task_path(kube.namespace, args.name, "messages"), {"id": message_id, "text": text})
    note = " (it was already queued: sent once)" if receipt.get("duplicate") else ""
    out.write(printable(f"agenttask.unicore.dev/{args.name}: message {message_id} queued{note}\n"))
    return 0


# ---------------------------------------------------------------------------------------------------- logs


def _finished(kube: KubeContext, name: str, page: dict[str, Any]) -> bool:
    state = page.get("state") or {}
    if state.get("status") != "idle" or int(state.get("pending") or 0) > 0:
        return False
    try:
        phase = (get_task(kube, kube.namespace, name).get("status") or {}).get("phase")
    except Forbidden:
        return True  # cannot read the AgentTask: Redis says the task is idle with nothing queued
    return phase in SETTLED_PHASES


def cmd_logs(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    api = TaskApiClient(kube, timeout=args.timeout)
    printer = TranscriptPrinter(tools=args.tools)
    path = task_path(kube.namespace, args.name, "transcript")
    if args.follow and args.turn is None:  # the model's answers as they are written (live_follow.py)
        live = LiveFollower(api, transcript_path=path, stream_path=task_path(kube.namespace, args.name, "stream"),
                            printer=printer, out=out, tools=args.tools, page_size=args.page_size,
                            finished=lambda state: _finished(kube, args.name, {"state": state}))
        try:
            if live.run():
                return 0
        except KeyboardInterrupt:
            return 0
    since = 0
    printed = 0
    try:
        while True:
            query: list[tuple[str, Any]] = [
                ("since", since),
                ("limit", args.page_size),
                ("tools", args.tools),
            ]
            if args.turn is not None:
                query.append(("turn", args.turn))
            page = api.get(path, query)
            text = printer.render(page)
            if text:
                out.write(text)
                out.flush()
            printed += len(page.get("messages") or [])
            since = int(page.get("next", since))
            if page.get("more"):
                continue
            if not args.follow or _finished(kube, args.name, page):
                if not args.follow or not _more_after(api, path, since, args):
                    break
                continue
            time.sleep(args.poll_interval)
    except KeyboardInterrupt:
        return 0
    if printed == 0 and not args.follow:
        which = f" in turn {args.turn}" if args.turn is not None else ""
        out.write(f"(no messages{which} yet)\n")
    return 0


def _more_after(api: TaskApiClient, path: str, since: int, args: argparse.Namespace) -> bool:
    """After the task settled: has anything been appended since the last page (read it before exiting)?"""
    query: list[tuple[str, Any]] = [("since", since), ("limit", 1), ("tools", args.tools)]
    if args.turn is not None:
        query.append(("turn", args.turn))
    return bool(api.get(path, query).get("messages"))


# ---------------------------------------------------------------------------------------------------- suspend


def cmd_suspend(args: argparse.Namespace, kube: KubeContext, out: IO[str], *, suspend: bool = True) -> int:
    _call(
        lambda: kube.custom().patch_namespaced_custom_object(
            GROUP, VERSION, kube.namespace, PLURAL, args.name, {"spec": {"suspend": suspend}}
        ),
        verb="patch",
        what=f'agenttask "{args.name}"',
        namespace=kube.namespace,
    )
    out.write(f"agenttask.unicore.dev/{args.name} {'suspended' if suspend else 'resumed'}\n")
    return 0


def cmd_resume(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    return cmd_suspend(args, kube, out, suspend=False)


# ------------------------------------------------------------------------------------------------ describe


def cmd_describe(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    obj = get_task(kube, kube.namespace, args.name)
    children = [task for task in list_tasks(kube, kube.namespace) if parent_name(task) == args.name]
    events: list[dict[str, Any]] = []
    try:
        selector = f"involvedObject.name={args.name},involvedObject.kind=AgentTask"
        listed = kube.core().list_namespaced_event(kube.namespace, field_selector=selector)
        events = [kube.api_client.sanitize_for_serialization(item) for item in listed.items]
    except Exception as exc:  # events are a bonus: say why they are missing, keep the rest
        status = getattr(exc, "status", None)
        out_note = "forbidden" if status == 403 else f"unavailable ({status or exc})"
        events = [{"type": "Warning", "reason": "EventsHidden", "message": f"cannot list events: {out_note}"}]
    approval_lines: list[str] = []
    status = obj.get("status") or {}
    approval = task_spec_of(obj).approval
    if status.get("phase") == "WaitingForApproval" or (approval is not None and approval.model_fields_set):
        approval_lines = render_approvals(fetch_approvals(kube, args.name), status.get("waitingFor"))
    out.write(render_describe(obj, children, events, _now(), approval_lines,
                              trace_template=os.environ.get(TRACE_URL_VARIABLE, "")))
    return 0
