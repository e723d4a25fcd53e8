"""What applying a copy-on-write layer may write back into the host directory, and why not.

Theory of operation
-------------------
Every way of applying (``mountd run --apply``, ``mountd apply MNT [PATH...]``, the control
socket's ``cow apply``) and every listing of changes (``changes``, ``diff``, the run's summary)
asks :func:`refusals` which changes are refused, and why. A refused change is never written; it
stays in the layer and is listed with its reason. The decision is made in the layer's own
coordinates (the host directory's paths), whatever prefix the layer is served at and whether or
not it has a policy of its own.

A change is refused, for the first reason that holds, when:

0. it changes what the host's own git configuration runs or reads from the work tree: the
   ``core.hooksPath`` directory, a configuration file an ``include.path`` names, or a directory
   holding either (:mod:`mountd._git_config`);
1. a path of it (either path of a rename) lies inside a git directory and :data:`GIT_RULES` does
   not apply it (see below);
2. it makes a symlink that leads into a git directory: its target, as written or as resolved in
   the layer, has a ``.git`` segment (a host program writing through ``docs -> .git/hooks``
   would plant a hook); or one that leads out of the tree, followed as the host follows it
   (an absolute target, or ``..`` past the top, through the tree's other symlinks too): a host
   program writing ``build.log -> ~/.bashrc`` would write there;
3. only set-id bits differ (apply clears ``0o6000`` from every mode it writes, so such a change
   would never be applied: see ``vfs._cow_changes.without_set_id``);
4. the served tree's own policy does not grant write at a path of it (in the served tree's
   coordinates: the policy ``mountd run`` applies, :func:`mountd._review.served_policy`);
5. its path on the host goes through a symlink or a mount point
   (:func:`vfs._cow_changes.unsafe_paths`: judged on what the host path really is, never on its
   text alone);
6. it depends on a refused change: a directory's removal (or replacement) is applied whole or
   not at all, so a removal beneath a refused one, and the removal of a directory that still
   holds a refused one, are refused (``.git`` replaced by a gitfile must not delete the
   repository's objects and refs one by one); and nothing is made inside a directory whose
   creation is refused (writing it would make that directory).

5 and 6 depend on which other changes are applied, so they are decided to a fixed point (an
apply judges the changes it was asked for; a listing judges them all). Reasons name paths in the
layer's own coordinates, the host directory's.

Git directories. A path segment named ``.git`` (in any letter case: a case-folding host
directory would take ``.GIT`` for it) starts a git directory, anywhere in the tree: a nested
repository's ``sub/.git`` is judged like the top one. So does a directory git would take for a
bare repository (a ``HEAD`` with ``commondir``, or with ``objects`` and ``refs``:
:func:`bare_repository`), since a git command run anywhere inside it reads its ``config`` and
runs its hooks; apply never makes one (a change that would turn a directory that is not one on
the host into one is refused: a ``config`` applied in one run, a ``HEAD`` in the next, would).
Inside a git directory, only what git's own commands write in a normal session is applied, as
the first matching row of :data:`GIT_RULES` says (by
the path relative to the git directory, the entry's kind and the change's kind; a rename is
judged as a deletion at its old path and an addition at its new one). A path matching no row is
refused. A ``.git`` inside a git directory is refused outright (git would take it for a
repository of its own). The rows, in order:

* any symlink: git follows it wherever it points, so ``.git/hooks -> x`` (a repository made
  without a hooks directory) makes ``.git/x/pre-commit`` a hook;
* ``*.lock``: a lock file left behind makes every later git command on the host fail (git
  removes its own when it finishes);
* ``hooks/``: programs git runs (commit, merge, checkout, push, ...);
* ``config``, ``config.worktree``: ``core.hooksPath``, ``core.fsmonitor``, ``core.sshCommand``,
  aliases, filter and diff drivers are commands git runs;
* ``commondir``: sends git to another directory for its config, hooks, objects and refs
  (``commondir`` = ``c`` with ``c/config`` and ``c/hooks/``, or ``/tmp``);
* ``worktrees/``: each linked worktree's ``gitdir``, ``commondir`` and config;
* ``modules/``: submodules' repositories, each with its own config and hooks;
* ``objects/info/``: ``alternates`` and ``http-alternates`` add object stores from elsewhere
  (``commit-graph`` and ``packs`` there are caches git rebuilds);
* ``info/``: ``attributes`` chooses filter and diff drivers, ``sparse-checkout``, ``exclude``
  and ``grafts`` change what git checks out and sees;
* ``rebase-merge/``, ``rebase-apply/``, ``sequencer/``: an interrupted rebase's or
  cherry-pick's todo list; ``git rebase --continue`` on the host runs its ``exec`` lines;
* a loose object or pack file changed in place: its name is its content's hash, git never
  rewrites one, so a changed one is corruption; and any object or pack deleted (a pack deleted
  and its objects written back loose under their names, with other bytes, would change what
  every commit means: ``git gc`` on the host removes what nothing needs);
* objects: loose objects (``objects/xx/`` and the file named by the rest of the hash) and packs
  (``objects/pack/pack-*`` with git's suffixes), added;
* ``refs/replace/``: a replace ref makes git show other bytes for an existing object, unseen
  in any diff;
* ``refs/``, ``logs/``: branch, tag and remote refs and their reflogs, any change;
* ``packed-refs``, ``index``, ``HEAD``, the ``*_HEAD`` files (``ORIG_HEAD``, ``FETCH_HEAD``,
  ``MERGE_HEAD``, ...), ``AUTO_MERGE``, ``COMMIT_EDITMSG``, ``MERGE_MSG``, ``MERGE_MODE``,
  ``SQUASH_MSG``, ``TAG_EDITMSG``, ``description``: added or modified (``*_HEAD`` and the
  messages deleted too, as git does when an operation ends);
* the structure: the git directory itself and ``objects/``, ``objects/pack/``, ``refs/``,
  ``logs/`` as directories, added (a new repository);
* the git directory itself as a file (a gitfile, ``gitdir: elsewhere``) or changed otherwise:
  it tells git where the repository is.

What the rows leave out is refused with :data:`NOT_GIT_S_OWN` (``shallow``, ``rr-cache/``,
``FETCH_HEAD``-like state of other tools, a mode change of git's files, ...).

What a row applies is then judged by what it holds (:func:`_content_reason`): an added loose
object must hash to its name and an added pack index pass git's ``verify-pack``
(:mod:`mountd._git_objects`); a reflog may only grow; the index must be one git reads without
error, naming no path git would refuse, not sparse, staging no symlink the work tree does not
hold (:mod:`mountd._git_index`), and what apply writes is git's rebuild of it from its entries
(``mountd._review.apply_unprotected``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from vfs import (
    CowFileSystem,
    InvalidPathError,
    Kind,
    Policy,
    PolicyFileSystem,
    PosixFileSystem,
    TreeChange,
    is_under,
    normalize_path,
    posix_view,
)
from vfs.lowlevel import (
    ROOT,
    DirFileSystem,
    add_prefix,
    is_strictly_under,
    parent_path,
    quoted,
    read_file_bytes,
    unsafe_paths,
    without_set_id,
    writer_view,
)

from ._git_config import git_runs
from ._git_index import SYMLINK_MODE, index_entries, judged_entries
from ._git_objects import loose_object_refusal, pack_refusal, ref_refusal, reflog_refusal

ANY_ENTRY: frozenset[Kind] = frozenset({"file", "directory", "symlink"})
ANY_CHANGE = frozenset({"added", "modified", "deleted", "mode_changed"})
FILE: frozenset[Kind] = frozenset({"file"})
DIRECTORY: frozenset[Kind] = frozenset({"directory"})


@dataclass(frozen=True)
class GitRule:
    """One row of :data:`GIT_RULES`: paths inside a git directory matching ``pattern`` (relative
    to it; ``*`` stays within a name, ``**`` spans names, ``""`` is the directory itself), of an
    entry kind in ``entries``, changed as in ``changes`` (``added``, ``modified``, ``deleted``,
    ``mode_changed``: a rename is a deletion and an addition) are applied when ``applies``, else
    refused; ``reason`` says why."""

    pattern: str
    entries: frozenset[Kind]
    changes: frozenset[str]
    applies: bool
    reason: str
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", _compile(self.pattern))

    def matches(self, relative: str, entry: Kind, change: str) -> bool:
        return (
            entry in self.entries
            and change in self.changes
            and self._regex.fullmatch(relative) is not None
        )


def _compile(pattern: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\*\*|\*|\[[^\]]*\])", pattern):
        if token == "**":
            parts.append(".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token.startswith("["):
            parts.append(token)
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts), re.IGNORECASE)


_HEX2 = "[0-9a-f][0-9a-f]"
_PACK_FILES = r"(pack|idx|rev|bitmap|keep|promisor|mtimes)"

GIT_RUNS_IT = "git runs what is there"
OBJECTS_KEPT = (
    "apply never deletes git's objects (a deleted pack takes history with it; git gc on the "
    "host removes what nothing needs)"
)
COUNTED_REFUSALS = frozenset({OBJECTS_KEPT})
"""Refusals a review counts on one line rather than listing (an agent's ``git gc`` deletes
hundreds of objects); every other refusal is listed, one line each."""
LEADS_ELSEWHERE = "it sends git to another directory, with its own config and hooks"
NOT_GIT_S_OWN = (
    "not what git writes in a normal session (only objects, refs, logs, packed-refs, index, "
    "HEAD and the *_HEAD files and the commit messages are applied inside .git)"
)

GIT_RULES: tuple[GitRule, ...] = (
    GitRule(
        "**",
        frozenset({"symlink"}),
        ANY_CHANGE,
        False,
        "a symlink inside .git: git follows it wherever it points",
    ),
    GitRule(
        "**.lock",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "a lock file left behind makes every later git command fail",
    ),
    GitRule("hooks", ANY_ENTRY, ANY_CHANGE, False, f"git's hooks: {GIT_RUNS_IT}"),
    GitRule("hooks/**", ANY_ENTRY, ANY_CHANGE, False, f"git's hooks: {GIT_RUNS_IT}"),
    GitRule(
        "config",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "git's config names commands git runs (core.hooksPath, core.fsmonitor, aliases, filters)",
    ),
    GitRule(
        "config.worktree",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "git's config names commands git runs (core.hooksPath, core.fsmonitor, aliases, filters)",
    ),
    GitRule("commondir", ANY_ENTRY, ANY_CHANGE, False, f"commondir: {LEADS_ELSEWHERE}"),
    GitRule("worktrees", ANY_ENTRY, ANY_CHANGE, False, f"linked worktrees: {LEADS_ELSEWHERE}"),
    GitRule("worktrees/**", ANY_ENTRY, ANY_CHANGE, False, f"linked worktrees: {LEADS_ELSEWHERE}"),
    GitRule(
        "modules",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "submodules' repositories, each with its own config and hooks",
    ),
    GitRule(
        "modules/**",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "submodules' repositories, each with its own config and hooks",
    ),
    GitRule(
        "objects/info",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "objects/info: alternates add object stores from elsewhere",
    ),
    GitRule(
        "objects/info/**",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "objects/info: alternates add object stores from elsewhere",
    ),
    GitRule(
        "info",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "info: attributes choose the filters git runs; sparse-checkout, exclude and grafts "
        "change what git sees",
    ),
    GitRule(
        "info/**",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "info: attributes choose the filters git runs; sparse-checkout, exclude and grafts "
        "change what git sees",
    ),
    *(
        GitRule(
            pattern,
            ANY_ENTRY,
            ANY_CHANGE,
            False,
            "an interrupted rebase's todo list: git rebase --continue runs its exec lines",
        )
        for pattern in (
            "rebase-merge",
            "rebase-merge/**",
            "rebase-apply",
            "rebase-apply/**",
            "sequencer",
            "sequencer/**",
        )
    ),
    GitRule(
        f"objects/{_HEX2}/*",
        FILE,
        frozenset({"modified"}),
        False,
        "an object changed in place: its name is its content's hash, git never rewrites one",
    ),
    GitRule(
        "objects/pack/pack-*",
        FILE,
        frozenset({"modified"}),
        False,
        "a pack changed in place: its name is its content's hash, git never rewrites one",
    ),
    *(
        GitRule(pattern, ANY_ENTRY, frozenset({"deleted"}), False, OBJECTS_KEPT)
        for pattern in (f"objects/{_HEX2}", f"objects/{_HEX2}/*", "objects/pack/*")
    ),
    GitRule(
        f"objects/{_HEX2}",
        DIRECTORY,
        frozenset({"added"}),
        True,
        "a directory of loose objects",
    ),
    GitRule(
        f"objects/{_HEX2}/[0-9a-f][0-9a-f]*",
        FILE,
        frozenset({"added"}),
        True,
        "a loose object",
    ),
    GitRule(
        "objects/pack/pack-*",
        FILE,
        frozenset({"added"}),
        True,
        "a pack, its index or its companion files",
    ),
    GitRule(
        "refs/replace",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "replace refs change what existing commits and files mean, unseen in any diff",
    ),
    GitRule(
        "refs/replace/**",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "replace refs change what existing commits and files mean, unseen in any diff",
    ),
    GitRule("refs/**", ANY_ENTRY - {"symlink"}, ANY_CHANGE, True, "a ref or a directory of refs"),
    GitRule("logs/**", ANY_ENTRY - {"symlink"}, ANY_CHANGE, True, "a reflog"),
    *(
        GitRule(name, FILE, frozenset({"added", "modified"}), True, "git's own state")
        for name in ("packed-refs", "index", "HEAD", "description")
    ),
    *(
        GitRule(name, FILE, frozenset({"added", "modified", "deleted"}), True, "git's own state")
        for name in (
            "*_HEAD",
            "AUTO_MERGE",
            "COMMIT_EDITMSG",
            "MERGE_MSG",
            "MERGE_MODE",
            "SQUASH_MSG",
            "TAG_EDITMSG",
        )
    ),
    *(
        GitRule(name, DIRECTORY, frozenset({"added"}), True, "a new repository's structure")
        for name in ("", "objects", "objects/pack", "refs", "logs")
    ),
    GitRule(
        "",
        ANY_ENTRY,
        ANY_CHANGE,
        False,
        "the .git entry itself: a gitfile or a replaced git directory sends git elsewhere",
    ),
)
"""The rows, first match wins (explained in the module docstring); no row: :data:`NOT_GIT_S_OWN`."""

_PACK_NAME = re.compile(rf"pack-[0-9a-f]+\.{_PACK_FILES}")
_LOOSE_NAME = re.compile(r"[0-9a-f]{38}|[0-9a-f]{62}")
_LOOSE_PATH = re.compile(rf"objects/{_HEX2}/(?:{_LOOSE_NAME.pattern})")

NESTED_GIT = "a .git inside a git directory: git would take it for a repository of its own"
SYMLINK_INTO_GIT = "a symlink into a git directory: whatever writes through it writes git's files"
NEW_REPOSITORY = (
    "{directory} becomes a git directory here (git run there reads its config and runs its "
    "hooks): apply makes no repository but a .git"
)
SYMLINK_OUT = (
    "a symlink out of the tree (an absolute target, .. past the top, or a loop): whatever "
    "follows it on the host reads or writes there"
)
SET_ID_ONLY = "only set-id bits change, and apply never sets them"
UNJUDGED = "could not be judged ({error}): apply writes only what it has judged"
POLICY_DENIES = "the tree's policy does not let it be written"


def git_segments(path: str) -> list[int]:
    """The indexes of ``path``'s names that start a git directory (``.git`` in any case)."""
    return [i for i, name in enumerate(path.split("/")[1:]) if name.lower() == ".git"]


