"""Writing a cow's checkpoint out as a new durable upper: the other half of a forked mount.

Theory of operation
-------------------
:func:`write_fork` makes an empty host directory the upper of a second, independent cow over the
same lower, starting from checkpoint N of this one (``mountd checkpoint fork`` serves it with a
daemon of its own): the checkpoint's upper entries, its record as the new upper's record
(``vfs._cow``), and a first checkpoint labelled ``fork of N`` (``vfs._cow_durable``'s format), so
``cow_fs(lower, dir_fs(upper))`` continues from there and can rewind to it.

Storage is shared where it is safe to share. The files of the durable store's content-addressed
directories (:data:`vfs._cow_durable.STORES`: a pack or blob is never written once named, only
removed by a prune) are hard-linked into the new upper (copied across devices), and the first checkpoint
names them: its manifest is N's, so nothing is stored again. The new upper's own files are
copies, never links, because the upper is written in place (a ``dir_fs`` write through the mount
goes to the file itself), so a link would be state the two trees share: a small file's bytes are
read from its pack, a large file's blob is reflinked where the file system makes one
(``FICLONE``), else copied with ``copy_file_range``, else plainly, its holes kept. Every file
gets the mode and time the manifest says, so the new cow finds its upper as its first checkpoint
left it.

From an in-memory cow (a ``temp_fs`` upper: ``--ephemeral``) there is no store to share: the
checkpoint's frozen upper is written out file by file, and the first checkpoint is taken over
the new upper as any durable checkpoint is (its files' bytes stored as blobs).

Order of writes: store links, upper entries, the record, the first checkpoint (renamed into
place last). The directory is the caller's, new and empty; a failure leaves it half written, for
the caller to remove.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from typing import TYPE_CHECKING

import anyio.to_thread

from . import _cow_durable
from ._blobs import store_files
from ._capabilities import make_node
from ._cow_changes import read_bytes
from ._cow_checkpoints import view
from ._cow_durable import BLOBS, PACKS, STAGE, STORES, Entry
from ._cow_meta import META_PATH, RESERVED
from ._dir import DirFileSystem
from ._disk import data_extents
from ._paths import ROOT, is_under
from ._reading import copy_sparse
from ._types import Checkpoint, PosixFileSystem, Summary
from ._walk import walk

if TYPE_CHECKING:
    from ._cow import CowFileSystem

FICLONE = 0x40049409  # _IOW(0x94, 9, int): linux/fs.h
_CHUNK = 1 << 20


async def write_fork(cow: CowFileSystem, number: int, upper: str) -> Checkpoint:
    """Write checkpoint ``number`` of ``cow`` into the empty host directory ``upper`` as the
    upper of a new cow over the same lower (see the module docstring); answer its first
    checkpoint. Raises ``CheckpointNotFoundError`` (nothing written) for an unknown number."""
    target = DirFileSystem(upper)
    async with cow._writing():
        if cow._durable is not None:
            return await _from_store(cow, number, target)
        return await _from_memory(cow, number, target)


async def _from_store(cow: CowFileSystem, number: int, target: DirFileSystem) -> Checkpoint:
    _cow_durable._known(await _cow_durable.load(cow), number)
    record, manifest, meta = await _cow_durable._read_checkpoint(cow, number)
    source = cow._upper_tree
    here = source.host_root if isinstance(source, DirFileSystem) else None
    await _cow_durable._directory(target, STAGE)
    if here is not None:
        await anyio.to_thread.run_sync(link_stores, here, target.host_root)
    else:  # an upper that is no host directory: its store files are read through it
        stored = {store_files(e[4:]) for e in manifest.values() if e[0] == "file"}
        for kind, name in sorted(where for where in stored if where is not None):
            directory = PACKS if kind == "pack" else BLOBS
            await _cow_durable._directory(target, directory)
            found = f"{directory}/{name}"
            await target.write(found, await read_bytes(cow._upper, found))
    small = await _cow_durable._small_files(cow, manifest.items())
    for path in sorted(manifest):
        entry = manifest[path]
        if entry[0] != "file":
            await _make(target, path, entry)
            continue
        if path in small:
            await target.write(path, small[path])
        elif here is not None:  # a large file's blob: a reflink where there are reflinks
            blob = _host(here, f"{BLOBS}/{entry[4]}")
            await anyio.to_thread.run_sync(copy_file, blob, _host(target.host_root, path))
        else:
            await _cow_durable._put_file(cow, target, path, entry, None)
        await target.setattr(path, mode=entry[1], atime_ns=entry[3], mtime_ns=entry[3])
    await _finish(cow, target, meta)
    first = Checkpoint(1, None, f"fork of {number}", time.time(), record.summary)
    await _cow_durable.write_checkpoint(target, first, meta, manifest, f"{STAGE}/fork")
    return first


async def _from_memory(cow: CowFileSystem, number: int, target: DirFileSystem) -> Checkpoint:
    state = cow._history.state(number)
    summary: Summary = cow._history.record(number).summary
    shown = view(cow, state)._upper
    await _cow_durable._directory(target, STAGE)
    async for found in walk(shown, ROOT):
        if is_under(found.path, RESERVED):
            continue
        info = await shown.lstat(found.path)
        mode = info.mode or 0
        if info.kind == "directory":
            await _make(target, found.path, ["directory", mode])
        elif info.kind == "symlink":
            await _make(target, found.path, ["symlink", mode, await shown.readlink(found.path)])
        elif info.special is not None:
            await _make(target, found.path, ["special", mode, info.special, info.rdev])
        else:
            await _copy_open(shown, target, found.path, info.size)
            times = info.mtime_ns or None
            await target.setattr(found.path, mode=mode, atime_ns=times, mtime_ns=times)
    await _finish(cow, target, state.meta.dumps())
    from ._cow import CowFileSystem

    fork = CowFileSystem(cow._lower_tree, target, subscribe=False)
    async with fork._writing():
        return await _cow_durable._record(fork, f"fork of {number}", None, summary)


async def _copy_open(
    source: PosixFileSystem, target: PosixFileSystem, path: str, size: int
) -> None:
    """A new file at ``path`` in ``target`` with the bytes of ``path`` in ``source``, streamed
    with its holes kept (``vfs._blobs``)."""
    reading = await source.open(path)
    try:
        writing = await target.open(path, write=True, create=True, exclusive=True, mode=0o600)
        try:
            await copy_sparse(reading, writing, size)
        finally:
            await writing.close()
    finally:
        await reading.close()


async def _make(target: PosixFileSystem, path: str, entry: Entry) -> None:
    """A directory, symlink or special file of a manifest (``vfs._cow_durable``)."""
    kind, mode = entry[0], entry[1]
    if kind == "directory":
        await target.mkdir(path, mode)
        await target.setattr(path, mode=mode)  # exact, whatever the umask
    elif kind == "symlink":
        await target.symlink(path, str(entry[2]))
    else:
        await make_node(target, path, entry[2], mode=mode, rdev=entry[3])


async def _finish(cow: CowFileSystem, target: PosixFileSystem, meta: str) -> None:
    """The record, and the root's mode and times (a fresh upper's are the lower root's)."""
    await target.write(f"{STAGE}/record", meta)
    await target.rename(f"{STAGE}/record", META_PATH)
    root = await cow._upper.lstat(ROOT)
    await target.setattr(ROOT, mode=root.mode, atime_ns=root.atime_ns, mtime_ns=root.mtime_ns)


