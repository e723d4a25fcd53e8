"""The kernel's cache of file pages: kept after writes through the mount, dropped exactly when
the file changed elsewhere.

With the pyfuse3 that ``scripts/install`` builds, the kernel no longer drops a file's pages
whenever it sees the file's modification time move (``auto_inval_data`` off): what a process
wrote through the mount is read back from memory. mountd drops the pages itself when a file
changed behind the mount (the tree's API, or another writer of a host directory), and once after
writes that left some pages only partly valid.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import trio

import vfs
from mountd import MountOptions, mounted
from mountd._terms import FuseFeatures

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]

MiB = 1 << 20


def test_the_installed_pyfuse3_lets_mountd_keep_written_pages() -> None:
    """Fails when scripts/install left a stock pyfuse3 (every write would empty the cache)."""
    assert FuseFeatures.installed().own_page_cache


def _write_chunks(path: Path, chunks: list[tuple[int, bytes]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for offset, data in chunks:
            assert os.pwrite(fd, data, offset) == len(data)
    finally:
        os.close(fd)


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "dropped"])
def test_what_was_written_is_read_back_from_the_cache(tmp_path: Path, keep: bool) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    data = random.Random(1).randbytes(4 * MiB)
    chunk = 64 * 1024

    async def main() -> None:
        async with mounted(vfs.temp_fs(), mnt, MountOptions(keep_written_pages=keep)) as mount:
            path = mnt / "big.bin"
            chunks = [(at, data[at : at + chunk]) for at in range(0, len(data), chunk)]
            await trio.to_thread.run_sync(_write_chunks, path, chunks)
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(path.read_bytes) == data
            if keep:
                assert mount.counters["read"] == before  # every page came from memory
            else:
                assert mount.counters["read"] > before

    trio.run(main)


def test_partial_page_writes_read_back_whole(tmp_path: Path) -> None:
    """Writes that start or end inside a page leave the kernel a patchwork of valid pages; the
    next open drops it, and every byte reads back as written (also while a reader keeps the
    file open across the writes)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    rng = random.Random(7)

    async def main() -> None:
        async with mounted(vfs.temp_fs(), mnt):
            path = mnt / "patch.bin"
            expected = bytearray()
            reader = None
            try:
                for round_ in range(6):
                    chunks = []
                    for _ in range(40):
                        at = rng.randrange(0, len(expected) + 9000)
                        data = rng.randbytes(rng.randrange(1, 10_000))
                        chunks.append((at, data))
                        if at > len(expected):
                            expected.extend(bytes(at - len(expected)))
                        expected[at : at + len(data)] = data
                    await trio.to_thread.run_sync(_write_chunks, path, chunks)
                    assert await trio.to_thread.run_sync(path.read_bytes) == expected
                    if reader is None:
                        reader = await trio.to_thread.run_sync(os.open, path, os.O_RDONLY)
                    got = await trio.to_thread.run_sync(os.pread, reader, len(expected) + 1, 0)
                    assert got == expected, f"round {round_}"
            finally:
                if reader is not None:
                    os.close(reader)

    trio.run(main)


def test_a_host_file_changed_behind_the_mount_is_read_afresh(tmp_path: Path) -> None:
    """Another writer of a host directory changes a file in place (same size): once the
    attribute timeout has passed, the mount's readers see the new bytes, not cached pages: a new
    open at once, a descriptor held open across the change once its attributes are refreshed
    (fstat, or a read at the end of the file)."""
    host = tmp_path / "host"
    host.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    target = host / "notes.txt"
    target.write_bytes(b"old " * 1000)
    options = MountOptions(entry_timeout=0.3, attr_timeout=0.3, negative_timeout=0.3)

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, options):
            seen = mnt / "notes.txt"
            held = await trio.to_thread.run_sync(os.open, seen, os.O_RDONLY)
            try:
                assert await trio.to_thread.run_sync(os.pread, held, 4000, 0) == b"old " * 1000
                assert await trio.to_thread.run_sync(seen.read_bytes) == b"old " * 1000
                target.write_bytes(b"new " * 1000)
                stat = target.stat()
                os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
                await trio.sleep(0.6)
                await trio.to_thread.run_sync(os.fstat, held)
                for _ in range(250):  # the pages are dropped off the request path
                    got = await trio.to_thread.run_sync(os.pread, held, 4000, 0)
                    if got == b"new " * 1000:
                        break
                    await trio.sleep(0.02)
                assert got == b"new " * 1000
                assert await trio.to_thread.run_sync(seen.read_bytes) == b"new " * 1000
            finally:
                os.close(held)

    trio.run(main)


@pytest.mark.parametrize("files_by_inode", [True, False], ids=["by-inode", "handles"])
def test_without_kept_pages_a_host_writer_is_seen_by_the_next_read(
    tmp_path: Path, files_by_inode: bool
) -> None:
    """``mountd mount --cache-timeout 0``: a program that writes and extends the host file
    while the mount holds it open is seen by the mount's next read, whole. A page drop sent
    while the read's own GETATTR was answered made the kernel throw that answer away, and the
    read used the old size: a short read (found with fsx, one descriptor on each side)."""
    host = tmp_path / "host"
    host.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    options = MountOptions(
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
        keep_written_pages=False,
        files_by_inode=files_by_inode,
    )

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, options):
            seen = mnt / "log.txt"
            await trio.to_thread.run_sync(seen.write_bytes, b"a" * 5000)
            held = await trio.to_thread.run_sync(os.open, seen, os.O_RDWR)
            try:
                assert await trio.to_thread.run_sync(os.pread, held, 5000, 0) == b"a" * 5000
                for round_ in range(20):
                    _append(host / "log.txt", bytes([98 + round_ % 20]) * 3000)  # the host's
                    expected = (host / "log.txt").read_bytes()
                    got = await trio.to_thread.run_sync(os.pread, held, len(expected) + 10, 0)
                    assert got == expected, f"round {round_}: {len(got)} of {len(expected)}"
                    # and the mount's own write, read back at once
                    await trio.to_thread.run_sync(os.pwrite, held, b"m" * 100, 50)
                    assert (host / "log.txt").read_bytes()[50:150] == b"m" * 100
            finally:
                os.close(held)

    trio.run(main)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as writer:
        writer.write(data)


def test_a_descriptor_held_across_an_api_write_reads_the_new_bytes(tmp_path: Path) -> None:
    """The API write drops the kernel's pages and attributes; the read that follows asks for
    the attributes first, and must get them (the page cache must not drop the pages again while
    that GETATTR is answered, which would make the kernel keep the old size)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    tree = vfs.temp_fs({"/a": "alpha\n"})

    async def main() -> None:
        async with mounted(tree, mnt):
            held = await trio.to_thread.run_sync(os.open, mnt / "a", os.O_RDONLY)
            try:
                await trio.to_thread.run_sync(os.truncate, mnt / "a", 0)
                assert await trio.to_thread.run_sync(os.pread, held, 100, 0) == b""
                await tree.write("/a", "x\n")
                assert await trio.to_thread.run_sync(os.pread, held, 100, 0) == b"x\n"
                await tree.write("/a", "longer\n")
                assert await trio.to_thread.run_sync(os.pread, held, 100, 0) == b"longer\n"
            finally:
                await trio.to_thread.run_sync(os.close, held)  # (a FLUSH this loop answers)

    trio.run(main)
