"""``temp_fs``: an in-memory tree with the semantics of Linux tmpfs.

Theory of operation
-------------------
The tree is made of nodes: :class:`_Dir` (a dict of name -> node), :class:`_File` (a
``bytearray``) and :class:`_Symlink` (a target string). Every node carries its permission bits,
owner and nanosecond times, plus a back pointer to the directory holding it and its name there, so
the current path of any node (an open file after a rename, say) can be recomputed by walking up.
A node detached from the tree has no parent; its path is ``None`` and its changes are not reported.

Path resolution walks nodes segment by segment. The fast path handles paths without symlinks; the
first symlink that must be followed switches to a general resolver that keeps the stack of
directories it went through, so ``..`` in a link target is resolved physically, as the kernel
does. Relative targets resolve against the link's directory, absolute ones against this tree's
root; more than 40 links in one resolution raise ``ELOOP``. ``stat``, ``read``, ``write`` and
``open`` follow a final symlink; ``lstat``, ``unlink``, ``rename``, ``setattr`` and ``readlink``
do not. Creating through a dangling symlink creates its target, as ``open(O_CREAT)`` does.

Atomicity: the tree is used from one event loop and no method awaits between checking and
mutating, so every operation is atomic with respect to every other. Mutations are synchronous
helpers that return what changed; the async verbs then report those changes through
:class:`Observers` (after the change, before returning). Open files hold their node, so reads and
writes keep working after an unlink or a rename over the name, exactly like tmpfs.

Walks (``glob``, ``grep``) are a synchronous generator over per-directory sorted snapshots, in
exact path order: an entry ``name`` comes before its subtree ``name/...``, and a sibling
``name-x`` between the two. Snapshots are rebuilt lazily after a directory changes, never mutated,
so a walk that is suspended while the tree changes stays consistent. Long walks yield to the event
loop every few hundred entries.

POSIX details, as tmpfs: directories have ``nlink = 2 + subdirectories`` and ``size = 20 * (entries
+ 2)``; files and symlinks have ``nlink`` = their names (``link`` adds one: a node's first name is
its ``parent``/``name``, further ones are in ``others``, and a change to it is reported at every
name); a symlink's size is its target's length in bytes. Adding or
removing an entry updates the directory's mtime and ctime. ``atime`` follows ``relatime`` (updated
on read when not newer than mtime/ctime; without the daily refresh). Times come from the
kernel's coarse clock (``vfs._clock``), as tmpfs's do, so through a mount they never run
backwards against the times the kernel stamps itself. Sizes above ``max_file_size``
raise ``FileTooLargeError``; a growth larger than the memory available raises ``ENOSPC``.

Checkpoints (``vfs._frozen``, :class:`vfs.Checkpoints`): each node keeps the frozen node last
built for it (``frozen``) until it changes; :meth:`_Node.modified` / :meth:`_Node.changed` drop it
and those of the directories above every name of the node (a node without one has none above
it), so :meth:`TempFileSystem.frozen_root` rebuilds only the directories that hold a change (each
from the frozen directory it was and the names that changed in it, noted in ``dirty``), and a
file's pages are shared with the checkpoint until each is first written again. Freezing notes
what it rebuilt in the tree's :class:`vfs._frozen.FreezeLog`, so a checkpoint's summary (what
changed since the state the tree grew from) costs what changed, not a walk of the directories. A tree made from a
checkpoint (a fork, a view for a diff) thaws lazily: a thawed directory's ``children`` slot is
unset until first read (``_Dir.__getattr__`` thaws them), except where hard links are, which are
thawed together so one node gets all its names. :meth:`TempFileSystem.restore` (a rewind) walks
the live tree beside the frozen states, replacing only the entries that differ with new nodes
(an open file keeps its node) and keeping every directory that is in both.

Speed: ``stat`` is the hottest call under a mount, and building a frozen :class:`FileInfo` costs
more than resolving the path, so each node caches the last one it answered. Every change to what
a FileInfo shows goes through :meth:`_Node.modified` / :meth:`_Node.changed` (or clears ``info``
itself), which drop the cache.
"""

from __future__ import annotations

import builtins
import errno
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import ClassVar

import anyio.lowlevel

from ._checkpoints import BEFORE_REWIND, History, RewindHooks, changes_between, outermost, tally
from ._clock import now_ns
from ._content import decode_contents, encode_contents, is_image_path
from ._cow_changes import render_between
from ._cow_meta import TreeChange
from ._errors import (
    DirectoryNotEmptyError,
    FileExistsError,
    FileNotFoundError,
    FileTooLargeError,
    IsADirectoryError,
    NotADirectoryError,
    PathError,
)
from ._frozen import (
    Difference,
    FreezeLog,
    FrozenDir,
    FrozenFile,
    FrozenNode,
    FrozenSymlink,
    differences,
    frozen_kind,
    frozen_size,
)
from ._match import LineGrep, compile_glob, compile_grep, compile_grep_glob
from ._pages import NoSpace, Pages, Usage
from ._paths import ROOT, base_name, join_path, normalize_path, parent_path
from ._resolve import drive_sync, resolution
from ._types import (
    MISSING,
    SPECIAL_TYPE_BITS,
    ChangeCallback,
    ChangeKind,
    Checkpoint,
    DirEntry,
    DirListing,
    FileInfo,
    GrepQuery,
    GrepResult,
    Kind,
    NamedListing,
    RewindHook,
    SearchQuery,
    SearchResult,
    Special,
    Summary,
    dir_listing,
)
from ._walk import glob_start
from ._watch import Observers

DEFAULT_MAX_FILE_SIZE = 1 << 40
_DIRENT_SIZE = 20  # tmpfs's BOGO_DIRENT_SIZE
_CHECKPOINT_EVERY = 256  # entries walked between yields to the event loop
_LARGE_GROWTH = 64 << 20  # growths above this are checked against available memory

# (directory holding the name, the name, what changed); turned into paths only when watched.
_Changes = list[tuple["_Dir", str, ChangeKind]]


_SERIALS = itertools.count(1)


