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
:func:`differences` walks two frozen trees by that rule and answers only where they differ; the
walk still looks at every entry of a directory that holds a change, so a tree that freezes keeps a
:class:`FreezeLog` of what each freezing rebuilt, which answers the same for the states it covers
in what changed.

``linked`` marks a node (or a directory holding one) with several names (hard links): such nodes
must be thawed together, so that one live node gets all its names back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

from ._pages import Pages
from ._paths import ROOT, join_path
from ._types import Kind, Special

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, eq_default=False)
def _immutable(cls: type[_T]) -> type[_T]:
    """A frozen node's class: immutable to the type checker, built by a plain ``__init__``
    (a frozen dataclass sets each field through ``object.__setattr__``: five times slower, and
    a checkpoint builds one node per change)."""
    return dataclass(slots=True, eq=False)(cls)


@_immutable
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


@_immutable
class FrozenFile(FrozenNode):
    data: Pages
    special: Special | None
    rdev: int


@_immutable
class FrozenSymlink(FrozenNode):
    target: str


@_immutable
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
    # Depth first without recursion (an agent's tree may be deeper than Python's limit).
    pending = [(path, old, new)]
    while pending:
        at, before, after = pending.pop()
        if before is after:
            continue
        yield at, before, after
        old_children = before.children if isinstance(before, FrozenDir) else {}
        new_children = after.children if isinstance(after, FrozenDir) else {}
        if not old_children and not new_children:
            continue
        # Only the names whose nodes differ (most of a large directory's are the same objects).
        # (frozen nodes hash by identity, so the items' symmetric difference is exactly that)
        names = {name for name, _ in old_children.items() ^ new_children.items()}
        for name in sorted(names, reverse=True):  # (popped in path order)
            pending.append((join_path(at, name), old_children.get(name), new_children.get(name)))


Difference = tuple[str, FrozenNode | None, FrozenNode | None]


class FreezeLog:
    """What changed between the frozen roots a tree built one after the other, kept as it
    freezes them (the tree notes each entry it rebuilt: it knows which names changed), so
    that comparing the state a checkpoint grew from with the state now costs what changed,
    where :func:`differences` costs the entries of every directory that holds a change.

    The log runs from ``start`` to ``end``: each freezing that starts from ``end`` extends it;
    any other freezing, and :meth:`restart` (a checkpoint taken, a rewind), starts it again."""

    __slots__ = ("_entries", "end", "start")

    def __init__(self, root: FrozenDir | None = None) -> None:
        self.start = self.end = root
        # path -> (the node at ``start``, the node at ``end``)
        self._entries: dict[str, tuple[FrozenNode | None, FrozenNode | None]] = {}

    def restart(self, root: FrozenDir) -> None:
        self.start = self.end = root
        self._entries = {}

    def extend(self, was: FrozenDir, root: FrozenDir, found: list[Difference]) -> None:
        """The tree froze ``root`` from ``was``; ``found`` is every difference between them
        (as :func:`differences` answers them, in any order)."""
        if was is not self.end:
            self.restart(was)
        entries = self._entries
        for path, then, now in found:
            known = entries.get(path)
            entries[path] = (then if known is None else known[0], now)
        self.end = root

    def between(self, old: FrozenDir | None, new: FrozenDir) -> list[Difference] | None:
        """What :func:`differences` answers for ``old`` and ``new`` (sorted by path rather
        than in walk order), when the log covers them; else ``None``."""
        if new is not self.end:
            return None
        if old is new:
            return []
        if old is not self.start:
            return None
        return [
            (path, then, now)
            for path, (then, now) in sorted(self._entries.items())
            if then is not now
        ]


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
