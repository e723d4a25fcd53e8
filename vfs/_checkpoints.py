"""Checkpoints of a writable tree: the record of each, how they are kept, how two states compare.

Theory of operation
-------------------
A tree that keeps checkpoints (:class:`vfs.Checkpoints`: ``temp_fs``, and ``cow_fs`` over a
``temp_fs`` upper) holds a :class:`History`: numbered states, each with its :class:`Checkpoint`
record (number, turn, label, time, :class:`Summary`). Numbers start at 1, grow by one per
checkpoint and are never reused, so a number always means the same state. What a state *is*
belongs to the tree (frozen nodes for ``temp_fs``, ``vfs._frozen``; the upper's frozen nodes and
a copy of the whiteout record for ``cow_fs``); this module only keeps them.

Rewinding to a checkpoint first records the live state unless a kept checkpoint holds it already
(labelled ``before rewind to N``), so a rewind never loses work and is itself undone by rewinding
to that one. Later checkpoints stay.

Retention: :meth:`History.prune` keeps the labelled checkpoints and the last ``keep_last``, and
forgets the rest (their frozen nodes are freed when no other checkpoint or live node shares them).

Comparing two states is one rule for every tree (:func:`changes_between`): the tree names the
paths where its two states can differ (from the frozen nodes that differ, and for a cow the
whiteouts that differ), and each such path is compared in two read-only views of the states, by
kind, bytes and mode, exactly as ``cow_fs.changes()`` compares its layers (renames are an add and a
delete). An entry counts only where every ancestor is a real directory in that state; FIFOs,
sockets and device nodes are no change. :func:`tally` is the cheap count a checkpoint records:
by existence and kind only (a file that is in both states is counted as modified); a tree that
knows a path's kind in both states from its own nodes counts it so, and asks
:func:`kinds_between` for the rest.
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from ._cow_changes import same_content
from ._cow_meta import TreeChange
from ._errors import PathError
from ._paths import ROOT, parent_path
from ._types import MISSING, Checkpoint, FileInfo, Kind, PosixFileSystem, RewindHook, Summary

S = TypeVar("S")

BEFORE_REWIND = "before rewind to {number}"


class CheckpointNotFoundError(PathError):
    """No checkpoint of that number is kept (never taken, or pruned). ``errno`` is ``ENOENT``."""

    default_errno = errno.ENOENT

    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(ROOT)

    def _message(self) -> str:
        return f"no checkpoint {self.number}"


T = TypeVar("T")


class RewindHooks:
    """Who is told before a rewind changes a tree, and where (``Checkpoints.on_rewind``)."""

    __slots__ = ("_hooks",)

    def __init__(self) -> None:
        self._hooks: list[RewindHook] = []

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def add(self, hook: RewindHook) -> Callable[[], None]:
        self._hooks.append(hook)

        def remove() -> None:
            if hook in self._hooks:
                self._hooks.remove(hook)

        return remove

    async def rewinding(
        self, replaces: Callable[[], Awaitable[list[str]]], change: Callable[[], Awaitable[T]]
    ) -> T:
        """``change()`` (a rewind), with every hook entered around it, given what ``replaces()``
        answers first. Both take the tree's own lock, so a hook can use the tree meanwhile."""
        if not self._hooks:
            return await change()
        paths = await replaces()
        async with contextlib.AsyncExitStack() as stack:
            for hook in list(self._hooks):
                await stack.enter_async_context(hook(paths))
            return await change()


class History(Generic[S]):
    """The numbered states of one tree (see the module docstring)."""

    __slots__ = ("_base", "_kept", "_next")

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Checkpoint, S]] = {}
        self._next = 1
        self._base: S | None = None  # the state the tree grew from (see base())

    def add(
        self, state: S, summary: Summary, *, label: str | None = None, turn: int | None = None
    ) -> Checkpoint:
        if label is not None and not isinstance(label, str):
            raise TypeError(f"a checkpoint's label is a string, not {label!r}")
        record = Checkpoint(self._next, turn, label or None, time.time(), summary)
        self._kept[record.number] = (record, state)
        self._next += 1
        self._base = state
        return record

    def base(self) -> S | None:
        """The state the tree grew from: the checkpoint taken, or rewound to, last. A
        checkpoint's summary counts what changed since it (kept even once pruned)."""
        return self._base

    def rewound(self, number: int) -> None:
        """The tree became checkpoint ``number`` again."""
        self._base = self.state(number)

    def last(self) -> S | None:
        """The state of the newest checkpoint, if any."""
        if not self._kept:
            return None
        return self._kept[next(reversed(self._kept))][1]

    def holding(self, same: Callable[[S], bool]) -> S | None:
        """The newest kept state for which ``same`` holds, if any."""
        for _, state in reversed(self._kept.values()):
            if same(state):
                return state
        return None

    def state(self, number: int) -> S:
        try:
            return self._kept[number][1]
        except (KeyError, TypeError):
            raise CheckpointNotFoundError(number) from None

    def record(self, number: int) -> Checkpoint:
        try:
            return self._kept[number][0]
        except (KeyError, TypeError):
            raise CheckpointNotFoundError(number) from None

    def listing(self) -> list[Checkpoint]:
        return [record for record, _ in self._kept.values()]

    def states(self) -> list[S]:
        return [state for _, state in self._kept.values()]

    def prune(self, keep_last: int) -> list[int]:
        """Forget every checkpoint but the labelled ones and the last ``keep_last``; answers the
        numbers forgotten."""
        gone = pruned(self.listing(), keep_last)
        for number in gone:
            del self._kept[number]
        return gone