class _Node:
    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "frozen",
        "gid",
        "info",
        "mode",
        "mtime_ns",
        "name",
        "others",
        "parent",
        "serial",
        "uid",
    )
    kind: ClassVar[Kind]

    def __init__(self, mode: int, uid: int, gid: int, now: int) -> None:
        self.mode = mode & 0o7777
        self.uid = uid
        self.gid = gid
        self.atime_ns = self.mtime_ns = self.ctime_ns = now
        self.parent: _Dir | None = None
        self.name = ""
        # A file's further names (hard links), besides ``parent``/``name``; never a directory's.
        self.others: list[tuple[_Dir, str]] | None = None
        # Given when it first gets a second name: its FileInfo.file_id (never reused).
        self.serial = 0
        # The FileInfo last built for this node; every change to what it shows clears it.
        self.info: FileInfo | None = None
        # The frozen node last built for it (a checkpoint); every change clears it, and its
        # ancestors' (see vfs._frozen): a node without one has none above it either.
        self.frozen: FrozenNode | None = None

    def names(self) -> list[tuple[_Dir, str]]:
        """Every ``(directory, name)`` this node is linked as (none once detached)."""
        first = [] if self.parent is None else [(self.parent, self.name)]
        return first if self.others is None else first + self.others

    def modified(self, now: int) -> None:
        """The contents (or entries) changed."""
        self.mtime_ns = self.ctime_ns = now
        self.info = None
        if self.frozen is not None:
            self.thaw_up()

    def changed(self, now: int) -> None:
        """The inode changed (metadata, links) but not its contents."""
        self.ctime_ns = now
        self.info = None
        if self.frozen is not None:
            self.thaw_up()

    def thaw_up(self) -> None:
        """Drop the frozen node of this node and of every directory above each of its names,
        noting in each directory which of its names changed (see :meth:`_Dir.note`)."""
        if isinstance(self, _Dir):
            self.was = _frozen_dir(self.frozen)
        self.frozen = None
        for directory, name in self.names():
            directory.dirty.add(name)
            current = directory
            while current.frozen is not None:
                current.was = _frozen_dir(current.frozen)
                current.frozen = None
                parent = current.parent
                if parent is None:
                    break
                parent.dirty.add(current.name)
                current = parent


def _frozen_dir(frozen: FrozenNode | None) -> FrozenDir | None:
    return frozen if isinstance(frozen, FrozenDir) else None


class _File(_Node):
    __slots__ = ("data",)
    kind = "file"

    def __init__(self, mode: int, uid: int, gid: int, now: int, data: Pages) -> None:
        super().__init__(mode, uid, gid, now)
        self.data = data


class _Special(_File):
    """A FIFO, socket or device node: only metadata (a mount's kernel serves what it does);
    through the API it reads as an empty file and refuses writes."""

    __slots__ = ("rdev", "special")

    def __init__(
        self, mode: int, uid: int, gid: int, now: int, special: Special, rdev: int
    ) -> None:
        super().__init__(mode, uid, gid, now, Pages())
        self.special = special
        self.rdev = rdev


class _Symlink(_Node):
    __slots__ = ("size", "target")
    kind = "symlink"

    def __init__(self, uid: int, gid: int, now: int, target: str) -> None:
        super().__init__(0o777, uid, gid, now)
        self.target = target
        self.size = len(target.encode("utf-8", "surrogateescape"))


class _Dir(_Node):
    __slots__ = ("_listing", "_order", "_source", "children", "dirty", "subdirs", "was")
    kind = "directory"

    def __init__(self, mode: int, uid: int, gid: int, now: int) -> None:
        super().__init__(mode, uid, gid, now)
        self.children: dict[str, _Node] = {}
        self.subdirs = 0
        # Since ``frozen`` was dropped: the frozen node it was (None: never frozen, or rebuilt)
        # and the names whose entries changed since, so freezing again copies ``was``'s
        # children and rebuilds only those (O(changed), not O(entries)).
        self.was: FrozenDir | None = None
        self.dirty: set[str] = set()
        self._listing: list[tuple[str, _Node]] | None = None
        self._order: list[tuple[str, _Node, _Dir | None]] | None = None
        # A directory thawed from a checkpoint gets its children when first asked for them
        # (``children`` unset until then): the frozen directory and the usage to count in.
        self._source: tuple[FrozenDir, Usage | None] | None = None

    def __getattr__(self, name: str) -> dict[str, _Node]:
        # Only an unset slot reaches here: ``children`` of a directory thawed lazily.
        if name == "children" and self._source is not None:
            return self.materialize({})
        raise AttributeError(name)

    def materialize(
        self, memo: dict[int, _Node], linked: list[_Dir] | None = None
    ) -> dict[str, _Node]:
        """Thaw the children of a directory thawed lazily (``memo``: the linked nodes thawed
        so far, by frozen node, so that a hard-linked file gets all its names back), and
        those of every directory beneath that holds a hard link. ``linked``: where to leave
        those directories instead, for the caller that is thawing them (one loop, not one
        call per level: an agent's tree may be deeper than Python's recursion limit)."""
        source = self._source
        assert source is not None
        frozen, usage = source
        self._source = None
        children: dict[str, _Node] = {}
        self.children = children
        beneath: list[_Dir] = [] if linked is None else linked
        for name, child in frozen.children.items():
            node = memo.get(id(child)) if child.linked else None
            if node is None:
                node = _thawed(child, usage, memo, beneath)
            children[name] = node
            if node.parent is None:
                node.parent = self
                node.name = name
            elif node.others is None:
                node.others = [(self, name)]
            else:
                node.others.append((self, name))
        if linked is None:
            while beneath:
                beneath.pop().materialize(memo, beneath)
        return children

    def add(self, name: str, node: _Node, now: int) -> None:
        """Link ``node`` as ``name`` (a further name when it has one already: a hard link);
        the caller has removed any previous entry of that name."""
        self.children[name] = node
        self.dirty.add(name)
        if node.parent is None:
            node.parent = self
            node.name = name
        elif node.others is None:
            node.others = [(self, name)]
            if not node.serial:
                node.serial = next(_SERIALS)
        else:
            node.others.append((self, name))
        if isinstance(node, _Dir):
            self.subdirs += 1
        self._changed(now)

    def remove(self, name: str, now: int) -> _Node:
        """Unlink ``name``; a node with further names keeps them (one takes the first place)."""
        node = self.children.pop(name)
        self.dirty.add(name)
        others = node.others
        if node.parent is self and node.name == name:
            if others:
                node.parent, node.name = others.pop(0)
            else:
                node.parent = None
        elif others is not None:
            others.remove((self, name))
        if others is not None and not others:
            node.others = None
        if isinstance(node, _Dir):
            self.subdirs -= 1
        self._changed(now)
        return node

    def _changed(self, now: int) -> None:
        self.modified(now)
        self._listing = None
        self._order = None

    def listing(self) -> list[tuple[str, _Node]]:
        """``(name, node)`` sorted by name: a snapshot, never mutated after it is built."""
        if self._listing is None:
            self._listing = sorted(self.children.items(), key=itemgetter(0))
        return self._listing

    def order(self) -> list[tuple[str, _Node, _Dir | None]]:
        """Walk order: ``(name, node, None)`` per entry and ``(name + "/", dir, dir)`` per
        subdirectory, sorted by that key, so a subtree sorts exactly where its paths do."""
        if self._order is None:
            keyed: list[tuple[str, _Node, _Dir | None]] = []
            for name, node in self.children.items():
                keyed.append((name, node, None))
                if isinstance(node, _Dir):
                    keyed.append((name + "/", node, node))
            keyed.sort(key=itemgetter(0))
            self._order = keyed
        return self._order


