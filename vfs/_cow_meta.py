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
outlives the process. Each of the four collections notes the paths whose entry changed
(:attr:`CowMeta.dirty`), so a change is saved as the entries it touched, not the whole record:
:meth:`CowMeta.journal` gives them as JSON lines (``[section, path, value]``, or ``[section,
path]`` for an entry gone) for ``vfs._cow`` to append to a journal beside the record, and
:meth:`CowMeta.replay` applies such lines over a loaded record. An ``rm -rf`` of a lower tree of
*n* files then writes O(*n*) bytes, not O(*n*²).
"""

from __future__ import annotations

import builtins
import errno
import json
from collections.abc import Iterable, Iterator, MutableMapping, MutableSet
from collections.abc import Set as AbstractSet
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


Section = Literal["hidden", "bases", "origins", "inos", "times"]
V = TypeVar("V")
S = TypeVar("S")


class _Noted:
    """What the two kinds of noted collections read alike, from their ``_data``."""

    __slots__ = ()
    _data: dict[str, Any] | set[str]

    def __contains__(self, path: object) -> bool:
        return path in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)


class _Entries(_Noted, MutableMapping[str, V]):
    """A dict of one section that notes each path whose entry is set or removed in ``dirty``.

    Every change goes through ``__setitem__``/``__delitem__`` (the mixins' ``pop``,
    ``setdefault``, ``update`` and ``clear`` too), so none escapes the journal.
    """

    __slots__ = ("_data", "_dirty", "_section")

    def __init__(self, section: Section, dirty: set[tuple[Section, str]]) -> None:
        self._data: dict[str, V] = {}
        self._section: Section = section
        self._dirty = dirty

    def __getitem__(self, path: str) -> V:
        return self._data[path]

    def get(self, path: str, default: Any = None) -> Any:  # (the hot path: no mixin)
        return self._data.get(path, default)

    def lookup(self, path: str) -> V | None:
        """The entry at ``path``, if any (``get``, typed)."""
        return self._data.get(path)

    def __setitem__(self, path: str, value: V) -> None:
        self._data[path] = value
        self._dirty.add((self._section, path))

    def __delitem__(self, path: str) -> None:
        del self._data[path]
        self._dirty.add((self._section, path))


class _Paths(_Noted, MutableSet[str]):
    """The ``hidden`` set, noting each path added or discarded in ``dirty``, and indexing each
    path under every directory above it (:meth:`beneath`: a removed directory's whiteouts are
    found without a scan of every whiteout, which made ``rm -rf`` quadratic)."""

    __slots__ = ("_beneath", "_data", "_dirty")

    def __init__(self, dirty: set[tuple[Section, str]]) -> None:
        self._data: set[str] = set()
        self._dirty = dirty
        self._beneath: dict[str, set[str]] = {}

    @classmethod
    def _from_iterable(cls, paths: Iterable[S]) -> AbstractSet[S]:
        return set(paths)  # what ``^``, ``&``, ``|`` and ``-`` make: a plain set, noted nowhere

    def view(self) -> AbstractSet[str]:
        """The paths themselves, to test membership in a loop at a plain set's cost (not to
        change: only :meth:`add` and :meth:`discard` note what changed)."""
        return self._data

    def add(self, path: str) -> None:
        if path not in self._data:
            self._data.add(path)
            for above in _ancestors(path):
                self._beneath.setdefault(above, set()).add(path)
        self._dirty.add(("hidden", path))

    def discard(self, path: str) -> None:
        if path in self._data:
            self._data.discard(path)
            for above in _ancestors(path):
                paths = self._beneath[above]
                paths.discard(path)
                if not paths:
                    del self._beneath[above]
        self._dirty.add(("hidden", path))

    def beneath(self, path: str) -> list[str]:
        """The paths strictly beneath ``path``."""
        return list(self._beneath.get(path, ()))


def _stamp_json(stamp: Stamp | None) -> Any:
    if stamp is None:
        return None
    return [stamp.kind, stamp.size, stamp.mtime_ns, stamp.mode, stamp.digest]


def _stamp_of(data: Any) -> Stamp | None:
    if data is None:
        return None
    kind, size, mtime_ns, mode, digest = data
    return Stamp(kind, int(size), int(mtime_ns), mode, digest)


def _touched_json(t: Touched) -> Any:
    return [t.base.kind, t.base.size, t.base.mtime_ns, t.atime_ns, t.mtime_ns, t.ctime_ns]


def _touched_of(data: Any) -> Touched:
    kind, size, mtime_ns, atime, mtime, ctime = data
    return Touched(Stamp(kind, int(size), int(mtime_ns)), int(atime), int(mtime), int(ctime))


class CowMeta:
    """Whiteouts, bases, origins and times of one copy-on-write tree (see the module
    docstring)."""

    __slots__ = ("bases", "dirty", "hidden", "inos", "origins", "times")

    def __init__(self) -> None:
        self.dirty: set[tuple[Section, str]] = set()  # changed since the last save
        self.hidden = _Paths(self.dirty)
        self.bases: _Entries[Stamp | None] = _Entries("bases", self.dirty)
        self.origins: _Entries[str] = _Entries("origins", self.dirty)
        self.inos: _Entries[int] = _Entries("inos", self.dirty)
        self.times: _Entries[Touched] = _Entries("times", self.dirty)

    def __repr__(self) -> str:
        return f"CowMeta(hidden={sorted(self.hidden)}, origins={self.origins})"

    def copy(self) -> CowMeta:
        """An independent copy (its values are frozen, so the containers are all it copies)."""
        meta = CowMeta()
        for path in self.hidden:
            meta.hidden.add(path)
        meta.bases.update(self.bases)
        meta.origins.update(self.origins)
        meta.inos.update(self.inos)
        meta.times.update(self.times)
        meta.dirty.clear()
        return meta

    def same_as(self, other: CowMeta) -> bool:
        return (self.hidden, self.bases, self.origins, self.inos, self.times) == (
            other.hidden,
            other.bases,
            other.origins,
            other.inos,
            other.times,
        )

    # -- decisions --------------------------------------------------------------------------

    def hides(self, path: str) -> bool:
        """Whether the lower's entry at ``path`` is hidden (it or an ancestor is hidden)."""
        hidden = self.hidden.view()
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
        return self.origins.lookup(path)

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
            for beneath in self.hidden.beneath(path):
                self.hidden.discard(beneath)
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

    def dumps(self, **extra: Any) -> str:
        """The whole record as JSON (with ``extra`` top-level fields: the journal's number)."""
        return json.dumps(
            {
                "version": META_VERSION,
                **extra,
                "hidden": sorted(self.hidden),
                "bases": {path: _stamp_json(self.bases[path]) for path in sorted(self.bases)},
                "origins": {path: self.origins[path] for path in sorted(self.origins)},
                "inos": {path: self.inos[path] for path in sorted(self.inos)},
                "times": {path: _touched_json(self.times[path]) for path in sorted(self.times)},
            },
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str) -> CowMeta:
        """Parse what :meth:`dumps` wrote; ``ValueError`` for anything else."""
        return cls.of_json(json.loads(text))

    @classmethod
    def of_json(cls, data: Any) -> CowMeta:
        """:meth:`loads` of ``data`` already parsed (its ``extra`` fields the caller's)."""
        if not isinstance(data, dict) or data.get("version") != META_VERSION:
            raise ValueError("not a copy-on-write metadata file of a known version")
        meta = cls()
        for path in data["hidden"]:
            meta.hidden.add(str(path))
        for path, stamp in data["bases"].items():
            meta.bases[str(path)] = _stamp_of(stamp)
        for path, origin in data["origins"].items():
            meta.origins[str(path)] = str(origin)
        for path, ino in data.get("inos", {}).items():
            meta.inos[str(path)] = int(ino)
        for path, touched in data.get("times", {}).items():
            meta.times[str(path)] = _touched_of(touched)
        meta.dirty.clear()
        return meta

    def journal(self) -> str:
        """The entries changed since the last call (or load), as JSON lines; clears ``dirty``."""
        lines = []
        for section, path in sorted(self.dirty):
            if section == "hidden":
                line: list[Any] = [section, path, 1] if path in self.hidden else [section, path]
            else:
                entries: _Entries[Any] = getattr(self, section)
                if path not in entries:
                    line = [section, path]
                elif section == "bases":
                    line = [section, path, _stamp_json(self.bases[path])]
                elif section == "times":
                    line = [section, path, _touched_json(self.times[path])]
                else:
                    line = [section, path, entries[path]]  # an origin (str) or an ino (int)
            lines.append(json.dumps(line, separators=(",", ":")) + "\n")
        self.dirty.clear()
        return "".join(lines)

    def replay(self, lines: Iterable[str]) -> None:
        """Apply :meth:`journal`'s lines, in order; ``ValueError`` for a line that is not one."""
        for text in lines:
            line = json.loads(text)
            if not isinstance(line, list) or len(line) not in (2, 3):
                raise ValueError(f"not a line of a copy-on-write journal: {text!r}")
            section, path = line[0], str(line[1])
            gone = len(line) == 2
            if section == "hidden":
                if gone:
                    self.hidden.discard(path)
                else:
                    self.hidden.add(path)
            elif section in ("bases", "origins", "inos", "times"):
                entries: _Entries[Any] = getattr(self, section)
                if gone:
                    entries.pop(path, None)
                elif section == "bases":
                    entries[path] = _stamp_of(line[2])
                elif section == "times":
                    entries[path] = _touched_of(line[2])
                elif section == "inos":
                    entries[path] = int(line[2])
                else:
                    entries[path] = str(line[2])
            else:
                raise ValueError(f"not a line of a copy-on-write journal: {text!r}")
        self.dirty.clear()


_V = TypeVar("_V")


def _ancestors(path: str) -> Iterator[str]:
    """The directories above a normalized path, the root first (none for the root)."""
    if path == ROOT:
        return
    yield ROOT
    cut = path.find("/", 1)
    while cut != -1:
        yield path[:cut]
        cut = path.find("/", cut + 1)


def _forget(record: MutableMapping[str, _V], path: str, subtree: bool) -> None:
    record.pop(path, None)
    if subtree:
        for key in [p for p in record if is_strictly_under(p, path)]:
            del record[key]


def _move(record: MutableMapping[str, _V], src: str, dst: str) -> None:
    for key in [p for p in record if is_under(p, src)]:
        record[dst + key[len(src) :]] = record.pop(key)


def _exchange(record: MutableMapping[str, _V], a: str, b: str) -> None:
    """Swap what ``record`` holds beneath ``a`` and beneath ``b``."""
    under_a = {k: v for k, v in record.items() if is_under(k, a)}
    under_b = {k: v for k, v in record.items() if is_under(k, b)}
    for key in [*under_a, *under_b]:
        del record[key]
    for key, value in under_a.items():
        record[b + key[len(a) :]] = value
    for key, value in under_b.items():
        record[a + key[len(b) :]] = value
