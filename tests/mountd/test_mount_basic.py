"""The mount core end to end: real mounts of real trees, touched with real system calls.

Mounts are served by child processes (``tests.mountd.mounting``); the ``mounted()`` tests serve
in this process and touch the mount from worker threads, which is what a harness author does.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import vfs
from mountd import Mount, MountOptions, _registry, mounted, serve
from vfs._paths import base_name

from . import compositions
from .mounting import MountProcess, mount_process, mount_root
from .syscalls import RENAME_EXCHANGE, RENAME_NOREPLACE, errno_of, renameat2

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def temp_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MountProcess]:
    mountpoint = tmp_path_factory.mktemp("mnt-basic")
    with mount_process(compositions.temp, mountpoint) as mounted_tree:
        yield mounted_tree


@pytest.fixture
def work(temp_mount: MountProcess, request: pytest.FixtureRequest) -> Path:
    """A fresh directory of this test's own inside the temp_fs mount."""
    path = temp_mount.path / request.node.name.replace("[", "-").replace("]", "")
    path.mkdir()
    return path


def test_the_mount_is_a_fuse_mountd_mount(temp_mount: MountProcess) -> None:
    entry = _registry.mount_at(_registry.canonical(str(temp_mount.path)))
    assert entry is not None
    assert entry.fstype == "fuse.mountd"
    assert entry.source == "agentroot"
    assert "default_permissions" in entry.options
    mountinfo = Path("/proc/self/mountinfo").read_text()
    line = next(line for line in mountinfo.splitlines() if f" {temp_mount.path} " in line)
    assert "nosuid" in line and "nodev" in line and "allow_other" not in line


def test_create_read_write_append_truncate(work: Path) -> None:
    f = work / "f.txt"
    f.write_bytes(b"hello")
    assert f.read_bytes() == b"hello"
    with open(f, "ab") as handle:
        handle.write(b" world")
    assert f.read_bytes() == b"hello world"
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"!")
        os.pwrite(fd, b"?", 0)  # O_APPEND: pwrite appends too on Linux
    finally:
        os.close(fd)
    assert f.read_bytes() == b"hello world!?"
    os.truncate(f, 5)
    assert f.read_bytes() == b"hello"
    fd = os.open(f, os.O_RDWR)
    try:
        os.ftruncate(fd, 2)
        assert os.fstat(fd).st_size == 2
        os.pwrite(fd, b"Z", 10)  # a gap past the end reads as zeros
    finally:
        os.close(fd)
    assert f.read_bytes() == b"he" + b"\0" * 8 + b"Z"
    with open(f, "wb") as handle:  # O_TRUNC
        handle.write(b"new")
    assert f.read_bytes() == b"new"
    assert os.stat(f).st_size == 3


def test_truncate_to_an_absurd_size_is_efbig(work: Path) -> None:
    f = work / "f"
    f.write_bytes(b"x")
    assert errno_of(os.truncate, f, 1 << 62) == errno.EFBIG
    assert f.read_bytes() == b"x"


def test_rename_noreplace_and_exchange(work: Path) -> None:
    a, b, c = work / "a", work / "b", work / "c"
    a.write_bytes(b"A")
    b.write_bytes(b"B")
    assert errno_of(renameat2, a, b, RENAME_NOREPLACE) == errno.EEXIST
    assert (a.read_bytes(), b.read_bytes()) == (b"A", b"B")
    renameat2(a, c, RENAME_NOREPLACE)
    assert not a.exists() and c.read_bytes() == b"A"
    renameat2(b, c, RENAME_EXCHANGE)
    assert (b.read_bytes(), c.read_bytes()) == (b"A", b"B")
    assert errno_of(renameat2, b, work / "missing", RENAME_EXCHANGE) == errno.ENOENT
    os.rename(b, c)  # plain rename replaces
    assert c.read_bytes() == b"A" and not b.exists()


