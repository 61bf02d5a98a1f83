"""The Jaeger runner's pure parts (client/unicore_client/traces/jaeger.py): the configuration it writes (JSON that
YAML reads the same), the order in which ``find_jaeger_binary`` looks, trace ids and URLs, and the one-line errors of
a binary that exits at its start or a port that is taken (stand-in executables: no Jaeger here; the real binary's
tests are tests/integration/test_jaeger_server.py)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
import yaml
from unicore.errors import ConfigError
from unicore_client.traces.jaeger import (
    VERSION,
    JaegerError,
    JaegerNotFound,
    JaegerServer,
    check_trace_id,
    find_jaeger_binary,
    jaeger_config,
    render_config,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_config_is_the_tested_one() -> None:
    assert jaeger_config(4318, 16686, 16685) == {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]},
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "enable_tracing": False,
                "http": {"endpoint": "127.0.0.1:16686"},
                "grpc": {"endpoint": "127.0.0.1:16685"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 10000}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": "127.0.0.1:4318"}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


def test_rendered_config_reads_the_same_as_yaml_with_the_assets_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    monkeypatch.chdir(tmp_path)
    text = render_config(1, 2, 3, assets_dir="viewer", max_traces=50)
    config = json.loads(text)
    assert yaml.safe_load(text) == config  # the collector reads its configuration as YAML
    query = config["extensions"]["jaeger_query"]
    assert query["ui"] == {"assets_path": str(tmp_path / "viewer")}  # absolute: Jaeger runs in its own folder
    assert config["extensions"]["jaeger_storage"]["backends"]["memstore"]["memory"]["max_traces"] == 50
    assert "ui" not in jaeger_config(1, 2, 3)["extensions"]["jaeger_query"]  # none: the binary's own page


def executable(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A stand-in jaeger in each place ``find_jaeger_binary`` looks, newest-built last."""
    cache = tmp_path / "cache"
    older = executable(cache / f"jaeger-{VERSION}-aaaaaaaaaaaa" / "jaeger")
    newer = executable(cache / f"jaeger-{VERSION}-bbbbbbbbbbbb" / "jaeger")
    os.utime(older, (time.time() - 3600, time.time() - 3600))
    executable(cache / "jaeger-v1.0.0-cccccccccccc" / "jaeger")  # another version: never chosen
    (cache / f"jaeger-{VERSION}-dddddddddddd").mkdir()  # a build that never finished: no binary
    on_path = executable(tmp_path / "bin" / "jaeger")
    env = executable(tmp_path / "env" / "jaeger")
    explicit = executable(tmp_path / "explicit" / "jaeger")
    monkeypatch.setenv("UNICORE_CACHE", str(cache))
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("UNICORE_JAEGER", str(env))
    return {"explicit": explicit, "env": env, "path": on_path, "newer": newer}


def test_find_jaeger_binary_order(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_jaeger_binary(str(places["explicit"])) == places["explicit"]
    assert find_jaeger_binary(None) == places["env"]
    monkeypatch.delenv("UNICORE_JAEGER")
    assert find_jaeger_binary(None) == places["path"]
    monkeypatch.setenv("PATH", f"/usr/bin{os.pathsep}/bin")
    assert find_jaeger_binary(None) == places["newer"]  # the newest of this version's builds


def test_find_jaeger_binary_refuses_what_is_not_runnable(places: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    with pytest.raises(JaegerNotFound, match="jaeger binary '.*plain' is not an executable file"):
        find_jaeger_binary(str(plain))
    monkeypatch.setenv("UNICORE_JAEGER", str(tmp_path / "missing"))  # said, so never skipped for a later place
    with pytest.raises(JaegerNotFound, match=r"\$UNICORE_JAEGER '.*missing' is not an executable file"):
        find_jaeger_binary(None)


def test_no_jaeger_anywhere_names_the_make_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICORE_JAEGER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("UNICORE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(JaegerNotFound) as info:
        find_jaeger_binary(None)
    assert isinstance(info.value, ConfigError)  # the CLI's one-line error, exit 1
    assert "make jaeger-bins" in str(info.value) and str(tmp_path / "cache") in str(info.value)


def test_trace_ids_and_urls(tmp_path: Path) -> None:
    assert check_trace_id(TRACE.upper()) == TRACE
    for bad in ("", "0" * 32, TRACE[:-1], TRACE + "0", "g" * 32, f"../{TRACE[3:]}"):
        with pytest.raises(ValueError, match="not a trace id"):
            check_trace_id(bad)
    server = JaegerServer(executable(tmp_path / "jaeger"), otlp_port=4318, query_port=16686)
    assert server.otlp_endpoint == "http://127.0.0.1:4318"
    assert server.query_url == "http://127.0.0.1:16686"
    assert server.trace_url(TRACE) == f"http://127.0.0.1:16686/trace/{TRACE}"


def test_assets_folder_needs_an_index(tmp_path: Path) -> None:
    binary = executable(tmp_path / "jaeger")
    with pytest.raises(ConfigError, match="has no index.html"):
        JaegerServer(binary, assets_dir=tmp_path)


def test_a_binary_that_exits_at_its_start_is_one_error_with_its_log(tmp_path: Path) -> None:
    binary = executable(tmp_path / "jaeger", 'echo "bad config: $2" >&2; exit 3')
    server = JaegerServer(binary, start_timeout=30)
    with pytest.raises(JaegerError, match=r"exited with code 3 at its start; its log: bad config: .*jaeger.json"):
        server.start()
    assert server.proc is None and server.state_dir is None  # its private folder went too


def test_a_port_in_use_is_said_before_starting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = JaegerServer(executable(tmp_path / "jaeger", "sleep 60"), state_dir=tmp_path / "state",
                              query_port=port)
        with pytest.raises(JaegerError, match=f"query port 127.0.0.1:{port} is in use"):
            server.start()
    assert server.proc is None
    with pytest.raises(ConfigError, match="ports must differ"):
        JaegerServer(executable(tmp_path / "jaeger"), otlp_port=4318, query_port=4318).start()