def _iter_tree(start: _Dir, path: str, max_depth: int | None) -> Iterator[tuple[str, _Node]]:
    """``(path, node)`` of every entry beneath ``start`` (at ``path``), in path order.

    Symlinks are yielded, never descended. ``max_depth`` 1 means direct children only.
    """
    if max_depth is not None and max_depth <= 0:
        return
    stack = [(iter(start.order()), "/" if path == ROOT else path + "/", 1)]
    while stack:
        entries, prefix, depth = stack[-1]
        for key, node, subdir in entries:
            if subdir is None:
                yield prefix + key, node
            elif max_depth is None or depth < max_depth:
                stack.append((iter(subdir.order()), prefix + key, depth + 1))
                break
        else:
            stack.pop()


def _info(node: _Node) -> FileInfo:
    info = node.info
    if info is None:
        info = node.info = _build_info(node)
    return info


def _build_info(node: _Node) -> FileInfo:
    if isinstance(node, _File):
        kind: Kind = "file"
        size = len(node.data)
        nlink = 1 if node.others is None else 1 + len(node.others)
    elif isinstance(node, _Dir):
        kind = "directory"
        size = _DIRENT_SIZE * (len(node.children) + 2)
        nlink = 2 + node.subdirs
    else:
        assert isinstance(node, _Symlink)
        kind = "symlink"
        size = node.size
        nlink = 1 if node.others is None else 1 + len(node.others)
    special, rdev = (node.special, node.rdev) if isinstance(node, _Special) else (None, 0)
    file_id = None if node.others is None else node.serial
    blocks = node.data.blocks() if isinstance(node, _File) else None
    # Positional: keywords cost ~0.5 us more, and this runs for every entry a mount lists after
    # a change.
    return FileInfo(
        kind,
        size,
        0.0,
        node.mode,
        node.mtime_ns,
        node.uid,
        node.gid,
        node.atime_ns,
        node.ctime_ns,
        nlink,
        special,
        rdev,
        file_id,
        blocks,
    )


def _accessed(node: _Node) -> None:
    # relatime: only an atime that is not newer than the last change moves.
    if node.atime_ns <= node.mtime_ns or node.atime_ns <= node.ctime_ns:
        node.atime_ns = now_ns()
        node.info = None


def _freeze(node: _Node, found: list[Difference] | None = None, path: str = ROOT) -> FrozenNode:
    """The frozen node of ``node`` now: the one it keeps when unchanged, else built from the
    frozen nodes of its children (see vfs._frozen). ``found`` (a directory that was frozen
    before, at ``path``): where to note every difference from the frozen node it was, as
    :func:`vfs._frozen.differences` would answer them, without walking unchanged names.

    Children are frozen before their parents without recursion (an agent's tree may be deeper
    than Python's recursion limit): first the nodes to freeze, each with where it notes its
    differences, in the order a recursive walk would finish them; then each is built."""
    if node.frozen is not None:
        return node.frozen
    order: list[tuple[_Node, list[Difference] | None, str]] = []
    noting: set[int] = set()  # directories that note their own differences in ``found``
    pending: list[tuple[_Node, list[Difference] | None, str, bool]] = [(node, found, path, False)]
    while pending:
        current, notes, at, children_done = pending.pop()
        if children_done:
            order.append((current, notes, at))
            continue
        pending.append((current, notes, at, True))
        if not isinstance(current, _Dir):
            continue
        was = current.was
        if was is None:
            for child in current.children.values():
                if child.frozen is None:
                    pending.append((child, None, ROOT, False))
            continue
        before = was.children
        for name in current.dirty:
            entry = current.children.get(name)
            if entry is None or entry.frozen is not None:
                continue
            then = before.get(name)
            if notes is not None and then is not None and _was(entry) is then:
                # the same directory, changed: it notes its own differences (see _built)
                noting.add(id(entry))
                pending.append((entry, notes, join_path(at, name), False))
            else:
                pending.append((entry, None, ROOT, False))
    for current, notes, at in order:
        if current.frozen is None:  # (a hard-linked file is reached once per name)
            current.frozen = _built(current, notes, at, noting)
    assert node.frozen is not None
    return node.frozen


def _built(node: _Node, found: list[Difference] | None, path: str, noting: set[int]) -> FrozenNode:
    """The frozen node of ``node``, whose children are frozen already (see :func:`_freeze`)."""
    times = (node.mode, node.uid, node.gid, node.atime_ns, node.mtime_ns, node.ctime_ns)
    if isinstance(node, _Dir):
        live = node.children
        was = node.was
        children: dict[str, FrozenNode]
        if was is None:
            children = {name: _frozen_child(child) for name, child in live.items()}
            linked = any(child.linked for child in children.values())
        else:  # only the names that changed (see _Dir.was)
            before = was.children
            children = dict(before)
            for name in node.dirty:
                child = live.get(name)
                then = before.get(name)
                now: FrozenNode | None
                if child is None:
                    children.pop(name, None)
                    now = None
                else:
                    now = children[name] = _frozen_child(child)
                    if id(child) in noting and found is not None:
                        # it noted its own differences as it was built
                        found.append((join_path(path, name), then, now))
                        continue
                if found is not None and then is not now:
                    if isinstance(then, FrozenDir) or isinstance(now, FrozenDir):
                        found.extend(differences(then, now, join_path(path, name)))
                    else:  # what differences() answers for two entries that are not directories
                        found.append((join_path(path, name), then, now))
            if was.linked:
                linked = any(child.linked for child in children.values())
            else:
                linked = any(children[name].linked for name in node.dirty if name in children)
        node.was = None
        node.dirty = set()
        return FrozenDir(*times, node.serial, linked, children, node.subdirs)
    if isinstance(node, _Special):
        return FrozenFile(
            *times, node.serial, node.others is not None, node.data, node.special, node.rdev
        )
    if isinstance(node, _File):
        return FrozenFile(*times, node.serial, node.others is not None, node.data.freeze(), None, 0)
    assert isinstance(node, _Symlink)
    return FrozenSymlink(*times, node.serial, node.others is not None, node.target)


def _frozen_child(child: _Node) -> FrozenNode:
    frozen = child.frozen
    assert frozen is not None  # (frozen before its parent)
    return frozen


def _was(node: _Node) -> FrozenDir | None:
    return node.was if isinstance(node, _Dir) else None


