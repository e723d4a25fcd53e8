"""Files served by inode: no OPEN or RELEASE request for a file that already exists.

With the pyfuse3 that ``scripts/install`` builds, mountd answers the kernel's first OPEN with
ENOSYS; the kernel then opens files without asking, for the rest of the mount, and reads and
writes arrive with the file's inode instead of a handle (``mountd._ops``). What the daemon no
longer hears about (opens, closes, an O_TRUNC riding on an open) must still behave: these tests
pin each piece.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

import vfs
from mountd import MountOptions, mounted
from mountd._attrs import AttrPolicy
from mountd._inodes import ROOT_INODE
from mountd._ops import Operations
from mountd._pages import STORE_RUNS
from mountd._terms import FuseFeatures, Terms
from vfs.lowlevel import ForwardingTree, Verb
from vfs.turns import turn_root

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]


def test_the_installed_pyfuse3_serves_files_by_inode() -> None:
    """Fails when scripts/install left a pyfuse3 without the patch (two requests per open)."""
    assert FuseFeatures.installed().files_by_inode


@pytest.mark.parametrize("by_inode", [True, False], ids=["by-inode", "handles"])
def test_a_file_read_again_costs_open_and_release_only_through_handles(
    tmp_path: Path, by_inode: bool
) -> None:
    fs = vfs.temp_fs({"/f.txt": "hello\n"})

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions(files_by_inode=by_inode)) as mount:
            for _ in range(3):
                assert await trio.to_thread.run_sync((tmp_path / "f.txt").read_text) == "hello\n"
            counters = mount.counters
            assert counters["read"] == 1  # the pages stay cached either way
            if by_inode:
                assert (counters["open"], counters["release"]) == (1, 0)  # the ENOSYS only
            else:
                assert (counters["open"], counters["release"]) == (3, 3)

    trio.run(main)


def test_an_o_trunc_open_truncates(tmp_path: Path) -> None:
    fs = vfs.temp_fs({"/f.txt": "a longer first version\n"})

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions()) as mount:
            path = tmp_path / "f.txt"
            assert await trio.to_thread.run_sync(path.read_text) == "a longer first version\n"
            await trio.to_thread.run_sync(
                lambda: path.write_text("short\n")
            )  # O_WRONLY|O_CREAT|O_TRUNC
            assert await trio.to_thread.run_sync(path.read_text) == "short\n"
            assert await fs.read("/f.txt") == "short\n"
            assert mount.counters["setattr"] >= 1  # the truncation, sent on its own

            def truncate_and_write() -> int:
                fd = os.open(path, os.O_RDWR | os.O_TRUNC)
                try:
                    size = os.fstat(fd).st_size
                    os.write(fd, b"x")
                    return size
                finally:
                    os.close(fd)

            assert await trio.to_thread.run_sync(truncate_and_write) == 0
            assert await fs.read("/f.txt") == "x"

    trio.run(main)


def test_a_temporary_file_lives_on_after_its_unlink(tmp_path: Path) -> None:
    """``tempfile.TemporaryFile``: created, unlinked at once, then written and read back."""

    def use() -> bytes:
        with tempfile.TemporaryFile(dir=tmp_path) as handle:
            assert os.listdir(tmp_path) == []
            handle.write(b"spilled " * 10_000)
            handle.flush()
            os.fsync(handle.fileno())
            handle.truncate(8 * 10_001)  # ftruncate of the unlinked file (found by hypothesis)
            handle.seek(0)
            return handle.read()

    async def main() -> None:
        async with mounted(vfs.temp_fs(), tmp_path, MountOptions()) as mount:
            assert await trio.to_thread.run_sync(use) == b"spilled " * 10_000 + bytes(8)
            # The kept file goes once the kernel forgets the inode.
            deadline = trio.current_time() + 10
            while len(mount._ops.inodes) > 1 and trio.current_time() < deadline:  # type: ignore[union-attr]
                await trio.to_thread.run_sync(
                    lambda: Path("/proc/sys/vm/drop_caches").write_text("2\n")
                )
                await trio.sleep(0.05)
            assert len(mount._ops.inodes) == 1  # type: ignore[union-attr]

    trio.run(main)


def test_a_host_file_unlinked_while_open_stays_readable(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "f.txt").write_text("from the host\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def unlink_while_open() -> tuple[bytes, int]:
        fd = os.open(mnt / "f.txt", os.O_RDONLY)
        try:
            os.unlink(mnt / "f.txt")
            return os.pread(fd, 100, 0), os.fstat(fd).st_nlink
        finally:
            os.close(fd)

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, MountOptions()) as mount:
            assert mount._ops.files_by_inode  # type: ignore[union-attr]
            assert await trio.to_thread.run_sync(unlink_while_open) == (b"from the host\n", 0)
            assert not (host / "f.txt").exists()

    trio.run(main)


class _Recording(ForwardingTree):
    """A tree that notes each verb called on it, and its first argument."""

    __slots__ = ("calls",)

    def __init__(self, inner: vfs.PosixFileSystem) -> None:
        self.calls: list[tuple[str, object]] = []
        self._forward_to(inner)

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        self.calls.append((verb.name, args[0] if args else None))
        return await verb.call(self._inner, args)


def test_the_default_tree_keeps_what_it_unlinks_in_one_call(tmp_path: Path) -> None:
    """The tree ``mountd mount`` serves (a turn root over an audited cow of a host directory
    with a directory upper): a file written through the mount stays writable after its unlink
    through a held descriptor, a host file stays readable, the host is never written, and the
    audit log says ``unlink``; the keepers come from one tree call each."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "lower.txt").write_text("from the host\n")
    upper = tmp_path / "upper"
    upper.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = vfs.AuditLog(keep=100)
    cow = _Recording(vfs.cow_fs(vfs.dir_fs(str(host)), vfs.dir_fs(str(upper))))
    tree = turn_root(vfs.audited_fs(cow, log))

    def use() -> tuple[bytes, bytes]:
        (mnt / "made.txt").write_bytes(b"made here")
        made = os.open(mnt / "made.txt", os.O_RDWR)
        lower = os.open(mnt / "lower.txt", os.O_RDONLY)
        try:
            os.unlink(mnt / "made.txt")
            os.unlink(mnt / "lower.txt")
            assert os.listdir(mnt) == ["tmp"]
            os.pwrite(made, b" and after", 9)
            return os.pread(made, 100, 0), os.pread(lower, 100, 0)
        finally:
            os.close(made)
            os.close(lower)

    async def main() -> None:
        async with mounted(tree, mnt, MountOptions()) as mount:
            assert mount._ops.files_by_inode  # type: ignore[union-attr]
            assert await trio.to_thread.run_sync(use) == (
                b"made here and after",
                b"from the host\n",
            )
        removals = [call for call in cow.calls if call[0] in ("unlink", "unlink_keeping")]
        assert removals == [("unlink_keeping", "/made.txt"), ("unlink_keeping", "/lower.txt")]
        assert (host / "lower.txt").read_text() == "from the host\n"
        assert [(e.op, e.path) for e in log.entries() if e.op == "unlink"] == [
            ("unlink", "/made.txt"),
            ("unlink", "/lower.txt"),
        ]

    trio.run(main)


