"""Reading a file's bytes a piece at a time, on any tree.

Theory of operation
-------------------
``read`` answers a whole file, decoded. What must not hold a whole file in memory (the Read tool
shows a window, ``grep`` matches line by line, StrReplace refuses past a size) reads the file's
exact bytes through :func:`open_for_reading`, which answers an :class:`vfs.OpenFile` on every
tree:

- a tree with an ``open_for_reading`` of its own (``local_file_system``: a host descriptor);
- a :class:`vfs.PosixFileSystem`: its ``open``, read-only;
- any other tree: the ``open`` of :func:`vfs.posix_view`, which reads the whole file once (the
  tree holds it whole anyway), exactly where the tree can say (``read_bytes``).

A file used as a directory (``/a.txt/x``, ``ENOTDIR``) is ``FileNotFoundError``, as ``read``
answers it: the path names nothing. :func:`read_chunks` streams the bytes of an open file, and
:func:`read_at_most` reads a file whole up to a size, refusing beyond it. :func:`data_chunks`
streams only what a file holds (its data extents where the open file tells them, chunks of zeros
left out) and :func:`copy_sparse` copies a file that way, so a sparse file's holes are never read
into memory nor written as zeros.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
from collections.abc import AsyncGenerator, Awaitable, Callable

from ._errors import FileNotFoundError, PathError
from ._types import FileSystem, OpenFile, PosixFileSystem

CHUNK = 1 << 16
"""How many bytes one read asks for."""
SPARSE_CHUNK = 1 << 20
"""How many bytes one read of :func:`data_chunks` asks for."""
_ZEROS = bytes(SPARSE_CHUNK)


async def open_for_reading(fs: FileSystem, path: str) -> OpenFile:
    """A read-only handle on the file at ``path`` (an already resolved path of ``fs``)."""
    own: Callable[[str], Awaitable[OpenFile]] | None = getattr(fs, "open_for_reading", None)
    try:
        if own is not None:
            return await own(path)
        if isinstance(fs, PosixFileSystem):
            return await fs.open(path)
        from ._posix_view import posix_view  # here: posix_view imports the walks, which read

        return await posix_view(fs).open(path)
    except builtins.NotADirectoryError as error:
        where = error.path if isinstance(error, PathError) else path
        raise FileNotFoundError(where) from None


async def read_chunks(file: OpenFile, size: int = CHUNK) -> AsyncGenerator[bytes, None]:
    """The bytes of ``file`` from the start, ``size`` at a time, until a read answers nothing."""
    offset = 0
    while chunk := await file.read(offset, size):
        offset += len(chunk)
        yield chunk


class TooLargeError(Exception):
    """A file holds more bytes than the caller takes (``limit``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


async def read_at_most(fs: FileSystem, path: str, limit: int) -> bytes:
    """The exact bytes of the file at ``path``; :class:`TooLargeError` past ``limit`` bytes (the
    read stops there)."""
    file = await open_for_reading(fs, path)
    pieces: list[bytes] = []
    total = 0
    try:
        async with contextlib.aclosing(read_chunks(file, min(limit + 1, 1 << 20))) as chunks:
            async for chunk in chunks:
                total += len(chunk)
                if total > limit:
                    raise TooLargeError(limit)
                pieces.append(chunk)
    finally:
        await file.close()
    return b"".join(pieces)


def _zeros(chunk: bytes) -> bool:
    return chunk == (_ZEROS if len(chunk) == SPARSE_CHUNK else bytes(len(chunk)))


async def data_chunks(file: OpenFile, size: int) -> AsyncGenerator[tuple[int, bytes], None]:
    """``(offset, bytes)`` of what ``file`` holds within ``size`` bytes, holes and zeros left out."""
    extents = getattr(file, "data_extents", None)
    spans = [(0, size)] if extents is None else extents(size)
    for start, end in spans:
        offset = start
        while offset < end:
            chunk = await file.read(offset, min(SPARSE_CHUNK, end - offset))
            if not chunk:
                return  # the file shrank under us
            if not _zeros(chunk):
                yield offset, chunk
            offset += len(chunk)


async def copy_sparse(source: OpenFile, target: OpenFile, size: int) -> None:
    """Make ``target`` hold the first ``size`` bytes of ``source``, its holes kept."""
    async with contextlib.aclosing(data_chunks(source, size)) as chunks:
        async for offset, chunk in chunks:
            done = 0
            while done < len(chunk):
                written = await target.write(offset + done, chunk[done:])
                if written <= 0:
                    raise OSError(errno.EIO, "a write stored nothing")
                done += written
    await target.truncate(size)