def _thawed(
    frozen: FrozenNode,
    usage: Usage | None,
    memo: dict[int, _Node],
    linked: list[_Dir] | None = None,
) -> _Node:
    """A new live node showing ``frozen``: a directory's children are thawed when first
    reached, except where hard links are (their names are found together, through ``memo``;
    a directory holding one is thawed now, or left in ``linked`` for the caller to thaw: see
    :meth:`_Dir.materialize`)."""
    node: _Node
    if isinstance(frozen, FrozenDir):
        directory = _Dir(frozen.mode, frozen.uid, frozen.gid, 0)
        del directory.children
        directory.subdirs = frozen.subdirs
        directory._source = (frozen, usage)
        node = directory
    elif isinstance(frozen, FrozenFile):
        if frozen.special is not None:
            node = _Special(frozen.mode, frozen.uid, frozen.gid, 0, frozen.special, frozen.rdev)
        else:
            node = _File(frozen.mode, frozen.uid, frozen.gid, 0, frozen.data.thaw(usage))
    else:
        assert isinstance(frozen, FrozenSymlink)
        node = _Symlink(frozen.uid, frozen.gid, 0, frozen.target)
        node.mode = frozen.mode
    node.atime_ns, node.mtime_ns, node.ctime_ns = frozen.atime_ns, frozen.mtime_ns, frozen.ctime_ns
    node.serial = frozen.serial
    node.frozen = frozen
    if frozen.linked:
        if isinstance(node, _Dir):
            if linked is None:
                node.materialize(memo)
            else:
                linked.append(node)
        else:
            memo[id(frozen)] = node
    return node


def _keep_linked(live: _Dir, current: FrozenDir, target: FrozenDir, memo: dict[int, _Node]) -> None:
    """Put in ``memo`` every hard-linked live node a restore keeps where it is (the same frozen
    node in both states), so that its names elsewhere in ``target`` name it too."""
    pending = [(live, current, target)]
    while pending:  # (no recursion: an agent's tree may be deeper than Python's limit)
        directory, now_dir, then_dir = pending.pop()
        for name, now in now_dir.children.items():
            if not now.linked:
                continue
            then = then_dir.children.get(name)
            node = directory.children[name]
            if now is then:
                if isinstance(node, _Dir):
                    for child in _linked_beneath(node):
                        assert child.frozen is not None
                        memo[id(child.frozen)] = child
                else:
                    memo[id(now)] = node
            elif isinstance(now, FrozenDir) and isinstance(then, FrozenDir):
                assert isinstance(node, _Dir)
                pending.append((node, now, then))


def _linked_beneath(directory: _Dir) -> Iterator[_Node]:
    pending = [directory]
    while pending:
        for child in pending.pop().children.values():
            frozen = child.frozen
            if frozen is not None and frozen.linked:
                if isinstance(child, _Dir):
                    pending.append(child)
                else:
                    yield child


def _within(node: _Dir, ancestor: _Dir) -> bool:
    """Whether ``node`` is ``ancestor`` or lies beneath it."""
    current: _Dir | None = node
    while current is not None:
        if current is ancestor:
            return True
        current = current.parent
    return False


def default_max_bytes() -> int | None:
    """What a ``temp_fs`` may store by default: half the machine's memory, as tmpfs allows (past
    it, writes fail with ``ENOSPC`` rather than the kernel killing the process)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (OSError, ValueError):
        return None


def _available_memory() -> int | None:
    """Bytes of memory the kernel says are available (``MemAvailable``), if it says."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


