"""Workspace tools: read_file, write_file, list_files, confined to the task's workspace directory.

Paths are relative to the workspace. ``..``, absolute paths and symlinks that lead outside are refused (the
path is resolved, symlinks included, and must stay inside the resolved workspace). Reads, writes and listings
are capped.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from unicore.errors import ToolError
from unicore.tools.base import Tool, ToolContext

MAX_READ_BYTES = 64 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_LIST_ENTRIES = 500


def resolve_path(workspace: Path, path: str) -> Path:
    """``path`` inside ``workspace`` (resolved, symlinks followed), or a ToolError saying why not."""
    if not path or not path.strip():
        raise ToolError("path is empty: give a path relative to your workspace, e.g. 'notes.md'")
    if "\x00" in path:
        raise ToolError("path contains a NUL character")
    if Path(path).is_absolute():
        raise ToolError(
            f"absolute path {path!r} refused: give a path relative to your workspace, e.g. 'notes.md'"
        )
    root = workspace.resolve()
    target = (root / path).resolve()
    if target != root and not target.is_relative_to(root):
        raise ToolError(
            f"path {path!r} is outside your workspace (after resolving '..' and symlinks); refused"
        )
    return target


def _display(workspace: Path, target: Path) -> str:
    relative = target.relative_to(workspace.resolve())
    return str(relative) if str(relative) != "." else "."


class ReadFileInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="file path relative to your workspace")
    offset: int = Field(0, ge=0, description="byte offset to start reading at (for long files)")
    max_bytes: int = Field(MAX_READ_BYTES, ge=1, le=MAX_READ_BYTES, description="at most this many bytes")


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file from your workspace. Long files are returned in pieces: "
        "the result says which offset to read next."
    )
    Input = ReadFileInput

    def run(self, ctx: ToolContext, args: ReadFileInput) -> str:  # type: ignore[override]
        target = resolve_path(ctx.workspace, args.path)
        if target.is_dir():
            raise ToolError(f"{args.path!r} is a directory; use list_files to see what it contains")
        if not target.is_file():
            raise ToolError(f"no such file: {args.path!r} (use list_files to see what exists)")
        size = target.stat().st_size
        with target.open("rb") as handle:
            handle.seek(args.offset)
            data = handle.read(args.max_bytes)
        if b"\x00" in data:
            raise ToolError(
                f"{args.path!r} looks like a binary file ({size:,} bytes); only text files can be read"
            )
        text = data.decode("utf-8", errors="replace")
        end = args.offset + len(data)
        if end < size:
            text += f"\n[... truncated: {args.path} is {size:,} bytes; read again with offset={end} ...]"
        return text


class WriteFileInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="file path relative to your workspace; missing folders are created")
    content: str = Field(description="the text to write")
    append: bool = Field(False, description="append to the file instead of replacing it")


class WriteFile(Tool):
    name = "write_file"
    description = "Write (or append) a UTF-8 text file in your workspace. Creates missing folders."
    Input = WriteFileInput

    def run(self, ctx: ToolContext, args: WriteFileInput) -> str:  # type: ignore[override]
        data = args.content.encode("utf-8")
        ctx.workspace.mkdir(parents=True, exist_ok=True)
        target = resolve_path(ctx.workspace, args.path)
        if target.is_dir():
            raise ToolError(f"{args.path!r} is a directory; give a file path")
        existing = target.stat().st_size if args.append and target.is_file() else 0
        if existing + len(data) > MAX_WRITE_BYTES:
            raise ToolError(
                f"file too large: {existing + len(data):,} bytes would exceed the "
                f"{MAX_WRITE_BYTES:,}-byte cap per file; split the content over several files"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        if args.append:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        else:
            # Write a temporary file and rename it: a reader never sees half a file.
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".uc-write-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        verb = "appended" if args.append else "wrote"
        return f"{verb} {len(data):,} bytes to {_display(ctx.workspace, target)}"


class ListFilesInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".", description="folder relative to your workspace")
    recursive: bool = Field(False, description="list sub-folders too")


class ListFiles(Tool):
    name = "list_files"
    description = (
        "List the files and folders in your workspace (folders end with '/', files show their size)."
    )
    Input = ListFilesInput

    def run(self, ctx: ToolContext, args: ListFilesInput) -> str:  # type: ignore[override]
        if not ctx.workspace.exists() and args.path in ("", "."):
            return "(the workspace is empty)"
        target = resolve_path(ctx.workspace, args.path)
        if not target.exists():
            raise ToolError(f"no such folder: {args.path!r}")
        if not target.is_dir():
            raise ToolError(f"{args.path!r} is a file; use read_file to read it")
        entries: list[str] = []
        total = 0
        for folder, dirs, files in os.walk(target, followlinks=False):
            dirs.sort()
            base = Path(folder)
            for name in [*(d + "/" for d in dirs), *sorted(files)]:
                if name.startswith(".uc-write-"):
                    continue
                total += 1
                if len(entries) < MAX_LIST_ENTRIES:
                    entries.append(self._entry(target, base, name))
            if not args.recursive:
                break
        if not entries:
            return f"(no files in {_display(ctx.workspace, target)})"
        if total > len(entries):
            entries.append(f"[... {total - len(entries)} more entries not shown ...]")
        return "\n".join(entries)

    @staticmethod
    def _entry(top: Path, folder: Path, name: str) -> str:
        path = folder / name.rstrip("/")
        shown = str(path.relative_to(top)) + ("/" if name.endswith("/") else "")
        if path.is_symlink():
            return f"{shown} (symlink)"
        if name.endswith("/"):
            return shown
        try:
            return f"{shown} ({path.stat().st_size:,} bytes)"
        except OSError:
            return shown
