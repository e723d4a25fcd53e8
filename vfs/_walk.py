"""Recursive walks, glob and grep over any FileSystem, built from ``list``, ``stat`` and ``read``.

A walk yields every descendant of a directory in lexicographic path order, streaming: at each
level, an entry ``name`` is yielded before the subtree ``name/...`` and a sibling such as
``name-x`` (``-`` sorts before ``/``) is yielded between the two. Directory symlinks are listed as
``symlink`` and never descended, also where a glob pattern names them literally
(:func:`glob_start`, which every tree's ``glob`` uses). Layers with a faster native walk use
their own; composers and user trees fall back to these.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing

from ._content import is_image_path
from ._errors import PathError, is_answer
from ._match import LineGrep, compile_glob, compile_grep, compile_grep_glob
from ._paths import base_name, join_path, normalize_path, relative_to
from ._reading import open_for_reading, read_chunks
from ._types import DirEntry, FileInfo, FileSystem, GrepQuery, GrepResult, OpenFile, PosixFileSystem


async def walk(
    fs: FileSystem, directory: str, max_depth: int | None = None
) -> AsyncGenerator[DirEntry, None]:
    """Every entry beneath ``directory`` (not itself), in path order, ``max_depth`` levels deep."""
    if max_depth is not None and max_depth <= 0:
        return
    entries = [entry async for entry in fs.list(directory)]
    keyed: list[tuple[str, DirEntry, bool]] = []
    for entry in entries:
        name = base_name(entry.path)
        keyed.append((name, entry, False))
        if entry.kind == "directory":
            keyed.append((name + "/", entry, True))
    keyed.sort(key=lambda item: item[0])
    deeper = None if max_depth is None else max_depth - 1
    for _, entry, descend in keyed:
        if descend:
            async with aclosing(walk(fs, entry.path, deeper)) as children:
                async for child in children:
                    yield child
        else:
            yield entry


async def glob_start(
    lstat: Callable[[str], Awaitable[FileInfo]], directory: str, segments: Sequence[str]
) -> str | None:
    """Where a glob's walk starts: ``directory`` joined with the pattern's literal leading
    ``segments`` (``GlobPlan.literal_prefix``), or ``None`` when one of them is not a directory
    (or does not resolve: a symlink loop above it finds nothing, as a missing start does).

    The one rule every tree's ``glob`` follows: a walk never descends a directory symlink, and
    a literal segment is walked like any other, so it must be a real directory too (``lstat``
    says, never ``stat``): ``memory/*.md`` finds nothing through a ``memory`` symlink, as
    ``m*/*.md`` does not. ``directory`` itself is followed, as the start of every walk is.
    """
    start = directory
    for segment in segments:
        start = join_path(start, segment)
        try:
            kind = (await lstat(start)).kind
        except PathError as error:
            if not is_answer(error):
                raise  # the tree could not answer (a backend that is down)
            return None
        if kind != "directory":
            return None
    return start


async def glob_tree(fs: FileSystem, pattern: str, dir: str = "/") -> AsyncGenerator[DirEntry, None]:
    """``glob`` by walking: entries under ``dir`` whose relative path matches ``pattern``."""
    directory = normalize_path(dir)
    plan = compile_glob(pattern)
    lstat = fs.lstat if isinstance(fs, PosixFileSystem) else fs.stat  # no lstat: no symlinks
    start = await glob_start(lstat, directory, plan.literal_prefix)
    if start is None:
        return
    depth = None if plan.max_depth is None else plan.max_depth - len(plan.literal_prefix)
    async with aclosing(walk(fs, start, depth)) as entries:
        async for entry in entries:
            if plan.match(relative_to(entry.path, directory)):
                yield entry


async def grep_tree(fs: FileSystem, query: GrepQuery) -> AsyncGenerator[GrepResult, None]:
    """``grep`` by walking and reading each file a chunk at a time (``vfs._reading``: a tree that
    holds files whole is read whole once); images and files with a NUL in their first 8 KiB are
    skipped; stops after ``max_results`` hits."""
    root = normalize_path(query.path)
    regex = compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
    if query.max_results is not None and query.max_results <= 0:
        return
    file_filter = compile_grep_glob(query.glob)
    info = await fs.stat(root)
    if info.kind == "file":
        candidates = _single(root)
    elif info.kind == "directory":
        candidates = _files_under(fs, root)
    else:
        return
    count = 0
    async with aclosing(candidates) as paths:
        async for path in paths:
            if file_filter is not None:
                rel = base_name(path) if path == root else relative_to(path, root)
                if not file_filter(rel):
                    continue
            if is_image_path(path):
                continue
            try:
                file = await open_for_reading(fs, path)
            except FileNotFoundError:
                continue  # removed while we walked
            try:
                async with aclosing(_file_hits(file, regex)) as hits:
                    async for number, line in hits:
                        yield GrepResult(path, number, line)
                        count += 1
                        if query.max_results is not None and count >= query.max_results:
                            return
            finally:
                await file.close()


async def _file_hits(
    file: OpenFile, regex: re.Pattern[str]
) -> AsyncGenerator[tuple[int, str], None]:
    grep = LineGrep(regex)
    async with aclosing(read_chunks(file)) as chunks:
        async for chunk in chunks:
            for hit in grep.feed(chunk):
                yield hit
            if grep.binary:
                return
    for hit in grep.end():
        yield hit


async def _single(path: str) -> AsyncGenerator[str, None]:
    yield path


async def _files_under(fs: FileSystem, root: str) -> AsyncGenerator[str, None]:
    async with aclosing(walk(fs, root)) as entries:
        async for entry in entries:
            if entry.kind == "file":
                yield entry.path
