"""``union_fs``: trees mounted at path prefixes of one namespace.

Theory of operation
-------------------
Each mount is a tree rooted at ``/`` placed at a prefix. A path belongs to the mount with the
longest prefix that covers it by whole segment (``/agent`` covers ``/agent/x``, not
``/agent-tools``): the union strips that prefix on the way in and adds it back to every path it
yields and every error it raises. Resolution walks the path's ancestors from the longest down to
``/`` against a dict of prefixes, so it costs a few dict lookups whatever the number of mounts,
and its answers are memoized (a mount serves the same paths over and over).
Everything that depends only on the mount table (the synthesized directories, which mounts lie
beneath which directory) is computed once, in the constructor.

Synthesized directories: every mount point and every ancestor of one is a directory of the union,
even where the covering tree has nothing (or a file) there. ``stat`` answers the covering tree's
own directory when it has one, else a directory owned by this process (mode ``0o755``). ``list``
adds the synthesized directories that are direct children of the listed path, and they win over
the covering tree's entry of the same name, because that name resolves to the deeper mount.

Walk verbs: ``list`` and ``glob`` merge sorted child streams (``merge_sorted``) and keep one entry
per path (``unique_by_path``); nothing is re-sorted. A child's entries that a deeper mount shadows
(the ``/tmp`` of an authored root under ``{"/": authored, "/tmp": scratch}``) never appear. ``glob``
with no mount beneath ``dir`` is the covering child's own ``glob``; otherwise it merges that glob
(shadowed paths dropped), the synthesized directories that match, and a pruned walk of each mount
beneath ``dir``. ``grep``/``search`` keep every hit: they fan out to the covering mount and to every
mount beneath the searched path, push ``max_results`` down to each, merge, and cap again; hits in
files that a deeper mount shadows are dropped (what ``read`` would not return is not reported),
with :func:`vfs._pushdown.refilled` keeping the pushdown exact.

Errors: a child's :class:`PathError` is re-raised with the union path (``error.with_path``), also
when it is raised lazily inside an iterator or by one of the child's open files (which the union
forwards whole, by :mod:`vfs._forward`'s table: they keep their capabilities, such as ``stat``). Other ``OSError``s whose ``filename`` is an absolute
path get that filename re-prefixed (in place). Anything else gets a best-effort rewrite of its
message (each absolute path in the text, one that no word, URL or number runs into, is moved
under the prefix: the model sees the union's namespace, as the contract asks) and a note naming
the mount. ``grep`` (an iterator, as every tree's) raises an invalid pattern at the first
iteration, never at the call.

POSIX: each operation goes to :func:`posix_view` of the covering mount (so an eight-verb child
still mounts). Where a mount lists reusing what a caller knows (:class:`vfs.ListsReusing`), the
union does too, through the covering mount's own (``list_info`` where it has none). A rename across mounts raises ``CrossMountError`` (``EXDEV``: ``mv`` then copies).
Mount points and the directories above them cannot be removed or renamed (``EBUSY``); ``mkdir``
of one is ``FileExistsError``. Creating an entry (``open`` with ``create``, ``mkdir``, ``symlink``,
``rename``) in a directory that exists only because a deeper mount lies beneath it first creates
that directory in the covering child, as ``write`` would, so what ``stat`` calls a directory also
takes new entries.

Changes: the first ``watch`` subscribes the union to every watchable child (once, for the life of
the union); a child's change is re-prefixed and forwarded with :meth:`Observers.notify`, keeping
its origin. Changes under a path a deeper mount shadows are dropped.

Checkpoints (:class:`vfs.Checkpoints`) are the tree mounted at ``/``'s, where it has them: the
union offers them and forwards them there, and the trees mounted elsewhere (the scratch ``/tmp``
of a turn root) are not checkpointed.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, NoReturn, TypeVar

from ._capabilities import (
    ListInfo,
    ListReusing,
    buffers_writes,
    list_info_of,
    list_reusing_of,
    make_link,
    make_node,
    unlink_keeping,
)
from ._clock import now_ns
from ._errors import (
    CrossMountError,
    DirectoryNotEmptyError,
    FileExistsError,
    IsADirectoryError,
    NoMountError,
    PathError,
)
from ._forward import TREE_VERBS, ForwardingFile, Verb, offer
from ._match import GlobPlan, compile_glob, compile_grep, compile_grep_glob
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
from ._paths import (
    ROOT,
    add_prefix,
    base_name,
    is_strictly_under,
    normalize_path,
    parent_path,
    relative_to,
    strip_prefix,
)
from ._posix_view import posix_view
from ._pushdown import refilled
from ._types import (
    MISSING,
    Change,
    ChangeCallback,
    Checkpoints,
    DirEntry,
    DirListing,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    NamedListing,
    OpenFile,
    PosixFileSystem,
    SearchQuery,
    SearchResult,
    Special,
    Watchable,
)
from ._walk import glob_start, walk
from ._watch import Observers

T = TypeVar("T")

_MEMO_SIZE = 4096  # resolved paths remembered per union


def union_fs(mounts: Mapping[str, FileSystem]) -> UnionFileSystem:
    """Compose ``mounts`` (prefix -> tree rooted at ``/``) into one namespace.

    Prefixes are normalized; two that normalize alike raise ``ValueError``. The result implements
    :class:`FileSystem`, :class:`PosixFileSystem` and :class:`Watchable`.
    """
    return UnionFileSystem(mounts)


@dataclass(frozen=True, slots=True, eq=False)
class _Mount:
    prefix: str
    fs: FileSystem
    view: PosixFileSystem
    nested: bool  # another mount lies strictly beneath this one
    list_info: ListInfo  # the view's own, or list + lstat
    list_reusing: ListReusing | None  # the view's own, if it has one


def _child_path(path: object) -> str:
    text = str(path) if path is not None else ""
    return text if text.startswith("/") else "/" + text


# An absolute path in running text: a "/" that no word, path, URL or number runs into.
_ABSOLUTE_PATH = re.compile(r"(?<![\w/.:~-])/[^\s'\"`,;()\[\]{}<>]*")


def _moved_text(text: str, prefix: str) -> str:
    """``text`` with each absolute path in it moved under ``prefix`` (best effort)."""
    return _ABSOLUTE_PATH.sub(lambda match: add_prefix(match.group(), prefix), text)


def _rethrow(error: Exception, prefix: str) -> NoReturn:
    """Raise ``error`` (a child's) as the union's: its path moved under ``prefix``."""
    if prefix != ROOT:
        if isinstance(error, PathError):
            moved = error.with_path(add_prefix(_child_path(error.path), prefix))
            raise moved.with_traceback(error.__traceback__) from None
        if isinstance(error, OSError) and isinstance(error.filename, str):
            if error.filename.startswith("/"):
                error.filename = add_prefix(error.filename, prefix)
                if isinstance(error.filename2, str) and error.filename2.startswith("/"):
                    error.filename2 = add_prefix(error.filename2, prefix)
        else:
            # Untyped: the message is the child's text; move the paths it names (best effort,
            # as the contract asks), and say which tree raised it.
            if isinstance(error, OSError):
                if isinstance(error.strerror, str):
                    error.strerror = _moved_text(error.strerror, prefix)
            elif error.args and isinstance(error.args[0], str):
                error.args = (_moved_text(error.args[0], prefix), *error.args[1:])
            add_note = getattr(error, "add_note", None)  # Python >= 3.11
            if add_note is not None:
                add_note(f"(raised by the tree mounted at {prefix})")
    raise error


CHECKPOINT_VERBS = tuple(verb for verb in TREE_VERBS if verb.protocol is Checkpoints)


def _to_root(verb: Verb) -> Callable[..., Any]:
    """The union's ``verb`` of :class:`vfs.Checkpoints`: the one of the tree at ``/``."""
    name = verb.name
    if verb.shape == "sync":

        def called(self: UnionFileSystem, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._by_prefix[ROOT].view, name)(*args, **kwargs)

        called.__name__ = called.__qualname__ = name
        return called

    async def forwarded(self: UnionFileSystem, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self._by_prefix[ROOT].view, name)(*args, **kwargs)

    forwarded.__name__ = forwarded.__qualname__ = name
    return forwarded


async def _guarded(prefix: str, awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except Exception as error:
        _rethrow(error, prefix)


def _move_entry(entry: DirEntry, prefix: str) -> DirEntry:
    return DirEntry(add_prefix(entry.path, prefix), entry.kind)


def _move_hit(hit: GrepResult, prefix: str) -> GrepResult:
    return GrepResult(add_prefix(hit.path, prefix), hit.line_number, hit.line)


def _move_result(result: SearchResult, prefix: str) -> SearchResult:
    return SearchResult(add_prefix(result.path, prefix), result.score, result.snippet)


async def _prefixed(
    source: AsyncIterator[T], prefix: str, move: Callable[[T, str], T]
) -> AsyncIterator[T]:
    """A child's stream with paths and errors moved under ``prefix``."""
    try:
        async for item in source:
            yield move(item, prefix)
    except Exception as error:
        _rethrow(error, prefix)
    finally:
        await aclose(source)


async def _directories(paths: Iterable[str]) -> AsyncIterator[DirEntry]:
    for path in paths:
        yield DirEntry(path, "directory")


async def _walk_literal(
    view: PosixFileSystem, segments: tuple[str, ...], depth: int | None
) -> AsyncIterator[DirEntry]:
    """The walk of a mounted tree from its root joined with a pattern's literal ``segments``,
    which must be real directories there (:func:`vfs._walk.glob_start`)."""
    start = await glob_start(view.lstat, ROOT, segments)
    if start is None:
        return
    async with aclosing(walk(view, start, depth)) as entries:
        async for entry in entries:
            yield entry


def _merged_unique(sources: list[AsyncIterator[DirEntry]]) -> AsyncIterator[DirEntry]:
    """One entry per path, the earlier source winning (``merge_sorted`` keeps source order)."""
    merged = merge_sorted(sources, path_key)
    return unique_by_path(merged)


async def _filtered(
    source: AsyncIterator[DirEntry], keep: Callable[[DirEntry], bool]
) -> AsyncIterator[DirEntry]:
    try:
        async for entry in source:
            if keep(entry):
                yield entry
    finally:
        await aclose(source)


class UnionFileSystem:
    """Trees mounted at prefixes (see the module docstring)."""

    __slots__ = (
        "_beneath",
        "_by_prefix",
        "_dirs",
        "_longest",
        "_memo",
        "_mounts",
        "_observers",
        "_subscribed",
        "_synth_children",
        "_synthesized",
        "buffers_writes",
    )

    def __init__(self, mounts: Mapping[str, FileSystem]) -> None:
        prefixes: dict[str, FileSystem] = {}
        for raw, fs in mounts.items():
            prefix = normalize_path(raw)
            if prefix in prefixes:
                raise ValueError(f"duplicate mount: {prefix}")
            prefixes[prefix] = fs
        views: dict[int, PosixFileSystem] = {}  # one view per tree mounted several times
        mounted: list[_Mount] = []
        for prefix, fs in prefixes.items():
            view = views.setdefault(id(fs), posix_view(fs))
            nested = any(is_strictly_under(other, prefix) for other in prefixes)
            mount = _Mount(prefix, fs, view, nested, list_info_of(view), list_reusing_of(view))
            mounted.append(mount)
        self._mounts: tuple[_Mount, ...] = tuple(mounted)
        # A handle of any child may buffer writes: then the mount must forward every FLUSH.
        self.buffers_writes = any(buffers_writes(mount.view) for mount in self._mounts)
        self._by_prefix = {mount.prefix: mount for mount in self._mounts}
        self._longest = max((len(prefix) for prefix in prefixes), default=0)
        self._memo: dict[str, _Mount | None] = {}
        # Synthesized directories: "/", the mount points and their ancestors.
        synthesized = {ROOT}
        children: dict[str, set[str]] = {}
        for prefix in prefixes:
            probe = prefix
            while probe != ROOT:
                synthesized.add(probe)
                children.setdefault(parent_path(probe), set()).add(probe)
                probe = parent_path(probe)
        self._synthesized = frozenset(synthesized)
        self._synth_children = {path: tuple(sorted(kids)) for path, kids in children.items()}
        self._beneath = {
            path: tuple(
                sorted(
                    (m for m in self._mounts if is_strictly_under(m.prefix, path)),
                    key=lambda m: m.prefix,
                )
            )
            for path in synthesized
        }
        now = now_ns()
        uid, gid = os.getuid(), os.getgid()
        self._dirs = {  # what stat answers for a synthesized directory the child does not hold
            path: FileInfo(
                "directory",
                mode=0o755,
                mtime_ns=now,
                uid=uid,
                gid=gid,
                atime_ns=now,
                ctime_ns=now,
                nlink=2 + len(self._synth_children.get(path, ())),
            )
            for path in synthesized
        }
        self._observers = Observers()
        self._subscribed = False
        offered: dict[str, Callable[..., Any]] = {}
        if any(mount.list_reusing is not None for mount in self._mounts):
            offered["list_info_reusing"] = UnionFileSystem._list_info_reusing
        root = self._by_prefix.get(ROOT)
        if root is not None and isinstance(root.view, Checkpoints):
            offered.update({verb.name: _to_root(verb) for verb in CHECKPOINT_VERBS})
        if offered:
            offer(self, offered)

    def __repr__(self) -> str:
        inner = ", ".join(f"{m.prefix!r}: {m.fs!r}" for m in self._mounts)
        return f"union_fs({{{inner}}})"

    @property
    def mounts(self) -> dict[str, FileSystem]:
        """The mount table, prefix -> tree, in priority order."""
        return {mount.prefix: mount.fs for mount in self._mounts}

    def mount_for(self, path: str) -> tuple[FileSystem, str] | None:
        """The tree mounted where ``path`` lies and the path inside it; ``None`` where no mount
        covers it, or for a directory only the mount table makes (a mount point or above one)."""
        path = normalize_path(path)
        mount = self._resolve(path)
        if mount is None or path in self._synthesized:
            return None
        return mount.fs, strip_prefix(path, mount.prefix)

    def _resolve(self, path: str) -> _Mount | None:
        """The mount covering a normalized path: the longest prefix, by whole segment.

        Answers are memoized (the mount table never changes); the memo is dropped when full.
        """
        try:
            return self._memo[path]
        except KeyError:
            pass
        get = self._by_prefix.get
        probe = path
        mount = None
        while True:
            if len(probe) <= self._longest:
                mount = get(probe)
                if mount is not None or probe == ROOT:
                    break
            elif probe == ROOT:
                break
            probe = probe[: probe.rindex("/")] or ROOT
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[path] = mount
        return mount

    def _covering(self, path: str) -> _Mount:
        mount = self._resolve(path)
        if mount is None:
            raise NoMountError(path)
        return mount

    def _busy(self, path: str) -> None:
        if path in self._by_prefix:
            raise PathError(path, errno=errno.EBUSY)

    def _stream(
        self, mount: _Mount, source: AsyncIterator[T], move: Callable[[T, str], T]
    ) -> AsyncIterator[T]:
        if mount.prefix == ROOT:
            return source
        return _prefixed(source, mount.prefix, move)

    # The eight verbs.

    # Iterator verbs are plain functions returning one stream (arguments are checked at the
    # call): every stream they build is closed by the one returned, never left to the GC.

    def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        mount = self._resolve(path)
        synthesized = _directories(self._synth_children.get(path, ()))
        if mount is None:
            return synthesized
        child = strip_prefix(path, mount.prefix)
        own = self._stream(mount, mount.view.list(child), _move_entry)
        if path not in self._synth_children:
            return own
        return _merged_unique([synthesized, own])

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        path = normalize_path(prefix)
        mount = self._resolve(path)
        synthesized = self._synth_children.get(path, ())
        listing: DirListing = []
        if mount is not None:
            child = strip_prefix(path, mount.prefix)
            listing = await _guarded(mount.prefix, mount.list_info(child))
            if mount.prefix != ROOT:
                listing = [(_move_entry(entry, mount.prefix), info) for entry, info in listing]
        if not synthesized:
            return listing
        # Synthesized directories win over the covering child's entries of the same name.
        merged = {entry.path: (entry, info) for entry, info in listing}
        for kid in synthesized:
            merged[kid] = (DirEntry(kid, "directory"), await self._stat(kid, follow=False))
        return [merged[kid] for kid in sorted(merged)]

    async def _list_info_reusing(self, prefix: str, known: Mapping[str, FileInfo]) -> NamedListing:
        """``list_info_reusing`` (:class:`vfs.ListsReusing`), offered where a mount has it:
        the covering mount's own (its ``list_info`` where it has none), with the synthesized
        directories as ``list_info`` adds them."""
        path = normalize_path(prefix)
        mount = self._resolve(path)
        named: NamedListing = []
        if mount is not None:
            child = strip_prefix(path, mount.prefix)
            if mount.list_reusing is not None:
                named = await _guarded(mount.prefix, mount.list_reusing(child, known))
            else:
                listing = await _guarded(mount.prefix, mount.list_info(child))
                named = [(base_name(entry.path), info) for entry, info in listing]
        synthesized = self._synth_children.get(path, ())
        if not synthesized:
            return named
        merged = dict(named)  # synthesized directories win, as in list_info
        for kid in synthesized:
            merged[base_name(kid)] = await self._stat(kid, follow=False)
        return sorted(merged.items())

    async def stat(self, path: str) -> FileInfo:
        return await self._stat(normalize_path(path), follow=True)

    async def _stat(self, path: str, *, follow: bool) -> FileInfo:
        mount = self._resolve(path)
        if mount is None:
            return self._dirs.get(path, MISSING)
        child = strip_prefix(path, mount.prefix)
        view = mount.view
        asked = view.stat(child) if follow else view.lstat(child)
        # A child mounted at / needs no error rewriting: skip the wrapper on this hot path.
        info = await (asked if mount.prefix == ROOT else _guarded(mount.prefix, asked))
        if path not in self._synthesized:
            return info
        if info.kind != "directory":
            return self._dirs[path]
        if info.nlink is not None:  # count the mount points the child does not hold
            extra = 0
            for kid in self._synth_children.get(path, ()):
                kid_info = await _guarded(mount.prefix, view.lstat(strip_prefix(kid, mount.prefix)))
                extra += kid_info.kind != "directory"
            if extra:
                info = replace(info, nlink=info.nlink + extra)
        return info

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        directory = normalize_path(dir)
        mount = self._resolve(directory)
        beneath = self._beneath.get(directory, ())
        if not beneath:
            if mount is None:
                return _directories(())
            child = strip_prefix(directory, mount.prefix)
            return self._stream(mount, mount.view.glob(pattern, child), _move_entry)
        plan = compile_glob(pattern)
        sources: list[AsyncIterator[DirEntry]] = []
        if mount is not None:
            child = strip_prefix(directory, mount.prefix)
            own = self._stream(mount, mount.view.glob(pattern, child), _move_entry)
            sources.append(self._owned(own, mount))
        matching = sorted(
            path
            for path in self._synthesized
            if is_strictly_under(path, directory) and plan.match(relative_to(path, directory))
        )
        sources.append(_directories(matching))
        sources.extend(self._glob_mount(other, plan, directory) for other in beneath)
        return _merged_unique(sources)

    def _owned(self, source: AsyncIterator[DirEntry], mount: _Mount) -> AsyncIterator[DirEntry]:
        """Entries of ``mount`` that are really its own (not shadowed, not synthesized)."""
        return _filtered(source, lambda entry: self._owns(mount, entry.path))

    def _glob_mount(self, mount: _Mount, plan: GlobPlan, directory: str) -> AsyncIterator[DirEntry]:
        """Entries strictly beneath ``mount``'s point matching ``plan`` relative to ``directory``."""
        steps = relative_to(mount.prefix, directory).split("/")
        literal = plan.literal_prefix
        shared = min(len(steps), len(literal))
        if tuple(steps[:shared]) != literal[:shared]:
            return _directories(())
        depth = None
        if plan.max_depth is not None:
            depth = plan.max_depth - max(len(steps), len(literal))
            if depth <= 0:
                return _directories(())
        walked = _walk_literal(mount.view, literal[len(steps) :], depth)
        source = self._stream(mount, walked, _move_entry)
        return _filtered(
            source,
            lambda entry: (
                self._owns(mount, entry.path) and plan.match(relative_to(entry.path, directory))
            ),
        )

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        mount = self._covering(path)
        if path in self._synthesized:
            raise IsADirectoryError(path)
        return await _guarded(mount.prefix, mount.view.read(strip_prefix(path, mount.prefix)))

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        return deferred(lambda: self._grep(query))

    def _grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        path = normalize_path(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=path)
        cap = query.max_results
        sources: list[AsyncIterator[GrepResult]] = []
        mount = self._resolve(path)
        beneath = self._beneath.get(path, ())
        if mount is not None:
            own = replace(query, path=strip_prefix(path, mount.prefix))
            sources.append(self._grep_mount(mount, own, bool(beneath), None, path))
        if beneath:
            pattern = query.glob
            # A glob with a slash is relative to the grep path: the children cannot apply it.
            with_slash = pattern is not None and "/" in pattern.strip("/")
            file_filter = compile_grep_glob(pattern) if with_slash else None
            for other in beneath:
                child = replace(query, path=ROOT, glob=None if with_slash else pattern)
                sources.append(self._grep_mount(other, child, other.nested, file_filter, path))
        merged = merge_sorted(sources, grep_key)
        return take(merged, cap)

    def _grep_mount(
        self,
        mount: _Mount,
        query: GrepQuery,
        shadowed: bool,
        file_filter: Callable[[str], bool] | None,
        root: str,
    ) -> AsyncIterator[GrepResult]:
        def run(limit: int | None) -> AsyncIterator[GrepResult]:
            source = mount.view.grep(replace(query, max_results=limit))
            return self._stream(mount, source, _move_hit)

        if not shadowed and file_filter is None:
            return run(query.max_results)

        async def keep(hit: GrepResult) -> bool:
            if shadowed and not self._owns(mount, hit.path):
                return False
            return file_filter is None or file_filter(relative_to(hit.path, root))

        return refilled(run, query.max_results, keep)

    def _owns(self, mount: _Mount, path: str) -> bool:
        return path not in self._synthesized and self._resolve(path) is mount

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        mount = self._covering(path)
        if path in self._synthesized:
            raise IsADirectoryError(path)
        child = strip_prefix(path, mount.prefix)
        await _guarded(mount.prefix, mount.view.write(child, contents))

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        mount = self._covering(path)
        self._busy(path)
        if path in self._synthesized:
            raise DirectoryNotEmptyError(path)
        await _guarded(mount.prefix, mount.view.delete(strip_prefix(path, mount.prefix)))

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        path = normalize_path(query.path)
        cap = query.max_results
        sources: list[AsyncIterator[SearchResult]] = []
        mount = self._resolve(path)
        beneath = self._beneath.get(path, ())
        if mount is not None:
            own = replace(query, path=strip_prefix(path, mount.prefix))
            sources.append(self._search_mount(mount, own, bool(beneath)))
        for other in beneath:
            sources.append(self._search_mount(other, replace(query, path=ROOT), other.nested))
        merged = merge_sorted(sources, search_key)
        return take(merged, cap)

    def _search_mount(
        self, mount: _Mount, query: SearchQuery, shadowed: bool
    ) -> AsyncIterator[SearchResult]:
        def run(limit: int | None) -> AsyncIterator[SearchResult]:
            source = mount.view.search(replace(query, max_results=limit))
            return self._stream(mount, source, _move_result)

        if not shadowed:
            return run(query.max_results)

        async def keep(result: SearchResult) -> bool:
            return self._owns(mount, result.path)

        return refilled(run, query.max_results, keep)

    # The POSIX extension.

    async def _new_name(self, path: str) -> tuple[_Mount, str]:
        """The mount and child path where ``path`` is about to be created (mkdir, symlink): a
        mount point or its ancestor already exists, and the parent is made in the child first."""
        if path in self._synthesized:
            raise FileExistsError(path)
        mount = self._covering(path)
        await self._ensure_parent(mount, path)
        return mount, strip_prefix(path, mount.prefix)

    async def _ensure_parent(self, mount: _Mount, path: str) -> None:
        """Before creating ``path``: a parent that only the mount table makes a directory (it
        holds a deeper mount) is created in the covering child, as ``write`` would, so that what
        ``stat`` shows as a directory also takes new entries."""
        parent = parent_path(path)
        if parent not in self._synthesized or not is_strictly_under(parent, mount.prefix):
            return
        view = mount.view
        missing: list[str] = []
        probe = strip_prefix(parent, mount.prefix)
        while probe != ROOT:
            kind = (await _guarded(mount.prefix, view.stat(probe))).kind
            if kind != "missing":
                break  # present (or a file, which the create then reports)
            missing.append(probe)
            probe = parent_path(probe)
        for directory in reversed(missing):
            await _guarded(mount.prefix, view.mkdir(directory))

    async def lstat(self, path: str) -> FileInfo:
        return await self._stat(normalize_path(path), follow=False)

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
        mount = self._covering(path)
        if path in self._synthesized:
            raise IsADirectoryError(path)
        if create:
            await self._ensure_parent(mount, path)
        opened = mount.view.open(
            strip_prefix(path, mount.prefix),
            write=write,
            create=create,
            exclusive=exclusive,
            truncate=truncate,
            mode=mode,
            uid=uid,
            gid=gid,
        )
        handle = await _guarded(mount.prefix, opened)
        return handle if mount.prefix == ROOT else _PrefixedFile(handle, mount.prefix)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        mount, child = await self._new_name(normalize_path(path))
        await _guarded(mount.prefix, mount.view.mkdir(child, mode, uid=uid, gid=gid))

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        self._busy(path)
        if path in self._synthesized:
            raise DirectoryNotEmptyError(path)
        mount = self._covering(path)
        await _guarded(mount.prefix, mount.view.rmdir(strip_prefix(path, mount.prefix)))

    async def unlink(self, path: str) -> None:
        path = normalize_path(path)
        self._busy(path)
        if path in self._synthesized:
            raise IsADirectoryError(path)
        mount = self._covering(path)
        await _guarded(mount.prefix, mount.view.unlink(strip_prefix(path, mount.prefix)))

    async def unlink_keeping(self, path: str, *, write: bool = False) -> OpenFile | None:
        """:meth:`unlink` answering an open file of what the name held (see
        :class:`vfs.lowlevel.UnlinksKeeping`), from the covering mount in one call where it
        can."""
        path = normalize_path(path)
        self._busy(path)
        if path in self._synthesized:
            raise IsADirectoryError(path)
        mount = self._covering(path)
        child = strip_prefix(path, mount.prefix)
        kept = await _guarded(mount.prefix, unlink_keeping(mount.view, child, write=write))
        return kept if kept is None or mount.prefix == ROOT else _PrefixedFile(kept, mount.prefix)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        for path in (src, dst):
            if path in self._synthesized:
                raise PathError(path, errno=errno.EBUSY)  # a mount point, or holds one
        mount = self._covering(src)
        if self._covering(dst) is not mount:
            raise CrossMountError(src)
        await self._ensure_parent(mount, dst)
        renamed = mount.view.rename(
            strip_prefix(src, mount.prefix),
            strip_prefix(dst, mount.prefix),
            noreplace=noreplace,
            exchange=exchange,
        )
        await _guarded(mount.prefix, renamed)

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
        path = normalize_path(path)
        if path in self._synthesized:
            info = await self._stat(path, follow=False)
            if info is self._dirs[path]:  # nothing behind it to change: accepted and ignored
                if size is not None:
                    raise IsADirectoryError(path)
                return info
        mount = self._covering(path)
        changed = mount.view.setattr(
            strip_prefix(path, mount.prefix),
            size=size,
            mode=mode,
            uid=uid,
            gid=gid,
            atime_ns=atime_ns,
            mtime_ns=mtime_ns,
        )
        return await _guarded(mount.prefix, changed)

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        mount, child = await self._new_name(normalize_path(path))
        await _guarded(mount.prefix, mount.view.symlink(child, target, uid=uid, gid=gid))

    async def mknod(
        self,
        path: str,
        special: Special,
        *,
        mode: int = 0o644,
        rdev: int = 0,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        mount, child = await self._new_name(normalize_path(path))
        made = make_node(mount.view, child, special, mode=mode, rdev=rdev, uid=uid, gid=gid)
        await _guarded(mount.prefix, made)

    async def link(self, src: str, dst: str) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        if src in self._synthesized:
            raise PathError(src, errno=errno.EPERM)  # a directory: no hard links to those
        mount = self._covering(src)
        if self._covering(dst) is not mount:
            raise PathError(src, errno=errno.EXDEV)  # as link(2) across file systems
        _, child = await self._new_name(dst)
        linked = make_link(mount.view, strip_prefix(src, mount.prefix), child)
        await _guarded(mount.prefix, linked)

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        if path in self._synthesized:
            raise PathError(path, errno=errno.EINVAL)
        mount = self._covering(path)
        return await _guarded(mount.prefix, mount.view.readlink(strip_prefix(path, mount.prefix)))

    # Changes.

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        if not self._subscribed:
            self._subscribed = True
            for mount in self._mounts:
                if isinstance(mount.view, Watchable):
                    mount.view.watch(self._forwarder(mount))
        return self._observers.subscribe(callback)

    def _forwarder(self, mount: _Mount) -> ChangeCallback:
        def forward(change: Change) -> Awaitable[None] | None:
            path = add_prefix(change.path, mount.prefix)
            if self._resolve(path) is not mount:
                return None  # a deeper mount shadows it
            return self._observers.notify(Change(path, change.kind, change.origin))

        return forward


class _PrefixedFile(ForwardingFile):
    """An open file of a child mounted below ``/``: every call forwarded, its errors naming
    union paths; it has the capabilities of the child's file (``stat``)."""

    __slots__ = ("_prefix",)

    def __init__(self, file: OpenFile, prefix: str) -> None:
        self._prefix = prefix
        self._forward_to(file)

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        try:
            return await verb.call(self._inner, args)
        except Exception as error:
            _rethrow(error, self._prefix)
