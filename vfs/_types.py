"""Values and protocols of the FileSystem contract, and the POSIX extension a mount needs.

Theory of operation
-------------------
:class:`FileSystem` is the contract: eight async verbs and nothing else. Any object with those
methods is a FileSystem (structural typing); conveniences are free functions over it.

:class:`PosixFileSystem` is what a real mount needs beyond the eight verbs: ``lstat``, open file
handles with byte ranges, mkdir/rmdir/unlink, atomic rename, ``setattr`` (size, mode, owner,
times) and symlinks. The built-in layers implement it; :func:`vfs.posix_view` adapts a tree that
implements only the eight verbs, so a user's own tree composes with everything.

:class:`Watchable` trees report every change made through them as :class:`Change` values, so a
mount can invalidate exactly what the kernel caches. A change carries the *origin* active when it
was made (:data:`change_origin`), which lets a mount ignore the changes it made itself. A change
is reported after it is made and before the changing call returns; subscribers may return an
awaitable that the changing call awaits, so a mount can invalidate the kernel's caches in time.

All paths given to and yielded by these methods are normalized (see ``vfs._paths``). Results are
frozen dataclasses; iterators are sorted as the contract says.
"""

from __future__ import annotations

import contextvars
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._cow_meta import TreeChange

Kind = Literal["file", "directory", "symlink", "missing"]

Special = Literal["fifo", "socket", "char", "block"]
"""What a ``kind == "file"`` entry is when it is not a regular file (``FileInfo.special``)."""

SPECIAL_TYPE_BITS: dict[Special, int] = {
    "fifo": stat.S_IFIFO,
    "socket": stat.S_IFSOCK,
    "char": stat.S_IFCHR,
    "block": stat.S_IFBLK,
}
"""The ``S_IFMT`` bits of each :data:`Special`."""

SPECIAL_OF_TYPE_BITS: dict[int, Special] = {bits: name for name, bits in SPECIAL_TYPE_BITS.items()}

ROOT = "/"


@dataclass(frozen=True, slots=True, init=False)
class DirEntry:
    """One entry yielded by ``list`` or ``glob``."""

    path: str
    kind: Kind

    # Written out instead of generated (whose object.__setattr__ per field costs ~0.6 us in
    # all): one is built for every name a listing or a glob yields.
    def __init__(self, path: str, kind: Kind) -> None:
        _set_entry_path(self, path)
        _set_entry_kind(self, kind)


# The slot descriptors of DirEntry (they bypass the frozen __setattr__).
_set_entry_path: Callable[[DirEntry, str], None] = DirEntry.__dict__["path"].__set__
_set_entry_kind: Callable[[DirEntry, Kind], None] = DirEntry.__dict__["kind"].__set__


