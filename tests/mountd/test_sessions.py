"""The default tree keeps what was written through it on disk: a killed daemon loses nothing.

Real daemons are SIGKILLed with changes made through the mount (closed, fsynced, renamed over,
removed, a directory made), and a later mount of the same directory refuses to guess, continues
(``--resume``) or discards (``--fresh``); ``mountd run`` keeps a killed run's changes the same way
and drops them once a run has reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mountd import _registry as registry
from tests.mountd.mounting import cleared_afterwards
from tests.mountd.test_cli import private_state

COMMAND = [sys.executable, "-m", "mountd"]


__all__ = ["private_state"]  # the autouse fixture: every test gets its own state directory


def mountd(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "README.md").write_text("readme\n")
    return root


def kill_daemon(mnt: Path) -> None:
    state = registry.read_state(registry.canonical(mnt))
    assert state is not None
    os.kill(state.pid, signal.SIGKILL)
    assert registry.wait_until(lambda: not registry.process_alive(state.pid, state.pid_start), 10)


@pytest.mark.mount
def test_a_killed_daemon_loses_nothing_and_a_remount_asks(project: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=project)
        assert started.returncode == 0, started.stderr
        (mnt / "src" / "a.py").write_text("a = 2\n")
        with open(mnt / "new.txt", "wb") as handle:
            handle.write(b"fsynced\n")
            handle.flush()
            os.fsync(handle.fileno())
        (mnt / "docs").mkdir()
        (mnt / "docs" / "tmp").write_text("guide\n")
        os.rename(mnt / "docs" / "tmp", mnt / "docs" / "guide.md")
        os.unlink(mnt / "README.md")
        kill_daemon(mnt)

        refused = mountd("mount", "--daemon", str(mnt), cwd=project)
        assert refused.returncode == 1
        assert "holds the changes of an earlier `mountd mount`" in refused.stderr
        assert "give --resume to continue with them, or --fresh to discard them" in refused.stderr

        resumed = mountd("mount", "--daemon", "--resume", str(mnt), cwd=project)
        assert resumed.returncode == 0, resumed.stderr
        assert (mnt / "src" / "a.py").read_text() == "a = 2\n"
        assert (mnt / "new.txt").read_bytes() == b"fsynced\n"
        assert (mnt / "docs" / "guide.md").read_text() == "guide\n"
        assert not (mnt / "README.md").exists()
        changes = mountd("changes", str(mnt), cwd=project)
        assert changes.stdout.splitlines() == [
            "D /README.md",
            "A /docs/",
            "A /docs/guide.md",
            "A /new.txt",
            "M /src/a.py",
        ], changes.stdout
        # The project itself was never written.
        assert (project / "README.md").read_text() == "readme\n"
        assert (project / "src" / "a.py").read_text() == "a = 1\n"

        status = mountd("status", cwd=project)
        assert f"session of {project} (mountd mount, in use" in status.stdout
        # One session, one daemon: a second mount of the directory is refused.
        other = tmp_path / "other"
        with cleared_afterwards(other):
            second = mountd("mount", "--daemon", "--resume", str(other), cwd=project)
            assert second.returncode == 1
            assert "is being served by another `mountd mount`" in second.stderr

        assert mountd("unmount", str(mnt), cwd=project).returncode == 0
        kept = mountd("mount", "--daemon", "--resume", str(mnt), cwd=project)
        assert kept.returncode == 0, kept.stderr
        assert (mnt / "new.txt").read_bytes() == b"fsynced\n"  # a clean unmount keeps them too
        dropped = mountd("unmount", "--discard", str(mnt), cwd=project)
        assert dropped.returncode == 0, dropped.stderr
        assert "discarded the changes kept in" in dropped.stdout
        fresh = mountd("mount", "--daemon", str(mnt), cwd=project)
        assert fresh.returncode == 0, fresh.stderr
        assert (mnt / "README.md").read_text() == "readme\n"
        assert not (mnt / "new.txt").exists()
        assert mountd("unmount", str(mnt), cwd=project).returncode == 0


@pytest.mark.mount
def test_fresh_discards_and_ephemeral_keeps_nothing(project: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        assert mountd("mount", "--daemon", str(mnt), cwd=project).returncode == 0
        (mnt / "x.txt").write_text("x\n")
        kill_daemon(mnt)
        fresh = mountd("mount", "--daemon", "--fresh", str(mnt), cwd=project)
        assert fresh.returncode == 0, fresh.stderr
        assert not (mnt / "x.txt").exists()
        assert mountd("unmount", "--discard", str(mnt), cwd=project).returncode == 0

        ephemeral = mountd("mount", "--daemon", "--ephemeral", str(mnt), cwd=project)
        assert ephemeral.returncode == 0, ephemeral.stderr
        assert "(changes in memory)" in ephemeral.stdout
        (mnt / "y.txt").write_text("y\n")
        kill_daemon(mnt)
        again = mountd("mount", "--daemon", str(mnt), cwd=project)
        assert again.returncode == 0, again.stderr  # nothing was kept to ask about
        assert not (mnt / "y.txt").exists()
        assert mountd("unmount", str(mnt), cwd=project).returncode == 0


@pytest.mark.mount
def test_a_killed_run_keeps_its_changes_and_a_finished_one_leaves_nothing(
    project: Path, private_sessions: Path
) -> None:
    """``private_sessions`` is the autouse fixture of ``tests/conftest.py``."""
    env = "--env", "PYTHONDONTWRITEBYTECODE=1"
    done = mountd("run", *env, "--", "sh", "-c", "echo done > done.txt", cwd=project)
    assert done.returncode == 0, done.stderr
    sessions = private_sessions / "agentroot" / "sessions"
    assert not sessions.exists() or list(sessions.iterdir()) == []  # reported: dropped

    run = subprocess.Popen(
        [*COMMAND, "run", *env, "--", "sh", "-c", "echo work > work.txt; sync; sleep 60"],
        cwd=project,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        # The file appears at open(O_TRUNC), before echo writes: wait for the content.
        while [p.read_text() for p in sessions.glob("*/upper/work.txt")] != ["work\n"]:
            assert time.monotonic() < deadline, "the command never wrote"
            time.sleep(0.05)
        run.kill()  # mountd run itself, as an OOM killer or a closed terminal would
    finally:
        run.kill()
        run.communicate(timeout=30)
    refused = mountd("run", *env, "--", "true", cwd=project)
    assert refused.returncode == 2
    assert "holds the changes of an earlier `mountd run`" in refused.stderr
    resumed = mountd("run", *env, "--resume", "--apply", "--", "cat", "work.txt", cwd=project)
    assert (resumed.returncode, resumed.stdout) == (0, "work\n"), resumed.stderr
    assert "  A /work.txt" in resumed.stderr.splitlines()
    assert (project / "work.txt").read_text() == "work\n"  # applied
    assert list(sessions.iterdir()) == []
