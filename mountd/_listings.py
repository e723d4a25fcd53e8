"""Directory listings: the snapshots readdir answers from.

Theory of operation
-------------------
readdir (readdirplus) lists a directory with its attributes in one tree call (``list_info``;
``list`` + ``lstat`` for trees without it) when the kernel reads from offset 0, and answers the
later offsets of that listing from the snapshot (:class:`mountd._handles.Listing`), which
records the mount's generation (``mountd._vouch``) when it was taken: the handler trusts its
attributes only while the generation holds. Where the tree can (``vfs.ListsReusing``), the
snapshot answers the files the mount vouches for without examining them again.

A directory listed through a handle keeps its snapshot on the handle, numbered by position. One
listed without a handle (opendir answered ENOSYS, so the kernel caches its listings) keeps it
here, per inode, numbered by :class:`mountd._handles.Offsets`, because several listings of the
directory may then share one snapshot and a name must keep its offset across snapshots. That
snapshot is let go of once the kernel has read it whole (:meth:`Listings.read_whole`), and the
offsets when the inode table drops the node (:meth:`Listings.dropped`).
"""

from __future__ import annotations

from vfs import FileInfo, PosixFileSystem
from vfs.lowlevel import ListReusing, list_info_of

from ._handles import DirHandle, Listing, Offsets
from ._inodes import InodeTable, Node
from ._vouch import Generation, Vouching


class Listings:
    """The listings of one mount's directories (see the module docstring)."""

    __slots__ = (
        "_generation",
        "_inodes",
        "_list_info",
        "_offsets",
        "_reusing",
        "_snapshots",
        "_vouched",
    )

    def __init__(
        self,
        tree: PosixFileSystem,
        inodes: InodeTable,
        vouched: Vouching,
        generation: Generation,
        *,
        reusing: ListReusing | None,
    ) -> None:
        self._inodes = inodes
        self._vouched = vouched
        self._generation = generation
        self._list_info = list_info_of(tree)
        self._reusing = reusing
        self._snapshots: dict[int, Listing] = {}
        self._offsets: dict[int, Offsets] = {}

    async def listing(self, node: Node, handle: DirHandle | None, start: int) -> Listing:
        """The snapshot to answer a readdir of ``node`` at ``start`` from: the one in progress,
        or a fresh one from offset 0."""
        listing = self._snapshots.get(node.ino) if handle is None else handle.listing
        if start != 0 and listing is not None:
            return listing
        node.told = None  # the kernel lists it again (see mountd._invalidate)
        generation = self._generation.now
        entries = await self._snapshot(node)
        if handle is not None:
            listing = Listing([(i + 1, *entry) for i, entry in enumerate(entries)], generation)
            handle.listing = listing
            return listing
        offsets = self._offsets.get(node.ino)
        if offsets is None:
            offsets = self._offsets[node.ino] = Offsets()
        listing = self._snapshots[node.ino] = offsets.number(entries, generation)
        return listing

    def read_whole(self, node: Node) -> None:
        """The kernel has read the listing of ``node`` (listed without a handle) to its end."""
        self._snapshots.pop(node.ino, None)

    def dropped(self, node: Node) -> None:
        self._snapshots.pop(node.ino, None)
        self._offsets.pop(node.ino, None)

    async def _snapshot(self, node: Node) -> list[tuple[str, FileInfo | None]]:
        entries: list[tuple[str, FileInfo | None]] = [(".", None), ("..", None)]
        path = self._inodes.path(node)
        if path is None:  # a removed directory lists as empty
            return entries
        if self._reusing is not None:
            # What the mount vouches for is not examined again: after writes through the mount
            # (the created file's fstat vouches for it), a listing's files need no fstatat.
            entries.extend(await self._reusing(path, self._vouched.known(node)))
        else:
            listed = await self._list_info(path)
            entries.extend((entry.path.rpartition("/")[2], info) for entry, info in listed)
        return entries