def git_reason(path: str, entry: Kind, change: str, bare: str | None = None) -> str | None:
    """Why a change (``change``: added, modified, deleted or mode_changed) of the ``entry`` at
    ``path`` (the layer's coordinates) is refused by :data:`GIT_RULES`; ``None`` when it is
    outside every git directory or a row applies it. ``bare`` is a directory above ``path``
    that git takes for a repository though it is not named ``.git`` (see
    :func:`bare_repository`)."""
    names = path.split("/")[1:] if path != ROOT else []
    if sum(name.lower() == ".git" for name in names) > 1:
        return NESTED_GIT
    relative = in_git_directory(path, bare)
    if relative is None:
        return None
    for rule in GIT_RULES:
        if rule.matches(relative, entry, change):
            if rule.applies and not _well_named(relative, entry):
                return NOT_GIT_S_OWN
            return None if rule.applies else rule.reason
    return NOT_GIT_S_OWN


def in_git_directory(path: str, bare: str | None = None) -> str | None:
    """``path`` relative to the git directory it lies in (``""``: the directory itself), or
    ``None`` outside every git directory (``bare``: as for :func:`git_reason`)."""
    names = path.split("/")[1:] if path != ROOT else []
    for i, name in enumerate(names):
        if name.lower() == ".git":
            return "/".join(names[i + 1 :])
    if bare is not None and is_strictly_under(path, bare):
        return path[len(bare.rstrip("/")) + 1 :]
    return None


