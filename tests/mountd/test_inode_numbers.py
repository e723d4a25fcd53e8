"""The inode numbers a mount shows: a host file's own, through the default tree and across its
copy-up, so that what recorded them on the host (git's index) still matches; numbers of the
mount's own for files with no host origin (and for each name of a host file with several, which
copy-on-write serves as separate files), never one of the host's.

Real mounts of the tree ``mountd mount`` serves by default (copy-on-write over a host
directory, the repository policy, an audit log, a /tmp union; its changes in an upper
directory), compared with ``lstat`` on the host.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd._inodes import OWN_INO_BASE
from mountd._terms import FuseFeatures

from .mounting import mount_process, mount_root
from .sandbox_trees import default_mount, default_mount_recording_opens, git, git_env
from .test_host_attrs import FIELDS

pytestmark = pytest.mark.mount

SAME = FIELDS  # what a mount of a host directory shows as the host does


def project(root: Path) -> Path:
    """A host directory: files (one with two names), a subdirectory, a symlink."""
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.txt").write_text("beta\n")
    (root / "sub" / "deep" / "c.txt").write_text("gamma\n")
    (root / "one").write_text("linked\n")
    os.link(root / "one", root / "two")
    (root / "link").symlink_to("a.txt")
    (root / "tool.sh").write_text("#!/bin/sh\n")
    (root / "tool.sh").chmod(0o750)
    return root


def entries(base: Path) -> Iterator[Path]:
    """Every entry beneath ``base`` (relative), directories first."""
    for dirpath, dirnames, filenames in os.walk(base):
        for name in (*dirnames, *filenames):
            yield (Path(dirpath) / name).relative_to(base)


def attributes(path: Path) -> tuple[int, ...]:
    st = path.lstat()
    return tuple(getattr(st, field) for field in SAME)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return project(tmp_path / "host")


def mount(host: Path, tmp_path: Path, name: str = "mnt") -> object:
    (tmp_path / name).mkdir(exist_ok=True)
    upper = tmp_path / "upper"
    upper.mkdir(exist_ok=True)
    return mount_root(functools.partial(default_mount, str(host), str(upper)), tmp_path / name)


def test_this_pyfuse3_shows_numbers_apart_from_node_ids() -> None:
    assert FuseFeatures.installed().own_inode_numbers  # scripts/install patches it in


def test_every_lower_entry_shows_the_host_attributes_inode_number_included(
    host: Path, tmp_path: Path
) -> None:
    with mount(host, tmp_path) as root:  # type: ignore[attr-defined]
        names = sorted(entries(host))
        assert sorted(p for p in entries(root) if p.parts[0] != "tmp") == names
        for name in names:
            if str(name) in ("one", "two"):  # two names, two files here: see below
                assert attributes(root / name)[1:] == attributes(host / name)[1:], name
            else:
                assert attributes(root / name) == attributes(host / name), name
        with os.scandir(root / "sub") as listed:  # readdir's d_ino is the same number
            assert {e.name: e.inode() for e in listed} == {
                e.name: e.inode() for e in os.scandir(host / "sub")
            }


def test_a_lower_file_keeps_its_number_across_copy_up_rename_and_remount(
    host: Path, tmp_path: Path
) -> None:
    before = {name: (host / name).lstat().st_ino for name in ("a.txt", "sub", "sub/b.txt")}
    with mount(host, tmp_path) as root:  # type: ignore[attr-defined]
        with open(root / "a.txt", "a") as file:  # copied up: the upper holds it now
            file.write("more\n")
        (root / "sub" / "b.txt").chmod(0o600)  # a copy-up of the file and of its directory
        (root / "sub" / "deep" / "c.txt").rename(root / "moved.txt")
        assert (root / "a.txt").stat().st_ino == before["a.txt"]
        assert (root / "sub").stat().st_ino == before["sub"]
        assert (root / "sub" / "b.txt").stat().st_ino == before["sub/b.txt"]
        moved = (root / "moved.txt").stat().st_ino
        assert moved == (host / "sub" / "deep" / "c.txt").stat().st_ino
        os.link(root / "a.txt", root / "a-again")  # a further name of the copy: its number
        assert (root / "a-again").stat().st_ino == before["a.txt"]
    assert (host / "a.txt").read_text() == "alpha\n"  # the host is untouched
    with mount(host, tmp_path, "again") as root:  # the same changes, a new mount
        assert (root / "a.txt").read_text() == "alpha\nmore\n"
        assert (root / "a.txt").stat().st_ino == before["a.txt"]
        assert (root / "a-again").stat().st_ino == before["a.txt"]
        assert (root / "sub").stat().st_ino == before["sub"]
        assert (root / "sub" / "b.txt").stat().st_ino == before["sub/b.txt"]
        assert (root / "moved.txt").stat().st_ino == moved


def test_hard_links_share_one_number(host: Path, tmp_path: Path) -> None:
    """Names linked through the mount share one number; the two names of a host file are two
    files under copy-on-write (each is copied up on its own), with two numbers of the mount's."""
    with mount(host, tmp_path) as root:  # type: ignore[attr-defined]
        one, two = (root / "one").stat(), (root / "two").stat()
        assert one.st_ino != two.st_ino
        assert min(one.st_ino, two.st_ino) >= OWN_INO_BASE
        (root / "new").write_text("new\n")  # links made through the mount
        os.link(root / "new", root / "sub" / "new-too")
        os.link(root / "tool.sh", root / "tool-too")
        assert (root / "new").stat().st_ino == (root / "sub" / "new-too").stat().st_ino
        assert (root / "tool-too").stat().st_ino == (host / "tool.sh").stat().st_ino
        assert (root / "tool.sh").stat().st_nlink == 2


