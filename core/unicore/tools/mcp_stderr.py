"""A stdio MCP server's stderr into the turn's log, escaped and bounded (docs/mcp.md).

A server can write anything to its stderr, as much as it likes: terminal escape sequences that would move the
cursor or retitle the window of whoever reads the log, and megabytes a second. ``StderrPump`` gives the server the
write end of a pipe (``errlog``) and a thread copies what arrives, line by line, to the turn's stderr (its log):

- each line as ``MCP server <name> stderr: <line>``, its control characters as visible escapes
  (``terminal.printable``: ESC -> ``\\x1b``; bytes that are no UTF-8 as ``\\udcXX``), cut at ``LINE_CHARS``
  characters (then `` [cut]``);
- at most ``CAP_BYTES`` bytes of such lines (prefixes included) per server and turn; the first line that would pass
  the cap, and everything after it, is dropped;
- when the server's stderr ends (or the turn closes the session), one last line
  ``MCP server <name> stderr: ... N bytes dropped`` when anything was: N counts the server's bytes that were not
  shown (the cut ends of long lines, and everything after the cap).

A line too long to keep in memory is cut as it arrives: the pump holds at most about ``4 * LINE_CHARS`` bytes of a
line.
"""

from __future__ import annotations

import os
import threading
from typing import TextIO

from unicore.terminal import printable

CAP_BYTES = 65_536  # per server and turn: the bytes of its stderr lines in the log (escaped, prefixes included)
LINE_CHARS = 1_000  # a line's text (escaped) is cut here
CUT = " [cut]"
_KEEP = 4 * LINE_CHARS  # a UTF-8 character is at most 4 bytes: this much of a line always fills LINE_CHARS
_READ = 65_536


class StderrPump:
    """The stderr of one stdio server for one turn: ``errlog`` is for the SDK (the server's stderr), ``finish``
    writes the last line once the server is gone."""

    def __init__(self, server: str, out_fd: int) -> None:
        self.prefix = f"MCP server {server} stderr: "
        self.written = 0  # bytes written to out_fd
        self.dropped = 0  # the server's bytes not shown
        self._out = out_fd
        self._full = False
        self._done = False
        self._lock = threading.Lock()
        read_fd, write_fd = os.pipe()
        self._read = read_fd
        self.errlog: TextIO = os.fdopen(write_fd, "w")
        self._thread = threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        """Close this process's copy of the write end (the server holds its own): the pump then sees the end of the
        server's stderr when the server exits."""
        if not self.errlog.closed:
            self.errlog.close()

    def finish(self, timeout: float) -> None:
        """Close the write end, let the pump read what the server wrote until it exited (at most ``timeout``
        seconds: a process the server started may hold the pipe open), then write the last line."""
        self.close_writer()
        self._thread.join(timeout)
        self._summary()

    # ---- the pump's thread

    def _pump(self) -> None:
        line = b""
        skipping = False  # past the shown start of a line too long to hold: drop until its end
        try:
            while chunk := os.read(self._read, _READ):
                if self._full or self._done:
                    self._drop(len(chunk))  # past the cap: only count
                    continue
                while chunk:
                    end = chunk.find(b"\n")
                    part, chunk = (chunk, b"") if end < 0 else (chunk[:end], chunk[end + 1:])
                    if skipping:
                        self._drop(len(part) + (end >= 0))
                        skipping = end < 0
                    elif end >= 0:
                        self._line(line + part, newline=True)
                        line = b""
                    elif len(line) + len(part) > _KEEP:  # no end in sight: show its start now, drop the rest
                        self._line(line + part, newline=False)
                        line, skipping = b"", True
                    else:
                        line += part
            if line:
                self._line(line, newline=False)
        except OSError:
            pass  # nothing more to read
        finally:
            os.close(self._read)
            self._summary()

    def _drop(self, size: int) -> None:
        with self._lock:
            self.dropped += size

    def _line(self, raw: bytes, *, newline: bool) -> None:
        """Show one line (``raw``, without its newline) if it fits under the cap; count what is not shown (a
        shown line's newline, or CRLF, counts as shown)."""
        if self._full or self._done:
            self._drop(len(raw) + newline)
            return
        body = raw[:-1] if newline and raw.endswith(b"\r") else raw  # a CRLF ends a line like a newline
        text = body.decode("utf-8", "surrogateescape")
        shown: list[str] = []
        width = 0
        for char in text:
            piece = printable(char, multiline=False)
            if width + len(piece) > LINE_CHARS:
                break
            shown.append(piece)
            width += len(piece)
        cut = len(shown) < len(text)
        data = (self.prefix + "".join(shown) + (CUT if cut else "") + "\n").encode("utf-8", "surrogateescape")
        with self._lock:
            if self._done or self.written + len(data) > CAP_BYTES:
                self._full = True
                self.dropped += len(raw) + newline
                return
            self.written += len(data)
            self.dropped += len(body) - len(text[:len(shown)].encode("utf-8", "surrogateescape"))
            _write_all(self._out, data)

    def _summary(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            if self.dropped:
                _write_all(self._out, (f"{self.prefix}... {self.dropped} bytes dropped (at most {CAP_BYTES} bytes "
                                       f"of stderr lines per server and turn, {LINE_CHARS} characters a line)\n"
                                       ).encode())


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # the turn's stderr is gone: nothing to keep the lines for


__all__ = ["CAP_BYTES", "LINE_CHARS", "StderrPump"]
