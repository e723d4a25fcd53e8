"""Reviewing a served tree's copy-on-write layers: find them, and apply what may be applied.

Theory of operation
-------------------
A served tree is a composition (unions, policies, audit logs, a turn root, a sandbox root); the
copy-on-write layers inside it (:class:`vfs._cow.CowFileSystem`) hold what was written through it.
:func:`find_cows` walks the known wrappers (a union's ``mounts``, anything else's ``tree``) and
returns each layer with the prefix it is served at, so a change's path in the layer (its own
coordinates, as ``changes()``/``diff()``/``apply()`` speak) maps to the served tree's with
:func:`vfs._paths.add_prefix`.

Applying writes the layer's changes into its lower tree (the host directory). Every way to do it
(``mountd run --apply`` after the command, ``mountd apply`` and the control socket's ``cow
apply`` while the tree is mounted) goes through :func:`apply_unprotected`, so they refuse the same
things: what :func:`mountd._apply_rules.refusals` refuses (inside any ``.git`` only what git
writes in a normal session, no symlink into a git directory, no set-id bit, nothing the served
tree's own policy does not grant write to, nothing whose host path goes through a symlink or a
mount point). Refused changes stay in the layer and keep being listed, with their reasons, by
``changes``, ``diff`` and the run's summary, which ask the same function. The served tree's policy
is the one ``mountd run`` applies (:func:`served_policy`).

Judging and writing are two steps, but the write takes only the changes judged
(``CowFileSystem.apply(only=...)``): a change made through the mount in between is left for a
later apply, and the host side is written through ``dir_fs``'s strict view, which follows no
symlink and crosses no mount point whatever changed there meanwhile.

Conflicts (the lower changed since the layer copied the path up) are ``CowConflictError`` from
``apply`` itself: every change is checked before anything is written, so nothing is.

A checkpoint of a layer is reviewed and applied the same way (:func:`at_checkpoint`): every step
above asks ``CowAt.shown``, the checkpoint's view over the same lower, and the write is the
layer's own ``apply(checkpoint=N)``, which keeps the layer showing what it showed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vfs import (
    CowFileSystem,
    FileSystem,
    Policy,
    PolicyFileSystem,
    PosixFileSystem,
    TreeChange,
    is_under,
    posix_view,
    repository_policy,
)
from vfs.lowlevel import (
    ROOT,
    SET_ID_BITS,
    ForwardingTree,
    UnionFileSystem,
    add_prefix,
    quoted,
    read_file_bytes,
    select_changes,
)

from ._apply_rules import COUNTED_REFUSALS, Refusal, in_git_directory, refusals, refused_in
from ._git_index import rebuilt_index

GIT_DIR = "/.git"

CHANGE_LETTERS = {
    "added": "A",
    "modified": "M",
    "deleted": "D",
    "renamed": "R",
    "mode_changed": "m",
}


@dataclass(frozen=True)
class CowAt:
    """A copy-on-write layer found in the served tree, and the prefix it is mounted at; with
    ``checkpoint``, what is reviewed and applied is that checkpoint of the layer, ``shown``
    (:meth:`CowFileSystem.checkpoint_view`), not the layer now."""

    prefix: str
    cow: CowFileSystem
    checkpoint: int | None = None
    view: CowFileSystem | None = None

    @property
    def shown(self) -> CowFileSystem:
        """The tree whose changes are reviewed: the checkpoint's view, else the layer."""
        return self.cow if self.view is None else self.view

    def served(self, path: str) -> str:
        """A path of the layer's own, as the served tree names it."""
        return add_prefix(path, self.prefix)


async def at_checkpoint(found: CowAt, number: int) -> CowAt:
    """``found`` reviewing its checkpoint ``number``. Raises ``CheckpointNotFoundError``."""
    return CowAt(found.prefix, found.cow, number, await found.cow.checkpoint_view(number))


class Scratch(ForwardingTree):
    """A tree whose changes are nobody's to review: a sandbox's scratch ``/tmp`` (a
    copy-on-write layer over the project's own ``tmp/``, so that what the project keeps there
    stays in sight while what the command writes there is dropped with it)."""

    def __init__(self, tree: PosixFileSystem) -> None:
        self._forward_to(tree)

    def __repr__(self) -> str:
        return f"scratch({self._inner!r})"