@dataclass(frozen=True, slots=True, init=False)
class FileInfo:
    """What ``stat`` answers. ``kind == "missing"`` is how a missing path is reported.

    ``mtime`` is seconds since the epoch; ``mtime_ns`` is the same instant in nanoseconds, exact
    where the tree keeps nanoseconds (give either one, the other is derived). ``mode`` holds the
    permission bits (``0o7777``), ``None`` where the tree has no modes. The remaining fields are
    filled by trees that keep POSIX metadata and are ``None`` elsewhere. ``special`` says what a
    ``"file"`` is when it is not a regular file (a FIFO, a socket, a device node, made with
    ``mknod``; it reads as empty), and ``rdev`` is a device node's device number. ``file_id``
    identifies the file in trees that can say so (``None`` otherwise): every name of one file
    (hard links) answers the same number, and a file put in another's place under its name
    answers another (``dir_fs``: the host device and inode of every non-directory; ``temp_fs``:
    only once a file has several names). :attr:`linked_id` is it while the file has several.
    ``blocks`` is the space the file takes, in 512-byte units, where the tree knows it (a sparse
    file's holes take none); ``None``: its size says.

    ``ino`` is the inode number the file shows through a mount (``st_ino``), where the tree
    keeps one: every name of one file answers the same, and no two files of the tree that exist
    at once answer the same (``dir_fs``: the host's, for entries on its root's device; ``cow_fs``:
    the lower's, which the upper copy keeps, except for a lower file with several names: each
    is a file of its own there). ``None``: a mount numbers the file itself. A file
    keeps its number while it lives (writes, renames, a copy-up), so what recorded it on the
    host (git's index) still matches through a mount.
    """

    kind: Kind
    size: int = 0
    mtime: float = 0.0
    mode: int | None = None
    mtime_ns: int | None = None
    uid: int | None = None
    gid: int | None = None
    atime_ns: int | None = None
    ctime_ns: int | None = None
    nlink: int | None = None
    special: Special | None = None
    rdev: int = 0
    file_id: int | None = None
    blocks: int | None = None
    ino: int | None = None

    # Written out instead of generated: a FileInfo is built for every stat a mount answers (and
    # every entry of a listing), and the generated __init__ of a frozen class sets each field
    # through object.__setattr__, ~1.3 us in all. Here the new instance is switched for a moment
    # to a plain class with the same slots, where each field is a direct slot store, and back:
    # ~0.6 us. The instance is not shared with anyone before __init__ returns.
    def __init__(
        self,
        kind: Kind,
        size: int = 0,
        mtime: float = 0.0,
        mode: int | None = None,
        mtime_ns: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        ctime_ns: int | None = None,
        nlink: int | None = None,
        special: Special | None = None,
        rdev: int = 0,
        file_id: int | None = None,
        blocks: int | None = None,
        ino: int | None = None,
    ) -> None:
        if mtime_ns is None:
            mtime_ns = round(mtime * 1_000_000_000)
        elif not mtime:
            mtime = mtime_ns / 1_000_000_000
        cls = type(self)
        if cls is not FileInfo:  # a subclass may add slots: the slow, general way
            for setter, value in zip(
                _FILEINFO_SETTERS,
                (
                    kind,
                    size,
                    mtime,
                    mode,
                    mtime_ns,
                    uid,
                    gid,
                    atime_ns,
                    ctime_ns,
                    nlink,
                    special,
                    rdev,
                    file_id,
                    blocks,
                    ino,
                ),
                strict=True,
            ):
                setter(self, value)
            return
        _set_class(self, "__class__", _FileInfoFields)
        unfrozen: _FileInfoFields = self  # type: ignore[assignment]
        unfrozen.kind = kind
        unfrozen.size = size
        unfrozen.mtime = mtime
        unfrozen.mode = mode
        unfrozen.mtime_ns = mtime_ns
        unfrozen.uid = uid
        unfrozen.gid = gid
        unfrozen.atime_ns = atime_ns
        unfrozen.ctime_ns = ctime_ns
        unfrozen.nlink = nlink
        unfrozen.special = special
        unfrozen.rdev = rdev
        unfrozen.file_id = file_id
        unfrozen.blocks = blocks
        unfrozen.ino = ino
        unfrozen.__class__ = FileInfo  # type: ignore[assignment]

    @property
    def exists(self) -> bool:
        return self.kind != "missing"

    @property
    def linked_id(self) -> int | None:
        """``file_id`` while the file has several names (what one inode is shared by), else
        ``None``."""
        nlink = self.nlink
        if nlink is None or nlink < 2 or self.kind == "directory":
            return None
        return self.file_id


# The slot descriptors of FileInfo, in field order (they bypass the frozen __setattr__).
_FILEINFO_SETTERS: tuple[Callable[[FileInfo, Any], None], ...] = tuple(
    FileInfo.__dict__[item.name].__set__ for item in fields(FileInfo)
)


def with_ino(info: FileInfo, ino: int | None) -> FileInfo:
    """``info`` showing inode number ``ino`` (``dataclasses.replace`` costs several times more,
    and a copy-on-write tree answers this for every upper entry it shows)."""
    return _rebuilt(info, info.size, info.file_id, info.blocks, ino)


def resized(info: FileInfo, size: int) -> FileInfo:
    """``info`` of a file grown or cut to ``size`` (a sequential writer's, on every request): its
    stored blocks unknown, and no ``file_id``, as the mount's own record of it."""
    return _rebuilt(info, size, None, None, info.ino)


def _rebuilt(
    info: FileInfo, size: int, file_id: int | None, blocks: int | None, ino: int | None
) -> FileInfo:
    return FileInfo(
        info.kind,
        size,
        info.mtime,
        info.mode,
        info.mtime_ns,
        info.uid,
        info.gid,
        info.atime_ns,
        info.ctime_ns,
        info.nlink,
        info.special,
        info.rdev,
        file_id,
        blocks,
        ino,
    )


class _FileInfoFields:
    """FileInfo's slots without the frozen ``__setattr__``: what ``FileInfo.__init__`` fills."""

    __slots__ = FileInfo.__slots__
    kind: Kind
    size: int
    mtime: float
    mode: int | None
    mtime_ns: int | None
    uid: int | None
    gid: int | None
    atime_ns: int | None
    ctime_ns: int | None
    nlink: int | None
    special: Special | None
    rdev: int
    file_id: int | None
    blocks: int | None
    ino: int | None


_set_class = object.__setattr__


