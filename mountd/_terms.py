"""The terms a mount is served on, settled once when it is made.

Theory of operation
-------------------
Three parties decide how a mount answers the kernel: the caller's :class:`MountOptions`, what
this pyfuse3 can do (:class:`FuseFeatures`: ``scripts/install`` patches four abilities into it),
and what the served tree can do (:class:`TreeFeatures`). :func:`negotiate` turns the three into
one frozen :class:`Terms`, a pure function with no I/O, so every combination is tested without a
mount. The request handlers read only the terms; three of them are also what pyfuse3 reads once
from ``Operations`` when the kernel connection is set up (``enable_writeback_cache``,
``auto_inval_data``, ``files_by_inode``), and the kernel remembers them for the mount's life, so
the terms never change while a tree is mounted.

Why each term depends on what it does:

- ``forwards_flush`` is the tree's ``buffers_writes``: a buffering handle's write-back error
  must reach ``close(2)``; otherwise FLUSH answers ENOSYS once and the kernel stops sending it.
- ``files_by_inode`` (open answers ENOSYS: no OPEN or RELEASE) needs this pyfuse3's ability and
  a tree that buffers nothing in its open files (there is no handle to buffer in, nor a close to
  write back at), and no writeback cache (the kernel's own buffering would then need RELEASE).
- ``kernel_drops_pages`` (``auto_inval_data``: the kernel drops a file's pages whenever its time
  moves) stays the kernel's rule unless written pages are to be kept and pyfuse3 can switch it.
- ``complete_pages`` needs files served by inode (the tree holds every byte written) and pages
  the kernel keeps.
- ``listings_by_inode`` (opendir answers ENOSYS: the kernel caches listings) needs this pyfuse3's
  ability to name a readdir's directory without a handle.
- ``shows_tree_inos`` (``stat`` shows the tree's inode numbers, ``FileInfo.ino``, and the mount's
  own for files without one, instead of the node ids: see ``mountd._inodes``) needs this
  pyfuse3's ability to set them apart (``EntryAttributes.attr_ino``).
- ``reuses_attributes`` (a listing answers what the mount vouches for unexamined) needs a tree
  that can list that way and kernel attribute caching: the kernel then keeps attributes for the
  timeout itself, whatever happens to a host file.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyfuse3

from vfs.lowlevel import buffers_writes, list_reusing_of

from ._options import MountOptions


@dataclass(frozen=True)
class FuseFeatures:
    """What this pyfuse3 can do beyond the stock one (``scripts/install`` patches it in)."""

    # It names the directory of a readdir without a handle (``ReaddirToken.ino``).
    list_by_inode: bool = False
    # It can stop the kernel from dropping a file's pages whenever its time moves.
    own_page_cache: bool = False
    # It passes the inode of a file opened without a handle.
    files_by_inode: bool = False
    # It shows an inode number apart from the node id (``EntryAttributes.attr_ino``).
    own_inode_numbers: bool = False

    @classmethod
    def installed(cls) -> FuseFeatures:
        """What the pyfuse3 this process imported can do."""
        return cls(
            list_by_inode=hasattr(pyfuse3.ReaddirToken, "ino"),
            own_page_cache=hasattr(pyfuse3.Operations, "auto_inval_data"),
            files_by_inode=hasattr(pyfuse3.Operations, "files_by_inode"),
            own_inode_numbers=hasattr(pyfuse3.EntryAttributes, "attr_ino"),
        )


@dataclass(frozen=True)
class TreeFeatures:
    """What the served tree says it can do (see ``vfs._capabilities``)."""

    # Its open files may hold writes that only flush or close deliver (absent means True).
    buffers_writes: bool = True
    # It can list a directory answering the caller's own FileInfo for unchanged files.
    lists_reusing: bool = False

    @classmethod
    def of(cls, tree: object) -> TreeFeatures:
        return cls(
            buffers_writes=buffers_writes(tree),
            lists_reusing=list_reusing_of(tree) is not None,
        )


@dataclass(frozen=True)
class Terms:
    """How one mount answers the kernel, for its whole life (see the module docstring)."""

    # The kernel buffers writes (MountOptions.writeback).
    writeback_cache: bool = False
    # FLUSH reaches the tree's open files; else it answers ENOSYS.
    forwards_flush: bool = True
    # Open answers ENOSYS: no OPEN or RELEASE; reads, writes and fsyncs come by inode.
    files_by_inode: bool = False
    # The kernel drops a file's pages whenever its time moves (pyfuse3's auto_inval_data).
    kernel_drops_pages: bool = True
    # Pages writes left incomplete are handed to the kernel when the writer sets the times.
    complete_pages: bool = False
    # Opendir answers ENOSYS for directories with a time: the kernel keeps their listings.
    listings_by_inode: bool = False
    # A listing answers the files the mount vouches for without examining them again.
    reuses_attributes: bool = False
    # stat shows the tree's inode numbers (and the mount's own), not the node ids.
    shows_tree_inos: bool = False


def negotiate(options: MountOptions, fuse: FuseFeatures, tree: TreeFeatures) -> Terms:
    """The terms a mount made with ``options`` by this pyfuse3 over this tree is served on."""
    files_by_inode = (
        options.files_by_inode
        and fuse.files_by_inode
        and not tree.buffers_writes
        and not options.writeback
    )
    kernel_drops_pages = not (options.keep_written_pages and fuse.own_page_cache)
    return Terms(
        writeback_cache=options.writeback,
        forwards_flush=tree.buffers_writes,
        files_by_inode=files_by_inode,
        kernel_drops_pages=kernel_drops_pages,
        complete_pages=options.complete_pages and files_by_inode and not kernel_drops_pages,
        listings_by_inode=options.cache_listings and fuse.list_by_inode,
        reuses_attributes=(
            options.reuse_known_attributes and options.attr_timeout > 0 and tree.lists_reusing
        ),
        shows_tree_inos=fuse.own_inode_numbers,
    )
