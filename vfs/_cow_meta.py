"""What a copy-on-write tree remembers beside its upper tree: whiteouts, bases and origins.

Theory of operation
-------------------
``cow_fs`` (``vfs._cow``) shows an *upper* tree over a *lower* one. The upper is authoritative for
every path it holds; the lower shows through wherever the upper holds nothing, unless this record
says otherwise. Everything here is plain data and synchronous decisions (no I/O):

``hidden``
    Paths whose lower entry, and everything beneath it, is hidden. A hidden path with nothing in
    the upper is a *whiteout* (a deletion); a hidden path where the upper holds a directory is an
    *opaque* directory (the lower's children do not merge in); a hidden path where the upper holds
    a file is a replacement. One set covers all three, as overlayfs's whiteout + opaque xattr do.
    Invariant: wherever the upper holds a non-directory at ``P`` and the lower had a directory at
    ``P``, ``P`` is hidden (creating at ``P`` requires ``P`` to be missing from the merged view, and
    a visible lower directory is not missing).

``bases``
    The lower's state (:class:`Stamp`) at each lower path the tree first shadowed (copy-up,
    whiteout, rename over it). ``apply`` compares it with the lower's current state to refuse
    writing back over a file that changed underneath. ``None`` records "nothing was there".

``origins``
    For each upper path that descends from a lower entry, that lower path (copy-up in place
    records ``P -> P``; a rename through the tree moves the record). ``changes()`` reports an
    upper path whose origin is elsewhere and gone from the merged view as ``renamed``.

``inos``
    For each upper path that descends from a lower entry, the inode number the lower entry
    showed (``FileInfo.ino``), which the upper entry shows in its place, as overlayfs keeps an
    origin's: a file keeps its number across its copy-up, so git's index of the host tree still
    matches it. Recorded at a copy-up (:meth:`CowMeta.copied`) unless the lower file had several
    names (each is a file of its own in this tree, shown without the lower's number); moved and
    forgotten with ``origins``. An upper entry without one shows none (a mount numbers it).

``times``
    New times of lower files that were only touched (:class:`Touched`, a metadata-only copy-up):
    shown instead of the lower's own while the lower file is still the one touched (same kind,
    size and mtime), forgotten when the path is hidden, replaced or copied up. Times are never a
    change (``changes()`` compares content and mode), so nothing else reads them.

The record serializes to JSON (:meth:`CowMeta.dumps` / :meth:`CowMeta.loads`) for an upper that
outlives the process; ``vfs._cow`` writes it with write-then-rename under a reserved name.
"""

from __future__ import annotations

import builtins
import errno
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ._errors import PathError
from ._paths import ROOT, is_strictly_under, is_under, parent_path
from ._types import FileInfo, Kind

META_VERSION = 1

# The upper's reserved directory: the record (``meta.json``) and copies in progress (``stage/``).
# Never shown through the tree, in either layer.
RESERVED = "/.agentroot-cow"
META_PATH = RESERVED + "/meta.json"

ChangeKind = Literal["added", "modified", "deleted", "renamed", "mode_changed"]


@dataclass(frozen=True, slots=True)
class Stamp:
    """The lower's state of one path when the tree first shadowed it.

    ``digest`` is the sha256 (hex) of the bytes (a symlink's target) when the tree read them
    (copy-up reads them anyway); ``None`` when it did not (a whiteout of an unread file).
    """

    kind: Kind
    size: int
    mtime_ns: int
    mode: int | None = None
    digest: str | None = None

    @classmethod
    def of(cls, info: FileInfo, digest: str | None = None) -> Stamp:
        return cls(info.kind, info.size, info.mtime_ns or 0, info.mode, digest)

    def same_as(self, info: FileInfo) -> bool:
        """Whether ``info`` shows the same file (kind, size, mtime), without reading it."""
        return (self.kind, self.size, self.mtime_ns) == (info.kind, info.size, info.mtime_ns)


@dataclass(frozen=True, slots=True)
class TreeChange:
    """One path whose merged state differs from the lower tree's.

    ``kind``: ``added``, ``modified`` (content, or what kind of entry it is), ``deleted``,
    ``renamed`` (from ``old_path``, possibly modified too) or ``mode_changed`` (permission bits
    only). ``entry`` is what the path is now (``deleted``: what it was): ``file``, ``directory``
    or ``symlink``.
    """

    path: str
    kind: ChangeKind
    entry: Kind = "file"
    old_path: str | None = None


