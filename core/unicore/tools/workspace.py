"""Workspace tools: read_file, write_file, list_files, confined to the task's workspace directory.

Paths are relative to the workspace. ``..``, absolute paths and symlinks that lead outside are refused (the
path is resolved, symlinks included, and must stay inside the resolved workspace). Reads, writes and listings
are capped.

Only regular files are read or written: a FIFO, socket or device node in the workspace is refused, and no tool ever
blocks on one. Files are checked with stat() first, then opened with O_NONBLOCK|O_NOFOLLOW and checked again with
fstat() on the open descriptor, so a path swapped for a FIFO between the check and the open is refused as well.
"""

from __future__ import annotations

import errno
import os
import stat
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


def file_kind(mode: int) -> str:
    """What a stat mode is, in words ("regular file", "FIFO (named pipe)", ...)."""
    kinds = (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISLNK, "symlink"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def _not_regular(path: str, mode: int) -> ToolError:
    return ToolError(f"{path!r} is a {file_kind(mode)}, not a regular file; only regular files can be read or written")


def stat_or_none(target: Path) -> os.stat_result | None:
    """``os.stat`` of ``target`` (never opens it), or None if it does not exist."""
    try:
        return os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        return None


def open_regular(target: Path, flags: int, path: str) -> tuple[int, os.stat_result]:
    """Open ``target`` without ever blocking and only if it is a regular file: ``(fd, fstat of the fd)``.

    O_NONBLOCK: opening a FIFO returns (or fails with ENXIO) at once instead of waiting for the other end;
    O_NOFOLLOW: the resolved path must not have turned into a symlink meanwhile. The fstat check on the open
    descriptor decides, whatever the path pointed at when it was checked before.
    """
    safe = flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(target, safe, 0o644)
    except FileNotFoundError:
        raise ToolError(f"no such file: {path!r} (use list_files to see what exists)") from None
    except IsADirectoryError:
        raise ToolError(f"{path!r} is a directory; give a file path") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ELOOP, errno.EOPNOTSUPP, errno.ENODEV):
            raise ToolError(f"{path!r} is not a regular file; only regular files can be read or written") from None
        raise ToolError(f"cannot open {path!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode)
        os.set_blocking(fd, True)  # a regular file: O_NONBLOCK did its job (no effect on the I/O itself)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _make_parents(target: Path, path: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create the folders of {path!r}: part of that path is not a folder") from None


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
        info = stat_or_none(target)
        if info is None:
            raise ToolError(f"no such file: {args.path!r} (use list_files to see what exists)")
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{args.path!r} is a directory; use list_files to see what it contains")
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(args.path, info.st_mode)
        fd, info = open_regular(target, os.O_RDONLY, args.path)
        size = info.st_size
        with os.fdopen(fd, "rb") as handle:
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
        info = stat_or_none(target)
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{args.path!r} is a directory; give a file path")
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise _not_regular(args.path, info.st_mode)  # never replaced, never opened: a FIFO would block
        existing = info.st_size if args.append and info is not None else 0
        self._check_size(existing, len(data))
        _make_parents(target, args.path)
        if args.append:
            fd, info = open_regular(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, args.path)
            with os.fdopen(fd, "wb") as handle:
                self._check_size(info.st_size, len(data))  # the size of what was opened, not of what was checked
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

    @staticmethod
    def _check_size(existing: int, adding: int) -> None:
        if existing + adding > MAX_WRITE_BYTES:
            raise ToolError(
                f"file too large: {existing + adding:,} bytes would exceed the "
                f"{MAX_WRITE_BYTES:,}-byte cap per file; split the content over several files"
            )


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
            mode = os.stat(target).st_mode
            if not stat.S_ISREG(mode):
                raise ToolError(f"{args.path!r} is a {file_kind(mode)}, not a folder")
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
            info = path.stat()  # stat only: listing never opens a file
        except OSError:
            return shown
        if not stat.S_ISREG(info.st_mode):
            return f"{shown} ({file_kind(info.st_mode)}, not a regular file)"
        return f"{shown} ({info.st_size:,} bytes)"
