"""Converting what a tree reports (:class:`vfs.FileInfo`) into what the kernel caches.

Theory of operation
-------------------
The kernel needs a full ``struct stat`` for every entry; trees report what they keep and leave
the rest ``None``. :class:`AttrPolicy` fills the gaps the same way for every entry of a mount:

- type bits from ``kind`` (and ``special``: a FIFO, socket or device node, with its ``rdev``);
  permission bits from ``mode``, else 0644 (file), 0755 (directory), 0777 (symlink);
- ``uid``/``gid`` from the tree, else the mount owner's; an :class:`OwnerMap` shows one owner of
  the tree as another user (``mountd run``: the project's owner as the sandbox's user) and
  records that user's new entries as the tree's owner;
- times in nanoseconds: ``mtime_ns``; ``atime_ns`` and ``ctime_ns`` default to it;
- ``nlink`` from the tree, else 2 for a directory and 1 otherwise (0 for a detached inode, as
  ``fstat`` of an unlinked file shows);
- ``st_blocks`` is the tree's ``blocks`` (what a sparse file stores), else 512-byte units of
  the size; ``st_blksize`` is 4 KiB.

The inode number ``stat`` shows is ``shown`` when given (the tree's or the mount's own number
for the file, see ``mountd._inodes``), else the node id the kernel addresses the inode by.

The entry and attribute timeouts come from the mount options: the kernel may answer from these
attributes for that long without asking, which is where the mount's speed comes from. A negative
entry (``st_ino == 0``) lets the kernel remember that a name does not exist.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

import pyfuse3

from vfs import FileInfo
from vfs.lowlevel import SPECIAL_TYPE_BITS

BLOCK_SIZE = 4096

_TYPE_BITS = {
    "file": stat.S_IFREG,
    "directory": stat.S_IFDIR,
    "symlink": stat.S_IFLNK,
}
_DEFAULT_MODE = {"file": 0o644, "directory": 0o755, "symlink": 0o777}


@dataclass(frozen=True)
class OwnerMap:
    """The tree's owner ``tree_uid``/``tree_gid`` appears through the mount as ``uid``/``gid``,
    and what that user creates or chowns to is recorded as the tree's owner. Only that one
    pair moves: every other owner shows as it is."""

    tree_uid: int
    tree_gid: int
    uid: int
    gid: int

    def shown(self, uid: int, gid: int) -> tuple[int, int]:
        return (
            self.uid if uid == self.tree_uid else uid,
            self.gid if gid == self.tree_gid else gid,
        )

    def stored_uid(self, uid: int) -> int:
        return self.tree_uid if uid == self.uid else uid

    def stored_gid(self, gid: int) -> int:
        return self.tree_gid if gid == self.gid else gid


@dataclass(frozen=True)
class AttrPolicy:
    """How one mount fills attributes (defaults, owners and cache timeouts)."""

    uid: int
    gid: int
    entry_timeout: float = 300.0
    attr_timeout: float = 300.0
    negative_timeout: float = 300.0
    owners: OwnerMap | None = None

    def stored_uid(self, uid: int) -> int:
        """The owner the tree records for a caller (or a chown) with ``uid``."""
        return uid if self.owners is None else self.owners.stored_uid(uid)

    def stored_gid(self, gid: int) -> int:
        return gid if self.owners is None else self.owners.stored_gid(gid)

    def entry(
        self, ino: int, info: FileInfo, *, detached: bool = False, shown: int = 0
    ) -> pyfuse3.EntryAttributes:
        """The kernel's view of ``info`` as inode ``ino``, showing ``st_ino`` ``shown`` when
        given (pyfuse3's ``attr_ino``)."""
        kind = info.kind
        if kind not in _TYPE_BITS:
            raise ValueError(f"no attributes for a {kind} entry")
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        if shown:
            attrs.attr_ino = shown
        attrs.generation = 0
        attrs.entry_timeout = self.entry_timeout
        attrs.attr_timeout = self.attr_timeout
        mode = info.mode if info.mode is not None else _DEFAULT_MODE[kind]
        special = info.special
        attrs.st_mode = (_TYPE_BITS[kind] if special is None else SPECIAL_TYPE_BITS[special]) | (
            mode & 0o7777
        )
        if detached:
            attrs.st_nlink = 0
        elif info.nlink is not None:
            attrs.st_nlink = info.nlink
        else:
            attrs.st_nlink = 2 if kind == "directory" else 1
        uid = self.uid if info.uid is None else info.uid
        gid = self.gid if info.gid is None else info.gid
        if self.owners is not None:
            uid, gid = self.owners.shown(uid, gid)
        attrs.st_uid = uid
        attrs.st_gid = gid
        attrs.st_rdev = info.rdev
        size = max(0, info.size)
        attrs.st_size = size
        attrs.st_blksize = BLOCK_SIZE
        attrs.st_blocks = (size + 511) // 512 if info.blocks is None else info.blocks
        mtime_ns = info.mtime_ns or 0
        attrs.st_mtime_ns = mtime_ns
        attrs.st_atime_ns = mtime_ns if info.atime_ns is None else info.atime_ns
        attrs.st_ctime_ns = mtime_ns if info.ctime_ns is None else info.ctime_ns
        return attrs

    def refresh(self, attrs: pyfuse3.EntryAttributes, old: FileInfo, info: FileInfo) -> bool:
        """Bring ``attrs``, built by :meth:`entry` from ``old``, up to ``info`` in place when
        only the size and times differ (after a write, a touch: the common change); False when
        more does. Each field set on an ``EntryAttributes`` converts (a time ~0.4 us), so this
        costs about half a rebuild."""
        if (
            info.kind != old.kind
            or info.mode != old.mode
            or info.nlink != old.nlink
            or info.uid != old.uid
            or info.gid != old.gid
            or info.special != old.special
            or info.rdev != old.rdev
            or info.ino != old.ino
        ):
            return False
        if info.size != old.size or info.blocks != old.blocks:
            size = max(0, info.size)
            attrs.st_size = size
            attrs.st_blocks = (size + 511) // 512 if info.blocks is None else info.blocks
        mtime_ns = info.mtime_ns or 0
        old_mtime_ns = old.mtime_ns or 0
        if mtime_ns != old_mtime_ns:
            attrs.st_mtime_ns = mtime_ns
        atime_ns = mtime_ns if info.atime_ns is None else info.atime_ns
        if atime_ns != (old_mtime_ns if old.atime_ns is None else old.atime_ns):
            attrs.st_atime_ns = atime_ns
        ctime_ns = mtime_ns if info.ctime_ns is None else info.ctime_ns
        if ctime_ns != (old_mtime_ns if old.ctime_ns is None else old.ctime_ns):
            attrs.st_ctime_ns = ctime_ns
        return True

    def dot(self, ino: int, shown: int = 0) -> pyfuse3.EntryAttributes:
        """Attributes for a ``.``/``..`` readdir entry (the kernel uses only number and type;
        ``shown`` as in :meth:`entry`: what ``readdir`` answers as its ``d_ino``)."""
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        if shown:
            attrs.attr_ino = shown
        attrs.st_mode = stat.S_IFDIR | 0o755
        return attrs

    def negative(self) -> pyfuse3.EntryAttributes:
        """A lookup answer meaning "no such name", cached for ``negative_timeout``."""
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = 0
        attrs.entry_timeout = self.negative_timeout
        return attrs