def _well_named(relative: str, entry: Kind) -> bool:
    """Objects are named by their hash: a file in ``objects/`` must be named as git names one."""
    if entry != "file" or not relative.lower().startswith("objects/"):
        return True
    name = relative.rsplit("/", 1)[-1].lower()
    if relative.lower().startswith("objects/pack/"):
        return _PACK_NAME.fullmatch(name) is not None
    return _LOOSE_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Refusal:
    """A change apply leaves out, and why (in words a reviewer reads)."""

    change: TreeChange
    reason: str


async def refusals(
    cow: CowFileSystem,
    prefix: str,
    changes: Iterable[TreeChange],
    policy: Policy | None,
) -> dict[TreeChange, str]:
    """The changes of the layer ``cow`` (served at ``prefix``) that apply refuses, with why (see
    the module docstring); ``policy`` is the served tree's, in its coordinates."""
    listed = list(changes)
    refused: dict[TreeChange, str] = {}
    seen: dict[str, bool] = {}  # directory -> whether git takes it for a repository
    dest = writer_view(cow.lower)
    host = _host_directory(dest)
    runs = await git_runs(host) if host is not None and listed else {}
    for change in listed:
        try:
            reason = _run_by_git(change, runs) or await _own_reason(
                cow, prefix, change, policy, seen
            )
        except Exception as error:  # (an agent's tree must not stop the review: refuse)
            reason = UNJUDGED.format(error=error)
        if reason is not None:
            refused[change] = reason
    while True:
        chosen = [c for c in listed if c not in refused]
        more: dict[TreeChange, str] = {}
        unsafe = await unsafe_paths(dest, chosen) if chosen else {}
        for change in chosen:
            for path in (change.path, change.old_path):
                if path is not None and path in unsafe:
                    more.setdefault(change, unsafe[path])
            reason = _held_back(change, refused)
            if reason is not None:
                more.setdefault(change, reason)
        if not more:
            return refused
        refused.update(more)


