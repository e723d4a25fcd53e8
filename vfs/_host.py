"""``host_fs``: a remote file store (:class:`HostFilesApi`) as a tree rooted at ``/``.

Theory of operation
-------------------
:class:`HostFilesApi` is the small, object-store-shaped interface a host offers for durable files
(a later implementation speaks S3 with conditional requests). Files live at normalized paths within
a *scope* (an opaque namespace such as a user or an agent); directories are not stored, they exist
while some file lies beneath them (``list`` derives them), so there are no empty directories.
Every file has an *etag* that changes whenever its bytes change; ``write`` and ``delete`` take
preconditions (``if_match``: only if the etag is still this one; ``if_none_match``: only if the
file does not exist), and a failed precondition raises ``WriteFailedError``.

:func:`host_fs` is the FileSystem over one scope. Its one piece of state is an etag cache, per
instance: after a successful ``read`` or ``write`` of a path it remembers that path's etag, and the
next ``write`` (or ``delete``) of the path is a compare-and-swap on it. A write without a cached
etag is unconditional. When another writer changed the file in between, the write fails with
``WriteFailedError("write failed: /a")``, never overwriting silently; the cached etag is kept, so
every later write fails the same way until a ``read`` observes the other writer's version (or a
read finds the file gone, which drops the etag). ``glob``/``grep`` walk the listing with the
walk order of ``vfs._walk`` (one ``list`` call per directory, iterative, so an early stop closes
cleanly); ``search`` is empty.

``host_fs`` implements the eight verbs and :class:`vfs.Watchable`: it reports the changes made
through it, and when the store offers ``watch(scope, callback)`` (an optional extra of
:class:`HostFilesApi`; :class:`vfs.S3HostFiles` has it) also the changes the store noticed other
writers made. A failed write keeps the store's errno (``ESTALE`` for a lost race there). The
POSIX extension is left to :func:`vfs.posix_view`, whose buffered handles load the exact bytes
(``read_bytes``: ``read`` decodes text, replacing bytes that are not UTF-8) and write back through
``write``, so they get the same compare-and-swap.

:class:`InMemoryHostFiles` is an in-process :class:`HostFilesApi` for tests and harness authors.
Calling its methods directly plays "another writer".
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import itertools
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from ._content import decode_contents, encode_contents, is_image_path
from ._errors import (
    DirectoryNotEmptyError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    WriteFailedError,
)
from ._match import compile_glob, compile_grep, compile_grep_glob, grep_bytes
from ._paths import (
    ROOT,
    base_name,
    is_strictly_under,
    join_path,
    normalize_path,
    relative_to,
    split_path,
)
from ._types import (
    MISSING,
    ChangeCallback,
    DirEntry,
    FileInfo,
    GrepQuery,
    GrepResult,
    SearchQuery,
    SearchResult,
)
from ._watch import Observers

HostKind = Literal["file", "directory"]


@dataclass(frozen=True, slots=True)
class HostEntry:
    """A file or a (derived) directory of a :class:`HostFilesApi` scope.

    ``name`` is the last segment (``""`` for the root). Directories have ``size == 0``,
    ``mtime_ns == 0`` and ``etag is None``.
    """

    name: str
    kind: HostKind
    size: int = 0
    mtime_ns: int = 0
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class HostFile:
    """A file's bytes and the etag of exactly those bytes."""

    content: bytes
    etag: str


