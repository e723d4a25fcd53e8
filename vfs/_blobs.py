"""The bytes durable checkpoints hold: content-addressed files in a tree's reserved directory.

Theory of operation
-------------------
A checkpoint names a file's bytes by a *blob*, a file of its own named by a SHA-256, written once
and never changed, so every checkpoint (and every file) with the same bytes shares it. Two kinds,
told apart by the file's size, so the same bytes always get the same name:

- *small* (under :data:`SMALL`): the name is the SHA-256 of the bytes. A tree that offers
  ``create_files`` (:class:`vfs.DirFileSystem`) stores many in a few system calls each (a
  checkpoint stores every file a turn changed at once, read with ``read_entries``); any other
  tree goes one by one.
- *large*: streamed in :data:`CHUNK` pieces, never whole in memory, and holes stay holes. Only
  what the file holds is read (its data extents where the open file tells them:
  ``data_extents``; a chunk of zeros is not written either), so a 5 GiB file with one byte
  costs one chunk. The name is the SHA-256 of the size and each stored chunk with its offset:
  equal names mean equal bytes; equal bytes stored with other holes may get another name.

A blob is written under a stage name and renamed into place, so a blob exists only whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ._cow_changes import read_bytes
from ._types import OpenFile, PosixFileSystem

SMALL = 1 << 20  # a file this large or larger is streamed
CHUNK = 1 << 20
_ZEROS = bytes(CHUNK)


def _zeros(chunk: bytes) -> bool:
    return chunk == (_ZEROS if len(chunk) == CHUNK else bytes(len(chunk)))


async def data_chunks(file: OpenFile, size: int) -> AsyncIterator[tuple[int, bytes]]:
    """``(offset, bytes)`` of what ``file`` holds within ``size`` bytes, holes and zeros left out."""
    extents = getattr(file, "data_extents", None)
    spans = [(0, size)] if extents is None else extents(size)
    for start, end in spans:
        offset = start
        while offset < end:
            chunk = await file.read(offset, min(CHUNK, end - offset))
            if not chunk:
                return  # the file shrank under us
            if not _zeros(chunk):
                yield offset, chunk
            offset += len(chunk)


async def copy_sparse(source: OpenFile, target: OpenFile, size: int) -> None:
    """Make ``target`` hold the first ``size`` bytes of ``source``, its holes kept."""
    async for offset, chunk in data_chunks(source, size):
        await target.write(offset, chunk)
    await target.truncate(size)


class Blobs:
    """The blob directory ``directory`` of ``tree``; ``stage()`` names a fresh stage file."""

    __slots__ = ("_known", "_stage", "directory", "tree")

    def __init__(
        self, tree: PosixFileSystem, directory: str, stage: Callable[[], Awaitable[str]]
    ) -> None:
        self.tree = tree
        self.directory = directory
        self._stage = stage
        self._known: set[str] | None = None  # the blob names there (listed once)

    async def names(self) -> set[str]:
        if self._known is None:
            known: set[str] = set()
            if (await self.tree.lstat(self.directory)).kind == "directory":
                async for entry in self.tree.list(self.directory):
                    known.add(entry.path.rsplit("/", 1)[1])
            self._known = known
        return self._known

    def forget(self, name: str) -> None:
        if self._known is not None:
            self._known.discard(name)

    def path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    async def store(self, files: Sequence[tuple[str, int, bytes | None]]) -> list[str]:
        """Store the files at these ``(path, size, bytes if read already)`` (the directory
        exists); their blob names."""
        known = await self.names()
        names: list[str] = [""] * len(files)
        create_files = getattr(self.tree, "create_files", None)
        fresh: dict[str, bytes] = {}
        for i, (path, size, data) in enumerate(files):
            if data is None and size >= SMALL:
                names[i] = await self._store_large(path, size, known)
                continue
            if data is None:
                data = await read_bytes(self.tree, path)
            if create_files is None:
                names[i] = await self._store_one(data, known)
                continue
            name = hashlib.sha256(data).hexdigest()
            names[i] = name
            if name not in known:
                fresh[name] = data
        if fresh:
            assert create_files is not None
            create_files(self.directory, fresh)
            known.update(fresh)
        return names

    async def _store_one(self, data: bytes, known: set[str]) -> str:
        name = hashlib.sha256(data).hexdigest()
        if name not in known:
            stage = await self._stage()
            await self.tree.write(stage, data)
            await self.tree.rename(stage, self.path(name))
            known.add(name)
        return name

    async def _store_large(self, path: str, size: int, known: set[str]) -> str:
        digest = hashlib.sha256(f"sparse {size}\n".encode())
        stage = await self._stage()
        source = await self.tree.open(path)
        try:
            target = await self.tree.open(
                stage, write=True, create=True, exclusive=True, mode=0o600
            )
            try:
                async for offset, chunk in data_chunks(source, size):
                    digest.update(f"{offset} {len(chunk)}\n".encode())
                    digest.update(chunk)
                    await target.write(offset, chunk)
                await target.truncate(size)
            finally:
                await target.close()
        finally:
            await source.close()
        name = digest.hexdigest()
        if name in known:
            await self.tree.unlink(stage)
        else:
            await self.tree.rename(stage, self.path(name))
            known.add(name)
        return name

    async def read(self, name: str) -> bytes:
        """A small blob's bytes."""
        return await read_bytes(self.tree, self.path(name))

    async def copy_into(self, name: str, size: int, target: OpenFile) -> None:
        """Write the blob ``name`` (of ``size`` bytes) into ``target``, holes kept."""
        source = await self.tree.open(self.path(name))
        try:
            await copy_sparse(source, target, size)
        finally:
            await source.close()
