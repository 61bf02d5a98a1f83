#!/usr/bin/env python3
"""Check a freshly built llama-server once, before it is cached: start it on a real GGUF and ask for one short
completion. A binary that cannot run on this CPU (e.g. an instruction the CPU advertises but faults on) dies here,
during the build, instead of in the tests or in ``make model-up``.

    hack/check-model-server.py LLAMA_SERVER GGUF     # exit 0 when it answered; else one line on stderr, exit 1
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 240.0
COMPLETION_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 5) -> str:
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])


def check(binary: str, gguf: str) -> str | None:
    """None when the server started and completed; else why not."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="unicore-llama-check-") as folder:
        log_path = Path(folder) / "server.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-c", "512", "-t", "2",
                 "--no-webui", "--temp", "0", "--seed", "42"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    return f"llama-server exited with {proc.returncode} during start-up: {tail(log_path)}"
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except (OSError, urllib.error.URLError):
                    pass
                if time.monotonic() > deadline:
                    return f"llama-server did not answer /health within {READY_TIMEOUT_S:.0f} s: {tail(log_path)}"
                time.sleep(0.2)
            body = json.dumps({"prompt": "1, 2, 3,", "n_predict": 4}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=COMPLETION_TIMEOUT_S) as response:
                    answer = json.load(response)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                state = f"exited with {proc.returncode}" if proc.poll() is not None else "still running"
                return f"one short completion failed ({exc}); llama-server {state}: {tail(log_path)}"
            if not isinstance(answer, dict) or not isinstance(answer.get("content"), str) or not answer["content"]:
                return f"one short completion returned no text: {str(answer)[:200]}"
            return None
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check-model-server.py LLAMA_SERVER GGUF", file=sys.stderr)
        return 2
    problem = check(argv[0], argv[1])
    if problem:
        print(f"check-model-server: {problem}", file=sys.stderr)
        return 1
    print("check-model-server: started, answered /health and one short completion", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
