"""Every kind of writable tree a tool can be bound to, seeded with exact bytes.

``WRITABLE`` names a factory per tree kind; ``build(kind, tmp, files)`` makes a fresh tree holding
``files`` (contract paths to bytes) and answers a :class:`Seeded`: the tree, the path a tool is
given for a contract path (a host path for ``local_file_system``), and ``raw(path)``, the exact
bytes the file holds now, read below the tree (the host file, the store's object, the node's
bytes), never through ``read``, which decodes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio.lowlevel

import vfs

from ..dict_tree import DictTree

Files = Mapping[str, bytes]


@dataclass(frozen=True)
class Seeded:
    fs: vfs.FileSystem
    raw: Callable[[str], Awaitable[bytes]]
    host_root: str | None = None

    def p(self, path: str) -> str:
        """What a tool is given for contract path ``path``."""
        return path if self.host_root is None else self.host_root + path


def _host_tree(root: Path, files: Files) -> Path:
    root.mkdir(parents=True)
    for path, data in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def _host_raw(root: Path) -> Callable[[str], Awaitable[bytes]]:
    async def raw(path: str) -> bytes:
        return (root / path.lstrip("/")).read_bytes()

    return raw


def _open_raw(fs: vfs.PosixFileSystem) -> Callable[[str], Awaitable[bytes]]:
    async def raw(path: str) -> bytes:
        handle = await fs.open(path)
        try:
            return await handle.read(0, 1 << 30)
        finally:
            await handle.close()

    return raw


def build(kind: str, tmp: Path, files: Files) -> Seeded:
    if kind == "temp":
        temp = vfs.temp_fs(dict(files))
        return Seeded(temp, _open_raw(temp))
    if kind == "dir":
        root = _host_tree(tmp / "dir", files)
        return Seeded(vfs.dir_fs(root), _host_raw(root))
    if kind == "local":
        root = _host_tree(tmp / "local", files).resolve()
        return Seeded(vfs.local_file_system(root), _host_raw(root), str(root))
    if kind == "union":
        root = _host_tree(tmp / "union", files)
        union = vfs.union_fs({"/": vfs.dir_fs(root), "/tmp": vfs.temp_fs()})
        return Seeded(union, _host_raw(root))
    if kind == "cow":
        root = _host_tree(tmp / "cow", files)
        cow = vfs.cow_fs(vfs.dir_fs(root, read_only=True))
        return Seeded(cow, _open_raw(cow))
    if kind == "host":
        store = vfs.InMemoryHostFiles(dict(files), scope="s")

        async def stored(path: str) -> bytes:
            return (await store.read("s", path)).content

        return Seeded(vfs.host_fs(store, "s"), stored)
    if kind == "union_host":  # the store's tree reached through a union: posix_view's open
        store = vfs.InMemoryHostFiles(dict(files), scope="s")

        async def stored_below(path: str) -> bytes:
            return (await store.read("s", path)).content

        union = vfs.union_fs({"/": vfs.host_fs(store, "s"), "/tmp": vfs.temp_fs()})
        return Seeded(union, stored_below)
    if kind == "user_tree":
        tree = DictTree(dict(files))

        async def held(path: str) -> bytes:
            return tree.files[path]

        return Seeded(tree, held)
    raise ValueError(kind)


class YieldingTree(DictTree):
    """A user's tree over a slow store: every read and write waits for the event loop once, so
    concurrent calls interleave there."""

    async def read(self, path: str) -> str | bytes:
        await anyio.lowlevel.checkpoint()
        return await super().read(path)

    async def write(self, path: str, contents: str | bytes) -> None:
        await anyio.lowlevel.checkpoint()
        await super().write(path, contents)


WRITABLE = ("temp", "dir", "local", "union", "cow", "host", "union_host", "user_tree")
