"""The mount registry without a mount: finding our mounts, state files, process identity
(mountinfo parsing itself is ``vfs._mounts``, tested in ``tests/vfs/test_mounts.py``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mountd import _registry as registry


def test_our_mounts_reads_this_process_mountinfo() -> None:
    # Whatever is mounted here, only fuse.mountd entries come back.
    assert all(entry.fstype == "fuse.mountd" for entry in registry.our_mounts())
    assert registry.mount_at("/") is None  # the root is not ours


def test_canonical_resolves_symlinks_as_realpath_does(tmp_path: Path) -> None:
    real = tmp_path / "real dir"
    (real / "mnt").mkdir(parents=True)
    (tmp_path / "parent-link").symlink_to(real)
    (tmp_path / "final-link").symlink_to(real / "mnt")
    (tmp_path / "relative-link").symlink_to("parent-link/mnt")
    (tmp_path / "loop").symlink_to("loop")
    for spelled in ("parent-link/mnt", "final-link", "relative-link", "real dir/./mnt"):
        assert registry.canonical(tmp_path / spelled) == str(real / "mnt"), spelled
    assert registry.canonical(tmp_path / "parent-link" / "missing") == str(real / "missing")
    assert registry.canonical(tmp_path / "loop") == os.path.realpath(tmp_path / "loop")
    assert registry.canonical("/") == "/"
    assert registry.canonical("/proc") == "/proc"  # listed in mountinfo: taken as it is


def test_probe_a_plain_directory_is_live(tmp_path: Path) -> None:
    assert registry.probe(str(tmp_path)) == "live"
    assert registry.probe(str(tmp_path / "missing")) == "unreachable"


def test_state_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    state = registry.MountState(
        mountpoint="/mnt/x y",
        spec="/s/spec.toml",
        description="temp",
        pid=os.getpid(),
        pid_start=registry.process_start(os.getpid()),
        started=1.5,
        counters={"read": 3, "getattr": 7},
    )
    assert registry.read_state(state.mountpoint) is None
    registry.write_state(state)
    directory = tmp_path / "agentroot-mountd"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert registry.read_state(state.mountpoint) == state
    assert list(registry.all_states()) == [state]
    assert registry.state_path(state.mountpoint).parent == directory
    registry.remove_state(state.mountpoint, pid=state.pid + 1)  # someone else's: kept
    assert registry.read_state(state.mountpoint) == state
    registry.remove_state(state.mountpoint, pid=state.pid)
    assert registry.read_state(state.mountpoint) is None
    assert [p.name for p in directory.iterdir()] == []  # no temp files left behind


def test_torn_state_file_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    registry.state_dir(create=True)
    registry.state_path("/m").write_text('{"mountpoint": "/m", "sp')
    assert registry.read_state("/m") is None
    assert list(registry.all_states()) == []


def test_state_dir_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert registry.state_dir() == tmp_path / "agentroot-mountd"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert registry.state_dir() == Path("/run/agentroot-mountd")
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    assert registry.state_dir() == tmp_path / "agentroot-mountd-1234"


def test_state_dir_owned_by_someone_else_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "agentroot-mountd").mkdir(mode=0o755)
    os.chown(tmp_path / "agentroot-mountd", 4321, 4321)
    with pytest.raises(PermissionError, match="not a directory owned by uid"):
        registry.state_dir(create=True)


def test_process_identity() -> None:
    me = os.getpid()
    assert registry.process_alive(me, registry.process_start(me))
    assert not registry.process_alive(me, (registry.process_start(me) or 0) + 1)  # a reused pid
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not registry.process_alive(child.pid, None)
    assert registry.process_start(child.pid) is None


def test_state_key_is_stable_and_distinct() -> None:
    assert registry.state_key("/a") == registry.state_key("/a")
    assert registry.state_key("/a") != registry.state_key("/a ")