def _host_directory(dest: PosixFileSystem) -> str | None:
    """The host directory apply writes to, when it is one."""
    tree = dest.tree if isinstance(dest, PolicyFileSystem) else dest
    return tree.host_root if isinstance(tree, DirFileSystem) else None


def _run_by_git(change: TreeChange, runs: dict[str, str]) -> str | None:
    """Why ``change`` touches what the host's git runs or reads (:mod:`mountd._git_config`):
    a change at such a path, beneath it, or at a directory holding it (a symlink there would
    send git elsewhere)."""
    for path in (change.path, change.old_path):
        if path is None:
            continue
        for protected, reason in runs.items():
            if is_under(path, protected) or is_under(protected, path):
                return reason
    return None


async def bare_repository(cow: CowFileSystem, path: str, seen: dict[str, bool]) -> str | None:
    """The nearest directory above ``path`` (the root too) that git would take for a repository
    of its own though it is not named ``.git``, judged more widely than git's discovery (see
    :func:`_looks_like_repository`), in the layer as apply would leave it. A ``config``
    there is read (``core.fsmonitor``, aliases, ...) by any git command run inside it, and its
    ``hooks/`` run: its contents are judged by :data:`GIT_RULES` like a ``.git``'s."""
    probe = path
    while probe != ROOT:
        probe = parent_path(probe)
        looks = seen.get(probe)
        if looks is None:
            looks = seen[probe] = await _looks_like_repository(cow, probe)
        if looks:
            return probe
    return None


