"""``overlay_fs``: read-only layers of one namespace, earlier layers winning.

Theory of operation
-------------------
Every layer is a tree rooted at the same ``/``. For a path, the first layer that has something
there wins: ``stat``/``lstat`` answer the first answer that is not missing, ``read`` the first layer
that has the file (a ``FileNotFoundError`` means "try the next layer"), ``open`` and ``readlink``
are served by the winning layer. The overlay never writes: ``write``, ``delete`` and every POSIX
change raise ``ReadOnlyMountError``, and open handles refuse writes.

``list`` merges the layers' listings (unique by path, the earlier layer's entry winning), except
that a layer holding the listed path as a non-directory hides the later layers' children there.
Walks go through ``list``, so a file in an earlier layer hides a whole directory of a later one
from ``glob`` (``glob_tree`` over the overlay itself). ``stat``/``read`` of a full path do not look
at ancestors (that would cost a ``stat`` per ancestor and layer); through a mount the kernel
resolves paths one segment at a time, so it never asks for a path beneath a file.

``grep``/``search`` report only what ``read`` would return: each layer's native grep runs with the
cap pushed down, and a hit from a later layer is dropped when an earlier layer has something at that
path (one ``stat`` per earlier layer and hit file); :func:`vfs._pushdown.refilled` keeps the
pushdown exact despite the dropped hits. Results are merged lazily and capped again.

Failure isolation: a layer that is down costs only its own files: it is skipped for that call,
and the error is logged at debug level. Down means the layer raised something that is not an
answer (:func:`vfs._errors.is_answer`): anything but a :class:`PathError` (an ``OSError`` or
``RuntimeError`` from a backend), and a :class:`PathError` whose errno says the tree could not
answer at all (``EIO``, ``ENOTCONN``, ``ETIMEDOUT``... as ``S3HostFiles`` reports a store it
cannot reach). ``stat``, ``lstat``, ``read``, ``grep`` and ``search`` raise only when no layer
served (then the first layer's error); ``list`` and ``glob`` never raise. Other
:class:`PathError`s are answers and propagate (an invalid grep pattern, ``IsADirectoryError``
from the winning layer).

Changes: the first ``watch`` subscribes to every watchable layer and forwards its changes as they
are (a change hidden by an earlier layer is forwarded too; over-invalidation is harmless).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NoReturn, TypeVar

from ._capabilities import list_info_of
from ._errors import FileNotFoundError, ReadOnlyMountError, is_answer
from ._forward import ForwardingFile, Verb
from ._match import compile_grep
from ._merge import (
    aclose,
    deferred,
    grep_key,
    merge_sorted,
    path_key,
    search_key,
    take,
    unique_by_path,
)
from ._paths import ROOT, normalize_path
from ._posix_view import posix_view
from ._pushdown import refilled
from ._types import (
    MISSING,
    Change,
    ChangeCallback,
    DirEntry,
    DirListing,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    OpenFile,
    SearchQuery,
    SearchResult,
    Watchable,
)
from ._walk import glob_tree
from ._watch import Observers

T = TypeVar("T")

_log = logging.getLogger("vfs.overlay")


def overlay_fs(layers: Sequence[FileSystem]) -> OverlayFileSystem:
    """A read-only overlay of ``layers`` (at least one), the earlier layers winning.

    The result implements :class:`FileSystem`, :class:`PosixFileSystem` and :class:`Watchable`.
    """
    return OverlayFileSystem(layers)


def _skip(index: int, error: Exception) -> None:
    _log.debug("overlay layer %d failed, skipped: %r", index, error, exc_info=error)


class _Failures:
    """The failures of one call, by layer; raised when every layer failed."""

    __slots__ = ("errors", "layers")

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.errors: dict[int, Exception] = {}

    def add(self, index: int, error: Exception) -> None:
        _skip(index, error)
        self.errors.setdefault(index, error)

    def raise_if_all_failed(self) -> None:
        if self.errors and len(self.errors) == self.layers:
            raise self.errors[min(self.errors)]


async def _tolerant(
    index: int,
    start: Callable[[], AsyncIterator[T]],
    failures: _Failures | None,
) -> AsyncIterator[T]:
    """A layer's stream that ends (instead of raising) when the layer fails.

    With ``failures`` (grep, search), an answer (:func:`vfs._errors.is_answer`) propagates and
    other errors are recorded; without (list, glob), every error just ends the layer's stream.
    """
    try:
        source = start()
    except Exception as error:
        if failures is not None and is_answer(error):
            raise
        if failures is not None:
            failures.add(index, error)
        else:
            _skip(index, error)
        return
    try:
        async for item in source:
            yield item
    except Exception as error:
        if failures is not None and is_answer(error):
            raise
        if failures is not None:
            failures.add(index, error)
        else:
            _skip(index, error)
    finally:
        await aclose(source)


async def _served(
    sources: list[AsyncIterator[T]],
    key: Callable[[T], Any],
    cap: int | None,
    failures: _Failures,
) -> AsyncIterator[T]:
    """The capped merge; at its end, the first layer's error when no layer served."""
    merged = merge_sorted(sources, key)
    capped = take(merged, cap)
    try:
        async for item in capped:
            yield item
    finally:
        await aclose(capped)
        await aclose(merged)
        for source in sources:
            await aclose(source)
    failures.raise_if_all_failed()


