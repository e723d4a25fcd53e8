"""cow_fs through a real mount: git works in full over a read-only repository, which stays as it was.

The tree is built in the test process and served with ``mountd.mounted`` in a trio program, so
``changes()``/``diff()`` can be read after the tools ran; the tools run as subprocesses
(``trio.run_process``) and plain file access goes through a worker thread, never from the event
loop's thread (which serves the mount).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

import mountd
import vfs
from vfs._cow import cow_fs

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240)]

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
}
GIT = ["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com"]


def host_git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [*GIT, *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


def make_repo(root: Path) -> None:
    """About fifty files in a few directories, one commit."""
    for package in ("core", "pkg", "util"):
        for index in range(12):
            path = root / "src" / package / f"mod{index}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {package} {index}\n" + "".join(f"line {n}\n" for n in range(20)))
    (root / "README.md").write_text("# demo\n\nA small repository.\n")
    (root / "data.bin").write_bytes(bytes(range(256)) * 4)
    (root / "docs").mkdir()
    for name in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j"):
        (root / "docs" / f"{name}.md").write_text(f"doc {name}\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o755)
    host_git("init", "-q", "-b", "main", cwd=root)
    host_git("add", "-A", cwd=root)
    host_git("commit", "-q", "-m", "initial", cwd=root)


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything a byte-identical tree keeps: kinds, bytes, link targets, modes, mtimes."""
    state: dict[str, tuple[object, ...]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            info = path.lstat()
            key = str(path.relative_to(root))
            if path.is_symlink():
                state[key] = ("link", os.readlink(path))
            elif path.is_dir():
                state[key] = ("dir", info.st_mode, info.st_mtime_ns)
            else:
                state[key] = ("file", path.read_bytes(), info.st_mode, info.st_mtime_ns)
    return state


async def run(*argv: str, cwd: Path) -> str:
    done = await trio.run_process(
        list(argv), cwd=cwd, env=GIT_ENV, capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stderr.decode()}"
    return done.stdout.decode()


async def git(*args: str, cwd: Path) -> str:
    return await run(*GIT, *args, cwd=cwd)


def test_git_in_a_copy_on_write_mount(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_repo(repo)
    before = snapshot(repo)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cow = cow_fs(vfs.dir_fs(repo, read_only=True))
    seen: dict[str, object] = {}

    async def main() -> None:
        async with mountd.mounted(cow, mnt):
            assert await git("status", "--porcelain", cwd=mnt) == ""
            ino = await trio.to_thread.run_sync(lambda: os.stat(mnt / "README.md").st_ino)
            await run("sh", "-c", "printf 'edited\\n' >> README.md", cwd=mnt)
            # Through the API while mounted: the copy-up keeps the inode, the content shows.
            await cow.write("/docs/a.md", "doc a, rewritten\n")
            seen["ino"] = await trio.to_thread.run_sync(
                lambda: (
                    ino,
                    os.stat(mnt / "README.md").st_ino,
                    (mnt / "docs/a.md").read_text(),
                )
            )
            await git("mv", "src/pkg", "src/renamed", cwd=mnt)
            await git("rm", "-q", "docs/b.md", cwd=mnt)
            await run("sh", "-c", "echo new > docs/new.md && chmod 600 docs/c.md", cwd=mnt)
            seen["status"] = await git("status", "--porcelain", cwd=mnt)
            await git("add", "-A", cwd=mnt)
            await git("commit", "-q", "-m", "agent work", cwd=mnt)
            assert await git("status", "--porcelain", cwd=mnt) == ""
            seen["log"] = await git("log", "--format=%s", cwd=mnt)
            seen["head"] = await git("rev-parse", "HEAD", cwd=mnt)
            await git("fsck", "--no-progress", cwd=mnt)
        seen["changes"] = [change async for change in cow.changes()]
        seen["diff"] = await cow.diff(["/README.md", "/docs", "/src"])
        copy = tmp_path / "copy"
        await run("cp", "-a", str(repo), str(copy), cwd=tmp_path)
        await cow.apply(target=vfs.dir_fs(copy))

    trio.run(main)
    assert snapshot(repo) == before  # the host repository is byte-identical
    assert host_git("log", "--format=%s", cwd=repo) == "initial\n"

    ino_before, ino_after, rewritten = seen["ino"]  # type: ignore[misc]
    assert ino_before == ino_after
    assert rewritten == "doc a, rewritten\n"
    assert seen["log"] == "agent work\ninitial\n"
    assert " M README.md" in str(seen["status"])

    changes = {c.path: c for c in seen["changes"]}  # type: ignore[attr-defined]
    assert changes["/README.md"].kind == "modified"
    assert changes["/docs/a.md"].kind == "modified"
    assert changes["/docs/b.md"].kind == "deleted"
    assert changes["/docs/new.md"].kind == "added"
    assert changes["/docs/c.md"].kind == "mode_changed"
    assert changes["/src/renamed"].kind == "renamed"
    assert changes["/src/renamed"].old_path == "/src/pkg"
    for index in range(12):
        moved = changes[f"/src/renamed/mod{index}.py"]
        assert (moved.kind, moved.old_path) == ("renamed", f"/src/pkg/mod{index}.py")
    assert "/src/pkg" not in changes and "/src/pkg/mod0.py" not in changes
    assert changes["/.git/index"].kind == "modified"
    assert changes["/.git/refs/heads/main"].kind == "modified"
    assert not [p for p in changes if p.startswith(("/src/core", "/src/util", "/data.bin"))]

    diff = str(seen["diff"])
    assert "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n" in diff
    assert "+edited\n" in diff
    assert (
        "diff --git a/src/pkg/mod3.py b/src/renamed/mod3.py\nrename from src/pkg/mod3.py\n" in diff
    )
    assert "diff --git a/docs/b.md b/docs/b.md\ndeleted file mode 100644\n" in diff
    assert "diff --git a/docs/c.md b/docs/c.md\nold mode 100644\nnew mode 100600\n" not in diff
    assert "diff --git a/docs/new.md b/docs/new.md\nnew file mode 100644\n" in diff

    # Applied into a copy of the host repository, the copy is what the agent saw.
    copy = tmp_path / "copy"
    assert host_git("rev-parse", "HEAD", cwd=copy) == seen["head"]
    assert host_git("status", "--porcelain", cwd=copy) == ""
    host_git("fsck", "--no-progress", cwd=copy)
    assert (copy / "src/renamed/mod3.py").read_text().startswith("# pkg 3\n")
    assert not (copy / "src/pkg").exists()