@runtime_checkable
class HostFilesApi(Protocol):
    """Durable files kept by the host, per scope. Paths are normalized absolute paths.

    Raise :mod:`vfs` errors: ``FileNotFoundError`` for a missing file, ``IsADirectoryError`` /
    ``NotADirectoryError`` for a path that is (or lies under) the other kind, and
    ``WriteFailedError`` for a failed precondition.
    """

    async def list(self, scope: str, path: str) -> Sequence[HostEntry]:
        """The direct children of directory ``path`` (any order); empty when missing or a file."""
        ...

    async def stat(self, scope: str, path: str) -> HostEntry | None:
        """The file or directory at ``path``; ``None`` when there is none. The root exists."""
        ...

    async def read(self, scope: str, path: str) -> HostFile:
        """The file's bytes and etag."""
        ...

    async def write(
        self,
        scope: str,
        path: str,
        content: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Create or replace the file; return its new etag.

        ``if_match``: only if the current etag is this one (a missing file fails too).
        ``if_none_match``: only if no file exists at ``path`` (create-only).
        """
        ...

    async def delete(self, scope: str, path: str, *, if_match: str | None = None) -> None:
        """Remove the file (``if_match``: only if the current etag is this one)."""
        ...


def host_fs(files: HostFilesApi, scope: str) -> HostFileSystem:
    """The files of ``scope`` in ``files`` as a tree rooted at ``/`` (see the module docstring)."""
    return HostFileSystem(files, scope)


class HostFileSystem:
    """The eight verbs over one :class:`HostFilesApi` scope, with compare-and-swap writes."""

    __slots__ = ("_etags", "_files", "_observers", "_scope")

    def __init__(self, files: HostFilesApi, scope: str) -> None:
        self._files = files
        self._scope = scope
        self._etags: dict[str, str] = {}
        self._observers = Observers()

    def __repr__(self) -> str:
        return f"host_fs({self._files!r}, {self._scope!r})"

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        unsubscribe = self._observers.subscribe(callback)
        # A store that notices other writers (S3HostFiles revalidating) reports them too.
        store_watch = getattr(self._files, "watch", None)
        if store_watch is None:
            return unsubscribe
        stop_store: Callable[[], None] = store_watch(self._scope, callback)

        def both() -> None:
            unsubscribe()
            stop_store()

        return both

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        directory = normalize_path(prefix)
        entries = await self._files.list(self._scope, directory)
        children = sorted({join_path(directory, e.name): e.kind for e in entries}.items())
        for path, kind in children:
            yield DirEntry(path, kind)

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        entry = await self._files.stat(self._scope, path)
        if entry is None:
            return MISSING if path != ROOT else FileInfo("directory")
        return FileInfo(entry.kind, size=entry.size, mtime_ns=entry.mtime_ns)

    async def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        directory = normalize_path(dir)
        plan = compile_glob(pattern)
        start = directory
        for segment in plan.literal_prefix:
            start = join_path(start, segment)
        if start != directory and (await self.stat(start)).kind != "directory":
            return
        depth = None if plan.max_depth is None else plan.max_depth - len(plan.literal_prefix)
        async with contextlib.aclosing(self._walk(start, depth)) as entries:
            async for entry in entries:
                if plan.match(relative_to(entry.path, directory)):
                    yield entry

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        return decode_contents(path, await self.read_bytes(path))

    async def read_bytes(self, path: str) -> bytes:
        """The file's exact bytes (``read`` decodes text, replacing what is not UTF-8); the
        etag is cached as ``read`` caches it."""
        path = normalize_path(path)
        try:
            found = await self._files.read(self._scope, path)
        except builtins.FileNotFoundError:
            self._etags.pop(path, None)  # it is gone: nothing left to compare against
            raise FileNotFoundError(path) from None
        self._etags[path] = found.etag
        return found.content

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = normalize_path(query.path)
        regex = compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        limit = query.max_results
        if limit is not None and limit <= 0:
            return
        file_filter = compile_grep_glob(query.glob)
        info = await self.stat(root)
        if info.kind == "file":
            if file_filter is None or file_filter(base_name(root)):
                for hit in await self._grep_file(root, regex, limit):
                    yield hit
            return
        if info.kind != "directory":
            return
        async with contextlib.aclosing(self._walk(root, None)) as entries:
            async for entry in entries:
                if entry.kind != "file":
                    continue
                if file_filter is not None and not file_filter(relative_to(entry.path, root)):
                    continue
                for hit in await self._grep_file(entry.path, regex, limit):
                    yield hit
                    if limit is not None:
                        limit -= 1
                        if limit <= 0:
                            return

    async def _grep_file(
        self, path: str, regex: re.Pattern[str], limit: int | None
    ) -> builtins.list[GrepResult]:
        if is_image_path(path):
            return []  # images are not searched
        try:
            data = await self.read_bytes(path)
        except builtins.FileNotFoundError:
            return []  # removed while we walked
        hits = [GrepResult(path, number, line) for number, line in grep_bytes(data, regex)]
        return hits if limit is None else hits[:limit]

    async def _walk(self, directory: str, max_depth: int | None) -> AsyncGenerator[DirEntry, None]:
        """Every entry beneath ``directory``, in path order (as ``vfs._walk.walk``), one listing
        per directory; iterative, so closing it early closes everything."""
        if max_depth is not None and max_depth <= 0:
            return
        stack = [iter(await self._keyed(directory, max_depth is None or max_depth > 1))]
        depths = [1]
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                depths.pop()
                continue
            entry, descend = item
            if not descend:
                yield entry
                continue
            depth = depths[-1] + 1
            deeper = max_depth is None or depth < max_depth
            stack.append(iter(await self._keyed(entry.path, deeper)))
            depths.append(depth)

    async def _keyed(self, directory: str, descend: bool) -> builtins.list[tuple[DirEntry, bool]]:
        """The children of ``directory`` in walk order: ``name``, then ``name-x``, then
        ``name/`` (the marker to descend into ``name``)."""
        keyed: builtins.list[tuple[str, DirEntry, bool]] = []
        for found in await self._files.list(self._scope, directory):
            entry = DirEntry(join_path(directory, found.name), found.kind)
            keyed.append((found.name, entry, False))
            if found.kind == "directory" and descend:
                keyed.append((found.name + "/", entry, True))
        keyed.sort(key=lambda item: item[0])
        return [(entry, descend) for _, entry, descend in keyed]

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        data = encode_contents(contents)
        if path == ROOT:
            raise IsADirectoryError(path)
        expected = self._etags.get(path)
        try:
            etag = await self._files.write(self._scope, path, data, if_match=expected)
        except WriteFailedError as error:
            # Lost a race (or the store failed): never overwrite silently. The store's errno
            # tells the two apart (S3HostFiles: ESTALE for a lost race, EIO for a failure).
            raise WriteFailedError(path, errno=error.errno) from None
        self._etags[path] = etag
        await self._observers.emit(path, "entry" if expected is None else "content")

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise DirectoryNotEmptyError(path)
        try:
            await self._files.delete(self._scope, path, if_match=self._etags.get(path))
        except builtins.FileNotFoundError:
            self._etags.pop(path, None)
            raise FileNotFoundError(path) from None
        except WriteFailedError as error:
            raise WriteFailedError(path, errno=error.errno) from None
        self._etags.pop(path, None)
        await self._observers.emit(path, "entry")

    async def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        normalize_path(query.path)
        return
        yield  # no index: an async generator that yields nothing


@dataclass(frozen=True, slots=True)
class _Stored:
    content: bytes
    etag: str
    mtime_ns: int


class InMemoryHostFiles:
    """A :class:`HostFilesApi` in a dict, honouring ``if_match``/``if_none_match``.

    ``InMemoryHostFiles({"/a.txt": "hello"}, scope="s")`` seeds scope ``s``. Etags are ``"1"``,
    ``"2"``, ... (a new one for every write, even of the same bytes). Call ``write``/``delete``
    directly to play another writer racing a :func:`host_fs`.
    """

    __slots__ = ("_counter", "_scopes")

    def __init__(
        self, files: Mapping[str, str | bytes] | None = None, *, scope: str = "default"
    ) -> None:
        self._scopes: dict[str, dict[str, _Stored]] = {}
        self._counter = itertools.count(1)
        for path, contents in (files or {}).items():
            self._put(scope, normalize_path(path), encode_contents(contents))

    def __repr__(self) -> str:
        return f"InMemoryHostFiles(<{sum(map(len, self._scopes.values()))} files>)"

    def _put(self, scope: str, path: str, content: bytes) -> str:
        etag = f'"{next(self._counter)}"'
        self._scopes.setdefault(scope, {})[path] = _Stored(content, etag, time.time_ns())
        return etag

    def _is_dir(self, files: dict[str, _Stored], path: str) -> bool:
        return path == ROOT or any(is_strictly_under(other, path) for other in files)

    async def list(self, scope: str, path: str) -> Sequence[HostEntry]:
        path = normalize_path(path)
        files = self._scopes.get(scope, {})
        depth = len(split_path(path))
        children: dict[str, HostEntry] = {}
        for other, stored in files.items():
            if not is_strictly_under(other, path):
                continue
            name = split_path(other)[depth]
            if join_path(path, name) == other:
                children[name] = HostEntry(
                    name, "file", len(stored.content), stored.mtime_ns, stored.etag
                )
            else:
                children.setdefault(name, HostEntry(name, "directory"))
        return [children[name] for name in sorted(children)]

    async def stat(self, scope: str, path: str) -> HostEntry | None:
        path = normalize_path(path)
        files = self._scopes.get(scope, {})
        stored = files.get(path)
        if stored is not None:
            return HostEntry(
                base_name(path), "file", len(stored.content), stored.mtime_ns, stored.etag
            )
        if self._is_dir(files, path):
            return HostEntry(base_name(path), "directory")
        return None

    async def read(self, scope: str, path: str) -> HostFile:
        path = normalize_path(path)
        files = self._scopes.get(scope, {})
        stored = files.get(path)
        if stored is None:
            if path != ROOT and self._is_dir(files, path):
                raise IsADirectoryError(path)
            raise FileNotFoundError(path)
        return HostFile(stored.content, stored.etag)

    async def write(
        self,
        scope: str,
        path: str,
        content: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        path = normalize_path(path)
        files = self._scopes.get(scope, {})
        if self._is_dir(files, path):
            raise IsADirectoryError(path)
        if any(ancestor in files for ancestor in _ancestors(path)):
            raise NotADirectoryError(path)
        current = files.get(path)
        if if_none_match and current is not None:
            raise WriteFailedError(path, errno=errno.EEXIST)
        if if_match is not None and (current is None or current.etag != if_match):
            raise WriteFailedError(path)
        return self._put(scope, path, bytes(content))

    async def delete(self, scope: str, path: str, *, if_match: str | None = None) -> None:
        path = normalize_path(path)
        files = self._scopes.get(scope, {})
        current = files.get(path)
        if current is None:
            if path != ROOT and self._is_dir(files, path):
                raise DirectoryNotEmptyError(path)  # derived directories are never empty
            raise FileNotFoundError(path)
        if if_match is not None and current.etag != if_match:
            raise WriteFailedError(path)
        del files[path]


def _ancestors(path: str) -> list[str]:
    segments = split_path(path)
    return ["/" + "/".join(segments[:i]) for i in range(1, len(segments))]