MISSING = FileInfo("missing")

DirListing = list[tuple[DirEntry, FileInfo]]
"""What ``list_info`` answers: each entry of a directory with its ``lstat``, sorted by path."""
NamedListing = list[tuple[str, FileInfo]]
"""A directory's entries by name (not path), sorted, with what ``lstat`` answers for each."""


def dir_listing(path: str, named: NamedListing) -> DirListing:
    """The :data:`DirListing` of directory ``path`` (normalized) from its entries by name."""
    base = "/" if path == "/" else path + "/"
    return [(DirEntry(base + name, info.kind), info) for name, info in named]


@dataclass(frozen=True, slots=True)
class GrepQuery:
    """A regular-expression search over file contents.

    ``glob`` filters the files searched: slash-free (``*.py``) matches the basename at any depth
    under ``path``; with a slash it matches the path relative to ``path``. ``max_results`` is a
    pushdown: implementations stop after that many hits.

    ``path`` omitted is ``""``, the tree's own default scope, as for ``list`` and ``glob``: the
    root of a virtual tree, the cwd of ``local_file_system`` (where ``"/"`` is the host's root).
    """

    pattern: str
    path: str = ""
    glob: str | None = None
    case_insensitive: bool = False
    max_results: int | None = None


@dataclass(frozen=True, slots=True)
class GrepResult:
    path: str
    line_number: int
    line: str


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """An indexed search; ``path`` omitted is the tree's default scope, as for ``GrepQuery``."""

    query: str
    path: str = ""
    max_results: int | None = None


@dataclass(frozen=True, slots=True)
class SearchResult:
    path: str
    score: float
    snippet: str


@runtime_checkable
class FileSystem(Protocol):
    """The contract: eight async verbs over one posix namespace rooted at ``/``."""

    def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        """Direct children of a directory, sorted by path. Missing or a file: empty."""
        ...

    async def stat(self, path: str) -> FileInfo:
        """What is at ``path`` (following symlinks); ``kind="missing"`` when nothing is."""
        ...

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        """Entries whose path relative to ``dir`` matches ``pattern``, sorted by path."""
        ...

    async def read(self, path: str) -> str | bytes:
        """Text as ``str``; jpeg/png/gif/webp as ``bytes``. Raises ``FileNotFoundError``."""
        ...

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        """Matching lines, by path then line number. Raises ``InvalidGrepPatternError``."""
        ...

    async def write(self, path: str, contents: str | bytes) -> None:
        """Create or overwrite a file (parents are created). Raises ``ReadOnlyMountError``,
        ``WriteFailedError``."""
        ...

    async def delete(self, path: str) -> None:
        """Remove a file. Raises ``FileNotFoundError``, ``ReadOnlyMountError``."""
        ...

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        """Indexed search, by score descending then path. Empty without an index."""
        ...


@runtime_checkable
class OpenFile(Protocol):
    """An open file of a :class:`PosixFileSystem`: byte ranges, independent of the name.

    A handle keeps reading and writing the file it opened even after the name is unlinked or
    renamed over (POSIX semantics), where the tree can hold that.
    """

    async def read(self, offset: int, size: int) -> bytes: ...

    async def write(self, offset: int, data: bytes) -> int:
        """Write at ``offset`` (a gap past the end reads as zeros); return bytes written."""
        ...

    async def truncate(self, size: int) -> None: ...

    async def flush(self) -> None:
        """Make written data visible through the tree (buffering handles write back here)."""
        ...

    async def fsync(self, datasync: bool = False) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class PosixFileSystem(FileSystem, Protocol):
    """The operations a POSIX mount needs beyond the eight verbs.

    Paths are normalized; ``mode`` arguments are final permission bits (the caller has applied
    its umask); ``uid``/``gid`` of ``None`` mean "the tree's default owner". Every method raises
    :class:`vfs.PathError` subclasses whose ``errno`` is what POSIX answers.

    Two optional members make a mount faster (``vfs._capabilities`` reads them; a tree without
    them is served correctly, only slower):

    - ``buffers_writes: bool``: whether an :class:`OpenFile` may hold written bytes that only its
      ``flush``/``close`` make visible (so a write-back error must reach ``close(2)``). Absent
      means ``True``. A tree that writes through (``False``) lets the mount stop the kernel from
      sending a FLUSH on every ``close(2)``.
    - ``async def list_info(prefix) -> list[tuple[DirEntry, FileInfo]]``: ``list`` with what
      ``lstat`` answers for each entry, in one call (see :class:`ListsWithInfo`).
    """

    async def lstat(self, path: str) -> FileInfo:
        """Like ``stat`` but a final symlink is reported as ``kind="symlink"``."""
        ...

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
        """Open a file for reading, and for writing too when ``write`` (O_WRONLY/O_RDWR).

        A tree that does not take writes refuses ``write``, ``create`` and ``truncate`` here
        (``ReadOnlyMountError``), as the kernel refuses ``open(2)`` on a read-only mount.
        """
        ...

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None: ...

    async def rmdir(self, path: str) -> None: ...

    async def unlink(self, path: str) -> None:
        """Remove a file or symlink (``IsADirectoryError`` for a directory)."""
        ...

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        """Atomically rename a file or directory, replacing ``dst`` as POSIX ``rename(2)``."""
        ...

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
        """Change what is given (without following a final symlink); return the new ``lstat``."""
        ...

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None: ...

    async def readlink(self, path: str) -> str: ...


