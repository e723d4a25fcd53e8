"""FIFOs, sockets and device nodes in the trees that hold them (vfs.MakesNodes), and EPERM in
those that do not (vfs._capabilities.make_node)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._capabilities import make_node
from vfs._policy import Rule, policy_fs

from .eightverb import run

SPECIALS: tuple[vfs.Special, ...] = ("fifo", "socket", "char", "block")


@pytest.mark.parametrize("special", SPECIALS)
def test_temp_fs_keeps_a_special_file_as_metadata(special: vfs.Special) -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        await tree.mkdir("/d")
        await tree.mknod("/d/n", special, mode=0o640, rdev=0x0103, uid=5, gid=6)
        info = await tree.lstat("/d/n")
        assert (info.kind, info.special, info.size, info.mode) == ("file", special, 0, 0o640)
        assert (info.uid, info.gid) == (5, 6)
        assert info.rdev == (0x0103 if special in ("char", "block") else 0)
        assert [e.path for e in await _list(tree, "/d")] == ["/d/n"]
        assert await tree.read("/d/n") == ""  # it holds no bytes
        with pytest.raises(vfs.PathError) as refused:
            await tree.write("/d/n", "x")
        assert refused.value.errno == errno.EPERM
        with pytest.raises(vfs.PathError) as refused:
            await tree.open("/d/n", write=True)
        assert refused.value.errno == errno.EPERM
        with pytest.raises(vfs.PathError) as refused:
            await tree.setattr("/d/n", size=0)
        assert refused.value.errno == errno.EINVAL
        await tree.setattr("/d/n", mode=0o600)
        await tree.rename("/d/n", "/d/m")
        moved = await tree.lstat("/d/m")
        assert (moved.special, moved.mode) == (special, 0o600)
        with pytest.raises(vfs.FileExistsError):
            await tree.mknod("/d/m", "fifo")
        await tree.unlink("/d/m")
        assert not (await tree.lstat("/d/m")).exists

    run("trio", body)


def test_temp_fs_reports_a_new_node_as_an_entry_change() -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        seen: list[tuple[str, str]] = []
        tree.watch(lambda change: seen.append((change.path, change.kind)))
        await tree.mknod("/p", "fifo")
        assert ("/p", "entry") in seen

    run("trio", body)


def test_dir_fs_makes_fifos_and_sockets_on_the_host_and_emulates_devices(tmp_path: Path) -> None:
    async def body() -> None:
        tree = vfs.dir_fs(str(tmp_path))
        await tree.mknod("/p", "fifo", mode=0o604)
        await tree.mknod("/s", "socket", mode=0o600)
        assert stat.S_ISFIFO(os.lstat(tmp_path / "p").st_mode)
        assert stat.S_IMODE(os.lstat(tmp_path / "p").st_mode) == 0o604  # whatever the umask
        assert stat.S_ISSOCK(os.lstat(tmp_path / "s").st_mode)
        assert (await tree.lstat("/p")).special == "fifo"
        assert (await tree.lstat("/s")).special == "socket"
        infos = {entry.path: info for entry, info in await tree.list_info("/")}
        assert (infos["/p"].kind, infos["/p"].special) == ("file", "fifo")
        # A device node is never a device on the host: an empty file it cannot open as one.
        for device, name in (("char", "/c"), ("block", "/b")):
            await tree.mknod(name, device, mode=0o640, rdev=0x0103, uid=0, gid=0)
            host = os.lstat(tmp_path / name[1:])
            assert stat.S_ISREG(host.st_mode) and host.st_size == 0
            assert stat.S_IMODE(host.st_mode) == 0o1600
            info = await tree.lstat(name)
            assert (info.kind, info.special, info.rdev, info.mode) == (
                "file",
                device,
                0x0103,
                0o640,
            )
            assert (await tree.stat(name)).special == device
        await tree.setattr("/c", mode=0o600)  # kept in the record, not on the placeholder
        assert (await tree.lstat("/c")).mode == 0o600
        assert stat.S_IMODE(os.lstat(tmp_path / "c").st_mode) == 0o1600
        infos = {entry.path: info for entry, info in await tree.list_info("/")}
        assert (infos["/b"].special, infos["/b"].rdev) == ("block", 0x0103)
        await tree.rename("/c", "/c2")
        assert (await tree.lstat("/c2")).special == "char"
        await tree.unlink("/c2")
        assert sorted(os.listdir(tmp_path)) == ["b", "p", "s"]
        # An empty file of that mode without the record is a plain file.
        (tmp_path / "plain").touch()
        os.chmod(tmp_path / "plain", 0o1600)
        assert (await tree.lstat("/plain")).special is None
        with pytest.raises(vfs.FileExistsError):
            await tree.mknod("/p", "fifo")

    run("trio", body)


def test_read_only_dir_fs_refuses_mknod(tmp_path: Path) -> None:
    async def body() -> None:
        with pytest.raises(vfs.ReadOnlyMountError):
            await vfs.dir_fs(str(tmp_path), read_only=True).mknod("/p", "fifo")

    run("trio", body)


def test_unions_policies_and_audit_logs_pass_mknod_through() -> None:
    async def body() -> None:
        scratch = vfs.temp_fs()
        log = AuditLog()
        tree = audited_fs(
            policy_fs(vfs.union_fs({"/": vfs.temp_fs(), "/tmp": scratch}), [Rule("/**", "write")]),
            log,
        )
        await make_node(tree, "/tmp/p", "fifo", mode=0o600)
        assert (await scratch.lstat("/p")).special == "fifo"
        assert [(e.op, e.path, e.detail) for e in log] == [("mknod", "/tmp/p", "fifo")]

    run("trio", body)


def test_a_policy_that_denies_writes_denies_mknod() -> None:
    async def body() -> None:
        tree = policy_fs(vfs.temp_fs(), [Rule("/**", "read")])
        with pytest.raises(vfs.PolicyDeniedError):
            await make_node(tree, "/p", "fifo")

    run("trio", body)


@pytest.mark.parametrize("special", SPECIALS)
def test_cow_fs_makes_special_files_in_its_upper(special: vfs.Special, tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "kept.txt").write_text("lower")
        upper = vfs.temp_fs()
        tree = vfs.cow_fs(vfs.dir_fs(str(tmp_path), read_only=True), upper)
        await tree.mkdir("/new")
        await tree.mknod("/new/n", special, mode=0o640, rdev=0x0103, uid=5, gid=6)
        info = await tree.lstat("/new/n")
        assert (info.special, info.mode, info.uid, info.gid) == (special, 0o640, 5, 6)
        assert info.rdev == (0x0103 if special in ("char", "block") else 0)
        assert (await upper.lstat("/new/n")).special == special
        with pytest.raises(vfs.FileExistsError):
            await tree.mknod("/kept.txt", special)
        # In place of a deleted lower file: no change of its own, so the file reads as deleted.
        await tree.unlink("/kept.txt")
        await tree.mknod("/kept.txt", special)
        assert (await tree.lstat("/kept.txt")).special == special
        await tree.rename("/new/n", "/moved")
        assert (await tree.lstat("/moved")).special == special
        changes = [(c.path, c.kind) async for c in tree.changes()]
        assert changes == [("/kept.txt", "deleted"), ("/new", "added")]
        assert (tmp_path / "kept.txt").read_text() == "lower"

    run("trio", body)


@pytest.mark.timeout(60)  # a copy that opened the FIFO would wait for a writer forever
def test_cow_fs_copies_a_lower_fifo_up_as_a_node_without_opening_it(tmp_path: Path) -> None:
    async def body() -> None:
        os.mkfifo(tmp_path / "pipe", 0o600)  # opening it for reading would wait for a writer
        tree = vfs.cow_fs(vfs.dir_fs(str(tmp_path), read_only=True))
        await tree.setattr("/pipe", mode=0o644)
        await tree.rename("/pipe", "/renamed")
        info = await tree.lstat("/renamed")
        assert (info.special, info.mode) == ("fifo", 0o644)
        assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)  # the lower is untouched

    run("trio", body)


def test_a_durable_cow_upper_holds_device_nodes_as_its_dir_fs_does(tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "upper").mkdir()
        tree = vfs.cow_fs(vfs.temp_fs(), vfs.dir_fs(str(tmp_path / "upper")))
        await tree.mknod("/p", "fifo")
        assert stat.S_ISFIFO(os.lstat(tmp_path / "upper" / "p").st_mode)
        await tree.mknod("/d", "char", rdev=0x0103)
        assert ((await tree.lstat("/d")).special, (await tree.lstat("/d")).rdev) == ("char", 0x0103)
        assert stat.S_ISREG(os.lstat(tmp_path / "upper" / "d").st_mode)  # never a device
        assert [c async for c in tree.changes()] == []  # special files are no change

    run("trio", body)


def test_trees_without_mknod_answer_eperm(tmp_path: Path) -> None:
    async def body() -> None:
        overlay = vfs.overlay_fs([vfs.dir_fs(str(tmp_path), read_only=True)])
        union = vfs.union_fs({"/": vfs.temp_fs(), "/ro": overlay})
        for tree, path in ((overlay, "/p"), (union, "/ro/p"), (vfs.empty_fs(), "/p")):
            with pytest.raises(vfs.PathError) as refused:
                await make_node(tree, path, "fifo")
            assert refused.value.errno in (errno.EPERM, errno.EROFS), tree

    run("trio", body)


async def _list(tree: vfs.PosixFileSystem, prefix: str) -> list[vfs.DirEntry]:
    return [entry async for entry in tree.list(prefix)]