@dataclass(frozen=True, slots=True)
class Touched:
    """Times set on a lower file without copying it up; they hold while the lower file is
    ``base`` (an unchanged lower file: :meth:`Stamp.same_as`)."""

    base: Stamp
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


class CowConflictError(PathError):
    """``apply`` found the target changed since the copy-on-write tree shadowed a path.

    ``errno`` is ``ESTALE``; ``path`` is the first conflicting path and ``paths`` all of them.
    Nothing was written.
    """

    default_errno = errno.ESTALE

    def __init__(self, path: str, reason: str, paths: tuple[str, ...] = ()) -> None:
        self.reason = reason
        self.paths = paths or (path,)
        super().__init__(path)

    def _message(self) -> str:
        return f"conflict: {self.path} {self.reason}"


class CowRefusedError(PathError, builtins.PermissionError):
    """``apply`` may not write a change's path in the target: it goes through a symlink or a
    mount point there (see ``vfs._cow_changes.unsafe_paths``).

    ``errno`` is ``EACCES``; ``path`` is the first refused path, ``reason`` why, ``paths`` all
    of them. Nothing was written.
    """

    default_errno = errno.EACCES

    def __init__(self, path: str, reason: str, paths: tuple[str, ...] = ()) -> None:
        self.reason = reason
        self.paths = paths or (path,)
        super().__init__(path)

    def _message(self) -> str:
        return f"refused: {self.path}: {self.reason}"


