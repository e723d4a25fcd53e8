"""Keepers: files the mount holds open so that an inode outlives its name.

Theory of operation
-------------------
A rename over a file the kernel knows first opens that file (its *keeper*) and keeps it open
until the kernel forgets the inode: a reader that resolved the name just before the rename then
still opens the old file, as on tmpfs, instead of failing. Served by inode
(``Terms.files_by_inode``) an unlink takes a keeper too, because the daemon is not told whether
the file is open: a descriptor still reads it through the keeper, and writes it when the keeper
is writable. It is writable for a file the mount created or wrote (:meth:`Keepers.wrote`; a
temporary file's create-unlink-write pattern), and read-only otherwise, since opening a
copy-on-write tree's file for writing copies it up. Other detached inodes answer ``open`` with
``ESTALE`` (the caller's business: see ``mountd._ops``).

A keeper is taken around the change that takes the name away (:meth:`Keepers.keeping`, an
``async with`` around the tree call): opened before it, kept only if the change succeeds, closed
if it fails. An unlink asks the tree for both in one call (:meth:`Keepers.unlink_keeping`,
``vfs.lowlevel.unlink_keeping``), so the open costs no second walk down a stacked tree (half of
an unlink's cost on the default tree before). A kept node is pinned in the inode table (``opens``), so it is not dropped while
kept; its keeper is closed once neither the kernel nor a handle can reach it
(:meth:`Keepers.release_if_unused`), and at unmount with the other open files.

Without a keeper, an inode the tree no longer names answers ``fstat`` from its last attributes,
so they are refreshed before the name goes, while handles are open on it (``attributes``).

Keepers are descriptors of the daemon's, and one change (a rewind of thousands of files the
kernel knows) can ask for more than the process may open. They take at most a quarter of the
open-files limit (:func:`keeper_limit`); past it, or when an open fails for want of descriptors,
the change goes ahead without one (a descriptor held across it then reads ``ESTALE``): a mount
that runs out of descriptors fails every request, which is worse than one stale reader.
"""

from __future__ import annotations

import errno
import resource
from types import TracebackType

from vfs import FileInfo, OpenFile, PosixFileSystem
from vfs.lowlevel import open_file_info, unlink_keeping

