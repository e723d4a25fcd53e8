"""glob never descends a directory symlink, whatever the spelling of the pattern.

A literal leading segment (``lnk/*.md``) is walked like a wildcard one (``l*/*.md``): on every
tree both find nothing through the symlink ``/lnk -> real``, while the directory a glob starts
from is followed (``glob("*.md", "/lnk")``), as the start of every walk is. On the host default
this is what keeps ``memory/*.md`` out of durable memory.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import vfs

BACKENDS = ["trio", "asyncio"]


async def _temp(tmp: Path) -> tuple[vfs.FileSystem, str]:
    fs = vfs.temp_fs({"/real/a.md": "a", "/real/sub/b.md": "b", "/top.md": "t"})
    await fs.symlink("/lnk", "real")
    return fs, ""


def _host(tmp: Path) -> Path:
    root = tmp / "root"
    (root / "real" / "sub").mkdir(parents=True)
    (root / "real" / "a.md").write_text("a")
    (root / "real" / "sub" / "b.md").write_text("b")
    (root / "top.md").write_text("t")
    os.symlink("real", root / "lnk")
    return root


async def _dir(tmp: Path) -> tuple[vfs.FileSystem, str]:
    return vfs.dir_fs(_host(tmp)), ""


async def _local(tmp: Path) -> tuple[vfs.FileSystem, str]:
    root = _host(tmp).resolve()
    return vfs.local_file_system(root), str(root)


async def _union(tmp: Path) -> tuple[vfs.FileSystem, str]:
    fs, _ = await _temp(tmp)
    return vfs.union_fs({"/": fs, "/tmp": vfs.temp_fs()}), ""


async def _union_beneath(tmp: Path) -> tuple[vfs.FileSystem, str]:
    """The tree is mounted at /m and globbed from /: the literal prefix crosses the mount."""
    fs, _ = await _temp(tmp)
    return vfs.union_fs({"/": vfs.temp_fs(), "/m": fs}), "/m"


async def _cow(tmp: Path) -> tuple[vfs.FileSystem, str]:
    return vfs.cow_fs(vfs.dir_fs(_host(tmp), read_only=True)), ""


async def _overlay(tmp: Path) -> tuple[vfs.FileSystem, str]:
    fs, _ = await _temp(tmp)
    return vfs.overlay_fs([vfs.temp_fs(), fs]), ""


TREES: dict[str, Callable[[Path], Awaitable[tuple[vfs.FileSystem, str]]]] = {
    "temp": _temp,
    "dir": _dir,
    "local": _local,
    "union": _union,
    "union_beneath": _union_beneath,
    "cow": _cow,
    "overlay": _overlay,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(TREES))
def test_a_literal_segment_is_not_followed_either(backend: str, kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        fs, base = await TREES[kind](tmp_path)
        root = base or "/"
        # local_file_system takes host paths; the others a path of the tree (here, the root).
        start = base if kind == "local" else "/"
        where = "" if kind == "local" else base.lstrip("/")

        async def globbed(pattern: str, directory: str) -> list[str]:
            return [entry.path async for entry in fs.glob(pattern, directory)]

        prefix = f"{where}/" if where else ""
        for pattern in ["lnk/*.md", "l*/*.md", "lnk/**", "l*/**", "lnk/a.md", "lnk/sub/*.md"]:
            assert await globbed(prefix + pattern, start) == [], pattern
        everything = await globbed(prefix + "**/*.md", start)
        assert [p[len(root.rstrip("/")) :] for p in everything] == [
            "/real/a.md",
            "/real/sub/b.md",
            "/top.md",
        ]
        lnk = root.rstrip("/") + "/lnk"
        assert await globbed("*.md", lnk) == [lnk + "/a.md"]  # the start directory is followed
        assert await globbed("sub/*.md", lnk) == [lnk + "/sub/b.md"]

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_is_not_globbed_on_the_host_default(backend: str, tmp_path: Path) -> None:
    durable = tmp_path / "durable"
    durable.mkdir()
    (durable / "secret.md").write_text("durable")
    cwd = tmp_path / "repo"
    cwd.mkdir()
    (cwd / "memory").symlink_to(durable)
    (cwd / "notes.md").write_text("n")
    fs = vfs.local_file_system(cwd)

    async def main() -> None:
        for pattern in ["memory/*.md", "memory/**", "./memory/*", "m*/*.md", "**/*.md"]:
            found = [entry.path async for entry in fs.glob(pattern)]
            assert str(durable / "secret.md") not in found
            assert not any(path.startswith(f"{cwd}/memory/") for path in found), pattern
        assert [entry.path async for entry in fs.glob("*")] == [f"{cwd}/memory", f"{cwd}/notes.md"]

    anyio.run(main, backend=backend)
