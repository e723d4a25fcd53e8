"""What synthesized Read shows: numbered lines of text, or an image part.

Theory of operation
-------------------
Text is shown like ``cat -n``: each line is ``"%6d\\t%s" % (number, line)`` (the number
right-aligned in six columns, then a tab, then the line), lines joined by ``"\\n"``. Numbers are
1-based and are the file's own line numbers, so they agree with Grep's: lines are what
``vfs._lines`` says (split on ``"\\n"`` only, a final ``"\\n"`` starts no line, a ``"\\r"``
before the ``"\\n"`` is not shown). Wider numbers simply grow past six columns, as ``cat -n``
does.

``offset`` is the first line shown (1-based; ``0`` means ``1``; negative counts from the end, so
``-5`` shows the last five lines) and ``limit`` the most lines shown (all when omitted). An
offset past the last line is refused with a message that says how many lines the file has; an
empty file read from the start shows nothing.

A window shows at most :data:`READ_MAX_CHARS` characters of line text. A line that does not fit
ends the window before it, with a last line that says where to read on (``[Read stopped before
line 7 of /a.txt: it shows at most 262144 characters at once. Use offset 7 to read on.]``); a
first line longer than that alone is cut (``[Line 1 of /a.txt is cut after 262144 characters.
Use offset 2 to read on.]``). :class:`Window` is that rule, pure; :func:`read_text` feeds it a
file read a chunk at a time (``vfs._reading``), never whole: it stops reading once the window is
full, holds at most one chunk and what the window can still show of the line in progress, and
for a negative offset first counts the file's lines in one pass. :func:`number_lines` is the same
window over text in memory.

Images (``read`` returned bytes for a jpeg/png/gif/webp) become the part the Cursor harness sends
the model: ``{"type": "image", "mime_type": "image/png", "data": "<base64>"}``. ``offset`` and
``limit`` do not apply to images.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from .._content import is_image_path
from .._lines import LineBlocks, block_lines, last_line, split_lines
from .._reading import CHUNK, open_for_reading, read_chunks
from .._types import FileSystem
from ._args import ArgumentError

READ_MAX_CHARS = 1 << 18
"""The most characters of line text one Read shows."""

MIME_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
}


class Window:
    """The lines one Read shows, fed line by line in order (see the module docstring)."""

    __slots__ = ("_last", "_note", "_path", "_shown", "_used", "budget", "done", "start")

    def __init__(
        self, path: str, start: int, limit: int | None, budget: int = READ_MAX_CHARS
    ) -> None:
        self._path = path
        self.start = start
        self._last = None if limit is None else start - 1 + limit
        self.budget = budget
        self._shown: list[str] = []
        self._used = 0
        self._note: str | None = None
        self.done = False

    @property
    def room(self) -> int:
        """How many more characters of line text fit."""
        return self.budget - self._used

    def add(self, number: int, line: str) -> bool:
        """Offer line ``number`` (or as much of it as was read, when that is more than
        :attr:`room`); true once the window is complete."""
        if self.done or number < self.start:
            return self.done
        if len(line) > self.room:
            if self._shown:
                self._note = (
                    f"[Read stopped before line {number} of {self._path}: it shows at most "
                    f"{self.budget} characters at once. Use offset {number} to read on.]"
                )
            else:
                self._shown.append(f"{number:6d}\t{line[: self.room]}")
                self._note = (
                    f"[Line {number} of {self._path} is cut after {self.budget} characters. "
                    f"Use offset {number + 1} to read on.]"
                )
            self.done = True
            return True
        self._shown.append(f"{number:6d}\t{line}")
        self._used += len(line)
        self.done = number == self._last
        return self.done

    def text(self, lines: int) -> str:
        """What Read shows, the file having ``lines`` lines (or more, when :attr:`done`)."""
        if not self.done and self.start > lines and not (self.start == 1 and lines == 0):
            raise ArgumentError(
                f"Read: offset {self.start} is past the end of {self._path} ({_count(lines)})"
            )
        shown = self._shown if self._note is None else [*self._shown, self._note]
        return "\n".join(shown)


def first_line(offset: int | None, lines: int | None) -> int:
    """The line ``offset`` names (``lines``: how many the file has, needed when negative)."""
    if offset is None or offset == 0:
        return 1
    if offset > 0:
        return offset
    assert lines is not None
    return max(1, lines + 1 + offset)


def number_lines(text: str, path: str, offset: int | None = None, limit: int | None = None) -> str:
    """``text`` from line ``offset``, at most ``limit`` lines, numbered like ``cat -n``."""
    lines = split_lines(text)
    window = Window(path, first_line(offset, len(lines)), limit)
    for number, line in enumerate(lines, start=1):
        if window.add(number, line):
            break
    return window.text(len(lines))


async def read_text(
    fs: FileSystem,
    path: str,
    offset: int | None,
    limit: int | None,
    *,
    budget: int = READ_MAX_CHARS,
    chunk_size: int = CHUNK,
) -> str:
    """What Read shows of the text file ``path`` of ``fs``, read ``chunk_size`` bytes at a
    time."""
    total = await count_lines(fs, path) if offset is not None and offset < 0 else None
    window = Window(path, first_line(offset, total), limit, budget)
    file = await open_for_reading(fs, path)
    blocks = LineBlocks()
    number = 0  # lines completed so far
    try:
        async with contextlib.aclosing(read_chunks(file, chunk_size)) as chunks:
            async for chunk in chunks:
                block = blocks.feed(chunk)
                if block:
                    count = block.count(b"\n")
                    if number + count < window.start:
                        number += count  # before the window: counted, never decoded
                    else:
                        for line in block_lines(block):
                            number += 1
                            if window.add(number, line):
                                return window.text(number)
                if number + 1 < window.start:
                    blocks.discard()  # a line before the window: only its end matters
                elif blocks.pending > 4 * window.room + 4:  # UTF-8: at most 4 bytes a character
                    # The line in progress cannot be shown whole: what it starts with settles it.
                    window.add(number + 1, blocks.held().decode("utf-8", "replace"))
                    return window.text(number + 1)
    finally:
        await file.close()
    rest = blocks.end()
    if rest is not None:
        number += 1
        window.add(number, last_line(rest))
    return window.text(number)


async def count_lines(fs: FileSystem, path: str) -> int:
    """How many lines the file ``path`` has (one pass, a chunk at a time)."""
    file = await open_for_reading(fs, path)
    lines = 0
    last = b"\n"
    try:
        async with contextlib.aclosing(read_chunks(file)) as chunks:
            async for chunk in chunks:
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    finally:
        await file.close()
    return lines if last == b"\n" else lines + 1


def _count(lines: int) -> str:
    return "1 line" if lines == 1 else f"{lines} lines"


def image_part(path: str, data: bytes) -> dict[str, Any]:
    """The base64 image content part for an image file's bytes."""
    suffix = path.rsplit(".", 1)[-1].lower()
    return {
        "type": "image",
        "mime_type": MIME_TYPES.get(suffix, "application/octet-stream"),
        "data": base64.b64encode(data).decode("ascii"),
    }


async def render(
    fs: FileSystem, path: str, offset: int | None, limit: int | None
) -> str | dict[str, Any]:
    """What Read returns for the file at ``path`` of ``fs``."""
    if is_image_path(path):
        contents = await fs.read(path)
        if isinstance(contents, bytes):
            return image_part(path, contents)
        return number_lines(contents, path, offset, limit)  # a tree that answered text
    return await read_text(fs, path, offset, limit)
