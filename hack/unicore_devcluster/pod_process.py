"""What the pod runner knows about one pod it runs as a local process (``PodProcess``), and the time and exit-code
forms the pod's status takes."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from unicore_devcluster.procs import Child

Key = tuple[str, str]  # (namespace, name)


def now() -> str:
    """The API server's timestamp form, to the second."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_exit_code(returncode: int) -> int:
    """A process's return code as a container's exit code (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class PodProcess:
    """What the runner knows about one pod it runs."""

    namespace: str
    name: str
    uid: str
    container: str
    image: str
    restart_policy: str
    pod_dir: Path
    log_path: Path
    child: Child | None = None
    started_at: str = ""
    restart_count: int = 0
    exit_code: int | None = None
    finished_at: str = ""
    reported_exit: bool = False
    terminating: bool = False
    restart_due: float | None = None
    failed_setup: bool = False
    history: list[int] = field(default_factory=list)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child else None

    def running(self) -> bool:
        return self.child is not None and self.child.running()
