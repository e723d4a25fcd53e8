"""Frozen nodes: an immutable picture of a ``temp_fs`` tree, shared between checkpoints.

Theory of operation
-------------------
A checkpoint of a ``temp_fs`` (``vfs._temp``) is a :class:`FrozenDir`: its root, frozen. Frozen
nodes never change once built, so two checkpoints share every node that did not change between
them, and a file's :class:`vfs._pages.Pages` are shared page by page (a frozen ``Pages`` shares
its pages with the live file, which copies a page before it first changes it). A live node keeps
the frozen node last built for it until it changes; a change drops that node and its ancestors'
(and those of every other name of a hard-linked file), so freezing the tree again rebuilds only
the directories on the way to what changed: O(changed), never O(tree).

Identity is meaning: where two frozen trees hold the same object, nothing beneath differs; where
they hold different objects, something may (a file written with the same bytes is a new node).
:func:`differences` walks two frozen trees by that rule and answers only where they differ.

``linked`` marks a node (or a directory holding one) with several names (hard links): such nodes
must be thawed together, so that one live node gets all its names back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ._pages import Pages
from ._paths import ROOT, join_path
from ._types import Kind, Special


@dataclass(frozen=True, slots=True, eq=False)
class FrozenNode:
    """What every frozen node holds. Frozen nodes compare by identity (see the module)."""

    mode: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    serial: int
    linked: bool

    def same_attributes(self, other: FrozenNode) -> bool:
        """Whether the permission bits and owner are the same (times are never a change)."""
        return (self.mode, self.uid, self.gid) == (other.mode, other.uid, other.gid)


@dataclass(frozen=True, slots=True, eq=False)
class FrozenFile(FrozenNode):
    data: Pages
    special: Special | None
    rdev: int


@dataclass(frozen=True, slots=True, eq=False)
class FrozenSymlink(FrozenNode):
    target: str


@dataclass(frozen=True, slots=True, eq=False)
class FrozenDir(FrozenNode):
    children: Mapping[str, FrozenNode]
    subdirs: int


def frozen_kind(node: FrozenNode | None) -> Kind | None:
    """What entry ``node`` is; ``None`` for nothing, and for a FIFO, socket or device node
    (never a change)."""
    if node is None:
        return None
    if isinstance(node, FrozenDir):
        return "directory"
    if isinstance(node, FrozenSymlink):
        return "symlink"
    assert isinstance(node, FrozenFile)
    return None if node.special is not None else "file"


def frozen_size(node: FrozenNode | None) -> int:
    return node.data.size if isinstance(node, FrozenFile) else 0


def differences(
    old: FrozenNode | None, new: FrozenNode | None, path: str = ROOT
) -> Iterator[tuple[str, FrozenNode | None, FrozenNode | None]]:
    """``(path, old, new)`` for every path where the two trees hold different nodes (``None``:
    nothing there), in path order; a directory in both is answered (its own attributes may
    differ) and then walked, one only in either is answered with everything beneath it."""
    if old is new:
        return
    yield path, old, new
    old_children = old.children if isinstance(old, FrozenDir) else {}
    new_children = new.children if isinstance(new, FrozenDir) else {}
    if not old_children and not new_children:
        return
    # Only the names whose nodes differ (most of a large directory's are the same objects).
    # (frozen nodes hash by identity, so the items' symmetric difference is exactly that)
    names = {name for name, _ in old_children.items() ^ new_children.items()}
    for name in sorted(names):
        yield from differences(
            old_children.get(name), new_children.get(name), join_path(path, name)
        )


def page_space(roots: list[FrozenDir]) -> int:
    """Bytes held by the pages of every file of ``roots``, each page counted once however many
    roots share it (what a set of checkpoints costs in memory)."""
    seen: set[int] = set()
    nodes: set[int] = set()
    total = 0
    stack: list[FrozenNode] = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in nodes:
            continue
        nodes.add(id(node))
        if isinstance(node, FrozenDir):
            stack.extend(node.children.values())
        elif isinstance(node, FrozenFile):
            for page, size in node.data.page_ids():
                if page not in seen:
                    seen.add(page)
                    total += size
    return total
