"""The kernel's page cache of the mount's files: when it is kept, dropped, or handed pages.

Theory of operation
-------------------
Open files keep the kernel's page cache (``keep_cache``), and what is written through the mount
stays in it: the kernel's own rule (``auto_inval_data``: drop a file's pages whenever its
modification time moves, which every write does) is off unless ``Terms.kernel_drops_pages``.
:class:`PageCache` then keeps the pages right itself. It keeps, per inode, four facts, each a
set of inode numbers (or a map of them) that lives as long as the inode table's node:

- *ours*: the mount changed the file since its ``info`` was learned, so a new size or time the
  tree reports next is the mount's own doing (:meth:`PageCache.writing`, :meth:`changing`);
- *stale*: the tree reported a new size or time the mount did not cause (:meth:`learned`,
  told by the inode table before a node's ``info`` changes): another writer of a host directory;
  not when the kernel was told to drop the file's pages since (:meth:`emptied`: the invalidator
  of changes made through the API), for then it holds none, and dropping them again while the
  GETATTR that learned it is answered would make the kernel discard that answer;
- *patchwork*: writes through the mount left pages only partly valid. The kernel marks valid
  only the pages a write covers whole; one that starts inside a page, or ends inside one before
  the end of the file, leaves a gap, and reading such a patchwork costs a request per gap;
- *partial pages*: which pages those are (:func:`track_partial_pages`), where they are handed
  over (``Terms.complete_pages``).

What is done with them:

- an open (:meth:`opened`) drops the pages of a stale file or a patchwork (the file then comes
  back in whole read requests) and keeps them otherwise;
- where no open will come, stale pages are dropped when a lookup, getattr or listing learns the
  change (:meth:`drop_stale`): served by inode before the answer, as the kernel may read them
  right after it; through an open handle off the request path. Not when the kernel drops pages
  itself on seeing the new size or time: a notification sent while a GETATTR is answered would
  make the kernel discard that answer's attributes as older than the notification, and the
  read that asked (one past the old end of a file a host program extended) would use the old
  size and come back short;
- when the writer sets a file's times (:meth:`times_set`; tar, ``cp -a``, rsync and ``touch`` do
  once a file is written), served by inode, the kernel is handed the pages writes left
  incomplete, so the next reader sends no request; a patchwork it is not handed over is dropped.

Everything the kernel is told goes through a :class:`KernelCache` given at construction (the
server's notification thread; :data:`NO_KERNEL` without a mount): never synchronously from a
request handler.
"""

from __future__ import annotations

import logging
import mmap
from typing import Protocol

import pyfuse3

from vfs import FileInfo, PosixFileSystem

from ._inodes import Node
from ._terms import Terms
from ._vouch import Generation

log = logging.getLogger("mountd")

PAGE_SIZE = mmap.PAGESIZE
# The most runs of pages handed to the kernel at once (tar's 10 KiB writes leave one page in
# five partly written: a 2.5 MiB file).
STORE_RUNS = 128


class KernelCache(Protocol):
    """What the mount can tell the kernel about what it caches of an inode, off the request
    path (``mountd._serve`` sends it from a thread of its own)."""

    def drop(self, ino: int) -> None:
        """Make the kernel drop the inode's attributes and pages (a directory's listing)."""

    async def drop_and_wait(self, ino: int) -> None:
        """The same; return once the kernel dropped them."""

    async def store(self, ino: int, stores: list[tuple[int, bytes]]) -> None:
        """Hand the kernel ``(offset, data)`` of the inode for its page cache; return once done."""


class _NoKernel:
    """The kernel of an :class:`Operations` built without a mount: nothing to tell."""

    def drop(self, ino: int) -> None:
        pass

    async def drop_and_wait(self, ino: int) -> None:
        pass

    async def store(self, ino: int, stores: list[tuple[int, bytes]]) -> None:
        pass


NO_KERNEL: KernelCache = _NoKernel()


