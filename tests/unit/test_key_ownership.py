"""One owner for each shared name: no ``uc:`` key literal outside ``unicore/store/keys.py``, no shared label or
annotation literal (``unicore.dev/...``, ``app.kubernetes.io/...``) outside ``unicore/api/contract.py``.

Every string literal of the production packages is read with ``tokenize``; a literal whose text starts with
``uc:`` is a Redis key built outside the module that owns the layout (the store's other modules included: they
build keys with ``keys.py``'s names and builders). Prose that mentions a key (docstrings, comments) does not start
with it and is not flagged."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [REPO / "core" / "unicore", REPO / "operator" / "unicore_operator", REPO / "client" / "unicore_client",
            REPO / "hack" / "unicore_devcluster"]
STORE = REPO / "core" / "unicore" / "store"
KEYS = STORE / "keys.py"
CONTRACT = REPO / "core" / "unicore" / "api" / "contract.py"


def key_literals(source: str, prefixes: tuple[str, ...] = ("uc:",)) -> list[tuple[int, str]]:
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING:
            continue
        text = token.string.lstrip("rbuRBUfF")
        body = text.strip("\"'")
        if body.startswith(prefixes):
            found.append((token.start[0], token.string))
    # f-strings are tokenized in pieces on Python >= 3.12: also check their constant parts
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith(prefixes):
                found.append((node.lineno, "f-string"))
    return found


def test_the_checked_packages_exist() -> None:
    """A package moved away would leave every check below passing over nothing."""
    assert [path for path in (*PACKAGES, KEYS, CONTRACT) if not path.exists()] == []


def test_no_redis_key_literal_outside_the_keys_module() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {literal}"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if path != KEYS
        for line, literal in key_literals(path.read_text())
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_check_sees_plain_and_f_string_keys() -> None:
    source = 'KEY = "uc:x"\nB = f"uc:{{{t}}}:task"\n"""The key ``uc:x`` in prose."""\n'
    assert sorted({line for line, _ in key_literals(source)}) == [1, 2]


SHARED_PREFIXES = ("unicore.dev/", "app.kubernetes.io/")


def test_no_shared_label_or_annotation_literal_outside_the_contract_module() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {literal}"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if path != CONTRACT
        for line, literal in key_literals(path.read_text(), SHARED_PREFIXES)
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_turn_meta_format_is_parsed_only_in_the_store_package() -> None:
    """``<n>:ended_at`` and its siblings are read through ``unicore.store.records.TurnMeta`` (one parser)."""
    pattern = re.compile(r"""[}"']:(ended_at|summary|iterations|note)["']""")
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if STORE not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == [], "\n".join(offenders)
