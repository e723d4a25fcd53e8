"""The bytes durable checkpoints hold: files in a tree's reserved directory, written once.

Theory of operation
-------------------
A checkpoint's manifest names each file's bytes by their SHA-256 and says where they are; the
store's files are never changed once named, only removed by a prune when no kept checkpoint
names them, so every checkpoint (and every file) with the same bytes shares them. Two places,
told apart by the file's size, so the same bytes always get the same name:

- *small* (under :data:`SMALL`): the bytes of every small file a checkpoint stores are one
  *pack*, ``packs/<token>``, written in one go (``create_files`` where the tree offers it, else
  staged and renamed); an entry's tail is ``[sha256, pack, offset]``. Bytes some kept
  checkpoint holds already are named where they are, not stored again (:meth:`Blobs.learn`).
  (A small file stored before packs is a loose blob, as a large one: its tail is ``[sha256]``.)
- *large*: a loose blob ``blobs/<name>`` of its own, streamed in :data:`CHUNK` pieces, never
  whole in memory, and holes stay holes. Only what the file holds is read (its data extents
  where the open file tells them: ``data_extents``; a chunk of zeros is not written either), so
  a 5 GiB file with one byte costs one chunk. The name is the SHA-256 of the size and each
  stored chunk with its offset: equal names mean equal bytes; equal bytes stored with other
  holes may get another name.

Every store file is written under a stage name and renamed into place, so it exists only whole.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ._cow_changes import read_bytes
from ._reading import copy_sparse, data_chunks
from ._types import OpenFile, PosixFileSystem

SMALL = 1 << 20  # a file this large or larger is streamed into a loose blob

Tail = list[Any]  # what a file's manifest entry says of its bytes (see the module docstring)


def store_files(tail: Tail) -> tuple[str, str] | None:
    """``("pack", name)`` or ``("blob", name)``: the store file that holds an entry's bytes."""
    if len(tail) >= 3:
        return "pack", str(tail[1])
    return ("blob", str(tail[0])) if tail else None


class Blobs:
    """The store of one tree: loose blobs in ``blobs``, packs in ``packs`` (reserved
    directories of ``tree``); ``stage()`` names a fresh stage file."""

    __slots__ = ("_known", "_located", "_stage", "blobs", "packs", "tree")

    def __init__(
        self, tree: PosixFileSystem, blobs: str, packs: str, stage: Callable[[], Awaitable[str]]
    ) -> None:
        self.tree = tree
        self.blobs = blobs
        self.packs = packs
        self._stage = stage
        self._known: set[str] | None = None  # the loose blobs' names (listed once)
        self._located: dict[str, Tail] = {}  # sha256 -> a kept pack's tail for those bytes

    def learn(self, tails: Iterable[Tail]) -> None:
        """Bytes a kept checkpoint names in a pack: stored already."""
        for tail in tails:
            if len(tail) >= 3:
                self._located.setdefault(tail[0], tail)

    def forget(self, kind: str, name: str) -> None:
        """The store file ``name`` (a ``"pack"`` or a ``"blob"``) was removed."""
        if kind == "blob":
            if self._known is not None:
                self._known.discard(name)
            return
        for sha in [sha for sha, tail in self._located.items() if tail[1] == name]:
            del self._located[sha]

    async def names(self) -> set[str]:
        if self._known is None:
            known: set[str] = set()
            if (await self.tree.lstat(self.blobs)).kind == "directory":
                async for entry in self.tree.list(self.blobs):
                    known.add(entry.path.rsplit("/", 1)[1])
            self._known = known
        return self._known

    async def store(self, files: Sequence[tuple[str, int, bytes | None]]) -> list[Tail]:
        """Store the files at these ``(path, size, bytes if read already)`` (the directories
        exist); the tail of each one's manifest entry."""
        tails: list[Tail] = [[] for _ in files]
        pack = secrets.token_hex(8)
        pieces: list[bytes] = []
        fresh: dict[str, Tail] = {}  # located once the pack is written, not before
        offset = 0
        for i, (path, size, data) in enumerate(files):
            if data is None and size >= SMALL:
                tails[i] = [await self._store_large(path, size)]
                continue
            if data is None:
                data = await read_bytes(self.tree, path)
            sha = hashlib.sha256(data).hexdigest()
            tail = self._located.get(sha) or fresh.get(sha)
            if tail is None:
                tail = fresh[sha] = [sha, pack, offset]
                pieces.append(data)
                offset += len(data)
            tails[i] = tail
        if pieces:
            await self._create(self.packs, pack, b"".join(pieces))
            self._located.update(fresh)
        return tails

    async def _create(self, directory: str, name: str, data: bytes) -> None:
        create_files = getattr(self.tree, "create_files", None)
        if create_files is not None:
            create_files(directory, {name: data})
            return
        stage = await self._stage()
        await self.tree.write(stage, data)
        await self.tree.rename(stage, f"{directory}/{name}")

    async def _store_large(self, path: str, size: int) -> str:
        known = await self.names()
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
            await self.tree.rename(stage, f"{self.blobs}/{name}")
            known.add(name)
        return name

    async def read_many(self, entries: Sequence[tuple[int, Tail]]) -> list[bytes]:
        """The bytes of small files given as ``(size, tail)``, each pack opened once."""
        found: list[bytes] = [b""] * len(entries)
        by_pack: dict[str, list[int]] = {}
        for i, (_, tail) in enumerate(entries):
            if len(tail) >= 3:
                by_pack.setdefault(tail[1], []).append(i)
            else:
                found[i] = await read_bytes(self.tree, f"{self.blobs}/{tail[0]}")
        for pack, indices in by_pack.items():
            file = await self.tree.open(f"{self.packs}/{pack}")
            try:
                for i in indices:
                    size, tail = entries[i]
                    found[i] = await file.read(tail[2], size) if size else b""
            finally:
                await file.close()
        return found

    async def copy_into(self, size: int, tail: Tail, target: OpenFile) -> None:
        """Write the bytes of a file of ``size`` bytes stored as ``tail`` into ``target``, its
        holes kept."""
        if len(tail) >= 3:
            (data,) = await self.read_many([(size, tail)])
            await target.write(0, data)
            await target.truncate(size)
            return
        source = await self.tree.open(f"{self.blobs}/{tail[0]}")
        try:
            await copy_sparse(source, target, size)
        finally:
            await source.close()