def test_writes_after_a_create_reach_the_created_file_when_the_host_replaces_its_name(
    tmp_path: Path,
) -> None:
    """The created file stays open for the writes that follow (no reopen by name per WRITE), as
    the creator's descriptor would: a host program's atomic replace of the name meanwhile keeps
    its own bytes, as on a local file system."""
    host = tmp_path / "host"
    host.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def create_write_replace_write() -> None:
        fd = os.open(mnt / "f.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"first ")
            (host / "new.tmp").write_bytes(b"the host's own\n")
            os.rename(host / "new.tmp", host / "f.txt")
            assert os.write(fd, b"second\n") == 7
        finally:
            os.close(fd)

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, MountOptions()) as mount:
            assert mount._ops.files_by_inode  # type: ignore[union-attr]
            await trio.to_thread.run_sync(create_write_replace_write)
            assert (host / "f.txt").read_bytes() == b"the host's own\n"
            # Any other change closes it (here an unlink of the name through the mount).
            await trio.to_thread.run_sync(os.unlink, mnt / "f.txt")
            assert mount._ops.created.held is None  # type: ignore[union-attr]

    trio.run(main)


def test_the_created_file_stays_open_when_its_times_are_set_and_is_learned_when_let_go(
    tmp_path: Path,
) -> None:
    """tar writes a file, then sets its times: the SETATTR of the created file itself keeps it
    open, and when the next create lets go of it, the mount learns the file from its descriptor
    (vouched for: the next listing answers it unexamined, with the host's own times)."""
    host = tmp_path / "host"
    host.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def write_then_set_times() -> None:
        (mnt / "first.txt").write_bytes(b"")  # the mount's first close: its one FLUSH
        (mnt / "a.txt").write_bytes(b"tar's bytes")
        os.utime(mnt / "a.txt", ns=(1_000_000_000, 2_000_000_000))

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, MountOptions()) as mount:
            ops: Any = mount._ops
            await trio.to_thread.run_sync(write_then_set_times)
            kept = ops.created.held
            assert kept is not None and kept.node.name == "a.txt"  # still open
            await trio.to_thread.run_sync((mnt / "b.txt").write_bytes, b"next")
            node = kept.node
            assert ops.created.held.node is not node
            assert ops.vouched.vouches_for(node)
            assert node.info.mtime_ns == os.lstat(host / "a.txt").st_mtime_ns == 2_000_000_000
            shown = await trio.to_thread.run_sync(os.lstat, mnt / "a.txt")
            assert shown.st_mtime_ns == 2_000_000_000

    trio.run(main)