async def _looks_like_repository(cow: PosixFileSystem, directory: str) -> bool:
    """Whether git might take ``directory`` for a repository: a ``HEAD`` that is not a
    directory, with ``commondir`` (git then looks for the rest there) or with ``objects`` and
    ``refs`` of any kind. Git asks more (a ``HEAD`` it can parse, in one of several spellings
    or as a symlink; ``objects`` and ``refs`` it can search, which a symlink or an executable
    file passes), and a narrower copy of its rules is how a planted ``config`` gets through:
    this errs the other way, refusing the odd directory that holds a file named ``HEAD``."""
    base = directory.rstrip("/")
    if (await cow.lstat(base + "/HEAD")).kind in ("missing", "directory"):
        return False
    if (await cow.lstat(base + "/commondir")).exists:
        return True
    for name in ("objects", "refs"):
        if not (await cow.lstat(f"{base}/{name}")).exists:
            return False
    return True


async def _own_reason(
    cow: CowFileSystem,
    prefix: str,
    change: TreeChange,
    policy: Policy | None,
    seen: dict[str, bool],
) -> str | None:
    """Reasons 1 to 4 of the module docstring: those that depend on this change alone."""
    if change.kind == "renamed":
        assert change.old_path is not None
        judged = [(change.old_path, "deleted"), (change.path, "added")]
    else:
        judged = [(change.path, change.kind)]
    for path, kind in judged:
        bare = None if git_segments(path) else await bare_repository(cow, path, seen)
        if (
            bare is not None
            and kind != "deleted"
            and not await _looks_like_repository(posix_view(cow.lower), bare)
        ):
            return NEW_REPOSITORY.format(directory=quoted(bare))
        reason = git_reason(path, change.entry, kind, bare)
        if reason is None and change.entry == "file" and kind in ("added", "modified"):
            relative = in_git_directory(path, bare)
            if relative is not None:
                reason = await _content_reason(cow, path, relative, kind)
        if reason is not None:
            return reason if bare is None else f"{reason} ({quoted(bare)} is a git directory)"
    if change.entry == "symlink" and change.kind != "deleted":
        if await _leads_out(cow, change.path):
            return SYMLINK_OUT
        if await _leads_into_git(cow, change.path):
            return SYMLINK_INTO_GIT
    if change.kind == "mode_changed" and change.entry != "symlink":
        old = (await posix_view(cow.lower).lstat(change.path)).mode
        new = (await cow.lstat(change.path)).mode
        if old is not None and new is not None and without_set_id(new) == without_set_id(old):
            return SET_ID_ONLY
    if policy is not None:
        directory = change.entry == "directory"
        for path, _ in judged:
            if policy.access(add_prefix(path, prefix), directory=directory) != "write":
                return POLICY_DENIES
    return None