def find_cows(tree: object, prefix: str = ROOT) -> list[CowAt]:
    """The copy-on-write layers inside a composition of known wrappers, with their prefixes
    (never inside a :class:`Scratch`)."""
    if isinstance(tree, Scratch):
        return []
    if isinstance(tree, CowFileSystem):
        return [CowAt(prefix, tree)]
    if isinstance(tree, UnionFileSystem):
        found = []
        for mount, child in tree.mounts.items():
            found += find_cows(child, add_prefix(mount, prefix))
        return found
    inner = getattr(tree, "tree", None)
    if inner is not None and inner is not tree:
        return find_cows(inner, prefix)
    return []


async def served_policy(tree: FileSystem) -> Policy | None:
    """The served tree's policy, in its coordinates, as ``mountd run`` decides it: the policy
    of a policy tree at the top, else the repository policy when the root holds ``/.git``."""
    if isinstance(tree, PolicyFileSystem):
        return tree.policy
    if (await posix_view(tree).lstat(GIT_DIR)).kind == "directory":
        return repository_policy()
    return None


def change_entry(found: CowAt, change: TreeChange) -> dict[str, Any]:
    """A change as answers and summaries list it, in the served tree's paths."""
    return {
        "path": found.served(change.path),
        "kind": change.kind,
        "entry": change.entry,
        "from": None if change.old_path is None else found.served(change.old_path),
    }


async def describe_change(
    found: CowAt, change: TreeChange, refused: str | None = None
) -> dict[str, Any]:
    """:func:`change_entry` with its permission bits' change (``mode``), a symlink's target
    (``target``) and why apply refuses it (``refused``: ``None`` when it does not)."""
    entry = change_entry(found, change)
    entry["mode"] = None
    entry["target"] = None
    if change.entry == "symlink" and change.kind != "deleted":
        entry["target"] = await found.shown.readlink(change.path)
    if change.kind not in ("added", "deleted") and change.entry != "symlink":
        old = await posix_view(found.cow.lower).lstat(change.old_path or change.path)
        new = await found.shown.lstat(change.path)
        same_kind = old.kind == new.kind  # (a file that replaced a directory: no mode change)
        if same_kind and old.mode is not None and new.mode is not None and old.mode != new.mode:
            entry["mode"] = {"old": f"{old.mode:04o}", "new": f"{new.mode:04o}"}
    entry["refused"] = refused
    return entry


def change_lines(
    changes: list[dict[str, Any]], *, every: bool, gits: Sequence[str] = ()
) -> list[str]:
    """One line a change (``A /new``, ``R /b (from /a)``, ``m /x (mode 0644 -> 0755)``,
    ``A /link -> target``, ``A /x (refused: why)``, or with a ``reason``: ``A /x: why``), names
    quoted as git quotes them; unless ``every``, git's own files (under ``gits``, each layer's
    ``/.git``) that apply takes are counted on one line, and so are its refusals of a kind in
    :data:`mountd._apply_rules.COUNTED_REFUSALS`. Every review of changes words them so
    (``mountd run``'s summary, ``mountd changes`` and ``apply``)."""
    lines = []
    git = 0
    # (COUNTED_REFUSALS: an agent's git gc deletes hundreds of objects, which apply keeps)
    inside = [c for c in changes if c.get("refused") in COUNTED_REFUSALS and _in_gits(c, gits)]
    by_reason = Counter(c["refused"] for c in inside)
    grouped = set(by_reason)
    for change in changes:
        in_gits = _in_gits(change, gits)
        if not every and in_gits and change.get("refused") in grouped:
            continue
        if not every and not change.get("refused") and in_gits:
            git += 1
            continue
        mark = "/" if change["entry"] == "directory" else ""
        line = f"{CHANGE_LETTERS[change['kind']]} {quoted(change['path'])}{mark}"
        if change.get("target") is not None:
            line += f" -> {quoted(change['target'])}"
        if change["from"] is not None:
            line += f" (from {quoted(change['from'])}{mark})"
        mode = change.get("mode")
        if mode:
            line += f" (mode {mode['old']} -> {mode['new']})"
        if change.get("refused"):
            line += f" (refused: {change['refused']})"
        if change.get("reason"):
            line += f": {change['reason']}"
        lines.append(line)
    where = " ".join(gits)
    for reason in sorted(grouped) if not every else ():
        lines.append(f"{where}: {by_reason[reason]} changes of git's own files (refused: {reason})")
    if git:
        lines.append(f"{where}: {git} change{'s' if git != 1 else ''} (git's own files)")
    return lines


