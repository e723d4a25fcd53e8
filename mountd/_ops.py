"""The FUSE request handlers: resolve an inode to a path, make one tree call, convert the answer.

Theory of operation
-------------------
:class:`Operations` is what ``pyfuse3`` calls for each kernel request. Each handler

1. resolves inode numbers to tree paths through the inode table (``mountd._inodes``) and file
   handles to open files through the handle table (``mountd._handles``);
2. makes (usually) one call on the served :class:`vfs.PosixFileSystem`;
3. converts the result with ``mountd._attrs`` and updates the tables (lookup counts, renames,
   detached inodes).

What a mount does beyond that is decided once, when it is made, by ``mountd._terms`` (the
:class:`Terms` the handlers read), and kept by pieces that each own their state and are tested
without a mount; the handlers only tell them what happened:

- ``mountd._created``: the file a CREATE left open for the WRITEs that follow (served by inode);
- ``mountd._pages``: the kernel's page cache of each file (kept, dropped, or handed the pages
  writes left incomplete), told through the kernel notifier given at construction;
- ``mountd._vouch``: the mount's *generation* (it moves whenever the tree may have changed) and
  the attributes the mount vouches for, which a listing answers without examining the files;
- ``mountd._keepers``: files held open so that an inode outlives its name (rename, unlink);
- ``mountd._cuts``: what a truncation cut off, kept briefly so that a READ the kernel sent
  before the truncation took effect is answered with the file as it was (answered short, it
  would hand its reader zeros up to the old size).

Per-inode state of those pieces follows the inode table's nodes (the table tells them which
``info`` it learns and which nodes it drops); a :class:`mountd._inodes.Node` holds only what is
the inode's own.

Every handler goes through :func:`_request`, which counts the operation, sets
:data:`vfs.change_origin` to the mount (so the tree's change notifications caused by the mount
itself do not invalidate what the kernel just learned), and maps any exception to a
``pyfuse3.FUSEError`` with ``mountd._errno.errno_for``: nothing else may escape into ``pyfuse3``.
A changing request also moves the generation before and after it runs, and first lets go of what
it invalidates (the created file, unless it is a WRITE or a SETATTR of that file).

Decisions a reader may question:

- Hard links are made in trees that can (``vfs.MakesLinks``), answered with the linked file's own
  inode so that the kernel shares one inode between the names (``Node.others``); elsewhere
  ``EPERM``, as link(2) documents. FIFOs, sockets and device nodes are made in trees that hold
  them (``vfs.MakesNodes``: ``temp_fs`` all four, ``dir_fs`` FIFOs and sockets, ``cow_fs`` what
  its upper holds); elsewhere ``EPERM``, the errno mknod(2) documents for "the filesystem does
  not support this node type". The kernel serves what they do (a FIFO's pipe, a bound socket, a
  device behind ``nodev``); the tree only keeps them.
- Extended attributes: all four handlers answer ``ENOSYS``, which the kernel remembers for the
  mount and turns into ``EOPNOTSUPP`` for callers. That costs one request per mount instead of a
  ``getxattr("security.capability")`` before every ``write()``.
- ``RENAME_EXCHANGE`` on a tree that cannot swap atomically answers ``EINVAL`` (what callers such
  as ``mv`` expect from filesystems without exchange), never a silent overwrite.
- ``flush``: a tree whose handles never buffer writes (``Terms.forwards_flush`` false) answers
  ``ENOSYS``, which the kernel remembers: it stops sending FLUSH on every ``close(2)`` for the
  whole mount. Otherwise flush is skipped for handles opened read-only (nothing to write back)
  and writers always reach ``OpenFile.flush``, so a buffering layer's write-back error reaches
  ``close(2)``.
- ``readdir`` (readdirplus) lists a directory with its attributes in one tree call
  (``list_info``; ``list`` + ``lstat`` for trees without it) when the kernel reads from offset 0
  and answers later offsets from that snapshot only while the mount's generation has not moved;
  otherwise each remaining entry is examined again (``lstat``), because readdirplus attributes go
  straight into the kernel's attribute cache and must not be older than the request.
  ``opendir`` answers ``ENOSYS`` (``Terms.listings_by_inode``: this pyfuse3 names a readdir's
  directory without a handle) for a directory with a modification time: the kernel then sends
  no OPENDIR or RELEASEDIR for the rest of the mount and keeps every listing until the
  directory changes (through the mount the kernel notices; through the API ``mountd._invalidate``
  drops the directory's pages; behind the tree's back the kernel sees the directory's time move
  once its attributes expire). Such listings are kept per inode (``mountd._listings``), numbered
  by ``mountd._handles.Offsets``. The kernel then caches directories without a time too (an
  eight-verb tree mounted inside a union): their listing is dropped as soon as the kernel has
  read it whole, so it is read afresh next time, as through a handle. Where the tree can
  (``vfs.ListsReusing``, ``Terms.reuses_attributes``), a listing answers the files the mount
  vouches for without examining them again (``mountd._vouch``).
- The kernel attributes built for a node are kept on the node with the ``FileInfo`` they came
  from and reused while the tree answers an equal ``FileInfo``.
- ``fsync`` is always forwarded; answering ENOSYS would make every later fsync a silent no-op.
- A detached inode (unlinked, renamed over, replaced behind the mount) answers ``open`` with
  ``ESTALE``, which makes the kernel redo the path walk once, unless a keeper holds its file
  (``mountd._keepers``: a rename over a file the kernel knows, and served by inode an unlink,
  keep the file open until the kernel forgets the inode).
- Files are served by inode (``Terms.files_by_inode``: when this pyfuse3 can, and the tree
  buffers nothing in its open files): ``open`` answers ``ENOSYS``, after which the kernel opens
  files without asking, for the rest of the mount, sends no RELEASE (not even for created files)
  and names the file of each read, write and fsync by its inode. Each such request opens the
  file by its current path for that request (cheap: the tree's open is a lookup), so it always
  reaches what the name means now; WRITEs right after a CREATE go through the file it opened
  (``mountd._created``). What the daemon no longer hears, and how each is kept: an ``O_TRUNC``
  open arrives as a setattr (pyfuse3 then clears libfuse's ``atomic_o_trunc``); a file unlinked
  or renamed over while the kernel knows it gets a keeper first, so a descriptor still reads it
  (and writes it, for a file the mount made or wrote); ``mountd apply`` finds files open for
  writing in ``/proc`` (``mountd._writers``); there is no open to drop a file's pages at
  (``mountd._pages`` drops or completes them elsewhere). What changes: an ``O_WRONLY`` open of a
  file the tree will not let be written (read-only layer, reserved path) succeeds, and the first
  write fails with the tree's errno instead. Handle numbers start above any inode number
  (``mountd._handles.FIRST_HANDLE``), so the two never mix when some files were created before
  the first ENOSYS.
- Open files keep the kernel's page cache (``keep_cache``) unless ``mountd._pages`` says
  otherwise; ``direct_io`` is never used: it breaks shared ``mmap``, which sqlite and git need.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import pyfuse3

from vfs import Change, FileInfo, OpenFile, PosixFileSystem, change_origin
from vfs.lowlevel import (
    NAME_MAX,
    SPECIAL_OF_TYPE_BITS,
    join_path,
    list_reusing_of,
    make_link,
    make_node,
    open_file_info,
    parent_path,
    resized,
)

from ._attrs import BLOCK_SIZE, AttrPolicy
from ._created import CreatedFile, Held, close_logged
from ._cuts import CUT_MAX, Cuts
from ._errno import errno_for
from ._handles import FIRST_HANDLE, HandleTable
from ._inodes import InodeTable, Node, shown_ino
from ._keepers import Keepers
from ._listings import Listings
from ._pages import NO_KERNEL, KernelCache, PageCache
from ._terms import Terms
from ._vouch import Generation, Vouching

log = logging.getLogger("mountd")

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])
Done = Callable[[], Awaitable[None]]

# What statfs reports: trees do not know their capacity, so report a large, mostly free disk
# (1 TiB in 4 KiB blocks) so that tools checking free space proceed.
_STATFS_BLOCKS = 1 << 28
_STATFS_FILES = 1 << 32
_NOT_SUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS)


def _request(*, write: bool = False) -> Callable[[_F], _F]:
    """Wrap a handler: count it, mark the mount as the change origin, map exceptions.

    ``write`` says whether the operation would create or change something, which decides how a
    "no mount here" error reads (see ``mountd._errno``); such a request first lets go of the
    created file if the slot says it must, and moves the generation before and after it.
    """

    def decorate(handler: _F) -> _F:
        op = handler.__name__

        if not write:

            @functools.wraps(handler)
            async def wrapper(self: Operations, *args: Any) -> Any:
                self.counters[op] += 1
                token = change_origin.set(self.origin)
                try:
                    return await handler(self, *args)
                except pyfuse3.FUSEError:
                    raise
                except Exception as error:  # mapped to an errno (and logged if unexpected)
                    raise pyfuse3.FUSEError(errno_for(error, write=False, op=op)) from None
                finally:
                    change_origin.reset(token)

            return cast(_F, wrapper)

        @functools.wraps(handler)
        async def changing(self: Operations, *args: Any) -> Any:
            self.counters[op] += 1
            if self.created.lets_go_before(op, args[0]):
                await self._let_go_of_created()
            # Before and after: a listing snapshot taken while this runs is not trusted later.
            generation = self.generation
            generation.now += 1
            token = change_origin.set(self.origin)
            try:
                return await handler(self, *args)
            except pyfuse3.FUSEError:
                raise
            except Exception as error:  # mapped to an errno (and logged if unexpected)
                raise pyfuse3.FUSEError(errno_for(error, write=True, op=op)) from None
            finally:
                change_origin.reset(token)
                generation.now += 1

        return cast(_F, changing)

    return decorate


def _fuse_error(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class Operations(pyfuse3.Operations):
    """Serves one :class:`vfs.PosixFileSystem` to the kernel (see the module docstring)."""

    supports_dot_lookup = True

    def __init__(
        self,
        fs: PosixFileSystem,
        *,
        terms: Terms,
        attrs: AttrPolicy,
        origin: object,
        counters: Counter[str] | None = None,
        kernel: KernelCache = NO_KERNEL,
    ) -> None:
        super().__init__()
        self.fs = fs
        self.terms = terms
        self.attrs = attrs
        self.origin = origin
        self.counters: Counter[str] = Counter() if counters is None else counters
        # What the kernel is told to drop or take, off the request path (see mountd._pages).
        self.kernel = kernel
        reusing = list_reusing_of(fs) if terms.reuses_attributes else None
        self.generation = Generation()
        self.vouched = Vouching(self.generation, enabled=reusing is not None)
        self.pages = PageCache(fs, terms, kernel, self.generation)
        self.inodes = InodeTable(learned=self.pages.learned, dropped=self._dropped)
        self.handles = HandleTable()
        self.keepers = Keepers(fs, self.inodes)
        self.listings = Listings(fs, self.inodes, self.vouched, self.generation, reusing=reusing)
        self.created = CreatedFile()
        self.cuts = Cuts()
        # Read by pyfuse3 when the kernel connection is set up (see mountd._terms).
        self.enable_writeback_cache = terms.writeback_cache
        self.auto_inval_data = terms.kernel_drops_pages
        self.files_by_inode = terms.files_by_inode

    async def close_all(self) -> None:
        """After the session ends: close the files the kernel never released (a process still
        held them at unmount) and the kept files, so buffering layers write back what they hold."""
        files = [handle.file for handle in self.handles.open_files() if not handle.shared]
        files += self.keepers.files()
        created = self.created.at_unmount()
        if created is not None:
            files.append(created)
        for file in files:
            try:
                await file.close()
            except Exception:  # logged; the mount is already gone, there is no one to tell
                log.exception("closing a file left open at unmount failed")

    # --- helpers ---------------------------------------------------------------------------

    def _node(self, ino: int) -> Node:
        node = self.inodes.find(ino)
        if node is None:
            log.warning("request for unknown inode %d", ino)
            raise _fuse_error(errno.ESTALE)
        return node

    def _path(self, node: Node, *, stale: int = errno.ENOENT) -> str:
        path = self.inodes.path(node)
        if path is None:  # detached: unlinked or replaced, only open handles still reach it
            raise _fuse_error(stale)
        return path

    def _child_path(self, parent_ino: int, name: bytes) -> tuple[Node, str, str]:
        parent = self._node(parent_ino)
        if len(name) > NAME_MAX:
            raise _fuse_error(errno.ENAMETOOLONG)
        text = os.fsdecode(name)
        return parent, text, join_path(self._path(parent), text)

    async def _new_group(
        self, parent: Node, path: str, ctx: pyfuse3.RequestContext
    ) -> tuple[int, bool]:
        """The group of a new entry at ``path`` in ``parent``, and whether a new directory gets
        S_ISGID: a directory with S_ISGID hands down its group (and, to directories, the bit), as
        on a local Linux filesystem; otherwise the caller's group. (The kernel has already
        dropped S_ISGID from a new file's mode when the caller is not in that group.)"""
        info = parent.info
        if info is None:
            info = await self.fs.lstat(parent_path(path))
        if info.mode is not None and info.mode & stat.S_ISGID and info.kind == "directory":
            return (self.attrs.stored_gid(ctx.gid) if info.gid is None else info.gid), True
        return self.attrs.stored_gid(ctx.gid), False

    def tree_changed(self, change: Change) -> None:
        """The tree reported a change: listings must look again; and when it came from
        elsewhere (the API, the host), the created file is reopened by name from then on."""
        self.generation.move()
        if change.origin is not self.origin:
            self.created.changed_elsewhere()
            self.vouched.forget_all()
            self.cuts.forget_all()

    def _dropped(self, node: Node) -> None:
        """The inode table dropped ``node``: so does what is kept per inode elsewhere."""
        self.vouched.dropped(node)
        self.cuts.end(node.ino)
        self.pages.dropped(node)
        self.keepers.dropped(node)
        self.listings.dropped(node)

    async def _let_go_of_created(self) -> None:
        """Let go of the file a CREATE left open: learned and closed now, or closed by the last
        WRITE still using it (a handler may await, and another request run meanwhile)."""
        held = self.created.let_go()
        if held is not None:
            await self._learn_written(held)
            await close_logged(held)

    async def _learn_written(self, created: Held) -> None:
        """What the file the mount just wrote is now, from its descriptor: vouched for, so the
        next listing of its directory need not examine it (only where listings reuse)."""
        if not self.vouched.enabled or self.created.stale:
            return
        generation = self.generation.now
        try:
            info = await open_file_info(created.file)
        except Exception:  # the close reports what went wrong with the file
            return
        node = created.node
        if info is not None and node.info is not None and info.kind == node.info.kind:
            self.inodes.learn(node, info)
            self.vouched.vouch(node, info, generation)
            if node.attrs is not None:
                self._entry(node, info)  # brought up to date here, not in the listing

    def _entry(self, node: Node, info: FileInfo) -> pyfuse3.EntryAttributes:
        built = node.attrs_of
        if built is not None:
            attrs = node.attrs
            assert attrs is not None
            if built is info:
                return attrs
            # In place (pyfuse3 copies the attributes into each reply as it is made); no
            # equality test first: refresh compares what it must anyway, and sets nothing when
            # nothing moved.
            if self.attrs.refresh(attrs, built, info):
                node.attrs_of = info
                return attrs
        shown = shown_ino(node, info) if self.terms.shows_tree_inos else 0
        attrs = self.attrs.entry(node.ino, info, shown=shown)
        node.attrs = attrs
        node.attrs_of = info
        return attrs

    def _detached_entry(self, node: Node) -> pyfuse3.EntryAttributes:
        if node.info is None or not node.info.exists:
            raise _fuse_error(errno.ENOENT)
        shown = shown_ino(node, node.info) if self.terms.shows_tree_inos else 0
        return self.attrs.entry(node.ino, node.info, detached=True, shown=shown)

    async def _file_by_inode(self, ino: int, *, write: bool) -> tuple[Node, OpenFile, Done]:
        """For a request on a file opened without a handle (``files_by_inode``): its node, an
        open file of it, and what to await when the request is done with that file. A WRITE of
        the file a CREATE left open goes through it; a file that still has its name is opened
        by it for the request; an unlinked or replaced one is reached through its keeper."""
        if write:
            held = self.created.borrow(ino)
            if held is not None:
                return held.node, held.file, held.give_back
        node = self._node(ino)
        if self.created.holds_stale():
            await self._let_go_of_created()
        path = self.inodes.path(node)
        if path is not None:
            file = await self.fs.open(path, write=write)
            return node, file, file.close
        kept = self.keepers.file_for(node, write=write)
        if kept is None:  # unlinked or replaced (or changed elsewhere), with no keeper to use
            raise _fuse_error(errno.ESTALE)
        return node, kept, _nothing

    async def _lstat_existing(self, path: str) -> FileInfo:
        info = await self.fs.lstat(path)
        if not info.exists:
            raise _fuse_error(errno.ENOENT)
        return info

    # --- names -----------------------------------------------------------------------------

    @_request()
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        if name in (b".", b".."):
            parent = self._node(parent_inode)
            node = parent if name == b"." or parent.parent is None else parent.parent
            info = await self._lstat_existing(self._path(node))
            self.inodes.ref(node)
            self.inodes.learn(node, info)
            return self._entry(node, info)
        parent, text, path = self._child_path(parent_inode, name)
        if parent.told is not None:
            parent.told.discard(text)  # the kernel asks again (see mountd._invalidate)
        generation = self.generation.now
        info = await self.fs.lstat(path)
        if not info.exists:
            if self.attrs.negative_timeout > 0:
                return self.attrs.negative()
            raise _fuse_error(errno.ENOENT)
        node = self.inodes.remember(parent, text, info)
        self.vouched.vouch(node, info, generation)
        if self.pages.is_stale(node):
            await self.pages.drop_stale(node)
        return self._entry(node, info)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Not a request: nothing may be raised, and there is no one to answer.
        self.counters["forget"] += 1
        for ino, count in inode_list:
            self.inodes.forget(ino, count)
            node = self.inodes.find(ino)
            if self.created.forgotten(ino):
                await self._let_go_of_created()
            if node is not None and self.keepers.holds(node):
                try:
                    await self.keepers.release_if_unused(node)
                except Exception:  # logged; forget has no one to report to
                    log.exception("closing the kept file of inode %d failed", ino)

    @_request()
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        path = self.inodes.path(node)
        if path is None:
            return self._detached_entry(node)
        generation = self.generation.now
        info = await self.fs.lstat(path)
        if not info.exists or (node.info is not None and node.info.kind != info.kind):
            # Gone (or replaced by another kind) behind the mount's back: this inode is stale.
            self.inodes.detach(node)
            if node.opens:
                return self._detached_entry(node)
            raise _fuse_error(errno.ENOENT if not info.exists else errno.ESTALE)
        self.inodes.learn(node, info)
        self.vouched.vouch(node, info, generation)
        linked_id = info.linked_id
        if linked_id is not None and node.linked_as != linked_id:
            self.inodes.note_links(node, linked_id)  # it got a second name elsewhere
        if self.pages.is_stale(node):
            await self.pages.drop_stale(node)
        return self._entry(node, info)

    @_request(write=True)
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        path = self.inodes.path(node)
        changes = _changes(attr, fields, self.attrs)
        if fields.update_size:
            self.pages.changed_under(self.inodes.same_file(node))
            await self._keep_cut(node, path, attr.st_size)
            if not await self._truncate_open(node, path, fh, attr.st_size):
                changes["size"] = attr.st_size
        if path is None:
            # Detached (e.g. fchmod of an unlinked file): keep the change on the inode itself.
            if node.info is None:
                raise _fuse_error(errno.ENOENT)
            node.info = _apply(node.info, changes, attr.st_size if fields.update_size else None)
            return self._detached_entry(node)
        if changes:
            info = await self.fs.setattr(path, **changes)
        else:
            info = await self._lstat_existing(path)
        # The kernel truncated its pages itself; new times leave them valid.
        self.pages.changing(node)
        self.inodes.learn(node, info)
        if fields.update_mtime and not fields.update_size:  # the writer is done with the file
            asked_at = self.generation.now
            await self.pages.times_set(node, path, info.size)
            if self.generation.now != asked_at:
                # The store waited for a page a reader held and the tree changed meanwhile (an
                # API write, maybe): the kernel takes a SETATTR's size whatever happened since
                # it asked, so answer what the tree holds now, not the size before that write.
                now = self.inodes.path(node)  # renamed meanwhile, maybe
                fresh = None if now is None else await self.fs.lstat(now)
                if fresh is not None and fresh.exists:
                    info = fresh
                    self.inodes.learn(node, info)
        return self._entry(node, info)

    async def _keep_cut(self, node: Node, path: str | None, size: int) -> None:
        """Before ``node``'s file is truncated to ``size``: keep what that cuts off, for the
        READs that race the truncation (``mountd._cuts``). Nothing to keep when the kernel
        knows the file no longer than ``size``: it asks for no page past its own size."""
        ino = node.ino
        info = node.info
        # Only up to the end the kernel may know (a read that asks for a whole CUT_MAX costs a
        # buffer that large, and more to free than the rest of the request).
        known = CUT_MAX if info is None else max(info.size, self.cuts.reach(ino) or 0) - size
        if known <= 0:
            self.cuts.end(ino)
            return
        length = min(known, CUT_MAX)
        try:
            if path is not None:
                file = await self.fs.open(path)
                try:
                    tail = await file.read(size, length)
                finally:
                    await file.close()
            else:
                kept = self.keepers.file_for(node, write=False)
                tail = b"" if kept is None else await kept.read(size, length)
        except Exception as error:  # a file that will not read: the truncation still goes on
            log.debug("not keeping what truncating inode %d cuts off: %r", ino, error)
            tail = b""
        self.cuts.cut(ino, size, tail)

    async def _truncate_open(self, node: Node, path: str | None, fh: int | None, size: int) -> bool:
        """Truncate ``node``'s file through an open file where the request names one, or where
        the file has no name left; ``False`` when the tree is to truncate it by its path."""
        handle = None if fh is None else self.handles.find_file(fh)
        if handle is not None:
            # Through the open file, so a layer buffering this handle sees it.
            await handle.file.truncate(size)
            handle.dirty = True
            return True
        if path is not None:
            return False
        kept = self.keepers.file_for(node, write=True)
        if kept is None:
            raise _fuse_error(errno.ENOENT)
        await kept.truncate(size)  # ftruncate of an unlinked file served by inode
        return True

    @_request()
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        node = self._node(inode)
        return os.fsencode(await self.fs.readlink(self._path(node, stale=errno.ESTALE)))

    @_request(write=True)
    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, text, path = self._child_path(parent_inode, name)
        special = SPECIAL_OF_TYPE_BITS.get(stat.S_IFMT(mode))
        if special is None and not stat.S_ISREG(mode):
            raise _fuse_error(errno.EINVAL)
        gid, _ = await self._new_group(parent, path, ctx)
        uid = self.attrs.stored_uid(ctx.uid)
        mode = mode & ~ctx.umask & 0o7777
        if special is not None:
            # Only trees that hold them (vfs.MakesNodes); EPERM elsewhere, as mknod(2) says.
            await make_node(self.fs, path, special, mode=mode, rdev=rdev, uid=uid, gid=gid)
        else:
            file = await self.fs.open(
                path, write=True, create=True, exclusive=True, mode=mode, uid=uid, gid=gid
            )
            await file.close()
        return await self._made(parent, text, path)

    @_request(write=True)
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, text, path = self._child_path(parent_inode, name)
        gid, setgid = await self._new_group(parent, path, ctx)
        mode = mode & ~ctx.umask & 0o7777
        uid = self.attrs.stored_uid(ctx.uid)
        await self.fs.mkdir(path, mode | stat.S_ISGID if setgid else mode, uid=uid, gid=gid)
        return await self._made(parent, text, path)

    async def _made(self, parent: Node, name: str, path: str) -> pyfuse3.EntryAttributes:
        """The answer for the entry just made at ``path`` (``name`` in ``parent``)."""
        info = await self._lstat_existing(path)
        return self._entry(self.inodes.remember(parent, name, info), info)

    @_request(write=True)
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent, text, path = self._child_path(parent_inode, name)
        node = parent.children.get(text)
        known = node.info if node is not None and self.vouched.vouches_for(node) else None
        # A file with other names keeps them, with a new link count.
        self.vouched.unvouch_name(parent, text)
        # Served by inode, a file stays readable after its unlink only through a keeper (the
        # mount is not told whether it is open): the tree hands it over as it unlinks.
        if not (self.terms.files_by_inode and await self.keepers.unlink_keeping(node, path, known)):
            async with self.keepers.keeping(parent, text, path, keeper=False, attributes=True):
                await self.fs.unlink(path)
        self.inodes.detach_name(parent, text)

    @_request(write=True)
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent, text, path = self._child_path(parent_inode, name)
        async with self.keepers.keeping(parent, text, path, keeper=False, attributes=True):
            await self.fs.rmdir(path)
        self.inodes.detach_name(parent, text)

    @_request(write=True)
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, text, path = self._child_path(parent_inode, name)
        gid, _ = await self._new_group(parent, path, ctx)
        uid = self.attrs.stored_uid(ctx.uid)
        await self.fs.symlink(path, os.fsdecode(target), uid=uid, gid=gid)
        return await self._made(parent, text, path)

    @_request(write=True)
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        noreplace, exchange = _rename_flags(flags)
        old_parent, old_text, src = self._child_path(parent_inode_old, name_old)
        new_parent, new_text, dst = self._child_path(parent_inode_new, name_new)
        victim = new_parent.children.get(new_text)
        known = victim.info if victim is not None and self.vouched.vouches_for(victim) else None
        # A moved file's change time moves; a replaced file with other names loses a link.
        self.vouched.unvouch_name(old_parent, old_text)
        self.vouched.unvouch_name(new_parent, new_text)
        replaces = not (exchange or noreplace) and src != dst
        try:
            async with self.keepers.keeping(
                new_parent, new_text, dst, keeper=replaces, attributes=False, known=known
            ):
                await self.fs.rename(src, dst, noreplace=noreplace, exchange=exchange)
        except OSError as error:
            if exchange and error.errno in _NOT_SUPPORTED:
                raise _fuse_error(errno.EINVAL) from None
            raise
        if exchange:
            self.inodes.exchange(old_parent, old_text, new_parent, new_text)
        else:
            self.inodes.move(old_parent, old_text, new_parent, new_text)

    @_request(write=True)
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        # Only trees whose files can have several names (vfs.MakesLinks); EPERM elsewhere, as
        # link(2) says. The new name answers with the same inode, so the kernel shares one
        # inode (attributes, pages) between the names.
        node = self._node(inode)
        src = self._path(node)
        parent, text, dst = self._child_path(new_parent_inode, new_name)
        await make_link(self.fs, src, dst)
        info = await self._lstat_existing(dst)
        if node.info is not None and info.kind != node.info.kind:
            raise _fuse_error(errno.ESTALE)  # the source was replaced meanwhile
        self.inodes.add_name(node, parent, text)
        self.inodes.ref(node)
        self.inodes.learn(node, info)
        if info.linked_id is not None:
            self.inodes.note_links(node, info.linked_id)
        return self._entry(node, info)

    # --- files -----------------------------------------------------------------------------

    @_request()
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if self.terms.files_by_inode:
            # The kernel sends no OPEN or RELEASE for the rest of the mount, and requests on
            # opened files come by inode (see the module docstring).
            raise _fuse_error(errno.ENOSYS)
        node = self._node(inode)
        truncate = bool(flags & os.O_TRUNC)
        write = (flags & os.O_ACCMODE) != os.O_RDONLY
        path = self.inodes.path(node)
        if path is None:
            # The kernel resolved the name to this inode just before a rename replaced it. The
            # keeper is a read-only handle; a writer is sent back to the new file instead.
            kept = self.keepers.file_for(node, write=False)
            if kept is not None and not write and not truncate:
                return self._add_handle(node, kept, flags, shared=True)
            # ESTALE makes the kernel redo the path walk once (LOOKUP_REVAL) and open what
            # the name means now.
            raise _fuse_error(errno.ESTALE)
        if truncate:
            self.vouched.unvouch(node)
        file = await self.fs.open(path, write=write, truncate=truncate)
        return self._add_handle(node, file, flags)

    def _add_handle(
        self, node: Node, file: OpenFile, flags: int, *, shared: bool = False
    ) -> pyfuse3.FileInfo:
        handle = self.handles.add_file(node, file, flags)
        handle.shared = shared
        self.inodes.pin(node)
        return self.pages.opened(node, handle.fh)

    @_request(write=True)
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent, text, path = self._child_path(parent_inode, name)
        file, info = await self._create_file(parent, path, mode, flags, ctx)
        node = self.inodes.remember(parent, text, info)
        self.keepers.wrote(node)
        if not self.terms.files_by_inode:
            return self._add_handle(node, file, flags), self._entry(node, info)
        # No handle: once the kernel knows open answers ENOSYS it sends no RELEASE for a created
        # file either, and its requests come by inode. The file stays open for the WRITEs.
        previous = self.created.hold(node, file)
        if previous is not None:
            await close_logged(previous)
        return self.pages.opened(node, 0), self._entry(node, info)

    async def _create_file(
        self, parent: Node, path: str, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[OpenFile, FileInfo]:
        """Create and open the file at ``path`` in ``parent``; what it is, by its descriptor
        where the tree can say (no path to resolve)."""
        gid, _ = await self._new_group(parent, path, ctx)
        file = await self.fs.open(
            path,
            write=True,
            create=True,
            exclusive=bool(flags & os.O_EXCL),
            truncate=bool(flags & os.O_TRUNC),
            mode=mode & ~ctx.umask & 0o7777,
            uid=self.attrs.stored_uid(ctx.uid),
            gid=gid,
        )
        try:
            return file, await open_file_info(file) or await self._lstat_existing(path)
        except BaseException:
            await file.close()
            raise

    @_request()
    async def read(self, fh: int, off: int, size: int) -> bytes:
        if fh >= FIRST_HANDLE:
            handle = self.handles.file(fh)
            data = await handle.file.read(off, size)
            ino = handle.node.ino
        else:
            _, file, done = await self._file_by_inode(fh, write=False)
            try:
                data = await file.read(off, size)
            finally:
                await done()
            ino = fh
        if self.cuts:  # a truncation of this file may be in flight (see mountd._cuts)
            cut = self.cuts.find(ino)
            if cut is not None:
                before = cut.answer(off, size, data)
                if before is not None:
                    return self._answer_raced(ino, before)
        return data

    def _answer_raced(self, ino: int, before: bytes) -> bytes:
        """Answer a READ that raced a truncation with what the file held before it. The
        truncation drops the pages this READ fills once the kernel takes its answer in; should
        the READ have filled them after that (its read-ahead began before the size moved, and
        put them in the cache after), they would hold bytes past the end: dropped too."""
        self.counters["read_raced_truncate"] += 1
        if not self.terms.kernel_drops_pages:
            self.kernel.drop(ino)
        return before

    @_request(write=True)
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        if fh >= FIRST_HANDLE:
            handle = self.handles.file(fh)
            handle.dirty = True
            return await self._write(handle.node, handle.file, off, buf)
        node, file, done = await self._file_by_inode(fh, write=True)
        try:
            return await self._write(node, file, off, buf)
        finally:
            await done()

    async def _write(self, node: Node, file: OpenFile, off: int, buf: bytes) -> int:
        if node.info is not None and node.info.linked_id is not None:
            self.pages.changed_under(self.inodes.same_file(node))
        self.keepers.wrote(node)
        self.cuts.end(node.ino)
        self.vouched.unvouch(node)
        self.pages.writing(node)
        done = 0
        view = memoryview(buf)
        while done < len(buf):
            written = await file.write(off + done, bytes(view[done:]) if done else buf)
            if written <= 0:
                raise _fuse_error(errno.EIO)
            done += written
        end = off + done
        if node.info is not None and end > node.info.size:
            # What a detached inode answers; cheap to keep for all (only when the file grows).
            node.info = resized(node.info, end)
        self.pages.wrote(node, off, end)
        return done

    @_request(write=True)
    async def flush(self, fh: int) -> None:
        if not self.terms.forwards_flush:
            # Nothing is buffered in any handle of this tree: ENOSYS makes the kernel stop
            # sending FLUSH on every close(2) for the rest of the mount.
            raise _fuse_error(errno.ENOSYS)
        handle = self.handles.file(fh)
        if handle.dirty or handle.writable:
            self.vouched.unvouch(handle.node)  # a buffering handle writes back
            await handle.file.flush()
            handle.dirty = False

    @_request()
    async def release(self, fh: int) -> None:
        if fh < FIRST_HANDLE:
            return  # a file created before open first answered ENOSYS: it has no handle
        handle = self.handles.pop_file(fh)
        if self.terms.forwards_flush:
            self.generation.move()  # closing a buffering handle writes it back
            self.vouched.unvouch(handle.node)
        try:
            if not handle.shared:
                await handle.file.close()
        finally:
            self.inodes.unpin(handle.node)
        await self.keepers.release_if_unused(handle.node)

    @_request(write=True)
    async def fsync(self, fh: int, datasync: bool) -> None:
        if fh >= FIRST_HANDLE:
            await self.handles.file(fh).file.fsync(datasync)
            return
        _, file, done = await self._file_by_inode(fh, write=False)
        try:
            await file.fsync(datasync)
        finally:
            await done()

    # --- directories -----------------------------------------------------------------------

    @_request()
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self._node(inode)
        if self.terms.listings_by_inode:
            info = node.info
            path = self.inodes.path(node)
            if info is None and path is not None:
                info = await self.fs.lstat(path)
            if info is not None and info.mtime_ns:
                # ENOSYS: the kernel stops sending OPENDIR and RELEASEDIR for the rest of the
                # mount and keeps every listing (FOPEN_CACHE_DIR) until the directory changes.
                # Only for a directory with a modification time, whose move the kernel sees;
                # a tree whose directories have none (an object store's prefixes) keeps
                # handles, and its listings are read afresh each time.
                raise _fuse_error(errno.ENOSYS)
        handle = self.handles.add_dir(node)
        self.inodes.pin(node)
        return handle.fh

    @_request()
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        # Without a handle (opendir answered ENOSYS) the directory is named by its inode.
        handle = self.handles.dir(fh) if fh else None
        node = self._node(token.ino) if handle is None else handle.node
        listing = await self.listings.listing(node, handle, start_id)
        first = listing.after(start_id)
        if first == len(listing.entries) and handle is None:
            self.listings.read_whole(node)
            if node.info is not None and not node.info.mtime_ns:
                self.kernel.drop(node.ino)  # a listing the kernel should not keep
        # The snapshot's attributes are as fresh as an lstat now unless something changed since
        # (readdirplus replies fill the kernel's attribute cache, so they must not be stale).
        vouch_at = listing.generation if listing.generation == self.generation.now else None
        entries = listing.entries[first:]
        if vouch_at is not None and self.inodes.path(node) is None:
            entries = [entry for entry in entries if entry[2] is None]  # removed: its dots
        for offset, name, info in entries:
            if info is not None and vouch_at is None:
                info = await self._lstat_listed(node, name)
                if info is None:
                    continue  # removed since the snapshot
            child = self._reply_listed(token, node, name, info, offset, vouch_at)
            if child is None:
                return  # the kernel's buffer is full
            if self.pages.is_stale(child):
                await self.pages.drop_stale(child)

    async def _lstat_listed(self, node: Node, name: str) -> FileInfo | None:
        """What ``name`` in the directory ``node`` is now; ``None`` if either is gone."""
        path = self.inodes.path(node)  # again: the lstat of the last entry may have let others run
        if path is None:
            return None
        info = await self.fs.lstat(join_path(path, name))
        return info if info.exists else None

    def _reply_listed(
        self,
        token: pyfuse3.ReaddirToken,
        node: Node,
        name: str,
        info: FileInfo | None,
        offset: int,
        vouch_at: int | None,
    ) -> Node | None:
        """Hand the kernel the entry ``name`` of ``node`` (``info`` ``None`` for the dots, which
        are never counted as lookups); ``None`` if it had no room left for it."""
        if info is None:
            dot = node if name == "." or node.parent is None else node.parent
            shown = shown_ino(dot, dot.info) if self.terms.shows_tree_inos else 0
            attrs = self.attrs.dot(dot.ino, shown)
            taken = pyfuse3.readdir_reply(token, name.encode(), attrs, offset)
            return dot if taken else None
        child = self.inodes.child(node, name, info)
        if vouch_at is not None:
            self.vouched.vouch(child, info, vouch_at)
        if not pyfuse3.readdir_reply(
            token, name.encode("utf-8", "surrogateescape"), self._entry(child, info), offset
        ):
            self.inodes.discard_if_unused(child)
            return None
        self.inodes.ref(child)
        return child

    @_request()
    async def releasedir(self, fh: int) -> None:
        handle = self.handles.pop_dir(fh)
        self.inodes.unpin(handle.node)

    @_request()
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        # Directory operations reach the tree when they are made; nothing is buffered here.
        if fh:
            self.handles.dir(fh)

    # --- the filesystem --------------------------------------------------------------------

    @_request()
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = BLOCK_SIZE
        data.f_frsize = BLOCK_SIZE
        data.f_blocks = data.f_bfree = data.f_bavail = _STATFS_BLOCKS
        space = getattr(self.fs, "space", None)  # a tree with a limit on what it stores
        if space is not None:
            limit, used = space()
            if limit is not None:
                data.f_blocks = limit // BLOCK_SIZE
                data.f_bfree = data.f_bavail = max(0, limit - used) // BLOCK_SIZE
        data.f_files = _STATFS_FILES
        data.f_ffree = _STATFS_FILES - len(self.inodes)
        data.f_favail = data.f_ffree
        data.f_namemax = NAME_MAX
        return data

    @_request()
    async def access(self, inode: int, mode: int, ctx: pyfuse3.RequestContext) -> bool:
        # Never called with default_permissions (the kernel checks the mode bits itself).
        self._node(inode)
        return True

    @_request(write=True)
    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        raise _fuse_error(errno.ENOSYS)

    @_request()
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        raise _fuse_error(errno.ENOSYS)

    @_request()
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        raise _fuse_error(errno.ENOSYS)

    @_request(write=True)
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        raise _fuse_error(errno.ENOSYS)


async def _nothing() -> None:
    pass


def _changes(
    attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields, attrs: AttrPolicy
) -> dict[str, int]:
    """What a setattr asks the tree to change, but the size (see ``Operations.setattr``)."""
    changes: dict[str, int] = {}
    if fields.update_mode:
        changes["mode"] = attr.st_mode & 0o7777
    if fields.update_uid:
        changes["uid"] = attrs.stored_uid(attr.st_uid)
    if fields.update_gid:
        changes["gid"] = attrs.stored_gid(attr.st_gid)
    if fields.update_atime:
        changes["atime_ns"] = attr.st_atime_ns
    if fields.update_mtime:
        changes["mtime_ns"] = attr.st_mtime_ns
    return changes


def _rename_flags(flags: int) -> tuple[bool, bool]:
    """``(noreplace, exchange)`` of a rename; ``EINVAL`` for flags it does not know or both."""
    noreplace = bool(flags & pyfuse3.RENAME_NOREPLACE)
    exchange = bool(flags & pyfuse3.RENAME_EXCHANGE)
    known = pyfuse3.RENAME_NOREPLACE | pyfuse3.RENAME_EXCHANGE
    if flags & ~known or (noreplace and exchange):
        raise _fuse_error(errno.EINVAL)
    return noreplace, exchange


def _apply(info: FileInfo, changes: dict[str, int], size: int | None) -> FileInfo:
    """``info`` with a setattr applied (for a detached inode the tree no longer holds)."""
    updated = replace(
        info,
        mode=changes.get("mode", info.mode),
        uid=changes.get("uid", info.uid),
        gid=changes.get("gid", info.gid),
        atime_ns=changes.get("atime_ns", info.atime_ns),
    )
    if "mtime_ns" in changes:
        updated = replace(updated, mtime_ns=changes["mtime_ns"], mtime=0.0)
    if size is not None:
        updated = replace(updated, size=size)
    return updated