async def _content_reason(cow: CowFileSystem, path: str, relative: str, kind: str) -> str | None:
    """Why one of git's own files, added or modified at ``path`` (``relative`` in its git
    directory), must not be applied for what it holds (see :mod:`mountd._git_index` and
    :mod:`mountd._git_objects`); ``None`` when nothing here judges it."""
    lowered = relative.lower()
    if lowered == "index":
        entries = await judged_entries(await read_file_bytes(cow, path))
        if isinstance(entries, str):
            return entries
        return await _staged_symlink_reason(cow, path, entries)
    if kind == "added" and _LOOSE_PATH.fullmatch(lowered):
        return loose_object_refusal(relative, await read_file_bytes(cow, path))
    if kind == "added" and lowered.startswith("objects/pack/") and lowered.endswith(".idx"):
        pack = path[: -len(".idx")] + ".pack"
        if (await cow.lstat(pack)).kind != "file":
            return f"{quoted(relative)}: a pack index without its pack"
        return await pack_refusal(
            await read_file_bytes(cow, path), await read_file_bytes(cow, pack)
        )
    if relative in ("HEAD", "packed-refs") or relative.startswith("refs/"):
        return ref_refusal(relative, await read_file_bytes(cow, path))
    if kind == "modified" and lowered.startswith("logs/"):
        old = await read_file_bytes(posix_view(cow.lower), path)
        return reflog_refusal(relative, old, await read_file_bytes(cow, path))
    return None


async def _staged_symlink_reason(
    cow: CowFileSystem, index_path: str, new: dict[str, tuple[str, str]]
) -> str | None:
    """A symlink the index at ``index_path`` stages anew (``new``: its entries) must be the
    work tree's own, judged as that symlink is: else ``git restore .`` on the host makes one
    no review showed (pointing anywhere). (A bare repository's index has no work tree.)"""
    if not index_path.endswith("/.git/index"):
        return None
    lower = posix_view(cow.lower)
    old: dict[str, tuple[str, str]] | str = {}
    if (await lower.lstat(index_path)).kind == "file":
        old = await index_entries(await read_file_bytes(lower, index_path))
    work = parent_path(parent_path(index_path))
    for entry, (mode, object_id) in new.items():
        if mode != SYMLINK_MODE or (isinstance(old, dict) and old.get(entry) == new[entry]):
            continue
        path = add_prefix(ROOT + entry, work)
        shown = (await cow.lstat(path)).kind == "symlink"
        if not shown or _blob_id(await cow.readlink(path), len(object_id)) != object_id:
            return f"the index stages a symlink at {entry!r} that the work tree does not hold"
        if await _leads_out(cow, path):
            return f"the index stages a symlink at {entry!r}: {SYMLINK_OUT}"
        if await _leads_into_git(cow, path):
            return f"the index stages a symlink at {entry!r}: {SYMLINK_INTO_GIT}"
    return None


