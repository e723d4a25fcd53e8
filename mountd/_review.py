"""Reviewing a served tree's copy-on-write layers: find them, and apply their changes safely.

Theory of operation
-------------------
A served tree is a composition (unions, policies, audit logs, a turn root, a sandbox root); the
copy-on-write layers inside it (:class:`vfs._cow.CowFileSystem`) hold what was written through it.
:func:`find_cows` walks the known wrappers (a union's ``mounts``, anything else's ``tree``) and
returns each layer with the prefix it is served at, so a change's path in the layer (its own
coordinates, as ``changes()``/``diff()``/``apply()`` speak) maps to the served tree's with
:func:`vfs._paths.add_prefix`.

Applying writes the layer's changes into its lower tree (the host directory). Two commands do it,
``mountd run --apply`` after the command and ``mountd apply`` while the tree is mounted, and both
go through :func:`apply_unprotected`, so they protect the same things: :func:`protected` leaves
out every change that the repository policy (``.git/hooks``, ``.git/config``) would refuse, in the
layer's coordinates whether or not the layer has that policy, and every change the served tree's
own policy (``policy``, in the served tree's coordinates) does not grant write to. A directory
whose application would carry a protected change along is left out too (its entries are applied
one by one). Kept changes stay in the layer and keep being listed. The served tree's policy is
the one ``mountd run`` applies (:func:`served_policy`).

The protection check and the write are two steps: ``CowFileSystem.apply`` recomputes the changes
under the layer's lock, and :func:`apply_unprotected` names only paths it checked. A change made
through the mount between the two steps and beneath a chosen path would be applied along; the
repository policy on the served tree refuses the protected writes in the first place.

Conflicts (the lower changed since the layer copied the path up) are ``CowConflictError`` from
``apply`` itself: every change is checked before anything is written, so nothing is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vfs._cow import CowFileSystem
from vfs._cow_changes import select
from vfs._cow_meta import TreeChange
from vfs._errors import PermissionDeniedError
from vfs._paths import ROOT, add_prefix, is_under
from vfs._policy import Policy, PolicyFileSystem, repository_policy
from vfs._posix_view import posix_view
from vfs._types import FileSystem
from vfs._union import UnionFileSystem

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
    """A copy-on-write layer found in the served tree, and the prefix it is mounted at."""

    prefix: str
    cow: CowFileSystem

    def served(self, path: str) -> str:
        """A path of the layer's own, as the served tree names it."""
        return add_prefix(path, self.prefix)


def find_cows(tree: object, prefix: str = ROOT) -> list[CowAt]:
    """The copy-on-write layers inside a composition of known wrappers, with their prefixes."""
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


def in_git(change: TreeChange) -> bool:
    """Whether ``change`` is one of git's own files (either path of a rename under ``/.git``)."""
    return is_under(change.path, GIT_DIR) or (
        change.old_path is not None and is_under(change.old_path, GIT_DIR)
    )


def outside_git(changes: Iterable[TreeChange]) -> list[str]:
    """The paths of the changes that are not git's own files (what a diff shows by default)."""
    return [c.path for c in changes if not in_git(c)]


def protected(change: TreeChange, prefix: str, policy: Policy | None) -> bool:
    """Whether applying must leave ``change`` out: the repository policy protects it (in the
    cow's own coordinates), or ``policy`` (the served tree's) does not grant write there."""
    repository = repository_policy()
    directory = change.entry == "directory"
    for path in (change.path, change.old_path):
        if path is None:
            continue
        if repository.access(path, directory=directory) != "write":
            return True
        if policy is not None:
            full = add_prefix(path, prefix)
            if policy.access(full, directory=directory) != "write":
                return True
    return False


async def apply_unprotected(
    found: CowAt, policy: Policy | None, paths: Iterable[str] | None = None
) -> tuple[list[TreeChange], list[str]]:
    """Apply every change (at or beneath ``paths``, in the cow's coordinates; all when ``None``)
    that is not :func:`protected`; return what was applied and the protected paths kept.

    Raises ``CowConflictError`` (nothing written) when the lower changed underneath, and
    ``PermissionDeniedError`` if applying would carry a protected change along (not expected:
    every change has its own path).
    """
    changes = [change async for change in found.cow.changes()]
    keep_all = [c for c in changes if protected(c, found.prefix, policy)]
    selection = select(changes, None if paths is None else list(paths))
    keep = [c for c in selection if c in keep_all]
    chosen = [c for c in selection if c not in keep_all]
    # Applying a directory's path applies everything beneath it: leave out directories that
    # would carry a protected change along (their entries are listed, and applied, one by one).
    chosen = [
        c
        for c in chosen
        if c.entry != "directory"
        or not any(
            is_under(k.path, c.path) or (k.old_path is not None and is_under(k.old_path, c.path))
            for k in keep_all
        )
    ]
    chosen_paths = [c.path for c in chosen]
    if not chosen_paths:
        return [], [c.path for c in keep]
    carried = [c.path for c in select(changes, chosen_paths) if c in keep_all]
    if carried:  # refuse rather than write them
        raise PermissionDeniedError(carried[0])
    applied = await found.cow.apply(chosen_paths)
    return applied, [c.path for c in keep]
