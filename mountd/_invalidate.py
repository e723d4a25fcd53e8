"""Keeping the kernel's caches coherent with changes made to the tree outside the mount.

Theory of operation
-------------------
The mount lets the kernel cache entries, attributes and file pages for minutes. Changes made
*through* the mount keep those caches right by themselves; changes made through the Python API
(or any other path into a :class:`vfs.Watchable` tree) arrive as :class:`vfs.Change` values, and
:class:`Invalidator` turns each into kernel notifications:

- ``entry`` at ``/p/n``: the name now means something else or nothing. If the kernel knows the
  parent, invalidate the dentry ``(parent, n)`` (also a cached negative lookup) and the parent's
  attributes and pages (its cached listing); if it knows the node, detach it from the inode
  table (the next lookup gets a fresh inode) and drop its attributes and pages (open
  descriptors of it re-read from their handle). A detached directory takes everything beneath
  it out of the namespace too, so the attributes of what the kernel knows there are dropped as
  well (a descriptor held on a file in it must see that the file has no name any more). When
  the kernel does not know the parent (the
  tree made it for this change: a write creates missing parents), the same goes for the first
  unknown name under the nearest directory it knows: it may be listed without it, or remembered
  as missing. That is said once per name until the kernel asks about it again (``Node.told``),
  so a bulk of API writes beneath a new directory does not pay for it on every write.
  An ``entry`` change at ``/`` invalidates every name the kernel holds in the root.
- ``content``: drop the node's pages and attributes. ``metadata``: drop its attributes only.
  Either reaches every node of the same file (``InodeTable.same_file``): a name the kernel
  learned before the file got another name keeps an inode of its own in the kernel.
  The daemon's page cache (``mountd._pages``) is told of every inode whose pages are dropped
  (``emptied``): the new size or time a later GETATTR learns is then no sign of stale pages,
  and dropping them again while that GETATTR is answered would make the kernel discard the
  answer (a descriptor held across an API write would read the old size).
  (With the writeback cache the kernel trusts its own file size, so a content change is handled
  like an entry change: the next open sees a fresh inode.)
- Paths the kernel never looked up need nothing.

Planning (:func:`plan`) is synchronous and touches only the inode table, so it runs on the event
loop's thread when the change is made (a change made from another thread hops onto the loop
first). Delivery goes to a worker thread, because the kernel may block a notification until a
request on the same inode is answered, and that request is served by this very event loop. The
callback returns an awaitable, which the changing call awaits (``vfs._watch``): when an API write
returns, the kernel has forgotten what it had cached. If delivery takes longer than ``timeout``
(a tree holding a lock that the pending request needs), the writer stops waiting and the
notification completes in the background, with a warning: a stale read is better than a deadlock.

Notifications planned before any of them is delivered go in one trip to the worker thread (a
:class:`_Delivery`): a tree that tells of many changes at once (``Observers.emit_all``: a
rewind) pays one thread hop, not one a change. Each change's awaitable completes once the trip
that carried its notifications is done.

Changes whose origin is the mount itself are ignored: the kernel already knows about them.
Failed notifications (``ENOENT``: the kernel had already dropped that entry) are logged at debug.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import pyfuse3
import trio

from vfs import Change
from vfs.lowlevel import ROOT, split_path

from ._inodes import InodeTable, Node

log = logging.getLogger("mountd")


@dataclass(frozen=True, slots=True)
class InvalidateEntry:
    """Forget the dentry ``name`` in directory ``parent``."""

    parent: int
    name: bytes


@dataclass(frozen=True, slots=True)
class InvalidateInode:
    """Forget the attributes (and pages, unless ``attr_only``) of inode ``ino``."""

    ino: int
    attr_only: bool = False


Notice = InvalidateEntry | InvalidateInode


def plan(table: InodeTable, change: Change, *, writeback: bool = False) -> list[Notice]:
    """The notifications that make the kernel forget what ``change`` made stale.

    Detaches replaced nodes from ``table`` as a side effect (see the module docstring).
    """
    path = change.path
    kind = change.kind
    if kind == "content" and writeback:
        kind = "entry"
    if kind != "entry":
        node = table.resolve(path)
        if node is None or (node.lookups == 0 and node is not table.root):
            return []
        return [
            InvalidateInode(known.ino, attr_only=kind == "metadata")
            for known in (node, *table.same_file(node))
            if known is node or known.lookups > 0
        ]
    if path == ROOT:
        root = table.root
        notices: list[Notice] = []
        for child in list(root.children.values()):
            notices.append(InvalidateEntry(root.ino, child.name.encode("utf-8", "surrogateescape")))
            known = child.lookups > 0
            notices.extend(_beneath(child))
            table.detach(child)
            if known:
                notices.append(InvalidateInode(child.ino))
        notices.append(InvalidateInode(root.ino))
        return notices
    notices = []
    # The nearest directory the kernel knows, and the name under it that leads to ``path``: the
    # parent itself, or an ancestor when the tree made directories for this change (a write
    # creates missing parents) that the kernel lists as absent or may remember as missing.
    parent, name, direct = _nearest_known(table, path)
    if (parent.lookups > 0 or parent is table.root) and (direct or _first_news(parent, name)):
        notices.append(InvalidateEntry(parent.ino, name.encode("utf-8", "surrogateescape")))
        notices.append(InvalidateInode(parent.ino))  # its attributes and its cached listing
    node = table.resolve(path)
    if node is not None:
        known = node.lookups > 0
        # Other nodes of the same file (its other names) hold the same pages.
        notices.extend(
            InvalidateInode(other.ino) for other in table.same_file(node) if other.lookups > 0
        )
        if node.others is None:  # (a hard-linked file keeps its other names)
            notices.extend(_beneath(node))
        table.detach_path(path)  # this name only: a file's other names (hard links) stay
        if known:
            notices.append(InvalidateInode(node.ino))
    return notices


def _beneath(directory: Node) -> list[Notice]:
    """Drop the attributes of every node the kernel knows beneath ``directory``, which is being
    detached: they keep no name either (their link count, a held descriptor's ``fstat``)."""
    notices: list[Notice] = []
    stack = list(directory.children.values())
    while stack:
        node = stack.pop()
        if node.lookups > 0:
            notices.append(InvalidateInode(node.ino, attr_only=True))
        stack.extend(node.children.values())
    return notices


def _nearest_known(table: InodeTable, path: str) -> tuple[Node, str, bool]:
    """The deepest node of ``table`` on the way to ``path``'s parent, the next name, and whether
    that node is the parent itself."""
    node = table.root
    names = split_path(path)
    for name in names[:-1]:
        child = node.children.get(name)
        if child is None:
            return node, name, False
        node = child
    return node, names[-1], True


def _first_news(directory: Node, name: str) -> bool:
    """Whether the kernel may still hold an old view of ``name`` in ``directory`` (a directory
    the tree made on the way to a change): not once it was told and has not asked since (a
    lookup of the name or a listing of the directory clears it; see ``Node.told``). A bulk of API
    writes under one new directory then costs notifications once, not per write."""
    told = directory.told
    if told is None:
        directory.told = {name}
        return True
    if name in told:
        return False
    told.add(name)
    return True


class _Delivery:
    """Notifications that go to the kernel in one trip, and when they have."""

    __slots__ = ("done", "notices")

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.done = trio.Event()


def send_to_kernel(notice: Notice) -> None:
    """Deliver one notification through pyfuse3 (blocking; call from a worker thread)."""
    if isinstance(notice, InvalidateEntry):
        pyfuse3.invalidate_entry(notice.parent, notice.name)
    else:
        pyfuse3.invalidate_inode(notice.ino, attr_only=notice.attr_only)


class Invalidator:
    """The :meth:`vfs.Watchable.watch` callback of one mount (see the module docstring)."""

    def __init__(
        self,
        table: InodeTable,
        origin: object,
        *,
        writeback: bool = False,
        send: Callable[[Notice], None] = send_to_kernel,
        timeout: float = 10.0,
        counters: Counter[str] | None = None,
        emptied: Callable[[int], None] | None = None,
    ) -> None:
        self.table = table
        # Told the inode of every notification that drops pages (PageCache.emptied).
        self.emptied = emptied
        self.origin = origin
        self.writeback = writeback
        self.timeout = timeout
        self.counters: Counter[str] = Counter() if counters is None else counters
        self._send = send
        self._loop_thread = threading.get_ident()
        self._trio_token = trio.lowlevel.current_trio_token()
        self._state = threading.Condition()
        self._live = True
        self._in_flight = 0
        self._collecting: _Delivery | None = None  # planned, and not on its way yet

    def __call__(self, change: Change) -> Awaitable[None] | None:
        if change.origin is self.origin or not self._live:
            return None
        if threading.get_ident() != self._loop_thread:
            return self._from_other_thread(change)
        notices = self._plan(change)
        if not notices:
            return None
        delivery = self._collecting
        if delivery is None:
            delivery = self._collecting = _Delivery()
        delivery.notices.extend(notices)
        return self._carry(delivery)

    async def _carry(self, delivery: _Delivery) -> None:
        """Deliver ``delivery`` if nobody has started it yet, else wait until it is done."""
        if self._collecting is delivery:
            self._collecting = None
            try:
                await self._deliver(delivery.notices)
            finally:
                delivery.done.set()
        else:
            await delivery.done.wait()

    def _plan(self, change: Change) -> list[Notice]:
        notices = plan(self.table, change, writeback=self.writeback)
        for notice in notices:
            self.counters[type(notice).__name__] += 1
            if isinstance(notice, InvalidateInode) and not notice.attr_only and self.emptied:
                self.emptied(notice.ino)
        return notices

    async def _deliver(self, notices: list[Notice]) -> None:
        with anyio.move_on_after(self.timeout) as scope:
            await anyio.to_thread.run_sync(self._send_all, notices, abandon_on_cancel=True)
        if scope.cancelled_caught:
            log.warning(
                "kernel invalidation still blocked after %.1f s; continuing without it",
                self.timeout,
            )

    async def _from_other_thread(self, change: Change) -> None:
        def plan_and_send() -> None:
            notices = trio.from_thread.run_sync(self._plan, change, trio_token=self._trio_token)
            self._send_all(notices)

        with anyio.move_on_after(self.timeout) as scope:
            await anyio.to_thread.run_sync(plan_and_send, abandon_on_cancel=True)
        if scope.cancelled_caught:
            log.warning("kernel invalidation still blocked after %.1f s", self.timeout)

    def _send_all(self, notices: list[Notice]) -> None:
        with self._state:
            if not self._live:
                return
            self._in_flight += 1
        try:
            for notice in notices:
                try:
                    self._send(notice)
                except OSError as error:
                    log.debug("invalidation %s failed: %s", notice, error)
        finally:
            with self._state:
                self._in_flight -= 1
                self._state.notify_all()

    def close(self, timeout: float) -> bool:
        """Stop sending; wait (blocking) until no notification is being sent. True if idle.

        Call from a worker thread while the mount still serves: a notification in flight may be
        waiting for a request that only the event loop can answer.
        """
        with self._state:
            self._live = False
            return self._state.wait_for(lambda: self._in_flight == 0, timeout)
