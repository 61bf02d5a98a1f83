"""A real Jaeger (v2: the one ``jaeger`` binary, an OpenTelemetry Collector with Jaeger's storage and query
extensions; hack/build-jaeger.sh builds it) run as a local process: the turns' OTLP/HTTP spans go in, its query API
gives the traces back.

    server = JaegerServer(find_jaeger_binary(None)).start()    # free 127.0.0.1 ports, a private temp folder
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = server.otlp_endpoint
    ...
    trace = server.wait_for_spans(trace_id, 3)                  # {"traceID", "spans": [...], "processes": {...}}
    server.trace_url(trace_id)                                  # the page of that trace
    server.stop()

The configuration (``jaeger_config``) keeps everything in memory (``MAX_TRACES`` traces at most) and listens on
127.0.0.1 only: the OTLP receiver over HTTP (``otlp_endpoint``: the value of ``OTEL_EXPORTER_OTLP_ENDPOINT``), the
query service over HTTP (``query_url``: ``/api/...`` and the UI) and gRPC. Its own telemetry is off (metrics, the
query service's own spans) or quiet (logs at warn, in ``jaeger.log`` of the state folder). It is written as JSON,
which YAML (the collector's configuration format) reads as it is. ``assets_dir``: a folder whose ``index.html`` the
query service serves for every page that is not an API (``/trace/<id>`` included) and whose ``static/`` it serves as
files (``extensions.jaeger_query.ui.assets_path``); without it the binary's built-in page is a placeholder.

Ready means both halves answer: ``GET /api/services`` and an empty OTLP export (``POST /v1/traces`` of ``{}``); the
collector starts its extensions (the query API) before its receivers. Standard library only; requests bypass any
HTTP proxy of the environment (everything is on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from unicore.errors import ConfigError, UniCoreError

VERSION = "v1.76.0"  # hack/build-jaeger.sh's JAEGER_VERSION
BINARY_VARIABLE = "UNICORE_JAEGER"  # a jaeger binary to use instead of the one found
CACHE_VARIABLE = "UNICORE_CACHE"  # hack/build-*.sh's cache root (default ~/.cache/unicore)
MAKE_TARGET = "make jaeger-bins"
HOST = "127.0.0.1"
MAX_TRACES = 10_000  # the in-memory store's bound (the oldest traces go first)
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
REQUEST_TIMEOUT_SECONDS = 5.0
CONFIG_NAME = "jaeger.json"
LOG_NAME = "jaeger.log"
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
VIEWER_DIR = Path(__file__).resolve().parent / "viewer"  # UniCore's own trace viewer (index.html, static/)
_POLL_SECONDS = 0.05
_MAX_POLL_SECONDS = 0.5
# the environment variables not handed to Jaeger: the OpenTelemetry SDK's, which would point it at itself
_DROPPED_VARIABLES = ("OTEL_",)

T = TypeVar("T")

# no proxy: every request here goes to 127.0.0.1 (a proxy from HTTP_PROXY would see none of it)
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class JaegerError(UniCoreError):
    """Jaeger did not start, answer or stop as expected (one line, with its log's last lines where there is one)."""


class JaegerNotFound(ConfigError):
    """No ``jaeger`` binary where one is looked for (``find_jaeger_binary``)."""


# ---------------------------------------------------------------------------------------------- the binary
def cache_root() -> Path:
    """``${UNICORE_CACHE:-~/.cache/unicore}``, read now."""
    value = os.environ.get(CACHE_VARIABLE)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "unicore"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_jaeger_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ``jaeger`` binary to run, as an absolute path. Order: ``explicit``, ``$UNICORE_JAEGER``, ``jaeger`` on
    ``PATH``, the newest ``${UNICORE_CACHE:-~/.cache/unicore}/jaeger-v1.76.0-*/jaeger`` (hack/build-jaeger.sh's).
    An explicit path or variable that is not an executable file is an error, not skipped; none at all is
    ``JaegerNotFound`` naming ``make jaeger-bins``."""
    for given, what in ((explicit, "jaeger binary"), (os.environ.get(BINARY_VARIABLE), f"${BINARY_VARIABLE}")):
        if given:
            path = Path(given).expanduser()
            if not _runnable(path):
                raise JaegerNotFound(f"{what} {str(path)!r} is not an executable file")
            return path.absolute()
    on_path = shutil.which("jaeger")
    if on_path:
        return Path(on_path).absolute()
    root = cache_root()
    built = [path for path in root.glob(f"jaeger-{VERSION}-*/jaeger") if _runnable(path)]
    if built:
        return max(built, key=lambda path: path.stat().st_mtime).absolute()
    raise JaegerNotFound(f"no jaeger binary (none given, ${BINARY_VARIABLE} unset, none on PATH, none in "
                         f"{root}/jaeger-{VERSION}-*/): build it with `{MAKE_TARGET}` (hack/build-jaeger.sh)")


# ---------------------------------------------------------------------------------------------- the configuration
def jaeger_config(otlp_port: int, query_port: int, grpc_port: int, *, assets_dir: str | os.PathLike[str] | None = None,
                  host: str = HOST, max_traces: int = MAX_TRACES) -> dict[str, Any]:
    """Jaeger v2's configuration: OTLP/HTTP in, an in-memory store, the query service on HTTP and gRPC; with
    ``assets_dir``, the UI pages come from that folder."""
    query: dict[str, Any] = {
        "storage": {"traces": "memstore"},
        # on by default in v2: Jaeger's own spans to OTLP/gRPC at localhost:4317 (nothing there: a 10 s wait at stop)
        "enable_tracing": False,
        "http": {"endpoint": f"{host}:{query_port}"},
        "grpc": {"endpoint": f"{host}:{grpc_port}"},
    }
    if assets_dir is not None:
        query["ui"] = {"assets_path": str(Path(assets_dir).absolute())}
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]},
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": query,
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": max_traces}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"{host}:{otlp_port}"}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


def render_config(otlp_port: int, query_port: int, grpc_port: int, *,
                  assets_dir: str | os.PathLike[str] | None = None, host: str = HOST,
                  max_traces: int = MAX_TRACES) -> str:
    """``jaeger_config`` as the text of ``jaeger --config FILE`` (JSON: YAML reads it as it is)."""
    config = jaeger_config(otlp_port, query_port, grpc_port, assets_dir=assets_dir, host=host, max_traces=max_traces)
    return json.dumps(config, indent=2) + "\n"


def check_assets_dir(assets_dir: str | os.PathLike[str]) -> Path:
    """``assets_dir`` as an absolute path; ConfigError unless it is a folder with an ``index.html`` (without one
    the query service does not start)."""
    path = Path(assets_dir).expanduser().absolute()
    if not (path / "index.html").is_file():
        raise ConfigError(f"UI assets folder {str(path)!r} has no index.html")
    return path


def bundled_viewer() -> Path | None:
    """UniCore's trace viewer (``VIEWER_DIR``) when it is there (it has an ``index.html``), else None."""
    return VIEWER_DIR if (VIEWER_DIR / "index.html").is_file() else None


def check_trace_id(trace_id: str) -> str:
    """``trace_id`` as Jaeger names it (32 lowercase hex digits, not all zero); ValueError otherwise."""
    value = trace_id.strip().lower()
    if not TRACE_ID.match(value) or value == "0" * 32:
        raise ValueError(f"not a trace id (32 hex digits): {trace_id[:80]!r}")
    return value


# ---------------------------------------------------------------------------------------------- ports and HTTP
def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(port: int, host: str = HOST) -> bool:
    """Whether ``port`` can be listened on (SO_REUSEADDR, as Jaeger's listeners: a closed socket's TIME_WAIT does
    not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def request(url: str, data: bytes | None = None, *, content_type: str = "application/json",
            timeout: float = REQUEST_TIMEOUT_SECONDS) -> tuple[int, bytes]:
    """(status, body) of a GET (or, with ``data``, a POST); HTTP errors are statuses, not exceptions; connection
    failures raise OSError (urllib's URLError is one)."""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type} if data is not None else {})
    try:
        with _opener.open(req, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read()


def poll(predicate: Callable[[], T | None], *, timeout: float, on_poll: Callable[[], None] | None = None) -> T | None:
    """Call ``predicate`` until it returns something truthy (returned) or ``timeout`` seconds pass (None);
    ``on_poll`` runs before each try (it may raise to stop the wait). The interval grows from 50 to 500 ms."""
    deadline = time.monotonic() + timeout
    delay = _POLL_SECONDS
    while True:
        if on_poll is not None:
            on_poll()
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(_MAX_POLL_SECONDS, delay * 1.5)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def one_line(text: str, limit: int = 600) -> str:
    """``text`` on one line (newlines as ' | '), at most ``limit`` characters from its end."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else "..." + flat[-limit:]


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(_DROPPED_VARIABLES)}


# ---------------------------------------------------------------------------------------------- the server
class JaegerServer:
    """One Jaeger process on 127.0.0.1 (``start``), read back through its query API, stopped by ``stop``.

    Ports given as 0 (the default) are free ones chosen at ``start``. ``state_dir`` holds ``jaeger.json`` (the
    configuration) and ``jaeger.log`` (its output); without one, a private temporary folder is made and removed by
    ``stop``. The process runs in its own session (a terminal's Ctrl-C does not reach it): a caller that never calls
    ``stop`` leaves it running (``unicore traces up`` does so on purpose)."""

    def __init__(self, binary: str | os.PathLike[str] | None = None, *, state_dir: str | os.PathLike[str] | None = None,
                 otlp_port: int = 0, query_port: int = 0, grpc_port: int = 0,
                 assets_dir: str | os.PathLike[str] | None = None, host: str = HOST,
                 start_timeout: float = START_TIMEOUT_SECONDS) -> None:
        self.binary = find_jaeger_binary(binary)
        self.assets_dir = check_assets_dir(assets_dir) if assets_dir is not None else None
        self.host = host
        self.otlp_port, self.query_port, self.grpc_port = otlp_port, query_port, grpc_port
        self.start_timeout = start_timeout
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir).absolute() if state_dir is not None else None
        self.proc: subprocess.Popen[bytes] | None = None

    # -- where it is
    @property
    def otlp_endpoint(self) -> str:
        """The OTLP/HTTP base URL: the value of ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK adds ``/v1/traces``)."""
        return f"http://{self.host}:{self.otlp_port}"

    @property
    def query_url(self) -> str:
        """The query service: ``/api/...`` and the UI's pages."""
        return f"http://{self.host}:{self.query_port}"

    def trace_url(self, trace_id: str) -> str:
        """The UI page of one trace."""
        return f"{self.query_url}/trace/{check_trace_id(trace_id)}"

    @property
    def config_path(self) -> Path:
        return self._dir() / CONFIG_NAME

    @property
    def log_path(self) -> Path:
        return self._dir() / LOG_NAME

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _dir(self) -> Path:
        if self.state_dir is None:
            raise JaegerError("the Jaeger server has not been started")
        return self.state_dir

    # -- life
    def start(self) -> JaegerServer:
        """Write the configuration, start ``jaeger --config``, return once it is ready; JaegerError (with its log's
        last lines) when it exits first or is not ready within ``start_timeout`` (then it is stopped)."""
        if self.proc is not None:
            raise JaegerError(f"this Jaeger server already runs (pid {self.proc.pid})")
        if self.state_dir is None:
            self.state_dir = Path(tempfile.mkdtemp(prefix="unicore-jaeger-"))
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._choose_ports()
            self.config_path.write_text(render_config(self.otlp_port, self.query_port, self.grpc_port,
                                                      assets_dir=self.assets_dir, host=self.host))
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [str(self.binary), "--config", str(self.config_path)], cwd=self.state_dir, env=_environment(),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if poll(self.ready, timeout=self.start_timeout, on_poll=self._check_alive) is None:
                raise JaegerError(f"Jaeger (pid {self.proc.pid}) was not ready within {self.start_timeout:.0f} s "
                                  f"({self.query_url}/api/services, {self.otlp_endpoint}/v1/traces); its log: "
                                  f"{one_line(self.log_tail())}")
        except BaseException:
            self.stop()  # the error carries the log's last lines; a private folder goes with it
            raise
        return self

    def _choose_ports(self) -> None:
        given = {name: port for name, port in (("OTLP", self.otlp_port), ("query", self.query_port),
                                               ("query gRPC", self.grpc_port)) if port}
        if len(set(given.values())) < len(given):
            raise ConfigError(f"Jaeger's ports must differ: {given}")
        for name, port in given.items():
            if not port_free(port, self.host):
                raise JaegerError(f"Jaeger's {name} port {self.host}:{port} is in use (give another, or 0: any "
                                  "free one)")
        taken = set(given.values())

        def fresh() -> int:
            while (port := free_port(self.host)) in taken:
                pass
            taken.add(port)
            return port

        self.otlp_port = self.otlp_port or fresh()
        self.query_port = self.query_port or fresh()
        self.grpc_port = self.grpc_port or fresh()

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise JaegerError(f"Jaeger exited with code {self.proc.returncode} at its start; its log: "
                              f"{one_line(self.log_tail())}")

    def ready(self) -> bool:
        """Whether the query API and the OTLP receiver both answer."""
        try:
            if request(f"{self.query_url}/api/services")[0] != 200:
                return False
            return request(f"{self.otlp_endpoint}/v1/traces", b"{}")[0] == 200
        except OSError:
            return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        return tail(self.log_path, lines) if self.state_dir is not None else ""

    def stop(self, *, remove: bool = True) -> None:
        """SIGTERM (its whole session), SIGKILL after ``STOP_TIMEOUT_SECONDS``; then the private temporary folder
        goes (``remove``; a ``state_dir`` given is kept). Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        if remove and self._own_state_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None

    def __enter__(self) -> JaegerServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the query API
    def get_json(self, path: str, params: dict[str, str | int] | None = None) -> tuple[int, Any]:
        """(status, decoded JSON or None) of ``GET {query_url}{path}?{params}``."""
        url = f"{self.query_url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            status, body = request(url)
        except OSError as exc:
            raise JaegerError(f"Jaeger's query API at {self.query_url} did not answer: {exc}") from None
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, None

    def services(self) -> list[str]:
        """The services that sent spans (``GET /api/services``)."""
        status, body = self.get_json("/api/services")
        if status != 200 or not isinstance(body, dict):
            raise JaegerError(f"GET /api/services: HTTP {status}")
        return list(body.get("data") or [])

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        """One trace as the query API gives it (``{"traceID", "spans": [...], "processes": {...}}``: span times in
        microseconds, ``references`` with ``refType`` CHILD_OF or FOLLOWS_FROM), None when Jaeger has none."""
        status, body = self.get_json(f"/api/traces/{check_trace_id(trace_id)}")
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise JaegerError(f"GET /api/traces/{trace_id}: HTTP {status}")
        data = body.get("data") or []
        return data[0] if data and isinstance(data[0], dict) else None

    def find_traces(self, service: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest traces with spans of ``service`` (``GET /api/traces?service=...&limit=...``)."""
        status, body = self.get_json("/api/traces", {"service": service, "limit": limit})
        if status != 200 or not isinstance(body, dict):
            raise JaegerError(f"GET /api/traces?service={service}: HTTP {status}")
        return [trace for trace in body.get("data") or [] if isinstance(trace, dict)]

    def wait_for_spans(self, trace_id: str, count: int, timeout: float = 30.0) -> dict[str, Any]:
        """The trace once it holds at least ``count`` spans (polled; spans arrive through the batch processor);
        JaegerError after ``timeout`` seconds, saying how many there were."""
        seen: list[int] = [0]

        def enough() -> dict[str, Any] | None:
            trace = self.get_trace(trace_id)
            seen[0] = len(trace.get("spans") or []) if trace else 0
            return trace if trace is not None and seen[0] >= count else None

        trace = poll(enough, timeout=timeout)
        if trace is None:
            raise JaegerError(f"trace {trace_id} had {seen[0]} of {count} spans in Jaeger after {timeout:.1f} s")
        return trace


def _signal_group(pid: int, signum: signal.Signals) -> None:
    """Signal the process group ``pid`` leads (it was started in its own session), else the process alone."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        return
    except PermissionError:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return


__all__ = [
    "HOST",
    "JaegerError",
    "JaegerNotFound",
    "JaegerServer",
    "VERSION",
    "VIEWER_DIR",
    "bundled_viewer",
    "cache_root",
    "check_assets_dir",
    "check_trace_id",
    "find_jaeger_binary",
    "free_port",
    "jaeger_config",
    "render_config",
]
