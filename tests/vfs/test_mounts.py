"""``vfs._mounts``: mountinfo parsing, and the mount table snapshot kept fresh by polling.

The snapshot tests mount real tmpfs instances (root only, hence the ``mount`` marker).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vfs._mounts import FRESH_FOR, MountEntry, mountpoints, parse_mountinfo, unescape

MOUNTINFO = (
    b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    b"97 22 0:52 / /tmp/a\\040b\\011c\\134d rw,nosuid,nodev,relatime shared:50 - fuse.mountd agentroot"
    b" rw,user_id=0,group_id=0,default_permissions\n"
    b"98 22 0:53 / /tmp/plain rw,nosuid,nodev - fuse.other thing rw\n"
    b"99 22 0:54 / /tmp/caf\xc3\xa9 rw - fuse.mountd agentroot rw\n"
    b"garbage line without separator\n"
)


def test_parse_mountinfo_unescapes_and_keeps_order() -> None:
    entries = parse_mountinfo(MOUNTINFO)
    assert [e.mountpoint for e in entries] == ["/", "/tmp/a b\tc\\d", "/tmp/plain", "/tmp/café"]
    ours = entries[1]
    assert ours == MountEntry(
        mount_id=97,
        device="0:52",
        mountpoint="/tmp/a b\tc\\d",
        fstype="fuse.mountd",
        source="agentroot",
        options="rw,user_id=0,group_id=0,default_permissions",
    )


def test_unescape_keeps_undecodable_bytes() -> None:
    assert unescape(b"/x\\040y") == "/x y"
    assert os.fsencode(unescape(b"/bad\\377")) == b"/bad\xff"


@contextlib.contextmanager
def tmpfs_at(path: Path) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def settled() -> tuple[str, ...]:
    """The snapshot once it may have noticed the latest change."""
    time.sleep(2 * FRESH_FOR)
    return mountpoints()


def test_the_snapshot_is_the_same_object_while_nothing_changes() -> None:
    first = settled()
    assert "/" in first
    assert list(first) == sorted(set(first))
    # Other processes may mount meanwhile (one namespace): the same contents, the same object.
    for _ in range(50):
        second = settled()
        if second == first:
            assert second is first
            return
        first = second
    pytest.fail("the mount table never held still")


@pytest.mark.mount
def test_a_mount_made_or_removed_is_noticed(tmp_path: Path) -> None:
    where = tmp_path / "a mount"  # mountinfo escapes the space
    before = settled()
    assert str(where) not in before
    with tmpfs_at(where):
        assert str(where) in settled()
    assert str(where) not in settled()  # (other mounts may come and go meanwhile)


@pytest.mark.mount
def test_a_forked_child_does_not_take_the_parents_change_notice(tmp_path: Path) -> None:
    """Parent and child would share the polled descriptor: the child's poll would swallow the
    change the parent then never hears of."""
    settled()  # the parent's descriptor is open and up to date
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait for the change, look at it, say what it saw
        code = 1
        try:
            os.close(go_write)
            os.read(go_read, 1)
            code = 0 if str(tmp_path / "m") in settled() else 3
            os.write(done_write, b"x")
        finally:
            os._exit(code)
    os.close(go_read)
    os.close(done_write)
    with tmpfs_at(tmp_path / "m"):
        os.write(go_write, b"x")
        assert os.read(done_read, 1) == b"x"
        assert os.waitpid(pid, 0)[1] == 0
        assert str(tmp_path / "m") in settled()
    for fd in (go_write, done_read):
        os.close(fd)


def test_no_thread_ever_and_no_descriptor_before_the_first_operation(tmp_path: Path) -> None:
    """``mountd run`` unshares its mount namespace after building its tree, which a process
    with a second thread must not do; so neither a tree nor its operations start one."""
    script = f"""
import os, trio, vfs
def mountinfo_fds():
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{{fd}}").endswith("/mountinfo"):
                found.append(fd)
        except OSError:
            pass  # the listing's own descriptor
    return found
before = mountinfo_fds()
fs = vfs.dir_fs({str(tmp_path)!r})
assert mountinfo_fds() == before, "a descriptor at tree creation"
async def work():
    await fs.stat("/")
    await fs.list_info("/")
trio.run(work)
assert mountinfo_fds(), "the table is asked at the first operation"
assert len(os.listdir("/proc/self/task")) == 1, "a thread"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