def _in_gits(change: dict[str, Any], gits: Sequence[str]) -> bool:
    return any(
        p is not None and is_under(p, g) for p in (change["path"], change["from"]) for g in gits
    )


def in_git(change: TreeChange) -> bool:
    """Whether ``change`` is one of git's own files (either path of a rename under ``/.git``)."""
    return is_under(change.path, GIT_DIR) or (
        change.old_path is not None and is_under(change.old_path, GIT_DIR)
    )


def outside_git(
    changes: Iterable[TreeChange], refused: Mapping[TreeChange, str] | None = None
) -> list[str]:
    """The paths a diff shows by default: the files and symlinks that are neither git's own
    files nor ``refused`` (a directory's path would bring in everything beneath it, refused
    entries too, and a diff shows no directory)."""
    return [
        c.path
        for c in changes
        if not in_git(c) and c.entry != "directory" and (refused is None or c not in refused)
    ]


async def judged(
    found: CowAt, policy: Policy | None
) -> tuple[list[TreeChange], dict[TreeChange, str]]:
    """The layer's changes now, and those apply refuses with why (what the listings show)."""
    changes = [change async for change in found.shown.changes()]
    return changes, await refusals(found.shown, found.prefix, changes, policy)


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_unprotected` did: the changes written, those refused (among the chosen
    ones, with why), and the applied paths whose set-id bits were left out."""

    applied: tuple[TreeChange, ...]
    refused: tuple[Refusal, ...]
    set_id_cleared: tuple[str, ...] = ()


CHECKPOINT_INDEX = (
    "a checkpoint's git index is not applied (apply writes git's rebuild of an index, which a "
    "checkpoint cannot hold); apply the tree now"
)


def _is_index(change: TreeChange) -> bool:
    relative = in_git_directory(change.path)
    return change.entry == "file" and relative is not None and relative.lower() == "index"


async def apply_unprotected(
    found: CowAt, policy: Policy | None, paths: Iterable[str] | None = None
) -> Applied:
    """Apply every change (at or beneath ``paths``, in the cow's coordinates; all when ``None``)
    that :func:`mountd._apply_rules.refusals` does not refuse.

    Raises ``CowConflictError`` (nothing written) when the lower changed underneath, and
    ``CowRefusedError`` (nothing written) when a host path became unsafe since it was judged.
    """
    cow = found.shown
    changes = [change async for change in cow.changes()]
    selection = select_changes(changes, None if paths is None else list(paths))
    # Judged as what is applied: a host symlink that an unchosen change would replace stays.
    refused = await refusals(cow, found.prefix, selection, policy)
    kept = tuple(refused_in(selection, refused))
    chosen = [c for c in selection if c not in refused]
    if not chosen:
        return Applied((), kept)
    cleared = []
    for change in chosen:
        if change.kind != "deleted" and change.entry != "symlink":
            mode = (await cow.lstat(change.path)).mode
            if mode is not None and mode & SET_ID_BITS:
                cleared.append(change.path)
    indexes = [c for c in chosen if c.kind in ("added", "modified") and _is_index(c)]
    if indexes and found.view is not None:  # a checkpoint's view cannot take a rebuilt index
        kept += tuple(Refusal(change, CHECKPOINT_INDEX) for change in indexes)
        chosen = [c for c in chosen if c not in indexes]
        if not chosen:
            return Applied((), kept)
    elif indexes:
        for change in indexes:  # what is written is git's rebuild of it (see mountd._git_index)
            rebuilt = await rebuilt_index(await read_file_bytes(cow, change.path))
            await found.cow.write(change.path, rebuilt)
    applied = await found.cow.apply(
        None if paths is None else list(paths), only=chosen, checkpoint=found.checkpoint
    )
    return Applied(tuple(applied), kept, tuple(cleared))
