"""Holes cost nothing through a mount: a one-byte write far into a file stores one page in the
daemon and reports the blocks it stores, as tmpfs does (a public regression suite writes one
byte at a 5.6 GB offset)."""

from __future__ import annotations

import errno
import functools
import os
import time
from pathlib import Path

import pytest

from . import compositions
from .mounting import mount_process

FAR = 0x14FFFFFFF


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.mount
@pytest.mark.parametrize("kind", ["temp", "cow-durable"])
def test_a_far_write_costs_one_page(tmp_path: Path, kind: str) -> None:
    (tmp_path / "mnt").mkdir()
    if kind == "temp":
        build = compositions.temp
    else:
        (tmp_path / "lower").mkdir()
        (tmp_path / "upper").mkdir()
        build = functools.partial(compositions.cow_durable, tmp_path / "lower", tmp_path / "upper")
    with mount_process(build, tmp_path / "mnt") as mounted:
        before = rss_kib(mounted.pid)
        path = mounted.path / "sparse"
        with open(path, "wb") as handle:
            handle.seek(FAR)
            handle.write(b" ")
        st = os.stat(path)
        assert st.st_size == FAR + 1
        assert st.st_blocks <= 16  # tmpfs: 8
        with open(path, "rb") as handle:
            handle.seek(FAR - 3)
            assert handle.read(8) == b"\0\0\0 "
            handle.seek(1 << 30)
            assert handle.read(4096) == bytes(4096)
        assert rss_kib(mounted.pid) - before < 64 * 1024  # not 5.6 GB


def small_temp() -> object:
    import vfs

    return vfs.temp_fs(max_bytes=1 << 20)


@pytest.mark.mount
def test_a_full_in_memory_tree_says_enospc_and_statfs_shows_it(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    with mount_process(small_temp, tmp_path / "mnt") as mounted:
        free = os.statvfs(mounted.path)
        assert free.f_blocks * free.f_frsize == 1 << 20
        with open(mounted.path / "a", "wb") as handle:
            handle.write(b"x" * (512 << 10))
        fd = os.open(mounted.path / "b", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with pytest.raises(OSError) as caught:
                for _ in range(8):  # 1 MiB in all: the limit falls inside
                    os.write(fd, b"y" * (128 << 10))
        finally:
            os.close(fd)
        assert caught.value.errno == errno.ENOSPC
        assert os.statvfs(mounted.path).f_bavail * free.f_frsize <= 512 << 10
        for name in ("a", "b"):
            os.unlink(mounted.path / name)  # the space comes back once the kernel forgets them
        deadline = time.monotonic() + 10
        while os.statvfs(mounted.path).f_bavail * free.f_frsize < 768 << 10:
            assert time.monotonic() < deadline, "the space never came back"
            time.sleep(0.05)
        (mounted.path / "c").write_bytes(b"z" * (768 << 10))
        assert (mounted.path / "c").stat().st_size == 768 << 10