def _blob_id(target: str, digits: int) -> str:
    """The object id git gives a symlink's blob (its target), in the repository's hash."""
    data = target.encode("utf-8", "surrogateescape")
    make = hashlib.sha256 if digits == 64 else hashlib.sha1
    return make(b"blob %d\0" % len(data) + data).hexdigest()


async def _leads_into_git(cow: CowFileSystem, path: str) -> bool:
    target = await cow.readlink(path)
    if any(name.lower() == ".git" for name in target.split("/")):
        return True
    base = ROOT if target.startswith("/") else parent_path(path)
    try:
        lexical = normalize_path(base.rstrip("/") + "/" + target)
        real = await cow.real_path(path)
    except OSError:
        return True  # a loop, or a target no path names: nothing git's to follow, but refuse
    return bool(git_segments(lexical) or git_segments(real))


_HOPS_AT_MOST = 40  # symlinks followed in one resolution, as the kernel's MAXSYMLINKS


async def _leads_out(cow: CowFileSystem, path: str) -> bool:
    """Whether the symlink at ``path``, followed as the host follows it (``..`` of the top
    leaves the tree, an absolute target is the host's), leads out of the tree, or may once
    the tree changes: a loop counts as leading out, and so does ``..`` of a name that is not
    there yet (a later symlink there could send it anywhere)."""
    target = await cow.readlink(path)
    if target.startswith("/"):
        return True
    current = [name for name in parent_path(path).split("/") if name]
    missing = 0  # how many of the last names of ``current`` are not in the tree
    pending = target.split("/")
    hops = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if not current or missing:
                return True
            current.pop()
            continue
        probe = "/" + "/".join([*current, name])
        try:
            kind = (await cow.lstat(probe)).kind
        except InvalidPathError:
            kind = "missing"  # a name no tree holds (too long): nothing there, ever
        if kind == "missing":
            missing += 1
        elif kind == "symlink":
            hops += 1
            link = await cow.readlink(probe)
            if hops > _HOPS_AT_MOST or link.startswith("/"):
                return True
            pending[:0] = link.split("/")  # resolved from the link's own directory
            continue
        current.append(name)
    return False


def _removes(change: TreeChange) -> str | None:
    """The path whose lower entry ``change`` removes or replaces, if any."""
    if change.kind in ("deleted", "modified"):
        return change.path
    return change.old_path if change.kind == "renamed" else None


def _held_back(change: TreeChange, refused: dict[TreeChange, str]) -> str | None:
    """Reason 6: a refused change that this one depends on. A directory's removal is applied
    whole or not at all, and nothing is made inside a directory whose creation is refused."""
    removes = _removes(change)
    relative = in_git_directory(removes) if removes is not None else None
    if removes is not None and relative is not None and relative.startswith("refs/"):
        # git pack-refs deletes the loose refs it packs: without the new packed-refs, those
        # deletions would drop the branches.
        packed = removes[: -len(relative)] + "packed-refs"
        if any(other.path == packed for other in refused):
            return f"removes a ref that {quoted(packed)}, which is refused, may hold now"
    for other in refused:
        held = _removes(other)
        if removes is not None and held is not None:
            if is_strictly_under(held, removes):
                return (
                    f"removes {quoted(removes)}, which still holds a refused change: {quoted(held)}"
                )
            if is_strictly_under(removes, held):
                return f"part of the removal of {quoted(held)}, which is refused"
        if (
            change.kind != "deleted"
            and other.entry == "directory"
            and other.kind in ("added", "modified", "renamed")
            and is_strictly_under(change.path, other.path)
        ):
            return f"inside {quoted(other.path)}, whose creation is refused"
    return None


def refused_in(changes: Iterable[TreeChange], refused: dict[TreeChange, str]) -> list[Refusal]:
    """The refusals among ``changes``, in their order."""
    return [Refusal(change, refused[change]) for change in changes if change in refused]
