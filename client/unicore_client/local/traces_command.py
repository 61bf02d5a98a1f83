"""``unicore traces up|down|url``: a local Jaeger (``unicore_client.traces.jaeger``) for the traces of local mode's
turns.

``unicore traces up [--jaeger PATH] [--otlp-port N] [--port N]``   start Jaeger in the background (one per
    UniCore home: a running one is reused and printed again) and print ``export OTEL_EXPORTER_OTLP_ENDPOINT=...``
    and its URL; ``eval "$(unicore traces up)"`` sets the variable. Ports default to the standard ones (4318:
    OTLP/HTTP, which the OpenTelemetry SDK uses when nothing is set; 16686: the query service and UI); 0 is any free
    port. The binary: ``find_jaeger_binary`` (``--jaeger``, ``$UNICORE_JAEGER``, PATH, ``make jaeger-bins``' cache).
    The UI pages are UniCore's trace viewer (``client/unicore_client/traces/viewer``) when it is installed.
``unicore traces down``        stop it (nothing running: says so, exit 0)
``unicore traces url TASK``    the URL of the task's trace in that Jaeger

State: ``${UNICORE_HOME:-~/.unicore}/jaeger/``: ``state.json`` (pid, ports, URLs), ``jaeger.json`` (the
configuration), ``jaeger.log``, ``start.lock`` (held while one command checks, starts or stops it). A pid counts as
that Jaeger only while its command line names that folder's ``jaeger.json`` (a pid can be reused).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from unicore.errors import ConfigError
from unicore.launch.embedded_redis import unicore_home
from unicore.launch.file_lock import exclusive
from unicore.traces.links import TRACE_URL_VARIABLE

from unicore_client.arguments import UsageError, int_between
from unicore_client.traces.jaeger import (
    START_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    JaegerError,
    JaegerServer,
    bundled_viewer,
    check_trace_id,
    find_jaeger_binary,
    poll,
    request,
)

DEFAULT_OTLP_PORT = 4318  # OTLP/HTTP's registered port: the OpenTelemetry SDK's default endpoint
DEFAULT_QUERY_PORT = 16686  # Jaeger's query service and UI
STATE_NAME = "state.json"
LOCK_TIMEOUT_SECONDS = START_TIMEOUT_SECONDS + 10.0


def jaeger_home() -> Path:
    """``${UNICORE_HOME:-~/.unicore}/jaeger``, read now."""
    return unicore_home() / "jaeger"


def _locked(path: Path) -> AbstractContextManager[None]:
    """Hold an exclusive flock on ``path`` (one command at a time starts or stops this home's Jaeger)."""
    return exclusive(path, time.monotonic() + LOCK_TIMEOUT_SECONDS, "starting or stopping Jaeger")


def read_state(where: Path) -> dict[str, Any] | None:
    """The recorded Jaeger of ``where`` (None when there is none or the file is not ours)."""
    try:
        state = json.loads((where / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None


def _write_state(where: Path, state: dict[str, Any]) -> None:
    tmp = where / f".{STATE_NAME}.tmp.{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(where / STATE_NAME)


def running_pid(state: dict[str, Any]) -> int | None:
    """The recorded pid while it is still that Jaeger (its command line names the recorded configuration; a
    zombie's is empty)."""
    pid = int(state["pid"])
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if str(state.get("config", "")).encode() in cmdline else None


def _answers(state: dict[str, Any]) -> bool:
    try:
        return request(f"{state['query_url']}/api/services")[0] == 200
    except OSError:
        return False


def _print_running(state: dict[str, Any]) -> None:
    print(f"export OTEL_EXPORTER_OTLP_ENDPOINT={state['otlp_endpoint']}")
    print(f"export {TRACE_URL_VARIABLE}='{state['query_url']}/trace/{{trace_id}}'")
    print(f"# Jaeger: {state['query_url']} (unicore traces url TASK: a task's trace; unicore traces down: stop it)")


def _print_again(state: dict[str, Any], pid: int, args: argparse.Namespace) -> int:
    """``up`` while it runs: the same lines (once it answers)."""
    if poll(lambda: _answers(state), timeout=START_TIMEOUT_SECONDS) is None:
        raise JaegerError(f"Jaeger (pid {pid}) runs but does not answer at {state['query_url']}; "
                          "`unicore traces down` stops it")
    wanted = {"otlp_port": args.otlp_port, "query_port": args.port}
    if any(port and port != state.get(name) for name, port in wanted.items()):
        print(f"[unicore] Jaeger already runs (pid {pid}) on other ports; `unicore traces down` first to change "
              "them", file=sys.stderr)
    _print_running(state)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    if args.otlp_port and args.otlp_port == args.port:
        raise UsageError(f"--otlp-port and --port must differ (both {args.port})")
    where = jaeger_home()
    where.mkdir(parents=True, exist_ok=True)
    with _locked(where / "start.lock"):
        state = read_state(where)
        pid = running_pid(state) if state is not None else None
        if state is not None and pid is not None:
            return _print_again(state, pid, args)
        server = JaegerServer(find_jaeger_binary(args.jaeger), state_dir=where, otlp_port=args.otlp_port,
                              query_port=args.port, assets_dir=bundled_viewer(), host=args.host)
        server.start()  # not stopped: it runs on after this command, in its own session
        assert server.pid is not None
        state = {
            "pid": server.pid,
            "otlp_endpoint": server.otlp_endpoint,
            "query_url": server.query_url,
            "otlp_port": server.otlp_port,
            "query_port": server.query_port,
            "grpc_port": server.grpc_port,
            "binary": str(server.binary),
            "config": str(server.config_path),
            "log": str(server.log_path),
            "assets": str(server.assets_dir or ""),
            "started_at": time.time(),
        }
        _write_state(where, state)
        _print_running(state)
        return 0


def _gone(pid: int, config: str) -> bool:
    return running_pid({"pid": pid, "config": config}) is None


def cmd_down(args: argparse.Namespace) -> int:
    where = jaeger_home()
    if not where.is_dir():
        print("Jaeger is not running")
        return 0
    with _locked(where / "start.lock"):
        state = read_state(where)
        pid = running_pid(state) if state is not None else None
        if state is None or pid is None:
            (where / STATE_NAME).unlink(missing_ok=True)
            print("Jaeger is not running")
            return 0
        config = str(state["config"])
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, signum)  # its own session: the whole group
            except ProcessLookupError:
                break
            if poll(lambda: _gone(pid, config), timeout=STOP_TIMEOUT_SECONDS) is not None:
                break
        if not _gone(pid, config):
            raise JaegerError(f"Jaeger (pid {pid}) did not stop")
        (where / STATE_NAME).unlink(missing_ok=True)
        print(f"Jaeger stopped (pid {pid})")
        return 0


def cmd_url(args: argparse.Namespace) -> int:
    from unicore.launch.embedded_redis import redis_url
    from unicore.store.tasks import TaskStore, connect

    # TaskRecord.trace_id: the tree's trace id (32 hex digits), "" when the task ran without tracing
    trace_id = TaskStore(connect(redis_url())).get_task(args.task).trace_id
    if not trace_id:
        raise ConfigError(f"task {args.task} has no trace: its turns ran without an OpenTelemetry exporter "
                          "(set OTEL_EXPORTER_OTLP_ENDPOINT: `unicore traces up` prints it)")
    try:
        trace_id = check_trace_id(trace_id)
    except ValueError as exc:
        raise ConfigError(f"task {args.task}: {exc}") from None
    where = jaeger_home()
    state = read_state(where)
    if state is None or running_pid(state) is None:
        raise ConfigError("Jaeger is not running: start it with `unicore traces up`")
    print(f"{state['query_url']}/trace/{trace_id}")
    return 0


def _executable(text: str) -> str:
    """An argparse ``type``: an executable file."""
    path = Path(text).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"not an executable file: {text!r}")
    return str(path.absolute())


def _ipv4(text: str) -> str:
    """An argparse ``type``: an IPv4 address of this host to listen on."""
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None


def add_traces_command(sub: Any) -> None:
    """``unicore traces up|down|url``."""
    traces = sub.add_parser("traces", help="a local Jaeger for the turns' traces (up, down, url TASK)")
    actions = traces.add_subparsers(dest="traces_command", required=True, parser_class=type(traces))
    up = actions.add_parser("up", help="start Jaeger in the background; print the OTEL_EXPORTER_OTLP_ENDPOINT "
                                       "line and its URL (a running one: the same)")
    up.add_argument("--jaeger", type=_executable, metavar="PATH",
                    help="the jaeger binary (default: $UNICORE_JAEGER, jaeger on PATH, `make jaeger-bins`' build)")
    up.add_argument("--otlp-port", type=int_between(0, 65535), default=DEFAULT_OTLP_PORT, metavar="N",
                    help=f"OTLP/HTTP port (0: any free one; default {DEFAULT_OTLP_PORT})")
    up.add_argument("--port", type=int_between(0, 65535), default=DEFAULT_QUERY_PORT, metavar="N",
                    help=f"the query service's and UI's port (0: any free one; default "
                         f"{DEFAULT_QUERY_PORT})")
    up.add_argument("--host", type=_ipv4, default="127.0.0.1", metavar="ADDRESS",
                    help="the IPv4 address to listen on (default 127.0.0.1; a cluster's pods need one they reach)")
    up.set_defaults(func=cmd_up)
    down = actions.add_parser("down", help="stop the Jaeger of `unicore traces up`")
    down.set_defaults(func=cmd_down)
    url = actions.add_parser("url", help="print the URL of a task's trace")
    url.add_argument("task")
    url.set_defaults(func=cmd_url)


__all__ = ["add_traces_command", "jaeger_home"]