class TempFileSystem:
    """An in-memory tree: the eight verbs, the POSIX extension and change notifications."""

    # Writes reach the node at once; flush and close have nothing to deliver.
    buffers_writes = False

    def __init__(
        self,
        files: Mapping[str, str | bytes] | None = None,
        *,
        uid: int | None = None,
        gid: int | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        max_bytes: int | None = None,
    ) -> None:
        self._uid = os.getuid() if uid is None else uid
        self._gid = os.getgid() if gid is None else gid
        self._max_file_size = max_file_size
        self._usage = Usage(default_max_bytes() if max_bytes is None else max_bytes)
        self._root = _Dir(0o755, self._uid, self._gid, now_ns())
        self._observers = Observers()
        self._grep_files_read = 0  # files grep has looked into (tests prove early stop with it)
        self._history: History[FrozenDir] = History()
        self._log = FreezeLog()  # what changed since the state the tree grew from
        self._rewind_hooks = RewindHooks()
        for path, contents in (files or {}).items():
            self._write(normalize_path(path), encode_contents(contents))

    def __repr__(self) -> str:
        return f"temp_fs(<{len(self._root.children)} top-level entries>)"

    def space(self) -> tuple[int | None, int]:
        """The most bytes the files may store (``None``: no limit) and what they store now."""
        return self._usage.limit, self._usage.used

    def _pages(self, data: bytes = b"", path: str = ROOT) -> Pages:
        """New file content counted in this tree's usage (``ENOSPC`` past its limit)."""
        try:
            return Pages(data, self._usage)
        except NoSpace:
            raise PathError(path, errno=errno.ENOSPC) from None

    # -- resolution -------------------------------------------------------------------------

    def _lookup(self, path: str, follow: bool) -> tuple[_Dir, str, _Node | None]:
        """``(directory, name, node)`` for a normalized path; ``node`` is None when missing.

        Intermediate segments always follow symlinks; the final one when ``follow``. Raises
        ``FileNotFoundError``/``NotADirectoryError`` for a missing/non-directory intermediate,
        ``PathError(ELOOP)`` for too many links. The root answers ``(root, "", root)``.
        """
        root = self._root
        if path == ROOT:
            return root, "", root
        parts = path[1:].split("/")
        name = parts.pop()
        directory = root
        for segment in parts:
            child = directory.children.get(segment)
            if isinstance(child, _Dir):
                directory = child
            elif child is None:
                raise FileNotFoundError(path)
            elif isinstance(child, _Symlink):
                return self._lookup_links(path, follow)
            else:
                raise NotADirectoryError(path)
        node = directory.children.get(name)
        if follow and isinstance(node, _Symlink):
            return self._lookup_links(path, follow)
        return directory, name, node

    def _lookup_links(self, path: str, follow: bool) -> tuple[_Dir, str, _Node | None]:
        """:meth:`_lookup` for paths that go through symlinks, by :mod:`vfs._resolve`'s rules."""
        dirs: dict[str, _Dir] = {ROOT: self._root}  # the real directories walked through

        def kind(real: str) -> Kind:
            node = dirs[parent_path(real)].children.get(base_name(real))
            if isinstance(node, _Dir):
                dirs[real] = node
                return "directory"
            if node is None:
                return "missing"
            return "symlink" if isinstance(node, _Symlink) else "file"

        def target(real: str) -> str:
            node = dirs[parent_path(real)].children[base_name(real)]
            assert isinstance(node, _Symlink)
            return node.target

        found = drive_sync(resolution(path, follow=follow), kind, target).check(path)
        if found.path == ROOT:
            return self._root, "", self._root
        directory = dirs[parent_path(found.path)]
        name = base_name(found.path)
        return directory, name, directory.children.get(name)

    def _find(self, path: str) -> _Node | None:
        """The node at ``path`` following symlinks, or None for anything unresolvable."""
        try:
            return self._lookup(path, True)[2]
        except PathError:  # missing or non-directory intermediate, or a symlink loop
            return None

    def _path_of(self, node: _Node) -> str | None:
        """The current path of ``node``; None once it is detached from the tree."""
        names = []
        while node.parent is not None:
            names.append(node.name)
            node = node.parent
        if node is not self._root:
            return None
        names.reverse()
        return "/" + "/".join(names)

    async def _emit(self, changes: _Changes) -> None:
        if not self._observers:
            return
        for directory, name, kind in changes:
            where = self._path_of(directory)
            if where is not None:
                await self._observers.emit(join_path(where, name) if name else where, kind)

    async def _emit_node(self, node: _Node, kind: ChangeKind) -> None:
        """Report a change to ``node`` at each of its names (a hard-linked file has several)."""
        if self._observers:
            if node.others is None:
                where = self._path_of(node)
                if where is not None:
                    await self._observers.emit(where, kind)
            else:
                await self._emit([(directory, name, kind) for directory, name in node.names()])

    def _check_size(self, path: str, size: int, stored: int) -> None:
        """Refuse a file of ``size`` bytes past the limit, and ``stored`` new bytes to keep
        (holes cost none) past the memory there is."""
        if size < 0:
            raise PathError(path, errno=errno.EINVAL)
        if size > self._max_file_size:
            raise FileTooLargeError(path)
        if stored > _LARGE_GROWTH:
            available = _available_memory()
            if available is not None and stored > available:
                raise PathError(path, errno=errno.ENOSPC)

    def _resize(self, node: _File, size: int, path: str, now: int) -> None:
        data = node.data
        if size < 0:
            raise PathError(path, errno=errno.EINVAL)
        if size > self._max_file_size:
            raise FileTooLargeError(path)
        data.truncate(size)  # growing stores nothing: a hole
        node.modified(now)

    # -- the eight verbs --------------------------------------------------------------------

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        node = self._find(path)
        if not isinstance(node, _Dir):
            return
        base = "/" if path == ROOT else path + "/"
        for index, (name, child) in enumerate(node.listing(), start=1):
            yield DirEntry(base + name, child.kind)
            if index % 1024 == 0:
                await anyio.lowlevel.checkpoint()

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        try:
            node = self._lookup(path, True)[2]
        except (FileNotFoundError, NotADirectoryError):
            return MISSING
        return MISSING if node is None else _info(node)

    async def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        directory = normalize_path(dir)
        plan = compile_glob(pattern)
        start = await glob_start(self.lstat, directory, plan.literal_prefix)
        if start is None:
            return
        node = self._find(start)
        if not isinstance(node, _Dir):
            return
        depth = None if plan.max_depth is None else plan.max_depth - len(plan.literal_prefix)
        match = plan.match
        cut = 1 if directory == ROOT else len(directory) + 1
        for walked, (path, child) in enumerate(_iter_tree(node, start, depth), start=1):
            if match(path[cut:]):
                yield DirEntry(path, child.kind)
            if walked % _CHECKPOINT_EVERY == 0:
                await anyio.lowlevel.checkpoint()

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        try:
            node = self._lookup(path, True)[2]
        except NotADirectoryError:
            raise FileNotFoundError(path) from None
        if node is None:
            raise FileNotFoundError(path)
        if not isinstance(node, _File):
            raise IsADirectoryError(path)
        _accessed(node)
        return decode_contents(path, node.data.tobytes())

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = normalize_path(query.path)
        regex = compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        limit = query.max_results
        if limit is not None and limit <= 0:
            return
        file_filter = compile_grep_glob(query.glob)
        node = self._find(root)
        entries: Iterator[tuple[str, _Node]]
        if isinstance(node, _File):
            entries = iter([(root, node)])
        elif isinstance(node, _Dir):
            entries = _iter_tree(node, root, None)
        else:
            return
        cut = 1 if root == ROOT else len(root) + 1
        count = 0
        budget = _CHECKPOINT_EVERY
        for path, child in entries:
            budget -= 1
            if budget <= 0:
                budget = _CHECKPOINT_EVERY
                await anyio.lowlevel.checkpoint()
            if not isinstance(child, _File) or is_image_path(path):
                continue
            if file_filter is not None and not file_filter(
                base_name(path) if path == root else path[cut:]
            ):
                continue
            data = child.data
            self._grep_files_read += 1
            budget -= len(data) >> 16  # and once per 16 MiB scanned
            lines = LineGrep(regex)  # a chunk at a time; binary skipped, as ripgrep does
            for chunk in data.chunks():
                for number, line in lines.feed(chunk):
                    yield GrepResult(path, number, line)
                    count += 1
                    if limit is not None and count >= limit:
                        return
                if lines.binary:
                    break
            else:
                for number, line in lines.end():
                    yield GrepResult(path, number, line)
                    count += 1
                    if limit is not None and count >= limit:
                        return

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        changes = self._write(path, encode_contents(contents))
        if self._observers:
            await self._emit(changes)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        try:
            directory, name, node = self._lookup(path, False)
        except NotADirectoryError:
            raise FileNotFoundError(path) from None
        if node is None:
            raise FileNotFoundError(path)
        if isinstance(node, _Dir) and node.children:
            raise DirectoryNotEmptyError(path)
        directory.remove(name, now_ns())
        if self._observers:
            await self._emit([(directory, name, "entry")])
            if node.parent is not None:  # its other names count one link fewer
                await self._emit_node(node, "metadata")

    async def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        normalize_path(query.path)
        return
        yield  # an async generator that yields nothing: this tree has no index

    def _write(self, path: str, data: bytes) -> _Changes:
        """Create or overwrite a file, creating missing parent directories."""
        if path == ROOT:
            raise IsADirectoryError(path)
        if len(data) > self._max_file_size:
            raise FileTooLargeError(path)
        changes: _Changes = []
        try:
            directory, name, node = self._lookup(path, True)
        except FileNotFoundError:
            self._make_parents(path, changes)
            directory, name, node = self._lookup(path, True)
        now = now_ns()
        if node is None:
            content = self._pages(data, path)
            directory.add(name, _File(0o644, self._uid, self._gid, now, content), now)
            changes.append((directory, name, "entry"))
        elif isinstance(node, _Special):
            raise PathError(path, errno=errno.EPERM)  # it holds no bytes to change
        elif isinstance(node, _File):
            node.data = self._pages(data, path)
            node.modified(now)
            changes.extend((directory, name, "content") for directory, name in node.names())
        else:
            raise IsADirectoryError(path)
        return changes

    def _make_parents(self, path: str, changes: _Changes) -> None:
        """``mkdir -p`` of the directory holding ``path``; errors are about ``path``."""
        parts = path[1:].split("/")[:-1]
        prefix = ""
        for segment in parts:
            prefix = prefix + "/" + segment
            try:
                directory, name, node = self._lookup(prefix, True)
            except PathError as error:
                raise error.with_path(path) from None
            if isinstance(node, _Dir):
                continue
            if node is not None:
                raise NotADirectoryError(path)
            if self._lookup(prefix, False)[2] is not None:
                raise FileNotFoundError(path)  # a dangling symlink: mkdir -p does not follow it
            now = now_ns()
            directory.add(name, _Dir(0o755, self._uid, self._gid, now), now)
            changes.append((directory, name, "entry"))

    # -- the POSIX extension ----------------------------------------------------------------

    async def lstat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        try:
            node = self._lookup(path, False)[2]
        except (FileNotFoundError, NotADirectoryError):
            return MISSING
        return MISSING if node is None else _info(node)

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        path = normalize_path(prefix)
        return dir_listing(path, self._children(path))

    async def list_info_reusing(self, prefix: str, known: Mapping[str, FileInfo]) -> NamedListing:
        # Each node keeps its own FileInfo until it changes: exact and cheap, so ``known`` is
        # not needed; by name, without a DirEntry a mount would take apart again.
        return self._children(normalize_path(prefix))

    def _children(self, path: str) -> NamedListing:
        node = self._find(path)
        if not isinstance(node, _Dir):
            return []
        return [(name, _info(child)) for name, child in node.listing()]

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
    ) -> TempOpenFile:
        path = normalize_path(path)
        if create and exclusive and self._lookup(path, False)[2] is not None:
            raise FileExistsError(path)  # O_EXCL does not follow a final symlink
        directory, name, node = self._lookup(path, True)
        now = now_ns()
        if node is None:
            if not create:
                raise FileNotFoundError(path)
            owner = self._uid if uid is None else uid
            group = self._gid if gid is None else gid
            node = _File(mode, owner, group, now, self._pages())
            directory.add(name, node, now)
            if self._observers:
                await self._emit([(directory, name, "entry")])
        elif not isinstance(node, _File):
            raise IsADirectoryError(path)
        elif isinstance(node, _Special) and (write or truncate):
            raise PathError(path, errno=errno.EPERM)  # it holds no bytes to change
        elif truncate:
            node.data = self._pages()
            node.modified(now)
            await self._emit_node(node, "content")
        return TempOpenFile(self, node, path)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        await self._add_new(
            normalize_path(path), uid, gid, lambda owner, group, now: _Dir(mode, owner, group, now)
        )

    async def _add_new(
        self, path: str, uid: int | None, gid: int | None, build: Callable[[int, int, int], _Node]
    ) -> None:
        """Add ``build(owner, group, now)`` at the free name ``path`` (mkdir, symlink, mknod)."""
        directory, name, node = self._lookup(path, False)
        if node is not None:
            raise FileExistsError(path)
        now = now_ns()
        owner = self._uid if uid is None else uid
        group = self._gid if gid is None else gid
        directory.add(name, build(owner, group, now), now)
        if self._observers:
            await self._emit([(directory, name, "entry")])

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        directory, name, node = self._lookup(path, False)
        if node is None:
            raise FileNotFoundError(path)
        if not isinstance(node, _Dir):
            raise NotADirectoryError(path)
        if node.children:
            raise DirectoryNotEmptyError(path)
        directory.remove(name, now_ns())
        if self._observers:
            await self._emit([(directory, name, "entry")])
            if node.parent is not None:  # its other names count one link fewer
                await self._emit_node(node, "metadata")

    async def unlink(self, path: str) -> None:
        path = normalize_path(path)
        directory, name, node = self._lookup(path, False)
        if node is None:
            raise FileNotFoundError(path)
        if isinstance(node, _Dir):
            raise IsADirectoryError(path)
        now = now_ns()
        directory.remove(name, now)
        node.changed(now)
        if self._observers:
            await self._emit([(directory, name, "entry")])
            if node.parent is not None:  # its other names count one link fewer
                await self._emit_node(node, "metadata")

    async def unlink_keeping(self, path: str, *, write: bool = False) -> TempOpenFile | None:
        """:meth:`unlink`, answering an open file of the removed node when it held bytes (see
        :class:`vfs.lowlevel.UnlinksKeeping`): the node itself outlives its name."""
        path = normalize_path(path)
        node = self._lookup(path, False)[2]
        await self.unlink(path)
        if not isinstance(node, _File) or isinstance(node, _Special):
            return None
        return TempOpenFile(self, node, path)

    async def link(self, src: str, dst: str) -> None:
        """A further name for the file, symlink or special file at ``src`` (not followed), as
        ``link(2)``: both names then show one node, and ``nlink`` counts them."""
        src = normalize_path(src)
        dst = normalize_path(dst)
        # Both parents resolve before the source must exist, as in Linux's linkat.
        node = self._lookup(src, False)[2]
        directory, name, taken = self._lookup(dst, False)
        if node is None:
            raise FileNotFoundError(src)
        if taken is not None or dst == ROOT:
            raise FileExistsError(dst)
        if isinstance(node, _Dir):
            raise PathError(src, errno=errno.EPERM)  # no hard links to directories
        now = now_ns()
        directory.add(name, node, now)
        node.changed(now)
        if self._observers:
            await self._emit([(directory, name, "entry")])
            await self._emit_node(node, "metadata")  # every name: one link more, a new ctime

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        if noreplace and exchange:
            raise PathError(src, errno=errno.EINVAL)
        if src == ROOT or dst == ROOT:
            raise PathError(ROOT, errno=errno.EBUSY)
        # Both parents resolve before the source must exist, as in Linux's renameat2.
        src_dir, src_name, node = self._lookup(src, False)
        dst_dir, dst_name, victim = self._lookup(dst, False)
        if node is None:
            raise FileNotFoundError(src)
        if victim is not None and noreplace:
            raise FileExistsError(dst)
        if victim is None and exchange:
            raise FileNotFoundError(dst)
        if victim is node:
            return  # the same entry (or the same node under two names): rename(2) does nothing
        # Neither may move into its own subtree (checked before the kinds, as Linux does).
        if isinstance(node, _Dir) and _within(dst_dir, node):
            raise PathError(src, errno=errno.EINVAL)
        if isinstance(victim, _Dir) and _within(src_dir, victim):
            if exchange:
                raise PathError(dst, errno=errno.EINVAL)
            raise DirectoryNotEmptyError(dst)
        now = now_ns()
        if exchange:
            assert victim is not None
            src_dir.remove(src_name, now)
            dst_dir.remove(dst_name, now)
            dst_dir.add(dst_name, node, now)
            src_dir.add(src_name, victim, now)
            victim.changed(now)
        else:
            if victim is not None:
                if isinstance(node, _Dir) and not isinstance(victim, _Dir):
                    raise NotADirectoryError(dst)
                if not isinstance(node, _Dir) and isinstance(victim, _Dir):
                    raise IsADirectoryError(dst)
                if isinstance(victim, _Dir) and victim.children:
                    raise DirectoryNotEmptyError(dst)
                dst_dir.remove(dst_name, now)
                victim.changed(now)
            src_dir.remove(src_name, now)
            dst_dir.add(dst_name, node, now)
        node.changed(now)
        if self._observers:
            await self._emit([(src_dir, src_name, "entry"), (dst_dir, dst_name, "entry")])
            if victim is not None and not exchange and victim.parent is not None:
                await self._emit_node(victim, "metadata")  # replaced here, linked elsewhere

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
        node = self._lookup(path, False)[2]
        if node is None:
            raise FileNotFoundError(path)
        now = now_ns()
        if size is not None:
            if isinstance(node, _Dir):
                raise IsADirectoryError(path)
            if not isinstance(node, _File) or isinstance(node, _Special):
                raise PathError(path, errno=errno.EINVAL)
            self._resize(node, size, path, now)  # validates before it changes anything
        if mode is not None:
            node.mode = mode & 0o7777
        if uid is not None:
            node.uid = uid
        if gid is not None:
            node.gid = gid
        if atime_ns is not None:
            node.atime_ns = atime_ns
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
        node.changed(now)
        if self._observers:
            if size is not None:
                await self._emit_node(node, "content")
            if (mode, uid, gid, atime_ns, mtime_ns) != (None, None, None, None, None):
                await self._emit_node(node, "metadata")
        return _info(node)

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        if not target:
            raise FileNotFoundError(path)  # symlink(2) refuses an empty target
        if "\0" in target:
            raise PathError(path, errno=errno.EINVAL)
        await self._add_new(
            path, uid, gid, lambda owner, group, now: _Symlink(owner, group, now, target)
        )

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
        path = normalize_path(path)
        if special not in SPECIAL_TYPE_BITS:
            raise PathError(path, errno=errno.EINVAL)
        device = rdev if special in ("char", "block") else 0
        await self._add_new(
            path,
            uid,
            gid,
            lambda owner, group, now: _Special(mode, owner, group, now, special, device),
        )

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        node = self._lookup(path, False)[2]
        if node is None:
            raise FileNotFoundError(path)
        if not isinstance(node, _Symlink):
            raise PathError(path, errno=errno.EINVAL)
        return node.target

    # -- Checkpoints ------------------------------------------------------------------------

    def frozen_root(self) -> FrozenDir:
        """The tree's state now, frozen: O(changed since the last time it was asked)."""
        root = self._root
        if root.frozen is not None:
            assert isinstance(root.frozen, FrozenDir)
            return root.frozen
        was = root.was
        if was is None:  # never frozen
            state = _freeze(root)
            assert isinstance(state, FrozenDir)
            self._log.restart(state)
            return state
        found: list[Difference] = []
        state = _freeze(root, found)
        assert isinstance(state, FrozenDir)
        found.append((ROOT, was, state))
        self._log.extend(was, state, found)
        return state

    def state_differences(self, old: FrozenDir | None, new: FrozenDir) -> Iterable[Difference]:
        """:func:`vfs._frozen.differences` of two of this tree's states: from the log of what
        changed when it covers them (the state it grew from and now), else by walking them."""
        known = self._log.between(old, new)
        return differences(old, new) if known is None else known

    def count_from(self, state: FrozenDir) -> None:
        """``state`` (the tree's state now) is the one it grows from: the next comparison with
        it costs what changes from here on (see :class:`vfs._frozen.FreezeLog`)."""
        if state is self._log.end:
            self._log.restart(state)

    def state_tree(self, state: FrozenDir) -> TempFileSystem:
        """A new tree (this one's owner and limits) holding ``state``, in O(1): its nodes are
        thawed as they are reached, its files share their pages with ``state``."""
        limit = self._usage.limit
        tree = TempFileSystem(
            uid=self._uid, gid=self._gid, max_file_size=self._max_file_size, max_bytes=limit
        )
        tree._usage.limit = limit
        root = _thawed(state, tree._usage, {})
        assert isinstance(root, _Dir)
        tree._root = root
        tree._log.restart(state)
        return tree

    async def checkpoint(self, label: str | None = None, *, turn: int | None = None) -> Checkpoint:
        state = self.frozen_root()
        record = self._history.add(state, self._summary(state), label=label, turn=turn)
        self.count_from(state)
        return record

    def _summary(self, state: FrozenDir) -> Summary:
        """What changed from the state the tree grew from to ``state``, counted."""
        return tally(
            (frozen_kind(then), frozen_kind(now), frozen_size(now))
            for path, then, now in self.state_differences(self._history.base(), state)
            if path != ROOT
        )

    async def checkpoints(self) -> builtins.list[Checkpoint]:
        return self._history.listing()

    async def prune_checkpoints(self, keep_last: int) -> builtins.list[int]:
        return self._history.prune(keep_last)

    async def checkpoint_changes(self, a: int, b: int | None = None) -> builtins.list[TreeChange]:
        old, new, new_tree = self._states(a, b)
        paths = [path for path, _, _ in self.state_differences(old, new)]
        return await changes_between(self.state_tree(old), new_tree, paths)

    async def checkpoint_diff(self, a: int, b: int | None = None) -> str:
        old, new, new_tree = self._states(a, b)
        paths = [path for path, _, _ in self.state_differences(old, new)]
        old_tree = self.state_tree(old)
        return await render_between(
            old_tree, new_tree, await changes_between(old_tree, new_tree, paths)
        )

    def _states(self, a: int, b: int | None) -> tuple[FrozenDir, FrozenDir, TempFileSystem]:
        old = self._history.state(a)
        if b is None:
            return old, self.frozen_root(), self
        new = self._history.state(b)
        return old, new, self.state_tree(new)

    async def rewind(self, number: int) -> Checkpoint:
        target = self._history.state(number)

        async def change() -> Checkpoint:
            await self.record_before_rewind(number)
            entries, metadata = self.restore(target)
            self._history.rewound(number)
            await self.report_restore(entries, metadata)
            return self._history.record(number)

        return await self._rewind_hooks.rewinding(lambda: self.rewind_replaces(number), change)

    def on_rewind(self, hook: RewindHook) -> Callable[[], None]:
        return self._rewind_hooks.add(hook)

    async def record_before_rewind(self, number: int) -> None:
        """Record the state now unless a kept checkpoint holds it (see vfs._checkpoints)."""
        state = self.frozen_root()
        if self._history.holding(lambda kept: kept is state) is None:
            label = BEFORE_REWIND.format(number=number)
            self._history.add(state, self._summary(state), label=label)
            self.count_from(state)

    async def rewind_replaces(self, number: int) -> builtins.list[str]:
        target = self._history.state(number)
        now = self.frozen_root()
        return [path for path, _, _ in self.state_differences(target, now) if path != ROOT]

    async def fork(self, number: int) -> TempFileSystem:
        state = self._history.state(number)
        tree = self.state_tree(state)
        tree._history.add(state, self._history.record(number).summary, label=f"fork of {number}")
        return tree

    def restore(self, target: FrozenDir) -> tuple[builtins.list[str], builtins.list[str]]:
        """Make the live tree ``target`` in one step, changing only where the two differ:
        replaced entries are new nodes (an open file keeps the old one), directories in both
        stay the same nodes. Answers the paths whose entry changed and the directories whose
        attributes did, for :meth:`report_restore`."""
        current = self.frozen_root()
        memo: dict[int, _Node] = {}
        _keep_linked(self._root, current, target, memo)
        entries: builtins.list[str] = []
        metadata: builtins.list[str] = []
        self._restore_dir(self._root, ROOT, current, target, memo, entries, metadata)
        self._log.restart(target)
        return entries, metadata

    def _restore_dir(
        self,
        live: _Dir,
        path: str,
        current: FrozenDir,
        target: FrozenDir,
        memo: dict[int, _Node],
        entries: builtins.list[str],
        metadata: builtins.list[str],
    ) -> None:
        # Without recursion (an agent's tree may be deeper than Python's limit); a directory's
        # own attributes are set after everything beneath it, whose changes would drop them.
        pending: builtins.list[tuple[_Dir, str, FrozenDir, FrozenDir, bool]] = [
            (live, path, current, target, False)
        ]
        while pending:
            directory, at, now_dir, then_dir, finish = pending.pop()
            if finish:
                self._restored(directory, at, now_dir, then_dir, metadata)
                continue
            if now_dir is then_dir:
                continue
            pending.append((directory, at, now_dir, then_dir, True))
            now_children, then_children = now_dir.children, then_dir.children
            # Only the names whose nodes differ (frozen nodes hash by identity).
            for name in {name for name, _ in now_children.items() ^ then_children.items()}:
                now, then = now_children.get(name), then_children.get(name)
                child_path = join_path(at, name)
                if isinstance(now, FrozenDir) and isinstance(then, FrozenDir):
                    child = directory.children[name]
                    assert isinstance(child, _Dir)
                    pending.append((child, child_path, now, then, False))
                    continue
                if now is not None:
                    directory.remove(name, 0)
                if then is not None:
                    node = memo.get(id(then)) if then.linked else None
                    if node is None:
                        node = _thawed(then, self._usage, memo)
                    directory.add(name, node, 0)
                entries.append(child_path)

    @staticmethod
    def _restored(
        live: _Dir,
        path: str,
        current: FrozenDir,
        target: FrozenDir,
        metadata: builtins.list[str],
    ) -> None:
        """The directory ``live`` holds ``target`` now: its attributes and frozen node too."""
        shown = (current.mode, current.uid, current.gid, current.mtime_ns, current.ctime_ns)
        if shown != (target.mode, target.uid, target.gid, target.mtime_ns, target.ctime_ns):
            metadata.append(path)
        live.mode, live.uid, live.gid = target.mode, target.uid, target.gid
        live.atime_ns, live.mtime_ns = target.atime_ns, target.mtime_ns
        live.ctime_ns = target.ctime_ns
        live.info = None
        live.frozen = target
        live.was = None
        live.dirty = set()

    async def report_restore(
        self, entries: builtins.list[str], metadata: builtins.list[str]
    ) -> None:
        """Tell the watchers what a :meth:`restore` changed: an ``entry`` change at each
        outermost changed name, a ``metadata`` change at each other directory whose
        attributes changed."""
        if not self._observers:
            return
        await self._observers.emit_all(
            [(path, "entry") for path in outermost(entries)]
            + [(path, "metadata") for path in metadata]
        )

    # -- Watchable --------------------------------------------------------------------------

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        return self._observers.subscribe(callback)


