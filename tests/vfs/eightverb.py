"""A user's own tree for the composer tests: the eight verbs over a dict, and nothing else.

``EightVerbTree`` implements only :class:`vfs.FileSystem` (no POSIX extension, no ``watch``), so
every composer must reach it through :func:`vfs.posix_view`; it proves a user's tree composes.
Directories are implied by the files beneath them. It has a toy index (``search`` scores a file by
how often the query occurs in it) so search fan-out can be tested, and instruments what the tests
need to see: the caps pushed down to ``grep``/``search``, how many hits it produced, what type of
contents ``write`` received, and a ``failure`` that every verb raises (a backend that is down).

Its ``grep`` is native (not ``grep_tree``) so the hits it produces can be counted exactly.

``run(backend, fn)`` runs an async test body under ``"trio"`` or ``"asyncio"``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio

import vfs
from vfs._content import decode_contents, encode_contents
from vfs._match import compile_grep, compile_grep_glob, grep_lines
from vfs._paths import (
    is_strictly_under,
    is_under,
    join_path,
    normalize_path,
    relative_to,
    split_path,
)

BACKENDS = ("trio", "asyncio")


def exactly(message: str) -> str:
    """A ``pytest.raises(match=)`` pattern for exactly ``message``."""
    return "^" + re.escape(message) + "$"


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def collect(source: AsyncIterator[object]) -> list[object]:
    return [item async for item in source]


async def paths(source: AsyncIterator[vfs.DirEntry]) -> list[str]:
    return [entry.path async for entry in source]


class EightVerbTree:
    """Eight verbs over ``{path: bytes}`` (see the module docstring)."""

    def __init__(self, files: Mapping[str, str | bytes] | None = None) -> None:
        self.files: dict[str, bytes] = {
            normalize_path(path): encode_contents(data) for path, data in (files or {}).items()
        }
        self.failure: Exception | None = None  # raised by every verb while set
        self.write_failure: Exception | None = None  # raised by write only
        self.grep_caps: list[int | None] = []
        self.search_caps: list[int | None] = []
        self.hits_produced = 0
        self.written: list[tuple[str, type]] = []

    def __repr__(self) -> str:
        return f"EightVerbTree({sorted(self.files)!r})"

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _kind(self, path: str) -> vfs.Kind:
        if path in self.files:
            return "file"
        if path == "/" or any(is_strictly_under(other, path) for other in self.files):
            return "directory"
        return "missing"

    async def list(self, prefix: str = "/") -> AsyncIterator[vfs.DirEntry]:
        self._check()
        directory = normalize_path(prefix)
        if self._kind(directory) != "directory":
            return
        depth = len(split_path(directory))
        children: dict[str, vfs.Kind] = {}
        for path in self.files:
            if is_strictly_under(path, directory):
                child = join_path(directory, split_path(path)[depth])
                children[child] = "file" if child == path else "directory"
        for path in sorted(children):
            self._check()
            yield vfs.DirEntry(path, children[path])

    async def stat(self, path: str) -> vfs.FileInfo:
        self._check()
        path = normalize_path(path)
        kind = self._kind(path)
        if kind == "file":
            return vfs.FileInfo("file", size=len(self.files[path]))
        return vfs.FileInfo(kind)

    async def glob(self, pattern: str, dir: str = "/") -> AsyncIterator[vfs.DirEntry]:
        self._check()
        async for entry in vfs.glob_tree(self, pattern, dir):
            yield entry

    async def read(self, path: str) -> str | bytes:
        self._check()
        path = normalize_path(path)
        if path not in self.files:
            raise vfs.FileNotFoundError(path)
        return decode_contents(path, self.files[path])

    async def grep(self, query: vfs.GrepQuery) -> AsyncIterator[vfs.GrepResult]:
        self._check()
        self.grep_caps.append(query.max_results)
        root = normalize_path(query.path)
        regex = compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        file_filter = compile_grep_glob(query.glob)
        count = 0
        for path in sorted(self.files):
            if not is_under(path, root):
                continue
            rel = path.rsplit("/", 1)[-1] if path == root else relative_to(path, root)
            if file_filter is not None and not file_filter(rel):
                continue
            text = self.files[path].decode("utf-8", "replace")
            for number, line in grep_lines(text, regex):
                if query.max_results is not None and count >= query.max_results:
                    return
                count += 1
                self.hits_produced += 1
                self._check()
                yield vfs.GrepResult(path, number, line)

    async def write(self, path: str, contents: str | bytes) -> None:
        self._check()
        if self.write_failure is not None:
            raise self.write_failure
        path = normalize_path(path)
        self.written.append((path, type(contents)))
        self.files[path] = encode_contents(contents)

    async def delete(self, path: str) -> None:
        self._check()
        path = normalize_path(path)
        if path not in self.files:
            raise vfs.FileNotFoundError(path)
        del self.files[path]

    async def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        self._check()
        root = normalize_path(query.path)
        self.search_caps.append(query.max_results)
        needle = query.query.lower()
        scored = []
        for path, data in self.files.items():
            text = data.decode("utf-8", "replace").lower()
            if is_under(path, root) and needle and needle in text:
                scored.append(vfs.SearchResult(path, float(text.count(needle)), needle))
        scored.sort(key=lambda result: (-result.score, result.path))
        for count, result in enumerate(scored):
            if query.max_results is not None and count >= query.max_results:
                return
            self.hits_produced += 1
            yield result
