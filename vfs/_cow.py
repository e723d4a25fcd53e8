"""``cow_fs``: a writable copy-on-write tree over any lower tree, which it never writes.

Theory of operation
-------------------
Two trees and a record. The *upper* (``temp_fs()`` by default; a ``dir_fs`` makes it durable)
holds everything written through this tree; the *lower* shows through wherever the upper holds
nothing, unless the record (:class:`vfs._cow_meta.CowMeta`) hides it: a hidden path with nothing
above it is a whiteout, a hidden path under an upper directory is an opaque directory. Whiteouts
are never files in the upper; the record lives in memory and, when the upper was given (a
durable one), in the upper under the reserved name ``/.agentroot-cow`` (``meta.json``, written to a
temporary name and renamed over, plus ``stage/`` for copies in progress). That name is never shown
through this tree (in either layer) and cannot be created through it (``PermissionDeniedError``).

Resolution. Every path is resolved in the merged view, one segment at a time, so a symlink in
either layer leads wherever the merged view says (chroot semantics, as ``temp_fs``). Segments are
answered by :meth:`CowFileSystem._direct`: the upper's entry if it has one, else the lower's
unless hidden. Directories already known to be real merged directories are remembered (a set,
cleared when a directory is removed or renamed, or the lower reports an entry change), so the
common path costs one ``lstat`` per layer, as a plain overlay would. Three more sets, cleared
with it, spare the layer calls whose answer this tree already knows: the upper directories it
made or found (a new entry's parents need no ``lstat``); the paths the upper was found not to
hold (only this tree makes directories there, and forgets the path when it does: nothing beneath
is looked up in the upper, as for the lower files of a ``rm -rf``); and the directories it made
where the lower had nothing (nothing beneath them is looked up in the lower: a name made there
later on the host shows once the sets are cleared, as a lower directory removed on the host
stays known above).

Copy-up happens on the first change only: ``open(write=True)``, ``truncate``, ``write``,
``setattr`` (mode, owner, size; and times of directories and symlinks), and renames. A read-only
``open`` reads the lower directly and never copies. New times for a lower file alone are not a
copy-up: they are recorded (``CowMeta.times``) and shown over the lower's while that file is
unchanged, because git "freshens" every object and pack it would write again with ``utime``, and
copying a repository's packs up for that costs their size (in memory, by default) and their
time. A copy is built under ``stage/`` (bytes, mode, owner where permitted, times) and renamed
into place, with the upper's parents created first as copies of the lower's directories.
Read-only handles open on a lower file switch to the upper copy when it is made, so they see
later writes, as one file would. A copy-up changes nothing visible, so its notifications are
muted (a mount keeps its inode and caches); the same holds for the record's own writes.

Atomicity. Mutations hold one lock (per event loop), so they never interleave with each other.
Readers take no lock: each mutation does its preparation first (copy-ups and record changes that
change nothing visible) and then makes its visible change in one step (one upper operation, or one
in-memory record change), so a reader sees the state before or after, never between. Directory
rename is the costly case: the source's lower-only entries are copied up in full, the source is
made opaque, and then one upper ``rename`` moves it (never ``EXDEV``; the cost is a copy of the
subtree's lower files, which a repository's directory renames keep small). ``O_EXCL`` create,
``mkdir`` and ``rename(noreplace)`` check the merged view under the lock, so lock-file protocols
behave as on one filesystem.

Reads go to the winning layer: ``stat``/``lstat``/``read``/``readlink``/``open`` of an unmodified
file never touch the upper beyond one ``lstat``. ``list`` (and ``list_info``, and
``list_info_reusing`` where a layer has it, from each layer's own) merges both layers' listings
(upper wins, hidden names and the reserved name dropped). ``glob`` walks the merged view (``glob_tree``);
``grep`` and ``search`` run each layer natively (``max_results`` pushed down) and drop lower hits
that the upper or a whiteout shadows (:func:`vfs._pushdown.refilled` keeps the pushdown exact).

Changes: the cow reports what it changes itself (whiteouts of lower entries), forwards the
upper's changes (except muted ones and the reserved name), and forwards the lower's changes
unless a whiteout hides them (a lower change under an unmodified path shows through).

Changes as data (``changes``, ``diff``, ``apply``) live in ``vfs._cow_changes``. Checkpoints
(:class:`vfs.Checkpoints`, offered per instance) live in ``vfs._cow_checkpoints`` over a
``temp_fs`` upper and in ``vfs._cow_durable`` over any other given upper, which needs every
upper change noted (``_from_upper`` does, muted copy-ups too).
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import errno
import hashlib
import itertools
import json
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from ._capabilities import (
    buffers_writes,
    list_info_of,
    list_reusing_of,
    make_link,
    make_node,
    unlink_keeping,
)
from ._checkpoints import History, RewindHooks
from ._clock import now_ns
from ._content import encode_contents
from ._cow_durable import Durable
from ._cow_meta import META_PATH, RESERVED, CowMeta, Stamp, Touched, TreeChange
from ._errors import (
    DirectoryNotEmptyError,
    FileExistsError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PathError,
    PermissionDeniedError,
)
from ._forward import ForwardingFile, Verb, offer
from ._match import compile_grep
from ._merge import aclose, grep_key, merge_sorted, search_key, take
from ._paths import (
    ROOT,
    base_name,
    is_under,
    join_path,
    normalize_path,
    parent_path,
    split_path,
)
from ._posix_view import posix_view
from ._pushdown import refilled
from ._resolve import drive, resolution
from ._temp import TempFileSystem, temp_fs
from ._types import (
    MISSING,
    Change,
    ChangeCallback,
    Checkpoint,
    DirEntry,
    DirListing,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    Kind,
    NamedListing,
    OpenFile,
    PosixFileSystem,
    RewindHook,
    SearchQuery,
    SearchResult,
    Special,
    Watchable,
    with_ino,
)
from ._walk import glob_tree, grep_tree
from ._watch import Observers

RESERVED_NAME = RESERVED[1:]
_META_TEMP = RESERVED + "/meta.json.tmp"
_JOURNAL = RESERVED + "/meta.journal."  # + the record's "journal" number
_JOURNAL_MIN = 1 << 16  # a journal may grow to the record's size, or this, before a rewrite
_ABSENT_AT_MOST = 1 << 16  # paths remembered as missing from the upper, before starting over
_STAGE = RESERVED + "/stage"
_CHUNK = 1 << 20

if TYPE_CHECKING:
    from ._cow_checkpoints import CowState

_UPPER = 0
_LOWER = 1

_Hit = TypeVar("_Hit", GrepResult, SearchResult)

# The tree whose notifications are muted in this context (its copy-ups and record writes).
_muted: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "vfs_cow_muted", default=None
)


@dataclass(frozen=True, slots=True)
class _Found:
    """A resolved path: ``path`` has no symlink in it; ``layer`` is ``None`` when missing."""

    path: str
    info: FileInfo
    layer: int | None


def cow_fs(lower: FileSystem, upper: FileSystem | None = None) -> CowFileSystem:
    """A writable copy-on-write tree over ``lower``, which is never written.

    ``upper`` holds the changes: an in-memory ``temp_fs()`` by default. A given upper (e.g. a
    ``dir_fs`` of an empty directory) also keeps the whiteouts and bases, so a later
    ``cow_fs(lower, upper)`` over the same two trees continues where this one stopped. The result
    implements :class:`FileSystem`, :class:`PosixFileSystem` and :class:`Watchable`, and
    ``changes()``, ``diff()`` and ``apply()``.
    """
    return CowFileSystem(lower, upper)


class CowFileSystem:
    """Copy-on-write over a lower tree (see the module docstring)."""

    __slots__ = (
        "_counter",
        "_dirs",
        "_durable",
        "_epoch",
        "_generation",
        "_history",
        "_journal",
        "_journal_held",
        "_journal_size",
        "_lock_var",
        "_lower",
        "_lower_absent",
        "_lower_files",
        "_lower_tree",
        "_meta",
        "_observers",
        "_persist",
        "_ready",
        "_rewind_hooks",
        "_saved",
        "_staged",
        "_upper",
        "_upper_absent",
        "_upper_dirs",
        "_upper_numbers",
        "_upper_tree",
    )

    def __init__(
        self, lower: FileSystem, upper: FileSystem | None = None, *, subscribe: bool = True
    ) -> None:
        self._lower_tree = lower
        self._upper_tree: FileSystem = temp_fs() if upper is None else upper
        self._lower = posix_view(lower)
        self._upper = posix_view(self._upper_tree)
        self._persist = upper is not None
        # When durable: the size of the record the upper holds (None: none yet), the number of
        # the journal beside it and that journal's size.
        self._saved: int | None = None
        self._journal = 0
        self._journal_size = 0
        self._journal_held: tuple[int, OpenFile] | None = None
        self._meta = CowMeta()
        self._observers = Observers()
        self._dirs: set[str] = set()  # real merged directories, symlink-free (see docstring)
        self._upper_dirs: set[str] = set()  # real paths known to be directories of the upper
        self._upper_absent: set[str] = set()  # real paths the upper was found not to hold
        self._lower_absent: set[str] = set()  # real directories made where the lower had none
        self._generation = 0  # bumped whenever _dirs is cleared
        self._lock_var: anyio.lowlevel.RunVar[anyio.Lock] = anyio.lowlevel.RunVar(
            f"vfs_cow_lock_{id(self)}"
        )
        self._ready = False
        self._staged = False
        self._counter = itertools.count()
        self._lower_files: dict[str, set[_LowerFile]] = {}  # path -> read handles on the lower
        self._epoch = 0  # bumped whenever a lower path is copied up or replaced (see open)
        self._upper_numbers: bool | None = None  # whether the upper's entries show inode numbers
        if subscribe and isinstance(self._lower, Watchable):
            self._lower.watch(self._from_lower)
        if subscribe and isinstance(self._upper, Watchable):
            self._upper.watch(self._from_upper)
        self._history: History[CowState] = History()
        self._rewind_hooks = RewindHooks()
        offered: dict[str, Callable[..., Any]] = {}
        if list_reusing_of(self._lower) or list_reusing_of(self._upper):
            offered["list_info_reusing"] = CowFileSystem._list_info_reusing
        self._durable: Durable | None = None
        if isinstance(self._upper_tree, TempFileSystem):
            offered.update(_CHECKPOINT_VERBS)
        elif self._persist:
            self._durable = Durable()
            offered.update(_DURABLE_VERBS)
        if offered:
            offer(self, offered)

    @classmethod
    def _of_state(
        cls,
        lower: FileSystem,
        upper: FileSystem,
        meta: CowMeta,
        *,
        persist: bool = False,
        subscribe: bool = True,
    ) -> CowFileSystem:
        """A cow over ``lower`` whose upper and record are these already (a checkpoint's: a fork,
        or a read-only view of it, which subscribes to nothing)."""
        cow = cls(lower, upper, subscribe=subscribe)
        cow._meta = meta
        cow._persist = persist
        cow._ready = True
        return cow

    def __repr__(self) -> str:
        return f"cow_fs({self._lower_tree!r}, {self._upper_tree!r})"

    @property
    def lower(self) -> FileSystem:
        return self._lower_tree

    @property
    def upper(self) -> FileSystem:
        return self._upper_tree

    @property
    def meta(self) -> CowMeta:
        """The whiteouts, bases and origins (read-only use: tests and diagnostics)."""
        return self._meta

    # -- housekeeping -----------------------------------------------------------------------

    def _lock(self) -> anyio.Lock:
        try:
            return self._lock_var.get()
        except LookupError:
            # No checkpoint when the lock is free, the usual case: every change through a mount
            # of this tree takes it, and a checkpoint is a round of the event loop each.
            lock = anyio.Lock(fast_acquire=True)
            self._lock_var.set(lock)
            return lock

    async def _prepare(self) -> None:
        """Load the record of a durable upper (or start one) and clear abandoned copies."""
        async with self._lock():
            if self._ready:
                return
            with self._quietly():
                loaded = False
                if self._persist and (await self._upper.lstat(META_PATH)).kind == "file":
                    await self._load_record()
                    loaded = True
                if not loaded:
                    await self._copy_root()
                await self._clear_stage()
            self._ready = True

    def _writing(self) -> _Writing:
        """``async with``: the tree ready, then its lock held, around one change."""
        return _Writing(self)

    async def _reading(self) -> None:
        if not self._ready:
            await self._prepare()

    @contextlib.contextmanager
    def _quietly(self) -> Iterator[None]:
        token = _muted.set(self)
        try:
            yield
        finally:
            _muted.reset(token)

    def _invalidate_dirs(self) -> None:
        self._dirs.clear()
        self._upper_dirs.clear()
        self._upper_absent.clear()
        self._lower_absent.clear()
        self._generation += 1

    async def _copy_root(self) -> None:
        """A fresh upper's root takes the lower root's mode and times."""
        info = await self._lower.lstat(ROOT)
        if info.kind == "directory" and info.mode is not None:
            await self._upper.setattr(
                ROOT, mode=info.mode, atime_ns=info.atime_ns, mtime_ns=info.mtime_ns
            )

    async def _clear_stage(self) -> None:
        if (await self._upper.lstat(_STAGE)).kind == "directory":
            await _remove_tree(self._upper, _STAGE, keep_root=True)

    async def _load_record(self) -> None:
        """Read a durable upper's record and replay its journal (see :meth:`_save`)."""
        text = (await _read_all(self._upper, META_PATH)).decode()
        data = json.loads(text)
        self._meta = CowMeta.of_json(data)
        self._saved = len(text)
        self._journal = int(data.get("journal", 0))
        self._journal_size = 0
        journal = f"{_JOURNAL}{self._journal}"
        if (await self._upper.lstat(journal)).kind == "file":
            data = (await _read_all(self._upper, journal)).decode()
            # A line cut short by a kill mid-append is the one change that was not saved.
            whole = data[: data.rfind("\n") + 1]
            self._meta.replay(whole.splitlines())
            self._journal_size = len(whole.encode())
            if len(whole) != len(data):
                file = await self._upper.open(journal, write=True)
                try:
                    await file.truncate(self._journal_size)
                finally:
                    await file.close()
        async for entry in self._upper.list(RESERVED):
            name = base_name(entry.path)
            if name.startswith(base_name(_JOURNAL)) and entry.path != journal:
                await self._upper.unlink(entry.path)  # of a record since replaced

    async def _save(self) -> None:
        """Bring a durable upper's record up to date with the changes since the last save.

        They are appended to the journal beside the record, one line per entry changed, so a
        save costs what changed, not the whole record. Once the journal outgrows the record, the
        record is written anew (write, rename over the old one) under the next journal number,
        then the old journal is removed: a kill between the two leaves a journal the new record
        does not name, which loading removes.
        """
        if not self._persist or (self._saved is not None and not self._meta.dirty):
            return
        with self._quietly():
            if self._saved is not None:
                lines = self._meta.journal().encode()
                if self._journal_size + len(lines) <= max(_JOURNAL_MIN, self._saved):
                    file = await self._journal_file()
                    await file.write(self._journal_size, lines)
                    self._journal_size += len(lines)
                    return
            else:
                await self._reserved_dir()
            old = f"{_JOURNAL}{self._journal}"
            self._journal += 1
            text = self._meta.dumps(journal=self._journal)
            self._meta.dirty.clear()
            await self._upper.write(_META_TEMP, text)
            await self._upper.rename(_META_TEMP, META_PATH)
            self._saved = len(text)
            self._journal_size = 0
            if (await self._upper.lstat(old)).exists:
                await self._upper.unlink(old)

    async def _journal_file(self) -> OpenFile:
        """The open journal of the record in use (kept open: every change appends to it)."""
        held = self._journal_held
        if held is not None and held[0] == self._journal:
            return held[1]
        if held is not None:
            self._journal_held = None
            await held[1].close()  # of a record since replaced
        journal = f"{_JOURNAL}{self._journal}"
        file = await self._upper.open(journal, write=True, create=True)
        self._journal_held = (self._journal, file)
        return file

    async def _reserved_dir(self) -> None:
        if (await self._upper.lstat(RESERVED)).kind != "directory":
            await self._upper.mkdir(RESERVED, 0o700)

    async def _stage_path(self) -> str:
        if not self._staged:
            await self._reserved_dir()
            if (await self._upper.lstat(_STAGE)).kind != "directory":
                await self._upper.mkdir(_STAGE, 0o700)
            self._staged = True
        return f"{_STAGE}/{next(self._counter)}"

    # -- change notifications -------------------------------------------------------------

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        return self._observers.subscribe(callback)

    def _from_upper(self, change: Change) -> Awaitable[None] | None:
        if is_under(change.path, RESERVED):
            return None
        durable = self._durable
        if durable is not None:
            # Copy-ups too: a checkpoint holds the upper. A directory's metadata (a copy-up
            # into it puts its times back) is its entry alone, not everything beneath it.
            (durable.touched if change.kind == "metadata" else durable.dirty).add(change.path)
        if _muted.get() is self:
            return None
        return self._observers.notify(change)

    def _from_lower(self, change: Change) -> Awaitable[None] | None:
        if change.kind == "entry":
            self._invalidate_dirs()
        if _muted.get() is self or is_under(change.path, RESERVED):
            return None
        if self._meta.hides(change.path):
            return None
        return self._observers.notify(change)

    # -- resolution -------------------------------------------------------------------------

    async def _direct(self, path: str) -> _Found:
        """What the merged view has at ``path``, whose ancestors are real merged directories."""
        if path == ROOT:
            return _Found(ROOT, self._shown_upper(ROOT, await self._upper.lstat(ROOT)), _UPPER)
        if is_under(path, RESERVED):
            return _Found(path, MISSING, None)
        absent = self._upper_absent
        if parent_path(path) in absent:
            info = MISSING  # no directory of the upper there: nothing in it either
        else:
            info = await self._upper.lstat(path)
            if info.exists:
                return _Found(path, self._shown_upper(path, info), _UPPER)
            if len(absent) >= _ABSENT_AT_MOST:
                absent.clear()
            absent.add(path)
        if self._meta.hides(path) or parent_path(path) in self._lower_absent:
            return _Found(path, MISSING, None)
        info = await self._lower.lstat(path)
        if not info.exists:
            return _Found(path, info, None)
        return _Found(path, self._shown_lower(path, info), _LOWER)

    def _shown_lower(self, path: str, info: FileInfo) -> FileInfo:
        """What the merged view shows of the lower's entry at real path ``path``, whose
        ``lstat`` is ``info``: not linked to its other names (see :func:`_unlinked`), with
        the times set through this tree."""
        if info.linked_id is not None:
            info = _unlinked(info)
        return self._touched(path, info) if self._meta.times else info

    def _shown_upper(self, path: str, info: FileInfo) -> FileInfo:
        """What the merged view shows of the upper's entry at real path ``path``: the inode
        number of the lower entry it was copied from (``CowMeta.inos``), else none (the upper's
        own numbers are not unique beside the lower's)."""
        inos = self._meta.inos
        ino = inos.get(path) if inos else None
        return info if info.ino == ino else with_ino(info, ino)

    def _touched(self, path: str, info: FileInfo) -> FileInfo:
        """The lower's ``info`` at real path ``path``, with the times set through this tree."""
        touched = self._meta.times.lookup(path)
        if touched is None or not touched.base.same_as(info):
            return info
        return FileInfo(
            info.kind,
            info.size,
            mode=info.mode,
            mtime_ns=touched.mtime_ns,
            uid=info.uid,
            gid=info.gid,
            atime_ns=touched.atime_ns,
            ctime_ns=touched.ctime_ns,
            nlink=info.nlink,
            special=info.special,
            rdev=info.rdev,
            ino=info.ino,
        )

    async def _locate(self, path: str, *, follow: bool) -> _Found:
        """Resolve a normalized path in the merged view (symlinks followed in every segment but
        the last, and the last too when ``follow``).

        Raises ``FileNotFoundError``/``NotADirectoryError`` (about ``path``) for a missing or
        non-directory intermediate, ``PathError(ELOOP)`` for a symlink loop. A missing final
        segment answers ``_Found(real path, MISSING, None)``.
        """
        if path == ROOT:
            return await self._direct(ROOT)
        parts = split_path(path)
        current = ROOT
        for name in parts[:-1]:
            child = join_path(current, name)
            if child not in self._dirs:
                generation = self._generation
                found = await self._direct(child)
                kind = found.info.kind
                if kind == "directory":
                    if generation == self._generation:
                        self._dirs.add(child)
                elif kind == "symlink":
                    return await self._locate_links(path, follow)
                elif kind == "missing":
                    raise FileNotFoundError(path)
                else:
                    raise NotADirectoryError(path)
            current = child
        found = await self._direct(path)
        if follow and found.info.kind == "symlink":
            return await self._locate_links(path, follow)
        return found

    async def _locate_links(self, path: str, follow: bool) -> _Found:
        """:meth:`_locate` for a path through symlinks, by :mod:`vfs._resolve`'s rules: targets
        resolve in the merged view, absolute ones from this tree's root, ``..`` physically."""
        seen: dict[str, _Found] = {}

        async def kind(real: str) -> Kind:
            found = seen[real] = await self._direct(real)
            return found.info.kind

        async def target(real: str) -> str:
            return await self._layer(seen[real]).readlink(real)

        found = (await drive(resolution(path, follow=follow), kind, target)).check(path)
        return seen.get(found.path) or await self._direct(found.path)

    async def _locate_parent(self, path: str) -> str:
        """The real path of the directory that holds ``path`` (errors are about ``path``)."""
        parent = parent_path(path)
        if parent in self._dirs:
            return parent  # a real merged directory already: nothing to look up
        generation = self._generation
        try:
            found = await self._locate(parent, follow=True)
        except PathError as error:
            raise error.with_path(path) from None
        if not found.info.exists:
            raise FileNotFoundError(path)
        if found.info.kind != "directory":
            raise NotADirectoryError(path)
        if found.path == parent and generation == self._generation:
            self._dirs.add(parent)  # reached through no symlink: a real merged directory
        return found.path

    async def _locate_name(self, path: str) -> _Found:
        """The entry ``path`` names itself (a final symlink is not followed)."""
        if path == ROOT:
            return await self._direct(ROOT)
        return await self._direct(join_path(await self._locate_parent(path), base_name(path)))

    def _layer(self, found: _Found) -> PosixFileSystem:
        return self._upper if found.layer == _UPPER else self._lower

    async def _lower_view(self, path: str) -> FileInfo:
        """The lower's entry at real path ``path`` as the merged view would show it."""
        if self._meta.hides(path) or parent_path(path) in self._lower_absent:
            return MISSING
        return await self._lower.lstat(path)

    async def _children(self, found: _Found) -> dict[str, tuple[Kind, int]]:
        """The merged children of a directory: name -> (kind, layer)."""
        real = found.path
        names: dict[str, tuple[Kind, int]] = {}
        if found.layer == _UPPER:
            async for entry in self._upper.list(real):
                names[base_name(entry.path)] = (entry.kind, _UPPER)
            if real == ROOT:
                names.pop(RESERVED_NAME, None)
        if not self._meta.hides(real) and real not in self._lower_absent:
            hidden = self._meta.hidden.view()
            async for entry in self._lower.list(real):
                name = base_name(entry.path)
                if name in names or entry.path in hidden:
                    continue
                if real == ROOT and name == RESERVED_NAME:
                    continue
                names[name] = (entry.kind, _LOWER)
        return names

    # -- copy-up ----------------------------------------------------------------------------

    async def _upper_parents(self, path: str) -> None:
        """Make every ancestor of real path ``path`` a directory of the upper."""
        parent = parent_path(path)
        if parent == ROOT or parent in self._upper_dirs:
            return
        if (await self._upper.lstat(parent)).kind == "directory":
            self._upper_dirs.add(parent)
            return
        current = ROOT
        for name in split_path(parent):
            current = join_path(current, name)
            info = await self._upper.lstat(current)
            if info.kind == "directory":
                continue
            if info.exists:
                raise NotADirectoryError(path)
            await self._copy_up_dir(current)

    async def _copy_up_dir(self, path: str) -> None:
        """Create the upper directory ``path`` as a copy of the lower's (mode, owner, times)."""
        info = await self._lower.lstat(path)
        await self._upper_parents(path)
        with self._quietly():
            async with self._parent_unchanged(path):
                await self._upper.mkdir(path, 0o755 if info.mode is None else info.mode)
            self._upper_absent.discard(path)
            await self._copy_attributes(path, info)
        self._meta.copied(path, info)

    @contextlib.asynccontextmanager
    async def _parent_unchanged(self, path: str) -> AsyncIterator[None]:
        """Around a copy up to real path ``path``: its upper parent keeps the times it shows.

        The copy's name is made in the parent (a rename, a mkdir), which a file system records
        as a change of the directory, though nothing changed in the merged view: its atime and
        mtime are put back. Its ctime cannot be, so the parent's attributes are reported changed
        (from nowhere: a mount caches them, and the request that copied up does not know), or a
        ``tar`` that stated the directory before would find its ctime moved later.
        """
        parent = parent_path(path)
        before = await self._upper.lstat(parent)
        yield
        if before.mtime_ns:
            await self._upper.setattr(
                parent, atime_ns=before.atime_ns or before.mtime_ns, mtime_ns=before.mtime_ns
            )
        pending = self._observers.notify(Change(parent, "metadata", origin=None))
        if pending is not None:
            await pending

    async def _copy_up(self, path: str, *, empty: bool = False) -> None:
        """Copy the lower's file or symlink ``path`` into the upper (``empty``: without its
        bytes, for a truncate). Changes nothing visible, except what ``empty`` drops."""
        info = await self._lower.lstat(path)
        await self._upper_parents(path)
        stage = await self._stage_path()
        with self._quietly():
            try:
                if info.kind == "symlink":
                    target = await self._lower.readlink(path)
                    await self._upper.symlink(stage, target)
                    digest: str | None = _digest_text(target)
                elif info.special is not None:  # never opened: a FIFO's open would block
                    mode = 0o644 if info.mode is None else info.mode
                    await make_node(self._upper, stage, info.special, mode=mode, rdev=info.rdev)
                    digest = None
                else:
                    digest = await self._copy_bytes(path, stage, info, empty=empty)
                await self._copy_attributes(stage, self._touched(path, info))
                self._meta.shadow(path, Stamp.of(info, digest))
                self._meta.copied(path, info)
                self._meta.forget_times(path, subtree=False)
                await self._save()
                async with self._parent_unchanged(path):
                    await self._upper.rename(stage, path)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await _discard(self._upper, stage)
                raise
        await self._rebind(path)

    async def _copy_bytes(
        self, path: str, stage: str, info: FileInfo, *, empty: bool
    ) -> str | None:
        mode = 0o644 if info.mode is None else info.mode
        target = await self._upper.open(stage, write=True, create=True, exclusive=True, mode=mode)
        try:
            if empty:
                return None
            digest = hashlib.sha256()
            source = await self._lower.open(path)
            try:
                offset = 0
                while True:
                    chunk = await source.read(offset, _CHUNK)
                    if not chunk:
                        break
                    await _write_fully(target, offset, chunk)
                    digest.update(chunk)
                    offset += len(chunk)
            finally:
                await source.close()
            await target.flush()
            return digest.hexdigest()
        finally:
            await target.close()

    async def _copy_attributes(self, path: str, info: FileInfo) -> None:
        """Owner (where this process may give it) and times of ``info`` onto upper ``path``."""
        now = await self._upper.lstat(path)
        if (info.uid, info.gid) != (None, None) and (info.uid, info.gid) != (now.uid, now.gid):
            try:
                await self._upper.setattr(path, uid=info.uid, gid=info.gid)
            except PathError as error:
                if error.errno != errno.EPERM:
                    raise  # EPERM: not root; the copy stays owned by this process
        if info.kind == "directory" and info.mode is not None and now.mode != info.mode:
            await self._upper.setattr(path, mode=info.mode)  # exact, whatever the umask
        if info.mtime_ns:
            await self._upper.setattr(
                path, atime_ns=info.atime_ns or info.mtime_ns, mtime_ns=info.mtime_ns
            )

    async def _hold_shown(self, path: str) -> None:
        """Make the upper and the record hold what the merged view shows at real path ``path``,
        so that the lower changing there shows nothing: a lower entry is copied up (a directory
        alone), where nothing shows a whiteout is recorded. Nothing visible changes. (An apply
        from a checkpoint writes the lower under this tree: ``vfs._cow_changes``.)"""
        probe = ROOT
        for name in split_path(parent_path(path)):
            probe = join_path(probe, name)
            if (await self._direct(probe)).info.kind != "directory":
                return  # the lower's entry never shows by this name
        found = await self._direct(path)
        if found.layer == _LOWER:
            if found.info.kind == "directory":
                await self._copy_up_dir(path)
            else:
                await self._copy_up(path)
        elif found.layer is None and not self._meta.hides(path):
            self._meta.shadow(path, None)
            self._meta.hide(path)

    async def _materialize(self, found: _Found) -> None:
        """Copy up every lower entry that shows beneath the upper directory ``found``."""
        for name, (kind, layer) in sorted((await self._children(found)).items()):
            child = join_path(found.path, name)
            if layer == _LOWER:
                if kind == "directory":
                    await self._copy_up_dir(child)
                else:
                    await self._copy_up(child)
            if kind == "directory" and not self._meta.hides(child):
                await self._materialize(_Found(child, MISSING, _UPPER))

    # -- handles on the lower ---------------------------------------------------------------

    def _lower_handle(self, path: str, file: OpenFile) -> _LowerFile:
        handle = _LowerFile(self, path, file)
        self._lower_files.setdefault(path, set()).add(handle)
        return handle

    def _forget_handle(self, handle: _LowerFile) -> None:
        handles = self._lower_files.get(handle.path)
        if handles is not None:
            handles.discard(handle)
            if not handles:
                del self._lower_files[handle.path]

    async def _rebind(self, path: str) -> None:
        """``path`` was copied up: its lower handles read the upper copy from now on."""
        self._epoch += 1
        for handle in self._lower_files.pop(path, set()):
            await handle.rebind(await self._upper_open(path))

    async def _upper_open(self, path: str, **how: Any) -> OpenFile:
        """The upper's ``open``, as this tree shows it: where the upper's entries show inode
        numbers of their own (a ``dir_fs``), its handles' ``stat`` shows none (see
        :class:`_UpperFile`)."""
        return await self._shown_handle(await self._upper.open(path, **how))

    async def _shown_handle(self, file: OpenFile) -> OpenFile:
        """An upper file's handle as this tree shows it (see :meth:`_upper_open`)."""
        if self._upper_numbers is None:
            self._upper_numbers = (await self._upper.lstat(ROOT)).ino is not None
        if self._upper_numbers and getattr(file, "stat", None) is not None:
            return _UpperFile(file)
        return file

    def _orphan(self, path: str) -> None:
        """``path`` no longer names the lower file its handles read; they keep reading it."""
        self._epoch += 1
        self._lower_files.pop(path, None)

    # -- the eight verbs --------------------------------------------------------------------

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        await self._reading()
        try:
            found = await self._locate(path, follow=True)
        except PathError:
            return  # a missing or unresolvable directory lists as empty
        if found.info.kind != "directory":
            return
        names = await self._children(found)
        base = "/" if path == ROOT else path + "/"
        for count, name in enumerate(sorted(names), start=1):
            yield DirEntry(base + name, names[name][0])
            if count % 1024 == 0:
                await anyio.lowlevel.checkpoint()

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        """:meth:`list` with each entry's ``lstat``, from each layer's own ``list_info``."""
        path = normalize_path(prefix)
        base = "/" if path == ROOT else path + "/"
        return [
            (DirEntry(base + name, info.kind), info)
            for name, info in await self._merged_info(path, None)
        ]

    async def _list_info_reusing(self, prefix: str, known: Mapping[str, FileInfo]) -> NamedListing:
        """``list_info_reusing`` (:class:`vfs.ListsReusing`), offered where a layer has it:
        each layer's own (its ``list_info`` where it has none), merged as :meth:`list_info`.
        A known FileInfo is what this tree showed, which a layer that reuses it answers only
        for the file it saw then (the same ``file_id``)."""
        return await self._merged_info(normalize_path(prefix), known)

    async def _merged_info(self, path: str, known: Mapping[str, FileInfo] | None) -> NamedListing:
        await self._reading()
        try:
            found = await self._locate(path, follow=True)
        except PathError:
            return []
        if found.info.kind != "directory":
            return []
        real = found.path
        merged: dict[str, FileInfo] = {}
        base = "/" if real == ROOT else real + "/"
        if found.layer == _UPPER:
            shown = self._shown_upper
            for name, info in await _named_listing(self._upper, real, known):
                merged[name] = shown(base + name, info)
            if real == ROOT:
                merged.pop(RESERVED_NAME, None)
        if not self._meta.hides(real) and real not in self._lower_absent:
            hidden = self._meta.hidden.view()
            for name, info in await _named_listing(self._lower, real, known):
                if name in merged or base + name in hidden:
                    continue
                if real == ROOT and name == RESERVED_NAME:
                    continue
                merged[name] = self._shown_lower(base + name, info)
        return [(name, merged[name]) for name in sorted(merged)]

    @property
    def buffers_writes(self) -> bool:
        """Writes go to the upper's handles (lower handles take none): as the upper buffers."""
        return buffers_writes(self._upper)

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        await self._reading()
        try:
            return (await self._locate(path, follow=True)).info
        except (FileNotFoundError, NotADirectoryError):
            return MISSING

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        return glob_tree(self, pattern, dir)

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        await self._reading()
        try:
            found = await self._locate(path, follow=True)
        except NotADirectoryError:
            raise FileNotFoundError(path) from None
        if not found.info.exists:
            raise FileNotFoundError(path)
        if found.info.kind == "directory":
            raise IsADirectoryError(path)
        return await self._layer(found).read(found.path)

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = normalize_path(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        await self._reading()
        try:
            found = await self._locate(root, follow=True)
        except PathError:
            return
        if not found.info.exists:
            return
        query = replace(query, path=root)
        hits: AsyncIterator[GrepResult]
        if found.path != root:
            hits = grep_tree(self, query)  # reached through a symlink: walk the merged view
        elif found.info.kind != "directory":
            hits = self._layer(found).grep(query)
        else:
            hits = self._merged(
                lambda tree, limit: tree.grep(replace(query, max_results=limit)),
                grep_key,
                query.max_results,
                root,
            )
        try:
            async for hit in hits:
                yield hit
        finally:
            await aclose(hits)

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        data = encode_contents(contents)
        if path == ROOT:
            raise IsADirectoryError(path)
        _refuse_reserved(path)
        async with self._writing():
            await self._make_parents(path)
            found = await self._locate(path, follow=True)
            if found.info.kind == "directory":
                raise IsADirectoryError(path)
            if found.layer == _UPPER:
                await self._upper.write(found.path, data)
            elif found.layer == _LOWER:
                await self._replace_lower_file(found, data)
            else:
                _refuse_reserved(found.path)
                await self._upper_parents(found.path)
                await self._upper.write(found.path, data)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        async with self._writing():
            try:
                found = await self._locate_name(path)
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(path) from None
            if not found.info.exists:
                raise FileNotFoundError(path)
            if found.info.kind == "directory":
                if await self._children(found):
                    raise DirectoryNotEmptyError(path)
                await self._remove_dir(found)
            else:
                await self._remove_entry(found)

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        root = normalize_path(query.path)
        query = replace(query, path=root)
        return self._merged(
            lambda tree, limit: tree.search(replace(query, max_results=limit)),
            search_key,
            query.max_results,
            root,
        )

    async def _merged(
        self,
        run: Callable[[FileSystem, int | None], AsyncIterator[_Hit]],
        key: Callable[[_Hit], Any],
        cap: int | None,
        root: str,
    ) -> AsyncIterator[_Hit]:
        """Both layers' native results under ``root``, minus what the merged view hides."""
        await self._reading()
        checked: list[object] = [None, False]  # hits come grouped by file: remember the last

        async def upper_keeps(hit: _Hit) -> bool:
            return not is_under(hit.path, RESERVED)

        async def lower_keeps(hit: _Hit) -> bool:
            if checked[0] != hit.path:
                checked[0] = hit.path
                checked[1] = not (
                    is_under(hit.path, RESERVED)
                    or self._meta.hides(hit.path)
                    or (await self._upper.lstat(hit.path)).exists
                )
            return bool(checked[1])

        sources = [
            refilled(lambda limit: run(self._upper_tree, limit), cap, upper_keeps),
        ]
        if not self._meta.hides(root):
            sources.append(refilled(lambda limit: run(self._lower_tree, limit), cap, lower_keeps))
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

    async def _make_parents(self, path: str) -> None:
        """``mkdir -p`` of the directory holding ``path`` in the merged view."""
        real = ROOT
        for name in split_path(parent_path(path)):
            here = join_path(real, name)
            try:
                found = await self._locate(here, follow=True)
            except PathError as error:
                raise error.with_path(path) from None
            if found.info.kind == "directory":
                real = found.path
                continue
            if found.info.exists:
                raise NotADirectoryError(path)
            if found.path != here:
                raise FileNotFoundError(path)  # a dangling symlink: mkdir -p does not follow it
            _refuse_reserved(here)
            await self._upper_parents(here)
            await self._upper.mkdir(here, 0o755)
            self._upper_absent.discard(here)
            real = here

    async def _replace_lower_file(self, found: _Found, data: bytes) -> None:
        """``write`` over a lower file: a new upper file with the lower's mode, renamed into
        place (the same file for a mount: a content change, not a new entry)."""
        path = found.path
        info = found.info
        await self._upper_parents(path)
        stage = await self._stage_path()
        with self._quietly():
            try:
                mode = 0o644 if info.mode is None else info.mode
                file = await self._upper.open(
                    stage, write=True, create=True, exclusive=True, mode=mode
                )
                try:
                    await _write_fully(file, 0, data)
                    await file.flush()
                finally:
                    await file.close()
                if path not in self._meta.bases:
                    # What apply checks against (a touch that keeps the bytes is no conflict).
                    digest = hashlib.sha256(await _read_all(self._lower, path)).hexdigest()
                    self._meta.shadow(path, Stamp.of(info, digest))
                self._meta.copied(path, info)
                self._meta.forget_times(path, subtree=False)
                await self._save()
                async with self._parent_unchanged(path):
                    await self._upper.rename(stage, path)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await _discard(self._upper, stage)
                raise
        await self._rebind(path)
        await self._observers.emit(path, "content")

    async def _remove_entry(
        self, found: _Found, *, keep: bool = False, write: bool = False
    ) -> OpenFile | None:
        """Unlink a non-directory of the merged view; with ``keep``, answer an open file of a
        regular file it was (see :meth:`unlink_keeping`)."""
        path = found.path
        kept: OpenFile | None = None
        info = found.info
        if keep and found.layer == _LOWER and info.kind == "file" and info.special is None:
            # Read-only: nothing is copied up only to be removed.
            kept = self._lower_handle(path, await self._lower.open(path))
        try:
            if found.layer == _LOWER and path not in self._meta.times:
                lower = found.info  # the lower's own (times untouched), as located
            else:
                lower = await self._lower_view(path)
            if lower.exists:
                self._meta.shadow(path, Stamp.of(lower))
                self._meta.hide(path, subtree=lower.kind == "directory")
                await self._save()
            if found.layer == _UPPER:
                if keep:
                    upper = await unlink_keeping(self._upper, path, write=write)
                    kept = None if upper is None else await self._shown_handle(upper)
                else:
                    await self._upper.unlink(path)
                self._meta.forget_upper(path, subtree=False)
            else:
                self._orphan(path)
                await self._observers.emit(path, "entry")
        except BaseException:
            if kept is not None:
                await kept.close()
            raise
        return kept

    async def _remove_dir(self, found: _Found) -> None:
        """Remove a directory that is empty in the merged view."""
        path = found.path
        lower = await self._lower_view(path)
        if lower.exists:
            self._meta.shadow(path, Stamp.of(lower))
            self._meta.hide(path)
            await self._save()
        self._invalidate_dirs()
        if found.layer == _UPPER:
            await self._upper.rmdir(path)
            self._meta.forget_upper(path)
        else:
            await self._observers.emit(path, "entry")

    # -- the POSIX extension ----------------------------------------------------------------

    async def lstat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        await self._reading()
        try:
            return (await self._locate(path, follow=False)).info
        except (FileNotFoundError, NotADirectoryError):
            return MISSING

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
        if not (write or create or truncate):
            await self._reading()
            while True:
                epoch = self._epoch
                found = await self._locate(path, follow=True)
                if not found.info.exists:
                    raise FileNotFoundError(path)
                if found.info.kind == "directory":
                    raise IsADirectoryError(path)
                if found.layer == _UPPER:
                    return await self._upper_open(found.path)
                file = await self._lower.open(found.path)
                if epoch == self._epoch:
                    return self._lower_handle(found.path, file)
                await file.close()  # copied up or replaced meanwhile: resolve again
        _refuse_reserved(path)
        async with self._writing():
            if create and exclusive and (await self._locate(path, follow=False)).info.exists:
                raise FileExistsError(path)  # O_EXCL does not follow a final symlink
            found = await self._locate(path, follow=True)
            real = found.path
            if not found.info.exists:
                if not create:
                    raise FileNotFoundError(path)
                _refuse_reserved(real)
                await self._upper_parents(real)
                return await self._upper_open(
                    real,
                    write=write,
                    create=True,
                    exclusive=True,
                    truncate=truncate,
                    mode=mode,
                    uid=uid,
                    gid=gid,
                )
            if found.info.kind == "directory":
                raise IsADirectoryError(path)
            if found.layer == _LOWER:
                if not (write or truncate):
                    return self._lower_handle(real, await self._lower.open(real))
                await self._copy_up(real, empty=truncate)
            return await self._upper_open(real, write=write, truncate=truncate)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        async with self._writing():
            real = await self._new_name(path)
            await self._upper.mkdir(real, mode, uid=uid, gid=gid)
            self._upper_absent.discard(real)
            self._upper_dirs.add(real)
            # _new_name found nothing there in either layer, or the lower's entry hidden (with
            # everything beneath it, if a directory): nothing to look up in the lower below.
            self._lower_absent.add(real)

    async def _new_name(self, path: str) -> str:
        """Under the writing lock, before ``path`` is made in the upper: its real path, once
        the merged view has nothing there, it is not reserved, and its upper parents exist."""
        found = await self._locate_name(path)
        if found.info.exists:
            raise FileExistsError(path)
        _refuse_reserved(found.path)
        await self._upper_parents(found.path)
        return found.path

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        async with self._writing():
            found = await self._locate_name(path)
            if not found.info.exists:
                raise FileNotFoundError(path)
            if found.info.kind != "directory":
                raise NotADirectoryError(path)
            if await self._children(found):
                raise DirectoryNotEmptyError(path)
            await self._remove_dir(found)

    async def unlink(self, path: str) -> None:
        await self._unlink(path, keep=False, write=False)

    async def unlink_keeping(self, path: str, *, write: bool = False) -> OpenFile | None:
        """:meth:`unlink`, answering an open file of the removed file (see
        :class:`vfs.lowlevel.UnlinksKeeping`): the upper's own, or for a lower file a read-only
        handle on it (the lower is never written)."""
        return await self._unlink(path, keep=True, write=write)

    async def _unlink(self, path: str, *, keep: bool, write: bool) -> OpenFile | None:
        path = normalize_path(path)
        async with self._writing():
            found = await self._locate_name(path)
            if not found.info.exists:
                raise FileNotFoundError(path)
            if found.info.kind == "directory":
                raise IsADirectoryError(path)
            return await self._remove_entry(found, keep=keep, write=write)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        if noreplace and exchange:
            raise PathError(src, errno=errno.EINVAL)
        if src == ROOT or dst == ROOT:
            raise PathError(ROOT, errno=errno.EBUSY)
        async with self._writing():
            # Both parents resolve before the source must exist, as in Linux's renameat2.
            source = await self._locate_name(src)
            victim = await self._locate_name(dst)
            if not source.info.exists:
                raise FileNotFoundError(src)
            _refuse_reserved(victim.path)
            if victim.info.exists and noreplace:
                raise FileExistsError(dst)
            if not victim.info.exists and exchange:
                raise FileNotFoundError(dst)
            if source.path == victim.path:
                return  # the same entry: rename(2) does nothing
            moving_dir = source.info.kind == "directory"
            replacing_dir = victim.info.kind == "directory"
            if moving_dir and is_under(victim.path, source.path):
                raise PathError(src, errno=errno.EINVAL)
            if replacing_dir and is_under(source.path, victim.path):
                if exchange:
                    raise PathError(dst, errno=errno.EINVAL)
                raise DirectoryNotEmptyError(dst)
            if exchange:
                await self._exchange(source, victim)
                return
            if victim.info.exists:
                if moving_dir and not replacing_dir:
                    raise NotADirectoryError(dst)
                if not moving_dir and replacing_dir:
                    raise IsADirectoryError(dst)
                if replacing_dir and await self._children(victim):
                    raise DirectoryNotEmptyError(dst)
            await self._move(source, victim)

    async def _whole_in_upper(self, found: _Found) -> None:
        """Copy ``found`` (and, for a directory, everything showing beneath it) into the upper,
        then hide the lower there: nothing visible changes."""
        path = found.path
        lower = await self._lower_view(path)
        if found.layer == _LOWER:
            if found.info.kind == "directory":
                await self._copy_up_dir(path)
            else:
                await self._copy_up(path)
        if found.info.kind == "directory" and not self._meta.hides(path):
            await self._materialize(_Found(path, found.info, _UPPER))
        if lower.exists:
            self._meta.shadow(path, Stamp.of(lower))
            self._meta.hide(path)

    async def _move(self, source: _Found, victim: _Found) -> None:
        """Rename ``source`` over ``victim`` (missing, or a replaceable entry): everything is
        prepared in the upper, then one upper ``rename`` makes the change."""
        src, dst = source.path, victim.path
        await self._whole_in_upper(source)
        await self._upper_parents(dst)
        if victim.info.kind == "directory":
            await self._whole_in_upper(victim)  # empty: this copies at most the directory
        elif victim.layer == _LOWER:
            self._meta.shadow(dst, Stamp.of(victim.info))  # replaced; the upper shadows it
        self._meta.moved(src, dst)
        await self._save()
        self._orphan(dst)
        if source.info.kind == "directory" or victim.info.kind == "directory":
            self._invalidate_dirs()
            await self._upper.rename(src, dst)
            self._invalidate_dirs()
            return
        # No directory moves or goes: every directory the caches know stays where it was.
        self._upper_absent.discard(dst)
        await self._upper.rename(src, dst)

    async def _exchange(self, a: _Found, b: _Found) -> None:
        await self._whole_in_upper(a)
        await self._whole_in_upper(b)
        self._meta.exchanged(a.path, b.path)
        await self._save()
        self._invalidate_dirs()
        await self._upper.rename(a.path, b.path, exchange=True)
        self._invalidate_dirs()

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
        if (size, mode, uid, gid, atime_ns, mtime_ns) == (None,) * 6:
            await self._reading()
            found = await self._locate(path, follow=False)
            if not found.info.exists:
                raise FileNotFoundError(path)
            return found.info
        async with self._writing():
            found = await self._locate(path, follow=False)
            if not found.info.exists:
                raise FileNotFoundError(path)
            if found.layer == _LOWER:
                if size is not None and found.info.kind == "directory":
                    raise IsADirectoryError(path)
                if found.info.kind == "file" and (size, mode, uid, gid) == (None,) * 4:
                    return await self._touch_lower(found, atime_ns, mtime_ns)
                if found.info.kind == "directory":
                    await self._copy_up_dir(found.path)
                else:
                    await self._copy_up(found.path, empty=size == 0)
            info = await self._upper.setattr(
                found.path,
                size=size,
                mode=mode,
                uid=uid,
                gid=gid,
                atime_ns=atime_ns,
                mtime_ns=mtime_ns,
            )
            return self._shown_upper(found.path, info)

    async def _touch_lower(
        self, found: _Found, atime_ns: int | None, mtime_ns: int | None
    ) -> FileInfo:
        """New times for an unmodified lower file: recorded, not copied up (see the module
        docstring); the ctime moves to now, as a real ``utimensat`` does."""
        path = found.path
        lower = await self._lower.lstat(path)
        shown = found.info  # the lower's, with times set earlier
        mtime = (shown.mtime_ns or 0) if mtime_ns is None else mtime_ns
        atime = (shown.atime_ns or mtime) if atime_ns is None else atime_ns
        base = Stamp(lower.kind, lower.size, lower.mtime_ns or 0)  # what same_as compares
        self._meta.times[path] = Touched(base, atime, mtime, now_ns())
        await self._save()
        await self._observers.emit(path, "metadata")
        return self._touched(path, lower)

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        if not target:
            raise FileNotFoundError(path)  # symlink(2) refuses an empty target
        if "\0" in target:
            raise PathError(path, errno=errno.EINVAL)
        async with self._writing():
            real = await self._new_name(path)
            await self._upper.symlink(real, target, uid=uid, gid=gid)

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
        """A FIFO, socket or device node, made in the upper (where it holds them: EPERM else).
        Not a change (see ``changes``): git tracks none of them either."""
        path = normalize_path(path)
        async with self._writing():
            real = await self._new_name(path)
            await make_node(self._upper, real, special, mode=mode, rdev=rdev, uid=uid, gid=gid)

    async def link(self, src: str, dst: str) -> None:
        """A further name for an upper file (a lower one is copied up first: the names then
        share the copy). Both are ordinary upper entries to ``changes``."""
        src = normalize_path(src)
        dst = normalize_path(dst)
        async with self._writing():
            source = await self._locate_name(src)
            target = await self._locate_name(dst)
            if not source.info.exists:
                raise FileNotFoundError(src)
            if target.info.exists:
                raise FileExistsError(dst)
            if source.info.kind == "directory":
                raise PathError(src, errno=errno.EPERM)
            _refuse_reserved(target.path)
            if source.layer == _LOWER:
                await self._copy_up(source.path)
            await self._upper_parents(target.path)
            await make_link(self._upper, source.path, target.path)
            self._meta.linked(source.path, target.path)
            await self._save()

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        await self._reading()
        found = await self._locate(path, follow=False)
        if not found.info.exists:
            raise FileNotFoundError(path)
        if found.info.kind != "symlink":
            raise PathError(path, errno=errno.EINVAL)
        return await self._layer(found).readlink(found.path)

    # -- changes as data --------------------------------------------------------------------

    async def changes(self, paths: Iterable[str] | None = None) -> AsyncIterator[TreeChange]:
        """What differs from the lower tree, one :class:`TreeChange` per path, sorted by path.

        ``paths`` limits the listing to changes at or beneath those paths (a rename counts
        when either of its paths is). Content is compared, so a file changed and changed back
        is not listed.
        """
        from ._cow_changes import compute_changes, select

        async with self._writing():
            found = select(await compute_changes(self), paths)
        for change in found:
            yield change

    async def diff(self, paths: Iterable[str] | None = None) -> str:
        """A unified diff (git style, ``a/`` and ``b/`` prefixes) of :meth:`changes`."""
        from ._cow_changes import compute_changes, render_diff, select

        async with self._writing():
            found = select(await compute_changes(self), paths)
            return await render_diff(self, found)

    async def apply(
        self,
        paths: Iterable[str] | None = None,
        *,
        target: FileSystem | None = None,
        only: Collection[TreeChange] | None = None,
        checkpoint: int | None = None,
    ) -> builtins.list[TreeChange]:
        """Write the changes (all, or those at or beneath ``paths``) into ``target`` (default:
        the lower tree); return them.

        ``checkpoint`` applies checkpoint N's changes instead of this tree's: those of
        :meth:`checkpoint_view` ``(N)``, checked against what N shadowed. This tree goes on
        showing the same names and bytes (what it shows where the lower changes is first
        copied up, or hidden); written into the lower, what it then holds equal to the lower
        is no longer a change.

        ``only`` narrows them to these changes, as :meth:`changes` listed them: a change made
        (or changed) since that listing is left for a later apply, so nothing is written that
        the caller did not see. A host directory is written through its strict view: no
        symlink is followed, no mount point crossed, no file written in place (a new file is
        renamed over it, so its other hard links keep their bytes), no set-id bit set.

        Every change is checked before anything is written: where a change's path in the
        target goes through a symlink or a mount point, nothing is written and
        :class:`CowRefusedError` (``EACCES``) names the paths; where the target's entry is not
        the one this tree shadowed (the lower file changed since it was copied up), nothing is
        written and :class:`CowConflictError` (``ESTALE``) names the path. After writing into
        the lower tree, this tree forgets the applied changes (its view is the lower's there).
        """
        from ._cow_changes import apply_changes

        async with self._writing():
            source = None if checkpoint is None else await self._view_of(checkpoint)
            return await apply_changes(self, paths, target, only, source)

    async def checkpoint_view(self, number: int) -> CowFileSystem:
        """Checkpoint ``number`` as a tree of its own over the same lower, to read, review
        (``changes()``, ``diff()``) and apply from (``apply(checkpoint=number)``): never saved,
        subscribed to nothing, and what is written through it changes neither this tree nor the
        checkpoint. Raises :class:`CheckpointNotFoundError`."""
        async with self._writing():
            return await self._view_of(number)

    async def _view_of(self, number: int) -> CowFileSystem:
        if self._durable is not None:
            from . import _cow_durable

            return await _cow_durable.view_of(self, number)
        from . import _cow_checkpoints

        return _cow_checkpoints.view(self, self._history.state(number))

    async def real_path(self, path: str) -> str:
        """``path`` with every symlink in it resolved in the merged view (chroot semantics: an
        absolute target is this tree's), the final one too; what a path names, as a program
        inside this tree would reach it. A loop raises ``PathError(ELOOP)``."""
        path = normalize_path(path)
        await self._reading()
        try:
            return (await self._locate(path, follow=True)).path
        except (FileNotFoundError, NotADirectoryError):
            return path  # a missing or non-directory step: nothing is reached beyond it


async def _checkpoint(
    self: CowFileSystem, label: str | None = None, *, turn: int | None = None
) -> Checkpoint:
    from . import _cow_checkpoints

    return await _cow_checkpoints.checkpoint(self, label, turn)


async def _checkpoints(self: CowFileSystem) -> builtins.list[Checkpoint]:
    return self._history.listing()


async def _checkpoint_changes(
    self: CowFileSystem, a: int, b: int | None = None
) -> builtins.list[TreeChange]:
    from . import _cow_checkpoints

    return await _cow_checkpoints.checkpoint_changes(self, a, b)


async def _checkpoint_diff(self: CowFileSystem, a: int, b: int | None = None) -> str:
    from . import _cow_checkpoints

    return await _cow_checkpoints.checkpoint_diff(self, a, b)


async def _rewind(self: CowFileSystem, number: int) -> Checkpoint:
    """A rewind of either kind of cow, its hooks entered around it."""
    from . import _cow_checkpoints, _cow_durable

    kind: Any = _cow_checkpoints if self._durable is None else _cow_durable
    return await self._rewind_hooks.rewinding(
        lambda: kind.rewind_replaces(self, number), lambda: kind.rewind(self, number)
    )


def _on_rewind(self: CowFileSystem, hook: RewindHook) -> Callable[[], None]:
    return self._rewind_hooks.add(hook)


async def _fork(self: CowFileSystem, number: int) -> CowFileSystem:
    from . import _cow_checkpoints

    return await _cow_checkpoints.fork(self, number)


async def _rewind_replaces(self: CowFileSystem, number: int) -> builtins.list[str]:
    from . import _cow_checkpoints

    return await _cow_checkpoints.rewind_replaces(self, number)


async def _prune_checkpoints(self: CowFileSystem, keep_last: int) -> builtins.list[int]:
    return self._history.prune(keep_last)


# Offered over a temp_fs upper (vfs._cow_checkpoints): the Checkpoints capability.
_CHECKPOINT_VERBS: dict[str, Callable[..., Any]] = {
    "checkpoint": _checkpoint,
    "checkpoints": _checkpoints,
    "checkpoint_changes": _checkpoint_changes,
    "checkpoint_diff": _checkpoint_diff,
    "rewind": _rewind,
    "rewind_replaces": _rewind_replaces,
    "on_rewind": _on_rewind,
    "fork": _fork,
    "prune_checkpoints": _prune_checkpoints,
}


def _durable_verb(name: str) -> Callable[..., Any]:
    async def verb(self: CowFileSystem, *args: Any, **kwargs: Any) -> Any:
        from . import _cow_durable

        return await getattr(_cow_durable, name)(self, *args, **kwargs)

    verb.__name__ = verb.__qualname__ = name
    return verb


async def _durable_checkpoint(
    self: CowFileSystem, label: str | None = None, *, turn: int | None = None
) -> Checkpoint:
    from . import _cow_durable

    return await _cow_durable.checkpoint(self, label, turn)


async def _durable_changes(
    self: CowFileSystem, a: int, b: int | None = None
) -> builtins.list[TreeChange]:
    from . import _cow_durable

    return await _cow_durable.checkpoint_changes(self, a, b)


async def _durable_diff(self: CowFileSystem, a: int, b: int | None = None) -> str:
    from . import _cow_durable

    return await _cow_durable.checkpoint_diff(self, a, b)


# Offered over any other given upper (a host directory's: vfs._cow_durable).
_DURABLE_VERBS: dict[str, Callable[..., Any]] = {
    "checkpoint": _durable_checkpoint,
    "checkpoints": _durable_verb("checkpoints"),
    "checkpoint_changes": _durable_changes,
    "checkpoint_diff": _durable_diff,
    "rewind": _rewind,
    "rewind_replaces": _durable_verb("rewind_replaces"),
    "on_rewind": _on_rewind,
    "fork": _durable_verb("fork"),
    "prune_checkpoints": _durable_verb("prune"),
}


def _unlinked(info: FileInfo) -> FileInfo:
    """A lower file's ``info`` without its ``file_id`` and ``ino``: its names are copied up one
    at a time, each on its own, so here they are not one file (a mount would serve them as one
    inode, or show two files under one number)."""
    return replace(info, file_id=None, ino=None)


class _LowerFile(ForwardingFile):
    """A read-only handle on a lower file; it reads the upper copy once one is made. Its
    ``stat`` (where the lower's files have one) answers what the merged view shows."""

    __slots__ = ("_cow", "_rebound", "path")

    def __init__(self, cow: CowFileSystem, path: str, file: OpenFile) -> None:
        self._cow = cow
        self.path = path
        self._rebound = False
        self._forward_to(file)

    async def rebind(self, file: OpenFile) -> None:
        old, self._inner = self._inner, file
        self._rebound = True
        await old.close()

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        if verb.changing:
            raise PathError(self.path, errno=errno.EBADF)  # opened for reading only
        if verb.kind == "closes":
            self._cow._forget_handle(self)
        elif verb.name == "stat":
            if not self._rebound:
                return self._cow._shown_lower(self.path, await verb.call(self._inner, args))
            if getattr(self._inner, "stat", None) is None:  # an upper whose files cannot say
                return await self._cow.lstat(self.path)
        return await verb.call(self._inner, args)


class _Writing:
    """What :meth:`CowFileSystem._writing` returns (a class: it is entered by every change,
    where a generator-based context manager costs a few microseconds more)."""

    __slots__ = ("_cow", "_lock")

    def __init__(self, cow: CowFileSystem) -> None:
        self._cow = cow
        self._lock: anyio.Lock | None = None

    async def __aenter__(self) -> None:
        cow = self._cow
        if not cow._ready:
            await cow._prepare()
        lock = cow._lock()
        await lock.acquire()
        self._lock = lock

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._lock is not None
        self._lock.release()


class _UpperFile(ForwardingFile):
    """A handle on an upper file whose ``stat`` shows no inode number: the upper's own are not
    unique beside the lower's, and the name a copy's kept number is recorded under may have
    changed since the file was opened (a mount keeps the number it showed for the file)."""

    __slots__ = ()

    def __init__(self, file: OpenFile) -> None:
        self._forward_to(file)

    async def stat(self) -> FileInfo:
        info: FileInfo = await self._inner.stat()  # type: ignore[attr-defined]
        return info if info.ino is None else with_ino(info, None)


async def _named_listing(
    layer: PosixFileSystem, path: str, known: Mapping[str, FileInfo] | None
) -> NamedListing:
    """``layer``'s entries of directory ``path`` by name: reusing ``known`` where given and
    the layer can, else its ``list_info``."""
    reuse = None if known is None else list_reusing_of(layer)
    if reuse is not None and known is not None:
        return await reuse(path, known)
    return [(base_name(entry.path), info) for entry, info in await list_info_of(layer)(path)]


def _refuse_reserved(path: str) -> None:
    if is_under(path, RESERVED):
        raise PermissionDeniedError(path)


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


async def _write_fully(file: OpenFile, offset: int, data: bytes) -> None:
    done = 0
    while done < len(data):
        written = await file.write(offset + done, data[done:] if done else data)
        if written <= 0:
            raise PathError("", errno=errno.EIO)
        done += written


async def _read_all(tree: PosixFileSystem, path: str) -> bytes:
    """Every byte of a file, through a handle (``read`` would decode text)."""
    file = await tree.open(path)
    try:
        chunks: builtins.list[bytes] = []
        offset = 0
        while True:
            chunk = await file.read(offset, _CHUNK)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)
    finally:
        await file.close()


async def _discard(tree: PosixFileSystem, path: str) -> None:
    """Remove a staged copy, if it got as far as existing."""
    info = await tree.lstat(path)
    if info.kind == "directory":
        await _remove_tree(tree, path)
    elif info.exists:
        await tree.unlink(path)


async def _remove_tree(tree: PosixFileSystem, path: str, *, keep_root: bool = False) -> None:
    entries = [entry async for entry in tree.list(path)]
    for entry in entries:
        if entry.kind == "directory":
            await _remove_tree(tree, entry.path)
        else:
            await tree.unlink(entry.path)
    if not keep_root:
        await tree.rmdir(path)
