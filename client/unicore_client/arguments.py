"""Checks of what a user gives the ``unicore`` command line, so every user error is one clear line (exit 2).

- every argument must be UTF-8 text (Python hands undecodable bytes over as lone surrogates, which Redis, JSON
  and the terminal all refuse later, as tracebacks);
- numbers must lie in the range the stored model accepts (``Limits``), ``--timeout`` must be a positive time;
- a message id (``send --id``) may not be one the runtime's own messages use (``schema.user_message_id``);
- a script file must be a regular file of at most ``MAX_SCRIPT_BYTES``, UTF-8, YAML/JSON without aliases
  (``&a [*a]`` is a loop, ``*a`` repeated is a "billion laughs" blow-up) and nested at most
  ``MAX_SCRIPT_DEPTH`` levels; it is read once here and stored with the task as plain JSON values.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from unicore.api.schema import user_message_id
from unicore.errors import UniCoreError

MAX_SCRIPT_BYTES = 4 * 1024 * 1024
MAX_SCRIPT_DEPTH = 64


class UsageError(UniCoreError):
    """A bad argument or input file: printed as one line, exit code 2."""


def check_utf8_arguments(argv: Sequence[str]) -> None:
    """UsageError naming the first argument that is not valid UTF-8 (undecodable bytes, lone surrogates)."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:
                shown = repr(arg.encode("utf-8", "surrogateescape"))  # the bytes as given
            except UnicodeEncodeError:
                shown = ascii(arg)
            raise UsageError(f"argument {position} is not valid UTF-8 text: {shown[:80]}") from None


def field_bounds(model: type[BaseModel], name: str) -> tuple[int, int]:
    """(ge, le) of an integer field of ``model`` (what the stored model will accept)."""
    metadata = model.model_fields[name].metadata
    low = next(int(item.ge) for item in metadata if getattr(item, "ge", None) is not None)
    high = next(int(item.le) for item in metadata if getattr(item, "le", None) is not None)
    return low, high


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value

    return parse


def message_id_argument(text: str) -> str:
    """An argparse ``type``: a message id a user may choose (``schema.user_message_id``)."""
    try:
        return user_message_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def read_text_file(path_text: str, what: str = "script") -> str:
    """The UTF-8 text of the regular file ``path_text`` (at most ``MAX_SCRIPT_BYTES``); UsageError naming it as
    ``what`` otherwise."""
    path = Path(path_text)
    try:
        # O_NONBLOCK: a FIFO must not block the open; it is refused below like every non-regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"{what} {path} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SCRIPT_BYTES:
        raise UsageError(f"{what} {path} is larger than {MAX_SCRIPT_BYTES // (1024 * 1024)} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path} is not UTF-8 text (bad byte at offset {exc.start})") from None


def read_script_file(path_text: str) -> dict[str, Any]:
    """The script in ``path_text`` as plain JSON values; UsageError when it cannot be one (see module doc)."""
    return parse_script_text(read_text_file(path_text), str(Path(path_text)))


def _plain_yaml(text: str, where: str, what: str) -> list[Any]:
    """Every document of YAML/JSON ``text`` as plain JSON values. Aliases and deep nesting are refused from the event
    stream (which PyYAML produces without recursion) before anything is built."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise UsageError(f"{what} {where}: YAML aliases (*{event.anchor}) are not allowed in {what}s")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_SCRIPT_DEPTH:
                    raise UsageError(f"{what} {where} is nested more than {MAX_SCRIPT_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{what} {where} is not valid YAML/JSON: {first}") from None
    try:
        return list(json.loads(json.dumps(documents, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what} {where} holds a value that is not plain JSON ({exc})") from None


def parse_script_text(text: str, where: str) -> dict[str, Any]:
    """YAML/JSON text -> a mapping of JSON values (one document; see ``_plain_yaml``)."""
    documents = _plain_yaml(text, where, "script")
    data = documents[0] if len(documents) == 1 else None
    if not isinstance(data, dict):
        raise UsageError(f"script {where}: a script is a mapping with 'default' and 'tasks'")
    return dict(data)


def read_yaml_documents(path_text: str, what: str) -> list[Any]:
    """Every non-empty document of the YAML/JSON file ``path_text`` as plain JSON values (UsageError otherwise)."""
    return [doc for doc in _plain_yaml(read_text_file(path_text, what), str(Path(path_text)), what) if doc is not None]


__all__ = [
    "MAX_SCRIPT_BYTES",
    "MAX_SCRIPT_DEPTH",
    "UsageError",
    "check_utf8_arguments",
    "field_bounds",
    "int_between",
    "positive_seconds",
    "read_script_file",
    "read_text_file",
    "read_yaml_documents",
]
