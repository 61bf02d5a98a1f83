"""Which of several ``fnmatch`` globs is the most specific (a total order, whatever order the globs came in).

Used by the scripted model to pick a task's script entry (``providers.scripted``, whose doc gives the ranks) and by
``context_window`` for a model's window. Kept apart from the scripted provider so a turn with a real model does not
import it (and YAML with it) for this: a turn pays its imports on every start.
"""

from __future__ import annotations


def _glob_tokens(pattern: str) -> list[tuple[bool, str]]:
    """``pattern`` as ``(is_wildcard, text)`` tokens, splitting exactly where ``fnmatch`` does: ``*``, ``?`` and a
    ``[...]`` set are wildcards; a ``[`` without its closing ``]`` is a literal character."""
    tokens: list[tuple[bool, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char in "*?":
            tokens.append((True, char))
            i += 1
            continue
        if char == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                tokens.append((True, pattern[i:j + 1]))
                i = j + 1
                continue
        tokens.append((False, char))
        i += 1
    return tokens


def specificity(pattern: str) -> tuple[int, int, int, int, str]:
    """Sort key of a script key, most specific first: exact name, more literal characters, fewer ``*``, fewer
    ``?``/``[...]``, then lexical order (a total order: the same keys always rank the same, in whatever order they
    came)."""
    tokens = _glob_tokens(pattern)
    stars = sum(1 for is_wildcard, text in tokens if is_wildcard and text == "*")
    others = sum(1 for is_wildcard, text in tokens if is_wildcard and text != "*")
    literals = len(tokens) - stars - others
    return (0 if stars + others == 0 else 1, -literals, stars, others, pattern)


__all__ = ["specificity"]
