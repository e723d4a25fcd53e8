"""temp_fs against the kernel's tmpfs: the same POSIX operations give the same errno and tree.

Random sequences of mkdir/rmdir/unlink/rename(flags)/symlink/open/write/truncate/stat run on a
fresh temp_fs and, through the real syscalls, on a fresh directory of a real tmpfs
(``/dev/shm``). Every outcome (success or errno) must agree, and so must the final trees (kind,
size, nlink, contents, link targets). The kernel side resolves every path with
``openat2(RESOLVE_IN_ROOT)``, so ``..`` and absolute symlink targets stay inside the directory,
exactly as they stay inside temp_fs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import stat as st_mode
import tempfile
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vfs
from vfs._temp import TempFileSystem, temp_fs

from .test_temp import assert_fresh_infos

SHM = "/dev/shm"
RESOLVE_IN_ROOT = 0x10
SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def _is_tmpfs(path: str) -> bool:
    try:
        with open("/proc/mounts") as mounts:
            return any(line.split()[1:3] == [path, "tmpfs"] for line in mounts)
    except OSError:
        return False


def _openat2(root: int, path: str, flags: int, mode: int = 0) -> int:
    # openat2 refuses a mode without O_CREAT.
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_IN_ROOT)
    fd = _libc.syscall(SYS_OPENAT2, root, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def _have_openat2() -> bool:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return False
    try:
        os.close(_openat2(os.open("/", os.O_PATH), ".", os.O_PATH))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not (_is_tmpfs(SHM) and _have_openat2()), reason="needs a tmpfs at /dev/shm and openat2"
)


class Kernel:
    """The same operations through real syscalls, rooted at a directory fd."""

    def __init__(self, base: str) -> None:
        self.root = os.open(base, os.O_PATH | os.O_DIRECTORY)

    def close(self) -> None:
        os.close(self.root)

    def parent(self, path: str) -> tuple[int, str]:
        head, name = path.rsplit("/", 1)
        return _openat2(self.root, head or "/", os.O_PATH | os.O_DIRECTORY), name

    def at_parent(self, path: str, action: Any) -> None:
        fd, name = self.parent(path)
        try:
            action(fd, name)
        finally:
            os.close(fd)

    def mkdir(self, path: str) -> None:
        self.at_parent(path, lambda fd, name: os.mkdir(name, 0o755, dir_fd=fd))

    def rmdir(self, path: str) -> None:
        self.at_parent(path, lambda fd, name: os.rmdir(name, dir_fd=fd))

    def unlink(self, path: str) -> None:
        self.at_parent(path, lambda fd, name: os.unlink(name, dir_fd=fd))

    def symlink(self, path: str, target: str) -> None:
        self.at_parent(path, lambda fd, name: os.symlink(target, name, dir_fd=fd))

    def link(self, src: str, dst: str) -> None:
        src_fd, src_name = self.parent(src)
        try:
            dst_fd, dst_name = self.parent(dst)
            try:
                os.link(
                    src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False
                )
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)

    def rename(self, src: str, dst: str, flags: int) -> None:
        src_fd, src_name = self.parent(src)
        try:
            dst_fd, dst_name = self.parent(dst)
            try:
                result = _libc.renameat2(
                    src_fd, os.fsencode(src_name), dst_fd, os.fsencode(dst_name), flags
                )
                if result != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)

    def open(self, path: str, flags: int) -> int:
        return _openat2(self.root, path, os.O_RDWR | flags, 0o644)

    def stat(self, path: str) -> tuple[str, int] | None:
        try:
            fd = _openat2(self.root, path, os.O_PATH)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        return ("directory" if st_mode.S_ISDIR(info.st_mode) else "file", info.st_size)

    def snapshot(self) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        root_info = os.fstat(self.root)
        rows.append(("/", "directory", root_info.st_size, root_info.st_nlink, None))
        base = f"/proc/self/fd/{self.root}"

        def walk(directory: str, prefix: str) -> None:
            for name in sorted(os.listdir(directory)):
                real = os.path.join(directory, name)
                path = prefix + name
                info = os.lstat(real)
                if st_mode.S_ISDIR(info.st_mode):
                    rows.append((path, "directory", info.st_size, info.st_nlink, None))
                    walk(real, path + "/")
                elif st_mode.S_ISLNK(info.st_mode):
                    rows.append((path, "symlink", info.st_size, info.st_nlink, os.readlink(real)))
                else:
                    with open(real, "rb") as handle:
                        data = handle.read()
                    rows.append((path, "file", info.st_size, info.st_nlink, data))

        walk(base, "/")
        return sorted(rows)  # path order, as glob yields


async def _snapshot(fs: TempFileSystem) -> list[tuple[Any, ...]]:
    root = await fs.lstat("/")
    rows: list[tuple[Any, ...]] = [("/", "directory", root.size, root.nlink, None)]
    async for entry in fs.glob("**"):
        info = await fs.lstat(entry.path)
        extra: Any = None
        if info.kind == "symlink":
            extra = await fs.readlink(entry.path)
        elif info.kind == "file":
            handle = await fs.open(entry.path)
            extra = await handle.read(0, info.size)
        rows.append((entry.path, info.kind, info.size, info.nlink, extra))
    return rows


names = st.sampled_from(["a", "b", "a-x"])
paths = st.lists(names, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
targets = st.sampled_from(["a", "b", "a/b", "b/a", "../a", "..", ".", "../..", "/a", "/b/a", "c"])
data = st.binary(max_size=6)
ops = st.one_of(
    st.tuples(st.just("mkdir"), paths),
    st.tuples(st.just("rmdir"), paths),
    st.tuples(st.just("unlink"), paths),
    st.tuples(st.just("symlink"), paths, targets),
    st.tuples(
        st.just("rename"), paths, paths, st.sampled_from([0, RENAME_NOREPLACE, RENAME_EXCHANGE])
    ),
    st.tuples(st.just("link"), paths, paths),
    st.tuples(st.just("create"), paths, data, st.booleans()),
    st.tuples(st.just("write"), paths, st.integers(0, 8), data),
    st.tuples(st.just("truncate"), paths, st.integers(0, 8)),
    st.tuples(st.just("stat"), paths),
)


async def _ours(fs: TempFileSystem, op: tuple[Any, ...]) -> object:
    """Run ``op`` on temp_fs: ``("ok", result)`` or ``("errno", code)``."""
    name, path, *args = op
    try:
        if name == "mkdir":
            await fs.mkdir(path)
        elif name == "rmdir":
            await fs.rmdir(path)
        elif name == "unlink":
            await fs.unlink(path)
        elif name == "symlink":
            await fs.symlink(path, args[0])
        elif name == "rename":
            dst, flags = args
            await fs.rename(
                path,
                dst,
                noreplace=bool(flags & RENAME_NOREPLACE),
                exchange=bool(flags & RENAME_EXCHANGE),
            )
        elif name == "link":
            await fs.link(path, args[0])
        elif name == "create":
            contents, exclusive = args
            handle = await fs.open(path, create=True, exclusive=exclusive, truncate=True)
            await handle.write(0, contents)
        elif name == "write":
            offset, contents = args
            handle = await fs.open(path)
            await handle.write(offset, contents)
        elif name == "truncate":
            handle = await fs.open(path)
            await handle.truncate(args[0])
        else:
            info = await fs.stat(path)
            return ("ok", None if info.kind == "missing" else (info.kind, info.size))
    except vfs.PathError as error:
        return ("errno", error.errno)
    return ("ok", None)


def _kernels(kernel: Kernel, op: tuple[Any, ...]) -> object:
    name, path, *args = op
    try:
        if name == "mkdir":
            kernel.mkdir(path)
        elif name == "rmdir":
            kernel.rmdir(path)
        elif name == "unlink":
            kernel.unlink(path)
        elif name == "symlink":
            kernel.symlink(path, args[0])
        elif name == "rename":
            kernel.rename(path, args[0], args[1])
        elif name == "link":
            kernel.link(path, args[0])
        elif name == "create":
            contents, exclusive = args
            flags = os.O_CREAT | os.O_TRUNC | (os.O_EXCL if exclusive else 0)
            fd = kernel.open(path, flags)
            try:
                os.pwrite(fd, contents, 0)
            finally:
                os.close(fd)
        elif name == "write":
            offset, contents = args
            fd = kernel.open(path, 0)
            try:
                os.pwrite(fd, contents, offset)
            finally:
                os.close(fd)
        elif name == "truncate":
            fd = kernel.open(path, 0)
            try:
                os.ftruncate(fd, args[0])
            finally:
                os.close(fd)
        else:
            return ("ok", kernel.stat(path))
    except OSError as error:
        return ("errno", error.errno)
    return ("ok", None)


@pytest.fixture
def scratch() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="temp-fs-diff-", dir=SHM)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(sequence=st.lists(ops, max_size=25))
def test_same_outcomes_as_the_kernel(scratch: str, sequence: list[tuple[Any, ...]]) -> None:
    for entry in os.listdir(scratch):  # the fixture is shared by every example
        real = os.path.join(scratch, entry)
        if os.path.isdir(real) and not os.path.islink(real):
            shutil.rmtree(real)
        else:
            os.unlink(real)
    kernel = Kernel(scratch)

    async def body() -> None:
        fs = temp_fs()
        for step, op in enumerate(sequence):
            ours = await _ours(fs, op)
            theirs = _kernels(kernel, op)
            assert ours == theirs, (step, op)
            assert_fresh_infos(fs)
        assert await _snapshot(fs) == kernel.snapshot()

    try:
        anyio.run(body, backend="trio")
    finally:
        kernel.close()
