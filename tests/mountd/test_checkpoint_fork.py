"""Forking a mount's checkpoint into a second mount, and applying a checkpoint, for real.

Real daemons serve the default tree of a git repository; ``mountd checkpoint fork`` starts a
second daemon over a new session of the same directory. The two mounts are independent (writes
in one are not seen in the other, an in-place write through the fork leaves the origin's
checkpoint intact), the fork survives SIGKILL of its daemon, and the host directory never
changes. ``mountd changes|diff|apply --checkpoint N`` go through the one apply: its refusals
(a nested repository's hooks), its conflicts and its open-file refusal.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from mountd import _registry as registry
from tests.mountd.mounting import cleared_afterwards
from tests.mountd.test_checkpoints_mount import checkpoint, git, host_state, repository
from tests.mountd.test_cli import private_state
from tests.mountd.test_sessions import kill_daemon, mountd

__all__ = ["private_state", "repository"]  # fixtures: a state directory each, the repository


HOOK = "A /sub/.git/hooks/pre-commit (refused: git's hooks: git runs what is there)"


def fork(mnt: Path, number: int, new: Path, *, cwd: Path) -> str:
    """``mountd checkpoint fork``; the session directory it made."""
    done = mountd("checkpoint", "fork", str(mnt), str(number), str(new), cwd=cwd)
    assert done.returncode == 0, done.stderr
    expected = (
        f"mountd: {registry.canonical(new)} is a fork of checkpoint {number} of "
        f"{registry.canonical(mnt)}, kept in "
    )
    last = done.stdout.splitlines()[-1]
    assert last.startswith(expected), done.stdout
    found = re.match(r"(\S+) \(", last[len(expected) :])
    assert found is not None, last
    return found.group(1)


def sessions(state: Path) -> list[str]:
    root = state / "agentroot" / "sessions"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.mark.mount
def test_a_fork_is_a_second_independent_mount(
    repository: Path, tmp_path: Path, private_sessions: Path
) -> None:
    """``private_sessions`` is the autouse fixture of ``tests/conftest.py``."""
    mnt, other = tmp_path / "mnt", tmp_path / "fork"
    host = host_state(repository)
    with cleared_afterwards(mnt), cleared_afterwards(other):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        (mnt / "src" / "a.py").write_text("value = 10\n")
        (mnt / "notes.txt").write_bytes(bytes(range(256)) * 64)
        checkpoint(str(mnt), "--label", "good", cwd=repository)
        (mnt / "after.txt").write_text("after the checkpoint\n")

        session = fork(mnt, 1, other, cwd=repository)
        assert (other / "src" / "a.py").read_text() == "value = 10\n"
        assert (other / "notes.txt").read_bytes() == bytes(range(256)) * 64
        assert not (other / "after.txt").exists()
        assert git("log", "--format=%s", cwd=other) == "first\n"
        listed = checkpoint("list", str(other), cwd=repository)["checkpoints"]
        assert [(c["number"], c["label"]) for c in listed] == [(1, "fork of 1")]  # type: ignore[index, union-attr]

        # Writes in one are not seen in the other.
        (other / "only-fork.txt").write_text("fork\n")
        (mnt / "only-origin.txt").write_text("origin\n")
        assert not (mnt / "only-fork.txt").exists()
        assert not (other / "only-origin.txt").exists()
        # An in-place write through the fork changes neither the origin nor its checkpoint.
        with open(other / "notes.txt", "r+b") as handle:
            handle.seek(100)
            handle.write(b"FORK")
        assert (mnt / "notes.txt").read_bytes() == bytes(range(256)) * 64
        (mnt / "notes.txt").write_text("origin rewrote it\n")
        rewound = mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository)
        assert rewound.returncode == 0, rewound.stderr
        assert (mnt / "notes.txt").read_bytes() == bytes(range(256)) * 64
        assert not (mnt / "after.txt").exists()
        forked = bytearray(bytes(range(256)) * 64)
        forked[100:104] = b"FORK"
        assert (other / "notes.txt").read_bytes() == bytes(forked)

        status = mountd("status", cwd=repository)
        assert (
            f"session of {repository} (mountd mount, a fork of checkpoint 1 of "
            f"{registry.canonical(mnt)}, in use, since "
        ) in status.stdout, status.stdout
        assert status.stdout.count(f"): {session}\n") == 1

        # Killed, the fork loses nothing, and is served again from its session.
        kill_daemon(other)
        status = mountd("status", cwd=repository)
        assert f"left behind (--session {session} --resume)" in status.stdout, status.stdout
        again = mountd(
            "mount", "--daemon", "--session", session, "--resume", str(other), cwd=tmp_path
        )
        assert again.returncode == 0, again.stderr
        assert f"a fork of checkpoint 1 of {registry.canonical(mnt)}" in again.stdout
        assert (other / "only-fork.txt").read_text() == "fork\n"
        assert (other / "notes.txt").read_bytes() == bytes(forked)
        rewound = mountd("checkpoint", "rewind", str(other), "1", cwd=repository)
        assert rewound.returncode == 0, rewound.stderr
        assert (other / "notes.txt").read_bytes() == bytes(range(256)) * 64
        assert not (other / "only-fork.txt").exists()

        dropped = mountd("unmount", "--discard", str(other), cwd=repository)
        assert dropped.returncode == 0, dropped.stderr
        assert f"discarded the changes kept in {session}" in dropped.stdout
        assert not Path(session).exists()
        assert (mnt / "src" / "a.py").read_text() == "value = 10\n"  # the origin goes on
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0
    assert host_state(repository) == host  # the host directory never changed
    assert len(sessions(private_sessions)) == 1  # the origin's


@pytest.mark.mount
def test_an_ephemeral_mount_forks_into_a_session(repository: Path, tmp_path: Path) -> None:
    mnt, other = tmp_path / "mnt", tmp_path / "fork"
    with cleared_afterwards(mnt), cleared_afterwards(other):
        started = mountd("mount", "--daemon", "--ephemeral", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        (mnt / "src" / "a.py").write_text("value = 3\n")
        subprocess.run(["rm", "-rf", str(mnt / "src" / "pkg")], check=True)
        (mnt / "link").symlink_to("src/a.py")
        checkpoint(str(mnt), cwd=repository)
        (mnt / "src" / "a.py").write_text("value = 4\n")
        session = fork(mnt, 1, other, cwd=repository)
        assert (other / "src" / "a.py").read_text() == "value = 3\n"
        assert not (other / "src" / "pkg").exists()
        assert (other / "link").read_text() == "value = 3\n"
        changes = mountd("changes", str(other), cwd=repository)
        assert changes.stdout.splitlines() == [
            "A /link -> src/a.py",
            "M /src/a.py",
            "D /src/pkg/",
            "D /src/pkg/b.py",
        ], changes.stdout
        # Written out, the fork outlives its daemon, unlike its origin's changes.
        kill_daemon(other)
        again = mountd(
            "mount", "--daemon", "--session", session, "--resume", str(other), cwd=tmp_path
        )
        assert again.returncode == 0, again.stderr
        assert (other / "src" / "a.py").read_text() == "value = 3\n"
        assert mountd("unmount", "--discard", str(other), cwd=repository).returncode == 0
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_a_fork_is_mounted_as_its_origin_is(repository: Path, tmp_path: Path) -> None:
    mnt, other = tmp_path / "mnt", tmp_path / "fork"
    with cleared_afterwards(mnt), cleared_afterwards(other):
        started = mountd(
            "mount", "--daemon", "--allow-other", "--cache-timeout", "0", str(mnt), cwd=repository
        )
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), cwd=repository)
        fork(mnt, 1, other, cwd=repository)
        for path in (mnt, other):
            entry = registry.mount_at(registry.canonical(path))
            assert entry is not None and "allow_other" in entry.options.split(","), entry
        # With no caching, a change on the host shows through the fork at once, as through
        # its origin (a cached mount would answer from its cache for the timeout).
        (other / "src" / "a.py").read_text()
        (repository / "src" / "a.py").write_text("value = 5\n")
        assert (other / "src" / "a.py").read_text() == "value = 5\n"
        assert mountd("unmount", "--discard", str(other), cwd=repository).returncode == 0
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_what_a_fork_refuses(repository: Path, tmp_path: Path, private_sessions: Path) -> None:
    """``private_sessions`` is the autouse fixture of ``tests/conftest.py``."""
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        assert mountd("mount", "--daemon", str(mnt), cwd=repository).returncode == 0
        checkpoint(str(mnt), cwd=repository)
        before = sessions(private_sessions)

        def refused(*args: str) -> tuple[int, str]:
            done = mountd("checkpoint", "fork", *args, cwd=repository)
            return done.returncode, done.stderr

        new = tmp_path / "new"
        assert refused(str(mnt), "9", str(new)) == (1, "mountd: no checkpoint 9\n")
        assert not new.exists()
        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "x").write_text("x")
        assert refused(str(mnt), "1", str(busy)) == (
            1,
            f"mountd: {registry.canonical(busy)} is not an empty directory: a fork is mounted "
            "on an empty one\n",
        )
        assert refused(str(mnt), "1", str(mnt)) == (
            1,
            f"mountd: {registry.canonical(mnt)} is already a mount: a fork is mounted on an "
            "empty directory\n",
        )
        assert refused(str(mnt), "1") == (
            2,
            "mountd: usage: mountd checkpoint fork MOUNTPOINT N NEWMOUNTPOINT\n",
        )
        assert sessions(private_sessions) == before  # nothing was left behind
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0

    spec = tmp_path / "spec.toml"
    spec.write_text(f'[root]\ntype = "cow"\nlower = {{ type = "dir", path = "{repository}" }}\n')
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(spec), str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), cwd=repository)
        assert refused(str(mnt), "1", str(tmp_path / "new")) == (
            1,
            f"mountd: only the default tree forks from the command line: "
            f"{registry.canonical(mnt)} serves a tree of a spec or factory, which has no "
            "session to start one from; fork it in Python with tree.fork(1)\n",
        )
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0
    never = tmp_path / "never"
    wrong = mountd("mount", "--session", str(tmp_path), str(never), cwd=repository)
    assert (wrong.returncode, wrong.stderr) == (
        1,
        f"mountd: {tmp_path} is not a session directory\n",
    )
    assert not never.exists()


@pytest.mark.mount
def test_apply_writes_a_checkpoint_through_the_one_apply(repository: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        assert mountd("mount", "--daemon", str(mnt), cwd=repository).returncode == 0
        (mnt / "src" / "a.py").write_text("value = 10\n")
        git("init", "-q", "sub", cwd=mnt)  # a nested repository, with its sample hooks
        (mnt / "sub" / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
        (mnt / "sub" / "file.txt").write_text("nested\n")
        checkpoint(str(mnt), cwd=repository)
        (mnt / "src" / "a.py").write_text("value = 99\n")  # the live tree moves on
        (mnt / "late.txt").write_text("late\n")

        listed = mountd("changes", "--checkpoint", "1", str(mnt), cwd=repository)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert "M /src/a.py" in lines and "A /sub/file.txt" in lines
        assert "A /late.txt" not in lines
        assert HOOK in lines
        diff = mountd("diff", "--checkpoint", "1", str(mnt), "src", cwd=repository)
        assert diff.returncode == 0, diff.stderr
        assert "+value = 10\n" in diff.stdout and "99" not in diff.stdout

        with open(mnt / "src" / "a.py", "r+b"):
            busy = mountd("apply", "--checkpoint", "1", str(mnt), "src", cwd=repository)
        assert (busy.returncode, busy.stderr) == (
            1,
            "mountd: nothing applied: /src/a.py is open for writing through the mount; "
            "close it first\n",
        )
        assert (repository / "src" / "a.py").read_text() == "value = 1\n"

        applied = mountd("apply", "--checkpoint", "1", str(mnt), cwd=repository)
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.startswith("mountd: applied ")
        assert " of checkpoint 1 to the directory under " in applied.stdout.splitlines()[0]
        assert "mountd: not applied (refused):" in applied.stderr
        assert "  A /sub/.git/hooks/pre-commit: git's hooks: git runs what is there" in (
            applied.stderr.splitlines()
        ), applied.stderr
        assert (repository / "src" / "a.py").read_text() == "value = 10\n"
        assert (repository / "sub" / "file.txt").read_text() == "nested\n"
        assert (repository / "sub" / ".git" / "HEAD").is_file()  # git's own files go
        assert not (repository / "sub" / ".git" / "hooks").exists()  # its hooks never
        assert not (repository / "late.txt").exists()
        # The live tree serves what it served; what it holds equal to the directory is no
        # longer a change.
        assert (mnt / "src" / "a.py").read_text() == "value = 99\n"
        assert (mnt / "sub" / ".git" / "hooks" / "pre-commit").is_file()
        now = mountd("changes", str(mnt), cwd=repository).stdout.splitlines()
        assert "M /src/a.py" in now and "A /late.txt" in now
        assert "A /sub/file.txt" not in now
        assert HOOK in now  # refused, and kept

        # A conflict: the host file changed since checkpoint 2's tree copied it.
        (mnt / "README.md").write_text("readme from the mount\n")
        checkpoint(str(mnt), cwd=repository)
        (repository / "README.md").write_text("readme changed on the host\n")
        conflict = mountd("apply", "--checkpoint", "2", str(mnt), "README.md", cwd=repository)
        assert (conflict.returncode, conflict.stderr) == (
            1,
            "mountd: nothing applied: conflict: /README.md changed in the lower tree since it "
            "was copied up (1 conflicting path)\n",
        )
        assert (repository / "README.md").read_text() == "readme changed on the host\n"
        unknown = mountd("diff", "--checkpoint", "7", str(mnt), cwd=repository)
        assert (unknown.returncode, unknown.stderr) == (1, "mountd: no checkpoint 7\n")
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0