class PageCache:
    """The page-cache policy of one mount (see the module docstring)."""

    __slots__ = (
        "_complete",
        "_emptied",
        "_files_by_inode",
        "_generation",
        "_kernel",
        "_kernel_drops",
        "_ours",
        "_partial",
        "_patchwork",
        "_stale",
        "_tree",
    )

    def __init__(
        self, tree: PosixFileSystem, terms: Terms, kernel: KernelCache, generation: Generation
    ) -> None:
        self._tree = tree
        self._kernel = kernel
        self._generation = generation
        self._kernel_drops = terms.kernel_drops_pages
        self._files_by_inode = terms.files_by_inode
        self._complete = terms.complete_pages
        self._ours: set[int] = set()
        self._stale: set[int] = set()
        self._emptied: set[int] = set()
        self._patchwork: set[int] = set()
        self._partial: dict[int, set[int]] = {}

    # --- what happened ---------------------------------------------------------------------

    def learned(self, node: Node, info: FileInfo) -> None:
        """``info`` is about to become what the tree says of ``node``: a file whose size or
        modification time moved without the mount changing it has stale pages."""
        ino = node.ino
        if ino in self._ours:
            self._ours.discard(ino)
            self._emptied.discard(ino)
            return
        if ino in self._emptied:
            self._emptied.discard(ino)
            return
        known = node.info
        if (
            known is not None
            and info.kind == "file"
            and (known.mtime_ns != info.mtime_ns or known.size != info.size)
        ):
            self._stale.add(ino)

    def changing(self, node: Node) -> None:
        """The mount is changing ``node``'s file (a truncate, new times): what the tree reports
        next is its own doing."""
        self._ours.add(node.ino)

    def writing(self, node: Node) -> None:
        """A write through the mount is about to reach ``node``'s file."""
        self._ours.add(node.ino)

    def wrote(self, node: Node, off: int, end: int) -> None:
        """A write through the mount covered ``[off, end)`` of ``node``'s file (``node.info``
        already has its new size)."""
        ino = node.ino
        self._ours.add(ino)  # again: the tree may have been looked at meanwhile
        info = node.info
        if off % PAGE_SIZE or (end % PAGE_SIZE and (info is None or end < info.size)):
            self._patchwork.add(ino)
        if self._complete:
            pages = self._partial.get(ino)
            if pages is None:
                if not (off % PAGE_SIZE or end % PAGE_SIZE):
                    return
                pages = self._partial[ino] = set()
            track_partial_pages(pages, off, end)

    def emptied(self, ino: int) -> None:
        """The kernel is being told to drop the pages and attributes of inode ``ino`` (a change
        made through the API): what the tree reports of it next is no sign of stale pages."""
        self._emptied.add(ino)
        self._stale.discard(ino)

    def changed_under(self, nodes: list[Node]) -> None:
        """The file of ``nodes`` (other names of a file the kernel learned as inodes of their
        own: ``InodeTable.same_file``) changed through another of its inodes: the kernel drops
        their pages and attributes (off the request path)."""
        for node in nodes:
            if node.lookups > 0:
                self.emptied(node.ino)
                self._kernel.drop(node.ino)

    def dropped(self, node: Node) -> None:
        """The inode table dropped ``node``: the kernel holds no pages of it any more."""
        ino = node.ino
        self._ours.discard(ino)
        self._stale.discard(ino)
        self._emptied.discard(ino)
        self._patchwork.discard(ino)
        self._partial.pop(ino, None)

    # --- what the kernel is told -----------------------------------------------------------

    def opened(self, node: Node, fh: int) -> pyfuse3.FileInfo:
        """The answer to an open or create of ``node``: its pages are kept unless the tree
        changed the file elsewhere or writes through the mount left a patchwork."""
        ino = node.ino
        keep = ino not in self._patchwork and ino not in self._stale
        if not keep:
            self._patchwork.discard(ino)
            self._stale.discard(ino)
        return pyfuse3.FileInfo(fh=fh, keep_cache=keep, direct_io=False)

    def is_stale(self, node: Node) -> bool:
        return node.ino in self._stale

    async def drop_stale(self, node: Node) -> None:
        """Make the kernel drop the stale pages of ``node`` where no open will (see the module
        docstring); others have them dropped at their next open."""
        ino = node.ino
        if self._kernel_drops:
            self._stale.discard(ino)
        elif self._files_by_inode:
            self._stale.discard(ino)
            await self._kernel.drop_and_wait(ino)
        elif node.opens:
            self._stale.discard(ino)
            self._kernel.drop(ino)

    async def times_set(self, node: Node, path: str, size: int) -> None:
        """A setattr through the mount set the modification time of ``node``'s file (at
        ``path``, now ``size`` bytes) without truncating it: the writer is done with it. Served
        by inode, hand the kernel the pages writes left incomplete, or drop a patchwork that
        has no open to drop it at (off the request path)."""
        if not self._files_by_inode:
            return
        ino = node.ino
        if self._complete and (ino in self._patchwork or self._partial.get(ino)):
            await self._complete_pages(ino, path, size)
        elif ino in self._patchwork:
            self._patchwork.discard(ino)
            self._kernel.drop(ino)

    async def _complete_pages(self, ino: int, path: str, size: int) -> None:
        """Give the kernel the pages that writes through the mount left incomplete: a reader
        then costs no request at all (rg after untar), where it would cost one READ per file
        (its last page) or per gap. Safe from racing a write: the caller of a setattr holds the
        inode's lock, which a write(2) takes too, until this answers, and the store waits in a
        thread of its own for any page a reader holds locked (its READ is answered meanwhile).
        Files served by inode only: the tree holds every byte written (no buffering handles),
        and with handles an open drops a patchwork instead (:meth:`opened`)."""
        pages = self._partial.pop(ino, None)
        self._patchwork.discard(ino)
        runs = runs_of(sorted(page for page in pages or () if page * PAGE_SIZE < size))
        if not runs:
            return
        if len(runs) > STORE_RUNS:  # a big file written in small pieces: not worth a store
            self._kernel.drop(ino)  # whole READs rather than one per gap
            return
        try:
            stores = await self._read_runs(path, runs, size)
        except Exception as error:  # the setattr itself succeeded: say so
            log.debug("not handing over pages of %s: %r", path, error)
            stores = None
        if stores is None:  # the file would not read (a write-only host file), or changed
            self._kernel.drop(ino)
            return
        generation = self._generation.now
        await self._kernel.store(ino, stores)
        if self._generation.now != generation:
            # The store had to wait for a page a reader held, and the event loop let other
            # changes run meanwhile (an API write of this file among them, maybe, whose
            # invalidation the store may have overtaken): drop what was stored.
            self._kernel.drop(ino)

    async def _read_runs(
        self, path: str, runs: list[tuple[int, int]], size: int
    ) -> list[tuple[int, bytes]] | None:
        """The bytes of each run of pages (the last one up to ``size``); ``None`` if the file
        came back shorter (the tree changed meanwhile)."""
        stores = []
        file = await self._tree.open(path)
        try:
            for first, last in runs:
                start = first * PAGE_SIZE
                length = min((last + 1) * PAGE_SIZE, size) - start
                data = await file.read(start, length)
                if len(data) != length:
                    return None
                stores.append((start, data))
        finally:
            await file.close()
        return stores

    def partial_pages(self, node: Node) -> set[int]:
        """The pages of ``node`` that writes left partly written and are still to hand over."""
        return set(self._partial.get(node.ino, ()))


def track_partial_pages(pages: set[int], off: int, end: int) -> None:
    """Record in ``pages`` which pages the write ``[off, end)`` left only partly written in the
    kernel's cache (its first and last page, when it starts or ends inside them), and forget
    those it covered whole (the kernel marks them valid)."""
    if pages:
        covered = range(-(-off // PAGE_SIZE), end // PAGE_SIZE)
        for page in [page for page in pages if page in covered]:
            pages.discard(page)
    if off % PAGE_SIZE:
        pages.add(off // PAGE_SIZE)
    if end % PAGE_SIZE:
        pages.add(end // PAGE_SIZE)


def runs_of(pages: list[int]) -> list[tuple[int, int]]:
    """Sorted page numbers as runs of consecutive pages, ``(first, last)``."""
    runs: list[tuple[int, int]] = []
    for page in pages:
        if runs and runs[-1][1] == page - 1:
            runs[-1] = (runs[-1][0], page)
        else:
            runs.append((page, page))
    return runs
