"""The inode table: which inode numbers the kernel holds, and which tree path each one names.

Theory of operation
-------------------
Nodes form a tree that mirrors the part of the served namespace the kernel has seen: every node
has a ``name`` and a ``parent``, and its path is computed by walking parents up to the root
(:data:`ROOT_INODE`, always ``/``). A rename moves one node (and so its whole subtree) in O(1).
A file linked under several names (a hard link made through the mount) is one node: its further
names are in ``others``; its path is the first name still attached; an unlink or a rename over
one name leaves the others, and only a node with no name left is detached.

Inode numbers come from a counter and are never reused, so a number the kernel still holds can
never come to mean a different file. A path keeps its number as long as its node lives.

What ``stat`` shows as ``st_ino`` is another number (pyfuse3's ``attr_ino``), the node's
``shown`` (:func:`shown_ino`): the tree's number for the file (``FileInfo.ino``: a host file's
inode, which git's index recorded) when it has one below :data:`OWN_INO_BASE`, else
``OWN_INO_BASE`` plus the node id. The tree promises its numbers are shared by the names of one
file and distinct between files; the mount's own are distinct because node ids are, and they
never meet a tree's because of the base. A node keeps the number it showed while its tree says
none (a handle's ``stat`` may not say), and takes the tree's when it says another (the file
was replaced on the host). A file without a tree number shows its node's: stable while the
kernel holds the node, another after the kernel forgot it.

A node lives while any of these holds:

- ``lookups > 0``: the kernel holds the number. Every reply that hands the kernel an entry
  (lookup, create, mkdir, mknod, symlink, and each readdirplus entry it accepts) counts one;
  ``forget`` takes them back.
- ``opens > 0``: an open file or directory handle refers to it.
- it has children in the table (they need it to compute their path).

When none holds, the node is dropped, and its parent is checked in turn. The root never drops.

A node that no longer names anything in the tree (unlinked, renamed over, or replaced behind the
mount's back) is *detached*: it leaves its parent's children and its path becomes ``None``, but it
stays in the table while the kernel or a handle holds it, so ``getattr`` on an open descriptor of
an unlinked file still answers from its last known attributes (``info``). The next lookup of the
same name gets a fresh node with a new number. A detached directory takes its subtree with it.

Nodes also remember the kind the tree last reported: a name whose kind changed behind the
kernel's back (a file replaced by a directory) must get a new inode number, because the kernel
refuses an inode whose type changes.

Nothing here does I/O or awaits; every method runs to completion on the event loop's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from vfs import FileInfo
from vfs.lowlevel import ROOT, join_path, parent_path, split_path

if TYPE_CHECKING:
    import pyfuse3


log = logging.getLogger(__name__)

ROOT_INODE = 1

OWN_INO_BASE = 1 << 62
"""The inode numbers the mount gives files their tree gives none start here (below 2**63, for
readers that take st_ino as signed); a tree number at or above it is not shown either."""


class Node:
    """One inode the mount has handed out (or the root)."""

    __slots__ = (
        "attrs",
        "attrs_of",
        "children",
        "info",
        "ino",
        "linked_as",
        "lookups",
        "name",
        "opens",
        "others",
        "parent",
        "shown",
        "told",
    )

    def __init__(self, ino: int, name: str, parent: Node | None, info: FileInfo | None) -> None:
        self.ino = ino
        self.name = name
        self.parent = parent
        self.children: dict[str, Node] = {}
        # A file's further names (hard links), besides ``parent``/``name``.
        self.others: list[tuple[Node, str]] | None = None
        # The FileInfo.linked_id it is found by in the table (a file with several names).
        self.linked_as: int | None = None
        self.lookups = 0
        self.opens = 0
        # The inode number stat shows for it, once decided (see shown_ino); 0 before.
        self.shown = 0
        # The attributes the tree last reported; what a detached node answers with.
        self.info = info
        # The kernel attributes last built for this node, and the FileInfo they were built from
        # (building them costs more than comparing two FileInfos; see mountd._ops).
        self.attrs: pyfuse3.EntryAttributes | None = None
        self.attrs_of: FileInfo | None = None
        # Names in this directory the kernel was told to forget (new directories the tree made
        # on the way to an API change) and has not asked about since (see mountd._invalidate).
        self.told: set[str] | None = None

    def __repr__(self) -> str:
        return (
            f"Node(ino={self.ino}, name={self.name!r}, lookups={self.lookups}, opens={self.opens})"
        )


class InodeTable:
    """Inode numbers <-> paths, with the kernel's lookup counts (see the module docstring).

    ``learned`` is called before a node's ``info`` changes (:meth:`learn`), and ``dropped``
    with each node the table drops, so that what other pieces keep per inode
    (``mountd._pages``, ``mountd._vouch``, ``mountd._keepers``, ``mountd._listings``) follows
    the node."""

    def __init__(
        self,
        *,
        learned: Callable[[Node, FileInfo], None] | None = None,
        dropped: Callable[[Node], None] | None = None,
    ) -> None:
        self._learned = _ignore_learned if learned is None else learned
        self._dropped = _ignore if dropped is None else dropped
        self.root = Node(ROOT_INODE, "", None, None)
        self._nodes: dict[int, Node] = {ROOT_INODE: self.root}
        # Files with several names, by FileInfo.linked_id: another name of one gets its node.
        self._linked: dict[int, Node] = {}
        # Every node seen naming such a file, by linked_id: a name the kernel knew before the
        # file got its second name keeps a node of its own (the kernel holds both), and a
        # change to the file must reach them all (see same_file).
        self._same: dict[int, set[int]] = {}
        self._next_ino = ROOT_INODE + 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes.values()))

    def find(self, ino: int) -> Node | None:
        """The node with number ``ino``, or ``None`` if it was dropped (or never existed)."""
        return self._nodes.get(ino)

    def path(self, node: Node) -> str | None:
        """The tree path ``node`` names, or ``None`` when it (or an ancestor) is detached. A
        file with several names answers its first one that is still attached."""
        parts: list[str] = []
        start = node
        while node is not self.root:
            parent = node.parent
            if parent is None:
                return None if start.others is None else self._other_path(start)
            parts.append(node.name)
            node = parent
        if not parts:
            return ROOT
        parts.reverse()
        return "/" + "/".join(parts)

    def _other_path(self, node: Node) -> str | None:
        for parent, name in node.others or ():
            base = self.path(parent)  # a directory: one name only
            if base is not None:
                return join_path(base, name)
        return None

    def learn(self, node: Node, info: FileInfo) -> None:
        """Take ``info`` as what the tree says of ``node`` now."""
        self._learned(node, info)
        node.info = info
        if info.linked_id is not None:
            self._same.setdefault(info.linked_id, set()).add(node.ino)

    def same_file(self, node: Node) -> list[Node]:
        """The other live nodes known to name the file ``node`` names (hard links whose names
        the kernel learned as separate inodes)."""
        linked_id = None if node.info is None else node.info.linked_id
        inos = self._same.get(linked_id) if linked_id is not None else None
        if not inos:
            return []
        found = []
        for ino in list(inos):
            other = self._nodes.get(ino)
            if other is None or other.info is None or other.info.linked_id != linked_id:
                inos.discard(ino)  # forgotten, or another file by now
            elif other is not node:
                found.append(other)
        return found

    def is_attached(self, node: Node) -> bool:
        return self.path(node) is not None

    def resolve(self, path: str) -> Node | None:
        """The node for a normalized tree path, if the table has one."""
        node = self.root
        for name in split_path(path):
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def child(self, parent: Node, name: str, info: FileInfo) -> Node:
        """The node for ``name`` in ``parent`` (created if new), without counting a lookup.

        A node whose remembered kind differs from ``info.kind`` is detached and replaced.
        """
        node = parent.children.get(name)
        linked_id = info.linked_id
        if node is not None and node.info is info and node.linked_as == linked_id:
            return node  # nothing new: a listing answered what the mount knew
        if node is not None and node.info is not None and node.info.kind != info.kind:
            self.detach(node)
            node = None
        if node is None:
            if linked_id is not None:  # another name of a file the table knows: its node
                linked = self._linked.get(linked_id)
                if linked is not None and self._names_file(linked, info):
                    self.add_name(linked, parent, name)
                    self.learn(linked, info)
                    return linked
            node = Node(self._next_ino, name, parent, info)
            self._next_ino += 1
            self._nodes[node.ino] = node
            parent.children[name] = node
            if linked_id is not None:
                self._same.setdefault(linked_id, set()).add(node.ino)
        else:
            self.learn(node, info)
        if linked_id is not None and node.linked_as != linked_id:
            self.note_links(node, linked_id)
        return node

    def note_links(self, node: Node, file_id: int) -> None:
        """``node`` is a file with several names, identified by ``file_id``."""
        current = self._linked.get(file_id)
        if current is None or current is node or not self._names_file(current, node.info):
            if node.linked_as is not None and self._linked.get(node.linked_as) is node:
                del self._linked[node.linked_as]
            self._linked[file_id] = node
            node.linked_as = file_id

    def _names_file(self, node: Node, info: FileInfo | None) -> bool:
        """Whether ``node`` is live, attached, and of ``info``'s kind."""
        return (
            self._nodes.get(node.ino) is node
            and node.info is not None
            and info is not None
            and node.info.kind == info.kind
            and self.path(node) is not None
        )

    def remember(self, parent: Node, name: str, info: FileInfo) -> Node:
        """:meth:`child` plus one lookup: the kernel is being handed this entry."""
        node = self.child(parent, name, info)
        node.lookups += 1
        return node

    def ref(self, node: Node) -> None:
        """Count one more kernel lookup of ``node`` (``.``/``..`` lookups, readdirplus)."""
        node.lookups += 1

    def forget(self, ino: int, count: int) -> None:
        """The kernel dropped ``count`` references to ``ino``."""
        node = self._nodes.get(ino)
        if node is None:
            log.debug("forget of unknown inode %d", ino)
            return
        if node is self.root:
            return
        if count > node.lookups:
            log.warning("forget(%d, %d) exceeds lookup count %d", ino, count, node.lookups)
            count = node.lookups
        node.lookups -= count
        self._drop_unused(node)

    def pin(self, node: Node) -> None:
        """An open handle now refers to ``node``."""
        node.opens += 1

    def unpin(self, node: Node) -> None:
        """A handle referring to ``node`` was released."""
        node.opens = max(0, node.opens - 1)
        self._drop_unused(node)

    def discard_if_unused(self, node: Node) -> None:
        """Drop a node created speculatively (a readdirplus entry the kernel did not take)."""
        self._drop_unused(node)

    def detach(self, node: Node) -> None:
        """``node`` no longer names anything, under any of its names: take it out of the
        namespace (see the docstring)."""
        if node is self.root or node.parent is None:
            return
        names = [(node.parent, node.name), *(node.others or ())]
        node.parent = None
        node.others = None
        for parent, name in names:
            if parent.children.get(name) is node:
                del parent.children[name]
        self._drop_unused(node)
        for parent, _ in names:
            self._drop_unused(parent)

    def detach_name(self, parent: Node, name: str) -> Node | None:
        """``name`` in ``parent`` names nothing any more (unlink, rmdir, a change behind the
        mount): its node keeps its other names (hard links), or is detached; return it."""
        node = parent.children.get(name)
        if node is None:
            return None
        if node.others is None:
            self.detach(node)
            return node
        del parent.children[name]
        _rename(node, parent, name, None, "")
        self._drop_unused(parent)
        return node

    def detach_path(self, path: str) -> Node | None:
        """:meth:`detach_name` of a tree path, when the table knows it."""
        names = split_path(path)
        if not names:
            return None
        parent = self.resolve(parent_path(path))
        return None if parent is None else self.detach_name(parent, names[-1])

    def add_name(self, node: Node, parent: Node, name: str) -> None:
        """A link succeeded: ``name`` in ``parent`` is one more name of the file ``node``."""
        if parent.children.get(name) is not None:
            self.detach_name(parent, name)
        parent.children[name] = node
        if node.parent is None:
            node.parent, node.name = parent, name
        elif node.others is None:
            node.others = [(parent, name)]
        else:
            node.others.append((parent, name))

    def move(self, old_parent: Node, old_name: str, new_parent: Node, new_name: str) -> None:
        """A rename succeeded in the tree: move the name and detach what it replaced."""
        node = old_parent.children.get(old_name)
        displaced = new_parent.children.get(new_name)
        if node is not None and displaced is node:
            return  # two names of one file: rename(2) does nothing
        if node is not None:
            # Moved in before the displaced node leaves, so that the new parent never looks
            # unused in between (it would be dropped, and the moved node with it).
            del old_parent.children[old_name]
            _rename(node, old_parent, old_name, new_parent, new_name)
            new_parent.children[new_name] = node
        if displaced is not None:
            if node is None:
                self.detach_name(new_parent, new_name)
            elif displaced.others is None:
                self.detach(displaced)
            else:  # it keeps its other names
                _rename(displaced, new_parent, new_name, None, "")
        self._drop_unused(old_parent)

    def exchange(self, parent_a: Node, name_a: str, parent_b: Node, name_b: str) -> None:
        """A RENAME_EXCHANGE succeeded: the two names swapped what they point at."""
        node_a = parent_a.children.get(name_a)
        node_b = parent_b.children.get(name_b)
        if node_a is node_b:
            return  # two names of one file (or both unknown): nothing moved
        parent_a.children.pop(name_a, None)
        parent_b.children.pop(name_b, None)
        if node_a is not None:
            _rename(node_a, parent_a, name_a, parent_b, name_b)
            parent_b.children[name_b] = node_a
        if node_b is not None:
            _rename(node_b, parent_b, name_b, parent_a, name_a)
            parent_a.children[name_a] = node_b
        self._drop_unused(parent_a)
        self._drop_unused(parent_b)

    def _drop_unused(self, node: Node | None) -> None:
        while (
            node is not None
            and node is not self.root
            and node.lookups == 0
            and node.opens == 0
            and not node.children
        ):
            if self._nodes.pop(node.ino, None) is node:
                self._dropped(node)
            if node.linked_as is not None and self._linked.get(node.linked_as) is node:
                del self._linked[node.linked_as]
            parent = node.parent
            if parent is not None and parent.children.get(node.name) is node:
                del parent.children[node.name]
            node.parent = None
            if node.others is not None:  # a file's further names go with it
                others, node.others = node.others, None
                for other_parent, other_name in others:
                    if other_parent.children.get(other_name) is node:
                        del other_parent.children[other_name]
                    self._drop_unused(other_parent)
            node = parent