def test_new_entries_never_show_a_host_number(host: Path, tmp_path: Path) -> None:
    taken = {(host / name).lstat().st_ino for name in entries(host)}
    taken.add(host.stat().st_ino)
    with mount(host, tmp_path) as root:  # type: ignore[attr-defined]
        made = []
        for i in range(20):
            (root / f"f{i}").write_text(str(i))
            (root / "sub" / f"d{i}").mkdir()
            (root / "tmp" / f"t{i}").write_text(str(i))  # the in-memory /tmp
            made += [root / f"f{i}", root / "sub" / f"d{i}", root / "tmp" / f"t{i}"]
        (root / "a.txt").unlink()  # a lower name gone: a new file there is another file
        (root / "a.txt").write_text("another\n")
        made.append(root / "a.txt")
        numbers = [path.lstat().st_ino for path in made]
        assert len(set(numbers)) == len(numbers)  # distinct files, distinct numbers
        assert not taken & set(numbers)
        assert all(number >= OWN_INO_BASE for number in numbers)
        shown = {}
        for name in entries(root):  # across the whole mount: one number, one file
            st = (root / name).lstat()
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                continue  # names of one file share theirs (tested above)
            assert st.st_ino not in shown, (name, shown.get(st.st_ino))
            shown[st.st_ino] = name


def repository(root: Path, files: int) -> Path:
    """A repository of ``files`` files committed on the host, every file older than its index
    (so none is "racily clean": git would read such a file to compare it)."""
    for i in range(files):
        path = root / f"pkg{i % 10}" / f"sub{i % 7}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n")
    past = 1_700_000_000 * 10**9
    for name in entries(root):
        os.utime(root / name, ns=(past, past), follow_symlinks=False)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    assert git(root, "status", "--porcelain") == ""
    return root


def test_first_git_status_in_a_fresh_default_mount_reads_no_unchanged_file(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path / "repo", 300)
    log = tmp_path / "opened.txt"
    upper = tmp_path / "upper"
    upper.mkdir()
    (tmp_path / "mnt").mkdir()
    build = functools.partial(default_mount_recording_opens, str(repo), str(upper), str(log))
    with mount_process(build, tmp_path / "mnt") as mounted:
        done = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=mounted.path,
            env=git_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout == ""
        opened = log.read_text().split() if log.exists() else []
        assert [path for path in opened if not path.startswith("/.git/")] == []
        assert mounted.stats()["counters"].get("read", 0) <= len(set(opened))