def test_writes_after_a_create_follow_the_name_once_the_api_changed_the_tree(
    tmp_path: Path,
) -> None:
    """A change through the API (not the mount) leaves the created file to be reopened by name,
    as every write was before the file was kept open: the API's bytes and the writer's meet."""
    fs = vfs.temp_fs()

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions()) as mount:
            fd = await trio.to_thread.run_sync(
                lambda: os.open(tmp_path / "f.txt", os.O_WRONLY | os.O_CREAT, 0o644)
            )
            try:
                await trio.to_thread.run_sync(os.write, fd, b"a")
                await fs.write("/g.txt", "elsewhere")  # any change from outside the mount
                assert mount._ops.created.stale  # type: ignore[union-attr]
                await trio.to_thread.run_sync(os.pwrite, fd, b"b", 1)
                assert mount._ops.created.held is None  # type: ignore[union-attr]
            finally:
                await trio.to_thread.run_sync(os.close, fd)
            assert await fs.read("/f.txt") == "ab"

    trio.run(main)


def test_a_file_the_tree_will_not_let_be_written_fails_at_the_first_write(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "f.txt").write_text("kept\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    tree = vfs.union_fs({"/": vfs.temp_fs(), "/ro": vfs.dir_fs(str(host), read_only=True)})

    def write_through(flags: int) -> None:
        fd = os.open(mnt / "ro" / "f.txt", flags)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)

    async def main() -> None:
        async with mounted(tree, mnt, MountOptions()) as mount:
            assert mount._ops.files_by_inode  # type: ignore[union-attr]
            for flags in (
                os.O_WRONLY,
                os.O_RDWR,
                os.O_WRONLY | os.O_APPEND,
                os.O_WRONLY | os.O_TRUNC,
            ):
                with pytest.raises(OSError) as caught:
                    await trio.to_thread.run_sync(write_through, flags)
                assert caught.value.errno == errno.EROFS
            assert (host / "f.txt").read_text() == "kept\n"
            assert await trio.to_thread.run_sync((mnt / "ro" / "f.txt").read_text) == "kept\n"

    trio.run(main)


def test_files_open_for_writing_are_found_without_open_requests(tmp_path: Path) -> None:
    """``mountd apply`` refuses files open for writing; the mount learns them from /proc."""
    fs = vfs.temp_fs({"/w.txt": "w\n", "/r.txt": "r\n"})

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions()) as mount:
            assert mount.open_for_writing() == []
            writer = await trio.to_thread.run_sync(lambda: os.open(tmp_path / "w.txt", os.O_WRONLY))
            reader = await trio.to_thread.run_sync(lambda: os.open(tmp_path / "r.txt", os.O_RDONLY))
            try:
                found = await trio.to_thread.run_sync(mount.open_for_writing)
                assert found == ["/w.txt"]
                assert mount.counters["release"] == 0  # the kernel told nothing
            finally:
                await trio.to_thread.run_sync(os.close, writer)
                await trio.to_thread.run_sync(os.close, reader)
            assert await trio.to_thread.run_sync(mount.open_for_writing) == []

    trio.run(main)


