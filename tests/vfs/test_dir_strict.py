"""``dir_fs``'s strict mode, the view apply writes a host directory through: no symlink is
followed in any component, no mount point is crossed (a real bind mount), ``write`` never
writes through a hard link or a symlink, and no set-id bit is ever set; with ``openat2`` and with
the hand walk that replaces it."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

import vfs
from vfs._dir import DirFileSystem
from vfs._errors import UnsafePathError


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """A directory with a symlink to a subdirectory, a bind mount of another directory, and a
    file hard-linked from outside."""
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to("real")
    (root / "m").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f").write_text("elsewhere\n")
    (tmp_path / "outside").write_text("outside\n")
    os.link(tmp_path / "outside", root / "linked")
    subprocess.run(["mount", "--bind", str(elsewhere), str(root / "m")], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root / "m")], check=True)


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend="trio")


@pytest.mark.mount
@pytest.mark.parametrize("use_openat2", [True, False])
def test_strict_mode_follows_no_symlink_and_crosses_no_mount(host: Path, use_openat2: bool) -> None:
    async def body() -> None:
        tree = DirFileSystem(host, strict=True, use_openat2=use_openat2)
        assert (await tree.lstat("/link")).kind == "symlink"  # the link itself, as always
        assert not (await tree.lstat("/link/x")).exists
        calls: list[tuple[Callable[[], Awaitable[object]], str, int]] = [
            (lambda: tree.write("/link/x", "x"), "/link", errno.ELOOP),
            (lambda: tree.read("/link"), "/link", errno.ELOOP),
            (lambda: tree.mkdir("/link/d"), "/link", errno.ELOOP),
            (lambda: tree.lstat("/m"), "/m", errno.EXDEV),
            (lambda: tree.lstat("/m/f"), "/m/f", errno.EXDEV),
            (lambda: tree.write("/m/g", "g"), "/m", errno.EXDEV),
            (lambda: tree.setattr("/m", mode=0o700), "/m", errno.EXDEV),
            (lambda: tree.rename("/m", "/n"), "/m", errno.EXDEV),
        ]
        for call, path, code in calls:
            with pytest.raises(UnsafePathError) as caught:
                await call()
            assert (caught.value.path, caught.value.errno) == (path, code)
        with pytest.raises(UnsafePathError) as caught:
            await tree.write("/link/x", "x")
        assert str(caught.value) == "refused: /link goes through a symlink (this tree follows none)"
        with pytest.raises(UnsafePathError) as caught:
            await tree.lstat("/m")
        assert str(caught.value) == "refused: /m crosses a mount point (this tree crosses none)"
        assert sorted(os.listdir(host / "real")) == []
        assert sorted(os.listdir(host / "m")) == ["f"]
        assert stat.S_IMODE((host / "m").stat().st_mode) != 0o700

    run(body)


def test_a_tree_without_set_id_sets_no_set_id_bit(host: Path) -> None:
    async def body() -> None:
        tree = vfs.dir_fs(host, set_id=False)
        assert repr(tree) == f"dir_fs({str(host)!r}, set_id=False)"
        await tree.mkdir("/shared", 0o2777)
        handle = await tree.open("/suid", write=True, create=True, mode=0o4755)
        await handle.close()
        await tree.setattr("/real", mode=0o6755)
        await tree.mknod("/fifo", "fifo", mode=0o2644)
        modes = (("shared", 0o777), ("suid", 0o755), ("real", 0o755), ("fifo", 0o644))
        for name, mode in modes:
            assert stat.S_IMODE((host / name).lstat().st_mode) == mode, name
        assert (await tree.lstat("/suid")).mode == 0o755  # as the host has it
        await tree.setattr("/suid", mode=0o1755)  # the sticky bit is no set-id bit
        assert stat.S_IMODE((host / "suid").stat().st_mode) == 0o1755

    run(body)


@pytest.mark.mount
def test_strict_writes_replace_links_and_set_no_set_id_bit(host: Path, tmp_path: Path) -> None:
    async def body() -> None:
        plain = vfs.dir_fs(host)
        tree = plain.strict_view()
        assert repr(tree) == f"dir_fs({str(host)!r}, strict=True)" and not plain.strict
        (host / "linked").chmod(0o4755)
        await tree.write("/linked", "new\n")
        assert (tmp_path / "outside").read_text() == "outside\n"  # the other name keeps its bytes
        assert (host / "linked").read_text() == "new\n"
        assert (host / "linked").stat().st_nlink == 1
        assert stat.S_IMODE((host / "linked").stat().st_mode) == 0o755  # set-id bits dropped
        await tree.write("/link", "a file now\n")  # the symlink is replaced, never followed
        assert not (host / "link").is_symlink() and os.listdir(host / "real") == []
        await tree.mkdir("/shared", 0o2777)
        handle = await tree.open("/suid", write=True, create=True, mode=0o4755)
        await handle.close()
        await tree.setattr("/real", mode=0o6755)
        for name, mode in (("shared", 0o777), ("suid", 0o755), ("real", 0o755)):
            assert stat.S_IMODE((host / name).lstat().st_mode) == mode, name
        # Changes through the view reach the plain tree's cache and watchers.
        seen: list[str] = []
        plain.watch(lambda change: seen.append(change.path))
        assert (await plain.lstat("/real/new")).kind == "missing"
        await tree.write("/real/new", "n")
        assert seen == ["/real/new"]
        assert (await plain.lstat("/real/new")).kind == "file"

    run(body)


def test_apply_keeps_a_replaced_file_s_owner_and_gives_new_entries_their_directory_s(
    tmp_path: Path,
) -> None:
    assert os.geteuid() == 0  # the suite runs as root, as the daemon does
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "f").write_text("f\n")
    (tmp_path / "mine.txt").write_text("m\n")
    os.chown(tmp_path / "theirs", 1234, 5678)
    os.chown(tmp_path / "theirs" / "f", 4321, 8765)

    async def body() -> None:
        cow = vfs.cow_fs(vfs.dir_fs(tmp_path))
        await cow.write("/theirs/f", "changed\n")
        await cow.write("/theirs/new", "new\n")
        await cow.mkdir("/theirs/sub")
        await cow.symlink("/theirs/link", "f")
        await cow.apply()

    run(body)
    owners = {
        name: (st.st_uid, st.st_gid)
        for name in ("f", "new", "sub", "link")
        for st in [os.lstat(tmp_path / "theirs" / name)]
    }
    assert owners == {
        "f": (4321, 8765),
        "new": (1234, 5678),
        "sub": (1234, 5678),
        "link": (1234, 5678),
    }
    assert (tmp_path / "theirs" / "f").read_text() == "changed\n"
    assert not [p for p in (tmp_path / "theirs").iterdir() if p.name.startswith(".agentroot")]
