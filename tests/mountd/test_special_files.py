"""FIFOs, sockets and device nodes through the mount, and names that are not UTF-8.

The tree keeps a special file's metadata; the kernel serves what it does (a FIFO's pipe, a
bound socket, a device node behind ``nodev``), so these tests talk through them with real
processes and sockets. Each mount runs in a child process (tests.mountd.mounting).
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from vfs._audit import read_audit_file

from . import compositions
from .mounting import mount_root
from .syscalls import errno_of

pytestmark = pytest.mark.mount


@pytest.fixture(scope="module")
def temp_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with mount_root(compositions.temp, tmp_path_factory.mktemp("mnt-special")) as root:
        yield root


@pytest.fixture
def work(temp_root: Path, request: pytest.FixtureRequest) -> Path:
    path = temp_root / request.node.name.replace("[", "-").replace("]", "")
    path.mkdir()
    return path


def test_a_fifo_carries_bytes_between_two_processes(work: Path) -> None:
    fifo = work / "pipe"
    os.mkfifo(fifo, 0o640)
    info = os.lstat(fifo)
    assert stat.S_ISFIFO(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o640 & ~_umask()
    assert info.st_size == 0
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    with open(fifo, "wb") as writer:
        writer.write(b"through the pipe\n")
    out, _ = reader.communicate(timeout=30)
    assert out == b"through the pipe\n"
    assert os.listdir(work) == ["pipe"]


def test_a_unix_socket_binds_and_connects_through_the_mount(work: Path) -> None:
    path = str(work / "sock")
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        server.bind(path)
        server.listen(1)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        client.connect(path)
        conn, _ = server.accept()
        with conn:
            client.sendall(b"hello")
            assert conn.recv(5) == b"hello"
        # A second bind to the name: the node is there.
        with socket.socket(socket.AF_UNIX) as other:
            assert errno_of(other.bind, path) == errno.EADDRINUSE
    os.unlink(path)
    assert errno_of(os.lstat, path) == errno.ENOENT


@pytest.mark.parametrize("kind", [stat.S_IFCHR, stat.S_IFBLK], ids=["char", "block"])
def test_a_device_node_keeps_its_number_and_nodev_keeps_it_shut(work: Path, kind: int) -> None:
    node = work / "dev"
    os.mknod(node, kind | 0o666, os.makedev(1, 3))  # /dev/null's number
    info = os.lstat(node)
    assert stat.S_IFMT(info.st_mode) == kind
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (1, 3)
    assert errno_of(os.open, node, os.O_RDONLY) == errno.EACCES  # the mount is nodev


def test_special_files_take_owner_mode_times_renames_and_unlinks(work: Path) -> None:
    fifo = work / "p"
    os.mkfifo(fifo, 0o600)
    os.chmod(fifo, 0o604)
    os.chown(fifo, 1234, 5678)
    os.utime(fifo, ns=(1_000_000_000, 2_000_000_000), follow_symlinks=False)
    os.rename(fifo, work / "q")
    info = os.lstat(work / "q")
    assert stat.S_ISFIFO(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o604
    assert (info.st_uid, info.st_gid) == (1234, 5678)
    assert (info.st_atime_ns, info.st_mtime_ns) == (1_000_000_000, 2_000_000_000)
    assert errno_of(os.mkfifo, work / "q") == errno.EEXIST
    assert errno_of(os.mkdir, work / "q") == errno.EEXIST
    assert errno_of(os.truncate, work / "q", 0) == errno.EINVAL
    os.unlink(work / "q")
    assert os.listdir(work) == []


def test_a_host_directory_holds_fifos_and_sockets_and_devices_only_emulated(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (tmp_path / "mnt").mkdir()
    with mount_root(functools.partial(compositions.dir_rw, host), tmp_path / "mnt") as root:
        os.mkfifo(root / "pipe", 0o600)
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(root / "sock"))
        assert stat.S_ISFIFO(os.lstat(host / "pipe").st_mode)  # real nodes on the host
        assert stat.S_ISSOCK(os.lstat(host / "sock").st_mode)
        assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)
        # A real device node there would open the device for anyone on the host: the host
        # gets an empty file, the mount shows the node.
        os.mknod(root / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        assert os.lstat(root / "dev").st_rdev == os.makedev(1, 3)
        assert stat.S_ISCHR(os.lstat(root / "dev").st_mode)
        assert stat.S_ISREG(os.lstat(host / "dev").st_mode) and os.lstat(host / "dev").st_size == 0
        os.unlink(root / "dev")
        reader = subprocess.Popen(["cat", str(root / "pipe")], stdout=subprocess.PIPE)
        with open(root / "pipe", "wb") as writer:  # both ends through the mount
            writer.write(b"x")
        assert reader.communicate(timeout=30)[0] == b"x"
        os.unlink(root / "pipe")
        os.unlink(root / "sock")
        assert os.listdir(host) == []


def test_a_read_only_tree_refuses_special_files(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (tmp_path / "mnt").mkdir()
    with mount_root(functools.partial(compositions.dir_ro, host), tmp_path / "mnt") as root:
        assert errno_of(os.mkfifo, root / "pipe") == errno.EROFS


def test_names_that_are_not_utf8_work_under_an_audit_log(tmp_path: Path) -> None:
    """Every change under an audited mount (as ``mountd mount`` serves a spec) used to fail
    with EIO for such a name, after the change was made: recording it raised."""
    log = tmp_path / "audit.jsonl"
    (tmp_path / "mnt").mkdir()
    with mount_root(functools.partial(compositions.audited_temp, log), tmp_path / "mnt") as root:
        base = os.fsencode(root)
        name = base + b"/bad\xff"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        assert os.write(fd, b"bytes") == 5
        os.close(fd)
        os.chmod(name, 0o600)
        os.rename(name, base + b"/also\xfe")
        os.mkdir(base + b"/dir\x80")
        assert sorted(os.listdir(base)) == [b"also\xfe", b"dir\x80"]
        with open(base + b"/also\xfe", "rb") as f:
            assert f.read() == b"bytes"
        os.unlink(base + b"/also\xfe")
        os.rmdir(base + b"/dir\x80")
        assert errno_of(os.unlink, base + b"/gone\xff") == errno.ENOENT
    entries = read_audit_file(log)
    assert ("rename", "/bad\udcff", "/also\udcfe") in [(e.op, e.path, e.dest) for e in entries]
    assert "/dir\udc80" in [e.path for e in entries if e.op == "rmdir"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