def _write_as_tar_does(path: Path, data: bytes, chunk: int) -> None:
    """Write ``data`` in ``chunk``-byte writes (tar's are 10 KiB: most start inside a page), then
    set the file's times, as tar does once a file is complete."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for start in range(0, len(data), chunk):
            os.write(fd, data[start : start + chunk])
    finally:
        os.close(fd)
    os.utime(path, (1_000_000_000, 1_000_000_000))


@pytest.mark.parametrize(
    ("size", "chunk"),
    [(100, 10240), (4096 + 100, 10240), (3 * 10240 + 7, 10240), (5 * 4096, 4096)],
    ids=["last-page-only", "two-pages", "patchwork", "whole-pages"],
)
def test_a_file_written_then_given_its_times_is_read_back_without_a_request(
    tmp_path: Path, size: int, chunk: int
) -> None:
    """Writes leave the last page (or every page a 10 KiB write started inside) invalid in the
    kernel; setting the times hands it the file, so rg after untar sends no READ."""
    data = bytes(i * 7 % 251 for i in range(size))
    path = tmp_path / "f.bin"

    async def main() -> None:
        async with mounted(vfs.temp_fs(), tmp_path, MountOptions()) as mount:
            await trio.to_thread.run_sync(_write_as_tar_does, path, data, chunk)
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(path.read_bytes) == data
            assert mount.counters["read"] == before
            stat = await trio.to_thread.run_sync(os.stat, path)  # never from the loop's thread
            assert stat.st_mtime == 1_000_000_000  # not moved by the store either

    trio.run(main)


def test_a_last_page_left_behind_by_a_write_past_a_hole_is_handed_over(tmp_path: Path) -> None:
    """A write ends inside page 0; the next starts on a page boundary further on (a hole in
    between): page 0 is no longer the last page but still incomplete in the kernel."""
    path = tmp_path / "f.bin"

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.pwrite(fd, b"a" * 100, 0)
            os.pwrite(fd, b"b" * 100, 3 * 4096)
        finally:
            os.close(fd)
        os.utime(path, (7, 7))

    def read_page_0() -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, 4096, 0)
        finally:
            os.close(fd)

    async def main() -> None:
        async with mounted(vfs.temp_fs(), tmp_path, MountOptions()) as mount:
            await trio.to_thread.run_sync(write)
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(read_page_0) == b"a" * 100 + bytes(3996)
            assert mount.counters["read"] == before
            whole = await trio.to_thread.run_sync(path.read_bytes)
            assert whole == b"a" * 100 + bytes(3 * 4096 - 100) + b"b" * 100

    trio.run(main)


def test_with_complete_pages_off_setting_the_times_hands_over_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"

    async def main() -> None:
        options = MountOptions(complete_pages=False)
        async with mounted(vfs.temp_fs(), tmp_path, options) as mount:
            await trio.to_thread.run_sync(_write_as_tar_does, path, b"y" * 5000, 10240)
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(path.read_bytes) == b"y" * 5000
            assert mount.counters["read"] == before + 1

    trio.run(main)


def test_a_file_written_without_times_costs_one_read_for_its_last_page(tmp_path: Path) -> None:
    """The other side of the test above: nothing is handed over unless times are set, and what
    a read fetches is right."""
    path = tmp_path / "f.bin"

    async def main() -> None:
        async with mounted(vfs.temp_fs(), tmp_path, MountOptions()) as mount:
            await trio.to_thread.run_sync(path.write_bytes, b"x" * 5000)
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(path.read_bytes) == b"x" * 5000
            assert mount.counters["read"] == before + 1

    trio.run(main)


@pytest.mark.parametrize("api_write", [False, True], ids=["alone", "with-an-api-write"])
def test_a_reader_holding_the_last_page_does_not_block_the_store_for_ever(
    tmp_path: Path, api_write: bool
) -> None:
    """The kernel locks a page while its READ is out; a store of that page waits for the lock.
    The store runs in a thread of its own and the event loop goes back to answering requests
    (the READ among them) after a short wait: both calls finish, with the right bytes. An API
    write of the file meanwhile (its invalidation may land before the store) still wins."""
    fs = vfs.temp_fs()
    path = tmp_path / "f.txt"
    gate = trio.Event()
    read_started = trio.Event()
    original_open = fs.open

    class GatedFile:
        """The first file opened for reading: its read waits at the gate."""

        def __init__(self, file: vfs.OpenFile) -> None:
            self._file = file

        def __getattr__(self, name: str) -> object:
            return getattr(self._file, name)

        async def read(self, offset: int, size: int) -> bytes:
            read_started.set()
            await gate.wait()
            return await self._file.read(offset, size)

    async def gated_open(path: str, **kwargs: bool) -> object:
        file = await original_open(path, **kwargs)
        if read_started.is_set() or kwargs.get("write"):
            return file
        return GatedFile(file)

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions()) as mount:
            await trio.to_thread.run_sync(path.write_bytes, b"first page only")
            fs.open = gated_open  # type: ignore[method-assign,assignment]
            async with trio.open_nursery() as nursery:
                results: dict[str, object] = {}

                async def read() -> None:
                    results["read"] = await trio.to_thread.run_sync(path.read_bytes)

                async def touch() -> None:
                    await trio.to_thread.run_sync(os.utime, path, (5, 5))
                    results["touched"] = trio.current_time()

                nursery.start_soon(read)
                with trio.fail_after(10):
                    await read_started.wait()  # the kernel now holds the page locked
                nursery.start_soon(touch)
                await trio.sleep(0.2)  # the store is waiting for the page by now
                assert "touched" not in results
                if api_write:
                    nursery.start_soon(fs.write, "/f.txt", "changed by the API")
                    await trio.sleep(0.1)
                gate.set()
            if api_write:
                # Concurrent with the API write: the old bytes, or the new ones (cut to the
                # size the reader's kernel knew when it asked).
                new = b"changed by the API"
                assert results["read"] in (b"first page only", new[:15], new)
                assert await trio.to_thread.run_sync(path.read_bytes) == new
                return
            assert results["read"] == b"first page only"
            assert (await trio.to_thread.run_sync(os.stat, path)).st_mtime == 5
            assert mount.counters["read"] == 1
            assert await trio.to_thread.run_sync(path.read_bytes) == b"first page only"

    trio.run(main)


def test_a_file_scattered_over_many_pages_reads_back_right_after_its_times_are_set(
    tmp_path: Path,
) -> None:
    """More runs of incomplete pages than one store takes (``STORE_RUNS``): the pages are
    dropped instead, and come back by READ."""
    path = tmp_path / "f.bin"
    pieces = STORE_RUNS + 10

    def write_and_read() -> bytes:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for i in range(pieces):
                os.pwrite(fd, b"%d" % i, 2 * 4096 * i + 1)
        finally:
            os.close(fd)
        os.utime(path, (9, 9))
        return path.read_bytes()

    fs = vfs.temp_fs()

    async def main() -> None:
        async with mounted(fs, tmp_path, MountOptions()):
            data = await trio.to_thread.run_sync(write_and_read)
            assert data == await (await fs.open("/f.bin")).read(0, len(data) + 1)
            assert data[2 * 4096 * (pieces - 1) + 1 :] == b"%d" % (pieces - 1)

    trio.run(main)


def test_setting_the_times_succeeds_when_the_file_will_not_read(tmp_path: Path) -> None:
    """A write-only host file, for a daemon that is not root: the pages are not handed over,
    and the setattr still answers what it did."""
    fs = vfs.temp_fs()
    path = tmp_path / "f.bin"
    original_open = fs.open
    refuse_reads = False

    async def open_refusing_reads(path: str, **kwargs: bool) -> object:
        if refuse_reads and not kwargs.get("write"):
            raise PermissionError(errno.EACCES, "write-only", path)
        return await original_open(path, **kwargs)

    async def main() -> None:
        nonlocal refuse_reads
        async with mounted(fs, tmp_path, MountOptions()) as mount:
            fs.open = open_refusing_reads  # type: ignore[method-assign,assignment]
            await trio.to_thread.run_sync(path.write_bytes, b"z" * 5000)
            refuse_reads = True
            await trio.to_thread.run_sync(os.utime, path, (3, 3))
            assert (await fs.lstat("/f.bin")).mtime_ns == 3_000_000_000
            refuse_reads = False
            before = mount.counters["read"]
            assert await trio.to_thread.run_sync(path.read_bytes) == b"z" * 5000
            assert mount.counters["read"] > before

    trio.run(main)


def test_a_turn_root_is_served_by_inode_and_its_old_scratch_is_stale(tmp_path: Path) -> None:
    """The default mount is a turn root: its /tmp slot buffers nothing, so the mount serves
    files by inode (no OPEN, FLUSH or RELEASE per open). A descriptor held across the end of a
    turn names a file of a scratch that is gone: what needs the daemon answers ESTALE, as for
    any file replaced through the API, rather than writing into the discarded scratch."""
    root = turn_root(vfs.temp_fs())
    scratch_file = tmp_path / "tmp" / "x"

    def write_and_hold() -> int:
        scratch_file.write_text("turn one\n")
        return os.open(scratch_file, os.O_RDWR)

    def use(fd: int) -> list[object]:
        outcomes: list[object] = []
        for call in (
            lambda: os.pread(fd, 100, 0),
            lambda: os.pwrite(fd, b"later", 0),
            lambda: os.fstat(fd).st_size,
        ):
            try:
                outcomes.append(call())
            except OSError as error:
                outcomes.append(errno.errorcode[error.errno])
        os.close(fd)
        return outcomes

    async def main() -> None:
        async with mounted(root, tmp_path, MountOptions()) as mount:
            assert mount._ops.files_by_inode  # type: ignore[union-attr]
            await root.begin_turn()
            fd = await trio.to_thread.run_sync(write_and_hold)
            assert await trio.to_thread.run_sync(use, os.dup(fd)) == [b"turn one\n", 5, 9]
            before = (mount.counters["open"], mount.counters["flush"], mount.counters["release"])
            assert await trio.to_thread.run_sync(scratch_file.read_text) == "laterone\n"
            after = (mount.counters["open"], mount.counters["flush"], mount.counters["release"])
            assert after == before  # an open and close the daemon never hears of
            await root.end_turn()
            await root.begin_turn()
            read, write, size = await trio.to_thread.run_sync(use, fd)
            # What the kernel still caches of it reads as it was (as an unlinked file would);
            # anything that needs the daemon answers ESTALE.
            assert read in (b"laterone\n", "ESTALE")
            assert (write, size) == ("ESTALE", 9)
            assert not await trio.to_thread.run_sync(scratch_file.exists)
            assert not (await root.scratch.stat("/x")).exists
            await root.end_turn()

    trio.run(main)


class _HeldWrites:
    """A temp_fs whose file writes wait for ``release`` (a handler that awaits), and which
    records which files were closed while a write was still inside them."""

    def __init__(self) -> None:
        self.tree = vfs.temp_fs()
        self.release = trio.Event()
        self.writing = trio.Event()
        self.closed_mid_write = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tree, name)

    async def open(self, path: str, **options: Any) -> Any:
        return _HeldFile(self, await self.tree.open(path, **options))


class _HeldFile:
    def __init__(self, owner: _HeldWrites, file: Any) -> None:
        self.owner = owner
        self.file = file
        self.in_write = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)

    async def write(self, offset: int, data: bytes) -> int:
        self.in_write = True
        self.owner.writing.set()
        await self.owner.release.wait()
        self.in_write = False
        return int(await self.file.write(offset, data))

    async def close(self) -> None:
        self.owner.closed_mid_write |= self.in_write
        await self.file.close()


def test_the_created_file_is_closed_by_its_last_write_when_let_go_of_meanwhile() -> None:
    """A changing request that arrives while a WRITE awaits inside the created file lets go of
    it; the WRITE finishes on an open file and closes it after."""
    tree = _HeldWrites()
    terms = Terms(forwards_flush=False, files_by_inode=True)
    ops = Operations(tree, terms=terms, attrs=AttrPolicy(uid=0, gid=0), origin=object())
    ctx: Any = SimpleNamespace(uid=0, gid=0, pid=1, umask=0o022)  # a RequestContext

    async def main() -> None:
        _, attrs = await ops.create(ROOT_INODE, b"f", 0o644, os.O_WRONLY | os.O_CREAT, ctx)
        created = ops.created.held
        assert created is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.write, attrs.st_ino, 0, b"data")
            await tree.writing.wait()
            await ops.mkdir(ROOT_INODE, b"d", 0o755, ctx)  # a changing request meanwhile
            assert ops.created.held is None and created.users == 1  # let go of, still open
            tree.release.set()
        assert not tree.closed_mid_write
        assert created.users == 0 and created.detached
        assert await tree.tree.read("/f") == "data"

    trio.run(main)
