"""The request reader (mountd._reader): in use, concurrent when a handler blocks, and it stops.

Each test mounts in this process with :func:`mountd.mounted` and touches the mount only from
worker threads (the event loop thread serves the requests).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pyfuse3
import pytest
import trio

import vfs
from mountd import MountOptions, mounted, serve
from mountd._reader import STREAK, Reader
from vfs._paths import base_name

pytestmark = pytest.mark.mount


class GatedTree:
    """temp_fs, except that looking up ``slowN`` waits until someone looks up ``releaseN``."""

    def __init__(self, inner: vfs.PosixFileSystem) -> None:
        self._inner = inner
        self.entered = trio.Event()
        self._gate = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def lstat(self, path: str) -> vfs.FileInfo:
        if base_name(path).startswith("slow"):
            self.entered.set()
            await self._gate.wait()
        elif base_name(path).startswith("release"):
            self._gate.set()
        return await self._inner.lstat(path)

    def rearm(self) -> None:
        self.entered = trio.Event()
        self._gate = trio.Event()


async def _gated() -> GatedTree:
    tree = vfs.temp_fs()
    for n in (1, 2):
        await tree.write(f"/a/slow{n}", "s")
        await tree.write(f"/b/release{n}", "r")
    return GatedTree(tree)


async def _stat_both(mnt: Path, tree: GatedTree, n: int) -> None:
    """stat ``a/slowN`` (blocks in its handler) and then ``b/releaseN`` (unblocks it)."""
    tree.rearm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, os.stat, mnt / "a" / f"slow{n}")
        await tree.entered.wait()  # the slow lookup is in its handler now
        # Another directory: the kernel serializes lookups within one directory.
        await trio.to_thread.run_sync(os.stat, mnt / "b" / f"release{n}")


@pytest.mark.parametrize("fast_reader", [True, False], ids=["fast", "pyfuse3"])
def test_a_blocked_handler_does_not_hold_up_other_requests(
    tmp_path: Path, fast_reader: bool
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = await _gated()
        with trio.fail_after(30):  # a reader that serialized requests would deadlock here
            async with mounted(tree, mnt, MountOptions(fast_reader=fast_reader)):
                await _stat_both(mnt, tree, 1)
                await _stat_both(mnt, tree, 2)  # again, now with a spare worker parked
                # Back to back requests, more than a streak: all answered, in order.
                names = [f"f{i}" for i in range(3 * STREAK)]
                for name in names:
                    await tree.write(f"/many/{name}", name)
                listing = await trio.to_thread.run_sync(os.listdir, mnt / "many")
                assert sorted(listing) == sorted(names)
            # Leaving the block ended the session although spares were parked.

    trio.run(main)


def test_the_fast_reader_serves_the_session_and_is_removed_after(tmp_path: Path) -> None:
    """Fails if a pyfuse3 upgrade makes mountd fall back to pyfuse3's slower loop."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    original = pyfuse3._wait_fuse_readable  # type: ignore[attr-defined]

    async def main() -> None:
        async with mounted(vfs.temp_fs(), mnt):
            installed = pyfuse3._wait_fuse_readable  # type: ignore[attr-defined]
            assert isinstance(getattr(installed, "__self__", None), Reader)
            await trio.to_thread.run_sync((mnt / "f").write_bytes, b"x")
        assert pyfuse3._wait_fuse_readable is original  # type: ignore[attr-defined]

    trio.run(main)


def test_an_unmount_from_outside_stops_every_worker(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = await _gated()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(serve, tree, mnt)
                await _stat_both(mnt, tree, 1)  # leaves a spare worker parked
                await trio.to_thread.run_sync(
                    functools.partial(subprocess.run, ["umount", str(mnt)], check=True)
                )
            # serve() returned by itself once every worker saw the unmount.

    trio.run(main)
