"""What synthesized Read shows: numbered lines of text, or an image part.

Theory of operation
-------------------
Text is shown like ``cat -n``: each line is ``"%6d\\t%s" % (number, line)`` (the number
right-aligned in six columns, then a tab, then the line), lines joined by ``"\\n"``. Numbers are
1-based and are the file's own line numbers, so they agree with Grep's: lines are split on
``"\\n"`` only (never on the other characters ``str.splitlines`` breaks at), a final ``"\\n"``
does not start another line, and a ``"\\r"`` before the ``"\\n"`` is not shown (as Grep drops it).
Wider numbers simply grow past six columns, as ``cat -n`` does.

``offset`` is the first line shown (1-based; ``0`` means ``1``; negative counts from the end, so
``-5`` shows the last five lines) and ``limit`` the most lines shown (all when omitted). An
offset past the last line is refused with a message that says how many lines the file has; an
empty file read from the start shows nothing.

Images (``read`` returned bytes for a jpeg/png/gif/webp) become the part the Cursor harness sends
the model: ``{"type": "image", "mime_type": "image/png", "data": "<base64>"}``. ``offset`` and
``limit`` do not apply to images.

Pure: no I/O.
"""

from __future__ import annotations

import base64
from typing import Any

from .._content import is_image_path
from ._args import ArgumentError

MIME_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
}


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as Read and Grep number them (see the module docstring)."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def number_lines(text: str, path: str, offset: int | None = None, limit: int | None = None) -> str:
    """``text`` from line ``offset``, at most ``limit`` lines, numbered like ``cat -n``."""
    lines = split_lines(text)
    start = 1 if offset is None or offset == 0 else offset
    if start < 0:
        start = max(1, len(lines) + 1 + start)
    if start > len(lines) and not (start == 1 and not lines):
        raise ArgumentError(
            f"Read: offset {start} is past the end of {path} ({_count(len(lines))})"
        )
    stop = len(lines) if limit is None else min(len(lines), start - 1 + limit)
    return "\n".join(f"{number:6d}\t{lines[number - 1]}" for number in range(start, stop + 1))


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


def render(
    path: str, contents: str | bytes, offset: int | None, limit: int | None
) -> str | dict[str, Any]:
    """What Read returns for a file at ``path`` whose ``read`` gave ``contents``."""
    if isinstance(contents, bytes):
        if is_image_path(path):
            return image_part(path, contents)
        # A tree may hand back bytes for text; show them as read() would have decoded them.
        contents = contents.decode("utf-8", "replace")
    return number_lines(contents, path, offset, limit)