class TempOpenFile:
    """An open file of a :class:`TempFileSystem`: it holds the node, not the name."""

    __slots__ = ("_fs", "_node", "_path")

    def __init__(self, fs: TempFileSystem, node: _File, path: str) -> None:
        self._fs = fs
        self._node = node
        self._path = path  # the name it was opened by, for error messages

    async def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0:
            raise PathError(self._path, errno=errno.EINVAL)
        node = self._node
        _accessed(node)
        return node.data.read(offset, size)

    async def stat(self) -> FileInfo:
        return _info(self._node)

    async def write(self, offset: int, data: bytes) -> int:
        if offset < 0:
            raise PathError(self._path, errno=errno.EINVAL)
        if not data:
            return 0  # no effect at all, not even on mtime (as tmpfs)
        node = self._node
        self._fs._check_size(self._path, offset + len(data), len(data))
        try:
            node.data.write(offset, data)  # a gap before it is a hole: zeros, never stored
        except NoSpace:
            raise PathError(self._path, errno=errno.ENOSPC) from None
        node.modified(now_ns())
        if self._fs._observers:
            await self._fs._emit_node(node, "content")
        return len(data)

    async def truncate(self, size: int) -> None:
        self._fs._resize(self._node, size, self._path, now_ns())
        if self._fs._observers:
            await self._fs._emit_node(self._node, "content")

    async def flush(self) -> None:
        return None  # writes go straight to the node

    async def fsync(self, datasync: bool = False) -> None:
        return None

    async def close(self) -> None:
        return None


def temp_fs(
    files: Mapping[str, str | bytes] | None = None,
    *,
    uid: int | None = None,
    gid: int | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    max_bytes: int | None = None,
) -> TempFileSystem:
    """An in-memory tree holding ``files`` (path -> text or bytes; parents are created).

    Files are created ``0o644`` and directories ``0o755``, owned by ``uid``/``gid`` (default: this
    process's). Holes cost nothing. The files may store ``max_bytes`` in all (default: half the
    machine's memory, as tmpfs); past it a write fails with ``ENOSPC``. Implements
    :class:`FileSystem`, :class:`PosixFileSystem` and :class:`Watchable`.
    """
    return TempFileSystem(files, uid=uid, gid=gid, max_file_size=max_file_size, max_bytes=max_bytes)