def test_rename_a_directory_moves_its_subtree(work: Path) -> None:
    (work / "d" / "sub").mkdir(parents=True)
    (work / "d" / "sub" / "f").write_bytes(b"deep")
    os.rename(work / "d", work / "e")
    assert (work / "e" / "sub" / "f").read_bytes() == b"deep"
    assert not (work / "d").exists()
    assert sorted(os.listdir(work)) == ["e"]


def test_mkdir_rmdir_enotempty(work: Path) -> None:
    d = work / "d"
    d.mkdir()
    (d / "f").write_bytes(b"")
    assert errno_of(os.rmdir, d) == errno.ENOTEMPTY
    assert errno_of(os.mkdir, d) == errno.EEXIST
    assert errno_of(os.unlink, d) in (errno.EISDIR, errno.EPERM)
    os.unlink(d / "f")
    os.rmdir(d)
    assert not d.exists()
    assert errno_of(os.rmdir, d) == errno.ENOENT


def test_unlink_while_open(work: Path) -> None:
    f = work / "f"
    f.write_bytes(b"still here")
    fd = os.open(f, os.O_RDWR)
    try:
        os.unlink(f)
        assert not f.exists()
        assert os.pread(fd, 100, 0) == b"still here"
        assert os.fstat(fd).st_nlink == 0
        os.pwrite(fd, b"!", 10)
        assert os.pread(fd, 100, 0) == b"still here!"
        assert os.fstat(fd).st_size == 11
        os.fchmod(fd, 0o600)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
    finally:
        os.close(fd)
    assert os.listdir(work) == []


def test_rename_over_an_open_file_keeps_the_old_contents(work: Path) -> None:
    old, new = work / "old", work / "new"
    old.write_bytes(b"old data")
    new.write_bytes(b"new data")
    fd = os.open(old, os.O_RDONLY)
    try:
        os.rename(new, old)
        assert os.pread(fd, 100, 0) == b"old data"
        assert old.read_bytes() == b"new data"
    finally:
        os.close(fd)


def test_symlink_readlink(work: Path) -> None:
    (work / "target").write_bytes(b"T")
    os.symlink("target", work / "link")
    assert os.readlink(work / "link") == "target"
    assert (work / "link").read_bytes() == b"T"
    assert stat.S_ISLNK(os.lstat(work / "link").st_mode)
    os.symlink("/nowhere/at/all", work / "dangling")
    assert os.readlink(work / "dangling") == "/nowhere/at/all"
    assert errno_of(os.stat, work / "dangling") == errno.ENOENT


def test_chmod_and_nanosecond_times_round_trip(work: Path) -> None:
    f = work / "f"
    f.write_bytes(b"")
    os.chmod(f, 0o4751)
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o4751
    times = (1_000_000_001_123_456_789, 1_600_000_000_987_654_321)
    os.utime(f, ns=times)
    st = os.stat(f)
    assert (st.st_atime_ns, st.st_mtime_ns) == times
    os.utime(f)  # UTIME_NOW
    assert abs(os.stat(f).st_mtime - time.time()) < 60
    os.mkdir(work / "d", 0o700)
    os.chmod(work / "d", 0o750)
    assert stat.S_IMODE(os.stat(work / "d").st_mode) == 0o750


def test_create_exclusive(work: Path) -> None:
    f = work / "f"
    os.close(os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    assert errno_of(os.open, f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600) == errno.EEXIST


def test_umask_and_owner_are_honoured(work: Path) -> None:
    old = os.umask(0o027)
    try:
        os.close(os.open(work / "f", os.O_WRONLY | os.O_CREAT, 0o666))
        os.mkdir(work / "d", 0o777)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(work / "f").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(work / "d").st_mode) == 0o750
    st = os.stat(work / "f")
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


