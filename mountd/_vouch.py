"""What the mount can vouch for without asking the tree again, and the generation that judges it.

Theory of operation
-------------------
:class:`Generation` is a counter that moves whenever the tree may have changed: before and
after every changing request, when a buffering handle writes back, and on every change the
tree reports (through the mount or not). A handler notes it before it asks the tree something;
if it has not moved when the answer is used, nothing changed between the question and the
answer. Listings (their attributes are reused across readdir requests only while it holds) and
the pages handed to the kernel (dropped again when it moved during the store) judge by it too.

:class:`Vouching` keeps, per inode, the :class:`vfs.FileInfo` the mount vouches for: one the tree
just answered (a lookup, a getattr, a listing) while the generation held, or the created file's
own ``fstat`` when the mount lets go of it. A listing (``vfs.ListsReusing``) then answers those
files unexamined (:meth:`Vouching.known`). The mount stops vouching for a file

- before every changing request that may change it (a write, an unlink or rename of one of its
  names, an ``O_TRUNC`` open, a buffering handle's write-back): :meth:`Vouching.unvouch`;
- when ``node.info`` is reassigned with anything else (what it vouches for must be what the node
  holds: compared by identity, so a reassignment needs no call here);
- for every file at once when the tree reports a change from elsewhere (the API, the host):
  :meth:`Vouching.forget_all`;
- when the inode table drops the node (:meth:`Vouching.dropped`).

It vouches for nothing where listings cannot reuse (``enabled`` false): the rest of the mount
then never has to ask.
"""

from __future__ import annotations

from vfs import FileInfo

from ._inodes import Node


class Generation:
    """A counter that moves whenever the tree may have changed (see the module docstring)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def move(self) -> None:
        self.now += 1


class Vouching:
    """The FileInfo per inode that the mount vouches for (see the module docstring)."""

    __slots__ = ("_generation", "_sure", "enabled")

    def __init__(self, generation: Generation, *, enabled: bool) -> None:
        self._generation = generation
        self.enabled = enabled
        self._sure: dict[int, FileInfo] = {}

    def vouch(self, node: Node, info: FileInfo, asked_at: int) -> None:
        """``info``, just learned from the tree for ``node`` (``node.info``), holds unless the mount
        changes the file: vouched for if nothing changed since the tree was asked (``asked_at``
        is the generation then)."""
        if asked_at == self._generation.now and self.enabled:
            self._sure[node.ino] = info

    def vouches_for(self, node: Node) -> bool:
        return self._sure.get(node.ino) is node.info is not None

    def unvouch(self, node: Node) -> None:
        """The mount is about to change ``node``'s file."""
        self._sure.pop(node.ino, None)

    def unvouch_name(self, parent: Node, name: str) -> None:
        """The mount is about to change the file ``name`` in ``parent``, if the table knows it."""
        node = parent.children.get(name)
        if node is not None:
            self._sure.pop(node.ino, None)

    def forget_all(self) -> None:
        """The tree changed from elsewhere: nothing vouched for before holds."""
        self._sure.clear()

    def dropped(self, node: Node) -> None:
        self._sure.pop(node.ino, None)

    def known(self, directory: Node) -> dict[str, FileInfo]:
        """What the mount vouches for among ``directory``'s children, by name."""
        sure = self._sure
        if not sure:
            return {}
        return {
            name: info
            for name, child in directory.children.items()
            if (info := sure.get(child.ino)) is not None and info is child.info
        }

    def __len__(self) -> int:
        return len(self._sure)
