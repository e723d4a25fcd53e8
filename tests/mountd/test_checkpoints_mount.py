"""Checkpoints through a real mount: rewinding a broken turn, held descriptors, killed daemons.

Real daemons serve the default tree (a cow over the project, its upper in a session on disk);
real git, tar and rg look at the mount before a turn breaks it and after the rewind, and must see
what they saw before; the host directory is never changed. A daemon killed in the middle of a
checkpoint loses no checkpoint recorded before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mountd import _registry as registry
from tests.mountd.mounting import cleared_afterwards
from tests.mountd.test_cli import private_state
from tests.mountd.test_sessions import COMMAND, kill_daemon, mountd

__all__ = ["private_state"]  # the autouse fixture: every test gets its own state directory

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def host_state(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a directory's mark."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() and not path.is_symlink() else path.read_bytes()
    return found


def without_index(state: dict[str, bytes | str]) -> dict[str, bytes | str]:
    return {path: data for path, data in state.items() if path != ".git/index"}


def tools_view(mnt: Path) -> dict[str, str]:
    """What git, tar and rg say of the tree at ``mnt``."""
    packed = subprocess.run(
        ["tar", "--sort=name", "-cf", "-", "-C", str(mnt), "src", "README.md"],
        capture_output=True,
        check=False,
    )
    assert (packed.returncode, packed.stderr) == (0, b""), packed.stderr
    tarred = packed.stdout
    listing = subprocess.run(
        ["tar", "-tvf", "-"], input=tarred, capture_output=True, check=True
    ).stdout.decode()
    names = "\n".join(line.split()[-1] for line in listing.splitlines())
    found = subprocess.run(
        ["rg", "--sort", "path", "-n", "value", str(mnt / "src")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.replace(str(mnt), "MNT")
    return {
        "git status": git("status", "--porcelain", cwd=mnt),
        "git log": git("log", "--format=%s", cwd=mnt),
        "git diff": git("diff", "HEAD", cwd=mnt),
        "tar names": names,
        "rg": found,
    }


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "a.py").write_text("value = 1\n")
    (root / "src" / "pkg" / "b.py").write_text("other_value = 2\n")
    (root / "README.md").write_text("readme\n")
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "first", cwd=root)
    return root


def checkpoint(*args: str, cwd: Path) -> dict[str, object]:
    done = mountd("checkpoint", *args, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    reply: dict[str, object] = json.loads(done.stdout)
    return reply


@pytest.mark.mount
def test_a_broken_turn_is_rewound_through_the_mount(repository: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    host = host_state(repository)
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        (mnt / "src" / "a.py").write_text("value = 10\n")  # the work of a good turn
        assert mountd("turn", "begin", str(mnt), cwd=repository).returncode == 0
        ended = mountd("turn", "end", str(mnt), cwd=repository)
        assert ended.returncode == 0, ended.stderr
        assert ended.stdout.strip().endswith("/tmp is empty; checkpoint 1")
        before = tools_view(mnt)
        contents = host_state(mnt)

        # A broken turn: a commit, a removed directory, a generator run over the wrong place.
        assert mountd("turn", "begin", str(mnt), cwd=repository).returncode == 0
        git("commit", "-q", "-am", "broken", cwd=mnt)
        subprocess.run(["rm", "-rf", str(mnt / "src" / "pkg")], check=True)
        for number in range(20):
            (mnt / "src" / f"gen{number}.py").write_text(f"value = {number}\n")
        assert mountd("turn", "end", str(mnt), cwd=repository).returncode == 0
        assert tools_view(mnt) != before

        rewound = mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository)
        assert rewound.returncode == 0, rewound.stderr
        assert rewound.stdout.startswith(f"mountd: {registry.canonical(mnt)} is checkpoint 1 again")
        assert tools_view(mnt) == before
        # (git status refreshes its index's stat data: the files are new files now)
        assert without_index(host_state(mnt)) == without_index(contents)
        assert host_state(repository) == host  # the host directory never changed

        listed: list[dict[str, Any]] = checkpoint("list", str(mnt), cwd=repository)["checkpoints"]  # type: ignore[assignment]
        assert [(c["number"], c["turn"]) for c in listed[:2]] == [(1, 1), (2, 2)]
        # (git status may have rewritten its index after the turn, when its entries were racily
        # clean: then the state the rewind left was no checkpoint's, and it kept it first)
        assert [c["label"] for c in listed[2:]] in ([], ["before rewind to 1"])
        diff = mountd("checkpoint", "diff", str(mnt), "1", "2", cwd=repository)
        assert diff.returncode == 0, diff.stderr
        assert "diff --git a/src/pkg/b.py b/src/pkg/b.py\ndeleted file mode 100644\n" in diff.stdout
        assert "diff --git a/src/gen7.py b/src/gen7.py\nnew file mode 100644\n" in diff.stdout
        # The rewind is undone by rewinding to the broken state.
        assert mountd("checkpoint", "rewind", str(mnt), "2", cwd=repository).returncode == 0
        assert not (mnt / "src" / "pkg").exists()
        assert git("log", "--format=%s", cwd=mnt) == "broken\nfirst\n"
        # (git status after the first rewind refreshed the index: a state of its own, recorded)
        kept: list[dict[str, Any]] = checkpoint("list", str(mnt), cwd=repository)["checkpoints"]  # type: ignore[assignment]
        assert [c["label"] for c in kept][1:] == [None] + [c["label"] for c in listed[2:]] + [
            "before rewind to 2"
        ]
        status = mountd("status", cwd=repository)
        last = kept[-1]["number"]
        assert f"  checkpoints: {len(kept)} kept, last {last}  turn   -  " in status.stdout, (
            status.stdout
        )
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0
    assert host_state(repository) == host


@pytest.mark.mount
def test_a_descriptor_held_across_a_rewind_keeps_its_old_file(
    repository: Path, tmp_path: Path
) -> None:
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), "--label", "start", cwd=repository)
        target = mnt / "src" / "a.py"
        target.write_text("value = 2\n")
        assert target.read_text() == "value = 2\n"  # in the kernel's page cache now
        with open(target, "rb") as held, open(mnt / "src" / "pkg" / "b.py", "rb") as untouched:
            assert mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository).returncode == 0
            assert target.read_text() == "value = 1\n"  # a new open sees checkpoint 1's bytes
            assert held.read() == b"value = 2\n"  # as after a rename over it
            # Detached, as after a rename over it (both show the lower file's inode number: a
            # copy keeps its origin's, so git's index stays valid).
            assert (os.fstat(held.fileno()).st_nlink, os.stat(target).st_nlink) == (0, 1)
            assert untouched.read() == b"other_value = 2\n"  # unchanged: the same file
            assert os.fstat(untouched.fileno()).st_ino == os.stat(untouched.name).st_ino
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_a_descriptor_held_in_a_directory_a_rewind_removes_has_no_name(
    repository: Path, tmp_path: Path
) -> None:
    """The rewind removes the directory; the file held open beneath it is detached with it, so
    ``fstat`` must not answer the link count the kernel cached before."""
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), cwd=repository)
        (mnt / "new" / "deeper").mkdir(parents=True)
        (mnt / "new" / "deeper" / "f.txt").write_text("made after\n")
        with open(mnt / "new" / "deeper" / "f.txt", "rb") as held:
            assert os.fstat(held.fileno()).st_nlink == 1
            assert mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository).returncode == 0
            assert not (mnt / "new").exists()
            assert os.fstat(held.fileno()).st_nlink == 0
            assert held.read() == b"made after\n"
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_a_descriptor_held_on_a_file_a_rewind_replaces_with_the_same_bytes_keeps_it(
    repository: Path, tmp_path: Path
) -> None:
    """Written with the bytes it had, the file is a copy in the upper that the rewind drops
    (the lower file shows again): no change of content, but a replaced file all the same, and
    a descriptor held on it keeps it."""
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), cwd=repository)
        target = mnt / "src" / "a.py"
        target.write_text("value = 1\n")  # the same bytes, copied up
        with open(target, "rb") as held:
            assert held.read() == b"value = 1\n"
            rewound = mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository)
            assert rewound.returncode == 0, rewound.stderr
            held.seek(0)
            assert held.read() == b"value = 1\n"
            assert os.fstat(held.fileno()).st_nlink == 0  # detached, as after a rename over it
        assert target.read_text() == "value = 1\n"
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_a_daemon_killed_mid_checkpoint_loses_no_recorded_checkpoint(
    repository: Path, tmp_path: Path, private_sessions: Path
) -> None:
    """``private_sessions`` is the autouse fixture of ``tests/conftest.py``."""
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        started = mountd("mount", "--daemon", str(mnt), cwd=repository)
        assert started.returncode == 0, started.stderr
        (mnt / "kept.txt").write_text("kept\n")
        first = checkpoint(str(mnt), "--label", "kept", cwd=repository)["checkpoint"]
        assert first["number"] == 1  # type: ignore[index]
        # Enough changed bytes that the next checkpoint takes a while to store: large files,
        # each streamed into a blob of its own.
        for number in range(60):
            (mnt / f"big{number}.bin").write_bytes(os.urandom((1 << 20) + 4096))
        stage = next(private_sessions.glob("agentroot/sessions/*/upper/.agentroot-cow"))
        taking = threading.Thread(
            target=mountd, args=("checkpoint", str(mnt)), kwargs={"cwd": repository}
        )
        taking.start()
        deadline = time.monotonic() + 30
        while len(list((stage / "blobs").glob("*"))) < 5:  # storing the new files' bytes
            assert time.monotonic() < deadline, "the checkpoint never started storing"
            time.sleep(0.01)
        kill_daemon(mnt)
        taking.join(timeout=60)

        for path in (stage / "checkpoints").glob("*.json"):
            json.loads(path.read_text())  # never a torn checkpoint
        resumed = mountd("mount", "--daemon", "--resume", str(mnt), cwd=repository)
        assert resumed.returncode == 0, resumed.stderr
        listed = checkpoint("list", str(mnt), cwd=repository)["checkpoints"]
        assert listed[0] == first  # type: ignore[index]
        assert len(listed) in (1, 2)  # type: ignore[arg-type]
        assert mountd("checkpoint", "rewind", str(mnt), "1", cwd=repository).returncode == 0
        assert (mnt / "kept.txt").read_text() == "kept\n"
        assert not (mnt / "big0.bin").exists()
        # The work after checkpoint 1 was not lost either: the rewind kept it as a checkpoint.
        last = checkpoint("list", str(mnt), cwd=repository)["checkpoints"][-1]  # type: ignore[index]
        assert last["label"] == "before rewind to 1"  # type: ignore[index]
        assert last["summary"]["added"] == 60  # type: ignore[index]
        unlabelled = [c["number"] for c in listed if c["label"] is None]  # type: ignore[index, union-attr]
        pruned = checkpoint("prune", str(mnt), "--keep", "0", cwd=repository)
        assert pruned["pruned"] == unlabelled
        loose, packs, digests = set(), set(), set()
        for path in (stage / "checkpoints").glob("*.json"):
            data = json.loads(path.read_text())
            entries = data["manifest"] if "manifest" in data else data["changes"]
            for entry in entries.values():
                if entry is not None and entry[0] == "file":
                    digests.add(entry[4])
                    (packs.add(entry[5]) if len(entry) > 6 else loose.add(entry[4]))
        # What the killed checkpoint stored and no kept one names is gone too.
        assert {p.name for p in (stage / "blobs").iterdir()} == loose
        assert {p.name for p in (stage / "packs").iterdir()} == packs
        assert hashlib.sha256(b"kept\n").hexdigest() in digests
        assert mountd("unmount", str(mnt), cwd=repository).returncode == 0


@pytest.mark.mount
def test_run_rewinds_a_failed_command(repository: Path) -> None:
    env = "--env", "PYTHONDONTWRITEBYTECODE=1"
    failed = mountd(
        "run",
        *env,
        "--rewind-on-failure",
        "--",
        "sh",
        "-c",
        "echo x > new.txt; rm README.md; exit 3",
        cwd=repository,
    )
    assert failed.returncode == 3, failed.stderr
    assert "the command failed (exit 3): the tree is as it was before it" in failed.stderr
    assert "A /new.txt" not in failed.stderr and "D /README.md" not in failed.stderr
    done = mountd(
        "run", *env, "--rewind-on-failure", "--", "sh", "-c", "echo x > new.txt", cwd=repository
    )
    assert done.returncode == 0, done.stderr
    assert "  A /new.txt" in done.stderr.splitlines()
    assert not (repository / "new.txt").exists()


@pytest.mark.mount
def test_a_rewind_of_more_files_than_descriptors_keeps_the_mount_serving(tmp_path: Path) -> None:
    """Keepers for every file the kernel knows would run the daemon out of descriptors: they
    stop at a quarter of its limit, and the rewind and the mount go on."""
    project = tmp_path / "project"
    (project / "many").mkdir(parents=True)
    count = 1500
    for n in range(count):
        (project / "many" / f"f{n}").write_text(f"old {n}\n")
    mnt = tmp_path / "mnt"
    with cleared_afterwards(mnt):
        limited = ["prlimit", "--nofile=1024:1024", "--"]
        started = subprocess.run(
            [*limited, *COMMAND, "mount", "--daemon", str(mnt)],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        checkpoint(str(mnt), cwd=project)
        for n in range(count):
            (mnt / "many" / f"f{n}").write_text(f"new {n}\n")
        with open(mnt / "many" / "f0", "rb") as held:
            rewound = mountd("checkpoint", "rewind", str(mnt), "1", cwd=project, timeout=300)
            assert rewound.returncode == 0, rewound.stderr
            assert held.read() == b"new 0\n"  # among the first keepers
        assert all((mnt / "many" / f"f{n}").read_text() == f"old {n}\n" for n in range(count))
        (mnt / "after").write_text("still serving\n")
        assert (mnt / "after").read_text() == "still serving\n"
        assert mountd("unmount", str(mnt), cwd=project).returncode == 0


@pytest.mark.mount
@pytest.mark.parametrize("kind", ["temp", "durable"])
def test_a_descriptor_held_across_a_rewind_through_the_api_keeps_its_file(
    tmp_path: Path, kind: str
) -> None:
    """A rewind asked of a mounted tree in Python, not through the mount's control channel:
    the tree tells the mount first (``on_rewind``), and the mount gives the file a keeper."""
    import trio

    import vfs
    from mountd import mounted

    if kind == "temp":
        tree: Any = vfs.temp_fs({"/f.txt": "old\n"})
    else:
        (tmp_path / "lower").mkdir()
        (tmp_path / "lower" / "f.txt").write_text("old\n")
        (tmp_path / "upper").mkdir()
        lower = vfs.dir_fs(str(tmp_path / "lower"), read_only=True)
        tree = vfs.cow_fs(lower, vfs.dir_fs(str(tmp_path / "upper")))
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        async with mounted(tree, mnt):
            first = await tree.checkpoint()

            def write_and_hold() -> int:
                (mnt / "f.txt").write_text("new\n")
                return os.open(mnt / "f.txt", os.O_RDONLY)

            fd = await trio.to_thread.run_sync(write_and_hold)
            try:
                await tree.rewind(first.number)

                def look() -> tuple[bytes, str, int]:
                    return os.pread(fd, 100, 0), (mnt / "f.txt").read_text(), os.fstat(fd).st_nlink

                assert await trio.to_thread.run_sync(look) == (b"new\n", "old\n", 0)
            finally:
                os.close(fd)

    trio.run(main)