@runtime_checkable
class MakesNodes(Protocol):
    """A tree that holds FIFOs, sockets and device nodes too (optional; see ``mknod(2)``)."""

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
        """Make ``path`` a node of type ``special`` (``lstat`` then answers ``kind="file"``
        with that ``special``). ``FileExistsError`` when the name is taken; a tree that will
        not hold that type raises a :class:`PathError` with ``EPERM``."""
        ...


@runtime_checkable
class MakesLinks(Protocol):
    """A tree whose files can have several names (optional; see ``link(2)``)."""

    async def link(self, src: str, dst: str) -> None:
        """Give the file, symlink or special file at ``src`` (not followed) the new name
        ``dst``: both then name one file (its bytes, mode, owner and times), and ``lstat``
        counts the names in ``nlink``. ``FileExistsError`` when ``dst`` is taken,
        ``FileNotFoundError`` when ``src`` is missing, ``EPERM`` for a directory; ``EXDEV``
        across trees that cannot share a file."""
        ...


@runtime_checkable
class UnlinksKeeping(Protocol):
    """A tree that can hand over what a name held as it removes the name (optional).

    A mount that is not told which files are open keeps each file it unlinks open until the
    kernel forgets it (a descriptor may still read it); asked of the tree in one call, the open
    costs no second walk down the tree. Read it through ``vfs.lowlevel.unlink_keeping``, which
    opens then unlinks for a tree without it."""

    async def unlink_keeping(self, path: str, *, write: bool = False) -> OpenFile | None:
        """``unlink(path)``, answering an open file of what the name held when it was a
        regular file (for reading, and writing too when ``write``; it then reads and writes
        the removed file), else ``None`` (a symlink, a FIFO, a socket, a device node). Raises
        what ``unlink`` raises, and nothing is removed then; the change it reports is
        ``unlink``'s."""
        ...


@runtime_checkable
class ListsWithInfo(Protocol):
    """A tree that lists a directory together with each entry's attributes (optional)."""

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        """The direct children of ``prefix`` with what ``lstat`` answers for each.

        Same entries, order and rules as ``list`` (sorted by path, missing or a file: empty); an
        entry that vanishes between being listed and being examined is left out. Meant for
        readdir-with-attributes, where one directory descriptor (or one node lookup) replaces a
        path resolution per entry.
        """
        ...


@runtime_checkable
class ListsReusing(Protocol):
    """A tree that lists a directory reusing attributes its caller holds (optional)."""

    async def list_info_reusing(self, prefix: str, known: Mapping[str, FileInfo]) -> NamedListing:
        """The direct children of ``prefix`` by name, sorted, with what ``lstat`` answers, as
        ``list_info`` does; except that an entry named in ``known`` whose ``file_id`` the tree
        sees unchanged (without examining the file: a directory read tells it) may answer the
        known FileInfo itself. The caller vouches that nothing else about those files changed
        since it learned them (a mount whose own requests made every change since, and which
        accepts the kernel's attribute caching for changes made elsewhere).
        """
        ...


@runtime_checkable
class ReadsBytes(Protocol):
    """A tree whose ``read`` decodes text lossily and that can give a file's exact bytes too
    (optional; ``host_fs``: see :func:`vfs._capabilities.read_bytes`)."""

    async def read_bytes(self, path: str) -> bytes:
        """The bytes of the file at ``path``, exactly as stored."""
        ...


@runtime_checkable
class BuffersWrites(Protocol):
    """A tree that says whether its open files hold written bytes back (optional; see
    :class:`PosixFileSystem` and :func:`vfs._capabilities.buffers_writes`)."""

    buffers_writes: bool


