"""Checkpoints of ``cow_fs``: its upper's frozen nodes and a copy of its whiteout record.

Theory of operation
-------------------
A cow's state is its upper and its record (``vfs._cow_meta``): the lower is never written, so
it is no part of a checkpoint, and rewinding cannot touch it. A :class:`CowState` holds the
upper's frozen root (``vfs._frozen``: the upper is a ``temp_fs``, whose freezing costs what
changed since it last froze) and a copy of the record, shared with the checkpoint before when
it did not change. The cow offers these verbs (:class:`vfs.Checkpoints`) only over a
``temp_fs`` upper.

Where two states can differ: every path where the two uppers hold different frozen nodes
(``vfs._frozen.differences``), every path hidden in one record and not the other, and the lower's
entries beneath those (a whiteout removed shows them again). Those paths are compared in two
read-only cows over the same lower, one per state (an upper thawed in O(1), the record), by
``vfs._checkpoints.changes_between``; the live cow is the state "now".

A rewind holds the cow's lock: it records the state now unless a kept checkpoint holds it, puts
the upper back (``TempFileSystem.restore``: replaced entries are new nodes, so an open file keeps
the one it had), takes a copy of the record, forgets the directories it knew
and, for a durable record, writes it. Then it reports an ``entry`` change at each outermost path
where the two states differ and a ``metadata`` change at the directories in both uppers whose
children changed, so a mount's kernel forgets exactly those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._checkpoints import (
    BEFORE_REWIND,
    Entries,
    changes_between,
    kinds_between,
    outermost,
    tally,
)
from ._cow_changes import render_between
from ._cow_meta import RESERVED, CowMeta, TreeChange
from ._frozen import FrozenDir, frozen_kind, frozen_size
from ._paths import ROOT, is_under
from ._temp import TempFileSystem
from ._types import Checkpoint, FileSystem
from ._walk import walk

if TYPE_CHECKING:
    from ._cow import CowFileSystem


@dataclass(frozen=True, slots=True, eq=False)
class CowState:
    """One state of a cow: its upper, frozen, and its record (never changed once here)."""

    upper: FrozenDir
    meta: CowMeta


def _upper(cow: CowFileSystem) -> TempFileSystem:
    upper = cow._upper_tree
    assert isinstance(upper, TempFileSystem)
    return upper


def state_now(cow: CowFileSystem) -> CowState:
    """The cow's state now: the last checkpoint's own when nothing changed since."""
    frozen = _upper(cow).frozen_root()
    last = cow._history.last()
    if last is not None and last.meta.same_as(cow._meta):
        if last.upper is frozen:
            return last
        return CowState(frozen, last.meta)
    return CowState(frozen, cow._meta.copy())


def initial_state(cow: CowFileSystem) -> CowState:
    """The state before any change: an empty upper, an empty record (the lower as it is)."""
    return CowState(TempFileSystem().frozen_root(), CowMeta())


def view(cow: CowFileSystem, state: CowState) -> CowFileSystem:
    """A read-only cow showing ``state`` over the same lower (not subscribed to anything)."""
    upper = _upper(cow).state_tree(state.upper)
    return type(cow)._of_state(cow._lower_tree, upper, state.meta, subscribe=False)


def differing(
    cow: CowFileSystem, old: CowState, new: CowState
) -> tuple[set[str], set[str], set[str]]:
    """Where ``old`` and ``new`` can differ: the upper's paths that hold different nodes (and a
    directory in both), the paths hidden in one record only (see the module docstring)."""
    entries: set[str] = set()
    directories: set[str] = set()
    for path, then, now in _upper(cow).state_differences(old.upper, new.upper):
        if is_under(path, RESERVED):
            continue
        if isinstance(then, FrozenDir) and isinstance(now, FrozenDir):
            directories.add(path)
        else:
            entries.add(path)
    hidden = set(old.meta.hidden ^ new.meta.hidden)
    return entries, directories, hidden


async def candidates(cow: CowFileSystem, old: CowState, new: CowState) -> set[str]:
    """Every path where the merged views of ``old`` and ``new`` can differ."""
    entries, directories, hidden = differing(cow, old, new)
    paths = entries | directories | hidden
    lower = cow._lower
    for path in hidden:
        if (await lower.lstat(path)).kind == "directory":
            paths.update(await _beneath(lower, path))
    return paths


async def _beneath(tree: FileSystem, path: str) -> list[str]:
    return [entry.path async for entry in walk(tree, path) if not is_under(entry.path, RESERVED)]


async def checkpoint(cow: CowFileSystem, label: str | None, turn: int | None) -> Checkpoint:
    async with cow._writing():
        return await _record(cow, state_now(cow), label, turn)


async def _record(
    cow: CowFileSystem, state: CowState, label: str | None, turn: int | None
) -> Checkpoint:
    base = cow._history.base()
    old = initial_state(cow) if base is None else base
    paths = await candidates(cow, old, state)
    # A path the upper holds in both states shows the upper's node in both: its frozen nodes
    # say what it was and is, without asking the merged view (and the lower) for it.
    counted = []
    for path, then, now in _upper(cow).state_differences(old.upper, state.upper):
        if then is not None and now is not None and path in paths:
            paths.discard(path)
            if path != ROOT:
                counted.append((frozen_kind(then), frozen_kind(now), frozen_size(now)))
    counted += await kinds_between(view(cow, old), cow, paths)
    record = cow._history.add(state, tally(counted), label=label, turn=turn)
    _upper(cow).count_from(state.upper)
    return record


async def _states(
    cow: CowFileSystem, a: int, b: int | None
) -> tuple[CowFileSystem, CowFileSystem, set[str]]:
    old = cow._history.state(a)
    new = state_now(cow) if b is None else cow._history.state(b)
    paths = await candidates(cow, old, new)
    return view(cow, old), cow if b is None else view(cow, new), paths


async def checkpoint_changes(cow: CowFileSystem, a: int, b: int | None) -> list[TreeChange]:
    async with cow._writing():
        old, new, paths = await _states(cow, a, b)
        return await changes_between(old, new, paths)


async def checkpoint_diff(cow: CowFileSystem, a: int, b: int | None) -> str:
    async with cow._writing():
        old, new, paths = await _states(cow, a, b)
        return await render_between(old, new, await changes_between(old, new, paths))


async def rewind(cow: CowFileSystem, number: int) -> Checkpoint:
    async with cow._writing():
        target = cow._history.state(number)
        now = state_now(cow)
        kept = cow._history.holding(
            lambda state: state.upper is now.upper and state.meta.same_as(now.meta)
        )
        if kept is None:
            await _record(cow, now, BEFORE_REWIND.format(number=number), None)
        entries, directories, hidden = differing(cow, now, target)
        before = Entries(view(cow, now))
        _upper(cow).restore(target.upper)
        cow._history.rewound(number)
        cow._meta = target.meta.copy()
        cow._invalidate_dirs()
        cow._epoch += 1
        cow._staged = False  # the upper's reserved directory is the state's now
        if cow._persist:
            cow._saved = None
            await cow._save()
        # A directory the upper made or dropped (a copy-up) is a directory in both merged
        # views: only what changed beneath it is an entry change.
        after = Entries(cow)
        for path in sorted(entries):
            if (await before.get(path)).kind == (await after.get(path)).kind == "directory":
                entries.discard(path)
                directories.add(path)
        changed = outermost(entries | hidden)
        await cow._observers.emit_all(
            [(path, "entry") for path in changed]
            + [(path, "metadata") for path in sorted(directories - set(changed))]
        )
        return cow._history.record(number)


async def rewind_replaces(cow: CowFileSystem, number: int) -> list[str]:
    async with cow._writing():
        target = cow._history.state(number)
        return sorted(await candidates(cow, state_now(cow), target))


async def fork(cow: CowFileSystem, number: int) -> CowFileSystem:
    async with cow._writing():
        state = cow._history.state(number)
        upper = _upper(cow).state_tree(state.upper)
        tree = type(cow)._of_state(cow._lower_tree, upper, state.meta.copy(), persist=cow._persist)
        start = CowState(upper.frozen_root(), tree._meta.copy())
        summary = cow._history.record(number).summary
        tree._history.add(start, summary, label=f"fork of {number}")
        return tree


async def prune(cow: CowFileSystem, keep_last: int) -> list[int]:
    return cow._history.prune(keep_last)
