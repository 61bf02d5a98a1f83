"""Local mode's command runner: ``/bin/sh -c`` in the task's workspace, inside a bubblewrap sandbox by default.

The sandbox (Debian's ``bubblewrap``, ``bwrap``): the system read-only (/usr, /bin, /lib*, /sbin, /etc, /opt), the
workspace read-write at its own path, a tmpfs over /tmp, over $HOME and over the runtime's home (``~/.unicore``, or
``UNICORE_HOME``) so nothing of them is seen unless it is the workspace itself (a workspace inside them is bound alone).
The environment is cleared but for PATH, HOME (that tmpfs), LANG and TERM; its own PID namespace and session
(``--unshare-pid --new-session --die-with-parent``: when the shell exits or UniCore dies, every process of the command
dies with it; bwrap itself gets the parent-death signal before it is exec'd, since its own comes a few steps late). A
sandbox started with a ``tag`` carries it in its arguments (``--setenv SANDBOX_ID <tag>``), so a later process can find
and kill one whose starter died in the milliseconds before bwrap bound itself to it (:func:`kill_tagged_sandboxes`). The
network is shared, so ``pip install`` and downloads work: the sandbox keeps the user's files and the runtime's secrets
from the code, not the code from the network. GPU devices (/dev/nvidia*, /dev/dri) are passed in.

``sandbox=False`` (``unicore run --no-sandbox``, ``UNICORE_COMMAND_SANDBOX=0``): a plain ``/bin/sh -c`` in its own
session with the parent's environment minus the runtime's (:func:`scrubbed_environment`); it sees all the user sees.
Either way the command's processes do not outlive it: the group is killed once the shell has exited."""

from __future__ import annotations

import codecs
import ctypes
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from unicore.commands.result import STDERR, STDOUT, CommandResult, OutputSink, OutputTail
from unicore.errors import ToolError

KILL_GRACE_SECONDS = 2.0
"""After a timeout's SIGTERM, how long the group has before SIGKILL."""
PIPE_GRACE_SECONDS = 1.0
"""After the shell exits, how long a background child may keep the output pipes open before the group is killed."""
CANCEL_POLL_SECONDS = 0.05
"""How often the cancel Event is looked at while the command runs (its end and its output wake the loop at once)."""

_RUNTIME_NAMES = frozenset({"REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"})
_NO_SANDBOX_HINT = ("run it with `unicore run --no-sandbox` or UNICORE_COMMAND_SANDBOX=0 to run commands without a "
                    "sandbox (they then see your files)")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_SANDBOX_ID = "SANDBOX_ID"
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_probe_lock = threading.Lock()
_probes: dict[str, str | None] = {}  # bwrap's path -> None (it works) or why it does not