def test_statfs_reports_a_real_name_limit(temp_mount: MountProcess, work: Path) -> None:
    info = os.statvfs(temp_mount.path)
    assert info.f_namemax == 255
    assert info.f_bsize == 4096 and info.f_blocks > 0 and info.f_bavail > 0
    assert errno_of(os.stat, work / ("x" * 256)) == errno.ENAMETOOLONG
    (work / ("y" * 255)).write_bytes(b"ok")


def test_the_mount_reads_ahead_a_mebibyte(temp_mount: MountProcess, work: Path) -> None:
    dev = os.stat(temp_mount.path).st_dev
    knob = Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")
    assert knob.read_text().strip() == "1024"  # libfuse's own is 128: one request at a time
    data = os.urandom(3 << 20)
    (work / "big").write_bytes(data)
    assert (work / "big").read_bytes() == data


def test_hard_links_and_mknod_make_files_and_fifos(work: Path) -> None:
    (work / "f").write_bytes(b"")
    assert errno_of(os.link, work / "f", work / "g") == 0  # temp_fs holds them (test_tools)
    assert os.stat(work / "g").st_nlink == 2
    assert errno_of(os.mknod, work / "n", stat.S_IFREG | 0o644) == 0  # a plain file
    assert stat.S_ISREG(os.stat(work / "n").st_mode)
    assert errno_of(os.mkfifo, work / "fifo") == 0  # temp_fs holds them (test_special_files)
    assert stat.S_ISFIFO(os.lstat(work / "fifo").st_mode)


def test_xattrs_are_unsupported_never_eio(temp_mount: MountProcess, work: Path) -> None:
    f = work / "f"
    f.write_bytes(b"")
    assert errno_of(os.setxattr, f, "user.k", b"v") == errno.EOPNOTSUPP
    assert errno_of(os.getxattr, f, "user.k") == errno.EOPNOTSUPP
    assert errno_of(os.listxattr, f) == errno.EOPNOTSUPP
    assert errno_of(os.removexattr, f, "user.k") == errno.EOPNOTSUPP
    # The kernel stops asking after the first answer: writes cost no getxattr round trips.
    before = temp_mount.stats()["counters"].get("getxattr", 0)
    for _ in range(5):
        with open(f, "ab") as handle:
            handle.write(b"x")
    assert temp_mount.stats()["counters"].get("getxattr", 0) == before <= 1


def test_ten_mebibytes_round_trip(work: Path) -> None:
    data = os.urandom(10 << 20)
    f = work / "big"
    with open(f, "wb") as handle:
        for offset in range(0, len(data), 1 << 20):
            handle.write(data[offset : offset + (1 << 20)])
    assert os.stat(f).st_size == len(data)
    digest = hashlib.sha256()
    with open(f, "rb") as handle:
        while chunk := handle.read(1 << 17):
            digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_large_directory_lists_every_name_once_and_lookups_balance(
    temp_mount: MountProcess, work: Path
) -> None:
    names = {f"n{i:04d}" for i in range(600)}
    for name in names:
        (work / name).write_bytes(b"")
    listed = os.listdir(work)
    assert sorted(listed) == sorted(names)
    assert {e.name for e in os.scandir(work) if e.is_file()} == names
    # Every inode the kernel took (lookups and readdirplus entries) comes back through forget.
    for name in names:
        os.unlink(work / name)
    os.rmdir(work)
    Path("/proc/sys/vm/drop_caches").write_text("2\n")
    deadline = time.monotonic() + 10
    while temp_mount.stats()["inodes"] > 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert temp_mount.stats()["inodes"] <= 5