class CowMeta:
    """Whiteouts, bases, origins and times of one copy-on-write tree (see the module
    docstring)."""

    __slots__ = ("bases", "hidden", "inos", "origins", "times")

    def __init__(self) -> None:
        self.hidden: set[str] = set()
        self.bases: dict[str, Stamp | None] = {}
        self.origins: dict[str, str] = {}
        self.inos: dict[str, int] = {}
        self.times: dict[str, Touched] = {}

    def __repr__(self) -> str:
        return f"CowMeta(hidden={sorted(self.hidden)}, origins={self.origins})"

    # -- decisions --------------------------------------------------------------------------

    def hides(self, path: str) -> bool:
        """Whether the lower's entry at ``path`` is hidden (it or an ancestor is hidden)."""
        hidden = self.hidden
        if not hidden:
            return False
        probe = path
        while True:
            if probe in hidden:
                return True
            if probe == ROOT:
                return False
            probe = parent_path(probe)

    def hidden_roots(self) -> list[str]:
        """The hidden paths not beneath another hidden path, sorted."""
        roots: list[str] = []
        for path in sorted(self.hidden):
            if not roots or not is_under(path, roots[-1]):
                roots.append(path)
        return roots

    def origin(self, path: str) -> str | None:
        return self.origins.get(path)

    def copied(self, path: str, lower: FileInfo) -> None:
        """The upper's ``path`` is now a copy of the lower's entry there, whose ``lstat`` is
        ``lower``: it descends from it and shows its inode number (see ``inos``)."""
        self.origins[path] = path
        ino = lower.ino
        if ino is not None and (lower.kind == "directory" or (lower.nlink or 1) < 2):
            self.inos[path] = ino
        else:
            self.inos.pop(path, None)

    def linked(self, src: str, dst: str) -> None:
        """The upper's ``dst`` is now another name of the upper file ``src``: it shows its
        number."""
        ino = self.inos.get(src)
        if ino is None:
            self.inos.pop(dst, None)
        else:
            self.inos[dst] = ino

    # -- changes ----------------------------------------------------------------------------

    def shadow(self, path: str, stamp: Stamp | None) -> None:
        """Remember the lower's state at ``path`` the first time the tree shadows it."""
        self.bases.setdefault(path, stamp)

    def hide(self, path: str, *, subtree: bool = True) -> None:
        """Hide the lower at ``path`` and beneath; whiteouts beneath become redundant.

        ``subtree=False`` (a file's whiteout) skips looking for them: nothing can be beneath.
        """
        if subtree:
            self.hidden.difference_update([p for p in self.hidden if is_strictly_under(p, path)])
        self.hidden.add(path)
        self.forget_times(path, subtree=subtree)

    def forget_times(self, path: str, *, subtree: bool = True) -> None:
        """The lower's entry at ``path`` (and beneath) no longer shows with touched times."""
        if not self.times:
            return
        self.times.pop(path, None)
        if subtree:
            for key in [p for p in self.times if is_strictly_under(p, path)]:
                del self.times[key]

    def forget_upper(self, path: str, *, subtree: bool = True) -> None:
        """The upper no longer holds ``path`` (or, with ``subtree``, anything beneath it)."""
        _forget(self.origins, path, subtree)
        _forget(self.inos, path, subtree)

    def moved(self, src: str, dst: str) -> None:
        """The upper's ``src`` (and its subtree) is now at ``dst``; ``dst``'s subtree is gone."""
        self.forget_upper(dst)
        self.forget_times(dst)
        _move(self.origins, src, dst)
        _move(self.inos, src, dst)

    def exchanged(self, a: str, b: str) -> None:
        """The upper's ``a`` and ``b`` swapped places."""
        _exchange(self.origins, a, b)
        _exchange(self.inos, a, b)

    def entries(self) -> Iterator[str]:
        """Every path this record mentions (for tests and diagnostics)."""
        yield from self.hidden
        yield from self.bases
        yield from self.origins
        yield from self.inos
        yield from self.times

    # -- persistence ------------------------------------------------------------------------

    def dumps(self) -> str:
        bases: dict[str, Any] = {
            path: None
            if stamp is None
            else [stamp.kind, stamp.size, stamp.mtime_ns, stamp.mode, stamp.digest]
            for path, stamp in sorted(self.bases.items())
        }
        return json.dumps(
            {
                "version": META_VERSION,
                "hidden": sorted(self.hidden),
                "bases": bases,
                "origins": dict(sorted(self.origins.items())),
                "inos": dict(sorted(self.inos.items())),
                "times": {
                    path: [
                        t.base.kind,
                        t.base.size,
                        t.base.mtime_ns,
                        t.atime_ns,
                        t.mtime_ns,
                        t.ctime_ns,
                    ]
                    for path, t in sorted(self.times.items())
                },
            },
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str) -> CowMeta:
        """Parse what :meth:`dumps` wrote; ``ValueError`` for anything else."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != META_VERSION:
            raise ValueError("not a copy-on-write metadata file of a known version")
        meta = cls()
        meta.hidden = {str(path) for path in data["hidden"]}
        for path, stamp in data["bases"].items():
            if stamp is None:
                meta.bases[str(path)] = None
            else:
                kind, size, mtime_ns, mode, digest = stamp
                meta.bases[str(path)] = Stamp(kind, int(size), int(mtime_ns), mode, digest)
        meta.origins = {str(k): str(v) for k, v in data["origins"].items()}
        meta.inos = {str(k): int(v) for k, v in data.get("inos", {}).items()}
        for path, (kind, size, mtime_ns, atime, mtime, ctime) in data.get("times", {}).items():
            base = Stamp(kind, int(size), int(mtime_ns))
            meta.times[str(path)] = Touched(base, int(atime), int(mtime), int(ctime))
        return meta


_V = TypeVar("_V")


def _forget(record: dict[str, _V], path: str, subtree: bool) -> None:
    record.pop(path, None)
    if subtree:
        for key in [p for p in record if is_strictly_under(p, path)]:
            del record[key]


def _move(record: dict[str, _V], src: str, dst: str) -> None:
    for key in [p for p in record if is_under(p, src)]:
        record[dst + key[len(src) :]] = record.pop(key)


def _exchange(record: dict[str, _V], a: str, b: str) -> None:
    """Swap what ``record`` holds beneath ``a`` and beneath ``b``."""
    under_a = {k: v for k, v in record.items() if is_under(k, a)}
    under_b = {k: v for k, v in record.items() if is_under(k, b)}
    for key in [*under_a, *under_b]:
        del record[key]
    for key, value in under_a.items():
        record[b + key[len(a) :]] = value
    for key, value in under_b.items():
        record[a + key[len(b) :]] = value
