"""Real, unmodified tools inside every writable root: git, rg, find, tar, diff, venv, sqlite3,
cp, mv, the atomic replace pattern and mkdir locks.

Theory of operation
-------------------
Each check runs tools as subprocesses (always with a timeout, so a hung mount fails the test
instead of hanging CI) in the test's own fresh directory of a writable root, and compares what
they produce with what they must produce, or with the same tool run on a tmpfs reference
directory. The inputs are real: the sample tree of ``trees`` and stdlib packages as a tarball.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import trees
from .conftest import Root, Roots, kind_params
from .syscalls import errno_of

pytestmark = pytest.mark.timeout(180)

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
}


def run(
    *argv: str | Path, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None
) -> str:
    """Run a tool; fail with its output unless it exits 0; return its stdout."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, f"{argv} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def git(*args: str, cwd: Path) -> str:
    return run(
        "git",
        "-c",
        "user.name=Agent",
        "-c",
        "user.email=agent@example.com",
        *args,
        cwd=cwd,
        env=GIT_ENV,
    )


@pytest.fixture(scope="session")
def source_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trees.make_source_tarball(tmp_path_factory.mktemp("tarball"))


@pytest.fixture(scope="session")
def reference_extract(source_tarball: Path) -> Iterator[Path]:
    """The tarball extracted on tmpfs: what ``find`` must list in every root."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="agentroot-extract-", dir="/dev/shm"))
    run("tar", "xf", source_tarball, cwd=path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_git_init_add_commit_status_log(rw_root: Root) -> None:
    repo = rw_root.path / "repo"
    git("init", "-q", "-b", "main", str(repo), cwd=rw_root.path)
    trees.write_tree(repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "first commit", cwd=repo)
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo) == ""

    (repo / "src" / "a.py").write_text("def alpha():\n    return 'changed'\n")
    (repo / "new.txt").write_text("new\n")
    status = git("status", "--porcelain", "--untracked-files=all", cwd=repo)
    assert status.splitlines() == [" M src/a.py", "?? new.txt"]
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "second commit", cwd=repo)
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo) == ""
    assert git("log", "--format=%s", cwd=repo).splitlines() == ["second commit", "first commit"]
    assert git("show", "HEAD~1:src/a.py", cwd=repo) == "def alpha():\n    return 'needle'\n"
    assert git("diff", "--name-only", "HEAD~1", "HEAD", cwd=repo).splitlines() == [
        "new.txt",
        "src/a.py",
    ]
    git("gc", "-q", "--prune=now", cwd=repo)
    git("fsck", "--strict", "--no-progress", cwd=repo)
    assert git("status", "--porcelain", cwd=repo) == ""
    # A local clone hard-links objects where it can and copies where link(2) is refused.
    git("clone", "-q", str(repo), str(rw_root.path / "clone"), cwd=rw_root.path)
    clone = rw_root.path / "clone"
    assert git("log", "--format=%s", cwd=clone).splitlines() == ["second commit", "first commit"]
    assert git("status", "--porcelain", cwd=clone) == ""
    git("fsck", "--strict", "--no-progress", cwd=clone)
    run("rm", "-rf", repo, clone, cwd=rw_root.path)
    assert os.listdir(rw_root.path) == []


def test_rg_finds_matches(rw_root: Root) -> None:
    trees.write_tree(rw_root.path)
    out = run("rg", "--sort", "path", "-n", "needle", cwd=rw_root.path)
    assert out.splitlines() == [
        "src/a.py:2:    return 'needle'",
        "src/b.py:3:NEEDLE = 'needle'  # second match",
    ]
    files = run("rg", "--files", "--sort", "path", "--hidden", cwd=rw_root.path).splitlines()
    # Symlinks are not followed by default; every regular file is listed.
    expected = sorted(rel for rel, e in trees.SAMPLE.items() if isinstance(e, trees.File))
    assert sorted(files) == expected
    assert run(
        "rg", "-c", "-i", "NEEDLE", "-g", "*.py", "--sort", "path", cwd=rw_root.path
    ).splitlines() == [
        "src/a.py:1",
        "src/b.py:1",
    ]


def test_tar_extract_and_diff(rw_root: Root, source_tarball: Path, reference_extract: Path) -> None:
    run("tar", "xf", source_tarball, cwd=rw_root.path, timeout=120)
    for package in trees.SOURCE_PACKAGES:
        run(
            "diff",
            "-r",
            "-x",
            "__pycache__",
            trees.stdlib_dir() / package,
            rw_root.path / package,
            cwd=rw_root.path,
        )
    listed = run("find", ".", cwd=rw_root.path).splitlines()
    reference = run("find", ".", cwd=reference_extract).splitlines()
    assert len(listed) == len(reference)
    assert sorted(listed) == sorted(reference)
    search = ("rg", "-n", "--sort", "path", "-e", "def [a-z_]+\\(self", "-g", "*.py")
    found = run(*search, cwd=rw_root.path)
    assert found == run(*search, cwd=reference_extract)
    assert found.count("\n") > 500
    files = run("find", ".", "-type", "f", "-name", "*.py", cwd=rw_root.path).splitlines()
    assert len(files) == len(
        run("find", ".", "-type", "f", "-name", "*.py", cwd=reference_extract).splitlines()
    )
    # tar restored modes and mtimes as recorded.
    assert trees.snapshot(rw_root.path) == trees.snapshot(reference_extract)
    run("rm", "-rf", *trees.SOURCE_PACKAGES, cwd=rw_root.path)
    assert os.listdir(rw_root.path) == []


PROBE = "VALUE = 'imported from the venv'\n"


def test_venv_without_pip_and_import(rw_root: Root) -> None:
    run(sys.executable, "-m", "venv", "--without-pip", "venv", cwd=rw_root.path)
    python = rw_root.path / "venv" / "bin" / "python"
    assert os.path.islink(python)
    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=rw_root.path
        ).strip()
    )
    assert site.is_relative_to(rw_root.path / "venv")
    (site / "agentroot_probe.py").write_text(PROBE)
    out = run(
        python,
        "-c",
        "import agentroot_probe, sys; print(agentroot_probe.VALUE, sys.prefix)",
        cwd=rw_root.path,
    )
    assert out.split(" ", 4)[:4] == ["imported", "from", "the", "venv"]
    assert out.strip().endswith(str(rw_root.path / "venv"))


# ensurepip costs 10 s on tmpfs and 25-35 s on a mount on 2 busy cores, and does nothing the
# --without-pip check does not (create, write, rename, symlink, mmap of many files): one mount.
@pytest.mark.slow
@pytest.mark.parametrize("rw_root", kind_params(("tmpfs", "temp")), indirect=True)
def test_venv_with_pip(rw_root: Root) -> None:
    started = time.monotonic()
    run(sys.executable, "-m", "venv", "venv", cwd=rw_root.path, timeout=120)
    elapsed = time.monotonic() - started
    out = run(rw_root.path / "venv" / "bin" / "python", "-m", "pip", "--version", cwd=rw_root.path)
    assert str(rw_root.path / "venv") in out
    print(f"python -m venv with pip on {rw_root.kind}: {elapsed:.1f}s")


SQL_SETUP = "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);\n"


def _inserts(start: int, count: int) -> str:
    return "".join(
        f"BEGIN; INSERT INTO t (id, body) VALUES ({i}, printf('%0500d', {i})); COMMIT;\n"
        for i in range(start, start + count)
    )


def test_sqlite_rollback_journal(rw_root: Root) -> None:
    db = rw_root.path / "db.sqlite"
    out = sqlite_run(
        db,
        "PRAGMA journal_mode=delete;\n"
        + SQL_SETUP
        + _inserts(0, 200)
        + "SELECT count(*), sum(id) FROM t;\nPRAGMA integrity_check;\n",
    )
    assert out.splitlines() == ["delete", "200|19900", "ok"]
    # A rolled-back transaction leaves nothing behind.
    out = sqlite_run(
        db,
        "BEGIN; DELETE FROM t; ROLLBACK;\nUPDATE t SET body = 'x' WHERE id < 100;\n"
        "SELECT count(*) FROM t WHERE body = 'x';\nPRAGMA integrity_check;\n",
    )
    assert out.splitlines() == ["100", "ok"]
    assert sorted(os.listdir(rw_root.path)) == ["db.sqlite"]


def test_sqlite_wal(rw_root: Root) -> None:
    db = rw_root.path / "db.sqlite"
    out = sqlite_run(
        db,
        "PRAGMA journal_mode=wal;\n"
        + SQL_SETUP
        + _inserts(0, 200)
        + "SELECT count(*) FROM t;\nPRAGMA wal_checkpoint(TRUNCATE);\nPRAGMA integrity_check;\n",
    )
    assert out.splitlines() == ["wal", "200", "0|0|0", "ok"]
    # A second process reads the committed rows through the WAL and shared memory index.
    out = sqlite_run(db, _inserts(200, 50) + "SELECT count(*) FROM t;\nPRAGMA integrity_check;\n")
    assert out.splitlines() == ["250", "ok"]
    assert os.path.exists(db)


def sqlite_run(db: Path, sql: str) -> str:
    done = subprocess.run(
        ["sqlite3", "-batch", "-bail", str(db)],
        input=sql,
        cwd=db.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"sqlite3 -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_cp_a_preserves_modes_and_mtimes(rw_root: Root, scratch_dir: Path) -> None:
    host = scratch_dir / "sample"
    host.mkdir()
    trees.write_tree(host)
    expected = trees.expected_snapshot()
    run("cp", "-a", host, rw_root.path / "copy", cwd=rw_root.path)  # host -> root
    assert trees.snapshot(rw_root.path / "copy") == expected
    run("cp", "-a", "copy", "copy2", cwd=rw_root.path)  # within the root
    assert trees.snapshot(rw_root.path / "copy2") == expected
    run("cp", "-a", rw_root.path / "copy2", scratch_dir / "back", cwd=rw_root.path)  # root -> host
    assert trees.snapshot(scratch_dir / "back") == expected


def test_mv_directory(rw_root: Root) -> None:
    (rw_root.path / "tree").mkdir()
    trees.write_tree(rw_root.path / "tree")
    expected = trees.expected_snapshot()
    run("mv", "tree", "moved", cwd=rw_root.path)
    assert sorted(os.listdir(rw_root.path)) == ["moved"]
    assert trees.snapshot(rw_root.path / "moved") == expected
    (rw_root.path / "into").mkdir()
    run("mv", "moved", "into/", cwd=rw_root.path)
    assert trees.snapshot(rw_root.path / "into" / "moved") == expected
    run("mv", "into/moved/src", "into/moved/deep/a", cwd=rw_root.path)  # into a sibling subtree
    assert (rw_root.path / "into/moved/deep/a/src/pkg/mod.py").read_text() == "VALUE = 42\n"
    assert sorted(os.listdir(rw_root.path / "into/moved/deep/a")) == ["b", "src"]


def test_atomic_replace_loop(rw_root: Root) -> None:
    target = rw_root.path / "config.json"
    for i in range(200):
        body = f'{{"generation": {i}, "pad": "{"x" * (i * 37 % 5000)}"}}\n'.encode()
        tmp = rw_root.path / f".config.json.tmp{i % 3}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
        assert target.read_bytes() == body, i
        assert os.stat(target).st_size == len(body), i
    assert os.listdir(rw_root.path) == ["config.json"]


LOCKER = textwrap.dedent(
    """
    import os, sys, time
    base, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    go = os.path.join(base, "go")
    deadline = time.monotonic() + 30
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.001)
    won = []
    for r in range(rounds):
        try:
            os.mkdir(os.path.join(base, f"lock{r}"))
        except FileExistsError:
            continue
        won.append(r)
        with open(os.path.join(base, f"lock{r}", "owner"), "w") as f:
            f.write(me)
    print(" ".join(map(str, won)))
    """
)


def test_mkdir_locks_race(rw_root: Root) -> None:
    rounds, workers = 20, 4
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(rw_root.path), f"w{n}", str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    time.sleep(0.3)  # let every worker start polling
    (rw_root.path / "go").touch()
    wins: dict[int, list[str]] = {r: [] for r in range(rounds)}
    for n, proc in enumerate(procs):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        for r in out.split():
            wins[int(r)].append(f"w{n}")
    assert {r: len(w) for r, w in wins.items()} == dict.fromkeys(range(rounds), 1)
    for r, (winner,) in wins.items():
        assert (rw_root.path / f"lock{r}" / "owner").read_text() == winner


@pytest.mark.mount
def test_mv_across_union_mounts(roots: Roots) -> None:
    # Two trees of one union: rename(2) cannot be atomic across them (EXDEV, never EIO), and
    # coreutils mv falls back to copy and delete, keeping modes, mtimes and symlinks.
    top, host = roots.fresh("union"), roots.fresh("union_host")
    (top / "tree").mkdir()
    trees.write_tree(top / "tree")
    assert errno_of(os.rename, top / "tree", host / "tree") == errno.EXDEV
    assert errno_of(os.rename, top / "tree" / "README.md", host / "README.md") == errno.EXDEV
    run("mv", top / "tree", host / "tree", cwd=top)
    assert os.listdir(top) == []
    assert trees.snapshot(host / "tree") == trees.expected_snapshot()
    run("mv", host / "tree", top / "back", cwd=top)
    assert os.listdir(host) == []
    assert trees.snapshot(top / "back") == trees.expected_snapshot()


APPENDER = textwrap.dedent(
    """
    import os, sys
    path, me = sys.argv[1], sys.argv[2]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for i in range(300):
        os.write(fd, f"{me} {i:05d} {'.' * 80}\\n".encode())
    os.close(fd)
    """
)


def test_concurrent_appenders(rw_root: Root) -> None:
    # Several processes appending to one log: no line lost, torn or overwritten.
    log = rw_root.path / "shared.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(log), f"p{n}"], stderr=subprocess.PIPE
        )
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    lines = log.read_text().splitlines()
    assert len(lines) == 1200
    assert sorted(lines) == sorted(f"p{n} {i:05d} {'.' * 80}" for n in range(4) for i in range(300))
    for n in range(4):  # each writer's lines in its own order
        mine = [line for line in lines if line.startswith(f"p{n} ")]
        assert mine == sorted(mine)


def test_hard_links_share_one_inode(rw_root: Root) -> None:
    """`ln`, then every name shows one file: its inode, link count, mode, bytes and pages."""
    work = rw_root.path
    (work / "a").write_text("first\n")
    run("ln", "a", "b", cwd=work)
    a, b = os.stat(work / "a"), os.stat(work / "b")
    assert (a.st_ino, a.st_nlink) == (b.st_ino, 2)
    assert (work / "a").read_text() == "first\n"  # pages cached under the one inode...
    with open(work / "b", "a") as appending:
        appending.write("second\n")
    assert (work / "a").read_text() == "first\nsecond\n"  # ...see the write through the other
    os.chmod(work / "b", 0o600)
    assert stat_mode(work / "a") == 0o600
    os.rename(work / "a", work / "b")  # two names of one file: rename(2) does nothing
    assert sorted(os.listdir(work)) == ["a", "b"]
    os.mkdir(work / "d")
    assert errno_of(os.link, work / "d", work / "e") == errno.EPERM
    assert errno_of(os.link, work / "a", work / "b") == errno.EEXIST
    with open(work / "a", "rb") as held:
        os.unlink(work / "a")
        assert os.fstat(held.fileno()).st_nlink == 1
        assert held.read() == b"first\nsecond\n"
    assert os.stat(work / "b").st_nlink == 1


def test_tar_keeps_hard_links_and_git_clones_locally(rw_root: Root, tmp_path: Path) -> None:
    """Archives with hard links extract as links; `git clone --local` links its objects."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "one").write_text("shared bytes\n")
    os.link(source / "one", source / "two")
    run("tar", "-cf", tmp_path / "links.tar", "-C", source, "one", "two", cwd=tmp_path)
    work = rw_root.path
    run("tar", "-xf", tmp_path / "links.tar", cwd=work)
    assert os.stat(work / "one").st_ino == os.stat(work / "two").st_ino
    assert (work / "two").read_text() == "shared bytes\n"
    repo = work / "repo"
    repo.mkdir()
    (repo / "f.txt").write_text("tracked\n")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "f.txt", cwd=repo)
    git("commit", "-q", "-m", "one", cwd=repo)
    git("clone", "-q", "--local", str(repo), str(work / "clone"), cwd=work)
    git("fsck", "--strict", cwd=work / "clone")
    assert (work / "clone" / "f.txt").read_text() == "tracked\n"
    linked = [
        path
        for path in (work / "clone" / ".git" / "objects").rglob("*")
        if path.is_file() and path.stat().st_nlink == 2
    ]
    assert linked  # the objects are the repository's own, linked


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777