def _host(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def link_stores(source: str, target: str) -> None:
    """Give the upper at host path ``target`` every file of the store directories
    (:data:`vfs._cow_durable.STORES`) of the upper at ``source``: a hard link, a copy where
    the two are on different devices."""
    for store in STORES:
        here = _host(source, store)
        if not os.path.isdir(here):
            continue
        there = _host(target, store)
        os.makedirs(there, mode=0o700, exist_ok=True)
        for name in os.listdir(here):
            try:
                os.link(os.path.join(here, name), os.path.join(there, name), follow_symlinks=False)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                copy_file(os.path.join(here, name), os.path.join(there, name))


def copy_file(source: str, target: str) -> None:
    """A new file ``target`` holding the bytes of ``source``, its holes kept: a reflink where
    the file system makes one (``FICLONE``), else ``copy_file_range`` (in the kernel) of each
    data extent, else a plain copy of them."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return
        except OSError:
            pass
        size = os.fstat(src.fileno()).st_size
        spans = data_extents(src.fileno(), size)
        try:
            for start, end in spans:
                done = start
                while done < end:
                    copied = os.copy_file_range(src.fileno(), dst.fileno(), end - done, done, done)
                    if copied == 0:
                        break
                    done += copied
        except OSError:
            for start, end in spans:
                src.seek(start)
                dst.seek(start)
                left = end - start
                while left > 0 and (chunk := src.read(min(left, _CHUNK))):
                    dst.write(chunk)
                    left -= len(chunk)
        dst.truncate(size)
