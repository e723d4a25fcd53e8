"""The handle table: what each file handle (``fh``) the kernel holds refers to.

Theory of operation
-------------------
``open``/``create`` put a :class:`FileHandle` (the tree's :class:`vfs.OpenFile`, the inode node it
was opened through, the open flags) under a fresh ``fh``; ``opendir`` puts a :class:`DirHandle`.
Handle numbers come from a counter and are never reused, so a stale number cannot reach another
file; they start at :data:`FIRST_HANDLE`, above any inode number, because a mount serving files
by inode (see ``mountd._ops``) gets inode numbers where handles would be. ``release`` and
``releasedir`` pop them. The table does not touch the inode table; the caller pins the node for
as long as the handle exists (see ``mountd._inodes``).

A directory handle keeps a snapshot of the directory's names (with their attributes), taken when
the kernel reads from offset 0 (``opendir`` and every ``rewinddir``). Offsets given to the kernel
are positions in that snapshot, so entries added or removed while a listing is in progress never
make it skip or repeat a name, as readdir(3) requires. Directories listed without a handle (once
``opendir`` answered ENOSYS, see ``mountd._ops``) keep their snapshot per inode
(``mountd._listings``) and number names with :class:`Offsets` instead, because several listings
may then share one snapshot.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from vfs import FileInfo, OpenFile

from ._inodes import Node

FIRST_HANDLE = 1 << 48
"""The first handle number; inode numbers (a counter from 1) stay below it."""


@dataclass(eq=False)
class FileHandle:
    """An open regular file."""

    fh: int
    node: Node
    file: OpenFile
    flags: int
    # Whether anything was written through this handle since it was last flushed.
    dirty: bool = False
    # The file is the node's keeper (shared, closed with the node, not with this handle).
    shared: bool = False

    @property
    def writable(self) -> bool:
        return (self.flags & os.O_ACCMODE) != os.O_RDONLY


@dataclass(eq=False, slots=True)
class Listing:
    """A snapshot of a directory being listed: ``(offset, name, info)`` in offset order, where
    ``offset`` is what the kernel passes back to resume after that entry (names with ``.`` and
    ``..``; ``info`` is the attributes the name had when the snapshot was taken, ``None`` for the
    dots). ``generation`` is the mount's change generation at that moment: while it has not
    moved, the attributes are still what ``lstat`` would answer (see ``mountd._ops``)."""

    entries: list[tuple[int, str, FileInfo | None]]
    generation: int

    def after(self, offset: int) -> int:
        """The index of the first entry to hand out when the kernel resumes at ``offset``."""
        return bisect.bisect_right(self.entries, offset, key=_offset_of)


def _offset_of(entry: tuple[int, str, FileInfo | None]) -> int:
    return entry[0]


class Offsets:
    """Stable readdir offsets for one directory listed without handles: a name keeps its number
    across snapshots and a new name gets a higher one, so a listing resumed against a newer
    snapshot never skips or repeats a name that stayed (readdir(3))."""

    __slots__ = ("_next", "_of")

    def __init__(self) -> None:
        self._of: dict[str, int] = {".": 1, "..": 2}
        self._next = 3

    def number(self, entries: list[tuple[str, FileInfo | None]], generation: int) -> Listing:
        """Number a fresh snapshot's entries; names no longer listed are forgotten (an offset
        already handed out for one still resumes at the right place, being a number)."""
        known = self._of
        fresh: dict[str, int] = {}
        numbered = []
        for name, info in entries:
            offset = known.get(name)
            if offset is None:
                offset = self._next
                self._next += 1
            fresh[name] = offset
            numbered.append((offset, name, info))
        self._of = fresh
        numbered.sort(key=_offset_of)
        return Listing(numbered, generation)


@dataclass(eq=False)
class DirHandle:
    """An open directory and the snapshot being listed through it (offsets are positions)."""

    fh: int
    node: Node
    listing: Listing | None = field(default=None)


class HandleTable:
    """``fh`` -> open file or directory."""

    def __init__(self) -> None:
        self._files: dict[int, FileHandle] = {}
        self._dirs: dict[int, DirHandle] = {}
        self._next_fh = FIRST_HANDLE

    def __len__(self) -> int:
        return len(self._files) + len(self._dirs)

    def _take_number(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def add_file(self, node: Node, file: OpenFile, flags: int) -> FileHandle:
        handle = FileHandle(self._take_number(), node, file, flags)
        self._files[handle.fh] = handle
        return handle

    def file(self, fh: int) -> FileHandle:
        """The open file ``fh``; ``KeyError`` if there is none."""
        return self._files[fh]

    def find_file(self, fh: int) -> FileHandle | None:
        """The open file ``fh``, or ``None`` (a setattr may name a handle that is gone)."""
        return self._files.get(fh)

    def pop_file(self, fh: int) -> FileHandle:
        return self._files.pop(fh)

    def add_dir(self, node: Node) -> DirHandle:
        handle = DirHandle(self._take_number(), node)
        self._dirs[handle.fh] = handle
        return handle

    def dir(self, fh: int) -> DirHandle:
        """The open directory ``fh``; ``KeyError`` if there is none."""
        return self._dirs[fh]

    def pop_dir(self, fh: int) -> DirHandle:
        return self._dirs.pop(fh)

    def files_of(self, node: Node) -> list[FileHandle]:
        """The open files of ``node`` (linear; used only on rare paths)."""
        return [handle for handle in self._files.values() if handle.node is node]

    def open_files(self) -> list[FileHandle]:
        return list(self._files.values())
