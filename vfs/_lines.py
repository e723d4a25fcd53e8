"""The lines of a text file: what Read numbers and grep matches, one rule for both.

Theory of operation
-------------------
A file's lines are its bytes split at ``b"\\n"``. A final ``"\\n"`` does not start another line
(``"a\\n"`` is one line, ``""`` none, ``"\\n"`` one empty line), one ``"\\r"`` at the end of a
line is not part of it (``"a\\r\\n"`` is ``"a"``), and a line is decoded as UTF-8 with
replacement. Nothing else breaks a line (not ``"\\r"`` alone, not the other characters
``str.splitlines`` breaks at). Splitting the bytes and decoding each piece is the same as
decoding the whole and splitting: byte ``0x0A`` is always a character of its own in UTF-8, also
next to bytes that are not UTF-8, so the line numbers of a file read whole and of a file read
piece by piece agree.

:func:`split_lines` splits text held in memory. :class:`LineBlocks` splits a stream: chunks of
bytes go in, *blocks* of whole lines come out (bytes ending at a ``"\\n"``), so a reader never
holds more than one chunk and the line in progress; :func:`block_lines` and :func:`last_line`
decode them. A caller that does not need a long line whole can :meth:`LineBlocks.discard` what it
holds of it. Pure: no I/O.
"""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` (see the module docstring)."""
    if not text:
        return []
    lines = text.replace("\r\n", "\n").split("\n")
    if text.endswith("\n"):
        lines.pop()
    elif lines[-1].endswith("\r"):
        lines[-1] = lines[-1][:-1]
    return lines


def normalized(block: bytes) -> str:
    """A block of whole lines decoded, each ``"\\r\\n"`` made ``"\\n"``: its lines joined by
    ``"\\n"``, with the final ``"\\n"``."""
    return block.decode("utf-8", "replace").replace("\r\n", "\n")


def block_lines(block: bytes) -> list[str]:
    """The lines of a block that :meth:`LineBlocks.feed` answered (it ends with ``"\\n"``)."""
    lines = normalized(block).split("\n")
    lines.pop()  # after the final "\n"
    return lines


def last_line(rest: bytes) -> str:
    """The last line of a file, from what :meth:`LineBlocks.end` answered (not empty)."""
    text = rest.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\r") else text


class LineBlocks:
    """Chunks of a file's bytes in, blocks of whole lines out (see the module docstring)."""

    __slots__ = ("_dropped", "_pending")

    def __init__(self) -> None:
        self._pending = bytearray()
        self._dropped = False  # the line in progress was discarded (so it exists)

    @property
    def pending(self) -> int:
        """How many bytes of the line in progress are held."""
        return len(self._pending)

    def held(self) -> bytes:
        """The bytes of the line in progress that are held."""
        return bytes(self._pending)

    def feed(self, chunk: bytes) -> bytes:
        """The whole lines that ``chunk`` completes (``b""`` when it ends none), with their
        ``"\\n"``s; the rest is held for the next chunk."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending += chunk
            return b""
        block = bytes(self._pending) + chunk[: end + 1] if self._pending else chunk[: end + 1]
        self._pending = bytearray(chunk[end + 1 :])
        self._dropped = False
        return block

    def discard(self) -> None:
        """Forget what is held of the line in progress: the next block then starts with the rest
        of that line, and its line count is unchanged (the line ends at the same ``"\\n"``)."""
        if self._pending:
            self._pending.clear()
            self._dropped = True

    def end(self) -> bytes | None:
        """What is held after the last chunk: the last line when the file does not end with a
        ``"\\n"`` (``b""`` when it was discarded), ``None`` when it does."""
        rest = bytes(self._pending)
        dropped = self._dropped
        self._pending.clear()
        self._dropped = False
        return rest if rest or dropped else None