class OverlayFileSystem:
    """Read-only layers, earlier winning (see the module docstring)."""

    __slots__ = ("_layers", "_list_infos", "_observers", "_subscribed", "_views")

    # Read-only: handles never hold written bytes.
    buffers_writes = False

    def __init__(self, layers: Sequence[FileSystem]) -> None:
        if not layers:
            raise ValueError("overlay_fs needs at least one layer")
        self._layers = tuple(layers)
        self._views = tuple(posix_view(layer) for layer in self._layers)
        self._list_infos = tuple(list_info_of(view) for view in self._views)
        self._observers = Observers()
        self._subscribed = False

    def __repr__(self) -> str:
        return f"overlay_fs({list(self._layers)!r})"

    @property
    def layers(self) -> tuple[FileSystem, ...]:
        return self._layers

    async def _quiet_stat(self, index: int, path: str) -> FileInfo:
        """A layer's ``stat`` where any error means "nothing here" (hiding decisions)."""
        try:
            return await self._layers[index].stat(path)
        except Exception as error:
            _skip(index, error)
            return MISSING

    async def _first(self, path: str, *, follow: bool) -> tuple[int, FileInfo]:
        """The winning layer and its answer; ``(-1, MISSING)`` when no layer has the path."""
        failures = _Failures(len(self._layers))
        for index, view in enumerate(self._views):
            try:
                info = await (view.stat(path) if follow else view.lstat(path))
            except Exception as error:
                if is_answer(error):
                    raise
                failures.add(index, error)
                continue
            if info.exists:
                return index, info
        failures.raise_if_all_failed()
        return -1, MISSING

    def _read_only(self, path: str) -> NoReturn:
        raise ReadOnlyMountError(normalize_path(path))

    # The eight verbs.

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        sources: list[AsyncIterator[DirEntry]] = []
        last = len(self._layers) - 1
        for index, layer in enumerate(self._layers):
            sources.append(_tolerant(index, partial(layer.list, path), None))
            if index == last or path == ROOT:
                continue
            if (await self._quiet_stat(index, path)).kind not in ("missing", "directory"):
                break  # a file here hides the later layers' directory
        merged = merge_sorted(sources, path_key)
        unique = unique_by_path(merged)
        try:
            async for entry in unique:
                yield entry
        finally:
            await aclose(unique)
            await aclose(merged)
            for source in sources:
                await aclose(source)

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        """``list`` with each entry's ``lstat``: the layers' listings merged as ``list`` merges
        them (the earliest layer holding a name answers for it, as ``lstat`` picks it)."""
        path = normalize_path(prefix)
        found: dict[str, tuple[DirEntry, FileInfo, int]] = {}
        last = len(self._layers) - 1
        for index, list_info in enumerate(self._list_infos):
            try:
                listing = await list_info(path)
            except Exception as error:  # a failing layer costs only its own entries, as in list
                _skip(index, error)
                listing = []
            for entry, info in listing:
                if entry.path not in found:
                    found[entry.path] = (entry, info, index)
            if index == last or path == ROOT:
                continue
            if (await self._quiet_stat(index, path)).kind not in ("missing", "directory"):
                break  # a file here hides the later layers' directory
        merged: DirListing = []
        for key in sorted(found):
            entry, info, index = found[key]
            merged.append((entry, await self._linked(key, index, info)))
        return merged

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        return await self._linked(path, *await self._first(path, follow=True))

    async def _linked(self, path: str, index: int, info: FileInfo) -> FileInfo:
        """A directory's link count over the merged listing (2 + its subdirectories)."""
        if info.kind != "directory" or index == len(self._layers) - 1:
            return info
        subdirs = 0
        async for entry in self.list(path):
            subdirs += entry.kind == "directory"
        return replace(info, nlink=2 + subdirs)

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        return glob_tree(self, pattern, dir)

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        failures = _Failures(len(self._layers))
        for index, layer in enumerate(self._layers):
            try:
                return await layer.read(path)
            except builtins.FileNotFoundError:
                continue
            except Exception as error:
                if is_answer(error):
                    raise
                failures.add(index, error)
        if failures.errors:
            raise failures.errors[min(failures.errors)]
        raise FileNotFoundError(path)

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        return deferred(lambda: self._grep(query))

    def _grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        path = normalize_path(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=path)
        query = replace(query, path=path)
        failures = _Failures(len(self._layers))

        def runner(layer: FileSystem) -> Callable[[int | None], AsyncIterator[GrepResult]]:
            return lambda limit: layer.grep(replace(query, max_results=limit))

        sources = [
            self._layer_stream(index, runner(layer), query.max_results, failures)
            for index, layer in enumerate(self._layers)
        ]
        return _served(sources, grep_key, query.max_results, failures)

    def _layer_stream(
        self,
        index: int,
        run: Callable[[int | None], AsyncIterator[T]],
        cap: int | None,
        failures: _Failures,
    ) -> AsyncIterator[T]:
        """Layer ``index``'s hits in files no earlier layer has, with ``cap`` pushed down."""
        if index == 0:
            return _tolerant(index, lambda: run(cap), failures)
        last: list[object] = [None, False]  # hits arrive grouped by file: remember the last one

        async def keep(item: T) -> bool:
            path: str = item.path  # type: ignore[attr-defined]
            if last[0] != path:
                last[0] = path
                last[1] = await self._unclaimed(path, index)
            return bool(last[1])

        return _tolerant(index, lambda: refilled(run, cap, keep), failures)

    async def _unclaimed(self, path: str, index: int) -> bool:
        """No layer before ``index`` has anything at ``path``."""
        for earlier in range(index):
            if (await self._quiet_stat(earlier, path)).exists:
                return False
        return True

    async def write(self, path: str, contents: str | bytes) -> None:
        self._read_only(path)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if (await self._first(path, follow=False))[0] < 0:
            raise FileNotFoundError(path)  # nothing to refuse: the contract's answer is "missing"
        self._read_only(path)

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        query = replace(query, path=normalize_path(query.path))
        failures = _Failures(len(self._layers))

        def runner(layer: FileSystem) -> Callable[[int | None], AsyncIterator[SearchResult]]:
            return lambda limit: layer.search(replace(query, max_results=limit))

        sources = [
            self._layer_stream(index, runner(layer), query.max_results, failures)
            for index, layer in enumerate(self._layers)
        ]
        return _served(sources, search_key, query.max_results, failures)

    # The POSIX extension.

    async def lstat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        return await self._linked(path, *await self._first(path, follow=False))

    async def open(
        self,
        path: str,
        *,
        write: bool = False,
        create: bool = False,
        exclusive: bool = False,
        truncate: bool = False,
        mode: int = 0o644,
        uid: int | None = None,
        gid: int | None = None,
    ) -> OpenFile:
        path = normalize_path(path)
        if write or create or truncate:
            raise ReadOnlyMountError(path)
        index, _ = await self._first(path, follow=True)
        if index < 0:
            raise FileNotFoundError(path)
        return _ReadOnlyFile(await self._views[index].open(path), path)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        self._read_only(path)

    async def rmdir(self, path: str) -> None:
        self._read_only(path)

    async def unlink(self, path: str) -> None:
        self._read_only(path)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        self._read_only(src)

    async def setattr(
        self,
        path: str,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
    ) -> FileInfo:
        if (size, mode, uid, gid, atime_ns, mtime_ns) != (None,) * 6:
            self._read_only(path)
        path = normalize_path(path)
        info = await self.lstat(path)
        if not info.exists:
            raise FileNotFoundError(path)
        return info

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        self._read_only(path)

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        index, _ = await self._first(path, follow=False)
        if index < 0:
            raise FileNotFoundError(path)
        return await self._views[index].readlink(path)

    # Changes.

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        if not self._subscribed:
            self._subscribed = True
            for layer in self._layers:
                if isinstance(layer, Watchable):
                    layer.watch(self._forward)
        return self._observers.subscribe(callback)

    def _forward(self, change: Change) -> Awaitable[None] | None:
        return self._observers.notify(change)


class _ReadOnlyFile(ForwardingFile):
    """A handle of the winning layer that refuses writes; it has the capabilities of the
    layer's file (``stat``)."""

    __slots__ = ("_path",)

    def __init__(self, file: OpenFile, path: str) -> None:
        self._path = path
        self._forward_to(file)

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        if verb.changing:
            raise ReadOnlyMountError(self._path)
        if verb.kind == "syncs":
            return None  # nothing to write back: the handle never changes the file
        return await verb.call(self._inner, args)
