"""Two mounts that see each other, and a mount whose daemon hangs: nothing waits for ever.

A FUSE daemon serves its mount from one event loop. If the tree it serves reaches into another
FUSE mount whose tree reaches back, each daemon's loop waits in a syscall that only the other can
answer, and every process looking there with them (D state, for good). The first tests build that
cycle for real with ``mountd mount --daemon`` and run the lookups that used to hang: a ``dir``
tree leaves out the mounts below its directory, so they finish, with ENOENT for a path through
the other mount. The last one stops a daemon (SIGSTOP), waits past the kernel's attribute cache
(after which any ``stat`` of the mountpoint blocks), and shows that ``mountd status`` and
``mountd unmount`` still answer and that unmount detaches the mount.

Every look into the mounts runs in a child process under a timeout, never in this process. If a
look hangs, the test kills the daemons it started (SIGKILL aborts their FUSE connections, which
frees every process waiting on them) and fails; teardown detaches whatever is left mounted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd import _registry as registry

from ..mountd.mounting import cleared_afterwards
from ..mountd.test_cli import mountd, private_state

__all__ = ["private_state"]  # the autouse fixture: every test gets its own state directory

LOOK_TIMEOUT = 30.0
DIR_SPEC = '[root]\ntype = "dir"\npath = "."\n'

# What a child reports for each path: its listing, or the errno's name.
LOOKER = textwrap.dedent(
    """
    import errno, json, os, sys
    seen = {}
    for path in sys.argv[1:]:
        try:
            seen[path] = sorted(os.listdir(path))
        except OSError as error:
            seen[path] = errno.errorcode[error.errno]
    print(json.dumps(seen))
    """
)


@pytest.fixture
def mountpoints() -> Iterator[list[Path]]:
    """Mountpoints a test mounts on; afterwards their daemons are killed and mounts detached."""
    paths: list[Path] = []
    yield paths
    with contextlib.ExitStack() as stack:
        for path in paths:
            stack.enter_context(cleared_afterwards(path))


def mount_dir(spec_dir: Path, mountpoint: Path, *extra: str) -> int:
    """Serve the host directory ``spec_dir`` at ``mountpoint`` in the background; its pid."""
    (spec_dir / "spec.toml").write_text(DIR_SPEC)
    started = mountd("mount", "--daemon", *extra, str(spec_dir / "spec.toml"), str(mountpoint))
    assert started.returncode == 0, started.stdout + started.stderr
    state = registry.read_state(registry.canonical(mountpoint))
    assert state is not None
    return state.pid


def kill_daemons(mounted: list[Path]) -> None:
    for path in mounted:
        state = registry.read_state(registry.canonical(path))
        if state is not None and registry.process_alive(state.pid, state.pid_start):
            os.kill(state.pid, signal.SIGKILL)


def run_looking(
    command: list[str], cwd: Path, mounted: list[Path]
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd``; if it does not finish, kill the daemons and fail."""
    child = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = child.communicate(timeout=LOOK_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_daemons(mounted)  # frees the child: its requests fail once the connections abort
        child.kill()
        child.communicate()
        pytest.fail(f"{' '.join(command)} hung for {LOOK_TIMEOUT:g} s")
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def look(paths: list[str], cwd: Path, mounted: list[Path]) -> dict[str, object]:
    done = run_looking([sys.executable, "-c", LOOKER, *paths], cwd, mounted)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


@pytest.mark.mount
def test_two_mounts_of_one_directory_holding_both_mountpoints(
    tmp_path: Path, mountpoints: list[Path]
) -> None:
    """The reported layout: ``a/mnt`` and ``b/mnt`` both serve the directory holding them."""
    top = tmp_path / "top"
    for name in ("a", "b"):
        (top / name / "mnt").mkdir(parents=True)
    (top / "hello.txt").write_text("hello\n")
    a, b = top / "a" / "mnt", top / "b" / "mnt"
    mountpoints += [a, b]
    pid_a = mount_dir(top, a)
    pid_b = mount_dir(top, b)

    listed = run_looking(["ls", "a/mnt/b/mnt/a/mnt"], top, mountpoints)
    assert (listed.returncode, listed.stdout, listed.stderr) == (
        2,
        "",
        "ls: cannot access 'a/mnt/b/mnt/a/mnt': No such file or directory\n",
    )
    everything = ["a", "b", "hello.txt", "spec.toml"]
    assert look(
        ["a/mnt", "a/mnt/a", "a/mnt/b", "a/mnt/b/mnt", "a/mnt/b/mnt/a/mnt", "b/mnt/a/mnt"],
        top,
        mountpoints,
    ) == {
        "a/mnt": everything,
        "a/mnt/a": [],  # its own mountpoint, left out as before
        "a/mnt/b": [],  # the other mount's mountpoint, left out now
        "a/mnt/b/mnt": "ENOENT",
        "a/mnt/b/mnt/a/mnt": "ENOENT",
        "b/mnt/a/mnt": "ENOENT",
    }
    walked = run_looking(["find", "a/mnt", "b/mnt"], top, mountpoints)
    assert walked.returncode == 0, walked.stderr
    assert sorted(walked.stdout.split()) == sorted(
        [f"{m}{rest}" for m in ("a/mnt", "b/mnt") for rest in ("", "/a", "/b", "/hello.txt")]
        + ["a/mnt/spec.toml", "b/mnt/spec.toml"]
    )
    for mountpoint, pid in ((a, pid_a), (b, pid_b)):
        assert registry.probe(registry.canonical(mountpoint)) == "live"
        stopped = mountd("unmount", str(mountpoint))
        assert (stopped.returncode, stopped.stdout) == (
            0,
            f"mountd: unmounted {mountpoint} (daemon pid {pid} exited)\n",
        )


@pytest.mark.mount
def test_two_mounts_each_serving_the_directory_holding_the_other(
    tmp_path: Path, mountpoints: list[Path]
) -> None:
    """``x`` holds B's mountpoint and is served by A at ``y/a``; ``y`` holds A's and is served by
    B at ``x/b``: each tree holds only the other's mountpoint."""
    x, y = tmp_path / "x", tmp_path / "y"
    (x / "b").mkdir(parents=True)
    (y / "a").mkdir(parents=True)
    (x / "in-x.txt").write_text("x\n")
    (y / "in-y.txt").write_text("y\n")
    mountpoints += [y / "a", x / "b"]
    mount_dir(x, y / "a")
    mount_dir(y, x / "b")
    assert look(["y/a", "y/a/b", "y/a/b/a", "x/b", "x/b/a/b"], tmp_path, mountpoints) == {
        "y/a": ["in-x.txt", "spec.toml"],
        "y/a/b": "ENOENT",
        "y/a/b/a": "ENOENT",
        "x/b": ["in-y.txt", "spec.toml"],
        "x/b/a/b": "ENOENT",
    }


@pytest.mark.mount
def test_unmount_detaches_a_mount_whose_daemon_hangs(
    tmp_path: Path, mountpoints: list[Path]
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "file.txt").write_text("served\n")
    mnt = tmp_path / "mount point"  # mountinfo escapes the space as \040
    mnt.mkdir()
    link = tmp_path / "link"
    link.symlink_to(mnt)
    mountpoints.append(mnt)
    cache = 0.5
    pid = mount_dir(served, mnt, "--cache-timeout", str(cache))
    assert look([str(mnt)], tmp_path, mountpoints) == {str(mnt): ["file.txt", "spec.toml"]}

    os.kill(pid, signal.SIGSTOP)
    time.sleep(cache + 1)  # the kernel's attributes of the mountpoint have expired
    assert registry.probe(str(mnt), timeout=1.0) == "hung"

    status = mountd("status", "--json", timeout=LOOK_TIMEOUT)
    assert status.returncode == 0, status.stderr
    rows = [row for row in json.loads(status.stdout) if row["mountpoint"] == str(mnt)]
    assert [(row["state"], row["pid"]) for row in rows] == [("hung", pid)]
    again = mountd("mount", "--daemon", str(served / "spec.toml"), str(mnt), timeout=LOOK_TIMEOUT)
    assert (again.returncode, again.stderr) == (
        1,
        f"mountd: {mnt} is mounted by a daemon that hangs (pid {pid}); "
        f"run `mountd unmount {mnt}` first\n",
    )

    cleared = mountd("unmount", str(link), timeout=LOOK_TIMEOUT)  # through a symlink, even
    assert (cleared.returncode, cleared.stdout, cleared.stderr) == (
        0,
        f"mountd: cleared the hung mount at {mnt}\n",
        "",
    )
    assert registry.mount_at(str(mnt)) is None
    assert registry.wait_until(lambda: not registry.process_alive(pid, None), 10.0)
    assert registry.read_state(str(mnt)) is None
    assert sorted(p.name for p in mnt.iterdir()) == []  # a plain directory again