def pruned(records: list[Checkpoint], keep_last: int) -> list[int]:
    """The numbers of ``records`` (oldest first) a prune forgets: all but the labelled ones and
    the last ``keep_last``."""
    if keep_last < 0:
        raise ValueError(f"keep_last must be 0 or more, not {keep_last}")
    recent = {r.number for r in records[len(records) - keep_last :]} if keep_last else set()
    return [r.number for r in records if r.number not in recent and r.label is None]


class Entries:
    """``lstat`` of real paths in one state: MISSING where an ancestor is not a real directory
    (a symlink there leads elsewhere), and for FIFOs, sockets and device nodes."""

    __slots__ = ("_seen", "_tree")

    def __init__(self, tree: PosixFileSystem) -> None:
        self._tree = tree
        self._seen: dict[str, FileInfo] = {}

    async def get(self, path: str) -> FileInfo:
        seen = self._seen
        known = seen.get(path)
        if known is not None:
            return known
        # The ancestors not looked at yet, then each from the top (a loop, not a call per
        # level: an agent's tree may be deeper than Python's recursion limit).
        unknown = [path]
        while unknown[-1] != ROOT and parent_path(unknown[-1]) not in seen:
            unknown.append(parent_path(unknown[-1]))
        for here in reversed(unknown):
            if here != ROOT and seen[parent_path(here)].kind != "directory":
                info = MISSING
            else:
                info = await self._tree.lstat(here)
                if info.special is not None:
                    info = MISSING
            seen[here] = info
        return seen[path]


async def changes_between(
    old: PosixFileSystem, new: PosixFileSystem, candidates: Iterable[str]
) -> list[TreeChange]:
    """How ``new`` differs from ``old`` at ``candidates`` (see the module docstring), sorted."""
    before, after = Entries(old), Entries(new)
    found: list[TreeChange] = []
    for path in sorted(set(candidates)):
        if path == ROOT:
            continue
        a = await before.get(path)
        b = await after.get(path)
        if not a.exists and not b.exists:
            continue
        if not a.exists:
            found.append(TreeChange(path, "added", b.kind))
        elif not b.exists:
            found.append(TreeChange(path, "deleted", a.kind))
        elif a.kind != b.kind or (
            b.kind != "directory" and not await same_content(new, path, old, path, b)
        ):
            found.append(TreeChange(path, "modified", b.kind))
        elif a.mode is not None and b.mode is not None and a.mode != b.mode:
            found.append(TreeChange(path, "mode_changed", b.kind))
    return found


def tally(entries: Iterable[tuple[Kind | None, Kind | None, int]]) -> Summary:
    """The :class:`Summary` of ``(old kind, new kind, new size)`` per path (``None``: nothing
    there), by existence and kind only (see the module docstring)."""
    added = modified = deleted = size = 0
    for old, new, new_size in entries:
        if old == new == "directory" or old is new is None:
            continue
        if new is None:
            deleted += 1
            continue
        if old is None:
            added += 1
        else:
            modified += 1
        if new == "file":
            size += new_size
    return Summary(added, modified, deleted, size)


async def kinds_between(
    old: PosixFileSystem, new: PosixFileSystem, candidates: Iterable[str]
) -> list[tuple[Kind | None, Kind | None, int]]:
    """What :func:`tally` counts of ``candidates`` in two states given as trees."""
    before, after = Entries(old), Entries(new)
    entries: list[tuple[Kind | None, Kind | None, int]] = []
    for path in set(candidates):
        if path == ROOT:
            continue
        a = await before.get(path)
        b = await after.get(path)
        entries.append((a.kind if a.exists else None, b.kind if b.exists else None, b.size))
    return entries


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths not beneath another of them, sorted (one change notice covers its subtree)."""
    chosen = set(paths)
    kept: list[str] = []
    for path in sorted(chosen):
        probe = path
        while probe != ROOT:
            probe = parent_path(probe)
            if probe in chosen:
                break
        else:
            kept.append(path)
    return kept