from ._inodes import InodeTable, Node

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def keeper_limit() -> int:
    """How many keepers a mount may hold at once: a quarter of the soft open-files limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, soft // 4) if soft != resource.RLIM_INFINITY else 1 << 20


class Keeper:
    """An open file that keeps a detached inode reachable."""

    __slots__ = ("file", "writable")

    def __init__(self, file: OpenFile, writable: bool) -> None:
        self.file = file
        self.writable = writable


class Keepers:
    """The keepers of one mount, and which files the mount created or wrote."""

    __slots__ = ("_inodes", "_kept", "_limit", "_pending", "_tree", "_written")

    def __init__(
        self, tree: PosixFileSystem, inodes: InodeTable, *, limit: int | None = None
    ) -> None:
        self._tree = tree
        self._inodes = inodes
        self._kept: dict[int, Keeper] = {}
        # Keepers opened for a change still in progress: not kept yet, but open, and a second
        # name of the same file in that change must not open another.
        self._pending: set[int] = set()
        self._written: set[int] = set()
        self._limit = keeper_limit() if limit is None else limit

    def wrote(self, node: Node) -> None:
        """The mount created or wrote ``node``'s file: a writable keeper of it is cheap."""
        self._written.add(node.ino)

    def holds(self, node: Node) -> bool:
        return node.ino in self._kept

    def file_for(self, node: Node, *, write: bool) -> OpenFile | None:
        """The keeper of ``node``, if it can serve the request (one that writes, if ``write``)."""
        keeper = self._kept.get(node.ino)
        if keeper is None or (write and not keeper.writable):
            return None
        return keeper.file

    async def unlink_keeping(self, node: Node | None, path: str, known: FileInfo | None) -> bool:
        """Unlink ``path`` (the name of ``node``), keeping its file if the kernel knows the
        node (one tree call: ``vfs.lowlevel.unlink_keeping``); ``False`` when no keeper is to
        be taken (the caller unlinks) and when descriptors ran out (nothing was unlinked then).
        ``known``: what the tree answered for ``path``, when the caller can vouch for it."""
        if node is None or not self._may_keep(node):
            return False
        writable = node.ino in self._written
        self._pending.add(node.ino)
        try:
            file = await unlink_keeping(self._tree, path, write=writable)
        except OSError as error:
            if error.errno in _OUT_OF_DESCRIPTORS:
                return False
            raise
        finally:
            self._pending.discard(node.ino)
        if file is not None:
            info = known if known is not None else await _attributes(file)
            if info is not None and info.kind == "file":
                self._inodes.learn(node, info)
            self._keep(node, Keeper(file, writable))
        return True

    def keeping(
        self,
        parent: Node,
        name: str,
        path: str,
        *,
        keeper: bool,
        attributes: bool,
        known: FileInfo | None = None,
    ) -> Keeping:
        """Around the tree call that takes ``name`` (at ``path``) in ``parent`` away from its
        node: take a keeper first if ``keeper``, else (or when none is taken) refresh the
        attributes of a node with open handles if ``attributes``. ``known``: what the tree
        answers for ``path`` now, when the caller can vouch for it (no ``lstat`` then)."""
        return Keeping(self, parent, name, path, keeper=keeper, attributes=attributes, known=known)

    async def release_if_unused(self, node: Node) -> None:
        """Close ``node``'s keeper once neither the kernel nor a handle can reach it any more
        (the keeper's own pin is the one open left)."""
        if node.lookups == 0 and node.opens == 1:
            keeper = self._kept.pop(node.ino, None)
            if keeper is not None:
                self._inodes.unpin(node)
                await keeper.file.close()

    def files(self) -> list[OpenFile]:
        """Every keeper's file (to be closed at unmount)."""
        return [keeper.file for keeper in self._kept.values()]

    def dropped(self, node: Node) -> None:
        self._written.discard(node.ino)

    async def _prepare(
        self, parent: Node, name: str, path: str, known: FileInfo | None
    ) -> tuple[Node, Keeper] | None:
        """Open the file ``name`` before it is taken away, if the kernel knows it (and it has
        no keeper yet); also refresh the attributes the detached inode will answer with."""
        node = parent.children.get(name)
        if node is None or not self._may_keep(node):
            return None
        info = known if known is not None else await self._tree.lstat(path)
        if info.kind != "file":
            return None
        self._inodes.learn(node, info)
        if info.special is not None:
            return None  # the kernel serves a FIFO, socket or device itself: nothing to keep
        keeper = await self._open(node, path)
        if keeper is not None:
            self._pending.add(node.ino)
            return node, keeper
        return None

    def _may_keep(self, node: Node) -> bool:
        """Whether ``node`` is to get a keeper: the kernel knows it, it has none (nor one on
        the way), and the limit allows another."""
        if node.lookups == 0 or node.ino in self._kept or node.ino in self._pending:
            return False
        return len(self._kept) + len(self._pending) < self._limit

    async def _open(self, node: Node, path: str) -> Keeper | None:
        if node.ino in self._written:
            # Writable, so that a descriptor open for writing keeps working after an unlink;
            # only for a file the mount made or wrote, which costs nothing to open so.
            try:
                return Keeper(await self._tree.open(path, write=True), True)
            except OSError as error:
                if error.errno in _OUT_OF_DESCRIPTORS:
                    return None
        try:
            return Keeper(await self._tree.open(path), False)
        except OSError as error:
            if error.errno in _OUT_OF_DESCRIPTORS:
                return None
            raise

    async def _keep_attributes(self, parent: Node, name: str, path: str) -> None:
        """Refresh what the node of ``name`` will answer when detached, if open descriptors
        still reach it (``fstat`` after ``unlink``)."""
        node = parent.children.get(name)
        if node is not None and node.opens:
            info = await self._tree.lstat(path)
            if info.exists:
                self._inodes.learn(node, info)

    def _keep(self, node: Node, keeper: Keeper) -> None:
        self._pending.discard(node.ino)
        self._kept[node.ino] = keeper
        self._inodes.pin(node)

    async def _abandon(self, node: Node, keeper: Keeper) -> None:
        self._pending.discard(node.ino)
        await keeper.file.close()


async def _attributes(file: OpenFile) -> FileInfo | None:
    """What an unlinked file's descriptor says of it (the detached inode's attributes)."""
    try:
        return await open_file_info(file)
    except OSError:
        return None


class Keeping:
    """What :meth:`Keepers.keeping` returns: an ``async with`` around the change."""

    __slots__ = (
        "_attributes",
        "_keeper",
        "_keepers",
        "_known",
        "_name",
        "_parent",
        "_path",
        "_prepared",
    )

    def __init__(
        self,
        keepers: Keepers,
        parent: Node,
        name: str,
        path: str,
        *,
        keeper: bool,
        attributes: bool,
        known: FileInfo | None = None,
    ) -> None:
        self._keepers = keepers
        self._known = known
        self._parent = parent
        self._name = name
        self._path = path
        self._keeper = keeper
        self._attributes = attributes
        self._prepared: tuple[Node, Keeper] | None = None

    async def __aenter__(self) -> None:
        keepers = self._keepers
        if self._keeper:
            self._prepared = await keepers._prepare(
                self._parent, self._name, self._path, self._known
            )
        if self._prepared is None and self._attributes:
            await keepers._keep_attributes(self._parent, self._name, self._path)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        prepared = self._prepared
        if prepared is None:
            return
        if kind is None:
            self._keepers._keep(*prepared)
        else:  # the change failed: the name still names the file
            await self._keepers._abandon(*prepared)
