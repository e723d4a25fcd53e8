"""Optional capabilities of the POSIX extension, read in one place.

Theory of operation
-------------------
:class:`vfs.PosixFileSystem` trees may report two things that let a mount send or answer fewer
kernel requests (see its docstring). Neither is part of the contract: a tree without them is
served correctly, only slower, so every reader goes through these helpers, which supply the
safe default.

- :func:`buffers_writes`: ``True`` unless the tree says ``buffers_writes = False``. A mount may
  tell the kernel to stop sending FLUSH (answering ENOSYS, which the kernel remembers for the
  whole mount) only when this is ``False``: a buffering handle's write-back error must reach
  ``close(2)``. The answer must not change while the tree is mounted.
- :func:`list_info`: a directory's entries with their ``lstat``, natively when the tree has
  ``list_info``, else ``list`` plus one ``lstat`` per entry.
- :func:`list_reusing_of`: the tree's ``list_info_reusing`` (:class:`vfs.ListsReusing`), or
  ``None``: a listing that answers the caller's own FileInfo for files it sees unchanged.
- :func:`open_file_info`: what an open file's ``stat`` answers (:class:`vfs.StatsOpenFile`), or
  ``None`` where the file cannot say.
- :func:`make_node`: ``mknod`` where the tree has it (:class:`vfs.MakesNodes`), else ``EPERM``,
  what ``mknod(2)`` answers on a file system that does not hold that type of node.
- :func:`make_link`: ``link`` where the tree has it (:class:`vfs.MakesLinks`), else ``EPERM``,
  what ``link(2)`` answers on a file system that does not support hard links.
- :func:`unlink_keeping`: ``unlink`` answering an open file of what the name held, in one call
  where the tree has it (:class:`vfs.lowlevel.UnlinksKeeping`), else ``lstat`` + ``open`` +
  ``unlink``.
- :func:`read_bytes`: a file's exact bytes, for a tree whose ``read`` decodes text lossily
  (``host_fs``: bytes that are not UTF-8 come back from ``read`` replaced). The tree's own
  ``read_bytes`` when it has one, else ``read`` encoded (the tree's text is all there is).
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Mapping

from ._content import encode_contents
from ._errors import PathError
from ._types import (
    DirListing,
    FileInfo,
    FileSystem,
    NamedListing,
    OpenFile,
    PosixFileSystem,
    Special,
)

ListInfo = Callable[[str], Awaitable[DirListing]]
ListReusing = Callable[[str, Mapping[str, FileInfo]], Awaitable[NamedListing]]


def buffers_writes(tree: object) -> bool:
    """Whether ``tree``'s open files may hold writes that only ``flush``/``close`` deliver."""
    return bool(getattr(tree, "buffers_writes", True))


def list_info_of(tree: PosixFileSystem) -> ListInfo:
    """The tree's ``list_info`` when it has one, else the generic one (``list`` + ``lstat``)."""
    native: ListInfo | None = getattr(tree, "list_info", None)
    if native is not None:
        return native

    async def generic(prefix: str) -> DirListing:
        return await list_info(tree, prefix)

    return generic


def list_reusing_of(tree: object) -> ListReusing | None:
    """The tree's ``list_info_reusing`` (see :class:`vfs.ListsReusing`), or ``None``."""
    return getattr(tree, "list_info_reusing", None)


async def open_file_info(file: OpenFile) -> FileInfo | None:
    """``file.stat()`` (see :class:`vfs.StatsOpenFile`), or ``None`` for a file without it."""
    stat = getattr(file, "stat", None)
    return None if stat is None else await stat()


async def list_info(tree: PosixFileSystem, prefix: str) -> DirListing:
    """``prefix``'s entries with their ``lstat``: ``list`` + ``lstat``, skipping vanished ones."""
    entries = [entry async for entry in tree.list(prefix)]
    found: DirListing = []
    for entry in entries:
        info = await tree.lstat(entry.path)
        if info.exists:
            found.append((entry, info))
    return found


async def make_node(
    tree: object,
    path: str,
    special: Special,
    *,
    mode: int = 0o644,
    rdev: int = 0,
    uid: int | None = None,
    gid: int | None = None,
) -> None:
    """``tree.mknod(...)``, or ``EPERM`` for a tree that holds no FIFOs, sockets or devices."""
    mknod = getattr(tree, "mknod", None)
    if mknod is None:
        raise PathError(path, errno=errno.EPERM)
    await mknod(path, special, mode=mode, rdev=rdev, uid=uid, gid=gid)


async def make_link(tree: object, src: str, dst: str) -> None:
    """``tree.link(src, dst)``, or ``EPERM`` for a tree whose files have one name each."""
    link = getattr(tree, "link", None)
    if link is None:
        raise PathError(dst, errno=errno.EPERM)
    await link(src, dst)


async def unlink_keeping(
    tree: PosixFileSystem, path: str, *, write: bool = False
) -> OpenFile | None:
    """``tree.unlink_keeping(path, write=write)`` (see :class:`vfs.lowlevel.UnlinksKeeping`),
    or the same in three calls for a tree without it: a regular file is opened before its name
    is removed (and closed again if the removal fails)."""
    native: Callable[..., Awaitable[OpenFile | None]] | None = getattr(tree, "unlink_keeping", None)
    if native is not None:
        return await native(path, write=write)
    info = await tree.lstat(path)
    file = None
    if info.kind == "file" and info.special is None:
        file = await tree.open(path, write=write)
    try:
        await tree.unlink(path)
    except BaseException:
        if file is not None:
            await file.close()
        raise
    return file


async def read_bytes(tree: FileSystem, path: str) -> bytes:
    """The bytes of the file at ``path``: ``tree.read_bytes(path)`` where the tree has it, else
    what ``read`` answers, encoded as ``write`` would store it."""
    exact: Callable[[str], Awaitable[bytes]] | None = getattr(tree, "read_bytes", None)
    if exact is not None:
        return await exact(path)
    return encode_contents(await tree.read(path))
