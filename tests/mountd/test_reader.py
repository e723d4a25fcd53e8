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
import trio.testing

import vfs
from mountd import MountOptions, mounted, serve
from mountd._reader import SPIN_START, STREAK, Reader
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


class _PollsNothing:
    """A poller that never sees the device ready: every wait then outlasts its spin window."""

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        return []


def test_the_spin_window_grows_when_requests_come_late_and_shrinks_to_none_when_idle() -> None:
    """Reader._next_soon on a pipe standing in for the device (no timing involved)."""
    most = 8 * SPIN_START
    read_end, write_end = os.pipe()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            reader = Reader(read_end, nursery, spin=most)
            assert reader._spin == most  # a new mount spins at once
            # Nothing comes: each empty wait halves the window, until it stops spinning.
            shrinking = []
            for _ in range(5):
                assert not reader._next_soon()
                shrinking.append(reader._spin)
            assert shrinking == [most / 2, most / 4, most / 8, 0.0, 0.0]
            # A request that select saw (there was no window to poll in) starts it again.
            os.write(write_end, b"r")
            assert reader._next_soon()
            assert reader._spin == SPIN_START
            # One the poll sees leaves the window as it is.
            assert reader._next_soon()
            assert reader._spin == SPIN_START
            # Requests that come only once the poll gave up: the window doubles each time, up
            # to the most it may be.
            reader._poller = _PollsNothing()  # type: ignore[assignment]
            growing = []
            for _ in range(4):
                assert reader._next_soon()
                growing.append(reader._spin)
            assert growing == [2 * SPIN_START, 4 * SPIN_START, most, most]

    try:
        trio.run(main)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_reader_told_not_to_spin_never_does() -> None:
    read_end, write_end = os.pipe()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            reader = Reader(read_end, nursery, spin=0.0)
            reader._poller = _PollsNothing()  # type: ignore[assignment]
            os.write(write_end, b"r")
            assert reader._next_soon()
            assert reader._spin == 0.0
            os.read(read_end, 1)
            assert not reader._next_soon()  # select's wait, no poll before it
            assert reader._spin == 0.0

    try:
        trio.run(main)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_no_worker_waits_outside_trio_while_another_handles_a_request() -> None:
    """A handler that awaits (a lock's checkpoint, a thread) lets other tasks run; a worker that
    takes the read role meanwhile must wait for the next request through trio. Waiting outside
    it (polling, select) would hold the handler up too, and the client waits for its answer, so
    no request comes: copy-on-write mounts, whose changes take a lock, spent ~0.7 ms so per
    request. A pipe stands in for the device."""
    read_end, write_end = os.pipe()
    outside: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            reader = Reader(read_end, nursery, max_tasks=1, spin=SPIN_START)

            def next_soon() -> bool:
                outside.append(trio.lowlevel.current_task().name)
                return False  # nothing came: the worker goes on to wait through trio

            reader._next_soon = next_soon  # type: ignore[method-assign]

            async def send(data: bytes) -> None:
                await trio.testing.wait_all_tasks_blocked()
                os.write(write_end, data)

            # Alone, a worker may wait outside trio first (the fast path).
            nursery.start_soon(send, b"1")
            assert await reader.wait()
            assert len(outside) == 1
            os.read(read_end, 1)  # ... and now handles request 1
            served = trio.Event()

            async def second_worker() -> None:
                assert await reader.wait()
                served.set()

            nursery.start_soon(second_worker, name="second")
            nursery.start_soon(send, b"2")
            await served.wait()
            assert len(outside) == 1  # the second worker waited through trio
            os.read(read_end, 1)

    try:
        trio.run(main)
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("seconds", [-1e-6, 0.2])
def test_a_spin_window_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError) as refused:
        MountOptions(idle_spin=seconds)
    assert str(refused.value) == f"idle_spin must be between 0 and 0.1 seconds: {seconds!r}"
