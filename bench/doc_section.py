"""Each benchmark owns one ``## `` section of docs/benchmarks.md and rewrites only that section."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(section: str, text: str, path: Path = DOC) -> Path:
    """Replace the section whose heading line is ``section`` with ``text`` (or append it), keeping every other
    section; ``text`` starts with that heading."""
    existing = path.read_text() if path.exists() else "# Benchmarks\n"
    start = existing.find(section)
    if start >= 0:
        following = existing.find("\n## ", start + len(section))
        existing = existing[:start].rstrip() + "\n" + (existing[following:] if following >= 0 else "")
    path.write_text(existing.rstrip() + "\n\n" + text.rstrip() + "\n")
    return path