def scrubbed_environment(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` without the runtime's variables: REDIS_URL, every UNICORE_*, the model endpoints' keys (any
    *_API_KEY, OPENAI_BASE_URL, AWS_*) and the names in ``extra`` (e.g. an endpoint map's apiKeyEnv)."""
    drop = _RUNTIME_NAMES | set(extra)
    return {name: value for name, value in environ.items()
            if name not in drop and not name.startswith(("UNICORE_", "AWS_")) and not name.endswith("_API_KEY")}


def _one_line(text: str) -> str:
    return " ".join(text.split())


class LocalRunner:
    """Runs commands in ``workspace`` (see the module's docstring); implements ``CommandRunner``. ``hide``: more
    directories the sandbox covers with a tmpfs (besides $HOME and the runtime's home); ``drop_env``: more variables
    kept from the command (e.g. an endpoint map's apiKeyEnv names)."""

    def __init__(self, workspace: Path, sandbox: bool = True, bwrap: str = "bwrap", *, hide: Iterable[Path] = (),
                 drop_env: Iterable[str] = ()) -> None:
        self.workspace = Path(workspace).resolve()
        self.sandbox = sandbox
        self.bwrap = bwrap
        self.drop_env = tuple(drop_env)
        home = os.environ.get("HOME") or str(Path.home())
        runtime_home = os.environ.get("UNICORE_HOME") or str(Path(home) / ".unicore")
        paths: list[Path] = [Path(home), Path(runtime_home), *hide]
        self.hide = tuple(dict.fromkeys(p.resolve() for p in paths))  # HOME first

    def _workdir(self, workdir: str) -> Path:
        path = (self.workspace / workdir).resolve()  # an absolute workdir replaces the workspace
        if path != self.workspace and self.workspace not in path.parents:
            raise ToolError(f"workdir {workdir!r} is outside the workspace {self.workspace}")
        if not path.is_dir():
            raise ToolError(f"workdir {workdir!r} does not exist in the workspace (or is not a directory)")
        return path

    def _bwrap_path(self) -> str:
        found = shutil.which(self.bwrap)
        if found is None:
            raise ToolError(f"the command sandbox needs bubblewrap ({self.bwrap!r} not found; Debian: apt-get install "
                            f"bubblewrap); {_NO_SANDBOX_HINT}")
        with _probe_lock:
            if found not in _probes:
                _probes[found] = _probe(found)
            reason = _probes[found]
        if reason is not None:
            raise ToolError(f"the command sandbox cannot start ({reason}); {_NO_SANDBOX_HINT}")
        return found

    def _sandbox_args(self, bwrap: str, env: Mapping[str, str], workdir: Path) -> list[str]:
        ws = self.workspace
        inside_ws = _outermost([h for h in self.hide if ws in h.parents and h.is_dir()])
        outside = _outermost([h for h in self.hide if h != ws and ws not in h.parents and h != Path("/")
                              and (h.is_dir() or not str(h).startswith(_SYSTEM_DIRS))])
        home = self.hide[0] if self.hide[0] in (*inside_ws, *outside, ws) else Path("/tmp/home")
        args = [*_base_args(bwrap), "--dir", str(home)]
        for hidden in outside:
            args += ["--tmpfs", str(hidden)]
        args += ["--bind", str(ws), str(ws)]
        for hidden in inside_ws:
            args += ["--tmpfs", str(hidden)]
        args += ["--clearenv", "--setenv", "HOME", str(home),
                 "--setenv", "PATH", env.get("PATH") or "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                 "--setenv", "LANG", env.get("LANG") or "C.UTF-8", "--setenv", "TERM", env.get("TERM") or "dumb",
                 "--chdir", str(workdir)]
        return args

    def run(self, command: str, *, workdir: str, timeout_seconds: float, cancel: threading.Event,
            on_output: OutputSink | None = None, tag: str | None = None) -> CommandResult:
        """Run ``command``; ``tag``: a sandbox's id for :func:`kill_tagged_sandboxes` (unique to this run of it)."""
        cwd = self._workdir(workdir)
        env = scrubbed_environment(os.environ, self.drop_env)
        info_r = info_w = -1
        argv = ["/bin/sh", "-c", command]
        if self.sandbox:
            sandbox_args = self._sandbox_args(self._bwrap_path(), env, cwd)
            if tag is not None:
                sandbox_args += ["--setenv", _SANDBOX_ID, tag]
            info_r, info_w = os.pipe()  # bwrap writes the sandbox's pid 1 and PID namespace there
            argv = [*sandbox_args, "--info-fd", str(info_w), "--", *argv]
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    pass_fds=(info_w,) if self.sandbox else (),
                                    preexec_fn=_dies_with(os.getpid()))
        except OSError as exc:
            if info_r >= 0:
                os.close(info_r)
            raise ToolError(f"could not start the command: {_one_line(str(exc))}") from exc
        finally:
            if info_w >= 0:
                os.close(info_w)
        try:
            return _Run(proc, info_r, start, on_output).wait(timeout_seconds, cancel)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()


def _dies_with(parent: int) -> Callable[[], None]:
    """What the child runs between fork and exec: SIGKILL it when its parent dies (PR_SET_PDEATHSIG, kept across the
    exec), and exit at once when the parent is gone already. bwrap's ``--die-with-parent`` does the same but only after
    its start-up; a run killed in between would leave the sandbox behind."""
    prctl, sigkill = _libc.prctl, int(signal.SIGKILL)

    def bind() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(125)

    return bind


def kill_tagged_sandboxes(tag: str) -> int:
    """SIGKILL the bwrap processes of this host started with ``tag`` (their sandboxes' processes die with their pid 1,
    bwrap's own); how many there were. For a sandbox whose starter died before bwrap bound itself to it."""
    needle = b"\0".join([b"--setenv", _SANDBOX_ID.encode(), tag.encode()]) + b"\0"
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if needle not in cmdline.read():
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except OSError:
            continue
    return killed


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` but those inside another of them (a tmpfs over the outer one hides them already)."""
    return [p for p in paths if not any(q in p.parents for q in paths)]


def _base_args(bwrap: str) -> list[str]:
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid"]
    for top in _SYSTEM_DIRS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    resolv = os.path.realpath("/etc/resolv.conf")  # e.g. systemd-resolved's file under /run
    if not resolv.startswith("/etc/") and os.path.exists(resolv):
        args += ["--ro-bind", resolv, resolv]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for dev in sorted(os.listdir("/dev")):
        if dev.startswith("nvidia") or dev == "dri":
            args += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    if os.path.isdir("/sys"):
        args += ["--ro-bind", "/sys", "/sys"]
    return args


def _probe(bwrap: str) -> str | None:
    """None when ``bwrap`` can build the sandbox here, else its own reason (one line)."""
    try:
        done = subprocess.run([*_base_args(bwrap), "--", "/bin/sh", "-c", "exit 0"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=30, env=scrubbed_environment(os.environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _one_line(str(exc))
    if done.returncode == 0:
        return None
    return _one_line(done.stderr.decode(errors="replace"))[:300] or f"{bwrap} exited with {done.returncode}"


class _Run:
    """One started command: reads its pipes, watches the clock and ``cancel``, kills its processes."""

    def __init__(self, proc: subprocess.Popen[bytes], info_fd: int, start: float, on_output: OutputSink | None):
        self.proc, self.start, self.on_output = proc, start, on_output
        self.tails = {STDOUT: OutputTail(), STDERR: OutputTail()}
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in self.tails}
        self.sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        for name, pipe in ((STDOUT, proc.stdout), (STDERR, proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, name)
        self.sandboxed = info_fd >= 0
        self.info = bytearray()
        self.sandbox_pid: int | None = None  # bwrap's pid 1 in the sandbox's PID namespace (our numbering)
        self.sandbox_ns: str | None = None
        if info_fd >= 0:
            self.sel.register(info_fd, selectors.EVENT_READ, "info")
        self.exited = threading.Event()
        exit_r, self.exit_w = os.pipe()
        self.sel.register(exit_r, selectors.EVENT_READ, "exit")
        threading.Thread(target=self._wait_exit, name="local-command-wait", daemon=True).start()

    def _wait_exit(self) -> None:
        self.proc.wait()
        os.write(self.exit_w, b".")
        self.exited.set()

    def _read(self, fd: int, what: str) -> None:
        data = os.read(fd, 65536)
        if not data:
            self.sel.unregister(fd)
            if what in ("info", "exit"):
                os.close(fd)
            if what == "info":
                self._parse_info()
        if what == "info":
            self.info += data
        elif what in self.tails:
            self.tails[what].add(data)
            text = self.decoders[what].decode(data, final=not data)
            if self.on_output is not None and text:
                try:
                    self.on_output(what, text)
                except Exception:  # a live view's failure never stops the command
                    pass

    def _parse_info(self) -> None:
        try:
            info = json.loads(self.info.decode())
            pid = int(info["child-pid"])
            ns = (f"pid:[{int(info['pid-namespace'])}]" if "pid-namespace" in info
                  else os.readlink(f"/proc/{pid}/ns/pid"))
        except (ValueError, KeyError, TypeError, OSError):
            return  # then signals go to bwrap's own group (its SIGKILL or SIGTERM ends the sandbox)
        self.sandbox_pid, self.sandbox_ns = pid, ns

    def _signal(self, sig: signal.Signals) -> None:
        """``sig`` to every process of the command: the sandbox's (not its pid 1, but SIGKILL to pid 1 ends them
        all) or the shell's process group. A sandbox whose bwrap has exited is gone already (its pid 1 ended it)."""
        if self.sandboxed and self.exited.is_set():
            return
        targets: list[tuple[bool, int]] = [(True, self.proc.pid)]
        if self.sandbox_pid is not None:
            if sig == signal.SIGKILL:
                targets.append((False, self.sandbox_pid))
            else:
                targets = [(False, pid) for pid in _members(self.sandbox_ns, self.sandbox_pid)]
        for group, pid in targets:
            try:
                os.killpg(pid, sig) if group else os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, timeout_seconds: float, cancel: threading.Event) -> CommandResult:
        deadline = self.start + max(0.0, timeout_seconds)
        kill_at: float | None = None
        exited_at: float | None = None
        timed_out = cancelled = killed = False
        try:
            while True:
                now = time.monotonic()
                if self.exited.is_set() and exited_at is None:
                    exited_at = now
                streams = [key for key in self.sel.get_map().values() if key.data in self.tails]
                if exited_at is not None and not streams:
                    break
                if not killed and cancel.is_set():
                    cancelled = killed = True
                    self._signal(signal.SIGKILL)
                if not killed and not timed_out and now >= deadline:
                    timed_out, kill_at = True, now + KILL_GRACE_SECONDS
                    self._signal(signal.SIGTERM)
                if not killed and ((kill_at is not None and now >= kill_at)
                                   or (exited_at is not None and now >= exited_at + PIPE_GRACE_SECONDS)):
                    killed = True
                    self._signal(signal.SIGKILL)
                if exited_at is not None and now >= exited_at + 2 * PIPE_GRACE_SECONDS:
                    break  # a process that left the group holds the pipes: stop reading
                wake = [CANCEL_POLL_SECONDS, (exited_at or now) + PIPE_GRACE_SECONDS * (1 + killed) - now]
                if not timed_out:
                    wake.append(deadline - now)
                if kill_at is not None and not killed:
                    wake.append(kill_at - now)
                for key, _ in self.sel.select(max(0.0, min(wake))):
                    self._read(int(key.fd), str(key.data))
        finally:
            self._signal(signal.SIGKILL)  # nothing of the command outlives it
            self.exited.wait()
            for key in list(self.sel.get_map().values()):
                self.sel.unregister(key.fd)
                if key.data not in self.tails:
                    os.close(int(key.fd))
            self.sel.close()
            os.close(self.exit_w)
        return self._result(time.monotonic() - self.start, timed_out, cancelled)

    def _result(self, duration: float, timed_out: bool, cancelled: bool) -> CommandResult:
        returncode: int = self.proc.returncode
        code: int | None = returncode
        sig: str | None = None
        if returncode < 0:
            code, sig = None, _signal_name(-returncode)
        elif returncode > 128 and self.sandboxed and (timed_out or cancelled):
            code, sig = None, _signal_name(returncode - 128)  # bwrap reports a signalled shell as 128 + the signal
        out, err = self.tails[STDOUT], self.tails[STDERR]
        if (self.sandboxed and code == 1 and out.total == 0
                and err.text().startswith("bwrap: ") and not (timed_out or cancelled)):
            raise ToolError(f"the command sandbox could not start ({_one_line(err.text())[:300]}); "
                            f"{_NO_SANDBOX_HINT}")
        return CommandResult(exit_code=code, duration_seconds=duration, stdout=out.text(), stderr=err.text(),
                             stdout_bytes=out.total, stderr_bytes=err.total, timed_out=timed_out,
                             cancelled=cancelled, signal=sig)


def _members(namespace: str | None, init_pid: int) -> list[int]:
    """The processes of the PID namespace ``namespace`` (as /proc/PID/ns/pid reads), but its pid 1."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != init_pid:
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


__all__ = ["kill_tagged_sandboxes", "LocalRunner", "scrubbed_environment"]