def shown_ino(node: Node, info: FileInfo | None) -> int:
    """The inode number ``stat`` shows for ``node``, whose tree now says ``info`` of it (see
    the module docstring)."""
    ino = None if info is None else info.ino
    if ino is not None and 0 < ino < OWN_INO_BASE:
        node.shown = ino
    elif not node.shown:
        node.shown = OWN_INO_BASE + node.ino
    return node.shown


def _ignore(node: Node) -> None:
    pass


def _ignore_learned(node: Node, info: FileInfo) -> None:
    pass


def _rename(node: Node, old_parent: Node, old_name: str, new_parent: Node | None, new: str) -> None:
    """In ``node``'s own record of its names, ``old_name`` in ``old_parent`` becomes ``new``
    in ``new_parent``, or is dropped when ``new_parent`` is ``None`` (another name then takes
    the first place). The parents' ``children`` are the caller's to change."""
    others = node.others
    if node.parent is old_parent and node.name == old_name:
        if new_parent is not None:
            node.parent, node.name = new_parent, new
        elif others:
            node.parent, node.name = others.pop(0)
        else:
            node.parent = None
    elif others is not None and (old_parent, old_name) in others:
        at = others.index((old_parent, old_name))
        if new_parent is not None:
            others[at] = (new_parent, new)
        else:
            del others[at]
    if others is not None and not others:
        node.others = None


def child_path(table: InodeTable, parent: Node, name: str) -> str | None:
    """The tree path of ``name`` inside ``parent``, or ``None`` if ``parent`` is detached."""
    base = table.path(parent)
    return None if base is None else join_path(base, name)
