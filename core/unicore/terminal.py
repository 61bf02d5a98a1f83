"""Text from models, users and tools made safe to show on a terminal.

Anyone who can post a message (a user, a model, a tool result) could otherwise put escape sequences into the
terminal of whoever reads the transcript: move the cursor, rewrite earlier lines, set the window title, or
reorder text with bidi overrides. ``printable`` replaces every such character with a visible escape
(``ESC`` -> ``\\x1b``, ``U+202E`` -> ``\\u202e``): C0 controls (newline and tab are kept in multi-line text),
DEL, C1 controls, bidi marks/embeddings/overrides/isolates, and lone surrogates (undecodable input; they would
also make ``print`` fail). Backslashes are left alone, so the result is for people, not for parsing; machine
output (``--json``) is never passed through here and stays exact.
"""

from __future__ import annotations

import re

_C0_BUT_TAB_NEWLINE = "\x00-\x08\x0b-\x1f"
_DEL_AND_C1 = "\x7f-\x9f"
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_SURROGATES = "\ud800-\udfff"

_MULTILINE_UNSAFE = re.compile(f"[{_C0_BUT_TAB_NEWLINE}{_DEL_AND_C1}{_BIDI}{_SURROGATES}]")
_ONELINE_UNSAFE = re.compile(f"[\t\n{_C0_BUT_TAB_NEWLINE}{_DEL_AND_C1}{_BIDI}{_SURROGATES}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, multiline: bool = True) -> str:
    """``str(text)`` with terminal control characters shown as visible escapes.

    ``multiline`` keeps newlines and tabs (transcripts); ``multiline=False`` escapes them too (one-line
    fields such as a table cell)."""
    pattern = _MULTILINE_UNSAFE if multiline else _ONELINE_UNSAFE
    return pattern.sub(_visible, str(text))


__all__ = ["printable"]