@runtime_checkable
class StatsOpenFile(Protocol):
    """An :class:`OpenFile` that can say what its file's attributes are now (optional)."""

    async def stat(self) -> FileInfo:
        """What ``lstat`` of the file answers now (``fstat``), whatever its names became."""
        ...


@dataclass(frozen=True, slots=True)
class Summary:
    """What changed since the checkpoint before: entries added, modified and deleted (by
    existence and kind: a file in both is counted as modified), and the bytes of the files
    added or modified."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    bytes: int = 0

    def __str__(self) -> str:
        return f"A{self.added} M{self.modified} D{self.deleted} {self.bytes}B"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One recorded state of a tree (see :class:`Checkpoints`). ``time`` is seconds since the
    epoch; ``turn`` the turn it ended, when a turn took it."""

    number: int
    turn: int | None
    label: str | None
    time: float
    summary: Summary


@runtime_checkable
class Checkpoints(Protocol):
    """A tree that records its state and can go back to it (optional; ``temp_fs``, and
    ``cow_fs`` over a ``temp_fs`` upper). Numbers start at 1 and are never reused; an unknown
    number raises :class:`vfs.CheckpointNotFoundError` (``ENOENT``)."""

    async def checkpoint(self, label: str | None = None, *, turn: int | None = None) -> Checkpoint:
        """Record the tree's state now. Costs what changed since the last checkpoint (frozen
        nodes and file pages are shared between checkpoints), never the whole tree."""
        ...

    async def checkpoints(self) -> list[Checkpoint]:
        """The checkpoints kept, oldest first."""
        ...

    async def checkpoint_changes(self, a: int, b: int | None = None) -> list[TreeChange]:
        """How checkpoint ``b`` (``None``: the tree now) differs from checkpoint ``a``: the
        change-as-data ``cow_fs.changes()`` gives (renames as an add and a delete)."""
        ...

    async def checkpoint_diff(self, a: int, b: int | None = None) -> str:
        """The git-style diff of :meth:`checkpoint_changes`."""
        ...

    async def rewind(self, number: int) -> Checkpoint:
        """Make the tree checkpoint ``number`` at once, first recording the state now unless a
        kept checkpoint holds it (so a rewind can be undone); later checkpoints stay.
        Open files keep the file they had, as after a rename over it. Answers the checkpoint
        now shown."""
        ...

    async def rewind_replaces(self, number: int) -> list[str]:
        """The paths whose entries a rewind to checkpoint ``number`` may replace now: every
        path where the two states can differ, whether or not the bytes there do (a file
        written with the bytes it had is a new file all the same). A mount gives the files
        there keepers before a rewind, so that a descriptor held on one keeps it."""
        ...

    def on_rewind(self, hook: RewindHook) -> Callable[[], None]:
        """Call ``hook(paths)`` before every rewind, with what :meth:`rewind_replaces` answers
        then, and hold the context it returns around the change (a mount serving the tree
        gives the files there keepers, so a descriptor held across a rewind made through this
        API keeps its file too). Answers a function that removes the hook."""
        ...

    async def fork(self, number: int) -> FileSystem:
        """A new, independent tree starting at checkpoint ``number`` (over the same lower, for a
        cow), sharing storage with this one; its own checkpoints start with that state."""
        ...

    async def prune_checkpoints(self, keep_last: int) -> list[int]:
        """Forget every checkpoint but the labelled ones and the last ``keep_last``; answers the
        numbers forgotten."""
        ...


ChangeKind = Literal["content", "metadata", "entry"]

change_origin: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "vfs_change_origin", default=None
)
"""Who is changing the tree right now. A mount sets this while it serves a request, so the
changes it makes itself come back tagged with it and it does not invalidate its own work."""


@dataclass(frozen=True, slots=True)
class Change:
    """Something changed at ``path``.

    ``content``: the file's bytes (and size, mtime). ``metadata``: mode, owner or times.
    ``entry``: the name now points at something else or nothing (created, deleted, renamed from or
    to, or a whole subtree swapped); everything cached beneath ``path`` is stale too.
    """

    path: str
    kind: ChangeKind
    origin: object | None = field(default_factory=change_origin.get)


ChangeCallback = Callable[[Change], "Awaitable[None] | None"]
RewindHook = Callable[[list[str]], AbstractAsyncContextManager[None]]
"""What :meth:`Checkpoints.on_rewind` takes: given the paths a rewind may replace, a context
held around the change."""


@runtime_checkable
class Watchable(Protocol):
    """A tree that reports the changes made through it."""

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback`` for every change made through this tree; return an unsubscribe.

        The callback runs synchronously inside the changing call; if it returns an awaitable, the
        changing call awaits it before returning (see ``vfs._watch``).
        """
        ...
