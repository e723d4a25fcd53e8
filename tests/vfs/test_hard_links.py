"""Hard links in the trees that hold them (vfs.MakesLinks), and EPERM or EXDEV where they cannot.

temp_fs is also compared with the kernel's tmpfs link for link in tests/vfs/test_temp_vs_tmpfs.py;
these tests pin what a differential test cannot see: notifications at every name, open files,
the wrappers' checks, and the host and copy-on-write trees.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._capabilities import make_link
from vfs._policy import Rule, policy_fs

from .eightverb import run


def test_temp_fs_names_one_file_twice() -> None:
    async def body() -> None:
        tree = vfs.temp_fs({"/a.txt": "one"})
        await tree.mkdir("/d")
        await tree.link("/a.txt", "/d/b.txt")
        assert (await tree.lstat("/a.txt")).nlink == 2
        assert (await tree.lstat("/d/b.txt")).nlink == 2
        await tree.write("/d/b.txt", "two")
        assert await tree.read("/a.txt") == "two"
        await tree.setattr("/a.txt", mode=0o600)
        assert (await tree.lstat("/d/b.txt")).mode == 0o600
        handle = await tree.open("/a.txt", write=True)
        await tree.unlink("/a.txt")  # the first name goes; the file keeps its other one
        await handle.write(3, b" and three")
        await handle.close()
        assert await tree.read("/d/b.txt") == "two and three"
        info = await tree.lstat("/d/b.txt")
        assert (info.nlink, (await tree.lstat("/a.txt")).exists) == (1, False)

    run("trio", body)


def test_temp_fs_links_symlinks_and_special_files_but_not_directories() -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        await tree.symlink("/s", "nowhere")
        await tree.mknod("/p", "fifo")
        await tree.mkdir("/d")
        await tree.link("/s", "/s2")  # the link itself, not what it points at
        await tree.link("/p", "/p2")
        assert await tree.readlink("/s2") == "nowhere"
        assert ((await tree.lstat("/s")).nlink, (await tree.lstat("/p2")).special) == (2, "fifo")
        with pytest.raises(vfs.PathError) as refused:
            await tree.link("/d", "/d2")
        assert refused.value.errno == errno.EPERM
        with pytest.raises(vfs.FileExistsError):
            await tree.link("/s", "/p")
        with pytest.raises(vfs.FileNotFoundError):
            await tree.link("/missing", "/x")
        with pytest.raises(vfs.FileNotFoundError):
            await tree.link("/s", "/no/such/dir/x")

    run("trio", body)


def test_temp_fs_reports_a_change_at_every_name() -> None:
    async def body() -> None:
        tree = vfs.temp_fs({"/a": "x"})
        seen: list[tuple[str, str]] = []
        tree.watch(lambda change: seen.append((change.path, change.kind)))
        await tree.link("/a", "/b")
        assert seen == [("/b", "entry"), ("/a", "metadata"), ("/b", "metadata")]
        seen.clear()
        handle = await tree.open("/b", write=True)
        await handle.write(0, b"y")
        assert sorted(seen) == [("/a", "content"), ("/b", "content")]
        seen.clear()
        await tree.unlink("/a")  # the other name counts one link fewer
        assert seen == [("/a", "entry"), ("/b", "metadata")]

    run("trio", body)


def test_dir_fs_links_inside_its_root_only(tmp_path: Path) -> None:
    async def body() -> None:
        root = tmp_path / "root"
        root.mkdir()
        (root / "a.txt").write_text("host")
        (tmp_path / "outside.txt").write_text("secret")
        os.symlink(tmp_path / "outside.txt", root / "escape")
        tree = vfs.dir_fs(str(root))
        await tree.link("/a.txt", "/b.txt")
        assert os.stat(root / "a.txt").st_ino == os.stat(root / "b.txt").st_ino
        assert (await tree.lstat("/b.txt")).nlink == 2
        await tree.link("/escape", "/escape2")  # the symlink is linked, never its target
        assert stat.S_ISLNK(os.lstat(root / "escape2").st_mode)
        assert os.stat(tmp_path / "outside.txt").st_nlink == 1
        with pytest.raises(vfs.FileNotFoundError):
            await tree.link("/../outside.txt", "/mine")
        with pytest.raises(vfs.FileExistsError):
            await tree.link("/a.txt", "/b.txt")
        with pytest.raises(vfs.ReadOnlyMountError):
            await vfs.dir_fs(str(root), read_only=True).link("/a.txt", "/c.txt")

    run("trio", body)


def test_cow_fs_copies_a_lower_file_up_before_linking_it(tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "a.txt").write_text("lower")
        tree = vfs.cow_fs(vfs.dir_fs(str(tmp_path), read_only=True))
        await tree.link("/a.txt", "/b.txt")
        await tree.write("/b.txt", "changed")
        assert await tree.read("/a.txt") == "changed"
        assert (await tree.lstat("/a.txt")).nlink == 2
        assert (tmp_path / "a.txt").read_text() == "lower"
        changes = [(c.path, c.kind) async for c in tree.changes()]
        assert changes == [("/a.txt", "modified"), ("/b.txt", "added")]

    run("trio", body)


def test_wrappers_pass_links_through_and_unions_refuse_them_across_mounts() -> None:
    async def body() -> None:
        scratch = vfs.temp_fs({"/a": "x"})
        log = AuditLog()
        union = vfs.union_fs({"/": vfs.temp_fs({"/top": "t"}), "/tmp": scratch})
        tree = audited_fs(policy_fs(union, [Rule("/**", "write")]), log)
        await make_link(tree, "/tmp/a", "/tmp/b")
        assert (await scratch.lstat("/b")).nlink == 2
        assert [(e.op, e.path, e.dest) for e in log] == [("link", "/tmp/a", "/tmp/b")]
        with pytest.raises(vfs.PathError) as refused:
            await make_link(tree, "/top", "/tmp/top")
        assert refused.value.errno == errno.EXDEV

    run("trio", body)


def test_a_policy_wants_both_names_writable() -> None:
    """A link to a read-only file would write it through the new name."""

    async def body() -> None:
        inner = vfs.temp_fs({"/ro/a": "x", "/rw/b": "y"})
        tree = policy_fs(inner, [Rule("/ro/**", "read"), Rule("/rw/**", "write")])
        with pytest.raises(vfs.PolicyDeniedError):
            await make_link(tree, "/ro/a", "/rw/a")
        with pytest.raises(vfs.PolicyDeniedError):
            await make_link(tree, "/rw/b", "/ro/b")
        await make_link(tree, "/rw/b", "/rw/c")
        assert (await inner.lstat("/rw/c")).nlink == 2

    run("trio", body)


def test_trees_without_links_answer_eperm(tmp_path: Path) -> None:
    async def body() -> None:
        for tree in (vfs.empty_fs(), vfs.posix_view(vfs.empty_fs())):
            with pytest.raises(vfs.PathError) as refused:
                await make_link(tree, "/a", "/b")
            assert refused.value.errno == errno.EPERM

    run("trio", body)
