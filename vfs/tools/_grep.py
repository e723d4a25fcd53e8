"""Synthesized Grep: output modes and pagination over ``FileSystem.grep``.

Theory of operation
-------------------
``FileSystem.grep`` yields every hit, sorted by path then line number, and takes ``max_results``
as a pushdown. ``output_mode``, ``head_limit`` and ``offset`` belong to the tool, not the verb:

* ``content`` (the default): one line per hit, ``path:line_number:line`` (ripgrep's format).
  ``offset`` hits are skipped and at most ``head_limit`` shown, so ``offset + head_limit`` is
  pushed down as ``max_results`` and the tree stops early.
* ``files_with_matches``: each matching path once, in path order. A hit cap cannot express a
  file cap, so nothing is pushed down; the tool stops reading hits once it has
  ``offset + head_limit`` paths.
* ``count``: ``path:count`` per matching file; ``offset``/``head_limit`` count files. The tool
  stops at the first hit of the file after the last one it shows (that file's count is not needed).

``head_limit`` 0 or omitted means no limit (as Claude Code's Grep); ``offset`` 0 or omitted skips
nothing. No hit (or nothing left after ``offset``) reads ``No matches found``. The hit iterator is
always closed, also when the tool stops early, so a tree's walk is finalized on every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

from .._types import FileSystem, GrepQuery, GrepResult

OutputMode = Literal["content", "files_with_matches", "count"]
OUTPUT_MODES: tuple[OutputMode, ...] = ("content", "files_with_matches", "count")
NO_MATCHES = "No matches found"


async def grep_tool(
    fs: FileSystem,
    query: GrepQuery,
    mode: OutputMode = "content",
    head_limit: int | None = None,
    offset: int = 0,
) -> str:
    """What Grep shows for ``query`` (its ``max_results`` is replaced by the tool's pushdown)."""
    limit = head_limit or None  # 0 means unlimited
    wanted = None if limit is None else offset + limit
    if mode == "content":
        pushed = GrepQuery(
            query.pattern, query.path, query.glob, query.case_insensitive, max_results=wanted
        )
        hits = await _take(fs.grep(pushed), wanted)
        lines = [f"{hit.path}:{hit.line_number}:{hit.line}" for hit in hits[offset:]]
    else:
        pushed = GrepQuery(query.pattern, query.path, query.glob, query.case_insensitive)
        counts = await _count_files(fs.grep(pushed), wanted, whole=mode == "count")
        shown = list(counts.items())[offset:wanted]
        if mode == "files_with_matches":
            lines = [path for path, _ in shown]
        else:
            lines = [f"{path}:{count}" for path, count in shown]
    return "\n".join(lines) if lines else NO_MATCHES


async def _take(hits: AsyncIterator[GrepResult], wanted: int | None) -> list[GrepResult]:
    taken: list[GrepResult] = []
    try:
        async for hit in hits:
            taken.append(hit)
            if wanted is not None and len(taken) >= wanted:
                break  # a tree that ignores the pushdown still stops here
    finally:
        await _close(hits)
    return taken


async def _count_files(
    hits: AsyncIterator[GrepResult], wanted: int | None, *, whole: bool
) -> dict[str, int]:
    """Hits per path, in path order, for the first ``wanted`` paths; their counts are complete
    only when ``whole`` (then the walk stops at the first hit of the next path)."""
    counts: dict[str, int] = {}
    try:
        async for hit in hits:
            if hit.path not in counts:
                if wanted is not None and len(counts) >= wanted:
                    break  # every file we show is complete: hits come sorted by path
                counts[hit.path] = 0
            counts[hit.path] += 1
            if not whole and wanted is not None and len(counts) >= wanted:
                break  # paths only: the last one needs no more hits
    finally:
        await _close(hits)
    return counts


async def _close(iterator: AsyncIterator[GrepResult]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
