"""The marker block in ``info/exclude``: pure text functions, no I/O.

Theory of operation
-------------------
``info/exclude`` is the operator's file, shared by every worktree of a repository. The protocol
adds one block per worktree and never touches another byte::

    # >>> mcpstage <worktree-id> <flags> >>> MCP session files; managed by mcpstage
    /.cursor/mcp.json
    /.cursor/.fusion-mcp*
    # <<< mcpstage <worktree-id> <<<

The patterns are relative to each worktree's top level and cover the config, the manifest, the
lock and every temporary entry (all named ``.fusion-mcp*``), so ``git add -A`` cannot capture a
session file. The flags record what the block's addition changed, so that removing it restores
the file byte for byte:

- ``cursor-created``: ``.cursor/`` did not exist before fusion made it (the final cleanup may
  try to remove it); recorded before ``.cursor/`` is made, corrected after the ``mkdir``;
- ``file-created``: ``info/exclude`` did not exist (removing the last block deletes the file);
- ``eol-added``: the file did not end with a newline, so one was added before the block.

When a block goes while others stay, its ``file-created`` and ``eol-added`` flags pass to the
block that now carries that fact. The text is handled as bytes: the operator's lines may be in
any encoding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote

PATTERNS = (b"/.cursor/mcp.json", b"/.cursor/.fusion-mcp*")
_BEGIN = re.compile(rb"^# >>> mcpstage (\S+) (\S+) >>>.*$")
_FLAGS = ("cursor-created", "file-created", "eol-added")


@dataclass(frozen=True)
class Marker:
    """One worktree's block and its restoration flags."""

    worktree_id: str
    cursor_created: bool = False
    file_created: bool = False
    eol_added: bool = False


Segment = bytes | Marker


def _wid(marker_id: str) -> bytes:
    return quote(marker_id, safe="/.-_").encode("ascii")


def render(marker: Marker) -> bytes:
    """The block's exact bytes (ending with a newline)."""
    on = (marker.cursor_created, marker.file_created, marker.eol_added)
    flags = ",".join(name for name, value in zip(_FLAGS, on, strict=True) if value) or "-"
    wid = _wid(marker.worktree_id)
    return (
        b"# >>> mcpstage "
        + wid
        + b" "
        + flags.encode("ascii")
        + b" >>> MCP session files; managed by mcpstage\n"
        + b"".join(pattern + b"\n" for pattern in PATTERNS)
        + b"# <<< mcpstage "
        + wid
        + b" <<<\n"
    )


def _parse_begin(line: bytes) -> Marker | None:
    match = _BEGIN.match(line)
    if match is None:
        return None
    flags = set(match.group(2).decode("ascii", "replace").split(","))
    return Marker(
        worktree_id=unquote(match.group(1).decode("ascii", "replace")),
        cursor_created="cursor-created" in flags,
        file_created="file-created" in flags,
        eol_added="eol-added" in flags,
    )


def segments(text: bytes) -> list[Segment]:
    """The file as operator bytes and markers, in order (an unterminated block is operator text)."""
    lines = text.splitlines(keepends=True)
    result: list[Segment] = []
    index = 0
    while index < len(lines):
        marker = _parse_begin(lines[index].rstrip(b"\r\n"))
        if marker is not None:
            end = b"# <<< mcpstage " + _wid(marker.worktree_id) + b" <<<"
            close = next(
                (at for at in range(index + 1, len(lines)) if lines[at].rstrip(b"\r\n") == end),
                None,
            )
            if close is not None:
                result.append(marker)
                index = close + 1
                continue
        _append(result, lines[index])
        index += 1
    return result


def _append(result: list[Segment], data: bytes) -> None:
    if not data:
        return
    if result and isinstance(result[-1], bytes):
        result[-1] += data
    else:
        result.append(data)


def join(parts: list[Segment]) -> bytes:
    return b"".join(part if isinstance(part, bytes) else render(part) for part in parts)


def find(text: bytes | None, worktree_id: str) -> Marker | None:
    """This worktree's marker in ``text`` (``None``: absent, or no file)."""
    if text is None:
        return None
    return next(
        (
            part
            for part in segments(text)
            if isinstance(part, Marker) and part.worktree_id == worktree_id
        ),
        None,
    )


def add(text: bytes | None, marker: Marker) -> bytes:
    """``text`` (``None``: no file) with ``marker``'s block appended; flags set to match."""
    if text is None:
        return render(replace(marker, file_created=True, eol_added=False))
    if text and not text.endswith(b"\n"):
        return text + b"\n" + render(replace(marker, file_created=False, eol_added=True))
    return text + render(replace(marker, file_created=False, eol_added=False))


def update(text: bytes, marker: Marker) -> bytes:
    """``text`` with the block of ``marker.worktree_id`` carrying ``marker``'s cursor flag."""
    parts = segments(text)
    for at, part in enumerate(parts):
        if isinstance(part, Marker) and part.worktree_id == marker.worktree_id:
            parts[at] = replace(part, cursor_created=marker.cursor_created)
    return join(parts)


def remove(text: bytes, worktree_id: str) -> tuple[bytes | None, Marker | None]:
    """``text`` without this worktree's block (``None``: delete the file), and the block."""
    parts = segments(text)
    at = next(
        (i for i, p in enumerate(parts) if isinstance(p, Marker) and p.worktree_id == worktree_id),
        None,
    )
    if at is None:
        return text, None
    gone = parts.pop(at)
    assert isinstance(gone, Marker)
    if gone.eol_added:
        following = parts[at] if at < len(parts) else None
        preceding = parts[at - 1] if at > 0 else None
        if isinstance(following, Marker):
            parts[at] = replace(following, eol_added=True)
        elif following is None and isinstance(preceding, bytes) and preceding.endswith(b"\n"):
            parts[at - 1] = preceding[:-1]
        # Operator lines after the block: the newline now separates them; it stays.
    others = [i for i, p in enumerate(parts) if isinstance(p, Marker)]
    if gone.file_created:
        if others:
            first = parts[others[0]]
            assert isinstance(first, Marker)
            parts[others[0]] = replace(first, file_created=True)
        elif not join(parts):
            return None, gone
    # Rejoin operator bytes that the block separated.
    merged: list[Segment] = []
    for part in parts:
        if isinstance(part, bytes):
            _append(merged, part)
        else:
            merged.append(part)
    return join(merged), gone
