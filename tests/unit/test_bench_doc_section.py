"""A benchmark rewrites its own section of docs/benchmarks.md and leaves every other one as it was."""

from __future__ import annotations

from pathlib import Path

from bench.doc_section import write_section


def test_a_section_is_replaced_or_appended_and_the_others_kept(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n\n## Drain\nold figures\n\n## UI\nui figures\n")
    write_section("## Drain", "## Drain\nnew figures\n", doc)
    text = doc.read_text()
    assert "old figures" not in text and text.count("## Drain\nnew figures") == 1
    assert "intro" in text and "## UI\nui figures" in text
    write_section("## Turn start", "## Turn start\nfresh", doc)
    assert doc.read_text().endswith("## Turn start\nfresh\n") and "## UI\nui figures" in doc.read_text()


def test_a_missing_doc_is_started(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    write_section("## Drain", "## Drain\nfigures", doc)
    assert doc.read_text() == "# Benchmarks\n\n## Drain\nfigures\n"
