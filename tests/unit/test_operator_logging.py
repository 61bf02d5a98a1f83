"""The operator's start-up logging (issue 11): one root handler, one format, every record printed once."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from unicore_operator import main as operator_main

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<name>[\w.]+): (?P<message>.*)$")


@pytest.fixture
def bare_root() -> Iterator[None]:
    """Restores the root logger (and Kopf's and asyncio's) after a test that sets logging up as a fresh process would.
    The test itself empties the root's handlers: pytest adds its capture handlers at the start of each phase, and with
    them present ``logging.basicConfig`` would quietly do nothing."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    loggers = ("kopf", "asyncio")
    saved = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate,
                    logging.getLogger(name).handlers[:]) for name in loggers}
    try:
        yield
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name, (level, propagate, handlers) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.propagate = propagate
            logger.handlers[:] = handlers


def lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def test_main_prints_each_operator_record_once_in_one_format(
        bare_root: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Run ``unicore-operator``'s real start-up path (``main``) with Kopf's event loop replaced by a coroutine that
    logs: the operator's record, and a Kopf warning, each come out exactly once, in the operator's format."""
    monkeypatch.setattr(operator_main, "load_settings", lambda: SimpleNamespace(cluster_wide=False, namespaces=["ns"],
                                                                        redis_identities=False, task_api_port=0,
                                                                        webhook_port=0))
    monkeypatch.setattr(operator_main, "import_handlers", lambda: None)
    ran: list[dict[str, Any]] = []

    async def fake_operator(**kwargs: Any) -> None:
        ran.append(kwargs)
        logging.getLogger("unicore.operator").info("operator record 7f3a")
        logging.getLogger("kopf.objects").warning("kopf record 7f3a")
        logging.getLogger("kopf.objects").info("kopf chatter 7f3a")  # below Kopf's level unless --verbose

    monkeypatch.setattr(kopf, "operator", fake_operator)
    logging.getLogger().handlers[:] = []  # as in a fresh process

    assert operator_main.main([]) == 0
    assert ran and ran[0]["namespaces"] == ["ns"]
    err = capsys.readouterr().err
    ours, kopfs = lines_with(err, "operator record 7f3a"), lines_with(err, "kopf record 7f3a")
    assert len(ours) == 1, err
    assert len(kopfs) == 1, err
    for line, level, name in ((ours[0], "INFO", "unicore.operator"), (kopfs[0], "WARNING", "kopf.objects")):
        match = LINE.match(line)
        assert match, f"not in the operator's format: {line!r}"
        assert (match["level"], match["name"]) == (level, name)
    assert not lines_with(err, "kopf chatter 7f3a")


def test_configure_logging_leaves_exactly_one_handler_even_when_called_twice(bare_root: None) -> None:
    logging.getLogger().addHandler(logging.StreamHandler())  # e.g. a basicConfig that ran before
    operator_main.configure_logging(verbose=False)
    handler = operator_main.configure_logging(verbose=True)
    root = logging.getLogger()
    assert root.handlers == [handler]
    assert root.level == logging.DEBUG
    assert logging.getLogger("kopf").getEffectiveLevel() == logging.DEBUG

    emitted: list[str] = []

    def note(record: logging.LogRecord) -> bool:
        emitted.append(record.getMessage())
        return True

    handler.addFilter(note)
    logging.getLogger("unicore.operator.watchdog").info("once")
    assert emitted == ["once"]