def test_a_read_only_mount_option_answers_erofs(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_root(compositions.temp, mnt, MountOptions(read_only=True)) as root:
        assert os.listdir(root) == []
        assert errno_of(os.mkdir, root / "d") == errno.EROFS
        assert errno_of(Path.write_bytes, root / "f", b"") == errno.EROFS


def test_a_tree_without_hard_links_refuses_them_with_eperm(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_root(compositions.eight_verb, mnt) as root:
        (root / "f").write_bytes(b"x")
        assert errno_of(os.link, root / "f", root / "g") == errno.EPERM
        assert not (root / "g").exists()


def test_a_read_only_dir_fs_answers_erofs(tmp_path: Path) -> None:
    host, mnt = tmp_path / "host", tmp_path / "mnt"
    host.mkdir()
    mnt.mkdir()
    (host / "f.txt").write_bytes(b"host data")
    (host / "d").mkdir()
    with mount_root(functools.partial(compositions.dir_ro, host), mnt) as root:
        assert (root / "f.txt").read_bytes() == b"host data"
        assert sorted(os.listdir(root)) == ["d", "f.txt"]
        assert errno_of(os.mkdir, root / "new") == errno.EROFS
        assert errno_of(Path.write_bytes, root / "new.txt", b"") == errno.EROFS
        assert errno_of(Path.write_bytes, root / "f.txt", b"x") == errno.EROFS
        assert errno_of(os.unlink, root / "f.txt") == errno.EROFS
        assert errno_of(os.rename, root / "f.txt", root / "g.txt") == errno.EROFS
        assert errno_of(os.chmod, root / "f.txt", 0o600) == errno.EROFS
        assert errno_of(os.rmdir, root / "d") == errno.EROFS
    assert (host / "f.txt").read_bytes() == b"host data"


def test_a_writable_dir_fs_writes_through_to_the_host(tmp_path: Path) -> None:
    host, mnt = tmp_path / "host", tmp_path / "mnt"
    host.mkdir()
    mnt.mkdir()
    with mount_root(functools.partial(compositions.dir_rw, host), mnt) as root:
        (root / "d").mkdir()
        (root / "d" / "f").write_bytes(b"through")
        os.rename(root / "d" / "f", root / "g")
        assert (host / "g").read_bytes() == b"through"
        assert os.listdir(host / "d") == []


# --- trees that misbehave ---------------------------------------------------------------------


class ExplodingTree:
    """temp_fs, except that looking at a name starting with ``boom`` is a bug (RuntimeError)."""

    def __init__(self) -> None:
        self._inner = vfs.temp_fs()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def lstat(self, path: str) -> vfs.FileInfo:
        if base_name(path).startswith("boom"):
            raise RuntimeError(f"tree bug at {path}")
        return await self._inner.lstat(path)


def exploding_tree() -> object:
    return ExplodingTree()


def test_an_unexpected_exception_is_eio_and_the_daemon_keeps_serving(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_process(exploding_tree, mnt) as mounted_tree:
        (mnt / "fine").write_bytes(b"ok")
        assert errno_of(os.stat, mnt / "boom") == errno.EIO
        assert errno_of(os.stat, mnt / "boom2") == errno.EIO
        assert (mnt / "fine").read_bytes() == b"ok"
        log = mounted_tree.log()
    assert "unexpected error in lookup" in log
    assert "RuntimeError: tree bug at /boom" in log


# --- in this process: mounted() -----------------------------------------------------------------


def read_through(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def test_api_changes_are_visible_through_the_mount_at_once(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    options = MountOptions(entry_timeout=3600, attr_timeout=3600, negative_timeout=3600)

    async def main() -> None:
        tree = vfs.temp_fs()
        await tree.write("/d/f.txt", "v1")
        async with mounted(tree, mnt, options) as mount:
            assert isinstance(mount, Mount) and mount.mountpoint == str(mnt)
            f = mnt / "d" / "f.txt"
            assert await trio.to_thread.run_sync(read_through, f) == b"v1"
            assert not await trio.to_thread.run_sync((mnt / "d" / "new.txt").exists)
            # Each API change is visible through the mount as soon as the call returns.
            await tree.write("/d/f.txt", "version two")
            assert await trio.to_thread.run_sync(read_through, f) == b"version two"
            await tree.write("/d/new.txt", "created by the API")  # was a cached negative entry
            assert await trio.to_thread.run_sync(read_through, mnt / "d" / "new.txt") == (
                b"created by the API"
            )
            await tree.delete("/d/f.txt")
            code = await trio.to_thread.run_sync(errno_of, read_through, f)
            assert code == errno.ENOENT
            listing = await trio.to_thread.run_sync(os.listdir, mnt / "d")
            assert listing == ["new.txt"]
            # A file kept open through the mount sees the API's new contents after they land.
            fd = await trio.to_thread.run_sync(os.open, mnt / "d" / "new.txt", os.O_RDONLY)
            try:
                await tree.write("/d/new.txt", "rewritten")
                data = await trio.to_thread.run_sync(os.pread, fd, 100, 0)
                assert data == b"rewritten"
            finally:
                # Never on the event loop thread: close() sends FLUSH, which this thread serves.
                await trio.to_thread.run_sync(os.close, fd)
            # Changes made through the mount are the mount's own: no invalidation for them.
            sent = mount.counters["InvalidateInode"] + mount.counters["InvalidateEntry"]
            await trio.to_thread.run_sync((mnt / "d" / "own.txt").write_bytes, b"mine")
            assert await tree.read("/d/own.txt") == "mine"
            assert mount.counters["InvalidateInode"] + mount.counters["InvalidateEntry"] == sent
            assert mount.counters["lookup"] > 0
        assert _registry.mount_at(_registry.canonical(str(mnt))) is None

    trio.run(main)


def test_one_mount_per_process(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()

    async def main() -> None:
        tree = vfs.temp_fs()
        await tree.write("/f", "still served")
        async with mounted(tree, first):
            with pytest.raises(RuntimeError, match="one mount per process"):
                async with mounted(vfs.temp_fs(), second):
                    pass  # pragma: no cover
            assert await trio.to_thread.run_sync(read_through, first / "f") == b"still served"
        assert _registry.mount_at(_registry.canonical(str(second))) is None

    trio.run(main)


def test_serve_reports_started_and_unmounts_on_cancel(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            mount = await nursery.start(serve, vfs.temp_fs(), mnt)
            assert os.stat(mnt).st_dev != os.stat(tmp_path).st_dev
            await trio.to_thread.run_sync((mnt / "x").write_bytes, b"x")
            assert mount.counters["create"] == 1
            nursery.cancel_scope.cancel()
        assert _registry.mount_at(_registry.canonical(str(mnt))) is None
        assert not (mnt / "x").exists()

    trio.run(main)


def test_serve_returns_when_unmounted_from_outside(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(serve, vfs.temp_fs(), mnt)
                await trio.to_thread.run_sync(
                    functools.partial(subprocess.run, ["umount", str(mnt)], check=True)
                )
            # serve() returned by itself: the nursery closed without a cancel.
        assert _registry.mount_at(_registry.canonical(str(mnt))) is None

    trio.run(main)


def test_serve_refuses_a_missing_mountpoint(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(OSError, match="does not exist"):
            await serve(vfs.temp_fs(), tmp_path / "missing")

    trio.run(main)


# --- a daemon killed with SIGKILL ---------------------------------------------------------------

_KILLABLE = """
import sys, trio, vfs, mountd
async def main():
    async with mountd.mounted(vfs.temp_fs(), sys.argv[1]):
        print("ready", flush=True)
        await trio.sleep_forever()
trio.run(main)
"""


def test_a_stale_mount_left_by_sigkill_is_cleared_by_the_next_serve(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    repo = Path(__file__).resolve().parents[2]
    with subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, str(mnt)],
        stdout=subprocess.PIPE,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert _registry.probe(str(mnt)) == "dead"
    with mount_root(compositions.temp, mnt) as root:
        assert _registry.probe(str(root)) == "live"
        assert os.listdir(root) == []
    assert _registry.mount_at(_registry.canonical(str(mnt))) is None
